//! Lowers one forward step of the target over T tokens to a graph.

use super::Qwen35;
use super::names::{self, blk};
use crate::graph::{AttnParams, GdnParams, Graph, GraphBuilder, GraphError, RopeParams, TensorId};
use crate::model::{LayerKind, ModelError};
use crate::tensor::DType;

/// eps of the DeltaNet q/k L2 normalisation (HF's `l2norm` default).
const GDN_L2_EPS: f32 = 1e-6;

/// The geometry of the target's gated delta net.
fn gdn_params(c: &crate::model::Qwen35Config) -> GdnParams {
    GdnParams {
        nk: c.nk,
        nv: c.nv,
        dk: c.dk,
        dv: c.dv,
        head_map: c.head_map,
        l2_eps: GDN_L2_EPS,
    }
}

/// Which rows of logits a step produces.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LogitRows {
    /// One row per input token (`deltaspec logits`, verification).
    All,
    /// Only the last token's row (generation).
    Last,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct GraphOptions {
    pub logits: LogitRows,
    /// Also output the argmax of each logits row (`argmax`, i32).
    pub argmax: bool,
    /// Layers whose output (the residual stream after the layer) is captured as `hidden.{i}`.
    pub capture: Vec<usize>,
    /// Whether the logits are an output the caller reads back. Greedy steps need only the
    /// argmax: a 16-row verify would otherwise copy 16 × vocab floats to the host each round.
    /// With neither logits nor argmax the step skips the output norm and the lm_head (a
    /// rollback replay needs only the states it writes).
    pub read_logits: bool,
}

impl Default for GraphOptions {
    fn default() -> Self {
        GraphOptions {
            logits: LogitRows::All,
            argmax: false,
            capture: Vec::new(),
            read_logits: true,
        }
    }
}

/// The extra inputs of a tree (or per-token-state chain) verify step; see
/// [`Qwen35::tree_graph`].
#[derive(Clone, Copy)]
struct Tree {
    /// `kv_rows i32 [T]`: cache rows of the new K/V (consecutive).
    kv_rows: TensorId,
    /// `parent i32 [T]`.
    parent: TensorId,
    /// `mask i32 [T, T]`: ancestor-or-self.
    mask: TensorId,
    /// Rows of the per-row state buffers.
    rows: usize,
    /// Factor replay: the recurrent step logs its inputs instead of writing per-row states.
    log: bool,
}

struct Ctx<'a> {
    m: &'a Qwen35,
    b: GraphBuilder,
    t: usize,
    /// KV rows of the attention states.
    cap: usize,
    pos: TensorId,
    tree: Option<Tree>,
}

