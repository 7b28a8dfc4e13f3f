#!/usr/bin/env python3
"""make_gguf_refs.py MODELS_DIR [name ...]   (torch venv, PyPI gguf 0.19.0)

Exact HF references for the GGUF files of each fixture model:
  for every MODELS_DIR/<name>/model-<q>.gguf: dequantise every tensor with gguf-py, undo the converter's
  transforms (oracle_common.gguf_to_hf_state_dict), load into the HF model and run the same forward as
  make_oracle.py. For q != f32 this writes reference-<q>.safetensors (input_ids, logits, logits_decode,
  decode_prefill_len). model-f32.gguf is the check of the undo itself: its weights must equal model.safetensors
  up to the +1/-1 and exp/log round trips, and its logits must reproduce reference.safetensors.

Also writes MODELS_DIR/manifest.json: per file, the ggml type of every tensor and the agreement numbers.
"""
import json
import os
import sys

import torch
from safetensors.torch import load_file, save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import oracle_common as oc  # noqa: E402


def rel(a, b):
    return ((a - b).norm() / b.norm()).item()


def main():
    root = sys.argv[1]
    names = sys.argv[2:] or sorted(n for n in oc.SPECS if os.path.isdir(os.path.join(root, n)))
    torch.set_num_threads(2)
    man_path = os.path.join(root, "manifest.json")
    manifest = oc.read_json(man_path, {})
    for name in names:
        d = os.path.join(root, name)
        cfg = oc.load_config(d)
        ref = load_file(os.path.join(d, "reference.safetensors"))
        hf = load_file(os.path.join(d, "model.safetensors"))
        ids = ref["input_ids"].long()
        entry = manifest.setdefault(name, {})
        entry["config"] = {k: oc.SPECS[name][k] for k in oc.SPECS[name] if k not in ("seed", "decode_tol")}
        files = entry.setdefault("files", {})
        ggufs = sorted(f for f in os.listdir(d) if f.startswith("model-") and f.endswith(".gguf"))
        ggufs.sort(key=lambda f: f != "model-f32.gguf")            # f32 first: it validates the undo
        for fn in ggufs:
            q = fn[len("model-"):-len(".gguf")]
            m, types = oc.model_from_gguf(os.path.join(d, fn), cfg)
            counts = {}
            for t in types.values():
                counts[t] = counts.get(t, 0) + 1
            info = {"tensor_types": types, "type_counts": counts}
            sd = m.state_dict()
            wdiff = max((sd[k] - v).abs().max().item() for k, v in hf.items())
            info["max_abs_weight_diff_vs_hf"] = wdiff
            out, err = oc.reference_outputs(cfg, m, ids, hidden=False,
                                             tol=oc.SPECS[name].get("decode_tol", 1e-5))
            info["hf_decode_vs_full_max_abs"] = err
            info["logits_rel_err_vs_fp32_reference"] = rel(out["logits"], ref["logits"])
            info["logits_max_abs_vs_fp32_reference"] = (out["logits"] - ref["logits"]).abs().max().item()
            info["argmax_agree_vs_fp32_reference"] = (
                (out["logits"].argmax(-1) == ref["logits"].argmax(-1)).float().mean().item())
            if q == "f32":
                assert wdiff < 1e-5, f"{name}/{fn}: undo of converter transforms is wrong ({wdiff})"
                assert info["logits_max_abs_vs_fp32_reference"] < 1e-5, info
                info["reference"] = "reference.safetensors"
            else:
                meta = {"generator": "tools/oracle/make_gguf_refs.py", "model": name, "gguf": fn,
                        **oc.versions(), "decode_vs_full_max_abs": f"{err:.3e}"}
                save_file(out, os.path.join(d, f"reference-{q}.safetensors"), metadata={"oracle": json.dumps(meta, sort_keys=True)})
                info["reference"] = f"reference-{q}.safetensors"
            files[fn] = {**files.get(fn, {}), **info}
            print(f"{name}/{fn}: types {counts}  weight diff vs HF {wdiff:.2e}  "
                  f"logits rel err vs fp32 ref {info['logits_rel_err_vs_fp32_reference']:.2e}  "
                  f"argmax agree {info['argmax_agree_vs_fp32_reference']:.3f}  decode-vs-full {err:.1e}",
                  flush=True)
        for fn in list(files):
            if fn not in ggufs:
                del files[fn]
    oc.write_json(man_path, manifest)


if __name__ == "__main__":
    main()
