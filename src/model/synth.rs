//! Synthetic `qwen35` GGUF files with the real tensor names, shapes and keys, filled with
//! random but valid data, so speed can be measured at full size without downloadable weights.
//!
//! Quantized tensors are written as random blocks whose scale fields are set so that weights
//! have a standard deviation near `0.5/sqrt(fan_in)`: activations stay finite through 64
//! layers. Data is streamed per tensor, so a 14 GiB file needs no more than a row in memory.

use super::{ModelError, Qwen35Config};
use crate::gguf::{GgufWriter, Value, ValueType};
use crate::graph::HeadMap;
use crate::tensor::DType;
use crate::tensor::quant;
use crate::util::rng::Rng;
use half::f16;
use std::io::Write;
use std::path::Path;

/// Named model shapes.
pub fn preset(name: &str) -> Result<Qwen35Config, ModelError> {
    let (n_layers, hidden, ffn, vocab, nh, nkv, hd, rot, theta, nk, nv, dk, ctx) = match name {
        "qwen3.8-27b" | "qwen3.5-27b" => (
            64, 5120, 17408, 248_320, 24, 4, 256, 64, 1e7, 16, 48, 128, 262_144,
        ),
        "tiny" => (4, 256, 512, 512, 4, 2, 64, 16, 1e6, 2, 4, 64, 4096),
        other => {
            return Err(ModelError::Config(format!(
                "unknown preset '{other}' (known: qwen3.8-27b, tiny)"
            )));
        }
    };
    Ok(Qwen35Config {
        n_layers,
        hidden,
        ffn,
        vocab,
        n_heads: nh,
        n_kv_heads: nkv,
        head_dim: hd,
        rot,
        rope_theta: theta,
        rope_scaling: None,
        eps: 1e-6,
        conv_kernel: 4,
        nk,
        nv,
        dk,
        dv: dk,
        layers: Qwen35Config::pattern_from_interval(n_layers, 4),
        head_map: HeadMap::Tiled,
        context_length: ctx,
        mtp_layers: 0,
    })
}

/// Quantization recipes, named like llama.cpp's file types.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recipe {
    F32,
    F16,
    Q8_0,
    Q4KM,
    Iq4Xs,
}

impl Recipe {
    pub fn parse(s: &str) -> Result<Recipe, ModelError> {
        Ok(match s.to_ascii_lowercase().as_str() {
            "f32" => Recipe::F32,
            "f16" => Recipe::F16,
            "q8_0" => Recipe::Q8_0,
            "q4_k_m" => Recipe::Q4KM,
            "iq4_xs" => Recipe::Iq4Xs,
            other => {
                return Err(ModelError::Config(format!(
                    "unknown quant '{other}' (known: f32, f16, q8_0, q4_k_m, iq4_xs)"
                )));
            }
        })
    }

    /// The type of a 2-D weight `name` whose rows hold `cols` values, falling back the way
    /// llama.cpp does when rows are not whole blocks.
    pub(crate) fn dtype_for(self, name: &str, cols: usize) -> DType {
        let fits = |d: DType| cols.is_multiple_of(d.block_elems());
        let pick = |want: DType, fallback: DType| {
            if fits(want) {
                want
            } else if fits(fallback) {
                fallback
            } else {
                DType::F16
            }
        };
        let heavy = name == "output.weight"
            || name.ends_with("attn_v.weight")
            || name.ends_with("ffn_down.weight");
        match self {
            Recipe::F32 => DType::F32,
            Recipe::F16 => DType::F16,
            Recipe::Q8_0 => pick(DType::Q8_0, DType::F16),
            Recipe::Q4KM if heavy => pick(DType::Q6K, DType::Q8_0),
            Recipe::Q4KM => pick(DType::Q4K, DType::Q5_0),
            Recipe::Iq4Xs if name == "output.weight" => pick(DType::Q6K, DType::Q8_0),
            Recipe::Iq4Xs => pick(DType::Iq4Xs, DType::Iq4Nl),
        }
    }
}

/// How the data of one tensor is made.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Fill {
    /// N(0, sigma).
    Normal(f32),
    /// 1 + N(0, 0.1): norm weights.
    NearOne,
    /// −U(0.01, 16): `ssm_a = −exp(A_log)` with `A_log = log U(0.01, 16)`.
    NegDecay,
}

