//! Chain speculation on the CPU backend with the tiny fixture models: lossless greedy output
//! for every drafter kind, exact acceptance of injected drafts, and exact rollback of every
//! state buffer.

mod common;

use common::{fixtures, rel_err};
use deltaspec::backend;
use deltaspec::model::qwen35::{GraphOptions, LogitRows};
use deltaspec::model::{LayerKind, Qwen35, Session};
use deltaspec::sched::{PolicyConfig, Ratio};
use deltaspec::spec::testing::{Corrupt, InjectedDrafter, RandomDrafter};
use deltaspec::spec::{
    Drafter, Rollback, RollbackMode, SpecConfig, SpecMode, StepKind, chain_round, generate_spec,
    prefill,
};
use deltaspec::util::rng::Rng;

const MODELS: &[&str] = &["tiny-a", "tiny-b", "tiny-c"];

fn load(name: &str) -> Qwen35 {
    Qwen35::load(&fixtures().join("models").join(name)).unwrap()
}

fn random_prompt(rng: &mut Rng, vocab: usize) -> Vec<u32> {
    let len = 3 + rng.below(14);
    (0..len).map(|_| rng.below(vocab) as u32).collect()
}

fn greedy(m: &Qwen35, prompt: &[u32], n: usize) -> Vec<u32> {
    let mut be = backend::create("cpu").unwrap();
    let mut s = Session::new(m, be.as_mut(), prompt.len() + n).unwrap();
    s.generate_greedy(prompt, n, 512, None, |_| {}).unwrap()
}

fn spec(
    m: &Qwen35,
    d: &mut dyn Drafter,
    prompt: &[u32],
    n: usize,
    mode: SpecMode,
) -> deltaspec::spec::SpecOutput {
    spec_with(m, d, prompt, n, mode, RollbackMode::SnapshotReplay)
}

fn spec_with(
    m: &Qwen35,
    d: &mut dyn Drafter,
    prompt: &[u32],
    n: usize,
    mode: SpecMode,
    rollback: RollbackMode,
) -> deltaspec::spec::SpecOutput {
    let mut be = backend::create("cpu").unwrap();
    let mut s = Session::new(m, be.as_mut(), prompt.len() + n).unwrap();
    let cfg = SpecConfig {
        n,
        chunk: 7,
        mode,
        rollback,
        ..Default::default()
    };
    let out = generate_spec(&mut s, d, prompt, &cfg, |_| {}, |_| {}).unwrap();
    // The target processed exactly the emitted tokens but the last.
    assert_eq!(s.pos(), prompt.len() + out.tokens.len() - 1);
    out
}

#[test]
fn speculative_greedy_equals_plain_greedy_for_every_drafter() {
    let n = 24;
    let max = 6;
    let mut rng = Rng::new(6);
    for name in MODELS {
        let m = load(name);
        let vocab = m.cfg.vocab;
        for p in 0..3 {
            let prompt = random_prompt(&mut rng, vocab);
            let want = greedy(&m, &prompt, n);
            let cont = want.clone();
            let mut drafters: Vec<Box<dyn Drafter>> = vec![
                Box::new(
                    InjectedDrafter::new(prompt.len(), cont.clone(), vocab, max, Corrupt::None)
                        .with_layers(vec![0, m.cfg.n_layers - 1]),
                ),
                Box::new(InjectedDrafter::new(
                    prompt.len(),
                    cont.clone(),
                    vocab,
                    max,
                    Corrupt::At(2),
                )),
                Box::new(InjectedDrafter::new(
                    prompt.len(),
                    cont.clone(),
                    vocab,
                    max,
                    Corrupt::Random {
                        p: 0.25,
                        seed: p as u64,
                    },
                )),
                Box::new(RandomDrafter::new(100 + p as u64, vocab, max)),
            ];
            for d in drafters.iter_mut() {
                let got = spec(&m, d.as_mut(), &prompt, n, SpecMode::Chain);
                assert_eq!(
                    got.tokens,
                    want,
                    "{name} prompt {p} drafter {}: speculative output differs",
                    d.name()
                );
            }
            // The other rollbacks (`spec` uses snapshot + replay): DeltaNet state via host and
            // the position moved back; per-token states (verify writes every row's state,
            // commit copies one); factor replay (verify logs the step inputs, commit replays).
            for (seed, rollback) in [
                (9, RollbackMode::RecurrentHost),
                (10, RollbackMode::PerTokenStates),
                (11, RollbackMode::FactorReplay),
            ] {
                let mut d = InjectedDrafter::new(
                    prompt.len(),
                    want.clone(),
                    vocab,
                    max,
                    Corrupt::Random { p: 0.3, seed },
                );
                let got = spec_with(&m, &mut d, &prompt, n, SpecMode::Chain, rollback);
                assert_eq!(
                    got.tokens,
                    want,
                    "{name} prompt {p}: {} rollback differs",
                    rollback.name()
                );
            }
            // Adaptive mode mixes plain bursts and probes; still lossless.
            let mut d = RandomDrafter::new(7, vocab, max);
            let pol = PolicyConfig {
                ar_burst: 3,
                ratio: Ratio::Fixed(1.5),
                ..Default::default()
            };
            let got = spec(&m, &mut d, &prompt, n, SpecMode::Adaptive(pol));
            assert_eq!(
                got.tokens, want,
                "{name} prompt {p}: adaptive output differs"
            );
            let mut d = InjectedDrafter::new(prompt.len(), cont, vocab, max, Corrupt::None);
            let got = spec(&m, &mut d, &prompt, n, SpecMode::Off);
            assert_eq!(got.tokens, want, "{name} prompt {p}: spec off differs");
            assert_eq!(got.spec_steps(), 0);
        }
    }
}

