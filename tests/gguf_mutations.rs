//! Mutated target files never panic: random byte edits of the fixture's header and random edits
//! of its keys and tensor shapes (rewritten as valid GGUF) either load and run one CPU forward,
//! or fail with an error. A fixed-seed slice of the run that found f6222b6's quiet misloads
//! (tens of thousands of mutations, no panic).

mod common;

use common::fixtures;
use deltaspec::backend;
use deltaspec::gguf::{GgufFile, GgufWriter, Value};
use deltaspec::model::qwen35::{GraphOptions, LogitRows};
use deltaspec::model::{Qwen35, Session};
use deltaspec::util::rng::Rng;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

const FIXTURE: &str = "models/tiny-a/model-q8_0.gguf";

/// Loads `path` and runs two tokens through it; `Err` for any error on the way.
fn load_and_run(path: &Path) -> Result<(), String> {
    let m = Qwen35::load(path).map_err(|e| e.to_string())?;
    let mut be = backend::create("cpu").map_err(|e| e.to_string())?;
    let mut s = Session::new(&m, be.as_mut(), 8).map_err(|e| e.to_string())?;
    let opts = GraphOptions {
        logits: LogitRows::Last,
        argmax: true,
        ..Default::default()
    };
    s.forward(&[1, 2], &opts).map_err(|e| e.to_string())?;
    Ok(())
}

/// Runs `load_and_run` on each file `make(i)` writes; returns the cases that panicked.
fn panics(n: usize, path: &Path, mut make: impl FnMut(usize) -> Option<String>) -> Vec<String> {
    let mut out = Vec::new();
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    for i in 0..n {
        let Some(what) = make(i) else { continue };
        if let Err(p) = catch_unwind(AssertUnwindSafe(|| load_and_run(path))) {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            out.push(format!("{what}: {msg}"));
        }
    }
    std::panic::set_hook(hook);
    out
}

fn scratch(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("deltaspec-mut-{name}-{}.gguf", std::process::id()))
}

#[test]
fn byte_edits_of_the_header_never_panic() {
    let src = std::fs::read(fixtures().join(FIXTURE)).unwrap();
    let header = GgufFile::from_bytes(src.clone()).unwrap().data_offset();
    let path = scratch("bytes");
    let mut rng = Rng::new(17);
    let bad = panics(400, &path, |i| {
        let mut b = src.clone();
        let p = rng.below(header);
        let what = match rng.below(3) {
            0 => {
                b[p] ^= 1 << rng.below(8);
                format!("#{i}: bit flip at {p}")
            }
            1 => {
                let p = p & !7;
                let v = [u64::MAX, 1 << 40, rng.below(64) as u64][rng.below(3)];
                b[p..p + 8].copy_from_slice(&v.to_le_bytes());
                format!("#{i}: u64 {v} at {p}")
            }
            _ => {
                b[p] = rng.next_u32() as u8;
                format!("#{i}: byte at {p}")
            }
        };
        std::fs::write(&path, &b).unwrap();
        Some(what)
    });
    let _ = std::fs::remove_file(&path);
    assert!(bad.is_empty(), "panics: {bad:#?}");
}

#[test]
fn key_and_shape_edits_never_panic() {
    let f = GgufFile::open(&fixtures().join(FIXTURE)).unwrap();
    let keys: Vec<usize> = (0..f.metadata.len())
        .filter(|&i| f.metadata[i].1.as_u64().is_some() || f.metadata[i].1.as_f64().is_some())
        .collect();
    let path = scratch("keys");
    let mut rng = Rng::new(23);
    let bad = panics(400, &path, |i| {
        let mut md = f.metadata.clone();
        let mut shapes: Vec<Vec<u64>> = f.tensors.iter().map(|t| t.ne.clone()).collect();
        let what = if rng.below(3) < 2 {
            let (k, v) = &mut md[keys[rng.below(keys.len())]];
            let o = v.as_f64().unwrap_or(0.0);
            let nv = match v {
                Value::F32(_) => Value::F32([0.0, -1.0, f32::NAN, f32::INFINITY][rng.below(4)]),
                _ => {
                    let n = [0.0, 1.0, o + 1.0, o - 1.0, o * 2.0, (o / 2.0).floor()][rng.below(6)];
                    Value::U32(n.max(0.0) as u32)
                }
            };
            let what = format!("#{i}: {k} {v:?} -> {nv:?}");
            *v = nv;
            what
        } else {
            let t = rng.below(shapes.len());
            let d = rng.below(shapes[t].len());
            let old = shapes[t].clone();
            let blk = f.tensors[t].dtype.block_elems() as u64;
            shapes[t][d] = if d == 0 {
                shapes[t][0] + blk
            } else {
                [shapes[t][d] + 1, (shapes[t][d] / 2).max(1), 1][rng.below(3)]
            };
            format!("#{i}: {} {old:?} -> {:?}", f.tensors[t].name, shapes[t])
        };
        let mut w = GgufWriter::new();
        for (k, v) in md.iter().filter(|(k, _)| k != "general.alignment") {
            w.add_kv(k, v.clone());
        }
        for (t, ne) in f.tensors.iter().zip(&shapes) {
            let n = ne.iter().product::<u64>() as usize;
            let data = if *ne == t.ne {
                f.tensor_bytes(t).to_vec()
            } else {
                vec![0u8; t.dtype.bytes_for(n)?]
            };
            w.add_tensor(&t.name, ne, t.dtype, data).ok()?;
        }
        w.write_file(&path).unwrap();
        Some(what)
    });
    let _ = std::fs::remove_file(&path);
    assert!(bad.is_empty(), "panics: {bad:#?}");
}