pub(crate) fn seed_of(name: &str, seed: u64) -> u64 {
    name.bytes().fold(seed ^ 0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    })
}

/// Writes one random quantized block, with scales chosen for weights of std ≈ sigma.
fn random_block(dtype: DType, rng: &mut Rng, sigma: f32, out: &mut [u8]) {
    for chunk in out.chunks_mut(8) {
        let r = rng.next_u64().to_le_bytes();
        chunk.copy_from_slice(&r[..chunk.len()]);
    }
    let put = |out: &mut [u8], at: usize, v: f32| {
        out[at..at + 2].copy_from_slice(&f16::from_f32(v).to_le_bytes())
    };
    // Divisors: the std of the integer part each format multiplies its scale with.
    match dtype {
        DType::Q8_0 => put(out, 0, sigma / 74.0),
        DType::Q5_0 => put(out, 0, sigma / 9.2),
        DType::Iq4Nl => put(out, 0, sigma / 65.0),
        DType::Iq4Xs => put(out, 0, sigma / (18.0 * 65.0)),
        DType::Q4K => {
            let d = sigma / (31.0 * 4.6);
            put(out, 0, d);
            put(out, 2, d * 7.5);
        }
        DType::Q5K => {
            let d = sigma / (31.0 * 9.2);
            put(out, 0, d);
            put(out, 2, d * 15.5);
        }
        DType::Q6K => put(out, 208, sigma / (74.0 * 18.0)),
        _ => {}
    }
}

/// A random `rows × cols` weight of `dtype` (valid blocks, std ≈ `sigma`): benches and tests.
pub fn random_weight(
    dtype: DType,
    rows: usize,
    cols: usize,
    sigma: f32,
    seed: u64,
) -> Result<Vec<u8>, ModelError> {
    let bytes = dtype.bytes_for(rows * cols).ok_or_else(|| {
        ModelError::Config(format!("{cols} columns are not whole {dtype} blocks"))
    })?;
    let mut out = Vec::with_capacity(bytes);
    write_tensor(&mut out, dtype, rows, cols, Fill::Normal(sigma), seed)
        .map_err(|e| ModelError::Config(e.to_string()))?;
    Ok(out)
}

/// Streams `rows × cols` values of `dtype` to `w`.
pub(crate) fn write_tensor(
    w: &mut dyn Write,
    dtype: DType,
    rows: usize,
    cols: usize,
    fill: Fill,
    seed: u64,
) -> std::io::Result<()> {
    let mut rng = Rng::new(seed);
    let value = |rng: &mut Rng| match fill {
        Fill::Normal(s) => rng.normal() * s,
        Fill::NearOne => 1.0 + 0.1 * rng.normal(),
        Fill::NegDecay => -rng.range(0.01, 16.0),
    };
    let mut row_vals = vec![0.0f32; cols];
    if dtype.is_quantized() {
        let sigma = match fill {
            Fill::Normal(s) => s,
            _ => 1.0,
        };
        let mut buf = vec![0u8; dtype.bytes_for(cols).expect("recipe picks whole blocks")];
        for _ in 0..rows {
            for b in buf.chunks_mut(dtype.block_bytes()) {
                random_block(dtype, &mut rng, sigma, b);
            }
            w.write_all(&buf)?;
        }
        return Ok(());
    }
    for _ in 0..rows {
        for v in row_vals.iter_mut() {
            *v = value(&mut rng);
        }
        let bytes = quant::quantize(dtype, &row_vals).map_err(std::io::Error::other)?;
        w.write_all(&bytes)?;
    }
    Ok(())
}

