//! Corrupt and truncated input: each case must give its specific error (with the right byte offset),
//! never a panic or an allocation sized by a corrupt count.

use deltaspec::gguf::{GgufError, GgufFile, GgufWriter, Value, ValueType};
use deltaspec::tensor::DType;

/// Hand-assembles GGUF bytes so tests can put any value anywhere.
#[derive(Default, Clone)]
struct Raw(Vec<u8>);

impl Raw {
    /// Magic, version 3 and the two counts.
    fn header(tensors: u64, kvs: u64) -> Raw {
        Raw::default().bytes(b"GGUF").u32(3).u64(tensors).u64(kvs)
    }
    fn bytes(mut self, b: &[u8]) -> Raw {
        self.0.extend_from_slice(b);
        self
    }
    fn u32(self, v: u32) -> Raw {
        self.bytes(&v.to_le_bytes())
    }
    fn u64(self, v: u64) -> Raw {
        self.bytes(&v.to_le_bytes())
    }
    fn str(self, s: &str) -> Raw {
        self.u64(s.len() as u64).bytes(s.as_bytes())
    }
    /// A tensor info: name, dims, ggml type id, offset.
    fn tensor(self, name: &str, ne: &[u64], ty: u32, offset: u64) -> Raw {
        let mut r = self.str(name).u32(ne.len() as u32);
        for &n in ne {
            r = r.u64(n);
        }
        r.u32(ty).u64(offset)
    }
    /// Zero padding up to a multiple of `a`, then `n` data bytes.
    fn pad_and_data(mut self, a: usize, n: usize) -> Raw {
        let len = self.0.len().next_multiple_of(a);
        self.0.resize(len + n, 0);
        self
    }
    fn len(&self) -> u64 {
        self.0.len() as u64
    }
    fn parse(self) -> Result<GgufFile, GgufError> {
        GgufFile::from_bytes(self.0)
    }
}

fn small_valid_file() -> Vec<u8> {
    let mut w = GgufWriter::new();
    w.add_kv("general.architecture", "qwen35".into());
    w.add_kv("n", Value::U32(2));
    w.add_kv("arr", Value::array(ValueType::String, ["ab", "c"]));
    w.add_kv(
        "nested",
        Value::Array(
            ValueType::Array,
            vec![Value::array(ValueType::I16, [1i16, 2])],
        ),
    );
    w.add_tensor("a", &[3], DType::F32, vec![1; 12]).unwrap();
    w.add_tensor("b", &[32], DType::Q8_0, vec![2; 34]).unwrap();
    w.to_bytes().unwrap()
}

#[test]
fn every_truncation_is_an_error() {
    let full = small_valid_file();
    GgufFile::from_bytes(full.clone()).unwrap();
    for len in 0..full.len() {
        match GgufFile::from_bytes(full[..len].to_vec()) {
            Ok(_) => panic!("prefix of {len} bytes parsed"),
            Err(GgufError::Truncated { offset, .. } | GgufError::TooLarge { offset, .. }) => {
                assert!(offset <= len as u64, "{len}: offset {offset}")
            }
            Err(GgufError::TensorOutOfBounds { file_len, .. }) => {
                assert_eq!(file_len, len as u64)
            }
            Err(e) => panic!("prefix of {len} bytes: unexpected {e}"),
        }
    }
}

#[test]
fn truncation_names_what_and_where() {
    let r = Raw::header(0, 1).str("key").u32(ValueType::U64.id()).u32(5);
    let e = r.parse().unwrap_err();
    assert!(
        matches!(&e, GgufError::Truncated { offset: 39, what } if what.contains("key `key`")),
        "{e}"
    );
    assert!(e.to_string().contains("byte 39"), "{e}");
}

#[test]
fn corrupt_bytes_never_panic() {
    // Deterministic single- and multi-byte corruptions of a valid file: any result but a panic.
    let full = small_valid_file();
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for _ in 0..5000 {
        let mut b = full.clone();
        for _ in 0..1 + next() % 3 {
            let i = (next() % b.len() as u64) as usize;
            b[i] = next() as u8;
        }
        if let Err(e) = GgufFile::from_bytes(b) {
            assert!(!e.to_string().is_empty());
        }
    }
}

#[test]
fn bad_magic() {
    let e = GgufFile::from_bytes(b"GGML\x03\0\0\0".to_vec()).unwrap_err();
    assert!(
        matches!(e, GgufError::BadMagic { found } if &found == b"GGML"),
        "{e}"
    );
}

