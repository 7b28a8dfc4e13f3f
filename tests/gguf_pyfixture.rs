//! Cross-checks against gguf-py (llama.cpp's reference implementation), through committed files made
//! by `tools/oracle/make_gguf_fixture.py`:
//! - `pywritten.gguf` was written by gguf-py; `pywritten.json` is what gguf-py's reader sees in it. Our
//!   reader must see the same keys, types, values, tensors and bytes.
//! - `rustwritten.gguf` is our writer's output, checked by the script with gguf-py's reader; the test
//!   here pins our writer to those exact bytes. Set `DELTASPEC_REGEN_FIXTURES=1` to rewrite it after an
//!   intentional format change (then rerun the script).

use deltaspec::gguf::{GgufFile, GgufWriter, Value, ValueType};
use deltaspec::tensor::DType;
use serde_json::Value as Json;
use std::path::{Path, PathBuf};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/gguf")
        .join(name)
}

fn fnv1a64(data: &[u8]) -> u64 {
    data.iter().fold(0xCBF2_9CE4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01B3)
    })
}

/// gguf-py's `types` list: `ARRAY` then the element's types (nested arrays recurse into element 0).
fn py_types(v: &Value) -> Vec<String> {
    match v {
        Value::Array(ValueType::Array, items) => {
            let mut t = vec!["ARRAY".to_owned()];
            t.extend(py_types(&items[0]));
            t
        }
        Value::Array(ty, _) => vec!["ARRAY".to_owned(), ty.name().to_owned()],
        v => vec![v.value_type().name().to_owned()],
    }
}

/// Our value as JSON the way gguf-py's `contents()` renders it (nested arrays flattened).
fn py_json(v: &Value, out: &mut Vec<Json>) {
    let j = match v {
        Value::Array(_, items) => return items.iter().for_each(|i| py_json(i, out)),
        Value::String(s) => Json::from(s.as_str()),
        Value::Bool(b) => Json::from(*b),
        Value::F32(_) | Value::F64(_) => Json::from(v.as_f64().unwrap()),
        Value::U64(x) => Json::from(*x),
        v => Json::from(v.as_i64().unwrap()),
    };
    out.push(j);
}

fn as_json(v: &Value) -> Json {
    match v {
        Value::Array(..) => {
            let mut out = Vec::new();
            py_json(v, &mut out);
            Json::Array(out)
        }
        v => {
            let mut out = Vec::new();
            py_json(v, &mut out);
            out.pop().unwrap()
        }
    }
}

#[test]
fn reads_gguf_py_output_like_gguf_py() {
    let f = GgufFile::open(&fixture("pywritten.gguf")).unwrap();
    let want: Json =
        serde_json::from_str(&std::fs::read_to_string(fixture("pywritten.json")).unwrap()).unwrap();

    assert_eq!(f.version, 3);
    assert_eq!(f.alignment, want["alignment"].as_u64().unwrap());
    assert_eq!(f.file_len() as u64, want["file_len"].as_u64().unwrap());

    let kvs = want["kvs"].as_array().unwrap();
    assert_eq!(f.metadata.len(), kvs.len());
    for ((key, value), w) in f.metadata.iter().zip(kvs) {
        assert_eq!(key, w["key"].as_str().unwrap(), "key order");
        let types: Vec<String> = serde_json::from_value(w["types"].clone()).unwrap();
        assert_eq!(py_types(value), types, "types of {key}");
        assert_eq!(as_json(value), w["value"], "value of {key}");
    }

    let tensors = want["tensors"].as_array().unwrap();
    assert_eq!(f.tensors.len(), tensors.len());
    for (t, w) in f.tensors.iter().zip(tensors) {
        assert_eq!(t.name, w["name"].as_str().unwrap());
        let ne: Vec<u64> = serde_json::from_value(w["ne"].clone()).unwrap();
        assert_eq!(t.ne, ne, "{}", t.name);
        assert_eq!(t.dtype.name(), w["type"].as_str().unwrap(), "{}", t.name);
        assert_eq!(t.size as u64, w["n_bytes"].as_u64().unwrap(), "{}", t.name);
        let abs = f.data_offset() as u64 + t.offset;
        assert_eq!(abs, w["data_offset"].as_u64().unwrap(), "{}", t.name);
        let hash = format!("{:016x}", fnv1a64(f.tensor_bytes(t)));
        assert_eq!(hash, w["fnv1a64"].as_str().unwrap(), "{}", t.name);
        assert_eq!(f.tensor_data(t).as_slice(), f.tensor_bytes(t));
    }

    // The typed getters on real converter-style keys.
    assert_eq!(f.architecture().unwrap(), "qwen35");
    assert_eq!(f.get_u64("qwen35.block_count").unwrap(), 2);
    assert_eq!(f.get_f32("qwen35.rope.freq_base").unwrap(), 1e7);
    assert_eq!(
        f.get_u64_array("qwen35.rope.dimension_sections").unwrap(),
        [11, 11, 10, 0]
    );
    assert_eq!(f.get_str_array("test.arr_str").unwrap(), ["a", "", "ü"]);
    assert_eq!(f.get_i64_array("test.arr_i32").unwrap(), [1, -2, 3]);
    assert_eq!(
        f.get_bool_array("test.arr_bool").unwrap(),
        [true, false, true]
    );
    let i32s = f.tensor("i32_3d").unwrap();
    assert_eq!(i32s.shape(), [2, 3, 4]);
    let v: Vec<i32> = f
        .tensor_bytes(i32s)
        .chunks_exact(4)
        .map(|b| i32::from_le_bytes(b.try_into().unwrap()))
        .collect();
    assert_eq!(v, (0..24).collect::<Vec<_>>());
}

