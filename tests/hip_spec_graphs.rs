//! Graph capture in the speculative loop on the native GPU backend (`hip`): plain steps (one
//! target row whose captured features go to the drafter) must replay one captured driver
//! graph like plain AR decoding does, whatever the number of plain steps, and a run of
//! speculative steps between bursts must not make the plain steps capture again.
//!
//! SKIPS when no driver library loads (fails instead with `DELTASPEC_REQUIRE_GPU=1`). Without a
//! GPU: `tools/device/build_emu.sh $T/libdsemu.so && DELTASPEC_CUDA_LIB=$T/libdsemu.so cargo test
//! --release --test hip_spec_graphs`.

mod common;

use common::fixtures;
use deltaspec::backend::Backend;
use deltaspec::backend::hip::HipBackend;
use deltaspec::model::draft::convert::{OutType, convert_dflash};
use deltaspec::model::{Qwen35, Session};
use deltaspec::sched::{PolicyConfig, Ratio};
use deltaspec::spec::dflash::DFlashDrafter;
use deltaspec::spec::{Drafter, SpecConfig, SpecMode, SpecOutput, StepKind, generate_spec};
use std::cell::Cell;
use std::rc::Rc;

fn gpu(test: &str) -> Option<HipBackend> {
    let mut b = common::open_hip(test)?;
    b.set_graphs(true);
    if !b.graphs_active() {
        if common::require_gpu() {
            panic!("{test}: {} does not support graph capture", b.name());
        }
        eprintln!("SKIP {test}: {} does not support graph capture", b.name());
        return None;
    }
    Some(b)
}

/// Kernel launches issued during each decode step of one run (a replayed graph issues none).
fn launches_per_step(
    s: &mut Session<'_>,
    d: &mut dyn Drafter,
    counter: &Rc<Cell<u64>>,
    prompt: &[u32],
    n: usize,
    mode: SpecMode,
) -> (SpecOutput, Vec<(StepKind, u64)>) {
    let cfg = SpecConfig {
        n,
        mode,
        ..Default::default()
    };
    let mut per_step = Vec::new();
    let mut last = counter.get();
    let out = generate_spec(
        s,
        d,
        prompt,
        &cfg,
        |_| {},
        |st| {
            let now = counter.get();
            per_step.push((st.kind, now - last));
            last = now;
        },
    )
    .unwrap();
    (out, per_step)
}

#[test]
fn plain_steps_replay_one_graph_whatever_their_number() {
    let Some(mut be) = gpu("plain_steps_replay") else {
        return;
    };
    let counter = be.launch_counter();
    let dir = std::env::temp_dir().join(format!("deltaspec-hip-spec-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let g = dir.join("dflash-a.gguf");
    convert_dflash(
        &fixtures().join("drafters").join("dflash-a"),
        &g,
        OutType::F32,
    )
    .unwrap();
    let t = Qwen35::load(&fixtures().join("models").join("tiny-a")).unwrap();
    let mut d = DFlashDrafter::open(&g, &t).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let prompt: Vec<u32> = vec![3, 1, 4, 1];

    // One session restored to empty before every run (like `bench spec`): every run's graphs
    // have the same keys.
    let mut s = Session::new(&t, &mut be, prompt.len() + 64).unwrap();
    // The verify buffers of the default rollback, reserved before the snapshot.
    deltaspec::spec::Rollback::new(deltaspec::spec::RollbackMode::default())
        .unwrap()
        .prepare(&mut s, d.max_draft() + 1)
        .unwrap();
    let fresh = s.snapshot().unwrap();
    let want = s.generate_greedy(&prompt, 16, 512, None, |_| {}).unwrap();
    let adaptive = SpecMode::Adaptive(PolicyConfig {
        ratio: Ratio::Fixed(50.0),
        ar_burst: 4,
        backoff: 1.0,
        ..PolicyConfig::default()
    });
    // Warm-up runs (each key seen, then captured), then the measured ones.
    for (n, mode, measured) in [
        (4, SpecMode::Off, false),
        (4, SpecMode::Off, false),
        (6, SpecMode::Off, true),
        (12, SpecMode::Off, true),
        (16, adaptive.clone(), false),
        (16, adaptive.clone(), true),
    ] {
        s.restore(&fresh).unwrap();
        let (out, steps) = launches_per_step(&mut s, &mut d, &counter, &prompt, n, mode.clone());
        assert_eq!(out.tokens, want[..n], "{mode:?} n {n}");
        eprintln!("{} n {n}: {steps:?}", mode.name());
        if mode != SpecMode::Off {
            assert!(out.spec_steps() >= 2 && out.plain_steps() >= 8, "{out:?}");
        }
        if measured {
            // Every plain step replays the captured graph: no kernel launch of its own.
            for (i, (kind, l)) in steps.iter().enumerate() {
                if *kind == StepKind::Plain {
                    assert_eq!(
                        *l,
                        0,
                        "{} n {n}: plain step {i} launched {l} kernels",
                        mode.name()
                    );
                }
            }
        }
    }
    s.release(fresh).unwrap();
    drop(s);
    eprintln!("{:?}", be.graph_stats());
}