#[test]
fn versions() {
    for v in [0, 1, 4, 0x0300_0000] {
        let mut b = Raw::header(0, 0).0;
        b[4..8].copy_from_slice(&u32::to_le_bytes(v));
        let e = GgufFile::from_bytes(b).unwrap_err();
        assert!(
            matches!(e, GgufError::UnsupportedVersion { version } if version == v),
            "{e}"
        );
        if v == 0x0300_0000 {
            assert!(e.to_string().contains("big-endian"), "{e}");
        }
    }
    let mut b = Raw::header(0, 0).0;
    b[4] = 2;
    assert_eq!(GgufFile::from_bytes(b).unwrap().version, 2);
}

#[test]
fn huge_counts_are_rejected_before_allocating() {
    let e = Raw::header(u64::MAX, 0).parse().unwrap_err();
    assert!(matches!(e, GgufError::TooLarge { offset: 8, .. }), "{e}");
    let e = Raw::header(1 << 40, 0).parse().unwrap_err();
    assert!(matches!(e, GgufError::TooLarge { offset: 8, .. }), "{e}");
    let e = Raw::header(0, u64::MAX / 2).parse().unwrap_err();
    assert!(matches!(e, GgufError::TooLarge { offset: 16, .. }), "{e}");
    // A string length larger than the rest of the file (padded so the kv count itself is plausible).
    let e = Raw::header(0, 1)
        .u64(u64::MAX)
        .bytes(&[0; 16])
        .parse()
        .unwrap_err();
    assert!(
        matches!(
            e,
            GgufError::TooLarge {
                offset: 24,
                count: u64::MAX,
                ..
            }
        ),
        "{e}"
    );
    let e = Raw::header(0, 1)
        .str("s")
        .u32(ValueType::String.id())
        .u64(1000)
        .bytes(b"short")
        .parse()
        .unwrap_err();
    assert!(
        matches!(
            e,
            GgufError::TooLarge {
                offset: 37,
                count: 1000,
                ..
            }
        ),
        "{e}"
    );
    // Array counts: impossible for u64 elements even though it is small in bytes.
    let r = Raw::header(0, 1).str("a").u32(ValueType::Array.id());
    let at = r.len() + 4;
    let e = r
        .clone()
        .u32(ValueType::U64.id())
        .u64(3)
        .u64(1)
        .u64(2)
        .parse()
        .unwrap_err();
    assert!(
        matches!(e, GgufError::TooLarge { offset, count: 3, .. } if offset == at),
        "{e}"
    );
    let e = r.u32(ValueType::U8.id()).u64(u64::MAX).parse().unwrap_err();
    assert!(
        matches!(e, GgufError::TooLarge { offset, .. } if offset == at),
        "{e}"
    );
}

#[test]
fn deep_array_nesting_is_bounded() {
    let mut r = Raw::header(0, 1).str("deep").u32(ValueType::Array.id());
    for _ in 0..10_000 {
        r = r.u32(ValueType::Array.id()).u64(1);
    }
    let e = r.u32(ValueType::U8.id()).u64(0).parse().unwrap_err();
    assert!(matches!(e, GgufError::TooLarge { .. }), "{e}");
    assert!(e.to_string().contains("nesting"), "{e}");
}

#[test]
fn unknown_value_types() {
    let r = Raw::header(0, 1).str("k");
    let at = r.len();
    let e = r.u32(13).u32(0).parse().unwrap_err();
    assert!(
        matches!(e, GgufError::UnknownValueType { id: 13, offset } if offset == at),
        "{e}"
    );
    let r = Raw::header(0, 1).str("k").u32(ValueType::Array.id());
    let at = r.len();
    let e = r.u32(99).u64(0).parse().unwrap_err();
    assert!(
        matches!(e, GgufError::UnknownValueType { id: 99, offset } if offset == at),
        "{e}"
    );
}

#[test]
fn bad_utf8() {
    let r = Raw::header(0, 1).u64(3);
    let at = r.len() + 1;
    let e = r.bytes(b"a\xffb").u32(7).bytes(&[1]).parse().unwrap_err();
    assert!(
        matches!(e, GgufError::BadUtf8 { offset } if offset == at),
        "{e}"
    );
}

#[test]
fn duplicates() {
    let r = Raw::header(0, 2)
        .str("k")
        .u32(ValueType::U8.id())
        .bytes(&[1]);
    let at = r.len();
    let e = r
        .str("k")
        .u32(ValueType::U8.id())
        .bytes(&[2])
        .parse()
        .unwrap_err();
    assert!(
        matches!(e, GgufError::DuplicateKey { ref key, offset } if key == "k" && offset == at),
        "{e}"
    );
    let e = Raw::header(2, 0)
        .tensor("t", &[1], 0, 0)
        .tensor("t", &[1], 0, 32)
        .pad_and_data(32, 64)
        .parse()
        .unwrap_err();
    assert!(
        matches!(e, GgufError::DuplicateTensor { ref name } if name == "t"),
        "{e}"
    );
}

