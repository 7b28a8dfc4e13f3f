//! The DFlash and DSpark drafters on the GPU backends (wgpu; hip, e.g. through the CPU emulator
//! of the CUDA driver) against the CPU backend: `draft_logits`, proposals and DSpark
//! confidences over two cached-KV rounds, ≤ 1e-4 relative. A backend that is not usable here is
//! skipped with a note, unless `DELTASPEC_REQUIRE_GPU=1`.

mod common;

use common::{fixtures, read_safetensors, rel_err};
use deltaspec::backend::{self, Backend, HostTensor};
use deltaspec::model::draft::convert::{OutType, convert_dflash};
use deltaspec::model::draft::{
    DFlash, DSparkConfig, DraftOutput, DraftSession, context_features, names,
};
use deltaspec::model::qwen35::{GraphOptions, LogitRows};
use deltaspec::model::{Qwen35, Session};
use deltaspec::util::rng::Rng;
use std::path::PathBuf;

fn scratch(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("deltaspec-draftgpu-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn gpu(name: &str) -> Option<Box<dyn Backend>> {
    match backend::create(name) {
        Ok(b) => Some(b),
        Err(e) if std::env::var("DELTASPEC_REQUIRE_GPU").as_deref() == Ok("1") => {
            panic!("{name}: {e}")
        }
        Err(e) => {
            eprintln!("skipping {name}: {e}");
            None
        }
    }
}

/// Two rounds on `be`: the first 4 context rows and a draft from t[4], then the rest and a
/// draft from t[n−1].
fn rounds(
    be: &mut dyn Backend,
    t: &Qwen35,
    d: &DFlash,
    f: &[f32],
    tokens: &[u32],
) -> Vec<DraftOutput> {
    let n = tokens.len();
    let w = d.cfg.feature_width();
    let mut ds = DraftSession::new(d, t, be, n - 1 + d.cfg.block_size).unwrap();
    let a = ds.draft(&f[..4 * w], tokens[4]).unwrap();
    let b = ds.draft(&f[4 * w..], tokens[n - 1]).unwrap();
    vec![a, b]
}

fn features(t: &Qwen35, d: &DFlash, ctx: &[u32]) -> Vec<f32> {
    let mut be = backend::create("cpu").unwrap();
    let mut s = Session::new(t, be.as_mut(), ctx.len()).unwrap();
    let opts = GraphOptions {
        logits: LogitRows::Last,
        argmax: false,
        capture: d.cfg.target_layer_ids.clone(),
        read_logits: true,
    };
    let step = s.forward(ctx, &opts).unwrap();
    context_features(d, t, &step, ctx.len()).unwrap()
}

fn compare(tag: &str, got: &[DraftOutput], want: &[DraftOutput]) {
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let err = rel_err(&g.logits, &w.logits);
        println!("{tag} round {i}: draft_logits rel err {err:.3e}");
        assert!(err <= 1e-4, "{tag} round {i}: rel err {err:.3e}");
        assert_eq!(g.tokens, w.tokens, "{tag} round {i}: proposals");
        if !w.confidence.is_empty() {
            let err = rel_err(&g.confidence, &w.confidence);
            println!("{tag} round {i}: confidence rel err {err:.3e}");
            assert!(err <= 1e-4, "{tag} round {i}: confidence rel err {err:.3e}");
            let err = rel_err(&g.raw_logits, &w.raw_logits);
            assert!(err <= 1e-4, "{tag} round {i}: raw logits rel err {err:.3e}");
        }
    }
}

/// A DSpark drafter: dflash-a's backbone plus random Markov and confidence (H + r) heads.
fn with_dspark(mut d: DFlash, vocab: usize) -> DFlash {
    let (h, r) = (d.cfg.hidden, 8);
    let mut rng = Rng::new(77);
    let mut put = |name: &str, shape: &[usize], scale: f32| {
        let n = shape.iter().product();
        d.weights
            .insert(name, HostTensor::from_f32(shape, &rng.vec_normal(n, scale)));
    };
    put(names::MARKOV_W1, &[vocab, r], 0.7);
    put(names::MARKOV_W2, &[vocab, r], 0.7);
    put(names::CONFIDENCE_W, &[1, h + r], 0.3);
    put(names::CONFIDENCE_B, &[1], 0.3);
    d.cfg.dspark = Some(DSparkConfig {
        markov_rank: r,
        vocab,
        confidence_dim: Some(h + r),
    });
    d
}

