//! Parsing `--tokens`: a JSON file holding an array of ids, or a comma-separated list.

use anyhow::{Context, bail};
use std::path::Path;

pub fn parse(spec: &str) -> anyhow::Result<Vec<u32>> {
    let trimmed = spec.trim();
    if trimmed.is_empty() {
        bail!("--tokens is empty");
    }
    let looks_like_list = trimmed
        .chars()
        .all(|c| c.is_ascii_digit() || c == ',' || c.is_whitespace());
    if looks_like_list && !Path::new(trimmed).exists() {
        return trimmed
            .split(',')
            .map(|s| s.trim())
            .filter(|s| !s.is_empty())
            .map(|s| {
                s.parse::<u32>()
                    .with_context(|| format!("bad token id '{s}' in --tokens"))
            })
            .collect();
    }
    let text = std::fs::read_to_string(trimmed)
        .with_context(|| format!("reading token file {trimmed}"))?;
    let ids: Vec<i64> = serde_json::from_str(&text)
        .with_context(|| format!("{trimmed}: expected a JSON array of integers"))?;
    ids.into_iter()
        .map(|v| {
            u32::try_from(v).map_err(|_| anyhow::anyhow!("{trimmed}: token id {v} is out of range"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_lists_and_rejects_garbage() {
        assert_eq!(parse("1, 2,3").unwrap(), vec![1, 2, 3]);
        assert!(parse("").is_err());
        assert!(parse("/nonexistent/tokens.json").is_err());
    }
}
