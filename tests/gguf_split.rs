//! Split models (llama.cpp's `gguf-split` layout): the first shard loads the whole model, equal to
//! the unsplit file, and shards that do not fit together are refused, naming the shard.

mod common;

use common::fixtures;
use deltaspec::gguf::{GgufFile, GgufWriter, Value};
use deltaspec::model::Qwen35;
use std::path::{Path, PathBuf};

const FIXTURE: &str = "models/tiny-a/model-q8_0.gguf";

fn scratch(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("deltaspec-split-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Writes the fixture as `count` shards in `dir` as gguf-split does (all metadata in the first,
/// the split keys in each, tensors dealt out in order); `shard_of(i)` picks tensor i's shard and
/// `total` overrides `split.tensors.count`; `dup` also puts tensor 0 in the last shard.
/// Returns the shard paths.
fn split_with(
    dir: &Path,
    count: u16,
    shard_of: impl Fn(usize) -> u16,
    total: Option<i32>,
    dup: bool,
) -> Vec<PathBuf> {
    let f = GgufFile::open(&fixtures().join(FIXTURE)).unwrap();
    let total = total.unwrap_or(f.tensors.len() as i32);
    (0..count)
        .map(|no| {
            let mut w = GgufWriter::new();
            if no == 0 {
                for (k, v) in &f.metadata {
                    if k != "general.alignment" {
                        w.add_kv(k, v.clone());
                    }
                }
            }
            w.add_kv("split.no", Value::U16(no));
            w.add_kv("split.count", Value::U16(count));
            w.add_kv("split.tensors.count", Value::I32(total));
            for (i, t) in f.tensors.iter().enumerate() {
                if shard_of(i) == no || (dup && i == 0 && no == count - 1) {
                    w.add_tensor(&t.name, &t.ne, t.dtype, f.tensor_bytes(t).to_vec())
                        .unwrap();
                }
            }
            let p = dir.join(format!("tiny-{:05}-of-{count:05}.gguf", no + 1));
            w.write_file(&p).unwrap();
            p
        })
        .collect()
}

fn split(
    dir: &Path,
    count: u16,
    shard_of: impl Fn(usize) -> u16,
    total: Option<i32>,
) -> Vec<PathBuf> {
    split_with(dir, count, shard_of, total, false)
}

fn logits(m: &Qwen35) -> Vec<f32> {
    common::cpu_logits(m, &[5, 17, 3, 250, 9])
}

fn err(path: &Path) -> String {
    common::target_load_err(path)
}

#[test]
fn the_first_shard_loads_the_whole_model() {
    let plain = Qwen35::load(&fixtures().join(FIXTURE)).unwrap();
    let want = logits(&plain);
    for count in [2u16, 3] {
        let dir = scratch(&format!("ok{count}"));
        let n = plain.weights.tensors.len();
        let shards = split(&dir, count, |i| (i * count as usize / n) as u16, None);
        let m = Qwen35::load(&shards[0]).unwrap();
        assert_eq!(m.weights.tensors.len(), n);
        assert_eq!(logits(&m), want, "{count} shards");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn shards_that_do_not_fit_are_refused() {
    let dir = scratch("bad");
    let shards = split(&dir, 3, |i| (i % 3) as u16, None);
    let e = err(&shards[1]);
    assert!(e.contains("shard 2 of 3; pass the first one"), "{e}");
    std::fs::remove_file(&shards[2]).unwrap();
    let e = err(&shards[0]);
    assert!(
        e.contains("00003-of-00003.gguf: shard 3 of 3 is missing"),
        "{e}"
    );

    // A shard of another split in the slot of shard 2.
    let other = scratch("other");
    let two = split(&other, 2, |i| (i % 2) as u16, None);
    let dir2 = scratch("mixed");
    let mine = split(&dir2, 3, |i| (i % 3) as u16, None);
    std::fs::copy(&two[1], &mine[1]).unwrap();
    let e = err(&mine[0]);
    assert!(
        e.contains("expected shard 2 of 3, found shard 2 of 2"),
        "{e}"
    );

    let miscounted = scratch("count");
    let s = split(&miscounted, 2, |i| (i % 2) as u16, Some(7));
    let e = err(&s[0]);
    assert!(e.contains("split.tensors.count says 7"), "{e}");

    let twice = scratch("twice");
    let n = GgufFile::open(&fixtures().join(FIXTURE))
        .unwrap()
        .tensors
        .len() as i32;
    let s = split_with(&twice, 2, |i| (i % 2) as u16, Some(n + 1), true);
    let e = err(&s[0]);
    assert!(e.contains("appears again in shard 2 of 2"), "{e}");

    // The first shard renamed: its siblings cannot be found by name.
    let renamed = dir2.join("renamed.gguf");
    std::fs::copy(&mine[0], &renamed).unwrap();
    let e = err(&renamed);
    assert!(e.contains("not named like the first"), "{e}");
    for d in [dir, other, dir2, miscounted, twice] {
        let _ = std::fs::remove_dir_all(d);
    }
}
