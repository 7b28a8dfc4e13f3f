#!/usr/bin/env python3
"""make_drafter_fixture.py [name ...]  (torch venv: .venv-oracle, transformers 5.23)

Tiny random DFlash drafters for the tiny target fixtures, saved in z-lab's on-disk layout
(config.json + model.safetensors, names fc.weight / hidden_norm.weight / layers.N.* / norm.weight)
under tests/fixtures/drafters/<name>/, with HF reference outputs in reference.safetensors:

  tokens        i32 [n]            the token sequence t[0..n)
  context       f32 [n-1, k*H]     cat(hidden_states[lid+1] for lid in target_layer_ids) of the target over t[0..n-1)
  draft_logits  f32 [B-1, V]       target.lm_head(drafter(block=[t[n-1], MASK x (B-1)], ctx)[1:])
  draft_tokens  i32 [B-1]          argmax of draft_logits

The drafter is transformers' MuseGlimmerAssistantModel (same forward as z-lab's DFlashDraftModel after renaming
encoder.fc -> fc and encoder.output_norm_enc -> hidden_norm), eager attention, positions 0 .. n-1+B-1.
Metadata records the sha256 of the target's model.safetensors the reference was computed with.
"""
import hashlib
import json
import math
import os
import sys

import torch
from safetensors.torch import save_file, load_file

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
MODELS = os.path.join(ROOT, "tests", "fixtures", "models")
OUT = os.path.join(ROOT, "tests", "fixtures", "drafters")

# target fixture, drafter geometry, config style, weight dtype on disk
SPECS = {
    # transformers>=5 style config: nested rope_parameters, dflash_config{mask_token_id, target_layer_ids}.
    "dflash-a": dict(target="tiny-a", seed=11, n_tokens=12, layers=2, heads=4, kv_heads=2, head_dim=16,
                     ffn=96, block=4, ids=[0, 2], mask=250, theta=5e5, layer_types=None, window=None,
                     style="v5", dtype=torch.float32),
    # older style (top-level rope_theta / mask_token_id / target_layer_ids / block_size), bf16 weights,
    # nh*hd != hidden, GQA 4:1, a bidirectional sliding-window layer (window 3 < context).
    "dflash-b": dict(target="tiny-b", seed=12, n_tokens=14, layers=2, heads=4, kv_heads=1, head_dim=32,
                     ffn=128, block=8, ids=[1, 2], mask=255, theta=1e6,
                     layer_types=["sliding_attention", "full_attention"], window=3,
                     style="old", dtype=torch.bfloat16),
    # YaRN rope (transformers>=5 rope_parameters, non-default betas: ramp over dims 1..6 of 16), three target
    # layers incl. the target's last (HF gives its final-normed state).
    "dflash-c": dict(target="tiny-a", seed=13, n_tokens=16, layers=2, heads=4, kv_heads=2, head_dim=32,
                     ffn=160, block=6, ids=[0, 2, 3], mask=251, theta=1e4, layer_types=None, window=None,
                     style="v5", dtype=torch.float32,
                     rope={"rope_type": "yarn", "rope_theta": 1e4, "factor": 8.0,
                           "original_max_position_embeddings": 256, "beta_fast": 16.0, "beta_slow": 2.0},
                     max_pos=2048),
}


def rope_parameters(spec):
    return spec.get("rope") or {"rope_type": "default", "rope_theta": spec["theta"]}


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        h.update(f.read())
    return h.hexdigest()


def load_target(name):
    from transformers.models.qwen3_5 import Qwen3_5ForCausalLM, Qwen3_5TextConfig
    d = os.path.join(MODELS, name)
    cfg = Qwen3_5TextConfig.from_pretrained(d)
    cfg._attn_implementation = "eager"
    m = Qwen3_5ForCausalLM(cfg).eval()
    sd = load_file(os.path.join(d, "model.safetensors"))
    if cfg.tie_word_embeddings:
        sd.setdefault("lm_head.weight", sd["model.embed_tokens.weight"])
    m.load_state_dict(sd, strict=True)
    if cfg.tie_word_embeddings:
        m.tie_weights()
    return cfg, m, sha256(os.path.join(d, "model.safetensors"))


def build_drafter(spec, tcfg):
    from transformers.models.muse_glimmer_assistant import MuseGlimmerAssistantConfig, MuseGlimmerAssistantModel
    n = spec["layers"]
    lt = spec["layer_types"] or ["full_attention"] * n
    cfg = MuseGlimmerAssistantConfig(
        hidden_size=tcfg.hidden_size, intermediate_size=spec["ffn"], num_hidden_layers=n,
        num_attention_heads=spec["heads"], num_key_value_heads=spec["kv_heads"], head_dim=spec["head_dim"],
        rms_norm_eps=1e-6, max_position_embeddings=spec.get("max_pos", 512),
        rope_parameters=rope_parameters(spec), layer_types=lt,
        block_size=spec["block"], mask_token_id=spec["mask"], target_layer_ids=spec["ids"],
        sliding_window=spec["window"] or 4096)
    cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    mg = MuseGlimmerAssistantModel(cfg).eval()
    g = torch.Generator().manual_seed(spec["seed"])
    with torch.no_grad():
        for name, p in sorted(mg.named_parameters()):
            if p.ndim >= 2:
                p.copy_(0.6 / math.sqrt(p.shape[1]) * torch.randn(*p.shape, generator=g))
            else:
                # plain (w * x) norms: around 1 but clearly not 1, so a "1 + w" bug or a missing norm shows
                # q/k norms larger: sharper, position-dependent attention, so the mask rows differ
                base = 2.5 if ("q_norm" in name or "k_norm" in name) else 1.0
                p.copy_(base + 0.3 * torch.randn(*p.shape, generator=g))
            # the weights as stored on disk
            p.copy_(p.to(spec["dtype"]).to(torch.float32))
    return cfg, mg


