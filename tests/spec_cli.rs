//! `deltaspec generate --spec …`: flag errors (a drafter is required) and the `--json` fields;
//! `deltaspec bench spec` with sampling.

mod common;

use common::fixtures;
use std::process::Command;

fn generate(extra: &[&str]) -> std::process::Output {
    let model = fixtures().join("models/tiny-a");
    let mut args = vec![
        "generate",
        "--model",
        model.to_str().unwrap(),
        "--tokens",
        "5,6,7",
        "-n",
        "4",
    ];
    args.extend_from_slice(extra);
    deltaspec(&args)
}

fn deltaspec(args: &[&str]) -> std::process::Output {
    Command::new(common::deltaspec_bin())
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn spec_needs_a_drafter() {
    for mode in ["chain", "adaptive"] {
        let out = generate(&["--spec", mode]);
        assert_eq!(out.status.code(), Some(2));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains("needs --draft"), "{err}");
    }
    let out = generate(&[
        "--spec",
        "adaptive",
        "--spec-ratio",
        "x",
        "--draft",
        "d.gguf",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("spec-step ratio"));
    for bad in [
        "--burst-confidence=-1",
        "--burst-confidence=NaN",
        "--burst-cap=0",
        "--burst-cap=1",
        "--burst-cap=inf",
        "--long-alpha=2",
        "--long-alpha=-0.1",
    ] {
        let out = generate(&["--spec", "adaptive", bad, "--draft", "d.gguf"]);
        assert_eq!(out.status.code(), Some(2), "{bad}");
        let err = String::from_utf8_lossy(&out.stderr);
        let flag = bad.split('=').next().unwrap();
        assert!(err.contains(flag), "{bad}: {err}");
    }
}

#[test]
fn json_reports_accepted_per_step() {
    let out = generate(&["--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(j["spec"], "off");
    assert_eq!(j["accepted_per_step"], serde_json::json!([]));
    assert_eq!(j["tokens"].as_array().unwrap().len(), 4);
}

/// `deltaspec bench spec` on the tiny fixtures with `extra` flags, no warm-up run.
fn bench_spec(extra: &[&str]) -> std::process::Output {
    bench_spec_warm("0", extra)
}

/// [`bench_spec`] with `warmup` untimed runs first.
fn bench_spec_warm(warmup: &str, extra: &[&str]) -> std::process::Output {
    let model = fixtures().join("models/tiny-a");
    let draft = fixtures().join("drafters/dflash-a");
    let mut args = vec![
        "bench",
        "spec",
        "--model",
        model.to_str().unwrap(),
        "--draft",
        draft.to_str().unwrap(),
        "-n",
        "8",
        "--warmup",
        warmup,
    ];
    args.extend_from_slice(extra);
    deltaspec(&args)
}

#[test]
fn bench_spec_samples_both_runs_and_refuses_a_sampled_replay() {
    for mode in ["chain", "tree"] {
        let out = bench_spec(&[
            "--spec",
            mode,
            "--temperature",
            "0.5",
            "--seed",
            "3",
            "--json",
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(j["sampling"]["temperature"], 0.5, "{mode}");
        assert_eq!(j["sampling"]["seed"], 3, "{mode}");
        // Sampled runs are not compared token for token.
        assert!(j["identical_to_ar"].is_null(), "{mode}: {j}");
        assert_eq!(j["speculative"]["tokens"], 8, "{mode}");
        assert_eq!(j["ar"]["tokens"], 8, "{mode}");
    }
    // Greedy runs still are.
    let out = bench_spec(&["--json"]);
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(j["identical_to_ar"], true);
    assert!(j["sampling"].is_null());
    // No warm-up (`--warmup 0`): the timed run built its graphs; one warm-up run meets them
    // all.
    assert!(j["graphs_built_in_timed_run"].as_u64().unwrap() > 0, "{j}");
    let out = bench_spec_warm("1", &["--json"]);
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(j["graphs_built_in_timed_run"], 0, "{j}");
    let out = bench_spec(&["--temperature", "0.5", "--replay-profile", "code"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--replay-profile") && err.contains("--temperature"),
        "{err}"
    );
}