#[test]
fn drafters_on_gpu_backends_match_cpu() {
    let dir = scratch("match");
    // wgpu with f32 activations (a strict comparison).
    let mut gpus: Vec<(&str, Box<dyn Backend>)> = ["wgpu:f32", "hip"]
        .into_iter()
        .filter_map(|n| gpu(n).map(|b| (n, b)))
        .collect();
    for (name, target, dspark) in [
        ("dflash-a", "tiny-a", false),
        ("dflash-b", "tiny-b", false),
        ("dflash-c", "tiny-a", false),
        ("dflash-a", "tiny-a", true),
    ] {
        let t = Qwen35::load(&fixtures().join("models").join(target)).unwrap();
        let out = dir.join(format!("{name}.gguf"));
        // dflash-b is stored bf16: keep its weights bf16 on the device too.
        let ot = if name == "dflash-b" {
            OutType::BF16
        } else {
            OutType::F32
        };
        convert_dflash(&fixtures().join("drafters").join(name), &out, ot).unwrap();
        let mut d = DFlash::load_for(&out, &t).unwrap();
        if dspark {
            d = with_dspark(d, t.cfg.vocab);
        }
        let r = read_safetensors(
            &fixtures()
                .join("drafters")
                .join(name)
                .join("reference.safetensors"),
        );
        let tokens: Vec<u32> = r["tokens"].1.iter().map(|&v| v as u32).collect();
        let f = features(&t, &d, &tokens[..tokens.len() - 1]);
        let mut cpu = backend::create("cpu").unwrap();
        let want = rounds(cpu.as_mut(), &t, &d, &f, &tokens);
        if !dspark {
            let err = rel_err(&want[1].logits, &r["draft_logits"].1);
            assert!(err <= 1e-4, "{name} cpu vs HF: {err:.3e}");
        }
        let tag = if dspark { "dspark" } else { name };
        for (bn, be) in gpus.iter_mut() {
            let got = rounds(be.as_mut(), &t, &d, &f, &tokens);
            compare(&format!("{tag} on {bn}"), &got, &want);
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Drafts of 3, then 2, 2, 2, 2 new context rows (so the 2-row graph runs once directly, is
/// captured, then replayed on hip), with or without the logits as outputs.
fn repeated(
    be: &mut dyn Backend,
    t: &Qwen35,
    d: &DFlash,
    f: &[f32],
    tokens: &[u32],
    logits: bool,
) -> Vec<DraftOutput> {
    let w = d.cfg.feature_width();
    let rows = f.len() / w;
    let mut ds = DraftSession::new(d, t, be, rows + d.cfg.block_size).unwrap();
    let mut out = Vec::new();
    let mut at = 0;
    for n in [3, 2, 2, 2, 2] {
        let n = n.min(rows - at);
        out.push(
            ds.draft_with(&f[at * w..(at + n) * w], tokens[at + n], logits)
                .unwrap(),
        );
        at += n;
    }
    out
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// Everything but the logits, bit for bit.
fn same_proposals(tag: &str, got: &[DraftOutput], want: &[DraftOutput]) {
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(g.tokens, w.tokens, "{tag} round {i}: proposals");
        assert!(!g.tokens.is_empty(), "{tag} round {i}: no proposals");
        assert_eq!(
            bits(&g.confidence_logit),
            bits(&w.confidence_logit),
            "{tag} round {i}: confidence logits"
        );
    }
}

/// The spec loop's greedy chain drafts without reading the logits back: same proposals and
/// confidences as with them, on the CPU and on hip. On hip, captured-and-replayed draft graphs
/// give exactly what launching node by node gives (logits included), and a logit-free draft
/// reads back only a few bytes.
#[test]
fn logit_free_and_replayed_drafts_are_bit_identical() {
    let dir = scratch("replay");
    let t = Qwen35::load(&fixtures().join("models").join("tiny-a")).unwrap();
    let out = dir.join("dflash-a.gguf");
    convert_dflash(
        &fixtures().join("drafters").join("dflash-a"),
        &out,
        OutType::F32,
    )
    .unwrap();
    let r = read_safetensors(
        &fixtures()
            .join("drafters")
            .join("dflash-a")
            .join("reference.safetensors"),
    );
    let tokens: Vec<u32> = r["tokens"].1.iter().map(|&v| v as u32).collect();
    for dspark in [false, true] {
        let d = if dspark {
            with_dspark(DFlash::load_for(&out, &t).unwrap(), t.cfg.vocab)
        } else {
            DFlash::load_for(&out, &t).unwrap()
        };
        let tag = if dspark { "dspark" } else { "dflash" };
        let f = features(&t, &d, &tokens[..tokens.len() - 1]);
        let mut cpu = backend::create("cpu").unwrap();
        let with = repeated(cpu.as_mut(), &t, &d, &f, &tokens, true);
        let without = repeated(cpu.as_mut(), &t, &d, &f, &tokens, false);
        same_proposals(&format!("{tag} cpu"), &without, &with);
        assert!(
            without
                .iter()
                .all(|o| o.logits.is_empty() && o.raw_logits.is_empty())
        );
        assert!(with.iter().all(|o| !o.logits.is_empty()));
        if dspark {
            assert!(with.iter().all(|o| !o.confidence_logit.is_empty()));
        }

        let Some(mut direct) = common::open_hip("logit_free_and_replayed_drafts") else {
            continue;
        };
        direct.set_graphs(false);
        let want = repeated(&mut direct, &t, &d, &f, &tokens, true);
        compare(&format!("{tag} hip direct"), &want, &with);
        let Some(mut replay) = common::open_hip("logit_free_and_replayed_drafts") else {
            continue;
        };
        if !replay.graphs_active() {
            eprintln!("{}: no graph capture, replay half skipped", replay.name());
            continue;
        }
        let got = repeated(&mut replay, &t, &d, &f, &tokens, true);
        let s = replay.graph_stats();
        assert!(s.captures >= 1 && s.replays >= 2, "{tag}: {s:?}");
        same_proposals(&format!("{tag} hip replay"), &got, &want);
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(bits(&g.logits), bits(&w.logits), "{tag} round {i}: logits");
            assert_eq!(bits(&g.raw_logits), bits(&w.raw_logits), "{tag} round {i}");
        }
        let io0 = replay.run_io();
        let got = repeated(&mut replay, &t, &d, &f, &tokens, false);
        let io = replay.run_io();
        same_proposals(&format!("{tag} hip logit-free"), &got, &want);
        // Per run: the proposals (B−1 i32, one readback per Markov step with DSpark) and the
        // confidence logits; never a vocab-wide row.
        let per_run = (io.readback_bytes - io0.readback_bytes) / (io.runs - io0.runs);
        assert!(
            per_run < (t.cfg.vocab * 4) as u64,
            "{tag}: {per_run} B read back per logit-free draft"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
