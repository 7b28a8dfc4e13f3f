//! Hyper-parameters of the Qwen3.5 hybrid target, read from GGUF keys or an HF `config.json`.

use super::ModelError;
use crate::graph::HeadMap;

/// What each layer's mixer is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LayerKind {
    /// Gated DeltaNet (linear attention).
    DeltaNet,
    /// Gated full attention.
    Attention,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Qwen35Config {
    pub n_layers: usize,
    pub hidden: usize,
    pub ffn: usize,
    pub vocab: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    /// Rotated dims per head (partial NeoX RoPE).
    pub rot: usize,
    pub rope_theta: f32,
    /// YaRN scaling of the attention layers' RoPE, where the file declares it.
    pub rope_scaling: Option<crate::model::rope_scaling::YarnScaling>,
    pub eps: f32,
    pub conv_kernel: usize,
    /// GDN key heads, value heads, key and value head dims.
    pub nk: usize,
    pub nv: usize,
    pub dk: usize,
    pub dv: usize,
    pub layers: Vec<LayerKind>,
    /// How value heads map to key heads in the loaded weights.
    pub head_map: HeadMap,
    pub context_length: usize,
    /// MTP (nextn) blocks the file holds after the `n_layers` trunk layers. They are not
    /// loaded: speculation here runs the DFlash-family drafters.
    pub mtp_layers: usize,
}

impl Qwen35Config {
    pub fn key_dim(&self) -> usize {
        self.nk * self.dk
    }
    pub fn value_dim(&self) -> usize {
        self.nv * self.dv
    }
    pub fn conv_dim(&self) -> usize {
        2 * self.key_dim() + self.value_dim()
    }
    pub fn n_attention_layers(&self) -> usize {
        self.layers
            .iter()
            .filter(|k| **k == LayerKind::Attention)
            .count()
    }

    /// The layer pattern: full attention iff `(i + 1) % interval == 0`.
    pub fn pattern_from_interval(n_layers: usize, interval: usize) -> Vec<LayerKind> {
        (0..n_layers)
            .map(|i| {
                if interval > 0 && (i + 1) % interval == 0 {
                    LayerKind::Attention
                } else {
                    LayerKind::DeltaNet
                }
            })
            .collect()
    }

    /// A compact pattern string such as `LLLA×16`.
    pub fn pattern_string(&self) -> String {
        let s: String = self
            .layers
            .iter()
            .map(|k| if *k == LayerKind::Attention { 'A' } else { 'L' })
            .collect();
        for period in 1..=s.len() {
            if period < s.len()
                && s.len().is_multiple_of(period)
                && s == s[..period].repeat(s.len() / period)
            {
                return format!("{}×{}", &s[..period], s.len() / period);
            }
        }
        s
    }

    /// Checks the numbers fit together, naming the first that does not.
    pub fn validate(&self) -> Result<(), ModelError> {
        let bad = |m: String| Err(ModelError::Config(m));
        if self.n_layers == 0 || self.layers.len() != self.n_layers {
            return bad(format!(
                "{} layers but a pattern of {}",
                self.n_layers,
                self.layers.len()
            ));
        }
        if self.hidden == 0 || self.vocab == 0 || self.ffn == 0 {
            return bad("hidden, vocab and ffn sizes must be positive".into());
        }
        if self.n_attention_layers() > 0 {
            if self.n_kv_heads == 0 || !self.n_heads.is_multiple_of(self.n_kv_heads) {
                return bad(format!(
                    "{} q heads over {} kv heads",
                    self.n_heads, self.n_kv_heads
                ));
            }
            if self.rot > self.head_dim || !self.rot.is_multiple_of(2) {
                return bad(format!(
                    "rope dims {} with head dim {}",
                    self.rot, self.head_dim
                ));
            }
        }
        if self.layers.contains(&LayerKind::DeltaNet) {
            if self.nk == 0 || !self.nv.is_multiple_of(self.nk) || self.dk == 0 || self.dv == 0 {
                return bad(format!(
                    "GDN heads nk {} nv {} (nv must be a multiple of nk)",
                    self.nk, self.nv
                ));
            }
            if self.conv_kernel < 1 {
                return bad("conv kernel must be at least 1".into());
            }
        }
        if !self.eps.is_finite() || self.eps <= 0.0 {
            return bad(format!("rms eps {} must be positive and finite", self.eps));
        }
        if self.n_attention_layers() > 0 && (!self.rope_theta.is_finite() || self.rope_theta <= 0.0)
        {
            return bad(format!(
                "rope base {} must be positive and finite",
                self.rope_theta
            ));
        }
        Ok(())
    }
}
