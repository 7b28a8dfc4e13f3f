//! Checks the CPU dequantizers (and the quantizers gguf-py also has) bit for bit
//! against every fixture in `tests/fixtures/quant/*.safetensors`.
//!
//! A fixture holds, per type name `T` (ggml spelling, e.g. `Q4_K`): `T.bytes` (u8 blocks)
//! and `T.f32` (their reference dequantization); optionally `T.quant_src` (f32) and
//! `T.quant_bytes` (u8, its reference quantization). `gguf_py_blocks.safetensors` comes
//! from `tools/oracle/make_quant_fixtures.py`; other files (e.g. blocks cut from
//! llama.cpp-quantized GGUFs) are picked up automatically.

use deltaspec::tensor::DType;
use deltaspec::tensor::quant::{dequantize, dequantize_into, quantize};
use safetensors::{Dtype, SafeTensors};
use std::path::{Path, PathBuf};

fn fixture_files() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/quant");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "safetensors"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no fixtures in {}", dir.display());
    files
}

fn u8_tensor<'a>(st: &'a SafeTensors, name: &str) -> &'a [u8] {
    let t = st.tensor(name).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_eq!(t.dtype(), Dtype::U8, "{name}");
    t.data()
}

fn f32_tensor(st: &SafeTensors, name: &str) -> Vec<f32> {
    let t = st.tensor(name).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_eq!(t.dtype(), Dtype::F32, "{name}");
    let (words, rest) = t.data().as_chunks::<4>();
    assert!(rest.is_empty(), "{name}");
    words.iter().map(|w| f32::from_le_bytes(*w)).collect()
}

/// Bitwise equality, except that any NaN equals any NaN (payloads are not part of the
/// contract: numpy and the f16 hardware conversion quiet NaNs differently).
fn same(a: f32, b: f32) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

/// Fixture tensor names with the given suffix, as (type, name prefix).
fn types_with(st: &SafeTensors, suffix: &str) -> Vec<(DType, String)> {
    let mut out: Vec<(DType, String)> = st
        .names()
        .into_iter()
        .filter_map(|n| n.strip_suffix(suffix))
        .map(|t| {
            let dtype = DType::from_name(t).unwrap_or_else(|| panic!("unknown type {t}"));
            (dtype, t.to_string())
        })
        .collect();
    out.sort();
    out
}

#[test]
fn dequantize_matches_fixtures_bit_for_bit() {
    let mut checked = Vec::new();
    for path in fixture_files() {
        let file = std::fs::read(&path).unwrap();
        let st = SafeTensors::deserialize(&file).unwrap();
        for (dtype, t) in types_with(&st, ".bytes") {
            let bytes = u8_tensor(&st, &format!("{t}.bytes"));
            let want = f32_tensor(&st, &format!("{t}.f32"));
            let got = dequantize(dtype, bytes, want.len())
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let bad: Vec<usize> = (0..want.len())
                .filter(|&i| !same(got[i], want[i]))
                .collect();
            if let Some(&i) = bad.first() {
                panic!(
                    "{}: {t}: {} of {} values differ; first at {i} (block {}): got {:e} ({:#010x}), want {:e} ({:#010x})",
                    path.display(),
                    bad.len(),
                    want.len(),
                    i / dtype.block_elems(),
                    got[i],
                    got[i].to_bits(),
                    want[i],
                    want[i].to_bits()
                );
            }
            // The per-row entry point must agree with the whole-tensor one, row by row.
            let row = want.len().min(dtype.block_elems() * 4);
            let row_bytes = dtype.bytes_for(row).unwrap();
            let mut scratch = vec![0.0f32; row];
            for (r, src) in bytes.chunks_exact(row_bytes).enumerate() {
                dequantize_into(dtype, src, &mut scratch).unwrap();
                let base = r * row;
                assert!(
                    scratch.iter().zip(&want[base..]).all(|(a, b)| same(*a, *b)),
                    "{t}: row {r} differs from the whole-tensor result"
                );
            }
            checked.push(format!(
                "{}:{t}",
                path.file_name().unwrap().to_string_lossy()
            ));
        }
    }
    eprintln!("dequantization bit-exact for {}", checked.join(", "));
    // The gguf-py fixture alone must cover every type the CPU reference claims to read.
    for dtype in ALL_DEQUANTIZABLE {
        let key = format!("gguf_py_blocks.safetensors:{dtype}");
        assert!(checked.contains(&key), "no gguf-py fixture for {dtype}");
    }
}

const ALL_DEQUANTIZABLE: [DType; 13] = [
    DType::F32,
    DType::F16,
    DType::BF16,
    DType::Q4_0,
    DType::Q4_1,
    DType::Q5_0,
    DType::Q5_1,
    DType::Q8_0,
    DType::Q4K,
    DType::Q5K,
    DType::Q6K,
    DType::Iq4Nl,
    DType::Iq4Xs,
];

#[test]
fn fixture_types_are_the_dequantizable_ones() {
    for dtype in ALL_DEQUANTIZABLE {
        assert!(dtype.is_dequantizable(), "{dtype}");
    }
}

#[test]
fn quantize_matches_fixtures_bit_for_bit() {
    let mut checked = Vec::new();
    for path in fixture_files() {
        let file = std::fs::read(&path).unwrap();
        let st = SafeTensors::deserialize(&file).unwrap();
        for (dtype, t) in types_with(&st, ".quant_src") {
            let src = f32_tensor(&st, &format!("{t}.quant_src"));
            let want = u8_tensor(&st, &format!("{t}.quant_bytes"));
            let got = quantize(dtype, &src).unwrap();
            assert_eq!(got.len(), want.len(), "{t}");
            if let Some(i) = (0..want.len()).find(|&i| got[i] != want[i]) {
                let b = i / dtype.block_bytes();
                panic!(
                    "{}: {t}: quantized bytes differ first at byte {i} (block {b}): got {:02x?}, want {:02x?}",
                    path.display(),
                    &got[b * dtype.block_bytes()..(b + 1) * dtype.block_bytes()],
                    &want[b * dtype.block_bytes()..(b + 1) * dtype.block_bytes()],
                );
            }
            checked.push(dtype);
        }
    }
    eprintln!("quantization bit-exact for {checked:?}");
    assert!(
        checked.contains(&DType::Q8_0),
        "the Q8_0 reference is required"
    );
}
