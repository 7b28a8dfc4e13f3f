//! The DFlash drafter against HF transformers (`MuseGlimmerAssistantModel`, the z-lab forward):
//! our converter → GGUF → `deltaspec draft` on CPU reproduces `draft_logits` of
//! tests/fixtures/drafters/*/reference.safetensors (tools/oracle/make_drafter_fixture.py), the
//! cached-KV path over several appends gives the same, and bad drafters / checkpoints are refused
//! with errors that say what is wrong.

mod common;

use common::{argmax_rows, fixtures, read_safetensors, rel_err};
use deltaspec::backend;
use deltaspec::model::draft::convert::{OutType, convert_dflash};
use deltaspec::model::draft::{DFlash, DraftSession, context_features};
use deltaspec::model::qwen35::{GraphOptions, LogitRows};
use deltaspec::model::{Qwen35, Session};
use std::path::{Path, PathBuf};
use std::process::Command;

/// dflash-c has YaRN rope (transformers ≥ 5 `rope_parameters`, non-default betas) and taps the
/// target's last layer.
const DRAFTERS: [(&str, &str); 3] = [
    ("dflash-a", "tiny-a"),
    ("dflash-b", "tiny-b"),
    ("dflash-c", "tiny-a"),
];

fn drafter_dir(name: &str) -> PathBuf {
    fixtures().join("drafters").join(name)
}
fn target_dir(name: &str) -> PathBuf {
    fixtures().join("models").join(name)
}

