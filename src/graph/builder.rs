//! Builds a [`Graph`] node by node, checking shapes as it goes.

use super::op::{AttnParams, GdnParams, Op, RopeParams};
use super::{Graph, GraphError, Node, TensorDecl, TensorId, TensorKind, shape};
use crate::tensor::DType;
use std::collections::HashMap;

type R<T> = Result<T, GraphError>;

#[derive(Default)]
pub struct GraphBuilder {
    g: Graph,
    by_name: HashMap<String, TensorId>,
}

impl GraphBuilder {
    pub fn new() -> Self {
        Self::default()
    }

    fn declare(
        &mut self,
        name: &str,
        shape: &[usize],
        dtype: DType,
        kind: TensorKind,
    ) -> R<TensorId> {
        if let Some(&id) = self.by_name.get(name) {
            let t = self.g.tensor(id);
            if t.kind == kind && t.shape == shape && t.dtype == dtype {
                return Ok(id);
            }
            return Err(GraphError::Invalid(format!(
                "{name} declared twice: {:?} {} {:?} vs {:?} {} {:?}",
                t.kind, t.dtype, t.shape, kind, dtype, shape
            )));
        }
        let id = TensorId(self.g.tensors.len() as u32);
        self.g.tensors.push(TensorDecl {
            name: name.to_string(),
            shape: shape.to_vec(),
            dtype,
            kind,
        });
        self.by_name.insert(name.to_string(), id);
        Ok(id)
    }

    /// A per-run input (F32 or I32).
    pub fn input(&mut self, name: &str, dtype: DType, shape: &[usize]) -> R<TensorId> {
        if dtype != DType::F32 && dtype != DType::I32 {
            return Err(GraphError::Invalid(format!(
                "input {name} must be F32 or I32, not {dtype}"
            )));
        }
        self.declare(name, shape, dtype, TensorKind::Input)
    }

    /// A weight bound by name; declaring the same name again returns the same tensor.
    pub fn weight(&mut self, name: &str, dtype: DType, shape: &[usize]) -> R<TensorId> {
        self.declare(name, shape, dtype, TensorKind::Weight)
    }

    /// A persistent f32 state bound by name.
    pub fn state(&mut self, name: &str, shape: &[usize]) -> R<TensorId> {
        self.declare(name, shape, DType::F32, TensorKind::State)
    }

    /// Marks `id` as a named result read back after each run.
    pub fn output(&mut self, name: &str, id: TensorId) -> R<()> {
        if self.g.outputs.iter().any(|(n, _)| n == name) {
            return Err(GraphError::Invalid(format!("output {name} declared twice")));
        }
        self.g.outputs.push((name.to_string(), id));
        Ok(())
    }

    pub fn tensor(&self, id: TensorId) -> &TensorDecl {
        self.g.tensor(id)
    }

    /// Appends a node; returns its outputs.
    pub fn push(&mut self, op: Op, inputs: &[TensorId]) -> R<Vec<TensorId>> {
        for id in inputs {
            if id.index() >= self.g.tensors.len() {
                return Err(GraphError::Invalid(format!(
                    "{} refers to unknown tensor {}",
                    op.name(),
                    id.0
                )));
            }
        }
        let decls: Vec<&TensorDecl> = inputs.iter().map(|id| self.g.tensor(*id)).collect();
        let outs = shape::infer(&op, &decls)?;
        let node = self.g.nodes.len();
        let mut ids = Vec::with_capacity(outs.len());
        for (slot, (shape, dtype)) in outs.into_iter().enumerate() {
            let id = TensorId(self.g.tensors.len() as u32);
            self.g.tensors.push(TensorDecl {
                name: format!("{}#{node}.{slot}", op.name()),
                shape,
                dtype,
                kind: TensorKind::Node { node, slot },
            });
            ids.push(id);
        }
        self.g.nodes.push(Node {
            op,
            inputs: inputs.to_vec(),
            outputs: ids.clone(),
        });
        Ok(ids)
    }

    fn one(&mut self, op: Op, inputs: &[TensorId]) -> R<TensorId> {
        Ok(self.push(op, inputs)?[0])
    }

