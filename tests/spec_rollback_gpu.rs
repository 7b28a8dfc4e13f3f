//! Every rollback mode on the GPU backends: chain speculation with drafts corrupted at random
//! positions (so rounds accept every count from none to all) gives the plain greedy output of
//! the same backend, token for token, with per-token states, factor replay and snapshot +
//! replay.
//!
//! wgpu runs on lavapipe in CI; hip SKIPS when no driver library loads (fails instead with
//! `DELTASPEC_REQUIRE_GPU=1`; without a GPU through the emulator: `tools/device/build_emu.sh`
//! then `DELTASPEC_CUDA_LIB=$PWD/target/libdsemu.so`).

mod common;

use common::fixtures;
use deltaspec::backend::{self, Backend};
use deltaspec::model::{Qwen35, Session};
use deltaspec::spec::testing::{Corrupt, InjectedDrafter};
use deltaspec::spec::{RollbackMode, SpecConfig, SpecMode, generate_spec};
use deltaspec::util::rng::Rng;

const MODES: [RollbackMode; 3] = [
    RollbackMode::PerTokenStates,
    RollbackMode::FactorReplay,
    RollbackMode::SnapshotReplay,
];

fn lossless_on(be: &mut dyn Backend, label: &str) {
    let (n, max) = (20, 6);
    let mut rng = Rng::new(17);
    for name in ["tiny-a", "tiny-c"] {
        let m = Qwen35::load(&fixtures().join("models").join(name)).unwrap();
        let vocab = m.cfg.vocab;
        let len = 3 + rng.below(10);
        let prompt: Vec<u32> = (0..len).map(|_| rng.below(vocab) as u32).collect();
        let want = {
            let mut s = Session::new(&m, be, prompt.len() + n).unwrap();
            s.generate_greedy(&prompt, n, 512, None, |_| {}).unwrap()
        };
        for (i, rollback) in MODES.into_iter().enumerate() {
            let mut d = InjectedDrafter::new(
                prompt.len(),
                want.clone(),
                vocab,
                max,
                Corrupt::Random {
                    p: 0.3,
                    seed: 40 + i as u64,
                },
            );
            let mut s = Session::new(&m, be, prompt.len() + n).unwrap();
            let cfg = SpecConfig {
                n,
                chunk: 5,
                mode: SpecMode::Chain,
                rollback,
                ..Default::default()
            };
            let got = generate_spec(&mut s, &mut d, &prompt, &cfg, |_| {}, |_| {}).unwrap();
            assert_eq!(got.tokens, want, "{label} {name} {}", rollback.name());
            let counts: Vec<usize> = got.accepted_per_step();
            assert!(
                counts.contains(&0) && counts.iter().any(|&a| a > 1),
                "{label} {name} {}: accepts {counts:?} should mix none and several",
                rollback.name()
            );
        }
    }
}

#[test]
fn rollback_modes_are_lossless_on_wgpu() {
    match backend::create("wgpu") {
        Ok(mut b) => lossless_on(b.as_mut(), "wgpu"),
        Err(e) => eprintln!("skipped: wgpu is unavailable here ({e})"),
    }
}

#[test]
fn rollback_modes_are_lossless_on_hip() {
    if let Some(mut b) = common::open_hip("rollback_modes_are_lossless_on_hip") {
        lossless_on(&mut b, "hip");
    }
}
