//! The real DFlash drafter in the speculation loop: the tiny fixture drafters (converted to
//! GGUF here through the library) on their tiny targets. Greedy speculative output equals plain
//! greedy output token for token (chain and adaptive, both rollbacks, CPU and — when an adapter
//! is available — wgpu); the drafter's proposals through the `Drafter` protocol equal the HF
//! reference; `generate --draft` and `bench spec` on the CLI.

mod common;

use common::{fixtures, read_safetensors};
use deltaspec::backend::{self, Backend};
use deltaspec::model::draft::convert::{OutType, convert_dflash};
use deltaspec::model::qwen35::{GraphOptions, LogitRows};
use deltaspec::model::{Qwen35, Session};
use deltaspec::sched::{PolicyConfig, Ratio};
use deltaspec::spec::dflash::DFlashDrafter;
use deltaspec::spec::replay::{ReplayDrafter, ReplayProfile};
use deltaspec::spec::{
    DraftEnv, DraftRequest, Drafter, Features, RollbackMode, Sampling, SpecConfig, SpecMode,
    SpecOutput, generate_spec,
};
use deltaspec::util::rng::Rng;
use std::path::{Path, PathBuf};
use std::process::Command;

const PAIRS: [(&str, &str); 2] = [("dflash-a", "tiny-a"), ("dflash-b", "tiny-b")];

fn drafter_dir(name: &str) -> PathBuf {
    fixtures().join("drafters").join(name)
}
fn target_dir(name: &str) -> PathBuf {
    fixtures().join("models").join(name)
}