    pub fn embed(&mut self, table: TensorId, ids: TensorId) -> R<TensorId> {
        self.one(Op::Embed, &[table, ids])
    }
    pub fn matmul(&mut self, x: TensorId, w: TensorId) -> R<TensorId> {
        self.one(Op::MatMul, &[x, w])
    }
    pub fn add(&mut self, a: TensorId, b: TensorId) -> R<TensorId> {
        self.one(Op::Add, &[a, b])
    }
    pub fn rms_norm(&mut self, x: TensorId, w: TensorId, eps: f32) -> R<TensorId> {
        self.one(Op::RmsNorm { eps }, &[x, w])
    }
    /// Returns (`x + r`, `rmsnorm(x + r) · w`).
    pub fn add_rms_norm(
        &mut self,
        x: TensorId,
        r: TensorId,
        w: TensorId,
        eps: f32,
    ) -> R<(TensorId, TensorId)> {
        let o = self.push(Op::AddRmsNorm { eps }, &[x, r, w])?;
        Ok((o[0], o[1]))
    }
    pub fn gated_rms_norm(
        &mut self,
        x: TensorId,
        z: TensorId,
        w: TensorId,
        eps: f32,
    ) -> R<TensorId> {
        self.one(Op::GatedRmsNorm { eps }, &[x, z, w])
    }
    pub fn l2_norm(&mut self, x: TensorId, eps: f32, scale: f32) -> R<TensorId> {
        self.one(Op::L2Norm { eps, scale }, &[x])
    }
    pub fn conv_step(&mut self, x: TensorId, w: TensorId, state: TensorId) -> R<TensorId> {
        self.one(Op::ConvStep, &[x, w, state])
    }
    #[allow(clippy::too_many_arguments)]
    pub fn gated_delta_net(
        &mut self,
        p: GdnParams,
        qkv: TensorId,
        b: TensorId,
        a: TensorId,
        ssm_a: TensorId,
        dt_bias: TensorId,
        state: TensorId,
    ) -> R<TensorId> {
        self.one(Op::GatedDeltaNet(p), &[qkv, b, a, ssm_a, dt_bias, state])
    }
    /// See [`Op::ConvTree`].
    pub fn conv_tree(
        &mut self,
        x: TensorId,
        w: TensorId,
        parent: TensorId,
        state: TensorId,
        tokens: TensorId,
    ) -> R<TensorId> {
        self.one(Op::ConvTree, &[x, w, parent, state, tokens])
    }
    /// See [`Op::GatedDeltaNetTree`]; `tree` is `(parent, state, tokens)`.
    #[allow(clippy::too_many_arguments)]
    pub fn gated_delta_net_tree(
        &mut self,
        p: GdnParams,
        qkv: TensorId,
        b: TensorId,
        a: TensorId,
        ssm_a: TensorId,
        dt_bias: TensorId,
        tree: (TensorId, TensorId, TensorId),
    ) -> R<TensorId> {
        let (parent, state, tokens) = tree;
        self.one(
            Op::GatedDeltaNetTree(p),
            &[qkv, b, a, ssm_a, dt_bias, parent, state, tokens],
        )
    }
    /// See [`Op::GatedDeltaNetLog`]; `logged` is `(state, log)`.
    #[allow(clippy::too_many_arguments)]
    pub fn gated_delta_net_log(
        &mut self,
        p: GdnParams,
        qkv: TensorId,
        b: TensorId,
        a: TensorId,
        ssm_a: TensorId,
        dt_bias: TensorId,
        logged: (TensorId, TensorId),
    ) -> R<TensorId> {
        let (state, log) = logged;
        self.one(
            Op::GatedDeltaNetLog(p),
            &[qkv, b, a, ssm_a, dt_bias, state, log],
        )
    }
    /// See [`Op::GatedDeltaNetReplay`].
    pub fn gated_delta_net_replay(
        &mut self,
        p: GdnParams,
        rows: usize,
        ssm_a: TensorId,
        dt_bias: TensorId,
        state: TensorId,
        log: TensorId,
    ) -> R<TensorId> {
        self.one(
            Op::GatedDeltaNetReplay { p, rows },
            &[ssm_a, dt_bias, state, log],
        )
    }
    /// See [`Op::AttentionTree`].
    #[allow(clippy::too_many_arguments)]
    pub fn attention_tree(
        &mut self,
        p: AttnParams,
        q: TensorId,
        k: TensorId,
        v: TensorId,
        rows: TensorId,
        mask: TensorId,
        k_cache: TensorId,
        v_cache: TensorId,
    ) -> R<TensorId> {
        self.one(
            Op::AttentionTree(p),
            &[q, k, v, rows, mask, k_cache, v_cache],
        )
    }
    pub fn slice_last(&mut self, x: TensorId, offset: usize, len: usize) -> R<TensorId> {
        self.one(Op::SliceLast { offset, len }, &[x])
    }
    pub fn rows(&mut self, x: TensorId, start: usize, len: usize) -> R<TensorId> {
        self.one(Op::Rows { start, len }, &[x])
    }
    pub fn reshape(&mut self, x: TensorId, shape: &[usize]) -> R<TensorId> {
        self.one(
            Op::Reshape {
                shape: shape.to_vec(),
            },
            &[x],
        )
    }
    pub fn rope(&mut self, x: TensorId, pos: TensorId, rot: usize, theta: f32) -> R<TensorId> {
        self.rope_with(x, pos, RopeParams::plain(rot, theta))
    }
    /// RoPE with explicit parameters (YaRN scaling).
    pub fn rope_with(&mut self, x: TensorId, pos: TensorId, p: RopeParams) -> R<TensorId> {
        self.one(Op::Rope(p), &[x, pos])
    }
    #[allow(clippy::too_many_arguments)]
    pub fn attention(
        &mut self,
        p: AttnParams,
        q: TensorId,
        k: TensorId,
        v: TensorId,
        pos: TensorId,
        k_cache: TensorId,
        v_cache: TensorId,
    ) -> R<TensorId> {
        self.one(Op::Attention(p), &[q, k, v, pos, k_cache, v_cache])
    }
    /// Non-causal attention (see [`Op::AttentionNonCausal`]); `window` 0 means unlimited.
    #[allow(clippy::too_many_arguments)]
    pub fn attention_non_causal(
        &mut self,
        p: AttnParams,
        window: usize,
        q: TensorId,
        k: TensorId,
        v: TensorId,
        pos: TensorId,
        k_cache: TensorId,
        v_cache: TensorId,
    ) -> R<TensorId> {
        self.one(
            Op::AttentionNonCausal { attn: p, window },
            &[q, k, v, pos, k_cache, v_cache],
        )
    }
    pub fn sigmoid_mul(&mut self, x: TensorId, g: TensorId) -> R<TensorId> {
        self.one(Op::SigmoidMul, &[x, g])
    }
    pub fn swiglu(&mut self, gate: TensorId, up: TensorId) -> R<TensorId> {
        self.one(Op::SwiGlu, &[gate, up])
    }
    pub fn argmax(&mut self, x: TensorId) -> R<TensorId> {
        self.one(Op::ArgMax, &[x])
    }
    /// Returns (values, indices).
    pub fn top_k(&mut self, x: TensorId, k: usize) -> R<(TensorId, TensorId)> {
        let o = self.push(Op::TopK { k }, &[x])?;
        Ok((o[0], o[1]))
    }

