//! DDTree speculation on the tiny fixture models:
//! - a tree verify gives every row the logits a chain verify of its root-to-row path gives;
//! - committing an accepted path leaves the state (compacted KV rows, conv and recurrent
//!   state) equal to the target run over that path;
//! - greedy output with tree speculation equals plain greedy output for every drafter kind
//!   (injected, random, the real DFlash fixtures, replay over DFlash), on CPU and wgpu;
//! - a side branch recovers the true token where the chain was corrupted.

mod common;

use common::{fixtures, rel_err};
use deltaspec::backend::{self, Backend};
use deltaspec::model::qwen35::{GraphOptions, LogitRows};
use deltaspec::model::{LayerKind, Qwen35, Session};
use deltaspec::spec::dflash::DFlashDrafter;
use deltaspec::spec::replay::{ReplayDrafter, ReplayProfile};
use deltaspec::spec::testing::{Corrupt, InjectedDrafter, RandomDrafter};
use deltaspec::spec::tree::tree_round;
use deltaspec::spec::{Drafter, SpecConfig, SpecMode, generate_spec, prefill};
use deltaspec::util::rng::Rng;

fn load(name: &str) -> Qwen35 {
    Qwen35::load(&fixtures().join("models").join(name)).unwrap()
}

fn open(name: &str) -> Option<Box<dyn Backend>> {
    match backend::create(name) {
        Ok(b) => Some(b),
        Err(e) => {
            eprintln!("skipped {name}: {e}");
            None
        }
    }
}

const PARENTS: &[i32] = &[-1, 0, 1, 2, 1, 0, 5, 3, 0];

fn path(parents: &[i32], i: usize) -> Vec<usize> {
    let mut p = vec![i];
    while parents[*p.last().unwrap()] >= 0 {
        p.push(parents[*p.last().unwrap()] as usize);
    }
    p.reverse();
    p
}

fn all_logits() -> GraphOptions {
    GraphOptions {
        logits: LogitRows::All,
        argmax: true,
        capture: Vec::new(),
        read_logits: true,
    }
}

fn tree_logits_equal_path_logits(backend_name: &str, tol: f64) {
    let Some(mut be) = open(backend_name) else {
        return;
    };
    for name in ["tiny-a", "tiny-c"] {
        let m = load(name);
        let vocab = m.cfg.vocab;
        let mut rng = Rng::new(31);
        let prompt: Vec<u32> = (0..6).map(|_| rng.below(vocab) as u32).collect();
        let tokens: Vec<u32> = (0..PARENTS.len())
            .map(|_| rng.below(vocab) as u32)
            .collect();
        let ctx = prompt.len() + PARENTS.len() + 1;
        let mut s = Session::new(&m, be.as_mut(), ctx).unwrap();
        s.reserve_tree_rows(PARENTS.len()).unwrap();
        s.forward(&prompt, &all_logits()).unwrap();
        let fresh = s.snapshot().unwrap();
        let tree = s.forward_tree(&tokens, PARENTS, &all_logits()).unwrap();
        for n in 0..PARENTS.len() {
            let pth = path(PARENTS, n);
            s.restore(&fresh).unwrap();
            let toks: Vec<u32> = pth.iter().map(|&r| tokens[r]).collect();
            let chain = s.forward(&toks, &all_logits()).unwrap();
            let last = &chain.logits[(pth.len() - 1) * vocab..];
            let e = rel_err(&tree.logits[n * vocab..(n + 1) * vocab], last);
            assert!(
                e <= tol,
                "{backend_name} {name} row {n} path {pth:?}: rel err {e:e}"
            );
            assert_eq!(tree.argmax[n], chain.argmax[pth.len() - 1]);
        }
        s.release(fresh).unwrap();
    }
}

#[test]
fn tree_verify_rows_equal_chain_verify_of_their_paths_cpu() {
    tree_logits_equal_path_logits("cpu", 1e-6);
}

#[test]
fn tree_verify_rows_equal_chain_verify_of_their_paths_wgpu() {
    tree_logits_equal_path_logits("wgpu", 1e-4);
}

