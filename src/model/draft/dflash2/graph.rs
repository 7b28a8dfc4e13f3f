//! The batched DFlash2 draft graph: one launch drafts a block for each of N sequences.
//!
//! ```text
//! per sequence s: ctx_s = RMSNorm(fc(feat_s); hidden_norm)         [tc, H] (new committed rows)
//!                 per layer: K/V of ctx_s (k_norm, RoPE at cpos_s) written to s's caches
//! h = target_embed(ids)                                              [N·B, H], B rows per sequence
//! per layer:  hn = RMSNorm(h; attn_norm);  da = hn · attn_conv.projᵀ            [N·B, 2·K·G]
//!             x = conv_0(hn; da);  Q, K, V of x (q/k_norm, RoPE at pos)
//!             A_s = non-causal attention of s's block rows over s's cache (+ its block rows)
//!             h += conv_1(Wo A; da)
//!             hf = RMSNorm(h; ffn_norm);  dm = hf · ffn_conv.projᵀ
//!             h += conv_1'(down(silu(gate x') · up x'); dm),  x' = conv_0'(hf; dm)
//! hidden = RMSNorm(h; output_norm), the B−1 mask rows of every sequence     [N·(B−1), H]
//! selector: unary, cand = topk(lm_head(hidden), k); greedy walk from each sequence's seed
//! ```
//!
//! The matmuls run over all `N·B` rows at once (the weights are read once per launch); attention
//! runs per sequence on its own caches (`dflash2.k_cache.{layer}.{slot}`) and the outputs are
//! concatenated back. The conv never crosses a block boundary ([`Op::DynConv`]'s `block`).
//!
//! Every sequence appends the same number `tc` of context rows per launch; a sequence with fewer
//! new rows pads with zero features at its anchor position, a cache row that its block's own
//! K/V write (later in the same layer) overwrites before anything reads it.
//!
//! [`Op::DynConv`]: crate::graph::Op::DynConv

use super::super::graph::Ctx;
use super::super::names::{self, blk};
use super::super::{DFlash, DFlashConfig};
use crate::backend::{StateDecl, WeightStore};
use crate::graph::{Graph, GraphBuilder, TensorId};
use crate::model::ModelError;
use crate::tensor::DType;

/// The shape of one batched draft launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BatchShape {
    /// Sequences (slots) drafted in the launch.
    pub seqs: usize,
    /// Context rows each sequence appends (padded).
    pub tc: usize,
    /// Cache rows per sequence.
    pub cap: usize,
    /// Optional outputs.
    pub extras: DraftExtras,
}

/// Optional outputs of a draft launch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct DraftExtras {
    /// The full `draft_logits [N·(B−1), vocab]` (checks and the CLI; the spec loop needs only
    /// the selector's tokens).
    pub logits: bool,
    /// The selector's inputs, so the host can score any predecessor (a sampled walk):
    /// `selector_unary [N·(B−1), k]`, `selector_hp [N·(B−1), rank]`, `selector_succ` and
    /// `selector_pred [N·(B−1)·k, rank]` (the candidates' codebook rows) and
    /// `selector_seed_pred [N, rank]`.
    pub walk_parts: bool,
}

/// The context K/V cache of drafter layer `layer` for slot `slot`.
pub fn k_cache(layer: usize, slot: usize) -> String {
    format!("dflash2.k_cache.{layer}.{slot}")
}
pub fn v_cache(layer: usize, slot: usize) -> String {
    format!("dflash2.v_cache.{layer}.{slot}")
}

/// State declarations of every slot's caches.
pub fn state_decls(c: &DFlashConfig, seqs: usize, cap: usize) -> Vec<StateDecl> {
    let shape = [cap, c.n_kv_heads, c.head_dim];
    (0..c.n_layers)
        .flat_map(|i| {
            (0..seqs).flat_map(move |s| {
                [
                    StateDecl::new(k_cache(i, s), &shape),
                    StateDecl::new(v_cache(i, s), &shape),
                ]
            })
        })
        .collect()
}