impl Ctx<'_> {
    /// Declares a bound weight with the dtype and shape it was loaded with.
    fn w(&mut self, name: &str) -> Result<TensorId, ModelError> {
        self.m.bind_weight(&mut self.b, name)
    }

    fn lin(&mut self, x: TensorId, name: &str) -> Result<TensorId, ModelError> {
        let w = self.w(name)?;
        Ok(self.b.matmul(x, w)?)
    }

    fn attention(&mut self, i: usize, x: TensorId) -> Result<TensorId, ModelError> {
        let c = &self.m.cfg;
        let (t, nh, nkv, hd, eps) = (self.t, c.n_heads, c.n_kv_heads, c.head_dim, c.eps);
        let rope = RopeParams {
            rot: c.rot,
            theta: c.rope_theta,
            yarn: c.rope_scaling.as_ref().map(|y| y.to_graph()),
        };
        // attn_q interleaves query and gate per head: [q_h (hd) | gate_h (hd)] for each head.
        let qg = self.lin(x, &blk(i, "attn_q.weight"))?;
        let qg = self.b.reshape(qg, &[t, nh, 2 * hd])?;
        let q = self.b.slice_last(qg, 0, hd)?;
        let gate = self.b.slice_last(qg, hd, hd)?;
        let k = self.lin(x, &blk(i, "attn_k.weight"))?;
        let k = self.b.reshape(k, &[t, nkv, hd])?;
        let v = self.lin(x, &blk(i, "attn_v.weight"))?;
        let v = self.b.reshape(v, &[t, nkv, hd])?;
        let qn = self.w(&blk(i, "attn_q_norm.weight"))?;
        let kn = self.w(&blk(i, "attn_k_norm.weight"))?;
        let q = self.b.rms_norm(q, qn, eps)?;
        let k = self.b.rms_norm(k, kn, eps)?;
        let q = self.b.rope_with(q, self.pos, rope)?;
        let k = self.b.rope_with(k, self.pos, rope)?;
        let cap = self.cap;
        let kc = self.b.state(&names::k_cache(i), &[cap, nkv, hd])?;
        let vc = self.b.state(&names::v_cache(i), &[cap, nkv, hd])?;
        let p = AttnParams {
            n_heads: nh,
            n_kv_heads: nkv,
            head_dim: hd,
            scale: 1.0 / (hd as f32).sqrt(),
        };
        let a = match self.tree {
            None => self.b.attention(p, q, k, v, self.pos, kc, vc)?,
            Some(tr) => self
                .b
                .attention_tree(p, q, k, v, tr.kv_rows, tr.mask, kc, vc)?,
        };
        let a = self.b.sigmoid_mul(a, gate)?;
        let a = self.b.reshape(a, &[t, nh * hd])?;
        self.lin(a, &blk(i, "attn_output.weight"))
    }

    fn delta_net(&mut self, i: usize, x: TensorId) -> Result<TensorId, ModelError> {
        let c = &self.m.cfg;
        let p = gdn_params(c);
        let kconv = c.conv_kernel;
        let qkv = self.lin(x, &blk(i, "attn_qkv.weight"))?;
        let z = self.lin(x, &blk(i, "attn_gate.weight"))?;
        let beta = self.lin(x, &blk(i, "ssm_beta.weight"))?;
        let alpha = self.lin(x, &blk(i, "ssm_alpha.weight"))?;
        let conv_w = self.w(&blk(i, "ssm_conv1d.weight"))?;
        let conv_state = self
            .b
            .state(&names::conv_state(i), &[kconv - 1, p.conv_dim()])?;
        let ssm_a = self.w(&blk(i, "ssm_a"))?;
        let dt_bias = self.w(&blk(i, "ssm_dt.bias"))?;
        let ssm_state = self.b.state(&names::ssm_state(i), &[p.nv, p.dk, p.dv])?;
        let o = match self.tree {
            None => {
                let qkv = self.b.conv_step(qkv, conv_w, conv_state)?;
                self.b
                    .gated_delta_net(p, qkv, beta, alpha, ssm_a, dt_bias, ssm_state)?
            }
            Some(tr) => {
                let conv_tok = self
                    .b
                    .state(&names::conv_tokens(i), &[tr.rows, kconv - 1, p.conv_dim()])?;
                let qkv = self
                    .b
                    .conv_tree(qkv, conv_w, tr.parent, conv_state, conv_tok)?;
                if tr.log {
                    let log = self
                        .b
                        .state(&names::ssm_log(i), &[tr.rows, p.log_width()])?;
                    let o = self.b.gated_delta_net_log(
                        p,
                        qkv,
                        beta,
                        alpha,
                        ssm_a,
                        dt_bias,
                        (ssm_state, log),
                    )?;
                    return self.finish_delta_net(i, p, z, o);
                }
                let ssm_tok = self
                    .b
                    .state(&names::ssm_tokens(i), &[tr.rows, p.nv, p.dk, p.dv])?;
                self.b.gated_delta_net_tree(
                    p,
                    qkv,
                    beta,
                    alpha,
                    ssm_a,
                    dt_bias,
                    (tr.parent, ssm_state, ssm_tok),
                )?
            }
        };
        self.finish_delta_net(i, p, z, o)
    }

    /// The gated norm and output projection of a DeltaNet layer's recurrent output `o`.
    fn finish_delta_net(
        &mut self,
        i: usize,
        p: GdnParams,
        z: TensorId,
        o: TensorId,
    ) -> Result<TensorId, ModelError> {
        let (t, eps) = (self.t, self.m.cfg.eps);
        let z = self.b.reshape(z, &[t, p.nv, p.dv])?;
        let norm_w = self.w(&blk(i, "ssm_norm.weight"))?;
        let y = self.b.gated_rms_norm(o, z, norm_w, eps)?;
        let y = self.b.reshape(y, &[t, p.value_dim()])?;
        self.lin(y, &blk(i, "ssm_out.weight"))
    }

    fn mlp(&mut self, i: usize, x: TensorId) -> Result<TensorId, ModelError> {
        let g = self.lin(x, &blk(i, "ffn_gate.weight"))?;
        let u = self.lin(x, &blk(i, "ffn_up.weight"))?;
        let s = self.b.swiglu(g, u)?;
        self.lin(s, &blk(i, "ffn_down.weight"))
    }
}

impl Qwen35 {
    /// The graph of one step over `t` tokens (inputs `ids` and `pos`, i32 `[t]`) for states
    /// made by [`Qwen35::state_decls`] with `ctx` positions.
    pub fn step_graph(
        &self,
        t: usize,
        ctx: usize,
        opts: &GraphOptions,
    ) -> Result<Graph, ModelError> {
        self.graph(t, ctx, opts, None)
    }

    /// The graph of a verify step over a tree of `t` rows (a chain is the tree whose row i
    /// has parent i − 1), for states that also hold [`crate::state::token_layout`] with
    /// `rows ≥ t` rows. Inputs: `ids`, `pos` (RoPE positions: committed length + depth),
    /// `kv_rows` (cache rows: committed length + row index), `parent` (−1 for the root) and
    /// `mask` `[t, t]` (1 where column j is an ancestor of row i or i itself). Attention sees
    /// the committed context and the row's ancestors; conv and DeltaNet continue from the
    /// parent's state, and write every row's state to the per-row buffers without touching
    /// the live state (committing is a copy: [`crate::model::Session::commit_tree`]).
    pub fn tree_graph(
        &self,
        t: usize,
        ctx: usize,
        rows: usize,
        opts: &GraphOptions,
    ) -> Result<Graph, ModelError> {
        self.graph(t, ctx, opts, Some((rows, false)))
    }