/// wgpu verifies at the reserved width (`Backend::prefers_fixed_step_widths`): a verify padded
/// past its last row gives the same logits, and after a commit the same states (the KV rows up
/// to the new position), bit for bit, as the verify at its own width. Both kinds of per-row
/// state: a tree with per-row recurrent states, and a chain with factor-replay logs, whose
/// recurrent step runs the rows in sequence (session 28's drift on the 27B: padding rows that
/// repeated the last row's cache row overwrote its K/V there with their own).
fn padded_verify_equals_exact_width_wgpu(
    parents: &[i32],
    extra: usize,
    log: bool,
    keeps: &[usize],
) {
    let Some(mut be) = open("wgpu") else {
        return;
    };
    let m = load("tiny-c");
    let vocab = m.cfg.vocab;
    let mut rng = Rng::new(7);
    let prompt: Vec<u32> = (0..5).map(|_| rng.below(vocab) as u32).collect();
    let tokens: Vec<u32> = (0..parents.len())
        .map(|_| rng.below(vocab) as u32)
        .collect();
    // No room past the verified rows: the padding rows' K/V go to the cache's slack rows.
    let ctx = prompt.len() + parents.len() + 1;
    let mut run = |reserve: usize, keep: usize| {
        let mut s = Session::new(&m, be.as_mut(), ctx).unwrap();
        if log {
            s.reserve_log_rows(reserve).unwrap();
        } else {
            s.reserve_tree_rows(reserve).unwrap();
        }
        s.forward(&prompt, &all_logits()).unwrap();
        let out = s.forward_tree(&tokens, parents, &all_logits()).unwrap();
        s.commit_tree(&path(parents, keep)).unwrap();
        let kv_rows = s.pos() * m.cfg.n_kv_heads * m.cfg.head_dim;
        let mut states = Vec::new();
        for (i, kind) in m.cfg.layers.iter().enumerate() {
            for st in state_names(*kind, i) {
                let mut v = s.read_state(&st).unwrap();
                if *kind == LayerKind::Attention {
                    v.truncate(kv_rows);
                }
                states.push((st.clone(), v));
            }
        }
        // The next step reads those states.
        let next = s.forward(&tokens[..1], &all_logits()).unwrap();
        (out, states, next.logits)
    };
    for &keep in keeps {
        let (exact, exact_states, exact_next) = run(parents.len(), keep);
        let (padded, padded_states, padded_next) = run(parents.len() + extra, keep);
        assert_eq!(padded.rows, parents.len());
        assert_eq!(padded.argmax, exact.argmax);
        assert!(
            padded.logits == exact.logits,
            "log {log} keep {keep}: logits differ (rel err {:e})",
            rel_err(&padded.logits, &exact.logits)
        );
        for ((name, a), (_, b)) in exact_states.iter().zip(&padded_states) {
            assert!(a == b, "log {log} keep {keep}: state {name} differs");
        }
        assert!(
            padded_next == exact_next,
            "log {log} keep {keep}: the next step's logits differ"
        );
    }
}

#[test]
fn padded_tree_verify_equals_exact_width_wgpu() {
    padded_verify_equals_exact_width_wgpu(PARENTS, 5, false, &[PARENTS.len() - 1, 6]);
}

#[test]
fn padded_logged_chain_verify_equals_exact_width_wgpu() {
    let chain: Vec<i32> = (-1..5).collect();
    padded_verify_equals_exact_width_wgpu(&chain, 2, true, &[5, 2, 0]);
}