/// A fresh scratch directory for one test.
fn scratch(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("deltaspec-draft-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

struct Reference {
    tokens: Vec<u32>,
    context: Vec<f32>,
    logits: Vec<f32>,
    tokens_out: Vec<usize>,
    vocab: usize,
}

fn reference(name: &str) -> Reference {
    let r = read_safetensors(&drafter_dir(name).join("reference.safetensors"));
    let (shape, logits) = r["draft_logits"].clone();
    Reference {
        tokens: r["tokens"].1.iter().map(|&v| v as u32).collect(),
        context: r["context"].1.clone(),
        logits,
        tokens_out: r["draft_tokens"].1.iter().map(|&v| v as usize).collect(),
        vocab: shape[1],
    }
}

fn convert(name: &str, dir: &Path, outtype: OutType) -> PathBuf {
    let out = dir.join(format!("{name}.gguf"));
    convert_dflash(&drafter_dir(name), &out, outtype)
        .unwrap_or_else(|e| panic!("converting {name}: {e}"));
    out
}

const STALE: &str =
    "if a target fixture was regenerated, rerun tools/oracle/make_drafter_fixture.py";

#[test]
fn cli_convert_and_draft_match_hf() {
    let dir = scratch("cli");
    for (name, target) in DRAFTERS {
        let r = reference(name);
        let gguf = dir.join(format!("{name}.gguf"));
        let out = Command::new(common::deltaspec_bin())
            .args(["convert", "--draft"])
            .arg(drafter_dir(name))
            .arg("--out")
            .arg(&gguf)
            .args(["--outtype", "f32"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "convert: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let toks = dir.join(format!("{name}.json"));
        std::fs::write(&toks, serde_json::to_string(&r.tokens).unwrap()).unwrap();
        let res = dir.join(format!("{name}.safetensors"));
        let out = Command::new(common::deltaspec_bin())
            .arg("draft")
            .arg("--model")
            .arg(target_dir(target))
            .arg("--draft")
            .arg(&gguf)
            .arg("--tokens")
            .arg(&toks)
            .arg("--out")
            .arg(&res)
            .args(["--backend", "cpu"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "draft: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let got = read_safetensors(&res);
        let (shape, logits) = &got["draft_logits"];
        let bsz = r.logits.len() / r.vocab + 1;
        assert_eq!(shape, &vec![bsz - 1, r.vocab]);
        let err = rel_err(logits, &r.logits);
        println!("{name}: draft_logits rel err {err:.3e}");
        assert!(err <= 1e-4, "{name}: rel err {err:.3e} ({STALE})");
        let toks: Vec<usize> = got["draft_tokens"].1.iter().map(|&v| v as usize).collect();
        assert_eq!(toks, r.tokens_out, "{name}: draft_tokens");
        assert_eq!(argmax_rows(logits, r.vocab), r.tokens_out);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Target features for the context, the drafter loaded for the target, and the reference.
fn setup(name: &str, target: &str, dir: &Path, outtype: OutType) -> (Qwen35, DFlash, Reference) {
    let t = Qwen35::load(&target_dir(target)).unwrap();
    let d = DFlash::load_for(&convert(name, dir, outtype), &t).unwrap();
    (t, d, reference(name))
}

fn features(t: &Qwen35, d: &DFlash, ctx: &[u32]) -> Vec<f32> {
    let mut be = backend::create("cpu").unwrap();
    let mut s = Session::new(t, be.as_mut(), ctx.len()).unwrap();
    let opts = GraphOptions {
        logits: LogitRows::Last,
        argmax: false,
        capture: d.cfg.target_layer_ids.clone(),
        read_logits: true,
    };
    let step = s.forward(ctx, &opts).unwrap();
    context_features(d, t, &step, ctx.len()).unwrap()
}

#[test]
fn context_features_match_hf_hidden_states() {
    let dir = scratch("feat");
    for (name, target) in DRAFTERS {
        let (t, d, r) = setup(name, target, &dir, OutType::F32);
        let n = r.tokens.len();
        let f = features(&t, &d, &r.tokens[..n - 1]);
        let err = rel_err(&f, &r.context);
        println!("{name}: context features rel err {err:.3e}");
        assert!(err <= 1e-4, "{name}: rel err {err:.3e} ({STALE})");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn cached_kv_appends_and_truncation_match_one_shot() {
    let dir = scratch("cached");
    for (name, target) in DRAFTERS {
        let (t, d, r) = setup(name, target, &dir, OutType::F32);
        let n = r.tokens.len();
        let f = features(&t, &d, &r.tokens[..n - 1]);
        let w = d.cfg.feature_width();
        let mut be = backend::create("cpu").unwrap();
        let mut ds = DraftSession::new(&d, &t, be.as_mut(), n - 1 + d.cfg.block_size).unwrap();
        // Round 1: 4 rows and a draft; round 2: 3 more rows, a draft that is then rejected
        // (truncated back); round 3: the rest, drafting from t[n-1].
        ds.draft(&f[..4 * w], r.tokens[4]).unwrap();
        assert_eq!(ds.n_ctx(), 4);
        ds.draft(&f[4 * w..7 * w], 3).unwrap();
        ds.truncate(5);
        let out = ds.draft(&f[5 * w..], r.tokens[n - 1]).unwrap();
        assert_eq!(ds.n_ctx(), n - 1);
        let err = rel_err(&out.logits, &r.logits);
        println!("{name}: cached-KV rounds rel err {err:.3e}");
        assert!(err <= 1e-4, "{name}: rel err {err:.3e}");
        let toks: Vec<usize> = out.tokens.iter().map(|&v| v as usize).collect();
        assert_eq!(toks, r.tokens_out, "{name}");
        // A block past the caches is refused.
        let e = ds.draft(&f[..w], 0).unwrap_err().to_string();
        assert!(e.contains("context full"), "{e}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn narrower_outtypes_stay_close() {
    let dir = scratch("outtype");
    for (name, target) in DRAFTERS {
        let q = |s: &str| OutType::parse(s).unwrap();
        // The 4-bit mixes: these drafters' rows (64 / 96 values) are not whole 256-blocks, so
        // they take llama.cpp's 32-value fallbacks (IQ4_NL, Q5_0, Q8_0 for the heavy tensors).
        for (ot, tol) in [
            (OutType::BF16, if name == "dflash-b" { 1e-4 } else { 2e-2 }),
            (OutType::F16, 5e-3),
            (q("q8_0"), 5e-2),
            (q("q4_k_m"), 0.25),
            (q("iq4_xs"), 0.25),
        ] {
            let (t, d, r) = setup(name, target, &dir, ot);
            let n = r.tokens.len();
            let f = features(&t, &d, &r.tokens[..n - 1]);
            let mut be = backend::create("cpu").unwrap();
            let mut ds = DraftSession::new(&d, &t, be.as_mut(), n - 1 + d.cfg.block_size).unwrap();
            let out = ds.draft(&f, r.tokens[n - 1]).unwrap();
            let err = rel_err(&out.logits, &r.logits);
            println!("{name} {ot:?}: rel err {err:.3e}");
            assert!(err <= tol, "{name} {ot:?}: rel err {err:.3e} > {tol}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn quantized_outtypes_pick_types_per_tensor() {
    use deltaspec::gguf::GgufFile;
    use deltaspec::tensor::DType;
    let dir = scratch("mix");
    // dflash-a: hidden 64, ffn 96, so no row is a whole 256-value block and every 4-bit choice
    // is llama.cpp's fallback; norms stay F32 under every outtype.
    for (ot, gate, down, norm) in [
        ("q8_0", DType::Q8_0, DType::Q8_0, DType::F32),
        ("q4_k_m", DType::Q5_0, DType::Q8_0, DType::F32),
        ("iq4_xs", DType::Iq4Nl, DType::Iq4Nl, DType::F32),
    ] {
        let g = convert("dflash-a", &dir, OutType::parse(ot).unwrap());
        let f = GgufFile::open(&g).unwrap();
        let ty = |n: &str| f.tensor(n).unwrap_or_else(|| panic!("{n}")).dtype;
        assert_eq!(ty("blk.0.ffn_gate.weight"), gate, "{ot}");
        assert_eq!(ty("blk.1.ffn_down.weight"), down, "{ot}");
        assert_eq!(ty("blk.0.attn_norm.weight"), norm, "{ot}");
        // `deltaspec info` describes a drafter file too.
        let out = Command::new(common::deltaspec_bin())
            .arg("info")
            .arg(&g)
            .output()
            .unwrap();
        let s = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{s}");
        assert!(s.contains("(DFlash, 2 layers)"), "{s}");
        assert!(s.contains("target layers: [0, 2]"), "{s}");
        assert!(s.contains(&format!("{gate} ×")), "{s}");
    }
    let e = OutType::parse("q3_k").unwrap_err().to_string();
    assert!(e.contains("iq4_xs"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

// ---------------------------------------------------------------------------------------------
// Errors

/// Copies a drafter checkpoint and edits its config.json.
fn edited_checkpoint(dir: &Path, name: &str, edit: impl Fn(&mut serde_json::Value)) -> PathBuf {
    let d = dir.join(format!("{name}-edited"));
    std::fs::create_dir_all(&d).unwrap();
    for f in ["config.json", "model.safetensors"] {
        std::fs::copy(drafter_dir(name).join(f), d.join(f)).unwrap();
    }
    let mut j: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("config.json")).unwrap()).unwrap();
    edit(&mut j);
    std::fs::write(d.join("config.json"), j.to_string()).unwrap();
    d
}

fn load_err(ckpt: &Path, out: &Path, target: &str) -> String {
    convert_dflash(ckpt, out, OutType::F32).unwrap();
    let t = Qwen35::load(&target_dir(target)).unwrap();
    match DFlash::load_for(out, &t) {
        Ok(_) => panic!("{} loaded for {target}", ckpt.display()),
        Err(e) => e.to_string(),
    }
}

#[test]
fn loader_refuses_drafters_that_do_not_fit_the_target() {
    let dir = scratch("fit");
    // hidden: a 64-wide drafter on the 256-wide target
    let e = load_err(&drafter_dir("dflash-a"), &dir.join("h.gguf"), "tiny-b");
    assert!(e.contains("hidden size 64 vs the target's 256"), "{e}");
    // vocab
    let ck = edited_checkpoint(&dir, "dflash-a", |j| j["vocab_size"] = 300.into());
    let e = load_err(&ck, &dir.join("v.gguf"), "tiny-a");
    assert!(e.contains("vocab 300 vs the target's 256"), "{e}");
    std::fs::remove_dir_all(&ck).unwrap();
    // a target layer id past the target's 4 layers
    let ck = edited_checkpoint(&dir, "dflash-a", |j| {
        j["dflash_config"]["target_layer_ids"] = serde_json::json!([0, 7])
    });
    let e = load_err(&ck, &dir.join("l.gguf"), "tiny-a");
    assert!(e.contains("target layer id 7 is out of range"), "{e}");
    std::fs::remove_dir_all(&ck).unwrap();
    // trained for a deeper target
    let ck = edited_checkpoint(&dir, "dflash-a", |j| j["num_target_layers"] = 64.into());
    let e = load_err(&ck, &dir.join("d.gguf"), "tiny-a");
    assert!(e.contains("trained for a target of 64 layers"), "{e}");
    std::fs::remove_dir_all(&ck).unwrap();
    // a smaller block_count than the file's layers (the extra layer would be dropped)
    let gguf = convert("dflash-a", &dir, OutType::F32);
    let f = deltaspec::gguf::GgufFile::open(&gguf).unwrap();
    let mut w = deltaspec::gguf::GgufWriter::new();
    for (k, v) in &f.metadata {
        let v = if k.ends_with(".block_count") {
            deltaspec::gguf::Value::U32(1)
        } else {
            v.clone()
        };
        if k != "general.alignment" {
            w.add_kv(k, v);
        }
    }
    for t in &f.tensors {
        w.add_tensor(&t.name, &t.ne, t.dtype, f.tensor_bytes(t).to_vec())
            .unwrap();
    }
    let one = dir.join("one-layer.gguf");
    w.write_file(&one).unwrap();
    let e = DFlash::load(&one).err().unwrap().to_string();
    assert!(
        e.contains("blk.1.") && e.contains("past the model's 1 layers"),
        "{e}"
    );
    // a target GGUF is not a drafter
    let e = DFlash::load(&dir.join("missing.gguf"))
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("not found"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// No output and no temporary file left in `dir` after a failed conversion.
fn assert_nothing_written(dir: &Path, out: &Path) {
    assert!(!out.exists(), "{} was written", out.display());
    let left: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().contains(".tmp."))
        .collect();
    assert!(left.is_empty(), "temporary files left: {left:?}");
}

fn convert_err(ckpt: &Path, out: &Path) -> String {
    let e = convert_dflash(ckpt, out, OutType::F16).err().unwrap();
    assert_nothing_written(out.parent().unwrap(), out);
    e.to_string()
}

#[test]
fn converter_refuses_incomplete_or_unknown_checkpoints() {
    let dir = scratch("conv");
    let out = dir.join("out.gguf");
    // no config.json
    let ck = dir.join("noconfig");
    std::fs::create_dir_all(&ck).unwrap();
    std::fs::copy(
        drafter_dir("dflash-a").join("model.safetensors"),
        ck.join("model.safetensors"),
    )
    .unwrap();
    let e = convert_err(&ck, &out);
    assert!(e.contains("config.json"), "{e}");

    // an unknown tensor, and a missing one
    let bytes = std::fs::read(drafter_dir("dflash-a").join("model.safetensors")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let extra = vec![0u8; 4 * 8];
    let write = |path: &Path, add_extra: bool, drop: Option<&str>| {
        let mut views: Vec<(String, safetensors::tensor::TensorView)> = st
            .tensors()
            .into_iter()
            .filter(|(n, _)| Some(n.as_str()) != drop)
            .collect();
        if add_extra {
            let v = safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![8], &extra)
                .unwrap();
            views.push(("embed_tokens.weight".to_string(), v));
        }
        safetensors::serialize_to_file(views, None, path).unwrap();
    };
    let ck = edited_checkpoint(&dir, "dflash-a", |_| {});
    write(&ck.join("model.safetensors"), true, None);
    let e = convert_err(&ck, &out);
    assert!(e.contains("unknown tensor 'embed_tokens.weight'"), "{e}");
    write(
        &ck.join("model.safetensors"),
        false,
        Some("layers.1.mlp.up_proj.weight"),
    );
    let e = convert_err(&ck, &out);
    assert!(e.contains("blk.1.ffn_up.weight is missing"), "{e}");
    std::fs::remove_dir_all(&ck).unwrap();

    // target layer ids that disagree with fc, and no ids at all
    let ck = edited_checkpoint(&dir, "dflash-a", |j| {
        j["dflash_config"]["target_layer_ids"] = serde_json::json!([0, 1, 2])
    });
    let e = convert_err(&ck, &out);
    assert!(
        e.contains("3 target_layer_ids but fc takes 2 layers"),
        "{e}"
    );
    std::fs::remove_dir_all(&ck).unwrap();
    let ck = edited_checkpoint(&dir, "dflash-a", |j| {
        j["dflash_config"]
            .as_object_mut()
            .unwrap()
            .remove("target_layer_ids");
    });
    let e = convert_err(&ck, &out);
    assert!(e.contains("target_layer_ids is missing"), "{e}");
    std::fs::remove_dir_all(&ck).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn converter_reads_both_config_layouts_and_writes_dflash_keys() {
    let dir = scratch("keys");
    // dflash-a: transformers>=5 layout; dflash-b: top-level keys, a sliding layer
    for (name, theta, block, mask, ids, window) in [
        ("dflash-a", 5e5f32, 4usize, 250u32, vec![0usize, 2], None),
        ("dflash-b", 1e6, 8, 255, vec![1, 2], Some(3usize)),
    ] {
        let d = DFlash::load(&convert(name, &dir, OutType::F32)).unwrap();
        let c = &d.cfg;
        assert_eq!(
            (c.rope_theta, c.block_size, c.mask_token_id),
            (theta, block, mask),
            "{name}"
        );
        assert_eq!(c.target_layer_ids, ids, "{name}");
        assert_eq!(c.sliding_window, window, "{name}");
        assert_eq!(c.sliding_layers, vec![window.is_some(), false], "{name}");
        assert_eq!(c.target_block_count, Some(4), "{name}");
    }
    // YaRN keys from rope_parameters are written and read back (defaults for absent betas,
    // `mscale`/`mscale_all_dim` resolved to HF's attention factor, `truncate`).
    let ck = edited_checkpoint(&dir, "dflash-a", |j| {
        j["rope_parameters"] = serde_json::json!({
            "rope_type": "yarn", "rope_theta": 1e7, "factor": 32.0,
            "original_max_position_embeddings": 8192, "mscale": 0.707, "mscale_all_dim": 1.0,
            "truncate": false
        })
    });
    let d = DFlash::load(&convert(&ck.display().to_string(), &dir, OutType::F32)).unwrap();
    let y = d.cfg.rope_scaling.clone().expect("yarn read back");
    let m = |s: f64| 0.1 * s * 32f64.ln() + 1.0;
    assert_eq!(
        (
            y.factor,
            y.original_context_length,
            y.beta_fast,
            y.beta_slow,
            y.attention_factor,
            y.truncate
        ),
        (
            32.0,
            8192,
            32.0,
            1.0,
            Some((m(0.707) / m(1.0)) as f32),
            false
        )
    );
    assert_eq!(d.cfg.rope_theta, 1e7);
    // dflash-c: the betas as the checkpoint gives them, the derived attention factor.
    let d = DFlash::load(&convert("dflash-c", &dir, OutType::F32)).unwrap();
    let y = d.cfg.rope_scaling.clone().expect("dflash-c has yarn");
    assert_eq!(
        (
            y.factor,
            y.original_context_length,
            y.beta_fast,
            y.beta_slow
        ),
        (8.0, 256, 16.0, 2.0)
    );
    assert_eq!((y.attention_factor, y.truncate), (None, true));
    let _ = std::fs::remove_dir_all(&dir);
}

/// YaRN is applied, not just read: dflash-c without its scaling drafts something else.
#[test]
fn yarn_changes_the_draft() {
    let dir = scratch("yarn");
    let (t, mut d, r) = setup("dflash-c", "tiny-a", &dir, OutType::F32);
    let n = r.tokens.len();
    let f = features(&t, &d, &r.tokens[..n - 1]);
    d.cfg.rope_scaling = None;
    let mut be = backend::create("cpu").unwrap();
    let mut ds = DraftSession::new(&d, &t, be.as_mut(), n - 1 + d.cfg.block_size).unwrap();
    let out = ds.draft(&f, r.tokens[n - 1]).unwrap();
    let err = rel_err(&out.logits, &r.logits);
    println!("dflash-c without YaRN: rel err {err:.3e}");
    assert!(err > 1e-2, "YaRN made no difference ({err:.3e})");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A copy of dflash-a with DSpark heads added under `names` (w1, w2, confidence weight).
fn with_dspark_heads(dir: &Path, tag: &str, names: [&str; 3]) -> PathBuf {
    let d = dir.join(format!("dspark-{tag}"));
    std::fs::create_dir_all(&d).unwrap();
    std::fs::copy(
        drafter_dir("dflash-a").join("config.json"),
        d.join("config.json"),
    )
    .unwrap();
    let bytes = std::fs::read(drafter_dir("dflash-a").join("model.safetensors")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let mut rng = deltaspec::util::rng::Rng::new(5);
    let to_bytes = |v: Vec<f32>| -> Vec<u8> { v.iter().flat_map(|x| x.to_le_bytes()).collect() };
    let w1 = to_bytes(rng.vec_normal(256 * 8, 0.5));
    let w2 = to_bytes(rng.vec_normal(256 * 8, 0.5));
    let cw = to_bytes(rng.vec_normal(72, 0.1));
    let mut views: Vec<(String, safetensors::tensor::TensorView)> = st.tensors();
    for (name, shape, data) in [
        (names[0], vec![256, 8], &w1),
        (names[1], vec![256, 8], &w2),
        (names[2], vec![1, 72], &cw),
    ] {
        let v = safetensors::tensor::TensorView::new(safetensors::Dtype::F32, shape, data).unwrap();
        views.push((name.to_string(), v));
    }
    safetensors::serialize_to_file(views, None, &d.join("model.safetensors")).unwrap();
    d
}

#[test]
fn converter_writes_inline_dspark_heads_in_every_naming_scheme() {
    let dir = scratch("dspark");
    let r = reference("dflash-a");
    let t = Qwen35::load(&target_dir("tiny-a")).unwrap();
    for (tag, names) in [
        (
            "single",
            [
                "markov_head.markov_w1.weight",
                "markov_head.markov_w2.weight",
                "confidence_head.proj.weight",
            ],
        ),
        (
            "sidecar",
            [
                "dspark_markov_head.markov_w1.weight",
                "dspark_markov_head.markov_w2.weight",
                "dspark_confidence_head.weight",
            ],
        ),
        (
            "mtp",
            [
                "mtp.2.markov_head.markov_w1.weight",
                "mtp.2.markov_head.markov_w2.weight",
                "mtp.2.confidence_head.proj.weight",
            ],
        ),
    ] {
        let ck = with_dspark_heads(&dir, tag, names);
        let out = dir.join(format!("{tag}.gguf"));
        convert_dflash(&ck, &out, OutType::F32).unwrap();
        let d = DFlash::load_for(&out, &t).unwrap();
        let ds = d.cfg.dspark.clone().expect("dspark config");
        assert_eq!(
            (ds.markov_rank, ds.vocab, ds.confidence_dim),
            (8, 256, Some(72)),
            "{tag}"
        );
        let bias = d
            .weights
            .get("dflash.dspark.confidence.bias")
            .unwrap()
            .to_f32()
            .unwrap();
        assert_eq!(bias, vec![0.0], "{tag}: missing bias written as zero");

        let n = r.tokens.len();
        let f = features(&t, &d, &r.tokens[..n - 1]);
        let mut be = backend::create("cpu").unwrap();
        let mut s = DraftSession::new(&d, &t, be.as_mut(), n - 1 + d.cfg.block_size).unwrap();
        let o = s.draft(&f, r.tokens[n - 1]).unwrap();
        // The backbone is unchanged; the Markov-corrected logits and tokens come on top.
        let err = rel_err(&o.raw_logits, &r.logits);
        assert!(err <= 1e-4, "{tag}: backbone rel err {err:.3e}");
        assert_eq!(o.tokens.len(), d.cfg.block_size - 1);
        assert_eq!(o.logits.len(), (d.cfg.block_size - 1) * r.vocab);
        assert_eq!(
            argmax_rows(&o.logits, r.vocab),
            o.tokens.iter().map(|&x| x as usize).collect::<Vec<_>>()
        );
        assert_eq!(o.confidence.len(), d.cfg.block_size - 1);
        assert!(o.confidence.iter().all(|c| *c > 0.0 && *c < 1.0), "{tag}");
        std::fs::remove_dir_all(&ck).unwrap();
    }
    // An incomplete Markov head is refused.
    let ck = with_dspark_heads(
        &dir,
        "bad",
        [
            "markov_head.markov_w1.weight",
            "other.weight",
            "confidence_head.proj.weight",
        ],
    );
    let e = convert_err(&ck, &dir.join("bad.gguf"));
    assert!(e.contains("unknown tensor 'other.weight'"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A tree's candidates computed on the device ([`DraftOut::TopK`]: top-k and each row's
/// log-softmax normaliser) equal the host's [`top_logprobs`] over the read-back logits bit for
/// bit on the CPU backend (the DDTree input of before), with the same proposals.
#[test]
fn device_top_k_log_probs_equal_the_host_ones() {
    use deltaspec::model::draft::DraftOut;
    use deltaspec::spec::top_logprobs;
    let dir = scratch("topk");
    for (name, target) in DRAFTERS {
        let (t, d, r) = setup(name, target, &dir, OutType::F32);
        let n = r.tokens.len();
        let f = features(&t, &d, &r.tokens[..n - 1]);
        let mut be = backend::create("cpu").unwrap();
        let mut ds = DraftSession::new(&d, &t, be.as_mut(), n - 1 + d.cfg.block_size).unwrap();
        let full = ds.draft(&f, r.tokens[n - 1]).unwrap();
        let vocab = t.cfg.vocab;
        for k in [1, 3, 8, vocab + 5] {
            ds.truncate(0);
            let out = ds
                .draft_out(&f, r.tokens[n - 1], DraftOut::TopK(k))
                .unwrap();
            assert_eq!(out.tokens, full.tokens, "{name} k {k}: proposals");
            assert!(out.logits.is_empty(), "{name}: logits read back");
            let kk = k.min(vocab);
            let rows = full.tokens.len();
            assert_eq!(out.logsumexp.len(), rows);
            for (i, row) in full.logits.chunks_exact(vocab).enumerate() {
                let want = top_logprobs(row, kk);
                let got: Vec<(u32, f32)> = (0..kk)
                    .map(|j| {
                        let v = out.topk_values[i * kk + j] - out.logsumexp[i];
                        (out.topk_indices[i * kk + j], v)
                    })
                    .collect();
                let bits = |c: &[(u32, f32)]| -> Vec<(u32, u32)> {
                    c.iter().map(|&(t, v)| (t, v.to_bits())).collect()
                };
                assert_eq!(bits(&got), bits(&want), "{name} k {k} row {i}");
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
