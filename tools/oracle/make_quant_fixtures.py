#!/usr/bin/env python3
"""Builds tests/fixtures/quant/gguf_py_blocks.safetensors: quantized blocks and their
dequantization by gguf-py (the `gguf` package's numpy reference), for
tests/quant_vs_gguf_py.rs.

For every type the Rust side dequantizes it stores
  <TYPE>.bytes  u8   blocks: gguf-py's own quantization of random data (where gguf-py
                     has a quantizer), then random-but-valid raw blocks (random finite
                     f16 scales in a sane range, plus a few edge scales; random quants)
  <TYPE>.f32    f32  gguf.quants.dequantize(<TYPE>.bytes)
and for the types gguf-py can quantize
  <TYPE>.quant_src    f32  the input
  <TYPE>.quant_bytes  u8   gguf.quants.quantize(quant_src)  (Q8_0 is bit-exact with
                           llama.cpp's quantize_row_q8_0_ref, per gguf-py)

Usage: python3 -m venv /tmp/ggq && /tmp/ggq/bin/pip install gguf==0.19.0 numpy safetensors
       /tmp/ggq/bin/python tools/oracle/make_quant_fixtures.py
Deterministic (fixed seed): rerunning reproduces the committed tensors (the header's
JSON key order may differ between runs).
"""

from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import GGML_QUANT_SIZES
from gguf.quants import dequantize, quantize
from safetensors.numpy import save_file

OUT = Path(__file__).resolve().parents[2] / "tests/fixtures/quant/gguf_py_blocks.safetensors"

# Byte offsets of the f16 scale fields of each block type (d, dmin, m ...).
F16_FIELDS = {
    T.Q4_0: [0],
    T.Q4_1: [0, 2],
    T.Q5_0: [0],
    T.Q5_1: [0, 2],
    T.Q8_0: [0],
    T.Q4_K: [0, 2],
    T.Q5_K: [0, 2],
    T.Q6_K: [208],
    T.IQ4_NL: [0],
    T.IQ4_XS: [0],
}
QUANTIZABLE = [T.F32, T.F16, T.BF16, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0]
# Random raw blocks per type: enough to hit every nibble/scale pattern, small files.
RAW_ELEMS = {32: 2048, 256: 4096, 1: 1024}

rng = np.random.default_rng(20240607)


def random_f16(n: int) -> np.ndarray:
    """Finite f16 scales: random sign and magnitude 1e-4..10, then edge values."""
    mag = 10.0 ** rng.uniform(-4, 1, size=n)
    sign = rng.choice([-1.0, 1.0], size=n)
    v = (mag * sign).astype(np.float16)
    edges = np.array([0.0, -0.0, 6e-8, 6.1e-5, 65504.0, -65504.0, 1.0, -1.0], dtype=np.float16)
    k = min(len(edges), n // 4)
    v[:k] = edges[:k]
    return v


def random_blocks(qtype: T, n_elems: int) -> np.ndarray:
    block, size = GGML_QUANT_SIZES[qtype]
    n_blocks = n_elems // block
    raw = rng.integers(0, 256, size=(n_blocks, size), dtype=np.uint8)
    for off in F16_FIELDS[qtype]:
        raw[:, off:off + 2] = random_f16(n_blocks).view(np.uint8).reshape(n_blocks, 2)
    return raw.reshape(-1)


def random_plain(qtype: T, n: int) -> np.ndarray:
    """Plain floats: mostly normal values, then every special class."""
    v = rng.standard_normal(n).astype(np.float32) * np.float32(3.0)
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40, -1e-45, 3.4e38, 65504.0, 65520.0, 1e-8],
                       dtype=np.float32)
    v[:len(special)] = special
    if qtype == T.F32:
        return v.view(np.uint8)
    if qtype == T.F16:
        with np.errstate(over="ignore"):
            h = v.astype(np.float16)
        # Random bit patterns too: every subnormal/NaN class of f16.
        h[len(special):len(special) + 64] = rng.integers(0, 1 << 16, 64, dtype=np.uint16).view(np.float16)
        return h.view(np.uint8)
    # BF16: random bit patterns cover every class.
    return rng.integers(0, 1 << 16, n, dtype=np.uint16).view(np.uint8)


def quant_src(n_rows: int, row: int) -> np.ndarray:
    """Normal data with scale varying per row, plus edge rows: zeros, a constant, a spike,
    all-positive values and exact-tie-prone multiples of 1/8."""
    x = rng.standard_normal((n_rows, row)).astype(np.float32)
    x *= (10.0 ** rng.uniform(-3, 1, size=(n_rows, 1))).astype(np.float32)
    x[0] = 0.0
    x[1] = 0.375
    x[2] = 0.0
    x[2, 5] = -2.5
    x[3] = np.abs(x[3])
    x[4] = np.round(x[4] * 8) / 8
    # numpy's min/max may pick -0.0 over an earlier 0.0 where ggml keeps the first: the
    # stored Q4_1/Q5_1 min would then differ in sign only. Normalize signed zeros away.
    return x + np.float32(0.0)


def main() -> None:
    tensors: dict[str, np.ndarray] = {}
    types = [T.F32, T.F16, T.BF16, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0,
             T.Q4_K, T.Q5_K, T.Q6_K, T.IQ4_NL, T.IQ4_XS]
    for qtype in types:
        block, _ = GGML_QUANT_SIZES[qtype]
        parts = []
        if qtype in QUANTIZABLE:
            src = quant_src(8, 128)
            q = np.ascontiguousarray(quantize(src, qtype)).view(np.uint8).reshape(-1)
            tensors[f"{qtype.name}.quant_src"] = src.reshape(-1)
            tensors[f"{qtype.name}.quant_bytes"] = q.copy()
            parts.append(q)
        if block == 1:
            parts.append(random_plain(qtype, RAW_ELEMS[1]))
        else:
            parts.append(random_blocks(qtype, RAW_ELEMS[block]))
        data = np.concatenate(parts)
        with np.errstate(over="ignore", invalid="ignore"):
            deq = np.asarray(dequantize(data, qtype), dtype=np.float32).reshape(-1)
        tensors[f"{qtype.name}.bytes"] = data
        tensors[f"{qtype.name}.f32"] = np.ascontiguousarray(deq)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(OUT), metadata={"generator": "tools/oracle/make_quant_fixtures.py",
                                           "gguf_py": "0.19.0"})
    total = sum(t.nbytes for t in tensors.values())
    print(f"wrote {OUT} ({total} bytes of tensors, {len(tensors)} tensors)")


if __name__ == "__main__":
    main()
