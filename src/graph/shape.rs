//! Shape and dtype inference for every op: the single place where an op's contract is checked.

use super::op::{GdnParams, Op};
use super::{GraphError, TensorDecl, TensorKind};
use crate::tensor::DType;

type Out = Vec<(Vec<usize>, DType)>;

struct Check<'a> {
    op: &'static str,
    ins: &'a [&'a TensorDecl],
}

impl<'a> Check<'a> {
    fn err<T>(&self, msg: impl Into<String>) -> Result<T, GraphError> {
        Err(GraphError::Shape {
            op: self.op,
            msg: msg.into(),
        })
    }

    fn arity(&self, n: usize) -> Result<(), GraphError> {
        if self.ins.len() != n {
            return self.err(format!("takes {n} inputs, got {}", self.ins.len()));
        }
        Ok(())
    }

    fn f32(&self, i: usize) -> Result<&'a TensorDecl, GraphError> {
        let t = self.ins[i];
        if t.dtype != DType::F32 {
            return self.err(format!(
                "input {i} ({}) must be F32, is {}",
                t.name, t.dtype
            ));
        }
        Ok(t)
    }

    fn i32(&self, i: usize) -> Result<&'a TensorDecl, GraphError> {
        let t = self.ins[i];
        if t.dtype != DType::I32 {
            return self.err(format!(
                "input {i} ({}) must be I32, is {}",
                t.name, t.dtype
            ));
        }
        Ok(t)
    }

    /// A weight (any dequantizable type) or an F32 tensor.
    fn weight(&self, i: usize) -> Result<&'a TensorDecl, GraphError> {
        let t = self.ins[i];
        if t.kind == TensorKind::Weight {
            if !t.dtype.is_dequantizable() {
                return self.err(format!(
                    "weight {} has unsupported type {}",
                    t.name, t.dtype
                ));
            }
            Ok(t)
        } else {
            self.f32(i)
        }
    }

    fn state(&self, i: usize) -> Result<&'a TensorDecl, GraphError> {
        let t = self.ins[i];
        if t.kind != TensorKind::State {
            return self.err(format!("input {i} ({}) must be a state tensor", t.name));
        }
        Ok(t)
    }

    fn shape_is(&self, t: &TensorDecl, want: &[usize]) -> Result<(), GraphError> {
        if t.shape != want {
            return self.err(format!(
                "{} has shape {:?}, expected {:?}",
                t.name, t.shape, want
            ));
        }
        Ok(())
    }

    fn same(&self, a: &TensorDecl, b: &TensorDecl) -> Result<(), GraphError> {
        if a.shape != b.shape {
            return self.err(format!(
                "{} {:?} and {} {:?} must have the same shape",
                a.name, a.shape, b.name, b.shape
            ));
        }
        Ok(())
    }

    fn rank(&self, t: &TensorDecl, r: usize) -> Result<(), GraphError> {
        if t.shape.len() != r {
            return self.err(format!(
                "{} must have rank {r}, has shape {:?}",
                t.name, t.shape
            ));
        }
        Ok(())
    }

    /// The tree inputs of ConvTree / GatedDeltaNetTree: `parent i32 [t]` at `parent`, and the
    /// per-row state buffer `[R, row..]` with R ≥ t at `tokens`.
    fn tree_inputs(
        &self,
        t: usize,
        parent: usize,
        tokens: usize,
        row: &[usize],
    ) -> Result<(), GraphError> {
        self.shape_is(self.i32(parent)?, &[t])?;
        let tk = self.state(tokens)?;
        if tk.shape.len() != row.len() + 1 || tk.shape[1..] != *row || tk.shape[0] < t {
            return self.err(format!(
                "{} has shape {:?}, expected [R ≥ {t}, {row:?}..]",
                tk.name, tk.shape
            ));
        }
        Ok(())
    }

    /// The log of a GatedDeltaNetLog / GatedDeltaNetReplay at `i`: a state
    /// `[R ≥ t, conv_dim + 2·nv]`.
    fn log_input(&self, i: usize, t: usize, p: &GdnParams) -> Result<(), GraphError> {
        let log = self.state(i)?;
        if log.shape.len() != 2 || log.shape[1] != p.log_width() || log.shape[0] < t {
            return self.err(format!(
                "{} has shape {:?}, expected [R ≥ {t}, {}]",
                log.name,
                log.shape,
                p.log_width()
            ));
        }
        Ok(())
    }

    fn nonempty_last(&self, t: &TensorDecl) -> Result<usize, GraphError> {
        match t.shape.last() {
            Some(&d) if d > 0 => Ok(d),
            _ => self.err(format!(
                "{} needs a non-empty last dimension, has {:?}",
                t.name, t.shape
            )),
        }
    }
}