    /// `m + ln Σ exp(x − m)` of each row (see [`Op::LogSumExp`]).
    pub fn log_sum_exp(&mut self, x: TensorId) -> R<TensorId> {
        self.one(Op::LogSumExp, &[x])
    }

    /// The rows of `xs` one after another (see [`Op::Concat`]).
    pub fn concat(&mut self, xs: &[TensorId]) -> R<TensorId> {
        self.one(Op::Concat, xs)
    }
    /// DFlash2 dynamic conv (see [`Op::DynConv`]).
    pub fn dyn_conv(
        &mut self,
        x: TensorId,
        base: TensorId,
        dyn_k: TensorId,
        side: usize,
        block: usize,
        group: usize,
    ) -> R<TensorId> {
        self.one(Op::DynConv { side, block, group }, &[x, base, dyn_k])
    }
    /// DFlash2 selector walk (see [`Op::SelectorWalk`]); returns (tokens, scores).
    #[allow(clippy::too_many_arguments)]
    pub fn selector_walk(
        &mut self,
        block: usize,
        unary: TensorId,
        cand: TensorId,
        hp: TensorId,
        succ: TensorId,
        pred: TensorId,
        seed: TensorId,
    ) -> R<(TensorId, TensorId)> {
        let o = self.push(
            Op::SelectorWalk { block },
            &[unary, cand, hp, succ, pred, seed],
        )?;
        Ok((o[0], o[1]))
    }

    /// Marks the graph's rows as compared with 1-row decode (see [`Graph::rows_match_decode`]).
    pub fn set_rows_match_decode(&mut self, on: bool) {
        self.g.rows_match_decode = on;
    }

    pub fn build(self) -> Graph {
        self.g
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_and_checks_shapes() {
        let mut b = GraphBuilder::new();
        let x = b.input("x", DType::F32, &[3, 64]).unwrap();
        let w = b.weight("w", DType::Q8_0, &[96, 64]).unwrap();
        let y = b.matmul(x, w).unwrap();
        assert_eq!(b.tensor(y).shape, vec![3, 96]);
        let bad = b.weight("w2", DType::F32, &[96, 65]).unwrap();
        let err = b.matmul(x, bad).unwrap_err();
        assert!(
            matches!(err, GraphError::Shape { op: "matmul", .. }),
            "{err}"
        );
        assert!(
            b.weight("w", DType::F32, &[96, 64]).is_err(),
            "redeclared with another type"
        );
        b.output("y", y).unwrap();
        let g = b.build();
        g.validate().unwrap();
        assert_eq!(g.weights().len(), 2);
    }

    #[test]
    fn reshape_is_a_view() {
        let mut b = GraphBuilder::new();
        let x = b.input("x", DType::F32, &[2, 12]).unwrap();
        let r = b.reshape(x, &[2, 3, 4]).unwrap();
        let s = b.slice_last(r, 1, 2).unwrap();
        assert_eq!(b.tensor(s).shape, vec![2, 3, 2]);
        assert!(b.reshape(x, &[5, 5]).is_err());
        let g = b.build();
        assert_eq!(g.storage_root(r), x);
    }
}
