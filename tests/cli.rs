//! The `deltaspec` command: outputs of `logits`/`generate`/`info`, and one-line errors with exit
//! code 2 for bad input.

mod common;

use common::{fixtures, read_safetensors, rel_err};
use deltaspec::gguf::{GgufWriter, Value};
use std::process::{Command, Output};

fn deltaspec(args: &[&str]) -> Output {
    Command::new(common::deltaspec_bin())
        .args(args)
        .output()
        .expect("runs the binary")
}

fn assert_one_line_error(out: &Output, needle: &str) {
    assert_eq!(
        out.status.code(),
        Some(2),
        "exit code; stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err:?}");
    assert!(err.starts_with("error: "), "{err:?}");
    assert!(err.contains(needle), "{err:?} should mention {needle:?}");
}

fn tiny_a() -> String {
    fixtures().join("models/tiny-a").display().to_string()
}

#[test]
fn unknown_backend_missing_file_and_wrong_arch_are_one_line_errors() {
    let out = deltaspec(&[
        "generate",
        "--model",
        &tiny_a(),
        "--tokens",
        "1,2",
        "--backend",
        "nope",
    ]);
    assert_one_line_error(&out, "unknown backend 'nope'");

    let out = deltaspec(&["info", "/nonexistent/model.gguf"]);
    assert_one_line_error(&out, "not found");

    let dir = std::env::temp_dir().join(format!("deltaspec-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("llama.gguf");
    let mut w = GgufWriter::new();
    w.add_kv("general.architecture", Value::String("llama".into()));
    w.write_file(&path).unwrap();
    let out = deltaspec(&["info", path.to_str().unwrap()]);
    assert_one_line_error(&out, "unsupported architecture 'llama'");

    std::fs::write(dir.join("bad.gguf"), b"GGUF\x03\x00\x00\x00trunc").unwrap();
    let out = deltaspec(&["info", dir.join("bad.gguf").to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));

    let out = deltaspec(&[
        "logits",
        "--model",
        &tiny_a(),
        "--tokens",
        "1,999",
        "--out",
        "/dev/null",
    ]);
    assert_one_line_error(&out, "token id 999 is outside the vocabulary");

    // A context too small for the request is refused before anything is generated.
    let out = deltaspec(&[
        "generate",
        "--model",
        &tiny_a(),
        "--tokens",
        "1,2",
        "-n",
        "5",
        "--ctx",
        "3",
    ]);
    assert_one_line_error(
        &out,
        "--ctx 3 is too small: the prompt (2 tokens) and -n 5 need 7",
    );
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn logits_command_writes_the_reference_logits() {
    let d = fixtures().join("models/tiny-a");
    let r = read_safetensors(&d.join("reference.safetensors"));
    let ids: Vec<String> = r["input_ids"]
        .1
        .iter()
        .map(|v| (*v as u32).to_string())
        .collect();
    let dir = std::env::temp_dir().join(format!("deltaspec-logits-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let tokens = dir.join("tokens.json");
    std::fs::write(&tokens, format!("[{}]", ids.join(","))).unwrap();
    for decode_from in [None, Some("60")] {
        let out_path = dir.join("logits.safetensors");
        let mut args = vec![
            "logits",
            "--model",
            d.to_str().unwrap(),
            "--tokens",
            tokens.to_str().unwrap(),
        ];
        args.extend(["--out", out_path.to_str().unwrap()]);
        if let Some(k) = decode_from {
            args.extend(["--decode-from", k]);
        }
        let out = deltaspec(&args);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let got = read_safetensors(&out_path);
        let (shape, logits) = &got["logits"];
        assert_eq!(shape, &vec![ids.len(), 256]);
        let e = rel_err(logits, &r["logits"].1);
        assert!(e < 1e-5, "decode_from {decode_from:?}: rel err {e:e}");
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn generate_json_and_info() {
    let out = deltaspec(&[
        "generate",
        "--model",
        &tiny_a(),
        "--tokens",
        "5,6,7",
        "-n",
        "6",
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(j["tokens"].as_array().unwrap().len(), 6);
    assert!(j["tokens_per_second"].as_f64().unwrap() > 0.0);
    assert!(j.get("text").is_some());

    let out = deltaspec(&["info", &tiny_a()]);
    assert!(out.status.success());
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(s.contains("pattern:     LLLA"), "{s}");
    assert!(s.contains("nk 2 nv 4"), "{s}");
}

/// `bench kernels`: the CPU backend has no compiler statistics (a one-line error); wgpu either
/// lists the decode step's pipelines with their statistics or, where the driver lacks
/// VK_KHR_pipeline_executable_properties (lavapipe in Mesa 22), says so in one line; hip lists
/// the kernels it loaded (the CPU emulator reports no attributes; NVIDIA's driver registers).
#[test]
fn bench_kernels_lists_the_step_kernels_or_says_why_not() {
    let model = fixtures().join("models/tiny-a/model-q8_0.gguf");
    let model = model.to_str().unwrap();
    let args = |backend: &'static str| {
        [
            "bench",
            "kernels",
            "--model",
            model,
            "--backend",
            backend,
            "--rows",
            "1,3",
            "--json",
        ]
    };
    assert_one_line_error(&deltaspec(&args("cpu")), "no compiler statistics");

    let out = deltaspec(&args("wgpu"));
    let err = String::from_utf8_lossy(&out.stderr);
    if out.status.success() {
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let kernels = v["kernels"].as_array().unwrap();
        let gemv: Vec<_> = kernels
            .iter()
            .filter(|k| k["kernel"].as_str().unwrap().starts_with("matmul"))
            .collect();
        assert!(!gemv.is_empty(), "{v}");
        for k in gemv {
            assert!(k["threads"].as_u64().unwrap() >= 32, "{k}");
            assert!(!k["stats"].as_object().unwrap().is_empty(), "{k}");
        }
    } else {
        assert!(
            !common::require_gpu(),
            "the GPU machine's driver has the extension: {err}"
        );
        if err.contains("kernel_stats") {
            // The last line: the Vulkan driver may print its own warnings before ours.
            assert_eq!(out.status.code(), Some(2), "{err}");
            let last = err.trim_end().lines().last().unwrap_or_default();
            assert!(
                last.starts_with("error: ")
                    && last.contains("the driver lacks VK_KHR_pipeline_executable_properties"),
                "{err}"
            );
        } else {
            eprintln!("skipped wgpu (no adapter): {err}");
        }
    }

    if common::open_hip("bench_kernels").is_some() {
        let out = deltaspec(&args("hip"));
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let names: Vec<&str> = v["kernels"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| k["kernel"].as_str().unwrap())
            .collect();
        assert!(names.iter().any(|n| n.contains("rms_norm")), "{names:?}");
        assert!(names.iter().any(|n| n.starts_with("argmax")), "{names:?}");
        if common::require_gpu() {
            for k in v["kernels"].as_array().unwrap() {
                assert!(k["stats"]["registers"].as_f64().unwrap() > 0.0, "{k}");
            }
        }
    }
}

/// `bench prefill`: one timed run per repetition, each of the whole prompt in chunks; bad sizes
/// are one-line errors.
#[test]
fn bench_prefill_times_each_repetition() {
    let model = fixtures().join("models/tiny-a/model-q8_0.gguf");
    let model = model.to_str().unwrap();
    let base = ["bench", "prefill", "--model", model, "--backend", "cpu"];
    let out = deltaspec(
        &[
            &base[..],
            &["-p", "23", "--chunk", "8", "-r", "2", "--json"],
        ]
        .concat(),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["prompt_tokens"], 23);
    let secs = v["seconds"].as_array().unwrap();
    assert_eq!(secs.len(), 2);
    let mean_tps = secs.iter().map(|s| 23.0 / s.as_f64().unwrap()).sum::<f64>() / 2.0;
    let tps = v["tokens_per_second"].as_f64().unwrap();
    assert!(
        (tps - mean_tps).abs() <= 1e-9 * mean_tps,
        "{tps} vs {mean_tps}"
    );
    assert_one_line_error(&deltaspec(&[&base[..], &["-p", "0"]].concat()), "--prompt");
    // Three chunks, the last one short.
    let out = deltaspec(&[&base[..], &["-p", "300", "--chunk", "128", "-r", "1"]].concat());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("pp300"));
}

/// `bench decode --depth`: the timed steps run after that many context rows (llama-bench's
/// `-d`), filled by a prompt in chunks; the capacity grows to hold them.
#[test]
fn bench_decode_after_a_filled_context() {
    let model = fixtures().join("models/tiny-a/model-q8_0.gguf");
    let model = model.to_str().unwrap();
    let base = [
        "bench",
        "decode",
        "--model",
        model,
        "--backend",
        "cpu",
        "-n",
        "2",
    ];
    let out = deltaspec(&[&base[..], &["--depth", "600", "--ctx", "16", "--json"]].concat());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["depth"], 600);
    assert!(v["tokens_per_second"].as_f64().unwrap() > 0.0);
    let out = deltaspec(&[&base[..], &["-d", "5"]].concat());
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("steps of 1 rows after 5 context rows"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}
