//! Whole-model check: a synthetic tiny `qwen35` GGUF (and the HF-derived fixture) through
//! `Session` on wgpu vs the CPU reference, prefill (T = 7, every logits row) and decode steps.
//! Also reports the dispatch count of one decode step.

mod common;

use common::{fixtures, rel_err};
use deltaspec::backend::wgpu::{WgpuBackend, WgpuOptions};
use deltaspec::backend::{self, Backend};
use deltaspec::graph::{Graph, Op};
use deltaspec::model::qwen35::{GraphOptions, LogitRows};
use deltaspec::model::{LayerKind, Qwen35, Session, synth};
use std::path::Path;

/// The wgpu backend with f32 activations (strict comparisons) or int8 activations.
fn wgpu(int8: bool) -> Option<Box<dyn Backend>> {
    match WgpuBackend::with_options(WgpuOptions {
        int8_matmul: Some(int8),
        ..Default::default()
    }) {
        Ok(b) => Some(Box::new(b)),
        Err(e) => {
            eprintln!("skipped: no wgpu adapter ({e})");
            None
        }
    }
}

fn argmax(v: &[f32]) -> usize {
    let mut best = 0;
    for (i, x) in v.iter().enumerate() {
        if *x > v[best] {
            best = i;
        }
    }
    best
}

/// Prefill `prompt` with every logits row, then greedy-decode `steps` tokens, on both
/// backends; logits within `tol` and the same argmax at every row.
fn compare(m: &Qwen35, prompt: &[u32], steps: usize, tol: f64, label: &str) {
    compare_on(false, m, prompt, steps, tol, label)
}

/// [`compare`] with int8 activations on wgpu (`int8`).
fn compare_on(int8: bool, m: &Qwen35, prompt: &[u32], steps: usize, tol: f64, label: &str) {
    compare_ctx(int8, 64, m, prompt, steps, tol, label)
}

/// [`compare_on`] with caches of `ctx` rows (above 256 attention runs split over the cache and
/// its combine kernel writes the output).
fn compare_ctx(
    int8: bool,
    ctx: usize,
    m: &Qwen35,
    prompt: &[u32],
    steps: usize,
    tol: f64,
    label: &str,
) {
    let Some(mut gpu) = wgpu(int8) else { return };
    let mut cpu = backend::create("cpu").unwrap();
    let mut a = Session::new(m, cpu.as_mut(), ctx).unwrap();
    let mut b = Session::new(m, gpu.as_mut(), ctx).unwrap();
    let all = GraphOptions {
        logits: LogitRows::All,
        ..Default::default()
    };
    let vocab = m.cfg.vocab;
    let want = a.forward(prompt, &all).unwrap();
    let got = b.forward(prompt, &all).unwrap();
    let e = rel_err(&got.logits, &want.logits);
    assert!(e <= tol, "{label}: prefill logits relative error {e:e}");
    for (r, (w, g)) in want
        .logits
        .chunks(vocab)
        .zip(got.logits.chunks(vocab))
        .enumerate()
    {
        same_top(int8, w, g, &format!("{label}: prefill row {r}"));
    }
    eprintln!("{label}: prefill T={} rel err {e:e}", prompt.len());
    let last = GraphOptions {
        logits: LogitRows::Last,
        argmax: true,
        capture: Vec::new(),
        read_logits: true,
    };
    let mut tok = argmax(&want.logits[(prompt.len() - 1) * vocab..]) as u32;
    for step in 0..steps {
        let w = a.forward(&[tok], &last).unwrap();
        let g = b.forward(&[tok], &last).unwrap();
        let e = rel_err(&g.logits, &w.logits);
        assert!(
            e <= tol,
            "{label}: decode step {step} logits relative error {e:e}"
        );
        same_top(
            int8,
            &w.logits,
            &g.logits,
            &format!("{label}: decode step {step}"),
        );
        if !int8 {
            assert_eq!(w.argmax, g.argmax, "{label}: decode step {step} argmax");
        }
        eprintln!("{label}: decode step {step} rel err {e:e}");
        tok = w.argmax[0];
    }
}

