"""Shared pieces of the deltaspec oracle scripts (run with the torch venv, .venv-oracle).

* SPECS: the tiny qwen3_5_text fixture models.
* build_model(): the HF model with our (deliberately non-HF) random initialisation.
* reference_outputs(): the HF forward we record (full prefill + prefill/decode path).
* gguf_to_hf_state_dict(): dequantise a llama.cpp qwen35 GGUF with gguf-py and undo every converter transform
  (norm +1, A_log -> -exp, conv squeeze, V-head reorder, renames), giving back an HF state dict.
"""
import json
import math
import os

import numpy as np
import torch

T = 70              # > 64: the chunked GDN prefill spans two chunks
N_DECODE = 5        # decode path: prefill T - N_DECODE tokens, then N_DECODE single steps
PREFILL = T - N_DECODE

# Tiny qwen3_5_text models. mrope_section must sum to rot/2 (llama.cpp asserts it) AND, with the interleaved
# layout, cover every frequency i < rot/2: i%3==k needs i < 3*sec[k]. An uncovered slot takes the T position in HF
# but the 4th ("e") position stream in ggml's IMROPE, which is 0 for text, so HF and llama.cpp would disagree
# (seen with [4, 4, 0] at rot 16: rel err 3.7e-3). The real [11, 11, 10] at rot 64 covers all 32.
# llama.cpp's qwen35 loader also assumes dv == dk (head_v_dim = ssm.state_size), so every model has dk == dv.
SPECS = {
    # hidden 64, 3 GDN + 1 full, GQA 2:1, GDN r = 2, dk = dv.
    "tiny-a": dict(
        seed=1, vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=16,
        linear_conv_kernel_dim=4, rms_norm_eps=1e-6, rope_theta=10000.0, partial_rotary_factor=0.25,
        mrope_section=[1, 1, 0], tie_word_embeddings=False),
    # quant-friendly: every weight row that can be is 256 wide (K-quants / IQ4_XS need 256-multiples);
    # ssm_out rows are value_dim = 192 and fall back to a 32-block type. GQA 4:1, GDN r = 3.
    "tiny-b": dict(
        seed=2, vocab_size=256, hidden_size=256, intermediate_size=256, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=1, head_dim=64,
        linear_num_key_heads=2, linear_num_value_heads=6, linear_key_head_dim=32, linear_value_head_dim=32,
        linear_conv_kernel_dim=4, rms_norm_eps=1e-6, rope_theta=1e6, partial_rotary_factor=0.25,
        mrope_section=[3, 3, 2], tie_word_embeddings=False),
    # 8 layers (full attention at 3 and 7), GQA 3:1, tied embeddings, vocab not a power of two,
    # mrope_section with all three streams in use (like the real [11, 11, 10]).
    "tiny-c": dict(
        seed=3, vocab_size=300, hidden_size=96, intermediate_size=160, num_hidden_layers=8,
        num_attention_heads=6, num_key_value_heads=2, head_dim=32,
        linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=32, linear_value_head_dim=32,
        linear_conv_kernel_dim=4, rms_norm_eps=1e-6, rope_theta=10000.0, partial_rotary_factor=0.25,
        mrope_section=[2, 1, 1], tie_word_embeddings=True,
        # tied logits have std ~11: HF's own chunked-vs-recurrent fp32 difference is ~1.7e-5 abs (1.6e-6 relative)
        decode_tol=5e-5),
}


