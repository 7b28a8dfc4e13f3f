#!/usr/bin/env python3
"""run_llamacpp.py MODELS_DIR [name ...]   (llama-cpp-python venv: llama_cpp, numpy, safetensors)

Sanity check of every fixture GGUF against llama.cpp itself. For each MODELS_DIR/<name>/model-<q>.gguf it runs,
in a child process under a timeout (llama.cpp may hang in gdb on a GGML_ASSERT):
  * full prefill of the 70 reference tokens (F32 KV cache, flash attention off, logits for all tokens,
    n_threads 2, n_batch = n_ubatch = 256);
  * the decode path: prefill of the first 65 tokens, then 5 single-token evals;
and compares with the matching exact reference (reference.safetensors for f32, reference-<q>.safetensors
otherwise): rel err = ||a - b|| / ||b|| over all logits, max abs err, argmax agreement; and, for scale, the
prefill vs the fp32 reference.safetensors.
Results go to MODELS_DIR/llamacpp.json.

Child mode: run_llamacpp.py --one GGUF REF.safetensors  -> prints one JSON line.
"""
import json
import os
import subprocess
import sys

import numpy as np
from safetensors.numpy import load_file

TIMEOUT_S = 300


def compare(got, want):
    d = got - want
    return {"rel_err": float(np.linalg.norm(d) / np.linalg.norm(want)),
            "max_abs_err": float(np.abs(d).max()),
            "argmax_agree": float((got.argmax(-1) == want.argmax(-1)).mean())}


def one(gguf, ref_path):
    import llama_cpp
    ref = load_file(ref_path)
    ids = [int(i) for i in ref["input_ids"][0]]
    pre = int(ref["decode_prefill_len"][0])
    kw = dict(model_path=gguf, n_ctx=256, n_batch=256, n_ubatch=256, logits_all=True, verbose=False,
              type_k=0, type_v=0, flash_attn=False, n_threads=2, n_threads_batch=2, seed=0)
    llm = llama_cpp.Llama(**kw)
    llm.eval(ids)
    full = np.array(llm.scores[:len(ids)], dtype=np.float32)
    del llm
    llm = llama_cpp.Llama(**kw)
    llm.eval(ids[:pre])
    for t in ids[pre:]:
        llm.eval([t])
    dec = np.array(llm.scores[:len(ids)], dtype=np.float32)
    del llm
    fp32 = load_file(os.path.join(os.path.dirname(ref_path), "reference.safetensors"))
    res = {"prefill": compare(full, ref["logits"][0]), "decode": compare(dec, ref["logits_decode"][0]),
           "prefill_vs_fp32_reference": compare(full, fp32["logits"][0]),
           "llamacpp_decode_vs_full_max_abs": float(np.abs(dec - full).max()),
           "llama_cpp_python": llama_cpp.__version__}
    print(json.dumps(res))


def main():
    if sys.argv[1] == "--one":
        return one(sys.argv[2], sys.argv[3])
    root = sys.argv[1]
    names = sys.argv[2:] or sorted(n for n in os.listdir(root) if os.path.isdir(os.path.join(root, n)))
    out_path = os.path.join(root, "llamacpp.json")
    results = {}
    if os.path.exists(out_path):
        with open(out_path) as f:
            results = json.load(f)
    for name in names:
        d = os.path.join(root, name)
        ggufs = sorted(f for f in os.listdir(d) if f.startswith("model-") and f.endswith(".gguf"))
        results[name] = {}
        for fn in ggufs:
            q = fn[len("model-"):-len(".gguf")]
            ref = os.path.join(d, "reference.safetensors" if q == "f32" else f"reference-{q}.safetensors")
            try:
                p = subprocess.run([sys.executable, __file__, "--one", os.path.join(d, fn), ref],
                                   capture_output=True, text=True, timeout=TIMEOUT_S)
                if p.returncode != 0:
                    r = {"error": f"exit {p.returncode}: {p.stderr[-2000:]}"}
                else:
                    r = json.loads(p.stdout.strip().splitlines()[-1])
            except subprocess.TimeoutExpired:
                r = {"error": f"timeout after {TIMEOUT_S}s"}
            r["reference"] = os.path.basename(ref)
            results[name][fn] = r
            if "error" in r:
                print(f"{name}/{fn}: ERROR {r['error']}", flush=True)
            else:
                print(f"{name}/{fn}: prefill rel {r['prefill']['rel_err']:.2e} max {r['prefill']['max_abs_err']:.2e} "
                      f"argmax {r['prefill']['argmax_agree']:.3f} | decode rel {r['decode']['rel_err']:.2e} "
                      f"max {r['decode']['max_abs_err']:.2e}", flush=True)
    with open(out_path, "w") as f:
        json.dump(results, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