/// The same argmax in `want` and `got`; with int8 activations (`near_ties`) a different one
/// only where the reference's two candidates lie within the row's largest logit error of each
/// other (a near tie the activation rounding may flip; the random tiny models have many).
fn same_top(near_ties: bool, want: &[f32], got: &[f32], label: &str) {
    let (aw, ag) = (argmax(want), argmax(got));
    if aw == ag {
        return;
    }
    let err = want
        .iter()
        .zip(got)
        .fold(0.0f32, |m, (w, g)| m.max((w - g).abs()));
    let gap = want[aw] - want[ag];
    assert!(
        near_ties && gap <= 2.0 * err,
        "{label}: argmax {ag}, want {aw} (reference gap {gap:e}, largest logit error {err:e})"
    );
    eprintln!("{label}: near tie {aw}/{ag} flipped (gap {gap:e} ≤ 2 · {err:e})");
}

fn synth_model(recipe: synth::Recipe, seed: u64) -> Qwen35 {
    let dir = std::env::temp_dir().join(format!("deltaspec-wgpu-model-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // A file per call: tests on parallel threads of this process synthesize the same recipe,
    // and rewriting a file another test has mapped kills the process with SIGBUS.
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = dir.join(format!("tiny-{recipe:?}-{seed}-{call}.gguf"));
    synth::write(&synth::preset("tiny").unwrap(), recipe, seed, &path).unwrap();
    let m = Qwen35::load(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    m
}

const PROMPT: [u32; 7] = [1, 100, 7, 311, 42, 5, 499];

#[test]
fn synthetic_tiny_q8_0() {
    let m = synth_model(synth::Recipe::Q8_0, 1);
    compare(&m, &PROMPT, 4, 1e-4, "tiny Q8_0");
}

#[test]
fn synthetic_tiny_q4_k_m_and_iq4_xs() {
    for (recipe, seed) in [(synth::Recipe::Q4KM, 2), (synth::Recipe::Iq4Xs, 3)] {
        let m = synth_model(recipe, seed);
        compare(&m, &PROMPT, 2, 1e-4, &format!("tiny {recipe:?}"));
    }
}

#[test]
fn synthetic_tiny_models_with_int8_activations() {
    // Int8 activations change every matmul input by up to half a quantization step: logits
    // stay within 5e-2 of the f32 CPU reference and the greedy tokens agree.
    for (recipe, seed) in [
        (synth::Recipe::Q8_0, 1),
        (synth::Recipe::Q4KM, 2),
        (synth::Recipe::Iq4Xs, 3),
    ] {
        let m = synth_model(recipe, seed);
        compare_on(true, &m, &PROMPT, 3, 5e-2, &format!("tiny {recipe:?} int8"));
    }
}

#[test]
fn int8_activations_with_split_attention() {
    // 1024 cache rows: four attention splits, so the combine kernel writes the attention
    // output and quantizes it (times its gate) for o_proj.
    let m = synth_model(synth::Recipe::Q8_0, 5);
    compare_ctx(true, 1024, &m, &PROMPT, 3, 5e-2, "tiny Q8_0 int8 ctx 1024");
}

#[test]
fn hf_fixture_model() {
    let path = fixtures().join("models/tiny-b/model-f32.gguf");
    if !Path::new(&path).exists() {
        eprintln!("skipped: {} is missing", path.display());
        return;
    }
    let m = Qwen35::load(&path).unwrap();
    let prompt: Vec<u32> = (0..7).map(|i| (i * 91 % 256) as u32).collect();
    compare(&m, &prompt, 3, 1e-4, "tiny-b f32");
}

/// Dispatches of `g` compiled with the given switches (`None` without an adapter).
fn count_with(g: &Graph, no_fusion: bool, int8: bool, norm_q8: bool) -> Option<usize> {
    let mut gpu = match WgpuBackend::with_options(WgpuOptions {
        no_fusion,
        int8_matmul: Some(int8),
        norm_q8: Some(norm_q8),
        ..Default::default()
    }) {
        Ok(g) => g,
        Err(e) => {
            eprintln!("skipped: no wgpu adapter ({e})");
            return None;
        }
    };
    let exe = gpu.compile(g).unwrap();
    if std::env::var_os("DELTASPEC_LIST_DISPATCHES").is_some() {
        eprintln!(
            "dispatches (fusion {}, int8 {int8}, norm_q8 {norm_q8}):",
            !no_fusion
        );
        for l in gpu.dispatch_labels(exe).unwrap() {
            eprintln!("  {l}");
        }
    }
    gpu.dispatch_count(exe)
}

#[test]
fn decode_step_dispatch_count() {
    let m = synth_model(synth::Recipe::Q8_0, 4);
    let opts = GraphOptions {
        logits: LogitRows::Last,
        argmax: true,
        capture: Vec::new(),
        read_logits: true,
    };
    let g = m.step_graph(1, 64, &opts).unwrap();
    let count = |no_fusion: bool| count_with(&g, no_fusion, false, false);
    let (Some(fused), Some(plain)) = (count(false), count(true)) else {
        return;
    };
    let nodes = g.nodes.len();
    let views = g
        .nodes
        .iter()
        .filter(|n| matches!(n.op, Op::Reshape { .. }))
        .count();
    eprintln!(
        "tiny decode step ({} layers): {nodes} nodes ({views} reshapes) -> {plain} dispatches, {fused} fused",
        m.cfg.n_layers
    );
    assert!(plain <= 2 * nodes, "{plain} dispatches for {nodes} nodes");
    // Per DeltaNet layer qkv/z/β/α become one dispatch (−3) that also runs the conv step (−1)
    // and gate/up/SwiGLU one (−2); per
    // attention layer q/k/v one (−2) that also writes the query/gate halves (−2), gate/up/SwiGLU
    // one (−2), the output gate is folded into o_proj (−1), and the q/k norms, ropes and cache
    // writes are one dispatch (−4).
    let gdn = m
        .cfg
        .layers
        .iter()
        .filter(|k| **k == LayerKind::DeltaNet)
        .count();
    let attn = m.cfg.n_layers - gdn;
    assert_eq!(fused, plain - 6 * gdn - 11 * attn);
    // Int8 activations: the norms before the fused projections and the DeltaNet gated norm
    // before out_proj quantize for their GEMVs (the final norm reaches the lm_head through the
    // last-row copy, which keeps its quantize dispatch).
    let (Some(q8), Some(sep)) = (
        count_with(&g, false, true, true),
        count_with(&g, false, true, false),
    ) else {
        return;
    };
    eprintln!("int8: {sep} dispatches, {q8} with norm+quantize");
    assert_eq!(q8, sep - 3 * gdn - 2 * attn);
}

#[test]
fn verify_rows_equal_decode_steps_bit_for_bit() {
    // Greedy speculation is lossless only if a verify step's row i has the bits of the decode
    // step at the same position: with 1024 cache rows the attention runs split (its causal
    // and verify queries share kv-head tiles in `attn_nc`), and its combine quantizes the
    // gated output; f32 and int8 activations.
    let m = synth_model(synth::Recipe::Q8_0, 5);
    for int8 in [false, true] {
        let Some(mut gpu) = wgpu(int8) else { return };
        common::assert_verify_rows_equal_decode_steps(
            &m,
            gpu.as_mut(),
            1024,
            &PROMPT,
            &[3, 250, 17, 404, 9],
            &format!("int8 {int8}"),
        );
    }
}

/// Greedy decode step by step on `be`: `n` tokens after `prompt` (as `generate_greedy`
/// without pipelining), then the logits of one more step on `extra` (the state it left).
fn stepwise(
    m: &Qwen35,
    be: &mut dyn Backend,
    prompt: &[u32],
    n: usize,
    extra: u32,
) -> (Vec<u32>, usize, Vec<f32>) {
    let opts = GraphOptions {
        logits: LogitRows::Last,
        argmax: true,
        capture: Vec::new(),
        read_logits: true,
    };
    let mut s = Session::new(m, be, 64).unwrap();
    let mut tok = s.forward(prompt, &opts).unwrap().argmax[0];
    let mut out = vec![tok];
    while out.len() < n {
        tok = s.forward(&[tok], &opts).unwrap().argmax[0];
        out.push(tok);
    }
    let pos = s.pos();
    let logits = s.forward(&[extra], &opts).unwrap().logits;
    (out, pos, logits)
}

#[test]
fn pipelined_greedy_decode_equals_stepwise_decode() {
    // wgpu queues the step after the next before reading a token back, the token taken from
    // the previous step's argmax on the device: same tokens, bit for bit, and the same state
    // afterwards (a step from it gives the same logits); a stop token ends the output where
    // the stepwise decode would, with its own step consumed.
    let m = synth_model(synth::Recipe::Q8_0, 3);
    let Some(mut gpu) = wgpu(true) else { return };
    assert!(gpu.pipelines());
    let opts = GraphOptions {
        logits: LogitRows::Last,
        argmax: true,
        capture: Vec::new(),
        read_logits: true,
    };
    for n in [1, 2, 3, 9] {
        let (want, want_pos, want_logits) = stepwise(&m, gpu.as_mut(), &PROMPT, n, 77);
        let mut s = Session::new(&m, gpu.as_mut(), 64).unwrap();
        let got = s.generate_greedy(&PROMPT, n, 512, None, |_| {}).unwrap();
        assert_eq!(got, want, "n {n}");
        // Every returned token but the last is consumed.
        assert_eq!(s.pos(), PROMPT.len() + n - 1, "n {n}");
        assert_eq!(s.pos(), want_pos);
        let logits = s.forward(&[77], &opts).unwrap().logits;
        assert_eq!(logits, want_logits, "n {n}: the state after the decode");
    }
    // A stop token: the fourth token of the free run.
    let (free, _, _) = stepwise(&m, gpu.as_mut(), &PROMPT, 9, 77);
    let stop = free[3];
    let cut = free.iter().position(|&t| t == stop).unwrap() + 1;
    let (_, _, want_logits) = stepwise(&m, gpu.as_mut(), &PROMPT, cut + 1, 77);
    let mut s = Session::new(&m, gpu.as_mut(), 64).unwrap();
    let got = s
        .generate_greedy(&PROMPT, 9, 512, Some(stop), |_| {})
        .unwrap();
    assert_eq!(got, free[..cut]);
    // The step consuming the stop token was queued: the state covers it.
    assert_eq!(s.pos(), PROMPT.len() + cut);
    assert_eq!(s.forward(&[77], &opts).unwrap().logits, want_logits);
}

#[test]
fn capturing_features_leaves_the_decode_logits_bit_for_bit() {
    // A spec loop's plain steps capture the drafter's feature layers; the AR baseline's steps
    // capture nothing. Greedy speculation is lossless only if both give the same bits.
    let m = synth_model(synth::Recipe::Q8_0, 6);
    let Some(mut gpu) = wgpu(true) else { return };
    let n = m.cfg.n_layers;
    let run = |gpu: &mut dyn Backend, capture: Vec<usize>| {
        let opts = GraphOptions {
            logits: LogitRows::Last,
            argmax: true,
            capture,
            read_logits: true,
        };
        let mut s = Session::new(&m, gpu, 64).unwrap();
        let mut out = vec![s.forward(&PROMPT, &opts).unwrap().logits];
        for t in [3u32, 250, 17, 404, 9] {
            out.push(s.forward(&[t], &opts).unwrap().logits);
        }
        out
    };
    let plain = run(gpu.as_mut(), Vec::new());
    for capture in [vec![0], vec![1, n - 1], (0..n).collect()] {
        let got = run(gpu.as_mut(), capture.clone());
        for (i, (a, b)) in plain.iter().zip(&got).enumerate() {
            let same = a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits());
            assert!(same, "capture {capture:?}: step {i} differs");
        }
    }
}

/// The row tiles a DDTree trims its budget to (`spec::tree::tile_budget`), and reserves, so
/// that a verify padded to the reserved width stops at a tile: the GEMV buckets, then one
/// more widest-bucket pass per 8 rows (int8) or the tiled kernel's tiles (f32).
#[test]
fn step_row_tiles_follow_the_gemv_passes() {
    let (Some(int8), Some(f32)) = (wgpu(true), wgpu(false)) else {
        return;
    };
    assert_eq!(
        int8.step_row_tiles(),
        [1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64]
    );
    assert_eq!(f32.step_row_tiles(), [1, 2, 4, 8, 16, 32, 64]);
}
