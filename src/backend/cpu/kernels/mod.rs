//! CPU kernels, one per op: the numerical reference every GPU backend is checked against.
//!
//! Every kernel works in f32, with reductions in a fixed order (see [`math::dot`]) and the same
//! numerically careful forms PyTorch uses (softmax with max subtraction, thresholded softplus),
//! so that results match HF transformers to about 1e-6. Speed is secondary: rayon is used only
//! where rows are independent (matmul output rows, attention heads, delta-net heads).
//!
//! [`run_node`] unpacks a node's arguments, checks the few things shape inference cannot know
//! (token ids and positions are data), and calls the kernel.

mod attention;
mod conv;
mod dflash2;
mod elementwise;
mod gdn;
mod math;
mod matmul;
mod norm;
mod rope;
mod select;
mod weight;

use super::NAME;
use crate::backend::{BackendError, HostTensor};
use crate::graph::{Op, TensorDecl};
use weight::Weight;

/// A node input as the kernels see it. State inputs are passed separately, mutable,
/// in the order they appear among the inputs; their position here holds `Arg::State`.
pub enum Arg<'a> {
    F32(&'a [f32]),
    I32(&'a [i32]),
    Weight(&'a HostTensor),
    State,
}

/// An internal inconsistency (an argument of the wrong kind or size). Shape inference rules these
/// out, so reaching one means a bug in the caller; it is reported, never a panic.
fn internal(op: &Op, msg: impl Into<String>) -> BackendError {
    BackendError::Device {
        backend: NAME.into(),
        msg: format!("{}: {}", op.name(), msg.into()),
    }
}

/// A data-dependent input error (a token id or position out of range).
fn bad_input(decl: &TensorDecl, msg: String) -> BackendError {
    BackendError::BadInput {
        backend: NAME.into(),
        name: decl.name.clone(),
        msg,
    }
}

/// Typed, checked access to one node's inputs.
struct Inputs<'n, 'a> {
    op: &'n Op,
    args: &'n [Arg<'a>],
    decls: &'n [&'n TensorDecl],
}

impl<'n, 'a> Inputs<'n, 'a> {
    fn decl(&self, i: usize) -> Result<&'n TensorDecl, BackendError> {
        self.decls
            .get(i)
            .copied()
            .ok_or_else(|| internal(self.op, format!("input {i} is missing")))
    }

    /// An F32 input of exactly the declared element count.
    fn f32(&self, i: usize) -> Result<&'a [f32], BackendError> {
        let n = self.decl(i)?.numel();
        match self.args.get(i) {
            Some(Arg::F32(v)) if v.len() == n => Ok(v),
            _ => Err(internal(
                self.op,
                format!("input {i} must be {n} f32 values"),
            )),
        }
    }

    fn i32(&self, i: usize) -> Result<&'a [i32], BackendError> {
        let n = self.decl(i)?.numel();
        match self.args.get(i) {
            Some(Arg::I32(v)) if v.len() == n => Ok(v),
            _ => Err(internal(
                self.op,
                format!("input {i} must be {n} i32 values"),
            )),
        }
    }

    /// A weight position: shape checks accept an uploaded weight or a plain F32 tensor there.
    fn weight(&self, i: usize) -> Result<Weight<'a>, BackendError> {
        let decl = self.decl(i)?;
        match self.args.get(i) {
            Some(Arg::Weight(t)) => Weight::host(t, &decl.shape),
            Some(Arg::F32(v)) if v.len() == decl.numel() => Ok(Weight::F32(v)),
            _ => Err(internal(self.op, format!("input {i} must be a weight"))),
        }
    }

    fn shape(&self, i: usize) -> Result<&'n [usize], BackendError> {
        Ok(&self.decl(i)?.shape)
    }

    /// `(rows, last dimension)` of input `i`.
    fn rows_cols(&self, i: usize) -> Result<(usize, usize), BackendError> {
        let d = self.decl(i)?;
        Ok((d.rows(), d.last_dim()))
    }
}

fn one_out<'o>(op: &Op, outs: &'o mut [&mut [f32]]) -> Result<&'o mut [f32], BackendError> {
    match outs {
        [o] => Ok(o),
        _ => Err(internal(
            op,
            format!("expects 1 output buffer, got {}", outs.len()),
        )),
    }
}

fn two_outs<'o>(
    op: &Op,
    outs: &'o mut [&mut [f32]],
) -> Result<(&'o mut [f32], &'o mut [f32]), BackendError> {
    match outs {
        [a, b] => Ok((a, b)),
        _ => Err(internal(
            op,
            format!("expects 2 output buffers, got {}", outs.len()),
        )),
    }
}

