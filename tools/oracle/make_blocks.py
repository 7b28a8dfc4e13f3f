#!/usr/bin/env python3
"""make_blocks.py OUT.safetensors GGUF...   (torch venv: PyPI gguf 0.19.0, numpy, safetensors)

Cuts raw blocks of every quantized ggml type found in the given llama.cpp-quantized GGUFs and stores
  <TYPE>.bytes  u8  [n * type_size]    n raw blocks, exactly as in the file, concatenated
  <TYPE>.f32    f32 [n * block_size]   gguf-py dequantization (gguf.quants.dequantize)
(flat 1-D, the same layout as tests/fixtures/quant/gguf_py_blocks.safetensors), TYPE the ggml type name
("Q8_0", "Q4_K", "IQ4_XS", "BF16", ...). Blocks come from up to 3 tensors per type (files in the order given),
from the start, the middle and the end of each tensor. For BF16 a "block" is a run of 32 values.
Metadata key "oracle" (a JSON string) holds "<TYPE>.source": file:tensor:block_index of each block, in order.
"""
import json
import os
import sys

import numpy as np
import gguf
from safetensors.numpy import save_file

N_256 = 8      # blocks per type for 256-element super-block types
N_32 = 24      # blocks per type for 32-element block types
PER_TENSOR_MAX = 3


def main():
    out = sys.argv[1]
    picked = {}          # type name -> list of (bytes row, source str)
    for path in sys.argv[2:]:
        rd = gguf.GGUFReader(path)
        for t in rd.tensors:
            qt = t.tensor_type
            if qt in (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16,
                      gguf.GGMLQuantizationType.F64) or qt.name.startswith("I") and qt.name[1:].isdigit():
                continue
            bs, ts = gguf.GGML_QUANT_SIZES[qt]
            if bs == 1:                     # BF16: take runs of 32 values
                bs, ts = 32, 32 * ts
            want = N_256 if bs >= 256 else N_32
            have = picked.setdefault(qt.name, [])
            if len(have) >= want:
                continue
            if sum(1 for _, s in have if s.startswith(f"{os.path.basename(path)}:{t.name}:")) > 0:
                continue
            raw = np.ascontiguousarray(t.data).view(np.uint8).reshape(-1)
            nb = raw.size // ts
            assert nb * ts == raw.size and nb * bs == int(t.n_elements), (t.name, nb, raw.size, t.n_elements)
            k = min(want - len(have), max(1, want // PER_TENSOR_MAX), nb)
            # start, middle, end of the tensor
            idx = sorted(set(list(range(0, (k + 2) // 3)) + list(range(nb // 2, nb // 2 + k // 3))
                             + list(range(nb - (k - (k + 2) // 3 - k // 3), nb))))[:k]
            for i in idx:
                have.append((raw[i * ts:(i + 1) * ts].copy(), f"{os.path.basename(path)}:{t.name}:{i}"))
    tensors, meta = {}, {"generator": "tools/oracle/make_blocks.py", "gguf_py": "gguf 0.19.0 (PyPI)"}
    for name, rows in sorted(picked.items()):
        if not rows:
            continue
        qt = gguf.GGMLQuantizationType[name]
        b = np.concatenate([r for r, _ in rows])
        bs, ts = gguf.GGML_QUANT_SIZES[qt]
        f = np.asarray(gguf.quants.dequantize(b.reshape(-1, ts), qt), dtype=np.float32).reshape(-1)
        assert f.size == b.size // ts * bs and np.isfinite(f).all()
        tensors[f"{name}.bytes"] = b
        tensors[f"{name}.f32"] = f
        meta[f"{name}.source"] = " ".join(s for _, s in rows)
        print(f"{name}: {len(rows)} blocks, {b.size} bytes -> {f.size} values")
    save_file(tensors, out, metadata={"oracle": json.dumps(meta, sort_keys=True)})
    print(f"wrote {out}: {os.path.getsize(out)} bytes")


if __name__ == "__main__":
    main()
