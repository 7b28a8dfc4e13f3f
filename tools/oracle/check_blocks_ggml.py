#!/usr/bin/env python3
"""check_blocks_ggml.py BLOCKS.safetensors...   (llama-cpp-python venv)

Independent check of a block fixture: dequantizes every <TYPE>.bytes with ggml's own to_float
(ggml_get_type_traits(type)->to_float from the libggml-base.so that llama-cpp-python built) and compares with the
stored <TYPE>.f32 (gguf-py's dequantization). Prints the max abs difference per type; exits 1 on any mismatch.
"""
import ctypes
import os
import sys

import numpy as np
from safetensors.numpy import load_file
import llama_cpp

GGML_TYPES = {"F32": 0, "F16": 1, "Q4_0": 2, "Q4_1": 3, "Q5_0": 6, "Q5_1": 7, "Q8_0": 8, "Q2_K": 10,
              "Q3_K": 11, "Q4_K": 12, "Q5_K": 13, "Q6_K": 14, "IQ4_NL": 20, "IQ4_XS": 23, "BF16": 30}


class TypeTraits(ctypes.Structure):
    _fields_ = [("type_name", ctypes.c_char_p), ("blck_size", ctypes.c_int64),
                ("blck_size_interleave", ctypes.c_int64), ("type_size", ctypes.c_size_t),
                ("is_quantized", ctypes.c_bool), ("to_float", ctypes.c_void_p), ("from_float_ref", ctypes.c_void_p)]


TO_FLOAT = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.POINTER(ctypes.c_float), ctypes.c_int64)


def main():
    libdir = os.path.join(os.path.dirname(llama_cpp.__file__), "lib")
    lib = ctypes.CDLL(os.path.join(libdir, "libggml-base.so"))
    lib.ggml_get_type_traits.restype = ctypes.POINTER(TypeTraits)
    lib.ggml_get_type_traits.argtypes = [ctypes.c_int]
    bad = 0
    for path in sys.argv[1:]:
        t = load_file(path)
        for key in sorted(k for k in t if k.endswith(".bytes")):
            name = key[:-len(".bytes")]
            if name not in GGML_TYPES:
                print(f"{path}: {name}: no ggml id known, skipped")
                continue
            tr = lib.ggml_get_type_traits(GGML_TYPES[name]).contents
            assert tr.type_name.decode() == name.lower() or tr.type_name.decode().upper() == name, tr.type_name
            raw = np.ascontiguousarray(t[key])
            want = t[f"{name}.f32"].reshape(-1)
            n = raw.size // tr.type_size * tr.blck_size
            assert n == want.size, (name, n, want.size)
            got = np.zeros(n, dtype=np.float32)
            if name == "F32":
                got[:] = raw.view(np.float32)
            else:
                TO_FLOAT(tr.to_float)(raw.ctypes.data, got.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), n)
            same = np.array_equal(got.view(np.uint32), want.view(np.uint32))
            d = float(np.abs(got - want).max()) if n else 0.0
            print(f"{os.path.basename(path)}: {name:7s} {n:6d} values  bit-exact {same}  max abs diff {d:.3e}")
            bad += not same
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