/// The `parent` input of a tree op at `i`, checked: every row's parent comes before it.
fn tree_parents<'a>(ins: &Inputs<'_, 'a>, i: usize) -> Result<&'a [i32], BackendError> {
    let parent = ins.i32(i)?;
    if let Some((t, p)) = parent
        .iter()
        .enumerate()
        .find(|(t, p)| **p >= 0 && **p as usize >= *t)
    {
        return Err(bad_input(
            ins.decl(i)?,
            format!("row {t} has parent {p}: parents must come before their rows"),
        ));
    }
    Ok(parent)
}

/// The (read-only state, per-row buffer) pair of a tree op; the state holds `len` values.
fn tree_states<'s>(
    op: &Op,
    states: &'s mut [&mut [f32]],
    len: usize,
) -> Result<(&'s [f32], &'s mut [f32]), BackendError> {
    match states {
        [s, tokens] if s.len() == len && tokens.len() % len.max(1) == 0 => Ok((s, tokens)),
        _ => Err(internal(
            op,
            format!("expects a state of {len} values and its per-row buffer"),
        )),
    }
}

/// The (recurrent state of `len` values, log) pair of a GatedDeltaNetLog / Replay; the log's
/// rows were checked by the graph.
fn log_states<'s>(
    op: &Op,
    states: &'s mut [&mut [f32]],
    len: usize,
) -> Result<(&'s mut [f32], &'s mut [f32]), BackendError> {
    match states {
        [s, log] if s.len() == len => Ok((s, log)),
        _ => Err(internal(
            op,
            format!("expects a state of {len} values and its log"),
        )),
    }
}

fn one_state<'s>(
    op: &Op,
    states: &'s mut [&mut [f32]],
    len: usize,
) -> Result<&'s mut [f32], BackendError> {
    match states {
        [s] if s.len() == len => Ok(s),
        _ => Err(internal(op, format!("expects one state of {len} values"))),
    }
}

