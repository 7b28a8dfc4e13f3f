//! The Qwen3.5 target on the CPU backend against the external oracles' fixtures
//! (tests/fixtures/models, made by tools/oracle with HF transformers 5.23 and llama.cpp's
//! converter and quantizer).
//!
//! - HF safetensors and llama.cpp's f32/bf16 GGUFs vs transformers' logits: ≤ 1e-5 relative.
//! - llama.cpp-quantized GGUFs vs transformers run on the GGUF's own dequantized weights
//!   (`reference-<quant>.safetensors`): ≤ 1e-5 relative.
//!
//! Both the prefill path and the decode path (prefill K, then one token at a time).

mod common;

use common::{argmax_rows, fixtures, read_safetensors, rel_err};
use deltaspec::backend;
use deltaspec::model::qwen35::{GraphOptions, LogitRows};
use deltaspec::model::{Qwen35, Session};
use std::path::{Path, PathBuf};

const TOL: f64 = 1e-5;

struct Reference {
    ids: Vec<u32>,
    logits: Vec<f32>,
    logits_decode: Option<(usize, Vec<f32>)>,
    hidden: Vec<Vec<f32>>,
}

fn load_reference(path: &Path) -> Reference {
    let r = read_safetensors(path);
    let ids = r["input_ids"].1.iter().map(|v| *v as u32).collect();
    let mut hidden = Vec::new();
    while let Some((_, h)) = r.get(&format!("hidden_states.{}", hidden.len())) {
        hidden.push(h.clone());
    }
    let logits_decode = r
        .get("logits_decode")
        .map(|(_, l)| (r["decode_prefill_len"].1[0] as usize, l.clone()));
    Reference {
        ids,
        logits: r["logits"].1.clone(),
        logits_decode,
        hidden,
    }
}

/// Runs the model over the reference ids (prefill, or prefill K + decode) and returns the
/// logits and the captured layer outputs.
fn run(m: &Qwen35, ids: &[u32], decode_from: Option<usize>) -> (Vec<f32>, Vec<(usize, Vec<f32>)>) {
    let mut be = backend::create("cpu").unwrap();
    let mut s = Session::new(m, be.as_mut(), ids.len()).unwrap();
    let k = decode_from.unwrap_or(ids.len());
    let opts = GraphOptions {
        logits: LogitRows::All,
        argmax: false,
        capture: (0..m.cfg.n_layers).collect(),
        read_logits: true,
    };
    let first = s.forward(&ids[..k], &opts).unwrap();
    let mut logits = first.logits;
    for &t in &ids[k..] {
        logits.extend(s.forward(&[t], &opts).unwrap().logits);
    }
    (logits, first.hidden)
}

fn check(model_path: &Path, reference: &Path) {
    let m = Qwen35::load(model_path).unwrap_or_else(|e| panic!("{}: {e}", model_path.display()));
    let r = load_reference(reference);
    let vocab = m.cfg.vocab;
    let name = format!(
        "{} vs {}",
        model_path
            .strip_prefix(fixtures())
            .unwrap_or(model_path)
            .display(),
        reference.file_name().unwrap().to_string_lossy()
    );

    let (logits, hidden) = run(&m, &r.ids, None);
    let e = rel_err(&logits, &r.logits);
    let same_argmax = argmax_rows(&logits, vocab) == argmax_rows(&r.logits, vocab);
    println!("{name}: prefill rel err {e:.3e}, argmax equal: {same_argmax}");
    assert!(e <= TOL, "{name}: prefill logits rel err {e:.3e} > {TOL:e}");
    assert!(same_argmax, "{name}: prefill argmax differs");

    // HF hidden_states[i + 1] is layer i's output for i < L − 1 (the last is post-norm).
    for (layer, h) in &hidden {
        if layer + 1 < m.cfg.n_layers && layer + 1 < r.hidden.len() {
            let e = rel_err(h, &r.hidden[layer + 1]);
            assert!(e <= TOL, "{name}: layer {layer} output rel err {e:.3e}");
        }
    }

    if let Some((k, ref_dec)) = &r.logits_decode {
        let (logits, _) = run(&m, &r.ids, Some(*k));
        let e = rel_err(&logits, ref_dec);
        println!("{name}: decode path (prefill {k}) rel err {e:.3e}");
        assert!(
            e <= TOL,
            "{name}: decode-path logits rel err {e:.3e} > {TOL:e}"
        );
        assert_eq!(
            argmax_rows(&logits, vocab),
            argmax_rows(ref_dec, vocab),
            "{name}: decode argmax"
        );
    }
}

fn model_dirs() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(fixtures().join("models"))
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.path())
                .filter(|p| p.join("config.json").exists())
                .collect()
        })
        .unwrap_or_default();
    dirs.sort();
    assert!(
        !dirs.is_empty(),
        "no model fixtures under tests/fixtures/models"
    );
    dirs
}

#[test]
fn hf_checkpoints_match_transformers() {
    for d in model_dirs() {
        check(&d, &d.join("reference.safetensors"));
    }
}

#[test]
fn llamacpp_float_ggufs_match_transformers() {
    let mut n = 0;
    for d in model_dirs() {
        for f in ["model-f32.gguf", "model-bf16.gguf"] {
            let reference = if f == "model-bf16.gguf" {
                d.join("reference-bf16.safetensors")
            } else {
                d.join("reference.safetensors")
            };
            if d.join(f).exists() && reference.exists() {
                check(&d.join(f), &reference);
                n += 1;
            }
        }
    }
    assert!(n > 0, "no llama.cpp float GGUF fixtures found");
}

#[test]
fn llamacpp_quantized_ggufs_match_dequantized_reference() {
    let mut n = 0;
    for d in model_dirs() {
        for q in ["q8_0", "q6_k", "q4_k_m", "iq4_xs"] {
            let (f, r) = (
                d.join(format!("model-{q}.gguf")),
                d.join(format!("reference-{q}.safetensors")),
            );
            if f.exists() && r.exists() {
                check(&f, &r);
                n += 1;
            }
        }
    }
    assert!(n > 0, "no quantized GGUF fixtures found");
}
