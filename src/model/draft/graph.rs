//! The cached-KV DFlash draft graph.
//!
//! One run appends `tc` newly committed context rows to the drafter's per-layer K/V caches and
//! drafts one block:
//!
//! ```text
//! ctx  = RMSNorm(fc(feat); hidden_norm)                      [tc, H]   (new committed rows)
//! per layer: K/V of ctx (k_norm, RoPE at cpos; the drafter's θ and YaRN) written at cache rows cpos
//! h    = target_embed([last, MASK × (B−1)])                   [B, H]    at positions pos
//! per layer: hn = RMSNorm(h; attn_norm); Q, K, V of hn (q/k_norm, RoPE at pos);
//!            A = softmax(Q Kᵀ/√hd) V over cache rows 0 ..= max(pos), non-causal;
//!            h += Wo A;  h += MLP(RMSNorm(h; ffn_norm))
//! logits = target_lm_head(RMSNorm(h; output_norm))[1 .. B]
//! ```
//!
//! The context rows are written with [`Op::AttentionNonCausal`] over an all-zero query input
//! (`cq`), whose output is discarded: the IR has no bare "write K/V rows" op. The block rows are
//! written too; they are overwritten by the next round's context rows (positions advance), and
//! rows past `max(pos)` are never read.
//!
//! [`Op::AttentionNonCausal`]: crate::graph::Op::AttentionNonCausal

use super::names::{self, blk};
use super::{DFlash, DFlashConfig};
use crate::backend::WeightStore;
use crate::graph::{AttnParams, Graph, GraphBuilder, TensorId};
use crate::model::ModelError;
use crate::tensor::DType;

/// What a draft graph returns besides the proposals (and the confidence logits).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DraftOut {
    /// The block's logits (`draft_logits`; DSpark: `markov_logits.{i}`).
    Logits,
    /// Nothing more: a greedy chain needs only the proposals.
    Tokens,
    /// The `k` best entries of every block row's logits (the DSpark-corrected ones with its
    /// head) and their log-softmax normalisers, computed on the device: `topk_values` f32
    /// `[B−1, k]`, `topk_indices` i32 `[B−1, k]`, `logsumexp` f32 `[B−1]`. A tree's
    /// candidates without reading the `[B−1, vocab]` logits back.
    TopK(usize),
}

/// Graph-building context shared with the DFlash2 graph (`super::dflash2`).
pub(super) struct Ctx<'a> {
    pub(super) w: &'a WeightStore,
    pub(super) c: &'a DFlashConfig,
    pub(super) b: GraphBuilder,
}

impl Ctx<'_> {
    pub(super) fn w(&mut self, name: &str) -> Result<TensorId, ModelError> {
        let h = self.w.get(name).ok_or_else(|| ModelError::Weight {
            name: name.into(),
            msg: "missing from the drafter's weight set".into(),
        })?;
        Ok(self.b.weight(name, h.dtype, &h.shape)?)
    }

    pub(super) fn lin(&mut self, x: TensorId, name: &str) -> Result<TensorId, ModelError> {
        let w = self.w(name)?;
        Ok(self.b.matmul(x, w)?)
    }

    pub(super) fn attn_params(&self) -> AttnParams {
        AttnParams {
            n_heads: self.c.n_heads,
            n_kv_heads: self.c.n_kv_heads,
            head_dim: self.c.head_dim,
            scale: 1.0 / (self.c.head_dim as f32).sqrt(),
        }
    }

    /// `k_norm(Wk x)` with RoPE at `pos`, and `Wv x`, as `[rows, nkv, hd]`.
    pub(super) fn kv(
        &mut self,
        i: usize,
        x: TensorId,
        rows: usize,
        pos: TensorId,
    ) -> Result<(TensorId, TensorId), ModelError> {
        let (nkv, hd, eps, rope) = (
            self.c.n_kv_heads,
            self.c.head_dim,
            self.c.eps,
            self.c.rope(),
        );
        let k = self.lin(x, &blk(i, "attn_k.weight"))?;
        let k = self.b.reshape(k, &[rows, nkv, hd])?;
        let kn = self.w(&blk(i, "attn_k_norm.weight"))?;
        let k = self.b.rms_norm(k, kn, eps)?;
        let k = self.b.rope_with(k, pos, rope)?;
        let v = self.lin(x, &blk(i, "attn_v.weight"))?;
        let v = self.b.reshape(v, &[rows, nkv, hd])?;
        Ok((k, v))
    }
}