#[test]
fn committed_tree_path_equals_target_on_the_path() {
    let m = load("tiny-c");
    let vocab = m.cfg.vocab;
    let prompt: Vec<u32> = (0..7).map(|i| (i * 31 + 5) as u32 % vocab as u32).collect();
    let n = 6;
    let cont = {
        let mut be = backend::create("cpu").unwrap();
        let mut s = Session::new(&m, be.as_mut(), prompt.len() + n + 2).unwrap();
        s.generate_greedy(&prompt, n + 2, 512, None, |_| {})
            .unwrap()
    };
    let ctx = prompt.len() + 16;
    for k in 0..n {
        let mut be = backend::create("cpu").unwrap();
        let mut s = Session::new(&m, be.as_mut(), ctx).unwrap();
        s.reserve_tree_rows(12).unwrap();
        let mut d = InjectedDrafter::new(prompt.len(), cont.clone(), vocab, n, Corrupt::At(k));
        let root = prefill(&mut s, &mut d, &prompt, 4).unwrap();
        let r = tree_round(&mut s, &mut d, root, n, 11).unwrap();
        // The side branch holds the true token at depth k + 1: the tree gets past it.
        assert!(r.accepted > k, "k={k}: accepted {}", r.accepted);
        assert_eq!(r.emitted, cont[1..r.accepted + 2].to_vec(), "k={k}");
        let pos = prompt.len() + r.accepted + 1;
        assert_eq!(s.pos(), pos);

        let mut be2 = backend::create("cpu").unwrap();
        let mut r2 = Session::new(&m, be2.as_mut(), ctx).unwrap();
        let mut all = prompt.clone();
        all.extend_from_slice(&cont[..r.accepted + 1]);
        r2.forward(&all, &all_logits()).unwrap();
        let kv_row = m.cfg.n_kv_heads * m.cfg.head_dim;
        for (i, kind) in m.cfg.layers.iter().enumerate() {
            let names = state_names(*kind, i);
            for st in names {
                let (mut a, mut b) = (s.read_state(&st).unwrap(), r2.read_state(&st).unwrap());
                if *kind == LayerKind::Attention {
                    a.truncate(pos * kv_row);
                    b.truncate(pos * kv_row);
                }
                let e = rel_err(&a, &b);
                assert!(e <= 1e-6, "k={k} {st}: rel err {e:e}");
            }
        }
    }
}

fn greedy(be: &mut dyn Backend, m: &Qwen35, prompt: &[u32], n: usize) -> Vec<u32> {
    let mut s = Session::new(m, be, prompt.len() + n).unwrap();
    s.generate_greedy(prompt, n, 512, None, |_| {}).unwrap()
}

fn tree_spec(
    be: &mut dyn Backend,
    m: &Qwen35,
    d: &mut dyn Drafter,
    prompt: &[u32],
    n: usize,
    budget: usize,
) -> deltaspec::spec::SpecOutput {
    let mut s = Session::new(m, be, prompt.len() + n).unwrap();
    let cfg = SpecConfig {
        n,
        chunk: 5,
        mode: SpecMode::Tree { budget },
        ..Default::default()
    };
    let out = generate_spec(&mut s, d, prompt, &cfg, |_| {}, |_| {}).unwrap();
    assert_eq!(s.pos(), prompt.len() + out.tokens.len() - 1);
    out
}

fn lossless_on(backend_name: &str, prompts: usize, n: usize) {
    let Some(mut be) = open(backend_name) else {
        return;
    };
    let mut rng = Rng::new(77);
    for (dname, target) in [("dflash-a", "tiny-a"), ("dflash-b", "tiny-b")] {
        let m = load(target);
        let vocab = m.cfg.vocab;
        let dir = fixtures().join("drafters").join(dname);
        for p in 0..prompts {
            let len = 3 + rng.below(12);
            let prompt: Vec<u32> = (0..len).map(|_| rng.below(vocab) as u32).collect();
            let want = greedy(be.as_mut(), &m, &prompt, n);
            let mut drafters: Vec<Box<dyn Drafter>> = vec![
                Box::new(DFlashDrafter::open(&dir, &m).unwrap()),
                Box::new(ReplayDrafter::new(
                    Box::new(DFlashDrafter::open(&dir, &m).unwrap()),
                    ReplayProfile::Mean(3.0),
                    prompt.len(),
                    want.clone(),
                    vocab,
                    p as u64,
                )),
                Box::new(InjectedDrafter::new(
                    prompt.len(),
                    want.clone(),
                    vocab,
                    5,
                    Corrupt::Random {
                        p: 0.3,
                        seed: p as u64,
                    },
                )),
                Box::new(RandomDrafter::new(p as u64, vocab, 4)),
            ];
            for d in drafters.iter_mut() {
                for budget in [1, 4, 9] {
                    let got = tree_spec(be.as_mut(), &m, d.as_mut(), &prompt, n, budget);
                    assert_eq!(
                        got.tokens,
                        want,
                        "{backend_name} {target} prompt {p} budget {budget} drafter {}",
                        d.name()
                    );
                }
            }
        }
        println!("{backend_name} {dname}/{target}: {prompts} prompts × {n} tokens lossless");
    }
}