#[test]
fn injected_drafts_corrupted_at_k_accept_exactly_k() {
    let n = 30;
    let max = 6;
    let m = load("tiny-a");
    let vocab = m.cfg.vocab;
    let prompt: Vec<u32> = vec![11, 200, 37, 4, 99, 150, 3];
    let want = greedy(&m, &prompt, n);
    for k in 0..=max {
        let mut d = InjectedDrafter::new(prompt.len(), want.clone(), vocab, max, Corrupt::At(k));
        let got = spec(&m, &mut d, &prompt, n, SpecMode::Chain);
        assert_eq!(got.tokens, want, "k={k}: output differs");
        assert!(got.spec_steps() > 0);
        for (i, st) in got.steps.iter().enumerate() {
            if st.kind == StepKind::Plain {
                // Only when the budget leaves no room for a draft: the last token.
                assert_eq!(i + 1, got.steps.len(), "k={k}: plain step {i} mid-stream");
                continue;
            }
            if st.drafted > k {
                assert_eq!(st.accepted, k, "k={k} step {i}: {st:?}");
                assert_eq!(st.emitted, k + 1, "k={k} step {i}: {st:?}");
            } else {
                assert_eq!(st.accepted, st.drafted, "k={k} step {i}: {st:?}");
            }
        }
        let steps = got.steps.len();
        // Every full round emits min(k, max) + 1 tokens: the loop needs that many rounds.
        let per = k.min(max) + 1;
        assert!(steps <= (n - 1).div_ceil(per) + 1, "k={k}: {steps} steps");
    }
}

fn state_names(m: &Qwen35) -> Vec<(String, bool)> {
    let mut v = Vec::new();
    for (i, kind) in m.cfg.layers.iter().enumerate() {
        match kind {
            LayerKind::Attention => {
                v.push((deltaspec::state::k_cache(i), true));
                v.push((deltaspec::state::v_cache(i), true));
            }
            LayerKind::DeltaNet => {
                v.push((deltaspec::state::conv_state(i), false));
                v.push((deltaspec::state::ssm_state(i), false));
            }
        }
    }
    v
}

