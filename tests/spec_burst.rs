//! Plain steps hand their rows to the drafter once per burst, not once per token
//! (`spec::pending`): with the real tiny DFlash / DFlash2 drafters on their tiny targets, a run
//! of plain steps (adaptive bursts, `spec off`) is one drafter commit; every proposal, the
//! probes after bursts included, equals the proposal of the per-token-commit path (the same
//! run with every commit split into single rows); greedy output equals plain greedy; a stash
//! at its cap is committed in pieces of `MAX_PENDING_ROWS` rows.

mod common;

use common::fixtures;
use deltaspec::backend::{self, Backend};
use deltaspec::model::draft::convert::{OutType, convert_dflash};
use deltaspec::model::draft::{DFlash, FeatureDtype, FeatureRing};
use deltaspec::model::{Qwen35, Session};
use deltaspec::sched::{PolicyConfig, Ratio};
use deltaspec::spec::dflash::DFlashDrafter;
use deltaspec::spec::dflash2::DFlash2Drafter;
use deltaspec::spec::pending::MAX_PENDING_ROWS;
use deltaspec::spec::testing::{Corrupt, InjectedDrafter};
use deltaspec::spec::{
    Draft, DraftEnv, DraftRequest, Drafter, Features, Sampling, SpecConfig, SpecMode, SpecOutput,
    StepKind, generate_spec,
};
use deltaspec::util::rng::Rng;
use std::path::{Path, PathBuf};

mod dflash2_fixture;

const CHUNK: usize = 5;
const BURST: usize = 5;