/// The tensors the selector produces.
pub struct Selected {
    /// `draft_tokens` i32 `[N·L]`: the walk's proposals.
    pub tokens: TensorId,
    /// `[N·L, k]`: each row's candidate scores given the previous choice.
    pub scores: TensorId,
    /// i32 `[N·L, k]`: the candidates (top-k of the lm_head, best first).
    pub cand: TensorId,
    /// `[N·L, vocab]`: the lm_head logits.
    pub logits: TensorId,
    /// The walk's inputs: `[N·L, k]` unary scores, `[N·L, rank]` hidden projections, the
    /// candidates' successor and predecessor codebook rows `[N·L·k, rank]` and the seeds'
    /// predecessor rows `[N, rank]`.
    pub unary: TensorId,
    pub hp: TensorId,
    pub succ: TensorId,
    pub pred: TensorId,
    pub seed_pred: TensorId,
}

/// The candidate selector (drafters.md §4.3) over `hidden [N·L, H]` (the normed rows the
/// lm_head reads, L per sequence) from the seeds `seed i32 [N]`.
pub fn selector(
    b: &mut GraphBuilder,
    w: &WeightStore,
    hidden: TensorId,
    seed: TensorId,
    rows_per_seq: usize,
    top_k: usize,
) -> Result<Selected, ModelError> {
    let weight = |b: &mut GraphBuilder, name: &str| -> Result<TensorId, ModelError> {
        let h = w.get(name).ok_or_else(|| ModelError::Weight {
            name: name.into(),
            msg: "missing from the drafter's weight set".into(),
        })?;
        Ok(b.weight(name, h.dtype, &h.shape)?)
    };
    let m = b.tensor(hidden).shape[0];
    let lm_head = weight(b, names::OUTPUT)?;
    let logits = b.matmul(hidden, lm_head)?;
    let (unary, cand) = b.top_k(logits, top_k)?;
    let hproj = weight(b, names::SELECTOR_HPROJ)?;
    let hp = b.matmul(hidden, hproj)?;
    let flat = b.reshape(cand, &[m * top_k])?;
    let succ_cb = weight(b, names::SELECTOR_SUCC)?;
    let pred_cb = weight(b, names::SELECTOR_PRED)?;
    let succ = b.embed(succ_cb, flat)?;
    let pred = b.embed(pred_cb, flat)?;
    let seed_rows = b.embed(pred_cb, seed)?;
    let (tokens, scores) = b.selector_walk(rows_per_seq, unary, cand, hp, succ, pred, seed_rows)?;
    Ok(Selected {
        tokens,
        scores,
        cand,
        logits,
        unary,
        hp,
        succ,
        pred,
        seed_pred: seed_rows,
    })
}

impl Ctx<'_> {
    /// `Rows` over a tensor of any rank (viewed as `[rows, rest]`), reshaped back.
    fn rows_nd(&mut self, x: TensorId, start: usize, len: usize) -> Result<TensorId, ModelError> {
        let shape = self.b.tensor(x).shape.clone();
        let rest: usize = shape[1..].iter().product();
        let flat = self.b.reshape(x, &[shape[0], rest])?;
        let r = self.b.rows(flat, start, len)?;
        let mut out = shape;
        out[0] = len;
        Ok(self.b.reshape(r, &out)?)
    }

    /// `conv_side(x)` with the dynamic part `dk` of the conv `name` (`attn_conv` / `ffn_conv`).
    fn conv(
        &mut self,
        i: usize,
        name: &str,
        x: TensorId,
        dk: TensorId,
        side: usize,
    ) -> Result<TensorId, ModelError> {
        let d2 = self.c.dflash2.as_ref().expect("checked by draft_graph");
        let (block, group) = (self.c.block_size, d2.conv_group);
        let base = self.w(&blk(i, &format!("{name}.base")))?;
        Ok(self.b.dyn_conv(x, base, dk, side, block, group)?)
    }
}

