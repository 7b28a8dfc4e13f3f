//! Shared helpers for integration tests.
#![allow(dead_code)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};

pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// ‖a − b‖ / ‖b‖ in f64.
pub fn rel_err(a: &[f32], b: &[f32]) -> f64 {
    assert_eq!(a.len(), b.len(), "length mismatch");
    let (mut num, mut den) = (0.0f64, 0.0f64);
    for (x, y) in a.iter().zip(b) {
        let d = *x as f64 - *y as f64;
        num += d * d;
        den += (*y as f64) * (*y as f64);
    }
    (num / den.max(1e-30)).sqrt()
}

/// Index of the maximum of each row.
pub fn argmax_rows(v: &[f32], width: usize) -> Vec<usize> {
    v.chunks(width)
        .map(|r| {
            let mut best = 0;
            for (i, x) in r.iter().enumerate() {
                if *x > r[best] {
                    best = i;
                }
            }
            best
        })
        .collect()
}

/// Every tensor of a safetensors file as f32 (F32/I32/I64 sources) with its shape.
pub fn read_safetensors(path: &Path) -> HashMap<String, (Vec<usize>, Vec<f32>)> {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    st.tensors()
        .into_iter()
        .map(|(name, v)| {
            let d = v.data();
            let vals: Vec<f32> = match v.dtype() {
                safetensors::Dtype::F32 => d
                    .chunks_exact(4)
                    .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
                    .collect(),
                safetensors::Dtype::I32 => d
                    .chunks_exact(4)
                    .map(|b| i32::from_le_bytes(b.try_into().unwrap()) as f32)
                    .collect(),
                safetensors::Dtype::I64 => d
                    .chunks_exact(8)
                    .map(|b| i64::from_le_bytes(b.try_into().unwrap()) as f32)
                    .collect(),
                safetensors::Dtype::U8 => d.iter().map(|b| *b as f32).collect(),
                other => panic!("{name}: dtype {other:?} not handled in tests"),
            };
            (name, (v.shape().to_vec(), vals))
        })
        .collect()
}

/// Opens the native GPU backend, or says why the test is skipped: `None` when no driver library
/// loads, a panic instead under `DELTASPEC_REQUIRE_GPU=1` (the GPU machine, where a backend
/// that does not open is a failure).
pub fn open_hip(test: &str) -> Option<deltaspec::backend::hip::HipBackend> {
    use deltaspec::backend::hip::{HipBackend, Which};
    match HipBackend::open(Which::Any) {
        Ok(b) => Some(b),
        Err(e) => {
            if require_gpu() {
                panic!("{test}: hip backend unavailable but DELTASPEC_REQUIRE_GPU=1: {e}");
            }
            eprintln!("SKIP {test}: hip backend unavailable: {e}");
            None
        }
    }
}

/// True on the GPU machine (`DELTASPEC_REQUIRE_GPU=1`): skips become failures.
pub fn require_gpu() -> bool {
    std::env::var("DELTASPEC_REQUIRE_GPU").is_ok_and(|v| v == "1")
}

/// The f32 values of a host tensor.
pub fn f32s(t: &deltaspec::backend::HostTensor) -> Vec<f32> {
    t.bytes()
        .chunks_exact(4)
        .map(bytemuck::pod_read_unaligned)
        .collect()
}

pub mod sampling;

/// Logits of every row of one CPU forward of `tokens` on a fresh session: the loader tests
/// compare files that must give the same model.
pub fn cpu_logits(m: &deltaspec::model::Qwen35, tokens: &[u32]) -> Vec<f32> {
    use deltaspec::model::qwen35::{GraphOptions, LogitRows};
    let mut be = deltaspec::backend::create("cpu").unwrap();
    let mut s = deltaspec::model::Session::new(m, be.as_mut(), tokens.len() + 1).unwrap();
    let opts = GraphOptions {
        logits: LogitRows::All,
        ..Default::default()
    };
    s.forward(tokens, &opts).unwrap().logits
}

/// Asserts that a verify step (every logits row) over `toks` after `prompt` gives each row the
/// bits of the decode step at its position, on a session of `cap` rows of `be`: what lossless
/// greedy speculation relies on.
pub fn assert_verify_rows_equal_decode_steps(
    m: &deltaspec::model::Qwen35,
    be: &mut dyn deltaspec::backend::Backend,
    cap: usize,
    prompt: &[u32],
    toks: &[u32],
    label: &str,
) {
    use deltaspec::model::qwen35::{GraphOptions, LogitRows};
    let vocab = m.cfg.vocab;
    let mut s = deltaspec::model::Session::new(m, be, cap).unwrap();
    let last = GraphOptions {
        logits: LogitRows::Last,
        ..Default::default()
    };
    s.forward(prompt, &last).unwrap();
    let snap = s.snapshot().unwrap();
    let steps: Vec<Vec<f32>> = toks
        .iter()
        .map(|&t| s.forward(&[t], &last).unwrap().logits)
        .collect();
    s.restore(&snap).unwrap();
    let verify = s.forward(toks, &GraphOptions::default()).unwrap().logits;
    s.release(snap).unwrap();
    for (i, step) in steps.iter().enumerate() {
        let row = &verify[i * vocab..(i + 1) * vocab];
        let same = row
            .iter()
            .zip(step)
            .all(|(a, b)| a.to_bits() == b.to_bits());
        assert!(same, "{label}: verify row {i} differs from its decode step");
    }
}

/// The error loading `path` as a target model gives (a panic if it loads).
pub fn target_load_err(path: &Path) -> String {
    match deltaspec::model::Qwen35::load(path) {
        Ok(_) => panic!("{} loaded", path.display()),
        Err(e) => e.to_string(),
    }
}

/// Writes the `tiny` synthetic model with Q8_0 weights (seed 7) to `dir/name` and loads it. One
/// file per caller: tests on parallel threads of one process must not rewrite a file another
/// has mapped (SIGBUS, seen on the H200).
#[allow(dead_code)] // not every test binary uses it
pub fn tiny_q8_0(dir: &Path, name: &str) -> deltaspec::model::Qwen35 {
    use deltaspec::model::synth;
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join(name);
    synth::write(
        &synth::preset("tiny").unwrap(),
        synth::Recipe::Q8_0,
        7,
        &path,
    )
    .unwrap();
    deltaspec::model::Qwen35::load(&path).unwrap()
}

/// The `deltaspec` binary the CLI tests run: `$DELTASPEC_BIN` where set, else the one cargo
/// built. Test binaries copied to another machine (the GPU machine of `tools/device/`, whose
/// scripts set it to the carried binary) cannot reach the build machine's path.
pub fn deltaspec_bin() -> PathBuf {
    std::env::var_os("DELTASPEC_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_deltaspec")))
}
