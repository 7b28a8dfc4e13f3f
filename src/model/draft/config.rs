//! Hyper-parameters of a DFlash drafter (GGUF arch `qwen35-dflash-draft`), and the checks that
//! tie a drafter to its target.

pub use crate::model::rope_scaling::YarnScaling;
use crate::model::{ModelError, Qwen35Config};

/// DSpark heads on a DFlash backbone (`{A}.dflash.dspark.*`).
#[derive(Clone, Debug, PartialEq)]
pub struct DSparkConfig {
    /// Rank r of the Markov (low-rank bigram) head: `W1, W2 [vocab, r]`.
    pub markov_rank: usize,
    /// Vocabulary of the Markov head.
    pub vocab: usize,
    /// Width of the confidence head's input (H or H + r), if the head is present.
    pub confidence_dim: Option<usize>,
}

/// DFlash2 extras (`{A}.dflash.dflash2.*`, drafters.md §4): the per-layer grouped dynamic
/// causal convs and the candidate selector.
#[derive(Clone, Debug, PartialEq)]
pub struct DFlash2Config {
    /// Taps K of each conv along block positions.
    pub conv_kernel: usize,
    /// Channels per group of the dynamic part (the kernel projection gives one value per group).
    pub conv_group: usize,
    /// Rank r of the selector's codebooks and hidden projection.
    pub selector_rank: usize,
    /// Candidates per position (top-k of the lm_head).
    pub selector_top_k: usize,
}