/// State declarations of the drafter's context K/V caches for `cap` positions.
pub(super) fn state_decls(c: &DFlashConfig, cap: usize) -> Vec<crate::backend::StateDecl> {
    (0..c.n_layers)
        .flat_map(|i| {
            let shape = [cap, c.n_kv_heads, c.head_dim];
            [
                crate::backend::StateDecl::new(names::k_cache(i), &shape),
                crate::backend::StateDecl::new(names::v_cache(i), &shape),
            ]
        })
        .collect()
}

impl DFlash {
    /// The draft graph appending `tc` context rows (0: none) for caches of `cap` rows.
    ///
    /// Inputs: `feat` f32 `[tc, n_target_layers·H]`, `cpos` i32 `[tc]`, `cq` f32 `[tc, nh, hd]`
    /// (zeros) when `tc > 0`; `ids` i32 `[B]` (last token, then masks) and `pos` i32 `[B]`.
    /// Outputs: `draft_logits` f32 `[B−1, vocab]`, `draft_tokens` i32 `[B−1]`; with DSpark heads
    /// also `markov_logits.{i}` f32 `[1, vocab]` and `markov_token.{i}` i32 `[1]` per proposal
    /// (the chained Markov correction) and, with a confidence head, `confidence_logit` f32
    /// `[B−1, 1]` (the head's logit before its bias, computed on the device).
    /// `weights` is [`DFlash::weights_with_target`].
    pub fn draft_graph(
        &self,
        weights: &WeightStore,
        tc: usize,
        cap: usize,
    ) -> Result<Graph, ModelError> {
        self.draft_graph_with(weights, tc, cap, true)
    }

    /// [`DFlash::draft_graph`], with `logits: false` outputting only the proposals (and the
    /// confidence logits): `draft_tokens` without DSpark heads, `markov_token.{i}` with them.
    /// A greedy chain needs nothing else, and the `[B−1, vocab]` logits (15 MB per block of 16
    /// at a 248k vocab) then stay on the device. The computation is the same node for node, so
    /// the proposals are identical either way.
    pub fn draft_graph_with(
        &self,
        weights: &WeightStore,
        tc: usize,
        cap: usize,
        logits_out: bool,
    ) -> Result<Graph, ModelError> {
        let out = if logits_out {
            DraftOut::Logits
        } else {
            DraftOut::Tokens
        };
        self.draft_graph_out(weights, tc, cap, out)
    }

