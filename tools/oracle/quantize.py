#!/usr/bin/env python3
"""quantize.py IN.gguf OUT.gguf FTYPE   (llama-cpp-python venv, .venv-llama)

Quantizes a GGUF with llama.cpp's own quantizer (llama_model_quantize, default params, 2 threads, no imatrix).
FTYPE is a llama_ftype name from llama.h (q8_0, q6_k, q4_k_m, iq4_xs, ...) or its integer id.
"""
import ctypes
import sys

import llama_cpp

# llama_ftype ids, from vendor/llama.cpp/include/llama.h of llama-cpp-python 0.3.36
FTYPES = {"q4_0": 2, "q4_1": 3, "q8_0": 7, "q5_0": 8, "q5_1": 9, "q2_k": 10, "q3_k_s": 11, "q3_k_m": 12,
          "q3_k_l": 13, "q4_k_s": 14, "q4_k_m": 15, "q5_k_s": 16, "q5_k_m": 17, "q6_k": 18, "iq4_nl": 25,
          "iq4_xs": 30, "bf16": 32}


def main():
    inp, out, ft = sys.argv[1:4]
    ftype = int(ft) if ft.isdigit() else FTYPES[ft.lower()]
    llama_cpp.llama_backend_init()
    p = llama_cpp.llama_model_quantize_default_params()
    p.nthread = 2
    p.ftype = ftype
    rc = llama_cpp.llama_model_quantize(inp.encode(), out.encode(), ctypes.byref(p))
    if rc != 0:
        sys.exit(f"llama_model_quantize({inp} -> {out}, ftype {ftype}) failed: {rc}")
    print(f"quantized {inp} -> {out} (ftype {ft} = {ftype})")


if __name__ == "__main__":
    main()
