//! How the target loader reads the layer keys of a `qwen35` GGUF: llama.cpp's MTP (nextn)
//! blocks counted in `block_count` and appended after the trunk, tensors of layers past
//! `block_count`, and head-dim and float keys that would make a wrong model load quietly.

mod common;

use common::fixtures;
use deltaspec::gguf::{GgufFile, GgufWriter, Value, ValueType};
use deltaspec::model::{LayerKind, Qwen35};
use std::path::{Path, PathBuf};

const FIXTURE: &str = "models/tiny-a/model-q8_0.gguf";

fn fixture() -> GgufFile {
    GgufFile::open(&fixtures().join(FIXTURE)).unwrap()
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
    rewrite_with(FIXTURE, tag, kv, extra)
}

/// [`rewrite`] of another fixture file, keys only.
fn rewrite_from(file: &str, tag: &str, kv: &[(&str, Option<Value>)]) -> Tmp {
    rewrite_with(file, tag, kv, &[])
}

fn rewrite_with(
    file: &str,
    tag: &str,
    kv: &[(&str, Option<Value>)],
    extra: &[(&str, &str)],
) -> Tmp {
    let f = GgufFile::open(&fixtures().join(file)).unwrap();
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

#[test]
fn yarn_rope_scaling_is_applied_from_gguf_keys_and_hf_configs_alike() {
    let yarn = [
        ("qwen35.rope.scaling.type", Some(Value::from("yarn"))),
        ("qwen35.rope.scaling.factor", Some(Value::F32(4.0))),
        (
            "qwen35.rope.scaling.original_context_length",
            Some(Value::U32(8)),
        ),
    ];
    let plain = Qwen35::load(&fixtures().join("models/tiny-a/model-q8_0.gguf")).unwrap();
    let p = rewrite("yarn", &yarn, &[]);
    let m = Qwen35::load(&p).unwrap();
    let y = m.cfg.rope_scaling.as_ref().expect("the YaRN keys are read");
    assert_eq!((y.factor, y.original_context_length), (4.0, 8));
    // The rotation changes (a model that ignored the keys would give the plain logits).
    let (a, b) = (logits(&m), logits(&plain));
    assert!(
        common::rel_err(&a, &b) > 1e-3,
        "YaRN left the logits unchanged"
    );

    // The same scaling through an HF config.json gives the same model.
    let dir = std::env::temp_dir().join(format!("deltaspec-yarn-hf-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let src = fixtures().join("models/tiny-a");
    std::fs::copy(src.join("model.safetensors"), dir.join("model.safetensors")).unwrap();
    let mut cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(src.join("config.json")).unwrap()).unwrap();
    let params = cfg
        .get_mut("rope_parameters")
        .and_then(|p| p.as_object_mut())
        .expect("the fixture's config has rope_parameters");
    params.insert("rope_type".into(), "yarn".into());
    params.insert("factor".into(), 4.0.into());
    params.insert("original_max_position_embeddings".into(), 8.into());
    std::fs::write(dir.join("config.json"), cfg.to_string()).unwrap();
    let hf = Qwen35::load(&dir).unwrap();
    assert_eq!(hf.cfg.rope_scaling, m.cfg.rope_scaling);
    let f32_yarn = rewrite_from("models/tiny-a/model-f32.gguf", "yarn-f32", &yarn);
    let e = common::rel_err(&logits(&hf), &logits(&Qwen35::load(&f32_yarn).unwrap()));
    assert!(e <= 1e-5, "HF and GGUF YaRN models differ: {e:e}");
    let _ = std::fs::remove_dir_all(&dir);

    // Scaling types the graph does not implement are refused, not ignored.
    let linear = rewrite(
        "linear",
        &[
            ("qwen35.rope.scaling.type", Some(Value::from("linear"))),
            ("qwen35.rope.scaling.factor", Some(Value::F32(2.0))),
        ],
        &[],
    );
    assert!(
        err(&linear).contains("rope scaling type 'linear'"),
        "{}",
        err(&linear)
    );
    // A linear factor of 1 scales nothing.
    let unit = rewrite(
        "linear-1",
        &[
            ("qwen35.rope.scaling.type", Some(Value::from("linear"))),
            ("qwen35.rope.scaling.factor", Some(Value::F32(1.0))),
        ],
        &[],
    );
    assert_eq!(logits(&Qwen35::load(&unit).unwrap()), b);
}
