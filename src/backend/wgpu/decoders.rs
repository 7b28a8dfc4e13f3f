//! The weight decoders spliced into kernels (`//#dequant NAME`, `//#dequant8 NAME`): the
//! sections of `shaders/dequant.wgsl` per type, the layout each type's buffer was uploaded in
//! ([`super::relayout`]) and how int8 IQ4_XS items look their grid up, chosen per kernel key by
//! flags ([`specialize`]).

use super::relayout::LAYOUTS;
use super::shaders::ShaderKey;
use crate::tensor::DType;

/// The decoder library spliced by `//#dequant`.
pub const DEQUANT: &str = include_str!("../../../shaders/dequant.wgsl");

/// Weight types the kernels decode (every type the CPU reference dequantizes).
pub const WEIGHT_TYPES: &[DType] = &[
    DType::F32,
    DType::F16,
    DType::BF16,
    DType::Q4_0,
    DType::Q4_1,
    DType::Q5_0,
    DType::Q5_1,
    DType::Q8_0,
    DType::Q4K,
    DType::Q5K,
    DType::Q6K,
    DType::Iq4Nl,
    DType::Iq4Xs,
];

/// Weight types with an int8-activation GEMV item (section "<type> q8" of dequant.wgsl).
pub const INT8_TYPES: &[DType] = &[
    DType::Q8_0,
    DType::Q4K,
    DType::Q5K,
    DType::Q6K,
    DType::Iq4Xs,
];

fn dequant_section(name: &str) -> Option<&'static str> {
    let marker = format!("//! {name}\n");
    let start = DEQUANT.find(&marker)? + marker.len();
    let rest = &DEQUANT[start..];
    let end = rest.find("\n//! ").map(|e| e + 1).unwrap_or(rest.len());
    Some(&rest[..end])
}

/// `key` with the flag of the layout of every type in `relaid` that it decodes (a backend whose
/// weights of those types are all re-laid, see [`super::relayout`]).
pub fn with_vec4_layouts(mut key: ShaderKey, relaid: &[DType]) -> ShaderKey {
    for l in LAYOUTS {
        if relaid.contains(&l.dtype)
            && key.dequant.iter().any(|d| d.1 == l.dtype)
            && !key.flags.contains(&l.flag)
        {
            key.flags.push(l.flag);
        }
    }
    key
}

/// The layout section of `t` in `key`, if its flag is set: it replaces the type's ggml layout
/// section and reads the buffer as vec4s.
fn vec4_layout(key: &ShaderKey, t: DType) -> Option<&'static str> {
    LAYOUTS
        .iter()
        .find(|l| l.dtype == t && key.flags.contains(&l.flag))
        .map(|l| l.section)
}

