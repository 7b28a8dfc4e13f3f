//! The op set: the fused operations the Qwen3.5 target and its drafters need.
//!
//! Conventions shared by every backend:
//! - Shapes are row-major; the last dimension is contiguous. A linear weight is `[out, in]`
//!   (GGUF stores it as `ne = {in, out}`), quantized along `in`.
//! - Activations are f32; token ids and positions are i32.
//! - Nodes run in the order they were added. Ops that take a state tensor update it in place,
//!   so a later node sees the update (attention appends K/V before it attends).

pub use super::rope::RopeParams;

/// How GDN value heads map to key heads when `nv > nk` (`r = nv / nk`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeadMap {
    /// Value head `j` uses key head `j % nk` (llama.cpp `qwen35` GGUFs reorder V heads so).
    Tiled,
    /// Value head `j` uses key head `j / r` (HF checkpoints and `qwen3next` GGUFs).
    Grouped,
}

impl HeadMap {
    pub fn key_head(self, value_head: usize, nk: usize, nv: usize) -> usize {
        match self {
            HeadMap::Tiled => value_head % nk,
            HeadMap::Grouped => value_head / (nv / nk),
        }
    }
}

/// Geometry and constants of a gated-delta-net op.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GdnParams {
    pub nk: usize,
    pub nv: usize,
    pub dk: usize,
    pub dv: usize,
    pub head_map: HeadMap,
    /// eps of the q/k L2 normalisation (`x · rsqrt(Σx² + eps)`).
    pub l2_eps: f32,
}

impl GdnParams {
    pub fn key_dim(&self) -> usize {
        self.nk * self.dk
    }
    pub fn value_dim(&self) -> usize {
        self.nv * self.dv
    }
    /// Width of the `[q | k | v]` row the conv produces.
    pub fn conv_dim(&self) -> usize {
        2 * self.key_dim() + self.value_dim()
    }
    /// Width of one row of a [`Op::GatedDeltaNetLog`] log: `[q | k | v | b | a]`.
    pub fn log_width(&self) -> usize {
        self.conv_dim() + 2 * self.nv
    }
}

/// Geometry of an attention op.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AttnParams {
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    /// Multiplies q·k (usually `head_dim^-0.5`).
    pub scale: f32,
}

