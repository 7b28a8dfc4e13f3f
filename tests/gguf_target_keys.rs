//! How the target loader reads the layer keys of a `qwen35` GGUF: llama.cpp's MTP (nextn)
//! blocks counted in `block_count` and appended after the trunk, tensors of layers past
//! `block_count`, and head-dim and float keys that would make a wrong model load quietly.

mod common;

use common::fixtures;
use deltaspec::gguf::{GgufFile, GgufWriter, Value, ValueType};
use deltaspec::model::{LayerKind, Qwen35};
use std::path::{Path, PathBuf};

fn fixture() -> GgufFile {
    GgufFile::open(&fixtures().join("models/tiny-a/model-q8_0.gguf")).unwrap()
}

/// The fixture rewritten: keys replaced or added by `kv` (`None` drops the key), and `extra`
/// tensors (name, copy of tensor) appended.
/// A rewritten file, removed when dropped.
struct Tmp(PathBuf);

impl Drop for Tmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

impl std::ops::Deref for Tmp {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

fn rewrite(tag: &str, kv: &[(&str, Option<Value>)], extra: &[(&str, &str)]) -> Tmp {
    let f = fixture();
    let mut w = GgufWriter::new();
    for (k, v) in &f.metadata {
        if k == "general.alignment" || kv.iter().any(|(n, _)| n == k) {
            continue;
        }
        w.add_kv(k, v.clone());
    }
    for (k, v) in kv {
        if let Some(v) = v {
            w.add_kv(k, v.clone());
        }
    }
    for t in &f.tensors {
        w.add_tensor(&t.name, &t.ne, t.dtype, f.tensor_bytes(t).to_vec())
            .unwrap();
    }
    for (name, from) in extra {
        let t = f.tensor(from).unwrap();
        w.add_tensor(name, &t.ne, t.dtype, f.tensor_bytes(t).to_vec())
            .unwrap();
    }
    let path = std::env::temp_dir().join(format!(
        "deltaspec-target-keys-{}-{tag}.gguf",
        std::process::id()
    ));
    w.write_file(&path).unwrap();
    Tmp(path)
}

fn logits(m: &Qwen35) -> Vec<f32> {
    common::cpu_logits(m, &[5, 17, 3, 250, 9])
}

fn err(path: &Path) -> String {
    common::target_load_err(path)
}

/// The tensors of llama.cpp's MTP block at index `n`: a full-attention block (copies of the
/// fixture's attention layer 3) plus the nextn projections (shapes are all that matter).
fn mtp_block(n: usize) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = fixture()
        .tensors
        .iter()
        .filter_map(|t| t.name.strip_prefix("blk.3."))
        .map(|rest| (format!("blk.{n}.{rest}"), format!("blk.3.{rest}")))
        .collect();
    for (nextn, like) in [
        ("enorm", "attn_norm"),
        ("hnorm", "attn_norm"),
        ("eh_proj", "ffn_down"),
    ] {
        v.push((
            format!("blk.{n}.nextn.{nextn}.weight"),
            format!("blk.3.{like}.weight"),
        ));
    }
    v
}

