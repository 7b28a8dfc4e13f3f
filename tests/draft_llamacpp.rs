//! llama.cpp's `dflash` drafter arch: GGUFs written with llama.cpp's key and tensor names (both
//! meanings of `dflash.target_layers`) load and draft the HF reference logits of the fixtures;
//! drafters that do not fit the target and files with unmapped tensors are refused.

mod common;

use common::{fixtures, read_safetensors, rel_err};
use deltaspec::backend;
use deltaspec::gguf::{GgufFile, GgufWriter, Value, ValueType};
use deltaspec::model::draft::convert::{OutType, convert_dflash};
use deltaspec::model::draft::{ARCH, DFlash, DraftSession, context_features};
use deltaspec::model::qwen35::{GraphOptions, LogitRows};
use deltaspec::model::{Qwen35, Session};
use std::path::{Path, PathBuf};

fn scratch(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("deltaspec-llamacpp-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// How the file numbers `dflash.target_layers`.
#[derive(Clone, Copy)]
enum Ids {
    /// `target_layer_id + 1` (llama-cpp-python 0.3.36's converter), no `target_hidden_size`.
    HfIndex,
    /// Raw ids with `dflash.target_hidden_size`.
    Raw,
}

/// Rewrites one of our `qwen35-dflash-draft` files the way llama.cpp's converter lays it out.
/// `edit` may change the metadata before it is written.
fn to_llamacpp(src: &Path, out: &Path, ids: Ids, edit: impl Fn(&mut Vec<(String, Value)>)) {
    let f = GgufFile::open(src).unwrap();
    let pre = format!("{ARCH}.");
    let mut kv: Vec<(String, Value)> = vec![("general.architecture".into(), Value::from("dflash"))];
    let hidden = f.get_u64(&format!("{ARCH}.embedding_length")).unwrap();
    for (k, v) in &f.metadata {
        let Some(rest) = k.strip_prefix(&pre) else {
            continue;
        };
        let key = match rest {
            "dflash.block_size" => "dflash.block_size".to_string(),
            "dflash.mask_token_id" => "tokenizer.ggml.mask_token_id".to_string(),
            "dflash.target_layer_ids" => {
                let vals: Vec<i32> = f
                    .get_i64_array(k)
                    .unwrap()
                    .into_iter()
                    .map(|v| match ids {
                        Ids::HfIndex => v as i32 + 1,
                        Ids::Raw => v as i32,
                    })
                    .collect();
                kv.push((
                    "dflash.target_layers".into(),
                    Value::array(ValueType::I32, vals),
                ));
                if let Ids::Raw = ids {
                    kv.push((
                        "dflash.target_hidden_size".into(),
                        Value::U32(hidden as u32),
                    ));
                }
                continue;
            }
            r if r.starts_with("dflash.") => continue,
            // llama.cpp's YaRN beta spelling
            "rope.scaling.beta_fast" => "dflash.rope.scaling.yarn_beta_fast".to_string(),
            "rope.scaling.beta_slow" => "dflash.rope.scaling.yarn_beta_slow".to_string(),
            r => format!("dflash.{r}"),
        };
        kv.push((key, v.clone()));
    }
    edit(&mut kv);
    let mut w = GgufWriter::new();
    for (k, v) in kv {
        w.add_kv(&k, v);
    }
    for t in &f.tensors {
        let name = match t.name.as_str() {
            "dflash.fc.weight" => "fc.weight",
            "dflash.hidden_norm.weight" => "enc.output_norm.weight",
            n => n,
        };
        w.add_tensor(name, &t.ne, t.dtype, f.tensor_bytes(t).to_vec())
            .unwrap();
    }
    w.write_file(out).unwrap();
}

fn converted(name: &str, dir: &Path) -> PathBuf {
    let out = dir.join(format!("{name}.gguf"));
    convert_dflash(&fixtures().join("drafters").join(name), &out, OutType::F32).unwrap();
    out
}

fn target(name: &str) -> Qwen35 {
    Qwen35::load(&fixtures().join("models").join(name)).unwrap()
}

/// The drafter's logits for the fixture's tokens (context = all but the last).
fn draft_logits(t: &Qwen35, d: &DFlash, tokens: &[u32]) -> Vec<f32> {
    let n = tokens.len();
    let mut be = backend::create("cpu").unwrap();
    let mut s = Session::new(t, be.as_mut(), n).unwrap();
    let opts = GraphOptions {
        logits: LogitRows::Last,
        argmax: false,
        capture: d.cfg.target_layer_ids.clone(),
        read_logits: true,
    };
    let step = s.forward(&tokens[..n - 1], &opts).unwrap();
    let f = context_features(d, t, &step, n - 1).unwrap();
    drop(s);
    let mut ds = DraftSession::new(d, t, be.as_mut(), n - 1 + d.cfg.block_size).unwrap();
    ds.draft(&f, tokens[n - 1]).unwrap().logits
}

#[test]
fn llamacpp_layout_matches_hf_with_both_id_conventions() {
    let dir = scratch("match");
    // dflash-c: YaRN (llama.cpp's beta spelling) and the target's last layer (HF index 4).
    for (name, tname) in [("dflash-a", "tiny-a"), ("dflash-c", "tiny-a")] {
        let src = converted(name, &dir);
        let lucebox = DFlash::load(&src).unwrap();
        let r = read_safetensors(
            &fixtures()
                .join("drafters")
                .join(name)
                .join("reference.safetensors"),
        );
        let tokens: Vec<u32> = r["tokens"].1.iter().map(|&v| v as u32).collect();
        let t = target(tname);
        for ids in [Ids::HfIndex, Ids::Raw] {
            let out = dir.join(format!("{name}-llama.gguf"));
            to_llamacpp(&src, &out, ids, |_| {});
            let d = DFlash::load_for(&out, &t).unwrap();
            assert_eq!(
                d.cfg.target_layer_ids, lucebox.cfg.target_layer_ids,
                "{name}"
            );
            assert_eq!(d.cfg.rope_scaling, lucebox.cfg.rope_scaling, "{name}");
            assert_eq!(
                (d.cfg.mask_token_id, d.cfg.block_size),
                (lucebox.cfg.mask_token_id, lucebox.cfg.block_size)
            );
            let err = rel_err(&draft_logits(&t, &d, &tokens), &r["draft_logits"].1);
            println!("{name} llama.cpp layout: rel err {err:.3e}");
            assert!(err <= 1e-4, "{name}: rel err {err:.3e}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

fn load_err(path: &Path, t: &Qwen35) -> String {
    match DFlash::load_for(path, t) {
        Ok(_) => panic!("{} loaded", path.display()),
        Err(e) => e.to_string(),
    }
}

#[test]
fn llamacpp_drafters_that_do_not_fit_are_refused() {
    let dir = scratch("fit");
    let src = converted("dflash-a", &dir);
    let out = dir.join("bad.gguf");
    let tiny_a = target("tiny-a");
    // hidden size: a 64-wide drafter on the 256-wide target
    to_llamacpp(&src, &out, Ids::HfIndex, |_| {});
    let e = load_err(&out, &target("tiny-b"));
    assert!(e.contains("hidden size 64 vs the target's 256"), "{e}");
    // vocab
    to_llamacpp(&src, &out, Ids::HfIndex, |kv| {
        kv.retain(|(k, _)| k != "dflash.vocab_size");
        kv.push(("dflash.vocab_size".into(), Value::U32(300)));
    });
    let e = load_err(&out, &tiny_a);
    assert!(e.contains("vocab 300 vs the target's 256"), "{e}");
    // a target layer past the target's 4 layers (HF index 8 = layer 7)
    to_llamacpp(&src, &out, Ids::HfIndex, |kv| {
        kv.retain(|(k, _)| k != "dflash.target_layers");
        kv.push((
            "dflash.target_layers".into(),
            Value::array(ValueType::I32, [1, 8]),
        ));
    });
    let e = load_err(&out, &tiny_a);
    assert!(e.contains("target layer id 7 is out of range"), "{e}");
    // more target layers than fc is wide for
    to_llamacpp(&src, &out, Ids::HfIndex, |kv| {
        kv.retain(|(k, _)| k != "dflash.target_layers");
        kv.push((
            "dflash.target_layers".into(),
            Value::array(ValueType::I32, [1, 2, 3]),
        ));
    });
    let e = load_err(&out, &tiny_a);
    assert!(e.contains("fc.weight"), "{e}");
    // target_hidden_size that is not the drafter's
    to_llamacpp(&src, &out, Ids::Raw, |kv| {
        kv.retain(|(k, _)| k != "dflash.target_hidden_size");
        kv.push(("dflash.target_hidden_size".into(), Value::U32(128)));
    });
    let e = load_err(&out, &tiny_a);
    assert!(e.contains("target_hidden_size 128"), "{e}");
    // no target layers, no mask token
    for key in ["dflash.target_layers", "tokenizer.ggml.mask_token_id"] {
        to_llamacpp(&src, &out, Ids::HfIndex, |kv| kv.retain(|(k, _)| k != key));
        let e = load_err(&out, &tiny_a);
        assert!(
            e.contains(key.split('.').next_back().unwrap()),
            "{key}: {e}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
