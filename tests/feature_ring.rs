//! The drafter's per-sequence feature ring (bf16 / f16 / f32 rows by position) in use:
//! drafts from bf16 / f16 features stay within a stated tolerance of f32 features; a drafter
//! whose every layer is windowed keeps only window + block rows and skips the rest, with the
//! same proposals as an unbounded ring and greedy speculation still lossless.

mod common;

use common::{fixtures, rel_err};
use deltaspec::backend::{self, Backend};
use deltaspec::model::draft::convert::{OutType, convert_dflash};
use deltaspec::model::draft::{DFlash, DraftSession, FeatureDtype, FeatureRing, context_features};
use deltaspec::model::qwen35::{GraphOptions, LogitRows};
use deltaspec::model::{Qwen35, Session};
use deltaspec::spec::dflash::DFlashDrafter;
use deltaspec::spec::{RollbackMode, SpecConfig, SpecMode, SpecOutput, generate_spec};
use deltaspec::util::rng::Rng;
use std::path::PathBuf;

fn scratch(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("deltaspec-ring-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn load(name: &str, target: &str, dir: &std::path::Path) -> (DFlash, Qwen35) {
    let out = dir.join(format!("{name}.gguf"));
    convert_dflash(&fixtures().join("drafters").join(name), &out, OutType::F32).unwrap();
    let t = Qwen35::load(&fixtures().join("models").join(target)).unwrap();
    (DFlash::load_for(&out, &t).unwrap(), t)
}

/// Drafts from features stored bf16 / f16 vs f32, over a 24-row context committed in two
/// pieces. Stated tolerance: relative L2 error of the draft logits ≤ 2e-2 (bf16), 2e-3 (f16).
#[test]
fn drafts_from_half_features_stay_close_to_f32() {
    let dir = scratch("half");
    for (name, target) in [("dflash-a", "tiny-a"), ("dflash-b", "tiny-b")] {
        let (d, t) = load(name, target, &dir);
        let mut rng = Rng::new(4);
        let ctx: Vec<u32> = (0..25).map(|_| rng.below(t.cfg.vocab) as u32).collect();
        let mut be = backend::create("cpu").unwrap();
        let feats = {
            let mut s = Session::new(&t, be.as_mut(), ctx.len()).unwrap();
            let opts = GraphOptions {
                logits: LogitRows::Last,
                argmax: false,
                capture: d.cfg.target_layer_ids.clone(),
                read_logits: true,
            };
            let step = s.forward(&ctx[..24], &opts).unwrap();
            context_features(&d, &t, &step, 24).unwrap()
        };
        let w = d.cfg.feature_width();
        let run = |be: &mut dyn Backend, dt: FeatureDtype| {
            let mut ring = FeatureRing::for_drafter(&d.cfg, dt);
            let mut ds = DraftSession::new(&d, &t, be, 24 + d.cfg.block_size).unwrap();
            ring.push(&feats[..10 * w]).unwrap();
            let a = ds.draft(&ring.read(0, 10).unwrap(), ctx[10]).unwrap();
            ring.push(&feats[10 * w..]).unwrap();
            let b = ds.draft(&ring.read(10, 24).unwrap(), ctx[24]).unwrap();
            [a.logits, b.logits].concat()
        };
        let want = run(be.as_mut(), FeatureDtype::F32);
        for (dt, tol) in [(FeatureDtype::Bf16, 2e-2), (FeatureDtype::F16, 2e-3)] {
            let got = run(be.as_mut(), dt);
            let err = rel_err(&got, &want);
            println!(
                "{name} {}: draft logits rel err {err:.3e} (tolerance {tol:.0e})",
                dt.name()
            );
            assert!(err <= tol, "{name} {}: rel err {err:.3e}", dt.name());
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

fn spec(
    be: &mut dyn Backend,
    m: &Qwen35,
    d: &mut DFlashDrafter,
    prompt: &[u32],
    n: usize,
) -> SpecOutput {
    let mut s = Session::new(m, be, prompt.len() + n).unwrap();
    let cfg = SpecConfig {
        n,
        chunk: 5,
        mode: SpecMode::Chain,
        rollback: RollbackMode::PerTokenStates,
        ..Default::default()
    };
    generate_spec(&mut s, d, prompt, &cfg, |_| {}, |_| {}).unwrap()
}

/// dflash-b with both layers windowed (window 3): the ring holds window + block = 11 rows and
/// the drafter skips rows that fell out of it. Proposals equal those of an unbounded ring
/// (the window never reads the skipped rows), and speculation equals plain greedy.
#[test]
fn windowed_drafter_ring_skips_old_rows_losslessly() {
    let dir = scratch("window");
    let (mut d, t) = load("dflash-b", "tiny-b", &dir);
    d.cfg.sliding_layers = vec![true; d.cfg.n_layers];
    assert_eq!(d.cfg.window(0), 3);
    let ring = FeatureRing::for_drafter(&d.cfg, FeatureDtype::F32);
    assert_eq!(ring.capacity(), Some(3 + d.cfg.block_size));
    let mut be = backend::create("cpu").unwrap();
    let mut rng = Rng::new(12);
    for p in 0..3 {
        let prompt: Vec<u32> = (0..15 + 4 * p)
            .map(|_| rng.below(t.cfg.vocab) as u32)
            .collect();
        let n = 20;
        let want = {
            let mut s = Session::new(&t, be.as_mut(), prompt.len() + n).unwrap();
            s.generate_greedy(&prompt, n, 512, None, |_| {}).unwrap()
        };
        let mk = |ring: FeatureRing| {
            let m = DFlash {
                cfg: d.cfg.clone(),
                weights: d.weights.clone(),
            };
            DFlashDrafter::new(m, &t).unwrap().with_feature_ring(ring)
        };
        let mut bounded = mk(FeatureRing::for_drafter(&d.cfg, FeatureDtype::F32));
        let mut unbounded = mk(FeatureRing::new(
            d.cfg.feature_width(),
            None,
            FeatureDtype::F32,
        ));
        let a = spec(be.as_mut(), &t, &mut bounded, &prompt, n);
        let b = spec(be.as_mut(), &t, &mut unbounded, &prompt, n);
        assert_eq!(a.tokens, want, "prompt {p}: bounded ring vs greedy");
        assert_eq!(b.tokens, want, "prompt {p}: unbounded ring vs greedy");
        assert_eq!(
            a.accepted_per_step(),
            b.accepted_per_step(),
            "prompt {p}: the skipped rows changed the proposals"
        );
        assert!(bounded.ring().start() > 0, "the ring never wrapped");
        assert!(bounded.ring().bytes() <= 11 * d.cfg.feature_width() * 4);
        assert_eq!(unbounded.ring().start(), 0);
    }
    let _ = std::fs::remove_dir_all(&dir);
}