    /// [`DFlash::draft_graph`] with the extra outputs `out` (the computation is the same node
    /// for node: the proposals are identical whatever `out`).
    pub fn draft_graph_out(
        &self,
        weights: &WeightStore,
        tc: usize,
        cap: usize,
        out: DraftOut,
    ) -> Result<Graph, ModelError> {
        let logits_out = out == DraftOut::Logits;
        let c = &self.cfg;
        c.check_supported()?;
        if c.dflash2.is_some() {
            return Err(ModelError::Config(
                "a DFlash2 drafter runs through dflash2::draft_graph, not the DFlash graph".into(),
            ));
        }
        let bsz = c.block_size;
        let (nh, nkv, hd, eps, rope) = (c.n_heads, c.n_kv_heads, c.head_dim, c.eps, c.rope());
        let mut b = GraphBuilder::new();
        let ctx_in = if tc > 0 {
            Some((
                b.input("feat", DType::F32, &[tc, c.feature_width()])?,
                b.input("cpos", DType::I32, &[tc])?,
                b.input("cq", DType::F32, &[tc, nh, hd])?,
            ))
        } else {
            None
        };
        let ids = b.input("ids", DType::I32, &[bsz])?;
        let pos = b.input("pos", DType::I32, &[bsz])?;
        let mut cx = Ctx { w: weights, c, b };
        let p = cx.attn_params();

        let ctx = match ctx_in {
            Some((feat, cpos, cq)) => {
                let x = cx.lin(feat, names::FC)?;
                let hn = cx.w(names::HIDDEN_NORM)?;
                Some((cx.b.rms_norm(x, hn, eps)?, cpos, cq))
            }
            None => None,
        };

        let embd = cx.w(names::TOKEN_EMBD)?;
        let mut resid = cx.b.embed(embd, ids)?;
        let n0 = cx.w(&blk(0, "attn_norm.weight"))?;
        let mut normed = cx.b.rms_norm(resid, n0, eps)?;
        for i in 0..c.n_layers {
            let kc = cx.b.state(&names::k_cache(i), &[cap, nkv, hd])?;
            let vc = cx.b.state(&names::v_cache(i), &[cap, nkv, hd])?;
            let window = c.window(i);
            if let Some((ctx, cpos, cq)) = ctx {
                let (k, v) = cx.kv(i, ctx, tc, cpos)?;
                // Writes the context rows; the attention output over zero queries is unused.
                cx.b.attention_non_causal(p, window, cq, k, v, cpos, kc, vc)?;
            }
            let q = cx.lin(normed, &blk(i, "attn_q.weight"))?;
            let q = cx.b.reshape(q, &[bsz, nh, hd])?;
            let qn = cx.w(&blk(i, "attn_q_norm.weight"))?;
            let q = cx.b.rms_norm(q, qn, eps)?;
            let q = cx.b.rope_with(q, pos, rope)?;
            let (k, v) = cx.kv(i, normed, bsz, pos)?;
            let a = cx.b.attention_non_causal(p, window, q, k, v, pos, kc, vc)?;
            let a = cx.b.reshape(a, &[bsz, nh * hd])?;
            let o = cx.lin(a, &blk(i, "attn_output.weight"))?;
            let fw = cx.w(&blk(i, "ffn_norm.weight"))?;
            (resid, normed) = cx.b.add_rms_norm(o, resid, fw, eps)?;
            let g = cx.lin(normed, &blk(i, "ffn_gate.weight"))?;
            let u = cx.lin(normed, &blk(i, "ffn_up.weight"))?;
            let s = cx.b.swiglu(g, u)?;
            let m = cx.lin(s, &blk(i, "ffn_down.weight"))?;
            let next = if i + 1 < c.n_layers {
                blk(i + 1, "attn_norm.weight")
            } else {
                names::OUTPUT_NORM.to_string()
            };
            let nw = cx.w(&next)?;
            (resid, normed) = cx.b.add_rms_norm(m, resid, nw, eps)?;
        }
        let rows = cx.b.rows(normed, 1, bsz - 1)?;
        let logits = cx.lin(rows, names::OUTPUT)?;
        if logits_out {
            cx.b.output("draft_logits", logits)?;
        }
        // With DSpark heads the proposals are the Markov chain's; the backbone's argmax is
        // only an output next to its logits.
        if logits_out || c.dspark.is_none() {
            let am = cx.b.argmax(logits)?;
            cx.b.output("draft_tokens", am)?;
        }
        // The rows whose top-k a tree asks for: the backbone's, or the Markov-corrected ones.
        let mut corrected_rows = Vec::new();
        if let Some(d) = &c.dspark {
            // The Markov chain, left to right from the seed (block row 0):
            // corrected_i = U_i + W2 · W1[x_{i−1}],  x_i = argmax(corrected_i).
            let w1 = cx.w(names::MARKOV_W1)?;
            let w2 = cx.w(names::MARKOV_W2)?;
            let e_all = cx.b.embed(w1, ids)?;
            let mut e = cx.b.rows(e_all, 0, 1)?;
            // W1[x_{i−1}] of each proposal row, for the confidence head.
            let mut prev = Vec::with_capacity(bsz - 1);
            for i in 0..bsz - 1 {
                prev.push(e);
                let u = cx.b.rows(logits, i, 1)?;
                let bias = cx.b.matmul(e, w2)?;
                let corrected = cx.b.add(u, bias)?;
                let x = cx.b.argmax(corrected)?;
                if logits_out {
                    cx.b.output(&format!("markov_logits.{i}"), corrected)?;
                }
                corrected_rows.push(corrected);
                cx.b.output(&format!("markov_token.{i}"), x)?;
                if i + 2 < bsz {
                    e = cx.b.embed(w1, x)?;
                }
            }
            if let Some(cd) = d.confidence_dim {
                // The confidence head's logit without its bias:
                // z_i = w_h · h_i + w_r · W1[x_{i−1}], h_i the state before the output norm.
                let h = cx.b.rows(resid, 1, bsz - 1)?;
                let mut z = cx.lin(h, names::CONFIDENCE_WH)?;
                if cd > c.hidden {
                    let er = cx.b.concat(&prev)?;
                    let zr = cx.lin(er, names::CONFIDENCE_WR)?;
                    z = cx.b.add(z, zr)?;
                }
                cx.b.output("confidence_logit", z)?;
            }
        }
        if let DraftOut::TopK(k) = out {
            let rows = if corrected_rows.is_empty() {
                logits
            } else {
                cx.b.concat(&corrected_rows)?
            };
            let k = k.clamp(1, cx.b.tensor(rows).shape[1]);
            let (v, i) = cx.b.top_k(rows, k)?;
            let lse = cx.b.log_sum_exp(rows)?;
            cx.b.output("topk_values", v)?;
            cx.b.output("topk_indices", i)?;
            cx.b.output("logsumexp", lse)?;
        }
        Ok(cx.b.build())
    }
}