/// Tree sampling at a vanishing temperature draws the argmax at every node, so its output is
/// the backend's greedy output: this checks that the sampled accept reads each tree row's own
/// logits (a row mix-up would emit other tokens), including the padded tree verify of wgpu.
fn cold_tree_sampling_is_greedy_on(backend_name: &str, n: usize) {
    let Some(mut be) = open(backend_name) else {
        return;
    };
    let m = load("tiny-a");
    let vocab = m.cfg.vocab;
    let dir = fixtures().join("drafters").join("dflash-a");
    let prompt = [7u32, 91, 3, 200, 45];
    let want = greedy(be.as_mut(), &m, &prompt, n);
    let mut drafters: Vec<Box<dyn Drafter>> = vec![
        Box::new(DFlashDrafter::open(&dir, &m).unwrap()),
        Box::new(InjectedDrafter::new(
            prompt.len(),
            want.clone(),
            vocab,
            5,
            Corrupt::Random { p: 0.3, seed: 4 },
        )),
    ];
    for d in drafters.iter_mut() {
        for budget in [4, 9] {
            let mut s = Session::new(&m, be.as_mut(), prompt.len() + n).unwrap();
            let cfg = SpecConfig {
                n,
                mode: SpecMode::Tree { budget },
                sampling: deltaspec::spec::Sampling {
                    temperature: 1e-6,
                    top_p: 1.0,
                },
                seed: 3,
                ..Default::default()
            };
            let got = generate_spec(&mut s, d.as_mut(), &prompt, &cfg, |_| {}, |_| {}).unwrap();
            assert_eq!(
                got.tokens,
                want,
                "{backend_name} budget {budget} drafter {}",
                d.name()
            );
        }
    }
}

#[test]
fn cold_tree_sampling_is_greedy_on_cpu() {
    cold_tree_sampling_is_greedy_on("cpu", 16);
}

#[test]
fn cold_tree_sampling_is_greedy_on_wgpu() {
    cold_tree_sampling_is_greedy_on("wgpu", 12);
}

#[test]
fn tree_speculation_is_lossless_on_cpu() {
    lossless_on("cpu", 3, 20);
}

#[test]
fn tree_speculation_is_lossless_on_wgpu() {
    lossless_on("wgpu", 2, 16);
}

#[test]
fn tree_with_sampling_is_seeded_and_stays_in_the_nucleus() {
    // The distribution itself is checked in tests/spec_sampling.rs; here the loop: n tokens,
    // the same seed gives the same tokens, and with top-p every token comes from the nucleus
    // of the target after the tokens before it.
    let m = load("tiny-a");
    let prompt = [1u32, 2, 3];
    let n = 12;
    let sampling = deltaspec::spec::Sampling {
        temperature: 0.8,
        top_p: 0.5,
    };
    let run = |seed: u64| {
        let mut be = backend::create("cpu").unwrap();
        let mut s = Session::new(&m, be.as_mut(), prompt.len() + n).unwrap();
        let mut d = RandomDrafter::new(1, m.cfg.vocab, 3);
        let cfg = SpecConfig {
            n,
            mode: SpecMode::Tree { budget: 4 },
            sampling,
            seed,
            ..Default::default()
        };
        generate_spec(&mut s, &mut d, &prompt, &cfg, |_| {}, |_| {})
            .unwrap()
            .tokens
    };
    let a = run(7);
    assert_eq!(a.len(), n);
    assert_eq!(a, run(7), "same seed, same tokens");
    let mut be = backend::create("cpu").unwrap();
    let mut s = Session::new(&m, be.as_mut(), prompt.len() + n).unwrap();
    let mut all = prompt.to_vec();
    all.extend_from_slice(&a[..n - 1]);
    let out = s.forward(&all, &all_logits()).unwrap();
    let vocab = m.cfg.vocab;
    for (i, &t) in a.iter().enumerate() {
        let row = &out.logits[(prompt.len() - 1 + i) * vocab..][..vocab];
        assert!(
            sampling.probs(row)[t as usize] > 0.0,
            "token {i} ({t}) is outside the nucleus"
        );
    }
}