/// Mirrors `check_rust_written` in tools/oracle/make_gguf_fixture.py.
fn rust_fixture() -> GgufWriter {
    let mut w = GgufWriter::new();
    w.add_kv("general.architecture", "qwen35".into());
    w.set_alignment(128);
    w.add_kv("test.u8", Value::U8(7));
    w.add_kv("test.i64", Value::I64(-(1 << 40)));
    w.add_kv("test.f32", Value::F32(0.25));
    w.add_kv("test.f64", Value::F64(-2.5));
    w.add_kv("test.bool", Value::Bool(false));
    w.add_kv("test.string", "rüst".into());
    w.add_kv("test.arr_str", Value::array(ValueType::String, ["x", "yz"]));
    w.add_kv("test.arr_u16", Value::array(ValueType::U16, [1u16, 65535]));
    w.add_kv(
        "test.nested",
        Value::Array(
            ValueType::Array,
            vec![
                Value::array(ValueType::F32, [1.5f32]),
                Value::array(ValueType::F32, [2.5f32, 3.5]),
            ],
        ),
    );
    let f32s: Vec<u8> = (0..8).flat_map(|i| (i as f32).to_le_bytes()).collect();
    w.add_tensor("w_f32", &[4, 2], DType::F32, f32s).unwrap();
    w.add_tensor("w_q8", &[32, 1], DType::Q8_0, (0..34).collect())
        .unwrap();
    w.add_tensor_generated(
        "w_gen",
        &[256],
        DType::Q4K,
        Box::new(|out| {
            let bytes: Vec<u8> = (0..144).map(|i| (i % 251) as u8).collect();
            bytes.chunks(50).try_for_each(|c| out.write_all(c))
        }),
    )
    .unwrap();
    w
}

#[test]
fn writer_output_is_pinned_to_the_gguf_py_checked_file() {
    let path = fixture("rustwritten.gguf");
    let bytes = rust_fixture().to_bytes().unwrap();
    if std::env::var_os("DELTASPEC_REGEN_FIXTURES").is_some() {
        std::fs::write(&path, &bytes).unwrap();
    }
    let committed = std::fs::read(&path).unwrap();
    assert!(
        bytes == committed,
        "GgufWriter output differs from {} (checked by gguf-py); regenerate deliberately",
        path.display()
    );
    let f = GgufFile::open(&path).unwrap();
    assert_eq!(f.alignment, 128);
    assert_eq!(f.get_str("test.string").unwrap(), "rüst");
    assert_eq!(f.get_i64("test.i64").unwrap(), -(1 << 40));
    assert_eq!(f.tensor("w_q8").unwrap().size, 34);
}