/// One operation. Inputs and outputs are listed per variant as `inputs -> outputs`.
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    /// `table [V, D]` (weight, any dtype), `ids i32 [T]` -> `[T, D]`: dequantized rows.
    Embed,
    /// `x [N, K]`, `w [M, K]` (weight, any dtype) -> `[N, M]`: `y = x · wᵀ`.
    MatMul,
    /// `a`, `b` (same shape) -> `a + b`.
    Add,
    /// `x [.., D]`, `w [D]` -> `x · rsqrt(mean(x²) + eps) · w`, over the last dimension.
    RmsNorm { eps: f32 },
    /// `x`, `r` (same shape `[.., D]`), `w [D]` -> (`s = x + r`, `rmsnorm(s) · w`).
    AddRmsNorm { eps: f32 },
    /// `x [.., G, D]`, `z` (same element count), `w [D]` -> `rmsnorm(x) · w · silu(z)` per group of D.
    GatedRmsNorm { eps: f32 },
    /// `x [.., D]` -> `x · rsqrt(Σx² + eps) · scale`.
    L2Norm { eps: f32, scale: f32 },
    /// Causal depthwise conv with SiLU over T new rows, continuing from the state:
    /// `x [T, C]`, `w [C, K]` (weight), `state [K-1, C]` (state, the previous K-1 inputs)
    /// -> `y [T, C]`; the state is updated to the last K-1 inputs.
    ConvStep,
    /// Gated delta net over T tokens with raw gates, recurrent form:
    /// `qkv [T, 2·nk·dk + nv·dv]` (conv output, `[q | k | v]`), `b [T, nv]`, `a [T, nv]`,
    /// `ssm_a [nv]` (= −exp(A_log)), `dt_bias [nv]`, `state [nv, dk, dv]` (state)
    /// -> `o [T, nv, dv]`. Inside: q, k L2-normalised, q scaled by `dk^-0.5`,
    /// `beta = sigmoid(b)`, `g = ssm_a · softplus(a + dt_bias)`; the state is updated.
    GatedDeltaNet(GdnParams),
    /// [`Op::ConvStep`] over a *tree* of T new rows that keeps every row's conv state
    /// (speculative verify; a chain is the tree with `parent[t] = t − 1`):
    /// `x [T, C]`, `w [C, K]`, `parent i32 [T]`, `state [K-1, C]` (state),
    /// `tokens [R, K-1, C]` (state, R ≥ T) -> `y [T, C]`.
    /// Row t continues from its parent's conv state `tokens[parent[t]]`, or from `state` when
    /// `parent[t] < 0`; parents come before their children (`parent[t] < t`). `tokens[t]`
    /// receives row t's conv state (the last K−1 inputs of its window). `state` is not
    /// modified: committing row a is copying `tokens[a]` into it.
    ConvTree,
    /// [`Op::GatedDeltaNet`] over a tree of T new rows that keeps every row's recurrent state:
    /// `qkv`, `b`, `a`, `ssm_a`, `dt_bias` as there, `parent i32 [T]`, `state [nv, dk, dv]`
    /// (state), `tokens [R, nv, dk, dv]` (state, R ≥ T) -> `o [T, nv, dv]`. Row t starts from
    /// `tokens[parent[t]]` (or `state` when `parent[t] < 0`), and its updated state is written
    /// to `tokens[t]`; `state` is not modified (see [`Op::ConvTree`]).
    GatedDeltaNetTree(GdnParams),
    /// [`Op::GatedDeltaNet`] over a chain of T new rows that leaves the state alone and logs
    /// its inputs instead (speculative verify with factor-replay rollback):
    /// `qkv`, `b`, `a`, `ssm_a`, `dt_bias`, `state` as there, `log [R, conv_dim + 2·nv]`
    /// (state, R ≥ T) -> `o [T, nv, dv]`. Row t of the log receives `[qkv_t | b_t | a_t]`;
    /// `state` is only read. Committing the first n rows is [`Op::GatedDeltaNetReplay`]: the
    /// log is `conv_dim + 2·nv` floats per row where per-row states are `nv·dk·dv`.
    GatedDeltaNetLog(GdnParams),
    /// Advances the state over the first `rows` rows of a [`Op::GatedDeltaNetLog`] log:
    /// `ssm_a`, `dt_bias` (weights), `state [nv, dk, dv]` (state), `log [R, conv_dim + 2·nv]`
    /// (state, R ≥ rows) -> `o [rows, nv, dv]` (the rows' outputs again; callers drop them).
    /// The same arithmetic as [`Op::GatedDeltaNet`] over those inputs, so the state ends
    /// bit for bit where a step over the same rows would leave it.
    GatedDeltaNetReplay { p: GdnParams, rows: usize },
    /// `x [.., W]` -> `x[.., offset .. offset + len]` (a contiguous copy).
    SliceLast { offset: usize, len: usize },
    /// `x [N, D]` -> `x[start .. start + len, :]` (a contiguous copy of whole rows).
    Rows { start: usize, len: usize },
    /// Same data, new shape (equal element count): a view, never a copy.
    Reshape { shape: Vec<usize> },
    /// Partial NeoX rotary embedding: `x [T, H, D]`, `pos i32 [T]` -> same shape; dims
    /// `[0, rot)` rotate in pairs `(i, i + rot/2)` by `pos · inv_freq[i]`, cos and sin scaled by
    /// the attention factor ([`RopeParams::inv_freq`], [`RopeParams::attention_factor`]:
    /// `theta^(-2i/rot)` and 1 without YaRN).
    Rope(RopeParams),
    /// GQA attention over a KV cache with a causal mask:
    /// `q [T, nh, hd]`, `k [T, nkv, hd]`, `v [T, nkv, hd]`, `pos i32 [T]`,
    /// `k_cache [cap, nkv, hd]`, `v_cache [cap, nkv, hd]` (states) -> `[T, nh, hd]`.
    /// Row `pos[t]` of the caches is written with the new k/v first; query t then attends to
    /// cache rows `0 ..= pos[t]`.
    Attention(AttnParams),
    /// GQA attention without a causal mask (DFlash drafter blocks). Same inputs as
    /// [`Op::Attention`]: the new k/v rows are written at cache rows `pos[t]` first; then every
    /// query t attends to cache rows `j` in `0 ..= max(pos)` (all of them: context rows written
    /// earlier and every new row), restricted to `|pos[t] − j| ≤ window` when `window > 0`
    /// (HF's bidirectional sliding window).
    AttentionNonCausal { attn: AttnParams, window: usize },
    /// GQA attention of a draft tree (speculative verify): `q [T, nh, hd]`, `k`, `v
    /// [T, nkv, hd]`, `rows i32 [T]` (cache rows of the new k/v: consecutive, `rows[t] =
    /// rows[0] + t`), `mask i32 [T, T]`, `k_cache`, `v_cache` (states) -> `[T, nh, hd]`.
    /// The new rows are written first; query t then attends to the committed context (cache
    /// rows `0 .. rows[0]`) and to the new rows `rows[j]` with `mask[t, j] ≠ 0` (its ancestors
    /// and itself, `j ≤ t`). A lower-triangular mask is [`Op::Attention`].
    AttentionTree(AttnParams),
    /// `x`, `g` (same shape) -> `x · sigmoid(g)`.
    SigmoidMul,
    /// `gate`, `up` (same shape) -> `silu(gate) · up`.
    SwiGlu,
    /// `x [N, V]` -> `i32 [N]`: index of the maximum (first on ties).
    ArgMax,
    /// `x [N, V]` -> (`values [N, k]`, `indices i32 [N, k]`), descending; ties keep the lower index.
    TopK { k: usize },
    /// `x [N, V]` -> `[N]`: `m + ln Σ_j exp(x_j − m)` per row, `m` the row's maximum (the
    /// log-softmax normaliser: with [`Op::TopK`], a row's best log-probabilities without
    /// reading the row back).
    LogSumExp,
    /// `x_0 [r_0, W]`, `x_1 [r_1, W]`, … (one or more) -> `[Σ r_j, W]`: the rows in input order.
    Concat,
    /// DFlash2 grouped dynamic causal conv along block positions (drafters.md §4.2):
    /// `x [T, C]`, `base [S, K, C]` (F32 weight), `dyn [T, S·K·G]` with `G = C / group`
    /// -> `y [T, C]`, `y[i, c] = Σ_{t<K} (base[side, t, c] + dyn[i, (side·K + t)·G + c/group])
    /// · x[i − t, c]`. Rows form blocks of `block` consecutive rows (one per sequence);
    /// `x[i − t]` is zero when it lies before the start of row i's block.
    DynConv {
        side: usize,
        block: usize,
        group: usize,
    },
    /// DFlash2 candidate-selector path walk (drafters.md §4.3), per sequence of `block` rows:
    /// `unary [M, k]`, `cand i32 [M, k]`, `hp [M, r]`, `succ [M·k, r]` (successor codebook rows
    /// of `cand`), `pred [M·k, r]` (predecessor codebook rows of `cand`), `seed [N, r]`
    /// (predecessor rows of the seeds), `M = N · block` -> (`tokens i32 [M]`, `scores [M, k]`).
    /// Row l of sequence n: `scores[l, c] = unary[l, c] + Σ_r p[r] · hp[l, r] · succ[l·k + c, r]`
    /// with `p` = `seed[n]` for its first row, else `pred[(l−1)·k + c*]` of the previous row's
    /// choice `c*`; the choice is the first maximum of the row's scores and
    /// `tokens[l] = cand[l, c*]`.
    SelectorWalk { block: usize },
}