def make_config(spec):
    from transformers.models.qwen3_5 import Qwen3_5TextConfig
    kw = {k: v for k, v in spec.items()
          if k not in ("seed", "rope_theta", "partial_rotary_factor", "mrope_section", "decode_tol")}
    rot = int(spec["head_dim"] * spec["partial_rotary_factor"])
    sec = spec["mrope_section"]
    assert sum(sec) == rot // 2, (sec, rot)
    assert all(i < 3 * sec[i % 3] for i in range(rot // 2)), f"mrope_section {sec} leaves frequencies uncovered"
    assert spec["linear_key_head_dim"] == spec["linear_value_head_dim"], "llama.cpp qwen35 needs dk == dv"
    kw["rope_parameters"] = {"rope_type": "default", "rope_theta": spec["rope_theta"],
                             "partial_rotary_factor": spec["partial_rotary_factor"],
                             "mrope_section": list(spec["mrope_section"]), "mrope_interleaved": True}
    kw["full_attention_interval"] = 4
    kw["max_position_embeddings"] = 512
    cfg = Qwen3_5TextConfig(**kw)
    cfg._attn_implementation = "eager"
    return cfg


def load_config(model_dir):
    from transformers.models.qwen3_5 import Qwen3_5TextConfig
    cfg = Qwen3_5TextConfig.from_pretrained(model_dir)
    cfg._attn_implementation = "eager"
    return cfg


def empty_model(cfg):
    from transformers.models.qwen3_5 import Qwen3_5ForCausalLM
    torch.manual_seed(0)
    m = Qwen3_5ForCausalLM(cfg).eval().to(torch.float32)
    return m


def build_model(spec):
    """HF model with a bug-revealing init: N(0, (0.6/sqrt(fan_in))^2) weights, every 1-D parameter perturbed,
    A_log = log U(0.01, 16), dt_bias = 1 + N(0, 0.3^2)."""
    cfg = make_config(spec)
    m = empty_model(cfg)
    g = torch.Generator().manual_seed(spec["seed"])
    H = spec["hidden_size"]
    with torch.no_grad():
        for name, p in m.named_parameters():
            def randn(*shape):
                return torch.randn(*shape, generator=g, dtype=torch.float32)
            if name.endswith("embed_tokens.weight"):
                # unit-RMS embeddings, tied or not. (Tied with small embeddings, 2/sqrt(H), the layer outputs
                # dominate the residual and the model got so sensitive that HF vs llama.cpp f32 was 8e-6 rel,
                # max 2.8e-4, from summation order alone; with std 1 it is 4e-7. Tied logits then have std ~11.)
                std = 1.0
                p.copy_(std * randn(*p.shape))
            elif p.ndim >= 2:
                fan_in = int(np.prod(p.shape[1:]))
                p.copy_((0.6 / math.sqrt(fan_in)) * randn(*p.shape))
            elif name.endswith("A_log"):
                u = 0.01 + (16.0 - 0.01) * torch.rand(p.shape, generator=g)
                p.copy_(torch.log(u))
            elif name.endswith("dt_bias"):
                p.copy_(1.0 + 0.3 * randn(*p.shape))
            elif name.endswith("linear_attn.norm.weight"):      # plain gated norm, used as is (init 1)
                p.copy_(1.0 + 0.1 * randn(*p.shape))
            elif name.endswith("norm.weight"):                  # zero-centred: effective scale 1 + w
                p.copy_(0.1 * randn(*p.shape))
            else:
                raise ValueError(f"unexpected 1-D parameter {name}")
    return cfg, m


def random_ids(spec):
    g = torch.Generator().manual_seed(1000 + spec["seed"])
    return torch.randint(0, spec["vocab_size"], (1, T), generator=g)


@torch.no_grad()
def reference_outputs(cfg, m, ids, hidden=True, tol=1e-5):
    """Full forward (chunked GDN prefill) and the prefill(T-5) + 5 single-step decode path."""
    from transformers import DynamicCache
    full = m(ids, output_hidden_states=hidden, use_cache=False)
    cache = DynamicCache(config=cfg)
    pre = m(ids[:, :PREFILL], past_key_values=cache, use_cache=True).logits
    steps = [m(ids[:, t:t + 1], past_key_values=cache, use_cache=True).logits for t in range(PREFILL, T)]
    dec = torch.cat([pre] + steps, 1)
    err = (dec - full.logits).abs().max().item()
    assert err < tol, f"decode path differs from full forward: {err}"
    out = {"input_ids": ids.to(torch.int32).contiguous(),
           "logits": full.logits.float().contiguous(),
           "logits_decode": dec.float().contiguous(),
           "decode_prefill_len": torch.tensor([PREFILL], dtype=torch.int32)}
    if hidden:
        out.update({f"hidden_states.{i}": h.float().contiguous() for i, h in enumerate(full.hidden_states)})
    return out, err


def versions():
    import transformers
    return {"torch": torch.__version__, "transformers": transformers.__version__}


# ----------------------------------------------------------------------------------------------------------
# GGUF (llama.cpp converter output, arch qwen35) -> HF state dict
# ----------------------------------------------------------------------------------------------------------

def _unreorder_v(x, dim, nk, r, hd):
    """Inverse of the converter's _reorder_v_heads: tiled [r, nk, hd] -> grouped [nk, r, hd] along `dim`."""
    shape = list(x.shape)
    dim = dim % len(shape)
    x = x.reshape(*shape[:dim], r, nk, hd, *shape[dim + 1:])
    x = x.transpose(dim, dim + 1)
    return x.contiguous().reshape(*shape)


def read_gguf(path):
    """-> (dict name -> (torch f32 tensor in PyTorch order, ggml type name), reader)."""
    import gguf
    rd = gguf.GGUFReader(path)
    out = {}
    for t in rd.tensors:
        arr = gguf.quants.dequantize(t.data, t.tensor_type)
        shape = [int(s) for s in reversed(list(t.shape))]      # ne reversed = torch order
        arr = np.asarray(arr, dtype=np.float32).reshape(shape)
        out[t.name] = (torch.from_numpy(arr.copy()), t.tensor_type.name)
    return out, rd


def gguf_to_hf_state_dict(path, cfg):
    tens, _ = read_gguf(path)
    nk, nv = cfg.linear_num_key_heads, cfg.linear_num_value_heads
    dk, dv = cfg.linear_key_head_dim, cfg.linear_value_head_dim
    r = nv // nk
    sd = {}
    types = {}

    def v_rows(x, hd):
        return _unreorder_v(x, 0, nk, r, hd) if r > 1 else x

    for name, (x, ty) in tens.items():
        types[name] = ty
        if name == "token_embd.weight":
            sd["model.embed_tokens.weight"] = x
            continue
        if name == "output.weight":
            sd["lm_head.weight"] = x
            continue
        if name == "output_norm.weight":
            sd["model.norm.weight"] = x - 1.0
            continue
        assert name.startswith("blk."), name
        _, n, rest = name.split(".", 2)
        p = f"model.layers.{n}."
        if rest == "attn_norm.weight":
            sd[p + "input_layernorm.weight"] = x - 1.0
        elif rest == "post_attention_norm.weight":
            sd[p + "post_attention_layernorm.weight"] = x - 1.0
        elif rest in ("attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_output.weight"):
            hf = {"attn_q": "q_proj", "attn_k": "k_proj", "attn_v": "v_proj", "attn_output": "o_proj"}
            sd[p + f"self_attn.{hf[rest.split('.')[0]]}.weight"] = x
        elif rest in ("attn_q_norm.weight", "attn_k_norm.weight"):
            sd[p + f"self_attn.{rest.split('.')[0][5:]}.weight"] = x - 1.0
        elif rest == "attn_qkv.weight":
            qk = 2 * nk * dk
            sd[p + "linear_attn.in_proj_qkv.weight"] = torch.cat([x[:qk], v_rows(x[qk:], dv)], 0)
        elif rest == "attn_gate.weight":
            sd[p + "linear_attn.in_proj_z.weight"] = v_rows(x, dv)
        elif rest == "ssm_beta.weight":
            sd[p + "linear_attn.in_proj_b.weight"] = v_rows(x, 1)
        elif rest == "ssm_alpha.weight":
            sd[p + "linear_attn.in_proj_a.weight"] = v_rows(x, 1)
        elif rest == "ssm_conv1d.weight":                       # [C, K] -> [C, 1, K]
            qk = 2 * nk * dk
            w = torch.cat([x[:qk], v_rows(x[qk:], dv)], 0)
            sd[p + "linear_attn.conv1d.weight"] = w.unsqueeze(1)
        elif rest == "ssm_dt.bias":
            sd[p + "linear_attn.dt_bias"] = v_rows(x, 1)
        elif rest == "ssm_a":
            sd[p + "linear_attn.A_log"] = torch.log(-v_rows(x, 1))
        elif rest == "ssm_norm.weight":
            sd[p + "linear_attn.norm.weight"] = x
        elif rest == "ssm_out.weight":
            sd[p + "linear_attn.out_proj.weight"] = _unreorder_v(x, 1, nk, r, dv) if r > 1 else x
        elif rest in ("ffn_gate.weight", "ffn_up.weight", "ffn_down.weight"):
            sd[p + f"mlp.{rest.split('.')[0][4:]}_proj.weight"] = x
        else:
            raise KeyError(f"unmapped GGUF tensor {name}")
    if cfg.tie_word_embeddings:
        assert "lm_head.weight" not in sd
        sd["lm_head.weight"] = sd["model.embed_tokens.weight"]
    return sd, types


def model_from_gguf(path, cfg):
    sd, types = gguf_to_hf_state_dict(path, cfg)
    m = empty_model(cfg)
    want = dict(m.state_dict())
    missing = set(want) - set(sd)
    extra = set(sd) - set(want)
    assert not missing and not extra, (sorted(missing), sorted(extra))
    for k, v in sd.items():
        assert tuple(want[k].shape) == tuple(v.shape), (k, tuple(want[k].shape), tuple(v.shape))
    m.load_state_dict(sd, strict=True)
    if cfg.tie_word_embeddings:
        m.tie_weights()
    return m, types


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=1, sort_keys=True)
        f.write("\n")


def read_json(path, default=None):
    if not os.path.exists(path):
        return default
    with open(path) as f:
        return json.load(f)