/// The batched DFlash2 draft graph for `shape` (see the module docs).
///
/// Inputs: with `tc > 0`, `feat` f32 `[N·tc, n_target_layers·H]`, `cpos` i32 `[N·tc]`,
/// `cpos.{s}` i32 `[tc]` (sequence s's rows of `cpos`) and `cq` f32 `[tc, nh, hd]` (zeros);
/// always `ids` i32 `[N·B]` (each block: last token, then masks), `pos` i32 `[N·B]`,
/// `pos.{s}` i32 `[B]` and `seed` i32 `[N]` (each block's first id).
/// Outputs: `draft_tokens` i32 `[N·(B−1)]`, `selector_scores` `[N·(B−1), k]`,
/// `selector_cand` i32 `[N·(B−1), k]`, and with `shape.logits` `draft_logits`
/// `[N·(B−1), vocab]`. `weights` is [`DFlash::weights_with_target`].
pub fn draft_graph(
    model: &DFlash,
    weights: &WeightStore,
    shape: BatchShape,
) -> Result<Graph, ModelError> {
    let c = &model.cfg;
    c.check_supported()?;
    let d2 = c.dflash2.as_ref().ok_or_else(|| {
        ModelError::Config("dflash2 graph: the drafter has no dflash2 config".into())
    })?;
    let BatchShape { seqs, tc, cap, .. } = shape;
    if seqs == 0 {
        return Err(ModelError::Config("dflash2 graph: no sequences".into()));
    }
    let bsz = c.block_size;
    let rows = seqs * bsz;
    let (nh, nkv, hd, eps, theta) = (c.n_heads, c.n_kv_heads, c.head_dim, c.eps, c.rope_theta);
    let mut b = GraphBuilder::new();
    let ctx_in = if tc > 0 {
        let feat = b.input("feat", DType::F32, &[seqs * tc, c.feature_width()])?;
        let cpos = b.input("cpos", DType::I32, &[seqs * tc])?;
        let per: Vec<TensorId> = (0..seqs)
            .map(|s| b.input(&format!("cpos.{s}"), DType::I32, &[tc]))
            .collect::<Result<_, _>>()?;
        let cq = b.input("cq", DType::F32, &[tc, nh, hd])?;
        Some((feat, cpos, per, cq))
    } else {
        None
    };
    let ids = b.input("ids", DType::I32, &[rows])?;
    let pos = b.input("pos", DType::I32, &[rows])?;
    let pos_s: Vec<TensorId> = (0..seqs)
        .map(|s| b.input(&format!("pos.{s}"), DType::I32, &[bsz]))
        .collect::<Result<_, _>>()?;
    let seed = b.input("seed", DType::I32, &[seqs])?;
    let mut cx = Ctx { w: weights, c, b };
    let p = cx.attn_params();

    let ctx = match ctx_in {
        Some((feat, cpos, per, cq)) => {
            let x = cx.lin(feat, names::FC)?;
            let hn = cx.w(names::HIDDEN_NORM)?;
            Some((cx.b.rms_norm(x, hn, eps)?, cpos, per, cq))
        }
        None => None,
    };

    let embd = cx.w(names::TOKEN_EMBD)?;
    let mut resid = cx.b.embed(embd, ids)?;
    let n0 = cx.w(&blk(0, "attn_norm.weight"))?;
    let mut normed = cx.b.rms_norm(resid, n0, eps)?;
    for i in 0..c.n_layers {
        let window = c.window(i);
        let caches: Vec<(TensorId, TensorId)> = (0..seqs)
            .map(|s| -> Result<_, ModelError> {
                Ok((
                    cx.b.state(&k_cache(i, s), &[cap, nkv, hd])?,
                    cx.b.state(&v_cache(i, s), &[cap, nkv, hd])?,
                ))
            })
            .collect::<Result<_, _>>()?;
        if let Some((ctx, cpos, per, cq)) = &ctx {
            let (k, v) = cx.kv(i, *ctx, seqs * tc, *cpos)?;
            for (s, &(kc, vc)) in caches.iter().enumerate() {
                let (ks, vs) = if seqs == 1 {
                    (k, v)
                } else {
                    (cx.rows_nd(k, s * tc, tc)?, cx.rows_nd(v, s * tc, tc)?)
                };
                // Writes the context rows; the attention output over zero queries is unused.
                cx.b.attention_non_causal(p, window, *cq, ks, vs, per[s], kc, vc)?;
            }
        }
        // Attention sublayer, wrapped in the dynamic conv (sides 0 and 1 from the same dyn).
        let da = cx.lin(normed, &blk(i, "attn_conv.proj.weight"))?;
        let x = cx.conv(i, "attn_conv", normed, da, 0)?;
        let q = cx.lin(x, &blk(i, "attn_q.weight"))?;
        let q = cx.b.reshape(q, &[rows, nh, hd])?;
        let qn = cx.w(&blk(i, "attn_q_norm.weight"))?;
        let q = cx.b.rms_norm(q, qn, eps)?;
        let q = cx.b.rope(q, pos, hd, theta)?;
        let (k, v) = cx.kv(i, x, rows, pos)?;
        let mut outs = Vec::with_capacity(seqs);
        for (s, &(kc, vc)) in caches.iter().enumerate() {
            let (qs, ks, vs) = if seqs == 1 {
                (q, k, v)
            } else {
                (
                    cx.rows_nd(q, s * bsz, bsz)?,
                    cx.rows_nd(k, s * bsz, bsz)?,
                    cx.rows_nd(v, s * bsz, bsz)?,
                )
            };
            let a =
                cx.b.attention_non_causal(p, window, qs, ks, vs, pos_s[s], kc, vc)?;
            outs.push(cx.b.reshape(a, &[bsz, nh * hd])?);
        }
        let a = if seqs == 1 {
            outs[0]
        } else {
            cx.b.concat(&outs)?
        };
        let o = cx.lin(a, &blk(i, "attn_output.weight"))?;
        let o = cx.conv(i, "attn_conv", o, da, 1)?;
        let fw = cx.w(&blk(i, "ffn_norm.weight"))?;
        (resid, normed) = cx.b.add_rms_norm(o, resid, fw, eps)?;
        // MLP sublayer, wrapped the same way.
        let dm = cx.lin(normed, &blk(i, "ffn_conv.proj.weight"))?;
        let x = cx.conv(i, "ffn_conv", normed, dm, 0)?;
        let g = cx.lin(x, &blk(i, "ffn_gate.weight"))?;
        let u = cx.lin(x, &blk(i, "ffn_up.weight"))?;
        let sw = cx.b.swiglu(g, u)?;
        let m = cx.lin(sw, &blk(i, "ffn_down.weight"))?;
        let m = cx.conv(i, "ffn_conv", m, dm, 1)?;
        let next = if i + 1 < c.n_layers {
            blk(i + 1, "attn_norm.weight")
        } else {
            names::OUTPUT_NORM.to_string()
        };
        let nw = cx.w(&next)?;
        (resid, normed) = cx.b.add_rms_norm(m, resid, nw, eps)?;
    }
    // The mask rows of every block (row 0, the anchor, proposes nothing).
    let hidden = if seqs == 1 {
        cx.b.rows(normed, 1, bsz - 1)?
    } else {
        let parts = (0..seqs)
            .map(|s| cx.b.rows(normed, s * bsz + 1, bsz - 1))
            .collect::<Result<Vec<_>, _>>()?;
        cx.b.concat(&parts)?
    };
    let sel = selector(&mut cx.b, weights, hidden, seed, bsz - 1, d2.selector_top_k)?;
    cx.b.output("draft_tokens", sel.tokens)?;
    cx.b.output("selector_scores", sel.scores)?;
    cx.b.output("selector_cand", sel.cand)?;
    if shape.extras.logits {
        cx.b.output("draft_logits", sel.logits)?;
    }
    if shape.extras.walk_parts {
        cx.b.output("selector_unary", sel.unary)?;
        cx.b.output("selector_hp", sel.hp)?;
        cx.b.output("selector_succ", sel.succ)?;
        cx.b.output("selector_pred", sel.pred)?;
        cx.b.output("selector_seed_pred", sel.seed_pred)?;
    }
    Ok(cx.b.build())
}