fn deltaspec(args: &[&str]) -> std::process::Output {
    std::process::Command::new(common::deltaspec_bin())
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn cli_generate_and_bench_with_tree_speculation() {
    let model = fixtures().join("models").join("tiny-a");
    let draft = fixtures().join("drafters").join("dflash-a");
    let (model, draft) = (model.to_str().unwrap(), draft.to_str().unwrap());
    let base = [
        "generate",
        "--model",
        model,
        "--tokens",
        "5,9,200,31",
        "-n",
        "12",
    ];
    let json = |args: &[&str]| -> serde_json::Value {
        let out = deltaspec(args);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let plain = json(&[&base[..], &["--json"]].concat());
    for extra in [
        &["--tree-budget", "5"][..],
        &["--replay-profile", "code"][..],
    ] {
        let args = [
            &base[..],
            &["--json", "--spec", "tree", "--draft", draft],
            extra,
        ]
        .concat();
        let j = json(&args);
        assert_eq!(j["tokens"], plain["tokens"], "{extra:?}");
        assert_eq!(j["spec"], "tree");
        assert!(
            j["accepted_per_step"]
                .as_array()
                .is_some_and(|a| !a.is_empty())
        );
        let replay = extra[0] == "--replay-profile";
        // The CPU backend has no row tiles: a tree uses the whole budget.
        assert_eq!(j["tree_nodes"], if replay { 8 } else { 5 }, "{extra:?}");
        assert_eq!(j["replay"], replay);
        assert_eq!(j["drafter"].as_str().unwrap().contains("REPLAY"), replay);
    }
    let out = deltaspec(&[
        "bench",
        "spec",
        "--model",
        model,
        "--draft",
        draft,
        "--spec",
        "tree",
        "--tree-budget",
        "6",
        "--replay-profile",
        "code",
        "-n",
        "16",
        "--prompt-len",
        "5",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("spec tree"), "{text}");
    assert!(text.lines().all(|l| l.starts_with("REPLAY")), "{text}");
    assert!(text.contains("identical to the AR baseline"), "{text}");
}

/// The two state buffers of layer `i`: K/V cache rows (attention) or conv + recurrent state.
fn state_names(kind: LayerKind, i: usize) -> [String; 2] {
    match kind {
        LayerKind::Attention => [deltaspec::state::k_cache(i), deltaspec::state::v_cache(i)],
        LayerKind::DeltaNet => [
            deltaspec::state::conv_state(i),
            deltaspec::state::ssm_state(i),
        ],
    }
}

/// Where verifies pad to the reserved width (wgpu), a tree of budget 8 reserves and pads to
/// the 8-row GEMV pass (7 nodes and the root), not 9 rows (a second pass for one node), and
/// its output still equals plain greedy decoding.
#[test]
fn padded_trees_reserve_the_row_tile() {
    let Some(mut be) = open("wgpu") else {
        return;
    };
    let m = load("tiny-a");
    let prompt = [7u32, 91, 3, 200, 45];
    let n = 12;
    let want = greedy(be.as_mut(), &m, &prompt, n);
    let dir = fixtures().join("drafters").join("dflash-a");
    let mut d = DFlashDrafter::open(&dir, &m).unwrap();
    let mut s = Session::new(&m, be.as_mut(), prompt.len() + n).unwrap();
    let cfg = SpecConfig {
        n,
        mode: SpecMode::Tree { budget: 8 },
        ..Default::default()
    };
    let out = generate_spec(&mut s, &mut d, &prompt, &cfg, |_| {}, |_| {}).unwrap();
    assert_eq!(s.tree_rows(), 8);
    assert_eq!(out.tokens, want);
}
