//! Writer → reader round trips: every value type, several tensor types, alignments, streamed tensors,
//! and the typed getters.

use deltaspec::backend::TensorBytes;
use deltaspec::gguf::{GgufError, GgufFile, GgufWriter, Value, ValueType};
use deltaspec::tensor::DType;

fn every_value() -> Vec<(&'static str, Value)> {
    vec![
        ("general.architecture", "qwen35".into()),
        ("v.u8", Value::U8(255)),
        ("v.i8", Value::I8(-128)),
        ("v.u16", Value::U16(65535)),
        ("v.i16", Value::I16(-32768)),
        ("v.u32", Value::U32(u32::MAX)),
        ("v.i32", Value::I32(i32::MIN)),
        ("v.f32", Value::F32(-1.5e-7)),
        ("v.bool", Value::Bool(true)),
        ("v.string", "ünïcödé ✓".into()),
        ("v.empty_string", "".into()),
        ("v.u64", Value::U64(u64::MAX)),
        ("v.i64", Value::I64(i64::MIN)),
        ("v.f64", Value::F64(std::f64::consts::E)),
        ("a.i32", Value::array(ValueType::I32, [1i32, -2, 3])),
        ("a.str", Value::array(ValueType::String, ["a", "", "bc"])),
        ("a.empty", Value::Array(ValueType::F32, vec![])),
        ("a.bool", Value::array(ValueType::Bool, [true, false])),
        ("a.u64", Value::array(ValueType::U64, [0u64, u64::MAX])),
        ("a.f64", Value::array(ValueType::F64, [0.5f64, -0.25])),
        (
            "a.nested",
            Value::Array(
                ValueType::Array,
                vec![
                    Value::array(ValueType::U8, [1u8, 2]),
                    Value::Array(ValueType::U8, vec![]),
                    Value::Array(
                        ValueType::Array,
                        vec![Value::array(ValueType::String, ["deep"])],
                    ),
                ],
            ),
        ),
    ]
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// (name, ne, dtype) of the test tensors; sizes deliberately not multiples of the alignment.
const TENSORS: &[(&str, &[u64], DType)] = &[
    ("f32", &[3, 5], DType::F32),
    ("f16", &[7], DType::F16),
    ("q8_0", &[64, 3], DType::Q8_0),
    ("q4_k", &[256, 2, 1], DType::Q4K),
    ("empty", &[0, 4], DType::F32),
    ("scalar", &[], DType::F32),
];

fn build(alignment: Option<u64>) -> GgufWriter {
    let mut w = GgufWriter::new();
    for (k, v) in every_value() {
        w.add_kv(k, v);
    }
    if let Some(a) = alignment {
        w.set_alignment(a);
    }
    for (i, &(name, ne, dtype)) in TENSORS.iter().enumerate() {
        let numel = ne.iter().product::<u64>() as usize;
        let data = pattern(dtype.bytes_for(numel).unwrap(), i as u8);
        w.add_tensor(name, ne, dtype, data).unwrap();
    }
    w
}

fn check(f: &GgufFile, alignment: u64) {
    assert_eq!(f.version, 3);
    assert_eq!(f.alignment, alignment);
    let mut want: Vec<(String, Value)> = every_value()
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
    if alignment != 32 {
        want.push(("general.alignment".into(), Value::U32(alignment as u32)));
    }
    assert_eq!(f.metadata, want);
    assert_eq!(f.data_offset() as u64 % alignment, 0);
    assert_eq!(f.tensors.len(), TENSORS.len());
    for (i, (t, &(name, ne, dtype))) in f.tensors.iter().zip(TENSORS).enumerate() {
        assert_eq!(
            (t.name.as_str(), t.ne.as_slice(), t.dtype),
            (name, ne, dtype)
        );
        assert_eq!(t.offset % alignment, 0, "{name}");
        assert_eq!(t.size, dtype.bytes_for(t.numel()).unwrap());
        assert_eq!(f.tensor_bytes(t), pattern(t.size, i as u8), "{name}");
        assert_eq!(f.tensor(name), Some(t));
    }
    assert_eq!(f.tensor("nope"), None);
    assert_eq!(f.tensor("f32").unwrap().shape(), [5, 3]);
    assert_eq!(f.tensor("scalar").unwrap().numel(), 1);
}

#[test]
fn round_trip_default_alignment() {
    let bytes = build(None).to_bytes().unwrap();
    let f = GgufFile::from_bytes(bytes.clone()).unwrap();
    check(&f, 32);
    assert!(f.get("general.alignment").is_none());
    // Tensors are packed in order with minimal padding (the gguf-py / llama.cpp layout).
    let end = f
        .tensors
        .last()
        .map(|t| f.data_offset() + t.offset as usize + t.size);
    assert_eq!(end, Some(bytes.len()));
}

#[test]
fn round_trip_custom_alignments() {
    for a in [1, 8, 64, 4096] {
        let f = GgufFile::from_bytes(build(Some(a)).to_bytes().unwrap()).unwrap();
        check(&f, a);
    }
}

#[test]
fn alignment_back_to_default_removes_the_key() {
    let mut w = build(Some(64));
    w.set_alignment(32);
    let f = GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap();
    check(&f, 32);
}

#[test]
fn bad_alignment_is_rejected_by_the_writer() {
    let mut w = build(None);
    w.set_alignment(24);
    assert!(matches!(w.to_bytes(), Err(GgufError::BadAlignment { .. })));
}

#[test]
fn file_round_trip_is_mapped_and_zero_copy() {
    let dir = std::env::temp_dir().join(format!("deltaspec_gguf_rt_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("rt.gguf");
    build(Some(64)).write_file(&path).unwrap();
    let f = GgufFile::open(&path).unwrap();
    check(&f, 64);
    let t = f.tensor("q4_k").unwrap();
    match f.tensor_data(t) {
        TensorBytes::Mapped(_, r) => {
            assert_eq!(r.len(), t.size);
            assert_eq!(r.start, f.data_offset() + t.offset as usize);
        }
        TensorBytes::Owned(_) => panic!("an opened file must give mapped tensor data"),
    }
    assert_eq!(f.tensor_data(t).as_slice(), f.tensor_bytes(t));
    assert_eq!(f.file_len() as u64, std::fs::metadata(&path).unwrap().len());
    drop(f);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn missing_file_names_the_path() {
    let e = GgufFile::open(std::path::Path::new("/nonexistent/x.gguf")).unwrap_err();
    assert!(matches!(e, GgufError::Io { .. }));
    assert!(e.to_string().contains("/nonexistent/x.gguf"), "{e}");
}

#[test]
fn streamed_generator() {
    let mut w = GgufWriter::new();
    // 1 MiB of Q8_0 written in odd-sized chunks.
    let ne = [4096u64, 8 * 32];
    let size = DType::Q8_0.bytes_for(4096 * 256).unwrap();
    w.add_tensor("small", &[2], DType::F32, vec![0; 8]).unwrap();
    w.add_tensor_generated(
        "big",
        &ne,
        DType::Q8_0,
        Box::new(move |out| {
            let data = pattern(size, 9);
            data.chunks(1000).try_for_each(|c| out.write_all(c))
        }),
    )
    .unwrap();
    let f = GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap();
    let t = f.tensor("big").unwrap();
    assert_eq!(t.size, size);
    assert_eq!(t.offset % 32, 0);
    assert_eq!(f.tensor_bytes(t), pattern(size, 9));
}

#[test]
fn generator_writing_the_wrong_amount_is_an_error() {
    for written in [0usize, 7, 9, 100] {
        let mut w = GgufWriter::new();
        w.add_tensor_generated(
            "g",
            &[2],
            DType::F32,
            Box::new(move |out| out.write_all(&vec![1u8; written])),
        )
        .unwrap();
        let e = w.to_bytes().unwrap_err();
        assert!(
            matches!(e, GgufError::SizeMismatch { expected: 8, got, .. } if got == written as u64),
            "{written}: {e}"
        );
    }
    let mut w = GgufWriter::new();
    let failing = |_: &mut dyn std::io::Write| Err(std::io::Error::other("boom"));
    w.add_tensor_generated("g", &[2], DType::F32, Box::new(failing))
        .unwrap();
    assert!(matches!(w.to_bytes(), Err(GgufError::Write { .. })));
}

#[test]
fn writer_rejects_bad_tensors_and_arrays() {
    let mut w = GgufWriter::new();
    let e = w
        .add_tensor("t", &[4], DType::F32, vec![0; 15])
        .unwrap_err();
    assert!(
        matches!(
            e,
            GgufError::SizeMismatch {
                expected: 16,
                got: 15,
                ..
            }
        ),
        "{e}"
    );
    let e = w.add_tensor("q", &[16], DType::Q8_0, vec![]).unwrap_err();
    assert!(matches!(e, GgufError::BadShape { .. }), "{e}");
    let e = w
        .add_tensor("big", &[u64::MAX, 2], DType::F32, vec![])
        .unwrap_err();
    assert!(matches!(e, GgufError::BadShape { .. }), "{e}");
    w.add_tensor("t", &[4], DType::F32, vec![0; 16]).unwrap();
    let e = w
        .add_tensor("t", &[4], DType::F32, vec![0; 16])
        .unwrap_err();
    assert!(matches!(e, GgufError::DuplicateTensor { .. }), "{e}");

    w.add_kv(
        "mixed",
        Value::Array(ValueType::U32, vec![Value::U32(1), Value::I32(2)]),
    );
    let e = w.to_bytes().unwrap_err();
    assert!(
        matches!(e, GgufError::MixedArray { ref key, .. } if key == "mixed"),
        "{e}"
    );
}

#[test]
fn add_kv_replaces_in_place() {
    let mut w = GgufWriter::new();
    w.add_kv("a", Value::U32(1));
    w.add_kv("b", Value::U32(2));
    w.add_kv("a", "x".into());
    let f = GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap();
    assert_eq!(
        f.metadata,
        [("a".into(), "x".into()), ("b".into(), Value::U32(2))]
    );
    assert!(f.tensors.is_empty());
}

#[test]
fn alignment_via_add_kv_drives_the_layout() {
    let mut w = GgufWriter::new();
    w.add_kv("general.alignment", Value::U64(256));
    w.add_tensor("a", &[3], DType::F32, vec![1; 12]).unwrap();
    w.add_tensor("b", &[3], DType::F32, vec![2; 12]).unwrap();
    let f = GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap();
    assert_eq!(f.alignment, 256);
    assert_eq!(f.tensor("b").unwrap().offset, 256);
}

#[test]
fn typed_getters() {
    let f = GgufFile::from_bytes(build(None).to_bytes().unwrap()).unwrap();
    assert_eq!(f.architecture().unwrap(), "qwen35");
    assert_eq!(f.get_u64("v.u32").unwrap(), u64::from(u32::MAX));
    assert_eq!(f.get_u64("v.u8").unwrap(), 255);
    assert_eq!(f.get_i64("v.i8").unwrap(), -128);
    assert_eq!(f.get_f32("v.u16").unwrap(), 65535.0);
    assert_eq!(f.get_f32("v.f32").unwrap(), -1.5e-7);
    assert!(f.get_bool("v.bool").unwrap());
    assert_eq!(f.get_str("v.string").unwrap(), "ünïcödé ✓");
    assert_eq!(f.get_array("a.nested").unwrap().len(), 3);
    assert_eq!(f.get_str_array("a.str").unwrap(), ["a", "", "bc"]);
    assert_eq!(f.get_i64_array("a.i32").unwrap(), [1, -2, 3]);
    assert_eq!(f.get_u64_array("a.u64").unwrap(), [0, u64::MAX]);
    assert_eq!(f.get_f32_array("a.f64").unwrap(), [0.5, -0.25]);
    assert_eq!(f.get_bool_array("a.bool").unwrap(), [true, false]);
    assert!(f.get_f32_array("a.empty").unwrap().is_empty());

    let e = f.get_u64("v.i8").unwrap_err();
    assert!(
        matches!(e, GgufError::WrongType { ref key, .. } if key == "v.i8"),
        "{e}"
    );
    assert!(matches!(
        f.get_i64("v.u64"),
        Err(GgufError::WrongType { .. })
    ));
    assert!(matches!(
        f.get_str("v.u8"),
        Err(GgufError::WrongType { .. })
    ));
    let e = f.get_u64_array("a.i32").unwrap_err();
    assert!(e.to_string().contains("element 1"), "{e}");
    let e = f.get_u64("nope").unwrap_err();
    assert!(
        matches!(e, GgufError::MissingKey { ref key } if key == "nope"),
        "{e}"
    );
}
