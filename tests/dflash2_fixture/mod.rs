//! A synthetic DFlash2 checkpoint for the tiny-a target, in the z-lab / inco layout: the
//! committed tiny DFlash drafter's backbone (tests/fixtures/drafters/dflash-a) plus random conv
//! and selector tensors under their release names, and a config.json with the DFlash2 keys
//! (block_size and the dflash2 numbers inside `dflash_config`, as the Qwen3.8 release has them).
#![allow(dead_code)]

use deltaspec::util::rng::Rng;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub const HIDDEN: usize = 64;
pub const VOCAB: usize = 256;
pub const LAYERS: usize = 2;
pub const GROUP: usize = 16;
pub const TAPS: usize = 2;
pub const RANK: usize = 8;
pub const TOP_K: usize = 4;
pub const BLOCK: usize = 5;

pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

pub fn target_dir() -> PathBuf {
    fixtures().join("models/tiny-a")
}

/// Edits applied to the checkpoint before it is written.
#[derive(Default)]
pub struct Edits {
    /// Tensors left out (release names).
    pub drop: Vec<String>,
    /// Extra tensors (release name, shape).
    pub extra: Vec<(String, Vec<usize>)>,
    /// `dflash_config` keys removed.
    pub drop_keys: Vec<String>,
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Writes the checkpoint to `dir` (created) and returns it.
pub fn write(dir: &Path, seed: u64, edits: &Edits) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let src = fixtures().join("drafters/dflash-a");
    let bytes = std::fs::read(src.join("model.safetensors")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let mut tensors: BTreeMap<String, (Vec<usize>, Vec<u8>)> = BTreeMap::new();
    for (name, v) in st.tensors() {
        assert_eq!(v.dtype(), safetensors::Dtype::F32, "{name}");
        tensors.insert(name, (v.shape().to_vec(), v.data().to_vec()));
    }
    let mut rng = Rng::new(seed);
    let mut add = |name: String, shape: Vec<usize>, vals: Vec<f32>| {
        tensors.insert(name, (shape, f32_bytes(&vals)));
    };
    let g = HIDDEN / GROUP;
    for i in 0..LAYERS {
        for conv in ["attention_conv", "mlp_conv"] {
            // Near an identity conv (tap 0 ≈ 1, tap 1 small) so the backbone still drafts.
            let base: Vec<f32> = (0..2 * TAPS * HIDDEN)
                .map(|j| {
                    let tap = (j / HIDDEN) % TAPS;
                    (if tap == 0 { 1.0 } else { 0.0 }) + 0.2 * rng.normal()
                })
                .collect();
            add(
                format!("layers.{i}.{conv}.base_kernel"),
                vec![2, TAPS, HIDDEN],
                base,
            );
            add(
                format!("layers.{i}.{conv}.kernel_projection.weight"),
                vec![2 * TAPS * g, HIDDEN],
                rng.vec_normal(2 * TAPS * g * HIDDEN, 0.05),
            );
        }
    }
    for cb in ["predecessor_codebook", "successor_codebook"] {
        add(
            format!("candidate_selector.{cb}"),
            vec![VOCAB, RANK],
            rng.vec_normal(VOCAB * RANK, 1.0),
        );
    }
    add(
        "candidate_selector.hidden_projection.weight".into(),
        vec![RANK, HIDDEN],
        rng.vec_normal(RANK * HIDDEN, 0.3),
    );
    for (name, shape) in &edits.extra {
        let n = shape.iter().product();
        add(name.clone(), shape.clone(), vec![0.5; n]);
    }
    for name in &edits.drop {
        assert!(tensors.remove(name).is_some(), "no tensor {name} to drop");
    }
    let views: Vec<(String, safetensors::tensor::TensorView)> = tensors
        .iter()
        .map(|(n, (s, d))| {
            let v = safetensors::tensor::TensorView::new(safetensors::Dtype::F32, s.clone(), d)
                .unwrap();
            (n.clone(), v)
        })
        .collect();
    safetensors::serialize_to_file(views, None, &dir.join("model.safetensors")).unwrap();

    let mut cfg: Value =
        serde_json::from_str(&std::fs::read_to_string(src.join("config.json")).unwrap()).unwrap();
    let top = cfg.as_object_mut().unwrap();
    top.remove("block_size");
    top.insert("is_causal".into(), Value::Bool(false));
    let d = top
        .get_mut("dflash_config")
        .and_then(Value::as_object_mut)
        .unwrap();
    d.insert("block_size".into(), BLOCK.into());
    d.insert("conv_kernel_size".into(), TAPS.into());
    d.insert("conv_group_size".into(), GROUP.into());
    d.insert("selector_rank".into(), RANK.into());
    d.insert("selector_top_k".into(), TOP_K.into());
    for k in &edits.drop_keys {
        d.remove(k);
    }
    std::fs::write(
        dir.join("config.json"),
        serde_json::to_string_pretty(&cfg).unwrap(),
    )
    .unwrap();
    dir.to_path_buf()
}

/// A scratch directory for one test.
pub fn scratch(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("deltaspec-df2-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}