/// Runs one node. `outs[i]` has exactly `out_decls[i].numel()` values (I32 outputs are
/// written through `bytemuck::cast_slice_mut`). Shapes were checked by the graph.
pub fn run_node(
    op: &Op,
    args: &[Arg],
    in_decls: &[&TensorDecl],
    states: &mut [&mut [f32]],
    outs: &mut [&mut [f32]],
    out_decls: &[&TensorDecl],
) -> Result<(), BackendError> {
    if outs.len() != out_decls.len()
        || outs
            .iter()
            .zip(out_decls)
            .any(|(o, d)| o.len() != d.numel())
    {
        return Err(internal(
            op,
            "output buffers disagree with their declarations",
        ));
    }
    let ins = Inputs {
        op,
        args,
        decls: in_decls,
    };
    match op {
        Op::Embed => {
            let (table, ids) = (ins.weight(0)?, ins.i32(1)?);
            let (vocab, dim) = (ins.shape(0)?[0], ins.shape(0)?[1]);
            matmul::embed(&table, vocab, dim, ids, ins.decl(1)?, one_out(op, outs)?)
        }
        Op::MatMul => {
            let (x, w) = (ins.f32(0)?, ins.weight(1)?);
            let (n, k) = ins.rows_cols(0)?;
            let m = ins.shape(1)?[0];
            matmul::matmul(x, &w, n, k, m, one_out(op, outs)?)
        }
        Op::Add => {
            elementwise::add(ins.f32(0)?, ins.f32(1)?, one_out(op, outs)?);
            Ok(())
        }
        Op::SigmoidMul => {
            elementwise::sigmoid_mul(ins.f32(0)?, ins.f32(1)?, one_out(op, outs)?);
            Ok(())
        }
        Op::SwiGlu => {
            elementwise::swiglu(ins.f32(0)?, ins.f32(1)?, one_out(op, outs)?);
            Ok(())
        }
        Op::RmsNorm { eps } => {
            let d = ins.rows_cols(0)?.1;
            let w = ins.weight(1)?.to_vec(d)?;
            norm::rms_norm(ins.f32(0)?, &w, *eps, one_out(op, outs)?);
            Ok(())
        }
        Op::AddRmsNorm { eps } => {
            let d = ins.rows_cols(0)?.1;
            let w = ins.weight(2)?.to_vec(d)?;
            let (sum, normed) = two_outs(op, outs)?;
            norm::add_rms_norm(ins.f32(0)?, ins.f32(1)?, &w, *eps, sum, normed);
            Ok(())
        }
        Op::GatedRmsNorm { eps } => {
            let d = ins.rows_cols(0)?.1;
            let w = ins.weight(2)?.to_vec(d)?;
            norm::gated_rms_norm(ins.f32(0)?, ins.f32(1)?, &w, *eps, one_out(op, outs)?);
            Ok(())
        }
        Op::L2Norm { eps, scale } => {
            let d = ins.rows_cols(0)?.1;
            norm::l2_norm(ins.f32(0)?, d, *eps, *scale, one_out(op, outs)?);
            Ok(())
        }
        Op::ConvStep => {
            let x = ins.f32(0)?;
            let (channels, width) = (ins.shape(1)?[0], ins.shape(1)?[1]);
            let w = ins.weight(1)?.to_vec(channels * width)?;
            let state = one_state(op, states, (width - 1) * channels)?;
            conv::conv_step(x, &w, channels, width, state, one_out(op, outs)?);
            Ok(())
        }
        Op::ConvTree => {
            let x = ins.f32(0)?;
            let (channels, width) = (ins.shape(1)?[0], ins.shape(1)?[1]);
            let w = ins.weight(1)?.to_vec(channels * width)?;
            let parent = tree_parents(&ins, 2)?;
            let (state, tokens) = tree_states(op, states, (width - 1) * channels)?;
            conv::conv_tree(
                x,
                &w,
                channels,
                width,
                parent,
                state,
                tokens,
                one_out(op, outs)?,
            );
            Ok(())
        }
        Op::GatedDeltaNetTree(p) => {
            let (qkv, b, a) = (ins.f32(0)?, ins.f32(1)?, ins.f32(2)?);
            let ssm_a = ins.weight(3)?.to_vec(p.nv)?;
            let dt_bias = ins.weight(4)?.to_vec(p.nv)?;
            let parent = tree_parents(&ins, 5)?;
            let (state, tokens) = tree_states(op, states, p.nv * p.dk * p.dv)?;
            let gates = gdn::Gates {
                b,
                a,
                ssm_a: &ssm_a,
                dt_bias: &dt_bias,
            };
            let o = one_out(op, outs)?;
            gdn::gated_delta_net_tree(p, qkv, &gates, parent, state, tokens, o);
            Ok(())
        }
        Op::GatedDeltaNetLog(p) => {
            let (qkv, b, a) = (ins.f32(0)?, ins.f32(1)?, ins.f32(2)?);
            let ssm_a = ins.weight(3)?.to_vec(p.nv)?;
            let dt_bias = ins.weight(4)?.to_vec(p.nv)?;
            let (state, log) = log_states(op, states, p.nv * p.dk * p.dv)?;
            let gates = gdn::Gates {
                b,
                a,
                ssm_a: &ssm_a,
                dt_bias: &dt_bias,
            };
            gdn::gated_delta_net_log(p, qkv, &gates, state, log, one_out(op, outs)?);
            Ok(())
        }
        Op::GatedDeltaNetReplay { p, rows } => {
            let ssm_a = ins.weight(0)?.to_vec(p.nv)?;
            let dt_bias = ins.weight(1)?.to_vec(p.nv)?;
            let (state, log) = log_states(op, states, p.nv * p.dk * p.dv)?;
            gdn::gated_delta_net_replay(p, *rows, &ssm_a, &dt_bias, state, log, one_out(op, outs)?);
            Ok(())
        }
        Op::GatedDeltaNet(p) => {
            let (qkv, b, a) = (ins.f32(0)?, ins.f32(1)?, ins.f32(2)?);
            let ssm_a = ins.weight(3)?.to_vec(p.nv)?;
            let dt_bias = ins.weight(4)?.to_vec(p.nv)?;
            let state = one_state(op, states, p.nv * p.dk * p.dv)?;
            let gates = gdn::Gates {
                b,
                a,
                ssm_a: &ssm_a,
                dt_bias: &dt_bias,
            };
            gdn::gated_delta_net(p, qkv, &gates, state, one_out(op, outs)?);
            Ok(())
        }
        Op::SliceLast { offset, len } => {
            let width = ins.rows_cols(0)?.1;
            elementwise::slice_last(ins.f32(0)?, width, *offset, *len, one_out(op, outs)?);
            Ok(())
        }
        Op::Rows { start, .. } => {
            let width = ins.rows_cols(0)?.1;
            elementwise::rows(ins.f32(0)?, width, *start, one_out(op, outs)?);
            Ok(())
        }
        Op::Reshape { .. } => {
            // The interpreter treats a reshape as a view and never calls this; a copy is the
            // correct meaning should another caller run the node.
            one_out(op, outs)?.copy_from_slice(ins.f32(0)?);
            Ok(())
        }
        Op::Rope(params) => {
            let shape = ins.shape(0)?;
            let geom = rope::Geometry {
                heads: shape[1],
                head_dim: shape[2],
                params: *params,
            };
            rope::rope(ins.f32(0)?, ins.i32(1)?, &geom, one_out(op, outs)?);
            Ok(())
        }
        Op::Attention(_) | Op::AttentionNonCausal { .. } | Op::AttentionTree(_) => {
            let (p, mask) = match op {
                Op::AttentionNonCausal { attn, window } => {
                    (attn, attention::Mask::NonCausal { window: *window })
                }
                Op::Attention(p) => (p, attention::Mask::Causal),
                Op::AttentionTree(p) => (p, attention::Mask::Tree { mask: ins.i32(4)? }),
                _ => return Err(internal(op, "not an attention op")),
            };
            let cache = if matches!(op, Op::AttentionTree(_)) {
                5
            } else {
                4
            };
            let new = attention::NewRows {
                q: ins.f32(0)?,
                k: ins.f32(1)?,
                v: ins.f32(2)?,
                pos: ins.i32(3)?,
                pos_decl: ins.decl(3)?,
            };
            let cache_len = ins.decl(cache)?.numel();
            let caches = match states {
                [k, v] if k.len() == cache_len && v.len() == cache_len => {
                    attention::Caches { k, v }
                }
                _ => {
                    return Err(internal(
                        op,
                        format!("expects two caches of {cache_len} values"),
                    ));
                }
            };
            attention::attention(p, mask, &new, caches, one_out(op, outs)?)
        }
        Op::ArgMax => {
            let (_, width) = ins.rows_cols(0)?;
            let out = bytemuck::cast_slice_mut::<f32, i32>(one_out(op, outs)?);
            select::argmax(ins.f32(0)?, width, out);
            Ok(())
        }
        Op::Concat => {
            let xs = (0..in_decls.len())
                .map(|i| ins.f32(i))
                .collect::<Result<Vec<_>, _>>()?;
            dflash2::concat(&xs, one_out(op, outs)?);
            Ok(())
        }
        Op::DynConv { side, block, group } => {
            let base = ins.shape(1)?;
            let geom = dflash2::ConvGeom {
                channels: base[2],
                sides: base[0],
                taps: base[1],
                side: *side,
                block: *block,
                group: *group,
            };
            let b = match args.get(1) {
                Some(Arg::Weight(t)) => t.to_f32().map_err(|e| internal(op, e.to_string()))?,
                Some(Arg::F32(v)) => v.to_vec(),
                _ => return Err(internal(op, "input 1 must be the base kernel")),
            };
            dflash2::dyn_conv(&geom, ins.f32(0)?, &b, ins.f32(2)?, one_out(op, outs)?);
            Ok(())
        }
        Op::SelectorWalk { block } => {
            let (_, k) = ins.rows_cols(0)?;
            let walk = dflash2::Walk {
                block: *block,
                k,
                rank: ins.rows_cols(2)?.1,
                unary: ins.f32(0)?,
                cand: ins.i32(1)?,
                hp: ins.f32(2)?,
                succ: ins.f32(3)?,
                pred: ins.f32(4)?,
                seed: ins.f32(5)?,
            };
            let (tokens, scores) = two_outs(op, outs)?;
            let tokens = bytemuck::cast_slice_mut::<f32, i32>(tokens);
            dflash2::selector_walk(&walk, tokens, scores);
            Ok(())
        }
        Op::LogSumExp => {
            let (_, width) = ins.rows_cols(0)?;
            let out = one_out(op, outs)?;
            for (row, o) in ins.f32(0)?.chunks_exact(width.max(1)).zip(out) {
                *o = crate::util::log_sum_exp(row);
            }
            Ok(())
        }
        Op::TopK { k } => {
            let (_, width) = ins.rows_cols(0)?;
            let (values, indices) = two_outs(op, outs)?;
            let indices = bytemuck::cast_slice_mut::<f32, i32>(indices);
            select::top_k(ins.f32(0)?, width, *k, values, indices);
            Ok(())
        }
    }
}