#[test]
fn an_mtp_block_is_skipped_and_the_trunk_runs_as_without_it() {
    let plain = Qwen35::load(&fixtures().join("models/tiny-a/model-q8_0.gguf")).unwrap();
    let n = plain.cfg.n_layers;
    let block = mtp_block(n);
    let extra: Vec<(&str, &str)> = block
        .iter()
        .map(|(a, b)| (a.as_str(), b.as_str()))
        .collect();
    // llama.cpp writes one entry per block, the MTP block's false (attention).
    let mut flags: Vec<bool> = plain
        .cfg
        .layers
        .iter()
        .map(|k| *k == LayerKind::DeltaNet)
        .collect();
    flags.push(false);
    let recurrent = Value::array(ValueType::Bool, flags);
    let with_mtp = rewrite(
        "mtp",
        &[
            ("qwen35.block_count", Some(Value::U32(n as u32 + 1))),
            ("qwen35.nextn_predict_layers", Some(Value::U32(1))),
            ("qwen35.attention.recurrent_layers", Some(recurrent.clone())),
        ],
        &extra,
    );
    let m = Qwen35::load(&with_mtp).unwrap();
    assert_eq!(m.cfg.n_layers, n);
    assert_eq!(m.cfg.mtp_layers, 1);
    assert_eq!(m.cfg.layers, plain.cfg.layers);
    assert!(m.weights.get(&format!("blk.{n}.attn_q.weight")).is_none());
    assert_eq!(m.weights.tensors.len(), plain.weights.tensors.len());
    assert_eq!(logits(&m), logits(&plain));

    // Without `nextn_predict_layers` the same block would pass for a fifth attention layer;
    // its nextn tensors give it away.
    let unmarked = rewrite(
        "mtp-unmarked",
        &[
            ("qwen35.block_count", Some(Value::U32(n as u32 + 1))),
            ("qwen35.attention.recurrent_layers", Some(recurrent)),
        ],
        &extra,
    );
    let e = err(&unmarked);
    assert!(
        e.contains(&format!("blk.{n}.nextn.")) && e.contains("nextn_predict_layers is missing"),
        "{e}"
    );

    let all_mtp = rewrite(
        "mtp-all",
        &[
            ("qwen35.block_count", Some(Value::U32(1))),
            ("qwen35.nextn_predict_layers", Some(Value::U32(1))),
        ],
        &[],
    );
    assert!(
        err(&all_mtp).contains("leaves no trunk layer"),
        "{}",
        err(&all_mtp)
    );
}

#[test]
fn per_layer_head_counts_with_zeros_for_recurrent_layers_read_as_the_attention_value() {
    // llama.cpp writes some head counts per layer, 0 where a layer has no attention.
    let plain = Qwen35::load(&fixtures().join("models/tiny-a/model-q8_0.gguf")).unwrap();
    let per_layer: Vec<u32> = plain
        .cfg
        .layers
        .iter()
        .map(|k| match k {
            LayerKind::Attention => plain.cfg.n_kv_heads as u32,
            LayerKind::DeltaNet => 0,
        })
        .collect();
    assert_eq!(per_layer[0], 0, "the fixture starts with a DeltaNet layer");
    let p = rewrite(
        "kv-array",
        &[(
            "qwen35.attention.head_count_kv",
            Some(Value::array(ValueType::U32, per_layer)),
        )],
        &[],
    );
    let m = Qwen35::load(&p).unwrap();
    assert_eq!(m.cfg.n_kv_heads, plain.cfg.n_kv_heads);
    assert_eq!(logits(&m), logits(&plain));
}

#[test]
fn layers_past_block_count_and_mismatched_keys_are_refused() {
    let fewer = rewrite("fewer", &[("qwen35.block_count", Some(Value::U32(3)))], &[]);
    let e = err(&fewer);
    assert!(
        e.contains("blk.3.") && e.contains("past the model's 3 layers"),
        "{e}"
    );

    let v = rewrite(
        "value-length",
        &[("qwen35.attention.value_length", Some(Value::U32(32)))],
        &[],
    );
    assert!(err(&v).contains("attention.value_length 32"), "{}", err(&v));

    for (tag, key, value, needle) in [
        (
            "eps-inf",
            "qwen35.attention.layer_norm_rms_epsilon",
            f32::INFINITY,
            "rms eps",
        ),
        (
            "eps-neg",
            "qwen35.attention.layer_norm_rms_epsilon",
            -1e-6,
            "rms eps",
        ),
        ("rope-zero", "qwen35.rope.freq_base", 0.0, "rope base"),
        ("rope-nan", "qwen35.rope.freq_base", f32::NAN, "rope base"),
    ] {
        let p = rewrite(tag, &[(key, Some(Value::F32(value)))], &[]);
        assert!(err(&p).contains(needle), "{tag}: {}", err(&p));
    }
}
