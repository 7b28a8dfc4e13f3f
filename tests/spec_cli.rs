//! `deltaspec generate --spec …`: flag errors (a drafter is required) and the `--json` fields.

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
    Command::new(env!("CARGO_BIN_EXE_deltaspec"))
        .args(&args)
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