impl Op {
    pub fn name(&self) -> &'static str {
        match self {
            Op::Embed => "embed",
            Op::MatMul => "matmul",
            Op::Add => "add",
            Op::RmsNorm { .. } => "rms_norm",
            Op::AddRmsNorm { .. } => "add_rms_norm",
            Op::GatedRmsNorm { .. } => "gated_rms_norm",
            Op::L2Norm { .. } => "l2_norm",
            Op::ConvStep => "conv_step",
            Op::GatedDeltaNet(_) => "gated_delta_net",
            Op::ConvTree => "conv_tree",
            Op::GatedDeltaNetTree(_) => "gated_delta_net_tree",
            Op::GatedDeltaNetLog(_) => "gated_delta_net_log",
            Op::GatedDeltaNetReplay { .. } => "gated_delta_net_replay",
            Op::SliceLast { .. } => "slice_last",
            Op::Rows { .. } => "rows",
            Op::Reshape { .. } => "reshape",
            Op::Rope(_) => "rope",
            Op::Attention(_) => "attention",
            Op::AttentionNonCausal { .. } => "attention_non_causal",
            Op::AttentionTree(_) => "attention_tree",
            Op::SigmoidMul => "sigmoid_mul",
            Op::SwiGlu => "swiglu",
            Op::ArgMax => "argmax",
            Op::TopK { .. } => "top_k",
            Op::LogSumExp => "log_sum_exp",
            Op::Concat => "concat",
            Op::DynConv { .. } => "dyn_conv",
            Op::SelectorWalk { .. } => "selector_walk",
        }
    }
}