impl DFlash2Config {
    /// Rows of a conv's kernel projection: 2 sides × K taps × (H / group) groups.
    pub fn proj_rows(&self, hidden: usize) -> usize {
        2 * self.conv_kernel * (hidden / self.conv_group)
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct DFlashConfig {
    pub n_layers: usize,
    pub hidden: usize,
    pub ffn: usize,
    /// The vocabulary the drafter was trained with (`{A}.vocab_size`), if declared. It must equal
    /// the target's: the drafter uses the target's embedding and lm_head.
    pub vocab: Option<usize>,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub eps: f32,
    /// Full-head-dim NeoX RoPE base.
    pub rope_theta: f32,
    pub rope_scaling: Option<YarnScaling>,
    pub context_length: usize,
    /// Block rows per draft: the last committed token plus `block_size - 1` masks.
    pub block_size: usize,
    pub mask_token_id: u32,
    /// How many target layers feed the context (`fc` takes `n_target_layers · hidden`).
    pub n_target_layers: usize,
    /// The target layers whose outputs (raw residual after the layer) form the context feature,
    /// in concatenation order. Read from the drafter, never derived.
    pub target_layer_ids: Vec<usize>,
    /// Depth of the target the drafter was trained for (z-lab `num_target_layers`), if declared.
    pub target_block_count: Option<usize>,
    /// Window of the sliding-attention layers (HF bidirectional: `|q − k| ≤ window`).
    pub sliding_window: Option<usize>,
    /// Per layer: whether it is a sliding-window layer.
    pub sliding_layers: Vec<bool>,
    /// DSpark heads, if the drafter has them.
    pub dspark: Option<DSparkConfig>,
    /// DFlash2 convs and selector, if the drafter is a DFlash2.
    pub dflash2: Option<DFlash2Config>,
}

impl DFlashConfig {
    /// Width of one context feature row (`fc`'s input).
    pub fn feature_width(&self) -> usize {
        self.n_target_layers * self.hidden
    }

    /// The window of layer `i` (0 = unlimited).
    pub fn window(&self, i: usize) -> usize {
        match (self.sliding_layers.get(i), self.sliding_window) {
            (Some(true), Some(w)) => w,
            _ => 0,
        }
    }

    /// Checks the numbers fit together, naming the first that does not.
    pub fn validate(&self) -> Result<(), ModelError> {
        let bad = |m: String| Err(ModelError::Config(format!("dflash drafter: {m}")));
        if self.n_layers == 0 || self.hidden == 0 || self.ffn == 0 {
            return bad("layers, hidden and ffn sizes must be positive".into());
        }
        if self.n_heads == 0
            || self.n_kv_heads == 0
            || !self.n_heads.is_multiple_of(self.n_kv_heads)
        {
            return bad(format!(
                "{} q heads over {} kv heads",
                self.n_heads, self.n_kv_heads
            ));
        }
        if self.head_dim == 0 || !self.head_dim.is_multiple_of(2) {
            return bad(format!(
                "head dim {} must be even and positive",
                self.head_dim
            ));
        }
        if self.block_size < 2 {
            return bad(format!(
                "block size {} (needs at least 2: the last token and one mask)",
                self.block_size
            ));
        }
        if self.n_target_layers == 0 || self.target_layer_ids.len() != self.n_target_layers {
            return bad(format!(
                "{} target layer ids for n_target_layers = {}",
                self.target_layer_ids.len(),
                self.n_target_layers
            ));
        }
        if self.sliding_layers.len() != self.n_layers {
            return bad(format!(
                "a sliding-window pattern of {} entries for {} layers",
                self.sliding_layers.len(),
                self.n_layers
            ));
        }
        if self.sliding_layers.contains(&true) && self.sliding_window.is_none_or(|w| w == 0) {
            return bad("sliding-window layers without a positive window".into());
        }
        if let Some(d) = &self.dspark {
            if d.markov_rank == 0 || d.vocab == 0 {
                return bad("DSpark Markov head with rank or vocab 0".into());
            }
            if let Some(cd) = d.confidence_dim
                && cd != self.hidden
                && cd != self.hidden + d.markov_rank
            {
                return bad(format!(
                    "DSpark confidence_dim {cd} is neither H {} nor H + r {}",
                    self.hidden,
                    self.hidden + d.markov_rank
                ));
            }
        }
        if let Some(d) = &self.dflash2 {
            if d.conv_kernel == 0 || d.conv_group == 0 || !self.hidden.is_multiple_of(d.conv_group)
            {
                return bad(format!(
                    "DFlash2 conv of {} taps over groups of {} does not fit hidden {}",
                    d.conv_kernel, d.conv_group, self.hidden
                ));
            }
            if d.selector_rank == 0 || d.selector_top_k == 0 || d.selector_top_k > 64 {
                return bad(format!(
                    "DFlash2 selector rank {} / top-k {} (top-k must be 1 ..= 64)",
                    d.selector_rank, d.selector_top_k
                ));
            }
            if self.dspark.is_some() {
                return bad("both DSpark heads and a DFlash2 selector".into());
            }
            if self.vocab.is_none() {
                return bad("a DFlash2 selector needs the vocab size (vocab_size)".into());
            }
        }
        if !self.eps.is_finite() || self.eps <= 0.0 {
            return bad(format!("rms eps {} must be positive and finite", self.eps));
        }
        if !self.rope_theta.is_finite() || self.rope_theta <= 0.0 {
            return bad(format!(
                "rope theta {} must be positive and finite",
                self.rope_theta
            ));
        }
        Ok(())
    }

    /// Refuses a drafter that does not fit `target`, saying which number disagrees.
    pub fn check_target(&self, target: &Qwen35Config) -> Result<(), ModelError> {
        let bad = |m: String| {
            Err(ModelError::Config(format!(
                "drafter does not fit the target: {m}"
            )))
        };
        if self.hidden != target.hidden {
            return bad(format!(
                "hidden size {} vs the target's {}",
                self.hidden, target.hidden
            ));
        }
        if let Some(v) = self.vocab
            && v != target.vocab
        {
            return bad(format!("vocab {v} vs the target's {}", target.vocab));
        }
        if let Some(d) = &self.dspark
            && d.vocab != target.vocab
        {
            return bad(format!(
                "DSpark Markov head vocab {} vs the target's {}",
                d.vocab, target.vocab
            ));
        }
        if self.mask_token_id as usize >= target.vocab {
            return bad(format!(
                "mask token {} is outside the target's vocab of {}",
                self.mask_token_id, target.vocab
            ));
        }
        if let Some(n) = self.target_block_count
            && n != target.n_layers
        {
            return bad(format!(
                "trained for a target of {n} layers, the target has {}",
                target.n_layers
            ));
        }
        if self.n_target_layers > target.n_layers {
            return bad(format!(
                "{} target layers captured, the target has {}",
                self.n_target_layers, target.n_layers
            ));
        }
        if let Some(&id) = self
            .target_layer_ids
            .iter()
            .find(|&&id| id >= target.n_layers)
        {
            return bad(format!(
                "target layer id {id} is out of range (the target has {} layers)",
                target.n_layers
            ));
        }
        Ok(())
    }

    /// The drafter's rotary parameters (full head dim, its own θ, YaRN if declared).
    pub fn rope(&self) -> crate::graph::RopeParams {
        crate::graph::RopeParams {
            rot: self.head_dim,
            theta: self.rope_theta,
            yarn: self.rope_scaling.as_ref().map(YarnScaling::to_graph),
        }
    }

    /// Refuses configurations the graph cannot run: YaRN numbers that are not positive.
    pub fn check_supported(&self) -> Result<(), ModelError> {
        if let Some(y) = &self.rope_scaling {
            let ok = |v: f32| v.is_finite() && v > 0.0;
            if !(ok(y.factor)
                && ok(y.beta_fast)
                && ok(y.beta_slow)
                && y.original_context_length > 0
                && y.attention_factor.is_none_or(ok))
            {
                return Err(ModelError::Config(format!(
                    "dflash drafter: YaRN scaling needs a positive factor, original context, \
                     betas and attention factor, got {y:?}"
                )));
            }
        }
        Ok(())
    }
}