/// The head counts of a gated-delta-net op: `nv` a positive multiple of `nk`, non-empty heads.
fn gdn_geometry(c: &Check<'_>, p: &GdnParams) -> Result<(), GraphError> {
    if p.nk == 0 || !p.nv.is_multiple_of(p.nk) || p.dk == 0 || p.dv == 0 {
        return c.err(format!(
            "nv {} must be a positive multiple of nk {}",
            p.nv, p.nk
        ));
    }
    Ok(())
}

fn f32_out(shape: Vec<usize>) -> Out {
    vec![(shape, DType::F32)]
}

/// Output shapes and types of `op` applied to `ins`, or the reason it does not apply.
pub fn infer(op: &Op, ins: &[&TensorDecl]) -> Result<Out, GraphError> {
    let c = Check { op: op.name(), ins };
    match op {
        Op::Embed => {
            c.arity(2)?;
            let table = c.weight(0)?;
            let ids = c.i32(1)?;
            c.rank(table, 2)?;
            c.rank(ids, 1)?;
            Ok(f32_out(vec![ids.shape[0], table.shape[1]]))
        }
        Op::MatMul => {
            c.arity(2)?;
            let x = c.f32(0)?;
            let w = c.weight(1)?;
            c.rank(x, 2)?;
            c.rank(w, 2)?;
            if x.shape[1] != w.shape[1] {
                return c.err(format!(
                    "x {:?} and w {} {:?} disagree on the inner dimension",
                    x.shape, w.name, w.shape
                ));
            }
            Ok(f32_out(vec![x.shape[0], w.shape[0]]))
        }
        Op::Add | Op::SigmoidMul | Op::SwiGlu => {
            c.arity(2)?;
            let (a, b) = (c.f32(0)?, c.f32(1)?);
            c.same(a, b)?;
            Ok(f32_out(a.shape.clone()))
        }
        Op::RmsNorm { .. } => {
            c.arity(2)?;
            let x = c.f32(0)?;
            let d = c.nonempty_last(x)?;
            c.shape_is(c.weight(1)?, &[d])?;
            Ok(f32_out(x.shape.clone()))
        }
        Op::AddRmsNorm { .. } => {
            c.arity(3)?;
            let (x, r) = (c.f32(0)?, c.f32(1)?);
            c.same(x, r)?;
            let d = c.nonempty_last(x)?;
            c.shape_is(c.weight(2)?, &[d])?;
            Ok(vec![
                (x.shape.clone(), DType::F32),
                (x.shape.clone(), DType::F32),
            ])
        }
        Op::GatedRmsNorm { .. } => {
            c.arity(3)?;
            let (x, z) = (c.f32(0)?, c.f32(1)?);
            if x.numel() != z.numel() {
                return c.err(format!(
                    "x {:?} and z {:?} differ in size",
                    x.shape, z.shape
                ));
            }
            let d = c.nonempty_last(x)?;
            c.shape_is(c.weight(2)?, &[d])?;
            Ok(f32_out(x.shape.clone()))
        }
        Op::L2Norm { .. } => {
            c.arity(1)?;
            let x = c.f32(0)?;
            c.nonempty_last(x)?;
            Ok(f32_out(x.shape.clone()))
        }
        Op::ConvStep | Op::ConvTree => {
            let tree = *op == Op::ConvTree;
            c.arity(if tree { 5 } else { 3 })?;
            let x = c.f32(0)?;
            let w = c.weight(1)?;
            let st = c.state(if tree { 3 } else { 2 })?;
            c.rank(x, 2)?;
            c.rank(w, 2)?;
            let ch = x.shape[1];
            if w.shape[0] != ch || w.shape[1] == 0 {
                return c.err(format!("w {:?} must be [{ch}, K]", w.shape));
            }
            c.shape_is(st, &[w.shape[1] - 1, ch])?;
            if tree {
                c.tree_inputs(x.shape[0], 2, 4, &[w.shape[1] - 1, ch])?;
            }
            Ok(f32_out(x.shape.clone()))
        }
        Op::GatedDeltaNet(p) | Op::GatedDeltaNetTree(p) | Op::GatedDeltaNetLog(p) => {
            let tree = matches!(op, Op::GatedDeltaNetTree(_));
            let log = matches!(op, Op::GatedDeltaNetLog(_));
            c.arity(if tree {
                8
            } else if log {
                7
            } else {
                6
            })?;
            gdn_geometry(&c, p)?;
            let qkv = c.f32(0)?;
            c.rank(qkv, 2)?;
            let t = qkv.shape[0];
            c.shape_is(qkv, &[t, p.conv_dim()])?;
            c.shape_is(c.f32(1)?, &[t, p.nv])?;
            c.shape_is(c.f32(2)?, &[t, p.nv])?;
            c.shape_is(c.weight(3)?, &[p.nv])?;
            c.shape_is(c.weight(4)?, &[p.nv])?;
            let st = if tree { 6 } else { 5 };
            c.shape_is(c.state(st)?, &[p.nv, p.dk, p.dv])?;
            if tree {
                c.tree_inputs(t, 5, 7, &[p.nv, p.dk, p.dv])?;
            }
            if log {
                c.log_input(6, t, p)?;
            }
            Ok(f32_out(vec![t, p.nv, p.dv]))
        }
        Op::GatedDeltaNetReplay { p, rows } => {
            c.arity(4)?;
            gdn_geometry(&c, p)?;
            if *rows == 0 {
                return c.err("a replay needs at least one row");
            }
            c.shape_is(c.weight(0)?, &[p.nv])?;
            c.shape_is(c.weight(1)?, &[p.nv])?;
            c.shape_is(c.state(2)?, &[p.nv, p.dk, p.dv])?;
            c.log_input(3, *rows, p)?;
            Ok(f32_out(vec![*rows, p.nv, p.dv]))
        }
        Op::SliceLast { offset, len } => {
            c.arity(1)?;
            let x = c.f32(0)?;
            let w = c.nonempty_last(x)?;
            if *len == 0 || offset + len > w {
                return c.err(format!(
                    "slice {offset}..{} of a last dimension of {w}",
                    offset + len
                ));
            }
            let mut s = x.shape.clone();
            *s.last_mut().expect("rank checked") = *len;
            Ok(f32_out(s))
        }
        Op::Rows { start, len } => {
            c.arity(1)?;
            let x = c.f32(0)?;
            c.rank(x, 2)?;
            if *len == 0 || start + len > x.shape[0] {
                return c.err(format!("rows {start}..{} of {}", start + len, x.shape[0]));
            }
            Ok(f32_out(vec![*len, x.shape[1]]))
        }
        Op::Reshape { shape } => {
            c.arity(1)?;
            let x = ins[0];
            if x.kind == TensorKind::Weight || x.kind == TensorKind::State {
                return c.err("only inputs and intermediates can be reshaped");
            }
            if shape.iter().product::<usize>() != x.numel() {
                return c.err(format!("cannot view {:?} as {:?}", x.shape, shape));
            }
            Ok(vec![(shape.clone(), x.dtype)])
        }
        Op::Rope(rp) => {
            let rot = &rp.rot;
            c.arity(2)?;
            let x = c.f32(0)?;
            let pos = c.i32(1)?;
            c.rank(x, 3)?;
            c.shape_is(pos, &[x.shape[0]])?;
            if *rot % 2 != 0 || *rot > x.shape[2] {
                return c.err(format!(
                    "rot {rot} must be even and at most the head dim {}",
                    x.shape[2]
                ));
            }
            if let Some(y) = &rp.yarn
                && !(y.factor > 0.0
                    && y.original_context > 0
                    && y.beta_fast > 0.0
                    && y.beta_slow > 0.0)
            {
                return c.err(format!(
                    "YaRN needs a positive factor, original context and betas, got {y:?}"
                ));
            }
            Ok(f32_out(x.shape.clone()))
        }
        Op::Attention(p) | Op::AttentionNonCausal { attn: p, .. } | Op::AttentionTree(p) => {
            // The tree form has its mask as input 4; the caches follow it.
            let tree = matches!(op, Op::AttentionTree(_));
            let cache = if tree { 5 } else { 4 };
            c.arity(cache + 2)?;
            let (q, k, v) = (c.f32(0)?, c.f32(1)?, c.f32(2)?);
            let pos = c.i32(3)?;
            let (kc, vc) = (c.state(cache)?, c.state(cache + 1)?);
            if tree {
                let t = q.shape.first().copied().unwrap_or(0);
                c.shape_is(c.i32(4)?, &[t, t])?;
            }
            if p.n_kv_heads == 0 || p.n_heads % p.n_kv_heads != 0 {
                return c.err(format!(
                    "{} q heads over {} kv heads",
                    p.n_heads, p.n_kv_heads
                ));
            }
            c.rank(q, 3)?;
            let t = q.shape[0];
            c.shape_is(q, &[t, p.n_heads, p.head_dim])?;
            c.shape_is(k, &[t, p.n_kv_heads, p.head_dim])?;
            c.shape_is(v, &[t, p.n_kv_heads, p.head_dim])?;
            c.shape_is(pos, &[t])?;
            c.rank(kc, 3)?;
            c.shape_is(kc, &[kc.shape[0], p.n_kv_heads, p.head_dim])?;
            c.same(kc, vc)?;
            Ok(f32_out(q.shape.clone()))
        }
        Op::ArgMax => {
            c.arity(1)?;
            let x = c.f32(0)?;
            c.rank(x, 2)?;
            c.nonempty_last(x)?;
            Ok(vec![(vec![x.shape[0]], DType::I32)])
        }
        Op::Concat => {
            if ins.is_empty() {
                return c.err("takes at least one input");
            }
            let first = c.f32(0)?;
            c.rank(first, 2)?;
            let mut rows = 0;
            for i in 0..ins.len() {
                let x = c.f32(i)?;
                c.rank(x, 2)?;
                if x.shape[1] != first.shape[1] {
                    return c.err(format!(
                        "{} {:?} and {} {:?} differ in width",
                        first.name, first.shape, x.name, x.shape
                    ));
                }
                rows += x.shape[0];
            }
            Ok(f32_out(vec![rows, first.shape[1]]))
        }
        Op::DynConv { side, block, group } => {
            c.arity(3)?;
            let x = c.f32(0)?;
            c.rank(x, 2)?;
            let base = ins[1];
            if base.kind != TensorKind::Weight || base.dtype != DType::F32 {
                return c.err(format!("base {} must be an F32 weight", base.name));
            }
            c.rank(base, 3)?;
            let (t, ch) = (x.shape[0], x.shape[1]);
            let (s, k) = (base.shape[0], base.shape[1]);
            if *group == 0 || !ch.is_multiple_of(*group) {
                return c.err(format!("{ch} channels are not whole groups of {group}"));
            }
            if *side >= s || k == 0 || base.shape[2] != ch {
                return c.err(format!(
                    "base {:?} must be [sides > {side}, taps, {ch}]",
                    base.shape
                ));
            }
            if *block == 0 || !t.is_multiple_of(*block) {
                return c.err(format!("{t} rows are not whole blocks of {block}"));
            }
            c.shape_is(c.f32(2)?, &[t, s * k * (ch / group)])?;
            Ok(f32_out(x.shape.clone()))
        }
        Op::SelectorWalk { block } => {
            c.arity(6)?;
            let unary = c.f32(0)?;
            c.rank(unary, 2)?;
            let (m, k) = (unary.shape[0], unary.shape[1]);
            if *block == 0 || k == 0 || !m.is_multiple_of(*block) {
                return c.err(format!(
                    "unary {:?} is not whole blocks of {block} rows of candidates",
                    unary.shape
                ));
            }
            c.shape_is(c.i32(1)?, &[m, k])?;
            let hp = c.f32(2)?;
            c.rank(hp, 2)?;
            let r = hp.shape[1];
            c.shape_is(hp, &[m, r])?;
            c.shape_is(c.f32(3)?, &[m * k, r])?;
            c.shape_is(c.f32(4)?, &[m * k, r])?;
            c.shape_is(c.f32(5)?, &[m / block, r])?;
            Ok(vec![(vec![m], DType::I32), (vec![m, k], DType::F32)])
        }
        Op::LogSumExp => {
            c.arity(1)?;
            let x = c.f32(0)?;
            c.rank(x, 2)?;
            Ok(vec![(vec![x.shape[0]], DType::F32)])
        }
        Op::TopK { k } => {
            c.arity(1)?;
            let x = c.f32(0)?;
            c.rank(x, 2)?;
            if *k == 0 || *k > x.shape[1] {
                return c.err(format!("k = {k} with {} candidates", x.shape[1]));
            }
            Ok(vec![
                (vec![x.shape[0], *k], DType::F32),
                (vec![x.shape[0], *k], DType::I32),
            ])
        }
    }
}