fn scratch(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("deltaspec-burst-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A wrapper that logs what the loop commits and what the drafter proposes; with `split`, it
/// hands every commit to the drafter one row at a time (the per-token-commit path).
struct Probe {
    inner: Box<dyn Drafter>,
    split: bool,
    /// `(start, rows)` of every commit the loop made.
    commits: Vec<(usize, usize)>,
    proposals: Vec<Draft>,
}

impl Probe {
    fn new(inner: Box<dyn Drafter>, split: bool) -> Probe {
        Probe {
            inner,
            split,
            commits: Vec::new(),
            proposals: Vec::new(),
        }
    }
}

fn one_row(f: &Features, r: usize) -> Features {
    Features {
        start: f.start + r,
        rows: 1,
        width: f.width,
        layers: f
            .layers
            .iter()
            .map(|(l, d)| (*l, d[r * f.width..(r + 1) * f.width].to_vec()))
            .collect(),
    }
}

impl Drafter for Probe {
    fn name(&self) -> String {
        format!("probe (test only) over {}", self.inner.name())
    }
    fn feature_layers(&self) -> Vec<usize> {
        self.inner.feature_layers()
    }
    fn max_draft(&self) -> usize {
        self.inner.max_draft()
    }
    fn reset(&mut self, env: &mut DraftEnv<'_>) -> Result<(), deltaspec::spec::SpecError> {
        self.commits.clear();
        self.proposals.clear();
        self.inner.reset(env)
    }
    fn commit(
        &mut self,
        env: &mut DraftEnv<'_>,
        tokens: &[u32],
        features: &Features,
    ) -> Result<(), deltaspec::spec::SpecError> {
        self.commits.push((features.start, features.rows));
        if !self.split {
            return self.inner.commit(env, tokens, features);
        }
        for r in 0..tokens.len() {
            self.inner
                .commit(env, &tokens[r..r + 1], &one_row(features, r))?;
        }
        Ok(())
    }
    fn propose(
        &mut self,
        env: &mut DraftEnv<'_>,
        req: &DraftRequest,
    ) -> Result<Draft, deltaspec::spec::SpecError> {
        let d = self.inner.propose(env, req)?;
        self.proposals.push(d.clone());
        Ok(d)
    }
}

/// The commits the loop should make: one per prefill chunk, one per spec step (root +
/// accepted), one per run of plain steps.
fn expected_commits(prompt_len: usize, out: &SpecOutput) -> Vec<usize> {
    let mut v: Vec<usize> = (0..prompt_len)
        .step_by(CHUNK)
        .map(|i| CHUNK.min(prompt_len - i))
        .collect();
    let mut run = 0;
    for st in &out.steps {
        match st.kind {
            StepKind::Plain => run += 1,
            StepKind::Spec => {
                if run > 0 {
                    v.push(run);
                    run = 0;
                }
                v.push(st.accepted + 1);
            }
        }
    }
    if run > 0 {
        v.push(run);
    }
    v
}

/// Generates with `d`, then asks it for one more proposal after the last emitted token (the
/// drafter's context must be whole when generation returns).
fn run(
    be: &mut dyn Backend,
    t: &Qwen35,
    d: &mut Probe,
    prompt: &[u32],
    n: usize,
    mode: SpecMode,
) -> (SpecOutput, Draft) {
    let mut s = Session::new(t, be, prompt.len() + n).unwrap();
    let cfg = SpecConfig {
        n,
        chunk: CHUNK,
        mode,
        ..Default::default()
    };
    let out = generate_spec(&mut s, d, prompt, &cfg, |_| {}, |_| {}).unwrap();
    assert_eq!(s.pos(), prompt.len() + out.tokens.len() - 1);
    let target_weights = s.weights_id();
    let mut env = DraftEnv {
        backend: s.backend(),
        target: t,
        target_weights,
    };
    let req = DraftRequest {
        root: *out.tokens.last().unwrap(),
        max: d.max_draft(),
        sampling: Sampling::greedy(),
    };
    let last = d.propose(&mut env, &req).unwrap();
    (out, last)
}

fn modes() -> Vec<(&'static str, SpecMode)> {
    vec![
        // Break-even 0.8 · 49 = 39.2: every spec step starts a burst of BURST plain steps.
        (
            "adaptive-bursts",
            SpecMode::Adaptive(PolicyConfig {
                ratio: Ratio::Fixed(50.0),
                ar_burst: BURST,
                // The chain width follows measured wall time, so two runs could draft different
                // lengths; the proposals are compared across runs, so keep the full block.
                adapt_width: false,
                ..PolicyConfig::default()
            }),
        ),
        ("off", SpecMode::Off),
    ]
}

type MakeDrafter<'a> = Box<dyn Fn() -> Box<dyn Drafter> + 'a>;

/// Batched vs per-token commits for one drafter kind on one backend.
fn check(backend_name: &str, label: &str, t: &Qwen35, make: &MakeDrafter<'_>, prompts: usize) {
    let mut be = backend::create(backend_name).unwrap();
    let mut rng = Rng::new(66);
    let n = 24;
    for p in 0..prompts {
        let prompt: Vec<u32> = (0..4 + rng.below(12))
            .map(|_| rng.below(t.cfg.vocab) as u32)
            .collect();
        let want = {
            let mut s = Session::new(t, be.as_mut(), prompt.len() + n).unwrap();
            s.generate_greedy(&prompt, n, 512, None, |_| {}).unwrap()
        };
        for (mname, mode) in modes() {
            let ctx = format!("{backend_name} {label} prompt {p} {mname}");
            let mut batched = Probe::new(make(), false);
            let mut per_token = Probe::new(make(), true);
            let (a, last_a) = run(be.as_mut(), t, &mut batched, &prompt, n, mode.clone());
            let (b, last_b) = run(be.as_mut(), t, &mut per_token, &prompt, n, mode);
            assert_eq!(a.tokens, want, "{ctx}: batched commits vs greedy");
            assert_eq!(b.tokens, want, "{ctx}: per-token commits vs greedy");

            // One commit per burst: the loop's commits are exactly the expected list, the
            // commits tile the positions, and bursts did happen.
            let rows: Vec<usize> = batched.commits.iter().map(|c| c.1).collect();
            assert_eq!(rows, expected_commits(prompt.len(), &a), "{ctx}: commits");
            let mut end = 0;
            for &(start, n) in &batched.commits {
                assert_eq!(start, end, "{ctx}: commits {:?}", batched.commits);
                end += n;
            }
            assert_eq!(end, prompt.len() + a.tokens.len() - 1, "{ctx}");
            let plain = a.plain_steps();
            let commits_after_prefill = rows.len() - prompt.len().div_ceil(CHUNK);
            assert_eq!(
                commits_after_prefill,
                a.spec_steps() + runs_of_plain(&a),
                "{ctx}"
            );
            assert!(plain >= BURST, "{ctx}: {plain} plain steps");
            assert!(
                rows.iter().filter(|&&r| r >= BURST).count() >= 1,
                "{ctx}: no burst committed at once: {rows:?}"
            );

            // Same drafter context: every proposal (the probes after bursts included) and one
            // after the end equal those of the per-token-commit path.
            assert_eq!(batched.proposals, per_token.proposals, "{ctx}: proposals");
            assert_eq!(last_a, last_b, "{ctx}: proposal after generation");
            assert!(
                !last_a.tokens.is_empty(),
                "{ctx}: the drafter proposed nothing"
            );
            if mname == "adaptive-bursts" {
                assert!(a.spec_steps() >= 3, "{ctx}: too few probes");
            }
        }
    }
}

fn runs_of_plain(out: &SpecOutput) -> usize {
    let mut runs = 0;
    let mut prev = StepKind::Spec;
    for st in &out.steps {
        if st.kind == StepKind::Plain && prev != StepKind::Plain {
            runs += 1;
        }
        prev = st.kind;
    }
    runs
}

fn dflash(dir: &Path, name: &str, target: &str, windowed: bool) -> (DFlash, Qwen35) {
    let out = dir.join(format!("{name}.gguf"));
    convert_dflash(&fixtures().join("drafters").join(name), &out, OutType::F32).unwrap();
    let t = Qwen35::load(&fixtures().join("models").join(target)).unwrap();
    let mut d = DFlash::load_for(&out, &t).unwrap();
    if windowed {
        d.cfg.sliding_layers = vec![true; d.cfg.n_layers];
    }
    (d, t)
}

fn all_drafters(backend_name: &str, prompts: usize) {
    let dir = scratch(backend_name);
    // dflash-a: unbounded ring; dflash-b with every layer windowed: a ring of window + block
    // = 11 rows, shorter than prompt + burst, so long pushes wrap it.
    for (name, target, windowed) in [("dflash-a", "tiny-a", false), ("dflash-b", "tiny-b", true)] {
        let (d, t) = dflash(&dir, name, target, windowed);
        let make: MakeDrafter<'_> = Box::new(|| {
            let m = DFlash {
                cfg: d.cfg.clone(),
                weights: d.weights.clone(),
            };
            let ring = FeatureRing::for_drafter(&m.cfg, FeatureDtype::Bf16);
            Box::new(
                DFlashDrafter::new(m, &t)
                    .unwrap()
                    .with_capacity(8)
                    .with_feature_ring(ring),
            )
        });
        if windowed {
            let ring = FeatureRing::for_drafter(&d.cfg, FeatureDtype::Bf16);
            assert_eq!(ring.capacity(), Some(3 + d.cfg.block_size));
        }
        check(backend_name, name, &t, &make, prompts);
    }
    let ck = dflash2_fixture::write(&dir.join("ck"), 7, &dflash2_fixture::Edits::default());
    let g = dir.join("d2.gguf");
    convert_dflash(&ck, &g, OutType::F32).unwrap();
    let t = Qwen35::load(&dflash2_fixture::target_dir()).unwrap();
    let make: MakeDrafter<'_> =
        Box::new(|| Box::new(DFlash2Drafter::open(&g, &t).unwrap().with_capacity(8)));
    check(backend_name, "dflash2", &t, &make, prompts);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn plain_bursts_commit_once_with_the_same_drafter_context_cpu() {
    all_drafters("cpu", 3);
}

#[test]
fn plain_bursts_commit_once_with_the_same_drafter_context_wgpu() {
    match backend::create("wgpu") {
        Ok(_) => all_drafters("wgpu", 1),
        Err(e) => println!("skipped: wgpu is unavailable here ({e})"),
    }
}

/// A plain run longer than the stash's cap is committed in pieces of `MAX_PENDING_ROWS` rows
/// (bounded host memory), still exactly tiling the positions, and stays lossless.
#[test]
fn a_long_plain_run_commits_at_the_cap() {
    let t = Qwen35::load(&fixtures().join("models").join("tiny-a")).unwrap();
    let prompt: Vec<u32> = vec![3, 1, 4, 1, 5, 9, 2];
    let n = 2 * MAX_PENDING_ROWS + 7;
    let mut be = backend::create("cpu").unwrap();
    let want = {
        let mut s = Session::new(&t, be.as_mut(), prompt.len() + n).unwrap();
        s.generate_greedy(&prompt, n, 512, None, |_| {}).unwrap()
    };
    let mut d = InjectedDrafter::new(prompt.len(), want.clone(), t.cfg.vocab, 3, Corrupt::None)
        .with_layers(vec![0, t.cfg.n_layers - 1])
        .recording();
    let mut s = Session::new(&t, be.as_mut(), prompt.len() + n).unwrap();
    let cfg = SpecConfig {
        n,
        chunk: 512,
        mode: SpecMode::Off,
        ..Default::default()
    };
    let out = generate_spec(&mut s, &mut d, &prompt, &cfg, |_| {}, |_| {}).unwrap();
    assert_eq!(out.tokens, want);
    let log = d.log.as_ref().unwrap();
    let rows: Vec<usize> = log.iter().map(|(tok, _)| tok.len()).collect();
    assert_eq!(
        rows,
        vec![
            prompt.len(),
            MAX_PENDING_ROWS,
            MAX_PENDING_ROWS,
            n - 1 - 2 * MAX_PENDING_ROWS
        ]
    );
    // Tokens and features line up with the positions (the injected drafter checks starts).
    let committed: Vec<u32> = log
        .iter()
        .skip(1)
        .flat_map(|(tok, _)| tok.clone())
        .collect();
    assert_eq!(committed, want[..n - 1].to_vec());
    for (_, f) in log.iter().skip(1) {
        assert_eq!(f.layers.len(), 2);
        assert!(
            f.layers
                .iter()
                .all(|(_, v)| v.len() == f.rows * t.cfg.hidden)
        );
    }
}
