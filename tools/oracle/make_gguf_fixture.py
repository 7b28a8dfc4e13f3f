#!/usr/bin/env python3
"""Cross-checks deltaspec's GGUF module against gguf-py (the llama.cpp project's reference code).

1. Writes tests/fixtures/gguf/pywritten.gguf with gguf-py's GGUFWriter (every value type, nested arrays,
   a custom alignment, tensors of several ggml types), then reads it back with gguf-py's GGUFReader and
   records what it sees in pywritten.json. tests/gguf_pyfixture.rs asserts our reader sees the same.
2. If tests/fixtures/gguf/rustwritten.gguf exists (written by our GgufWriter; the Rust test pins its
   bytes), reads it with GGUFReader and checks it against the values the Rust test put in it.

Setup: python3 -m venv /tmp/gg && /tmp/gg/bin/pip install gguf==0.19.0 numpy
Run:   /tmp/gg/bin/python tools/oracle/make_gguf_fixture.py
"""

import json
import sys
from pathlib import Path

import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q, GGUFValueType as VT

FIXTURES = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "gguf"


def fnv1a64(data: bytes) -> int:
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def write_py_fixture(path: Path) -> None:
    rng = np.random.default_rng(1234)
    w = gguf.GGUFWriter(path, "qwen35")  # also writes general.architecture
    w.add_custom_alignment(64)
    w.add_uint8("test.u8", 200)
    w.add_int8("test.i8", -100)
    w.add_uint16("test.u16", 60000)
    w.add_int16("test.i16", -30000)
    w.add_uint32("test.u32", 4_000_000_000)
    w.add_int32("test.i32", -2_000_000_000)
    w.add_float32("test.f32", 1e-6)
    w.add_bool("test.bool", True)
    w.add_string("test.string", "héllo ✓")
    w.add_uint64("test.u64", 2**63 + 5)
    w.add_int64("test.i64", -(2**62))
    w.add_float64("test.f64", 3.141592653589793)
    w.add_array("test.arr_i32", [1, -2, 3])
    w.add_array("test.arr_f32", [0.5, -1.25])
    w.add_array("test.arr_str", ["a", "", "ü"])
    w.add_array("test.arr_bool", [True, False, True])
    w.add_array("test.arr_nested", [[1, 2], [3]])
    w.add_uint32("qwen35.block_count", 2)
    w.add_float32("qwen35.rope.freq_base", 10_000_000.0)
    w.add_array("qwen35.rope.dimension_sections", [11, 11, 10, 0])

    w.add_tensor("f32_2d", rng.standard_normal((3, 4), dtype=np.float32))
    w.add_tensor("f16_1d", rng.standard_normal(16).astype(np.float16))
    q8 = gguf.quants.quantize(rng.standard_normal((2, 64), dtype=np.float32), Q.Q8_0)
    w.add_tensor("q8_0", q8, raw_dtype=Q.Q8_0)
    q4k = rng.integers(0, 256, size=(2, 144), dtype=np.uint8)  # bytes only matter, not their meaning
    w.add_tensor("q4_k", q4k, raw_dtype=Q.Q4_K)
    w.add_tensor("i32_3d", np.arange(24, dtype=np.int32).reshape(2, 3, 4))

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def field_value(field):
    """A field's value via gguf-py's own decoding (note: it flattens nested arrays)."""
    return field.contents()


def describe(path: Path) -> dict:
    r = gguf.GGUFReader(path)
    kvs = []
    for name, field in r.fields.items():
        if name.startswith("GGUF."):
            continue  # the reader's pseudo-fields for the header
        kvs.append({"key": name, "types": [VT(t).name for t in field.types], "value": field_value(field)})
    tensors = []
    for t in r.tensors:
        data = bytes(np.asarray(t.data).tobytes())
        tensors.append({
            "name": t.name,
            "ne": [int(x) for x in t.shape],
            "type": Q(t.tensor_type).name,
            "data_offset": int(t.data_offset),
            "n_bytes": int(t.n_bytes),
            "fnv1a64": f"{fnv1a64(data):016x}",
        })
    return {"alignment": int(r.alignment), "file_len": path.stat().st_size, "kvs": kvs, "tensors": tensors}


def check_rust_written(path: Path) -> None:
    """Expectations mirror `rust_fixture()` in tests/gguf_pyfixture.rs."""
    d = describe(path)
    kv = {k["key"]: k for k in d["kvs"]}
    assert d["alignment"] == 128, d["alignment"]
    assert kv["general.architecture"]["value"] == "qwen35"
    assert kv["general.alignment"]["types"] == ["UINT32"]
    assert kv["test.u8"]["value"] == 7 and kv["test.u8"]["types"] == ["UINT8"]
    assert kv["test.i64"]["value"] == -(2**40)
    assert abs(kv["test.f32"]["value"] - 0.25) == 0
    assert kv["test.f64"]["value"] == -2.5
    assert kv["test.bool"]["value"] is False
    assert kv["test.string"]["value"] == "rüst"
    assert kv["test.arr_str"]["value"] == ["x", "yz"]
    assert kv["test.arr_u16"]["value"] == [1, 65535]
    # gguf-py's contents() flattens nested arrays; the types list shows the nesting.
    assert kv["test.nested"]["types"] == ["ARRAY", "ARRAY", "FLOAT32"], kv["test.nested"]
    assert kv["test.nested"]["value"] == [1.5, 2.5, 3.5], kv["test.nested"]
    t = {x["name"]: x for x in d["tensors"]}
    assert t["w_f32"]["ne"] == [4, 2] and t["w_f32"]["type"] == "F32"
    assert t["w_q8"]["ne"] == [32, 1] and t["w_q8"]["type"] == "Q8_0" and t["w_q8"]["n_bytes"] == 34
    assert t["w_gen"]["ne"] == [256] and t["w_gen"]["type"] == "Q4_K" and t["w_gen"]["n_bytes"] == 144
    for x in d["tensors"]:
        assert x["data_offset"] % 128 == 0, x
    f32 = np.frombuffer(path.read_bytes()[t["w_f32"]["data_offset"]:][:32], dtype=np.float32)
    assert list(f32) == [float(i) for i in range(8)], f32
    gen = path.read_bytes()[t["w_gen"]["data_offset"]:][:144]
    assert gen == bytes(i % 251 for i in range(144))
    print(f"gguf-py reads {path.name} as expected ({len(d['kvs'])} keys, {len(d['tensors'])} tensors)")


def main() -> int:
    FIXTURES.mkdir(parents=True, exist_ok=True)
    py = FIXTURES / "pywritten.gguf"
    write_py_fixture(py)
    desc = describe(py)
    (FIXTURES / "pywritten.json").write_text(json.dumps(desc, indent=1, ensure_ascii=False, default=lambda o: o.item()) + "\n")
    print(f"wrote {py} ({py.stat().st_size} bytes) and pywritten.json")
    rust = FIXTURES / "rustwritten.gguf"
    if rust.exists():
        check_rust_written(rust)
    else:
        print(f"{rust} not found: run `cargo test --test gguf_pyfixture` first to check it", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