/// `text` with every word read `$W[i]` turned into `$F_w(i)` (brackets matched), for a buffer
/// bound as vec4s.
fn words_via_fn(text: &str) -> Result<String, String> {
    let mut out = String::with_capacity(text.len() + 256);
    let mut rest = text;
    while let Some(at) = rest.find("$W[") {
        out.push_str(&rest[..at]);
        out.push_str("$F_w(");
        let tail = &rest[at + 3..];
        let mut depth = 1;
        let end = tail
            .char_indices()
            .find(|&(_, c)| {
                depth += match c {
                    '[' => 1,
                    ']' => -1,
                    _ => 0,
                };
                depth == 0
            })
            .map(|(i, _)| i)
            .ok_or("dequant.wgsl: unmatched '[' after $W")?;
        out.push_str(&tail[..end]);
        out.push(')');
        rest = &tail[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// How the int8 IQ4_XS item looks its grid up.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Iq4Lookup {
    /// A workgroup-memory table: one load a value.
    #[default]
    Table,
    /// Selects on the packed grid: no memory, ~8 ALU instructions a value.
    Alu,
    /// The table for the low nibbles, selects for the high ones (both pipes busy).
    Mix,
}

impl Iq4Lookup {
    /// `DELTASPEC_WGPU_IQ4_LOOKUP`'s values: table, alu, mix.
    pub fn parse(v: &str) -> Result<Iq4Lookup, String> {
        match v {
            "" | "table" => Ok(Iq4Lookup::Table),
            "alu" => Ok(Iq4Lookup::Alu),
            "mix" => Ok(Iq4Lookup::Mix),
            other => Err(format!(
                "DELTASPEC_WGPU_IQ4_LOOKUP: unknown lookup '{other}' (known: table, alu, mix)"
            )),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Iq4Lookup::Table => "table",
            Iq4Lookup::Alu => "alu",
            Iq4Lookup::Mix => "mix",
        }
    }

    /// The key flag that selects it (none for the default).
    fn flag(self) -> Option<&'static str> {
        match self {
            Iq4Lookup::Table => None,
            Iq4Lookup::Alu => Some("IQ4ALU"),
            Iq4Lookup::Mix => Some("IQ4MIX"),
        }
    }

    fn of(key: &ShaderKey) -> Iq4Lookup {
        [Iq4Lookup::Alu, Iq4Lookup::Mix]
            .into_iter()
            .find(|l| l.flag().is_some_and(|f| key.flags.contains(&f)))
            .unwrap_or_default()
    }
}

/// Backend-wide choices that shape the kernels of weight types, added to every key by
/// [`specialize`].
#[derive(Clone, Debug, Default)]
pub struct WeightKernels {
    /// Types uploaded re-laid ([`super::relayout`]).
    pub relaid: Vec<DType>,
    pub iq4_lookup: Iq4Lookup,
}

/// `key` with the flags of `w` that concern the weight types it decodes.
pub fn specialize(key: ShaderKey, w: &WeightKernels) -> ShaderKey {
    let mut key = with_vec4_layouts(key, &w.relaid);
    // Only int8 GEMVs (Q8) splice the int8 item the lookup lives in: other kernels keep one
    // pipeline whatever the lookup.
    if let Some(f) = w.iq4_lookup.flag()
        && key.flags.contains(&"Q8")
        && key.dequant.iter().any(|d| d.1 == DType::Iq4Xs)
    {
        key.flags.push(f);
    }
    key
}

/// The int8 work item of type `t` (section "<type> q8", and for IQ4_XS its grid lookup) for
/// `buffer`.
pub(super) fn splice_dequant8(
    key: &ShaderKey,
    buffer: &str,
    t: DType,
    out: &mut String,
) -> Result<(), String> {
    if !INT8_TYPES.contains(&t) {
        return Err(format!("no int8 work item for {t}"));
    }
    let mut names = vec![format!("{} q8", t.name())];
    if t == DType::Iq4Xs {
        let lookup = Iq4Lookup::of(key);
        names.push("IQ4_XS q8 grid".into());
        if lookup != Iq4Lookup::Table {
            names.push("IQ4_XS q8 selects".into());
        }
        names.push(format!("IQ4_XS q8 {}", lookup.name()));
    }
    for name in names {
        let body = dequant_section(&name).ok_or_else(|| format!("dequant.wgsl lacks '{name}'"))?;
        out.push_str(&body.replace("$W", buffer).replace("$F", buffer));
    }
    Ok(())
}

/// The decoder of type `t` for `buffer`: the byte helpers, the type's section, its layout
/// section (ggml's, or the vec4 layout's that `key` selects, which reads the buffer as vec4s)
/// and, for types without a fast item, the 4-element item.
pub(super) fn splice_dequant(
    key: &ShaderKey,
    buffer: &str,
    t: DType,
    out: &mut String,
) -> Result<(), String> {
    let vec4 = vec4_layout(key, t);
    if !WEIGHT_TYPES.contains(&t) {
        return Err(format!("no WGSL decoder for {t}"));
    }
    let bytes = dequant_section("bytes").ok_or("dequant.wgsl lacks the bytes section")?;
    let bytes = match vec4 {
        Some(_) => format!(
            "fn $F_w(i: u32) -> u32 {{\n    return $W[i >> 2u][i & 3u];\n}}\n{}",
            words_via_fn(bytes)?
        ),
        None => bytes.to_string(),
    };
    let body = dequant_section(t.name()).ok_or_else(|| format!("dequant.wgsl lacks {t}"))?;
    let mut parts = vec![bytes.as_str()];
    if matches!(t, DType::Iq4Nl | DType::Iq4Xs) {
        parts.push(dequant_section("iq4 grid").ok_or("dequant.wgsl lacks the iq4 grid")?);
    }
    parts.push(body);
    let ggml = format!("{} ggml", t.name());
    match vec4 {
        Some(name) => {
            parts.push(dequant_section(name).ok_or_else(|| format!("dequant.wgsl lacks '{name}'"))?)
        }
        None => parts.extend(dequant_section(&ggml)),
    }
    if !body.contains("$F_item(") {
        parts.push(dequant_section("item4").ok_or("dequant.wgsl lacks the item4 section")?);
    }
    for part in parts {
        out.push_str(&part.replace("$W", buffer).replace("$F", buffer));
    }
    Ok(())
}

/// Elements of one GEMV work item of type `t` (`$F_SUB` in its dequant section; 4 for the
/// types built on `dq4`).
pub fn item_elems(t: DType) -> usize {
    dequant_section(t.name())
        .and_then(|s| {
            let rest = &s[s.find("const $F_SUB: u32 = ")? + 20..];
            rest[..rest.find('u')?].parse().ok()
        })
        .unwrap_or(4)
}

/// A binding declaration line of a template, with a weight buffer in a vec4 layout declared as
/// vec4s.
pub(super) fn vec4_binding(key: &ShaderKey, line: String) -> String {
    let vec4 = key.dequant.iter().any(|(b, t)| {
        vec4_layout(key, *t).is_some() && line.contains(&format!(" {b}: array<u32>;"))
    });
    if vec4 {
        line.replace(": array<u32>;", ": array<vec4<u32>>;")
    } else {
        line
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_dequant_section_is_reachable() {
        for t in WEIGHT_TYPES {
            assert!(dequant_section(t.name()).is_some(), "{t}");
        }
        for t in INT8_TYPES {
            assert!(
                dequant_section(&format!("{} q8", t.name())).is_some(),
                "{t}"
            );
            // Every int8 type has 32-value items (one activation block each).
            assert_eq!(item_elems(*t), 32, "{t}");
        }
        for l in LAYOUTS {
            assert!(dequant_section(l.section).is_some(), "{}", l.section);
            assert!(
                dequant_section(&format!("{} ggml", l.dtype.name())).is_some(),
                "{}: a layout replaces the type's ggml layout section",
                l.dtype
            );
        }
    }

    #[test]
    fn word_reads_become_calls_with_nested_brackets() {
        assert_eq!(
            words_via_fn("a = $W[i[j] + 1u] | $W[k];").unwrap(),
            "a = $F_w(i[j] + 1u) | $F_w(k);"
        );
        assert!(words_via_fn("$W[i").is_err());
    }
}