    /// [`Qwen35::tree_graph`] of a chain for factor-replay rollback, over states that also hold
    /// [`crate::state::log_layout`] with `rows ≥ t` rows: the same inputs (`parent` must be
    /// a chain), the per-row conv states, and instead of per-row recurrent states every row's
    /// recurrent-step inputs logged; committing replays them ([`Qwen35::replay_graph`]).
    pub fn log_graph(
        &self,
        t: usize,
        ctx: usize,
        rows: usize,
        opts: &GraphOptions,
    ) -> Result<Graph, ModelError> {
        self.graph(t, ctx, opts, Some((rows, true)))
    }

    /// Advances every DeltaNet layer's recurrent state over the first `n` rows logged by a
    /// [`Qwen35::log_graph`] verify with `rows` log rows (no inputs, no outputs).
    pub fn replay_graph(&self, n: usize, rows: usize) -> Result<Graph, ModelError> {
        let c = &self.cfg;
        let p = gdn_params(c);
        let mut b = GraphBuilder::new();
        for (i, kind) in c.layers.iter().enumerate() {
            if *kind != LayerKind::DeltaNet {
                continue;
            }
            let ssm_a = self.bind_weight(&mut b, &blk(i, "ssm_a"))?;
            let dt_bias = self.bind_weight(&mut b, &blk(i, "ssm_dt.bias"))?;
            let state = b.state(&names::ssm_state(i), &[p.nv, p.dk, p.dv])?;
            let log = b.state(&names::ssm_log(i), &[rows, p.log_width()])?;
            b.gated_delta_net_replay(p, n, ssm_a, dt_bias, state, log)?;
        }
        Ok(b.build())
    }

    /// Declares the bound weight `name` in `b` with the dtype and shape it was loaded with.
    fn bind_weight(&self, b: &mut GraphBuilder, name: &str) -> Result<TensorId, ModelError> {
        let h = self.weights.get(name).ok_or_else(|| ModelError::Weight {
            name: name.into(),
            msg: "missing from the model".into(),
        })?;
        Ok(b.weight(name, h.dtype, &h.shape)?)
    }

    fn graph(
        &self,
        t: usize,
        ctx: usize,
        opts: &GraphOptions,
        tree_rows: Option<(usize, bool)>,
    ) -> Result<Graph, ModelError> {
        if t == 0 {
            return Err(GraphError::Invalid("a step needs at least one token".into()).into());
        }
        let mut b = GraphBuilder::new();
        let ids = b.input("ids", DType::I32, &[t])?;
        let pos = b.input("pos", DType::I32, &[t])?;
        let tree = match tree_rows {
            None => None,
            Some((rows, log)) => Some(Tree {
                kv_rows: b.input("kv_rows", DType::I32, &[t])?,
                parent: b.input("parent", DType::I32, &[t])?,
                mask: b.input("mask", DType::I32, &[t, t])?,
                rows,
                log,
            }),
        };
        let mut cx = Ctx {
            m: self,
            b,
            t,
            cap: ctx,
            pos,
            tree,
        };
        let c = &self.cfg;

        let embd = cx.w(names::TOKEN_EMBD)?;
        let mut resid = cx.b.embed(embd, ids)?;
        let attn_norm0 = cx.w(&blk(0, "attn_norm.weight"))?;
        let mut normed = cx.b.rms_norm(resid, attn_norm0, c.eps)?;
        for (i, kind) in c.layers.iter().enumerate() {
            let mixed = match kind {
                LayerKind::Attention => cx.attention(i, normed)?,
                LayerKind::DeltaNet => cx.delta_net(i, normed)?,
            };
            let post = cx.w(&blk(i, "post_attention_norm.weight"))?;
            (resid, normed) = cx.b.add_rms_norm(mixed, resid, post, c.eps)?;
            let ffn = cx.mlp(i, normed)?;
            let next_norm = if i + 1 < c.n_layers {
                blk(i + 1, "attn_norm.weight")
            } else {
                names::OUTPUT_NORM.to_string()
            };
            let nw = cx.w(&next_norm)?;
            (resid, normed) = cx.b.add_rms_norm(ffn, resid, nw, c.eps)?;
            if opts.capture.contains(&i) {
                cx.b.output(&format!("hidden.{i}"), resid)?;
            }
        }
        // Verify steps (every row's logits, or a tree) are compared with plain decode.
        cx.b.set_rows_match_decode(opts.logits == LogitRows::All || cx.tree.is_some());
        if !opts.read_logits && !opts.argmax {
            return Ok(cx.b.build());
        }
        let head_in = match opts.logits {
            LogitRows::All => normed,
            LogitRows::Last => cx.b.rows(normed, t - 1, 1)?,
        };
        let logits = cx.lin(head_in, names::OUTPUT)?;
        if opts.read_logits {
            cx.b.output("logits", logits)?;
        }
        if opts.argmax {
            let am = cx.b.argmax(logits)?;
            cx.b.output("argmax", am)?;
        }
        Ok(cx.b.build())
    }
}