fn scratch(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("deltaspec-specdf-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn convert(name: &str, dir: &Path) -> PathBuf {
    let out = dir.join(format!("{name}.gguf"));
    convert_dflash(&drafter_dir(name), &out, OutType::F32)
        .unwrap_or_else(|e| panic!("converting {name}: {e}"));
    out
}

fn random_prompt(rng: &mut Rng, vocab: usize) -> Vec<u32> {
    let len = 3 + rng.below(18);
    (0..len).map(|_| rng.below(vocab) as u32).collect()
}

fn greedy(be: &mut dyn Backend, m: &Qwen35, prompt: &[u32], n: usize) -> Vec<u32> {
    let mut s = Session::new(m, be, prompt.len() + n).unwrap();
    s.generate_greedy(prompt, n, 512, None, |_| {}).unwrap()
}

fn spec(
    be: &mut dyn Backend,
    m: &Qwen35,
    d: &mut dyn Drafter,
    prompt: &[u32],
    n: usize,
    mode: SpecMode,
    rollback: RollbackMode,
) -> SpecOutput {
    let mut s = Session::new(m, be, prompt.len() + n).unwrap();
    let cfg = SpecConfig {
        n,
        chunk: 5,
        mode,
        rollback,
        ..Default::default()
    };
    let out = generate_spec(&mut s, d, prompt, &cfg, |_| {}, |_| {}).unwrap();
    assert_eq!(s.pos(), prompt.len() + out.tokens.len() - 1);
    out
}

fn modes() -> Vec<(&'static str, SpecMode)> {
    vec![
        ("chain", SpecMode::Chain),
        ("adaptive", SpecMode::Adaptive(PolicyConfig::default())),
        // A policy that always has a low break-even: exercises spec steps after bursts too.
        (
            "adaptive-fixed",
            SpecMode::Adaptive(PolicyConfig {
                ratio: Ratio::parse("1.2").unwrap(),
                ar_burst: 3,
                ..PolicyConfig::default()
            }),
        ),
    ]
}

/// Speculative vs plain greedy on one backend, for both drafter/target pairs.
fn lossless_on(backend_name: &str, prompts: usize, n: usize) {
    let dir = scratch(&format!("lossless-{backend_name}"));
    let mut rng = Rng::new(35);
    for (name, target) in PAIRS {
        let m = Qwen35::load(&target_dir(target)).unwrap();
        // Small caches: the growth path runs too.
        let mut d = DFlashDrafter::open(&convert(name, &dir), &m)
            .unwrap()
            .with_capacity(8);
        let mut be = backend::create(backend_name).unwrap();
        for p in 0..prompts {
            let prompt = random_prompt(&mut rng, m.cfg.vocab);
            let want = greedy(be.as_mut(), &m, &prompt, n);
            for (mname, mode) in modes() {
                for rb in [RollbackMode::SnapshotReplay, RollbackMode::RecurrentHost] {
                    let got = spec(be.as_mut(), &m, &mut d, &prompt, n, mode.clone(), rb);
                    assert_eq!(
                        got.tokens,
                        want,
                        "{backend_name} {name}/{target} prompt {p} ({} tokens) {mname} {}",
                        prompt.len(),
                        rb.name()
                    );
                }
            }
            // The drafter's context bookkeeping under real accepts: the replay wrapper runs
            // it at full cost with many accepted rows per round.
            let inner = DFlashDrafter::open(&convert(name, &dir), &m).unwrap();
            let mut r = ReplayDrafter::new(
                Box::new(inner),
                ReplayProfile::Mean(3.0),
                prompt.len(),
                want.clone(),
                m.cfg.vocab,
                p as u64,
            );
            let got = spec(
                be.as_mut(),
                &m,
                &mut r,
                &prompt,
                n,
                SpecMode::Chain,
                RollbackMode::SnapshotReplay,
            );
            assert_eq!(got.tokens, want, "{backend_name} {name} replay prompt {p}");
            assert!(
                got.mean_accept_len() > 1.5,
                "replay accepted {:?}",
                got.accepted_per_step()
            );
        }
        println!("{backend_name} {name}/{target}: {prompts} prompts × {n} tokens lossless");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn dflash_speculation_is_lossless_on_cpu() {
    lossless_on("cpu", 4, 24);
}

#[test]
fn dflash_speculation_is_lossless_on_wgpu() {
    match backend::create("wgpu") {
        Ok(_) => lossless_on("wgpu", 2, 16),
        Err(e) => println!("skipped: wgpu is unavailable here ({e})"),
    }
}

/// Target rows `tokens` at the session's next positions, their features for `d`.
fn forward_features(s: &mut Session<'_>, d: &dyn Drafter, tokens: &[u32]) -> Features {
    let layers = d.feature_layers();
    let start = s.pos();
    let opts = GraphOptions {
        logits: LogitRows::Last,
        argmax: false,
        capture: layers.clone(),
        read_logits: true,
    };
    let out = s.forward(tokens, &opts).unwrap();
    Features::from_step(
        out.hidden,
        &layers,
        start,
        tokens.len(),
        s.model().cfg.hidden,
    )
    .unwrap()
}

fn with_env<R>(s: &mut Session<'_>, f: impl FnOnce(&mut DraftEnv<'_>) -> R) -> R {
    let target = s.model();
    let target_weights = s.weights_id();
    let mut env = DraftEnv {
        backend: s.backend(),
        target,
        target_weights,
    };
    f(&mut env)
}

/// The adapter's proposal after a context committed in pieces, with a rejected draft in
/// between, equals the HF reference draft (tools/oracle/make_drafter_fixture.py).
#[test]
fn proposals_through_the_drafter_protocol_match_hf() {
    let dir = scratch("protocol");
    for (name, target) in PAIRS {
        let r = read_safetensors(&drafter_dir(name).join("reference.safetensors"));
        let tokens: Vec<u32> = r["tokens"].1.iter().map(|&v| v as u32).collect();
        let want: Vec<u32> = r["draft_tokens"].1.iter().map(|&v| v as u32).collect();
        let n = tokens.len();
        assert!(n > 4);
        let m = Qwen35::load(&target_dir(target)).unwrap();
        let mut d = DFlashDrafter::open(&convert(name, &dir), &m)
            .unwrap()
            .with_capacity(2);
        assert_eq!(d.max_draft(), want.len());
        let mut be = backend::create("cpu").unwrap();
        let mut s = Session::new(&m, be.as_mut(), n + 8).unwrap();
        with_env(&mut s, |e| d.reset(e)).unwrap();
        let f = forward_features(&mut s, &d, &tokens[..3]);
        with_env(&mut s, |e| d.commit(e, &tokens[..3], &f)).unwrap();
        // A draft whose rows are then not accepted.
        let req = |root, sampling| DraftRequest {
            root,
            max: usize::MAX,
            sampling,
        };
        let first = with_env(&mut s, |e| {
            d.propose(e, &req(tokens[3], Sampling::greedy()))
        });
        assert_eq!(first.unwrap().tokens.len(), want.len());
        let f = forward_features(&mut s, &d, &tokens[3..n - 1]);
        with_env(&mut s, |e| d.commit(e, &tokens[3..n - 1], &f)).unwrap();
        assert_eq!(d.context_rows(), n - 1);
        let got = with_env(&mut s, |e| {
            d.propose(e, &req(tokens[n - 1], Sampling::greedy()))
        })
        .unwrap();
        assert_eq!(got.tokens, want, "{name}: proposals vs HF draft_tokens");
        assert!(got.probs.is_none());

        // Sampling: one distribution per proposal, each proposal drawn from its row.
        let t = Sampling {
            temperature: 0.8,
            top_p: 0.9,
        };
        let got = with_env(&mut s, |e| d.propose(e, &req(tokens[n - 1], t))).unwrap();
        let q = got.probs.expect("sampled proposals carry q");
        let vocab = m.cfg.vocab;
        assert_eq!(q.len(), got.tokens.len() * vocab);
        for (i, row) in q.chunks(vocab).enumerate() {
            let sum: f32 = row.iter().sum();
            assert!((sum - 1.0).abs() < 1e-4, "{name} row {i} sums to {sum}");
            assert!(row[got.tokens[i] as usize] > 0.0);
        }
        // A max shorter than the block.
        let got = with_env(&mut s, |e| {
            d.propose(
                e,
                &DraftRequest {
                    root: tokens[n - 1],
                    max: 1,
                    sampling: Sampling::greedy(),
                },
            )
        })
        .unwrap();
        assert_eq!(got.tokens, want[..1]);
        // Out of order commits are refused.
        let f = forward_features(&mut s, &d, &tokens[..1]);
        let mut f2 = f.clone();
        f2.start += 5;
        let e = with_env(&mut s, |e| d.commit(e, &tokens[..1], &f2)).unwrap_err();
        assert!(e.to_string().contains("context ends at"), "{e}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn open_refuses_a_drafter_for_another_target() {
    let dir = scratch("fit");
    let m = Qwen35::load(&target_dir("tiny-b")).unwrap();
    let e = DFlashDrafter::open(&convert("dflash-a", &dir), &m)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("hidden size 64 vs the target's 256"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

// ---------------------------------------------------------------------------------------------
// CLI

fn deltaspec(args: &[&str]) -> std::process::Output {
    Command::new(common::deltaspec_bin())
        .args(args)
        .output()
        .unwrap()
}

fn json_ok(out: std::process::Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn cli_generate_with_a_dflash_drafter_equals_plain() {
    let dir = scratch("cli-gen");
    let gguf = convert("dflash-a", &dir);
    let hf = drafter_dir("dflash-a");
    let model = target_dir("tiny-a");
    let model = model.to_str().unwrap();
    for toks in ["5,6,7", "1,200,3,44,90,17,250,2", "9"] {
        let base = [
            "generate",
            "--model",
            model,
            "--tokens",
            toks,
            "-n",
            "20",
            "--ignore-eos",
            "--json",
        ];
        let plain = json_ok(deltaspec(&[&base[..], &["--spec", "off"]].concat()));
        assert_eq!(plain["tokens"].as_array().unwrap().len(), 20);
        for (mode, draft) in [
            ("chain", gguf.to_str().unwrap()),
            ("adaptive", gguf.to_str().unwrap()),
            ("chain", hf.to_str().unwrap()),
        ] {
            let j = json_ok(deltaspec(
                &[&base[..], &["--spec", mode, "--draft", draft]].concat(),
            ));
            assert_eq!(j["tokens"], plain["tokens"], "{toks} --spec {mode} {draft}");
            assert_eq!(j["spec"], mode);
            assert!(j["drafter"].as_str().unwrap().starts_with("dflash"));
            assert!(j["accepted_per_step"].is_array());
        }
    }
    // A drafter for another target: one line, exit 2, says which number.
    let out = deltaspec(&[
        "generate",
        "--model",
        target_dir("tiny-b").to_str().unwrap(),
        "--tokens",
        "5,6",
        "-n",
        "4",
        "--spec",
        "chain",
        "--draft",
        gguf.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("hidden size 64 vs the target's 256"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn cli_bench_spec_prints_ar_and_speculative_speed() {
    let dir = scratch("cli-bench");
    let gguf = convert("dflash-a", &dir);
    let model = target_dir("tiny-a");
    let base = [
        "bench",
        "spec",
        "--model",
        model.to_str().unwrap(),
        "--draft",
        gguf.to_str().unwrap(),
        "-n",
        "24",
        "--prompt-len",
        "9",
    ];
    let number = |line: &str, key: &str| -> f64 {
        let rest = &line[line.find(key).unwrap() + key.len()..];
        let num: String = rest
            .trim_start()
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == '.')
            .collect();
        num.parse().unwrap()
    };
    // Plain text: both speeds, the accepted length, the split; no REPLAY label.
    let out = deltaspec(&base);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    println!("{text}");
    let ar = text
        .lines()
        .find(|l| l.starts_with("AR:"))
        .expect("AR line");
    let sp = text
        .lines()
        .find(|l| l.starts_with("spec chain:"))
        .expect("spec line");
    assert!(number(ar, "AR:") > 0.0 && ar.contains("tok/s"), "{ar}");
    assert!(
        number(sp, "spec chain:") > 0.0 && sp.contains("tok/s"),
        "{sp}"
    );
    assert!(text.contains("mean accepted length"), "{text}");
    assert!(text.contains("draft ") && text.contains("verify ") && text.contains("rollback "));
    assert!(text.contains("identical to the AR baseline"), "{text}");
    assert!(!text.contains("REPLAY"), "{text}");

    // Replay profile: every line says REPLAY, and acceptance follows the profile.
    for profile in ["code", "prose", "mixed"] {
        let out = deltaspec(&[&base[..], &["--replay-profile", profile]].concat());
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(text.lines().count() >= 5, "{text}");
        for l in text.lines() {
            assert!(l.contains("REPLAY"), "{profile}: line without REPLAY: {l}");
        }
        assert!(
            text.contains("AR:") && text.contains("spec chain:"),
            "{text}"
        );
    }

    // JSON, adaptive, replay.
    let j = json_ok(deltaspec(
        &[
            &base[..],
            &["--spec", "adaptive", "--replay-profile", "code", "--json"],
        ]
        .concat(),
    ));
    assert!(j["label"].as_str().unwrap().contains("REPLAY"));
    assert_eq!(j["spec"], "adaptive");
    assert!(j["ar"]["tokens_per_second"].as_f64().unwrap() > 0.0);
    assert!(j["speculative"]["tokens_per_second"].as_f64().unwrap() > 0.0);
    assert!(j["speculative"]["mean_accept_len"].as_f64().is_some());
    assert_eq!(j["identical_to_ar"], true);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A DSpark drafter: dflash-a's backbone plus random Markov and confidence (H + r) heads.
fn with_dspark(
    mut d: deltaspec::model::draft::DFlash,
    vocab: usize,
) -> deltaspec::model::draft::DFlash {
    use deltaspec::backend::HostTensor;
    use deltaspec::model::draft::{DSparkConfig, names};
    let (h, r) = (d.cfg.hidden, 8);
    let mut rng = Rng::new(78);
    let mut put = |name: &str, shape: &[usize], scale: f32| {
        let n = shape.iter().product();
        d.weights
            .insert(name, HostTensor::from_f32(shape, &rng.vec_normal(n, scale)));
    };
    // A small Markov bias: the backbone's proposals mostly survive, so rounds accept some.
    put(names::MARKOV_W1, &[vocab, r], 0.2);
    put(names::MARKOV_W2, &[vocab, r], 0.2);
    put(names::CONFIDENCE_W, &[1, h + r], 0.3);
    put(names::CONFIDENCE_B, &[1], 0.3);
    d.cfg.dspark = Some(DSparkConfig {
        markov_rank: r,
        vocab,
        confidence_dim: Some(h + r),
    });
    d
}

/// The DSpark confidence gate cuts chains but never changes greedy output: speculative output
/// with the gate on (both rules, a high threshold so that it cuts) equals plain greedy.
#[test]
fn dspark_confidence_gate_is_lossless_on_cpu() {
    use deltaspec::model::draft::DFlash;
    use deltaspec::spec::confidence::{GateConfig, GateRule};
    use deltaspec::spec::dflash::DrafterOptions;
    let dir = scratch("gate");
    let m = Qwen35::load(&target_dir("tiny-a")).unwrap();
    let path = convert("dflash-a", &dir);
    let mut be = backend::create("cpu").unwrap();
    let mut rng = Rng::new(36);
    for (rule, threshold) in [(GateRule::Position, 0.6), (GateRule::Survival, 0.3)] {
        let opts = DrafterOptions {
            gate: GateConfig {
                threshold: Some(threshold),
                rule,
                warmup: 2,
                explore_every: 3,
                ..GateConfig::default()
            },
            print_confidence: true,
            ..Default::default()
        };
        let model = with_dspark(DFlash::load(&path).unwrap(), m.cfg.vocab);
        let mut d = DFlashDrafter::new(model, &m).unwrap().with_options(&opts);
        for p in 0..3 {
            let prompt = random_prompt(&mut rng, m.cfg.vocab);
            let want = greedy(be.as_mut(), &m, &prompt, 24);
            for (mname, mode) in modes() {
                let got = spec(
                    be.as_mut(),
                    &m,
                    &mut d,
                    &prompt,
                    24,
                    mode,
                    RollbackMode::PerTokenStates,
                );
                assert_eq!(got.tokens, want, "{rule:?} prompt {p} {mname}");
            }
        }
        let g = d.gate().expect("a confidence head");
        println!("{rule:?}: {}", g.report());
        assert!(g.stats.cut_rounds > 0, "the gate never cut: {:?}", g.stats);
        assert!(g.stats.kept < g.stats.offered);
        assert!(g.cal.score.labels > 0);
    }
    let _ = std::fs::remove_dir_all(&dir);
}