#[test]
fn unknown_ggml_type() {
    let e = Raw::header(1, 0)
        .tensor("w", &[4], 4, 0)
        .pad_and_data(32, 64)
        .parse()
        .unwrap_err();
    assert!(
        matches!(e, GgufError::UnknownTensorType { ref name, id: 4 } if name == "w"),
        "{e}"
    );
}

#[test]
fn too_many_dims() {
    let r = Raw::header(1, 0).str("w");
    let at = r.len();
    let e = r.u32(9).bytes(&[0; 128]).parse().unwrap_err();
    assert!(
        matches!(e, GgufError::TooLarge { count: 9, offset, .. } if offset == at),
        "{e}"
    );
    let e = Raw::header(1, 0)
        .str("w")
        .u32(u32::MAX)
        .bytes(&[0; 128])
        .parse()
        .unwrap_err();
    assert!(matches!(e, GgufError::TooLarge { .. }), "{e}");
}

#[test]
fn bad_shapes() {
    for (ne, ty) in [
        (&[u64::MAX, 3][..], 0),  // overflow
        (&[1 << 40, 1 << 40], 0), // overflow
        (&[16, 2], 8),            // Q8_0 row not whole blocks
        (&[512, 3], 12),          // fine for Q4_K...
    ] {
        let r = Raw::header(1, 0).tensor("w", ne, ty, 0).pad_and_data(32, 0);
        let e = r.parse().unwrap_err();
        if ty == 12 {
            // ...but the data is missing.
            assert!(matches!(e, GgufError::TensorOutOfBounds { .. }), "{e}");
        } else {
            assert!(
                matches!(e, GgufError::BadShape { ref name, .. } if name == "w"),
                "{e}"
            );
        }
    }
    // Zero-sized dimensions are allowed.
    let f = Raw::header(1, 0)
        .tensor("z", &[0, 7], 0, 0)
        .pad_and_data(32, 0)
        .parse()
        .unwrap();
    assert_eq!(f.tensor("z").unwrap().size, 0);
}

#[test]
fn misaligned_offset() {
    let e = Raw::header(1, 0)
        .tensor("w", &[1], 0, 4)
        .pad_and_data(32, 64)
        .parse()
        .unwrap_err();
    assert!(
        matches!(e, GgufError::Misaligned { ref name, offset: 4, alignment: 32 } if name == "w"),
        "{e}"
    );
}

#[test]
fn tensor_past_eof() {
    let r = Raw::header(1, 0)
        .tensor("w", &[8], 0, 0)
        .pad_and_data(32, 31);
    let len = r.len();
    let data = len - 31;
    let e = r.parse().unwrap_err();
    assert!(
        matches!(e, GgufError::TensorOutOfBounds { ref name, start, end, file_len }
            if name == "w" && start == data && end == data + 32 && file_len == len),
        "{e}"
    );
    // An offset so large the end overflows.
    let e = Raw::header(1, 0)
        .tensor("w", &[8], 0, u64::MAX - 31)
        .pad_and_data(32, 64)
        .parse()
        .unwrap_err();
    assert!(matches!(e, GgufError::TensorOutOfBounds { .. }), "{e}");
}

#[test]
fn bad_alignment_values() {
    let bad = [Value::U32(0), Value::U32(3), Value::I32(-32), "32".into()];
    for v in bad {
        let r = Raw::header(0, 1).str("general.alignment");
        let r = match &v {
            Value::U32(x) => r.u32(ValueType::U32.id()).u32(*x),
            Value::I32(x) => r.u32(ValueType::I32.id()).u32(*x as u32),
            Value::String(s) => r.u32(ValueType::String.id()).str(s),
            _ => unreachable!(),
        };
        let e = r.parse().unwrap_err();
        assert!(matches!(e, GgufError::BadAlignment { .. }), "{v:?}: {e}");
    }
    // Any unsigned integer type is accepted.
    let f = Raw::header(0, 1)
        .str("general.alignment")
        .u32(ValueType::U64.id())
        .u64(16)
        .parse()
        .unwrap();
    assert_eq!(f.alignment, 16);
}

#[test]
fn file_without_tensors_may_omit_padding() {
    let f = Raw::header(0, 1)
        .str("k")
        .u32(ValueType::U8.id())
        .bytes(&[1])
        .parse()
        .unwrap();
    assert_eq!(f.data_offset(), f.file_len());
    assert_eq!(f.get("k"), Some(&Value::U8(1)));
}