/// Writes a synthetic model of `cfg` to `path` with `recipe`.
pub fn write(
    cfg: &Qwen35Config,
    recipe: Recipe,
    seed: u64,
    path: &Path,
) -> Result<u64, ModelError> {
    cfg.validate()?;
    let c = cfg;
    let mut w = GgufWriter::new();
    let a = "qwen35";
    let u = |v: usize| Value::U32(v as u32);
    w.add_kv("general.architecture", Value::String(a.into()));
    w.add_kv(
        "general.name",
        Value::String(format!("deltaspec synthetic ({recipe:?})")),
    );
    w.add_kv(&format!("{a}.block_count"), u(c.n_layers));
    w.add_kv(&format!("{a}.context_length"), u(c.context_length));
    w.add_kv(&format!("{a}.embedding_length"), u(c.hidden));
    w.add_kv(&format!("{a}.feed_forward_length"), u(c.ffn));
    w.add_kv(&format!("{a}.attention.head_count"), u(c.n_heads));
    w.add_kv(&format!("{a}.attention.head_count_kv"), u(c.n_kv_heads));
    w.add_kv(&format!("{a}.attention.key_length"), u(c.head_dim));
    w.add_kv(&format!("{a}.attention.value_length"), u(c.head_dim));
    w.add_kv(
        &format!("{a}.attention.layer_norm_rms_epsilon"),
        Value::F32(c.eps),
    );
    w.add_kv(&format!("{a}.rope.freq_base"), Value::F32(c.rope_theta));
    w.add_kv(&format!("{a}.rope.dimension_count"), u(c.rot));
    // llama.cpp's qwen35 loader requires M-RoPE sections even for text (they sum to rot/2).
    let half = c.rot / 2;
    let (s0, s1) = (half * 11 / 32, half * 11 / 32);
    let sections = [s0, s1, half - s0 - s1, 0];
    w.add_kv(
        &format!("{a}.rope.dimension_sections"),
        Value::array(ValueType::I32, sections.iter().map(|s| *s as i32)),
    );
    w.add_kv(&format!("{a}.ssm.conv_kernel"), u(c.conv_kernel));
    w.add_kv(&format!("{a}.ssm.state_size"), u(c.dk));
    w.add_kv(&format!("{a}.ssm.group_count"), u(c.nk));
    w.add_kv(&format!("{a}.ssm.time_step_rank"), u(c.nv));
    w.add_kv(&format!("{a}.ssm.inner_size"), u(c.value_dim()));
    w.add_kv(&format!("{a}.full_attention_interval"), u(4));
    w.add_kv(&format!("{a}.vocab_size"), u(c.vocab));
    w.add_kv("tokenizer.ggml.model", Value::String("no_vocab".into()));

    let mut add = |name: String, shape: &[usize], fill: Fill| -> Result<(), ModelError> {
        let (rows, cols) = match shape {
            [n] => (1, *n),
            [r, c] => (*r, *c),
            _ => unreachable!("weights are 1-D or 2-D"),
        };
        let dtype = if shape.len() == 1 || name.ends_with("ssm_conv1d.weight") {
            DType::F32
        } else {
            recipe.dtype_for(&name, cols)
        };
        let ne: Vec<u64> = shape.iter().rev().map(|d| *d as u64).collect();
        let s = seed_of(&name, seed);
        w.add_tensor_generated(
            &name,
            &ne,
            dtype,
            Box::new(move |out| write_tensor(out, dtype, rows, cols, fill, s)),
        )?;
        Ok(())
    };
    for (name, shape) in super::qwen35::expected_tensors(c) {
        let fill = if name.ends_with("norm.weight") || name.ends_with("ssm_dt.bias") {
            Fill::NearOne
        } else if name.ends_with(".ssm_a") {
            Fill::NegDecay
        } else if name.ends_with("ssm_conv1d.weight") {
            Fill::Normal(0.3)
        } else if name == super::qwen35::names::TOKEN_EMBD {
            Fill::Normal(1.0)
        } else {
            Fill::Normal(0.5 / (*shape.last().expect("non-empty") as f32).sqrt())
        };
        add(name, &shape, fill)?;
    }
    let file = std::fs::File::create(path).map_err(|e| ModelError::Checkpoint {
        path: path.display().to_string(),
        msg: e.to_string(),
    })?;
    let mut bw = std::io::BufWriter::with_capacity(1 << 22, file);
    w.write_to(&mut bw)?;
    bw.flush().map_err(|e| ModelError::Checkpoint {
        path: path.display().to_string(),
        msg: e.to_string(),
    })?;
    Ok(std::fs::metadata(path).map(|m| m.len()).unwrap_or(0))
}
