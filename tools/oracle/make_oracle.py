#!/usr/bin/env python3
"""make_oracle.py OUT [name ...]  (torch venv)

Writes OUT/<name>/{config.json, model.safetensors, reference.safetensors} for each tiny qwen3_5_text model in
oracle_common.SPECS. reference.safetensors holds
  input_ids            i32 [1, T]
  logits               f32 [1, T, V]       full forward (T = 70: the chunked GDN prefill spans two chunks)
  logits_decode        f32 [1, T, V]       prefill of the first T-5 tokens, then 5 single-token steps
  decode_prefill_len   i32 [1]             = T-5
  hidden_states.i      f32 [1, T, H]       i = 0..L (HF output_hidden_states: 0 = embeddings, L = post-final-norm)
"""
import json
import os
import sys

import torch
from safetensors.torch import save_file, load_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import oracle_common as oc  # noqa: E402


def main():
    out = sys.argv[1]
    names = sys.argv[2:] or list(oc.SPECS)
    torch.set_num_threads(2)
    for name in names:
        spec = oc.SPECS[name]
        cfg, m = oc.build_model(spec)
        d = os.path.join(out, name)
        os.makedirs(d, exist_ok=True)
        m.save_pretrained(d, safe_serialization=True)
        gen = os.path.join(d, "generation_config.json")
        if os.path.exists(gen):
            os.remove(gen)
        # the reference is computed from the weights as saved and reloaded
        cfg2 = oc.load_config(d)
        m2 = oc.empty_model(cfg2)
        sd = load_file(os.path.join(d, "model.safetensors"))
        if cfg2.tie_word_embeddings:
            sd.setdefault("lm_head.weight", sd["model.embed_tokens.weight"])
        m2.load_state_dict(sd, strict=True)
        if cfg2.tie_word_embeddings:
            m2.tie_weights()
        ids = oc.random_ids(spec)
        ref, err = oc.reference_outputs(cfg2, m2, ids, tol=spec.get("decode_tol", 1e-5))
        with torch.no_grad():
            chk = m(ids, use_cache=False).logits
        assert torch.equal(chk, ref["logits"]), "reloaded model differs"
        meta = {"generator": "tools/oracle/make_oracle.py", "model": name, **oc.versions(),
                "decode_vs_full_max_abs": f"{err:.3e}"}
        save_file(ref, os.path.join(d, "reference.safetensors"), metadata={"oracle": json.dumps(meta, sort_keys=True)})
        nparam = sum(p.numel() for p in m2.parameters())
        print(f"{name}: params {nparam}  decode-vs-full max abs {err:.2e}  "
              f"logits std {ref['logits'].std():.3f}  files {sorted(os.listdir(d))}")


if __name__ == "__main__":
    main()