def zlab_config(spec, tcfg):
    n = spec["layers"]
    c = {
        "architectures": ["DFlashDraftModel"], "model_type": "qwen3",
        "hidden_size": tcfg.hidden_size, "intermediate_size": spec["ffn"], "num_hidden_layers": n,
        "num_attention_heads": spec["heads"], "num_key_value_heads": spec["kv_heads"],
        "head_dim": spec["head_dim"], "rms_norm_eps": 1e-6, "max_position_embeddings": spec.get("max_pos", 512),
        "vocab_size": tcfg.vocab_size, "hidden_act": "silu", "attention_bias": False,
        "num_target_layers": tcfg.num_hidden_layers, "tie_word_embeddings": False,
        "torch_dtype": "bfloat16" if spec["dtype"] == torch.bfloat16 else "float32",
    }
    if spec["layer_types"]:
        c["layer_types"] = spec["layer_types"]
        c["sliding_window"] = spec["window"]
        c["use_sliding_window"] = True
    if spec["style"] == "v5":
        c["rope_parameters"] = rope_parameters(spec)
        c["block_size"] = spec["block"]
        c["dflash_config"] = {"mask_token_id": spec["mask"], "target_layer_ids": spec["ids"]}
    else:
        c["rope_theta"] = spec["theta"]
        c["rope_scaling"] = None
        c["block_size"] = spec["block"]
        c["mask_token_id"] = spec["mask"]
        c["target_layer_ids"] = spec["ids"]
    return c


def main():
    names = sys.argv[1:] or list(SPECS)
    torch.set_num_threads(2)
    from transformers.cache_utils import DFlashCache
    for name in names:
        spec = SPECS[name]
        tcfg, target, tsha = load_target(spec["target"])
        cfg, mg = build_drafter(spec, tcfg)
        g = torch.Generator().manual_seed(100 + spec["seed"])
        n, B = spec["n_tokens"], spec["block"]
        tokens = torch.randint(0, tcfg.vocab_size, (n,), generator=g)
        with torch.no_grad():
            out = target(tokens[None, : n - 1], output_hidden_states=True, use_cache=False)
            hs = out.hidden_states
            ctx = torch.cat([hs[lid + 1] for lid in spec["ids"]], dim=-1)          # [1, n-1, k*H]
            block = torch.tensor([[int(tokens[n - 1])] + [spec["mask"]] * (B - 1)])
            cache = DFlashCache(config=cfg)
            cache.set_previous_accepted_tokens(ctx.shape[1])
            h = mg(noise_embeds=target.model.embed_tokens(block), context_hidden_states=ctx,
                   position_ids=torch.arange(ctx.shape[1] + B)[None], past_key_values=cache).last_hidden_state
            logits = target.lm_head(h[:, 1:])[0].float().contiguous()
            # the same without a cache object (plain forward; its mask ignores sliding windows) must agree
            if spec["layer_types"] is None:
              h2 = mg(noise_embeds=target.model.embed_tokens(block), context_hidden_states=ctx,
                      position_ids=torch.arange(ctx.shape[1] + B)[None]).last_hidden_state
              assert torch.allclose(h, h2, atol=1e-6), (h - h2).abs().max()

        d = os.path.join(OUT, name)
        os.makedirs(d, exist_ok=True)
        sd = {}
        for k, v in mg.state_dict().items():
            k = {"encoder.fc.weight": "fc.weight", "encoder.output_norm_enc.weight": "hidden_norm.weight"}.get(k, k)
            sd[k] = v.to(spec["dtype"]).contiguous()
        save_file(sd, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(zlab_config(spec, tcfg), f, indent=2)
            f.write("\n")
        import transformers
        meta = {"generator": "tools/oracle/make_drafter_fixture.py", "drafter": name, "target": spec["target"],
                "target_sha256": tsha, "torch": torch.__version__, "transformers": transformers.__version__}
        ref = {"tokens": tokens.to(torch.int32), "context": ctx[0].float().contiguous(),
               "draft_logits": logits, "draft_tokens": logits.argmax(-1).to(torch.int32)}
        save_file(ref, os.path.join(d, "reference.safetensors"), metadata=meta)
        print(f"{name}: target {spec['target']} ctx {tuple(ctx.shape)} logits {tuple(logits.shape)} "
              f"std {logits.std():.3f} top2 {logits.topk(2, -1).values.tolist()} tokens {ref['draft_tokens'].tolist()} "
              f"files {sorted(os.listdir(d))}")


if __name__ == "__main__":
    main()
