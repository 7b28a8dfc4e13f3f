//! Split GGUF files (llama.cpp's `gguf-split`): a model in shards named
//! `<prefix>-00001-of-0000N.gguf` … `<prefix>-0000N-of-0000N.gguf`. The first shard holds all
//! metadata; every shard holds `split.no` (0-based), `split.count` and `split.tensors.count` (the
//! model's total), and its share of the tensors. Hugging Face stores files of more than 50 GB
//! this way (a 27B model in bf16).

use super::{GgufError, GgufFile};
use std::path::{Path, PathBuf};

pub const SPLIT_NO: &str = "split.no";
pub const SPLIT_COUNT: &str = "split.count";
pub const SPLIT_TENSORS: &str = "split.tensors.count";

fn split_err(path: &Path, msg: impl Into<String>) -> GgufError {
    GgufError::Split {
        path: path.to_owned(),
        msg: msg.into(),
    }
}

/// The path of shard `no` (0-based) of `count`, next to `first` (llama.cpp's `llama_split_path`:
/// `%s-%05d-of-%05d.gguf`), or None when `first` is not named like a first shard.
pub fn shard_path(first: &Path, no: u32, count: u32) -> Option<PathBuf> {
    let name = first.file_name()?.to_str()?;
    let suffix = format!("-00001-of-{count:05}.gguf");
    let prefix = name.strip_suffix(&suffix)?;
    Some(first.with_file_name(format!("{prefix}-{:05}-of-{count:05}.gguf", no + 1)))
}

/// A shard's `(split.no, split.count)`, or None for an unsplit file.
fn split_keys(f: &GgufFile) -> Result<Option<(u32, u32)>, GgufError> {
    if f.get(SPLIT_COUNT).is_none() {
        return Ok(None);
    }
    let count = f.get_u64(SPLIT_COUNT)? as u32;
    let no = f.get_u64(SPLIT_NO)? as u32;
    Ok(Some((no, count)))
}

/// Opens `path` and, when it is the first shard of a split model, the other shards: the files
/// in shard order (one file when unsplit). Each shard must name the same split count and its
/// own number, and the shards together must hold `split.tensors.count` tensors.
pub fn open_all(path: &Path) -> Result<Vec<GgufFile>, GgufError> {
    let first = GgufFile::open(path)?;
    let Some((no, count)) = split_keys(&first)? else {
        return Ok(vec![first]);
    };
    if count <= 1 {
        return Ok(vec![first]);
    }
    if no != 0 {
        return Err(split_err(
            path,
            format!(
                "this is shard {} of {count}; pass the first one (…-00001-of-{count:05}.gguf)",
                no + 1
            ),
        ));
    }
    let total = first.get_u64(SPLIT_TENSORS)?;
    let mut files = vec![first];
    for i in 1..count {
        let p = shard_path(path, i, count).ok_or_else(|| {
            split_err(
                path,
                format!(
                    "split into {count} shards, but not named like the first of them (…-00001-of-{count:05}.gguf)"
                ),
            )
        })?;
        if !p.exists() {
            return Err(split_err(
                &p,
                format!("shard {} of {count} is missing", i + 1),
            ));
        }
        let f = GgufFile::open(&p)?;
        match split_keys(&f)? {
            Some((n, c)) if n == i && c == count => files.push(f),
            other => {
                return Err(split_err(
                    &p,
                    format!(
                        "expected shard {} of {count}, found {}",
                        i + 1,
                        match other {
                            Some((n, c)) => format!("shard {} of {c}", n + 1),
                            None => "an unsplit file".into(),
                        }
                    ),
                ));
            }
        }
    }
    let mut seen = std::collections::HashSet::new();
    for (f, i) in files.iter().zip(1..) {
        if let Some(t) = f.tensors.iter().find(|t| !seen.insert(t.name.as_str())) {
            return Err(split_err(
                path,
                format!("tensor `{}` appears again in shard {i} of {count}", t.name),
            ));
        }
    }
    let held: u64 = files.iter().map(|f| f.tensors.len() as u64).sum();
    if held != total {
        return Err(split_err(
            path,
            format!("the {count} shards hold {held} tensors, split.tensors.count says {total}"),
        ));
    }
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_names_follow_llama_cpp() {
        let first = Path::new("/m/Qwen3.5-27B-BF16-00001-of-00002.gguf");
        assert_eq!(
            shard_path(first, 1, 2).unwrap(),
            Path::new("/m/Qwen3.5-27B-BF16-00002-of-00002.gguf")
        );
        assert_eq!(shard_path(first, 0, 2).unwrap(), first);
        assert!(shard_path(Path::new("/m/model.gguf"), 1, 2).is_none());
        assert!(
            shard_path(first, 1, 3).is_none(),
            "a count the name does not carry"
        );
    }
}