#[test]
fn rollback_after_k_of_n_equals_target_on_accepted_prefix() {
    let n_draft = 6;
    for name in ["tiny-a", "tiny-c"] {
        let m = load(name);
        let vocab = m.cfg.vocab;
        let (kv_heads, hd) = (m.cfg.n_kv_heads, m.cfg.head_dim);
        let layers = vec![1, m.cfg.n_layers - 1];
        let prompt: Vec<u32> = (0..9).map(|i| (i * 53 + 7) as u32 % vocab as u32).collect();
        let cont = greedy(&m, &prompt, n_draft + 2);
        let ctx = prompt.len() + n_draft + 4;
        for (k, mode) in (0..=n_draft).flat_map(|k| {
            [
                RollbackMode::SnapshotReplay,
                RollbackMode::RecurrentHost,
                RollbackMode::PerTokenStates,
                RollbackMode::FactorReplay,
            ]
            .map(|m| (k, m))
        }) {
            // Speculative session: prefill, then one chain round with drafts corrupted at k.
            let mut be = backend::create("cpu").unwrap();
            let mut s = Session::new(&m, be.as_mut(), ctx).unwrap();
            let mut d = InjectedDrafter::new(prompt.len(), cont.clone(), vocab, n_draft, {
                if k < n_draft {
                    Corrupt::At(k)
                } else {
                    Corrupt::None
                }
            })
            .with_layers(layers.clone())
            .recording();
            let root = prefill(&mut s, &mut d, &prompt, 4).unwrap();
            assert_eq!(root, cont[0]);
            let mut rb = Rollback::new(mode).unwrap();
            let r = chain_round(&mut s, &mut d, &mut rb, root, n_draft).unwrap();
            rb.release(&mut s).unwrap();
            assert_eq!(r.drafted, n_draft);
            assert_eq!(
                r.accepted, k,
                "{name}: accepted {} of {n_draft}",
                r.accepted
            );
            assert_eq!(r.emitted, cont[1..k + 2].to_vec(), "{name} k={k}");
            let pos = prompt.len() + k + 1;
            assert_eq!(s.pos(), pos);

            // Reference: the target over prompt + root + the accepted drafts.
            let mut be2 = backend::create("cpu").unwrap();
            let mut r2 = Session::new(&m, be2.as_mut(), ctx).unwrap();
            let mut all = prompt.clone();
            all.extend_from_slice(&cont[..k + 1]);
            let opts = GraphOptions {
                logits: LogitRows::Last,
                argmax: true,
                capture: layers.clone(),
                read_logits: true,
            };
            let out = r2.forward(&all, &opts).unwrap();
            assert_eq!(out.argmax[0], cont[k + 1]);

            for (st, is_kv) in state_names(&m) {
                let (mut a, mut b) = (s.read_state(&st).unwrap(), r2.read_state(&st).unwrap());
                if is_kv {
                    let rows = pos * kv_heads * hd;
                    a.truncate(rows);
                    b.truncate(rows);
                }
                let e = rel_err(&a, &b);
                assert!(e <= 1e-6, "{name} k={k} {mode:?} {st}: rel err {e:e}");
            }

            // The drafter got the committed rows' features: root + k accepted drafts.
            let log = d.log.as_ref().unwrap();
            let (toks, f) = log.last().unwrap();
            assert_eq!(toks, &cont[..k + 1]);
            assert_eq!((f.start, f.rows), (prompt.len(), k + 1));
            let total: usize = log.iter().map(|(t, _)| t.len()).sum();
            assert_eq!(total, pos);
            for (slot, &l) in layers.iter().enumerate() {
                let want = &out.hidden.iter().find(|(x, _)| *x == l).unwrap().1;
                let h = m.cfg.hidden;
                let want = &want[prompt.len() * h..];
                let e = rel_err(&f.layers[slot].1, want);
                assert!(
                    e <= 1e-5,
                    "{name} k={k} features of layer {l}: rel err {e:e}"
                );
            }
        }
    }
}

#[test]
fn stop_token_ends_generation_inside_an_accepted_chain() {
    let m = load("tiny-b");
    let vocab = m.cfg.vocab;
    let prompt: Vec<u32> = vec![5, 6, 7, 8, 9];
    let n = 20;
    let full = greedy(&m, &prompt, n);
    // Stop at the token at index 5 of the plain output (its first occurrence).
    let stop = full[5];
    let cut = full.iter().position(|&t| t == stop).unwrap();
    let mut be = backend::create("cpu").unwrap();
    let mut s = Session::new(&m, be.as_mut(), prompt.len() + n).unwrap();
    let want = s
        .generate_greedy(&prompt, n, 512, Some(stop), |_| {})
        .unwrap();
    assert_eq!(want, full[..=cut].to_vec());
    let mut d = InjectedDrafter::new(prompt.len(), full.clone(), vocab, 8, Corrupt::None);
    let mut be = backend::create("cpu").unwrap();
    let mut s = Session::new(&m, be.as_mut(), prompt.len() + n).unwrap();
    let cfg = SpecConfig {
        n,
        stop: Some(stop),
        ..Default::default()
    };
    let mut streamed = Vec::new();
    let got = generate_spec(&mut s, &mut d, &prompt, &cfg, |t| streamed.push(t), |_| {}).unwrap();
    assert_eq!(got.tokens, want);
    assert_eq!(streamed, want);
}

#[test]
fn replay_drafter_follows_its_profile_and_stays_lossless() {
    use deltaspec::spec::replay::{ReplayDrafter, ReplayProfile};
    let m = load("tiny-a");
    let vocab = m.cfg.vocab;
    let prompt: Vec<u32> = vec![9, 8, 7, 6, 5];
    let n = 160;
    let want = greedy(&m, &prompt, n);
    for (profile, lo, hi) in [
        (ReplayProfile::Code, 4.8, 7.0),
        (ReplayProfile::Prose, 2.0, 3.5),
    ] {
        let inner = Box::new(RandomDrafter::new(1, vocab, 7));
        let mut d = ReplayDrafter::new(inner, profile, prompt.len(), want.clone(), vocab, 3);
        assert!(d.name().contains("REPLAY"));
        let got = spec(&m, &mut d, &prompt, n, SpecMode::Chain);
        assert_eq!(got.tokens, want, "{profile:?}: output differs");
        let mean = got.mean_accept_len();
        assert!(
            (lo..hi).contains(&mean),
            "{profile:?}: mean accepted length {mean:.2}"
        );
    }
}
