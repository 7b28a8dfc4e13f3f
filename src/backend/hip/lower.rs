//! The lowering shared by both drivers: graph nodes to kernel launches, plus the run-time checks
//! the CPU reference also makes (inputs, weights, states, token ids and positions).
//!
//! Every launch's argument list mirrors the C signature of its kernel in `hip/*.hip`; keep the
//! two in step (the op tests on a GPU catch a mismatch).

use super::kernels::{self, weight_kernel};
use super::layout;
use super::{Exec, HipBackend, StateSet, WeightSet};
use crate::backend::{BackendError, HostData};
use crate::graph::{Graph, HeadMap, Node, Op, TensorId, TensorKind};
use crate::tensor::DType;
use std::collections::HashMap;
use std::ffi::c_void;

use super::driver::DevPtr;

/// One kernel argument, widened to 8 bytes of storage (the driver reads the parameter's own size
/// from the front, which is the value on little-endian hosts).
#[derive(Clone, Copy, Debug)]
pub(super) enum Arg {
    P(DevPtr),
    U32(u32),
    F32(f32),
    U64(u64),
}

#[cfg(not(target_endian = "little"))]
compile_error!("kernel arguments are passed in 8-byte little-endian slots");

/// Launches `hip/<source>.hip:name` with a 1-D block of `block` threads.
pub(super) fn launch(
    be: &HipBackend,
    source: &'static str,
    name: &str,
    grid: [u32; 3],
    block: u32,
    args: &[Arg],
) -> Result<(), BackendError> {
    if grid.contains(&0) {
        return Ok(()); // nothing to do (an empty tensor)
    }
    if be.drop.iter().any(|d| name.contains(d.as_str())) {
        return Ok(()); // DELTASPEC_HIP_DROP: a timing diagnostic (see HipBackend::drop)
    }
    let f = be.func(source, name)?;
    be.launches.set(be.launches.get() + 1);
    let mut store: Vec<u64> = args
        .iter()
        .map(|a| match *a {
            Arg::P(p) => p,
            Arg::U32(v) => u64::from(v),
            Arg::F32(v) => u64::from(v.to_bits()),
            Arg::U64(v) => v,
        })
        .collect();
    let mut ptrs: Vec<*mut c_void> = store.iter_mut().map(|v| (v as *mut u64).cast()).collect();
    // SAFETY: every call site passes the arguments of `name`'s C signature in order (pointers
    // as device addresses of buffers sized for the launch's shapes, checked by shape inference
    // and the planner); `store` outlives the call, and the driver copies the values at launch.
    unsafe { be.drv.launch(f, grid, [block, 1, 1], 0, &mut ptrs) }
        .map_err(|e| be.dev_err(format!("{name}: {e}")))
}

/// Threads per block of the rms-norm kernels over rows of `d` values, one row per block:
/// `hip/norm.hip` picks its form from `d` by the same rule (`norm_warp_form`): one warp per
/// row for `d % 4 == 0 && d <= 512`, else a [`NORM_THREADS`] block.
pub(super) fn norm_threads(d: usize) -> u32 {
    if d.is_multiple_of(4) && d <= 512 {
        32
    } else {
        NORM_THREADS
    }
}

/// `NORM_THREADS` of `hip/norm.hip`: the block size of its block and loop forms and of `l2_norm`.
const NORM_THREADS: u32 = 512;

pub(super) fn blocks(n: u64, per: u64) -> u32 {
    n.div_ceil(per).min(u64::from(u32::MAX)) as u32
}

/// Everything a run binds: device addresses of every tensor.
pub(super) struct Env<'a> {
    pub graph: &'a Graph,
    pub ex: &'a Exec,
    pub ws: &'a WeightSet,
    pub ss: &'a StateSet,
    pub bound: &'a HashMap<TensorId, &'a HostData>,
}

impl Env<'_> {
    /// Device address of a tensor's data (views resolve to their source).
    pub fn ptr(&self, id: TensorId) -> DevPtr {
        let root = self.graph.storage_root(id);
        let t = self.graph.tensor(root);
        match t.kind {
            TensorKind::Input => self.ex.inputs[&root].ptr,
            TensorKind::Weight => self.ws.tensors[&t.name].buf.ptr,
            TensorKind::State => self.ss.bufs[&t.name].ptr,
            TensorKind::Node { .. } => {
                let slot = self.ex.plan.slot_of[root.index()]
                    .expect("the planner places every node output");
                self.ex.arena.ptr + self.ex.slot_offset[slot] as DevPtr
            }
        }
    }

    /// Address of a tensor read as plain f32 values (non-f32 weights: their f32 view).
    /// Device address of node `i`'s constant buffer (RoPE frequencies; the arena where it has
    /// none).
    pub fn consts_ptr(&self, i: usize) -> DevPtr {
        self.ex.consts.get(&i).map_or(self.ex.arena.ptr, |b| b.ptr)
    }

    pub fn f32_ptr(&self, id: TensorId) -> DevPtr {
        let t = self.graph.tensor(id);
        if t.kind == TensorKind::Weight && t.dtype != DType::F32 {
            return self.ws.f32_views[&t.name].ptr;
        }
        self.ptr(id)
    }
}

pub(super) fn unsupported(be: &HipBackend, op: &Op, msg: String) -> BackendError {
    BackendError::Unsupported {
        backend: be.label.clone(),
        op: op.name().into(),
        msg,
    }
}

/// Rejects graphs with shapes or types the kernels do not cover.
pub(super) fn check_supported(be: &HipBackend, g: &Graph) -> Result<(), BackendError> {
    for node in &g.nodes {
        let t = |i: usize| g.tensor(node.inputs[i]);
        match &node.op {
            Op::Embed | Op::MatMul => {
                let w = if matches!(node.op, Op::Embed) {
                    t(0)
                } else {
                    t(1)
                };
                let k = w.last_dim();
                if weight_kernel(w.dtype, k).is_none() {
                    return Err(unsupported(
                        be,
                        &node.op,
                        format!("{} weights have no kernel", w.dtype),
                    ));
                }
            }
            Op::RmsNorm { .. }
            | Op::AddRmsNorm { .. }
            | Op::GatedRmsNorm { .. }
            | Op::ConvStep
            | Op::ConvTree
            | Op::GatedDeltaNet(_)
            | Op::GatedDeltaNetTree(_)
            | Op::GatedDeltaNetLog(_)
            | Op::GatedDeltaNetReplay { .. } => {
                for &p in super::f32_weight_positions(&node.op) {
                    let w = t(p);
                    if w.kind == TensorKind::Weight
                        && weight_kernel(w.dtype, w.last_dim()).is_none()
                    {
                        return Err(unsupported(
                            be,
                            &node.op,
                            format!("{} weights have no kernel", w.dtype),
                        ));
                    }
                }
                if let Op::GatedDeltaNet(p)
                | Op::GatedDeltaNetTree(p)
                | Op::GatedDeltaNetReplay { p, .. } = &node.op
                    && p.dk > 512
                {
                    return Err(unsupported(be, &node.op, format!("dk {} > 512", p.dk)));
                }
                // The logging step keeps the state in registers or shared memory.
                if let Op::GatedDeltaNetLog(p) = &node.op
                    && p.dk > 128
                {
                    return Err(unsupported(
                        be,
                        &node.op,
                        format!("dk {} (the logging step takes dk ≤ 128)", p.dk),
                    ));
                }
            }
            Op::Attention(p) | Op::AttentionNonCausal { attn: p, .. } | Op::AttentionTree(p)
                if p.head_dim > 32 * 8 =>
            {
                return Err(unsupported(
                    be,
                    &node.op,
                    format!("head_dim {} > 256", p.head_dim),
                ));
            }
            _ => {}
        }
    }
    Ok(())
}

fn bad_input(be: &HipBackend, name: &str, msg: String) -> BackendError {
    BackendError::BadInput {
        backend: be.label.clone(),
        name: name.into(),
        msg,
    }
}

/// Checks the caller's inputs against the graph's declarations.
pub(super) fn bind_inputs<'a>(
    be: &HipBackend,
    g: &Graph,
    inputs: &'a [(&str, HostData)],
) -> Result<HashMap<TensorId, &'a HostData>, BackendError> {
    let mut bound = HashMap::new();
    for id in g.inputs() {
        let t = g.tensor(id);
        let (_, data) = inputs
            .iter()
            .find(|(n, _)| *n == t.name)
            .ok_or_else(|| bad_input(be, &t.name, "not provided".into()))?;
        if data.dtype() != t.dtype || data.len() != t.numel() {
            return Err(bad_input(
                be,
                &t.name,
                format!(
                    "expected {} × {:?}, got {} × {}",
                    t.dtype,
                    t.shape,
                    data.dtype(),
                    data.len()
                ),
            ));
        }
        bound.insert(id, data);
    }
    Ok(bound)
}

/// Every weight the graph uses must be uploaded with the declared type, shape and byte length.
pub(super) fn check_weights(
    be: &HipBackend,
    g: &Graph,
    w: &HashMap<String, super::DevWeight>,
) -> Result<(), BackendError> {
    // A view of a weight in panels (`layout`) with rows of another length would be read with the
    // wrong strides.
    for node in &g.nodes {
        if let (Op::Reshape { .. }, Some(&i)) = (&node.op, node.inputs.first()) {
            let (t, o) = (g.tensor(i), g.tensor(node.outputs[0]));
            if t.kind == TensorKind::Weight
                && layout::round_bytes(t.dtype).is_some()
                && o.last_dim() != t.last_dim()
            {
                return Err(be.dev_err(format!(
                    "weight {} ({}) is stored in panels of its rows and cannot be viewed with rows of {} values",
                    t.name,
                    t.dtype,
                    o.last_dim()
                )));
            }
        }
    }
    for id in g.weights() {
        let t = g.tensor(id);
        let h = w.get(&t.name).ok_or_else(|| BackendError::MissingWeight {
            backend: be.label.clone(),
            name: t.name.clone(),
        })?;
        if h.dtype != t.dtype || h.shape != t.shape {
            return Err(BackendError::WeightMismatch {
                backend: be.label.clone(),
                name: t.name.clone(),
                got: format!("{} {:?}", h.dtype, h.shape),
                want: format!("{} {:?}", t.dtype, t.shape),
            });
        }
        let row = t.last_dim();
        let rows = t.numel() / row.max(1);
        let want = match layout::round_bytes(t.dtype) {
            Some(_) => layout::panel_bytes(t.dtype, rows, row),
            None => kernels::dev_bytes_for(t.dtype, row).map(|b| b * rows),
        };
        if want != Some(h.buf.bytes) {
            return Err(be.dev_err(format!(
                "weight of {} {:?} holds {} bytes, expected {}",
                t.dtype,
                t.shape,
                h.buf.bytes,
                want.map_or("whole blocks".to_string(), |w| w.to_string())
            )));
        }
    }
    Ok(())
}

pub(super) fn check_states(be: &HipBackend, g: &Graph, s: &StateSet) -> Result<(), BackendError> {
    for id in g.states() {
        let t = g.tensor(id);
        let b = s
            .bufs
            .get(&t.name)
            .ok_or_else(|| BackendError::MissingState {
                backend: be.label.clone(),
                name: t.name.clone(),
            })?;
        if b.bytes != t.numel() * 4 {
            return Err(be.dev_err(format!(
                "state {} holds {} values, the graph expects {:?}",
                t.name,
                b.bytes / 4,
                t.shape
            )));
        }
    }
    Ok(())
}

/// The values of an i32 graph input, if `id` is one (token ids, positions).
pub(super) fn input_i32<'a>(
    g: &Graph,
    bound: &HashMap<TensorId, &'a HostData>,
    id: TensorId,
) -> Option<&'a [i32]> {
    match bound.get(&g.storage_root(id)) {
        Some(HostData::I32(v)) => Some(v),
        _ => None,
    }
}

/// Token ids and positions that come from inputs are checked on the host, with the CPU
/// reference's errors, before anything runs (kernels only guard against out-of-range values).
pub(super) fn check_data(
    be: &HipBackend,
    g: &Graph,
    bound: &HashMap<TensorId, &HostData>,
) -> Result<(), BackendError> {
    for node in &g.nodes {
        match &node.op {
            Op::Embed => {
                let vocab = g.tensor(node.inputs[0]).shape[0];
                if let Some(ids) = input_i32(g, bound, node.inputs[1])
                    && let Some((t, id)) = ids
                        .iter()
                        .enumerate()
                        .find(|(_, id)| usize::try_from(**id).ok().is_none_or(|i| i >= vocab))
                {
                    return Err(bad_input(
                        be,
                        &g.tensor(node.inputs[1]).name,
                        format!("token id {id} at {t} is outside the vocabulary of {vocab}"),
                    ));
                }
            }
            Op::Attention(_) | Op::AttentionNonCausal { .. } | Op::AttentionTree(_) => {
                let tree = matches!(node.op, Op::AttentionTree(_));
                let cap = g.tensor(node.inputs[if tree { 5 } else { 4 }]).shape[0];
                // The tree kernel reads the mask relative to the first row.
                if tree
                    && let Some(pos) = input_i32(g, bound, node.inputs[3])
                    && let Some(t) = (1..pos.len()).find(|&t| pos[t] != pos[0] + t as i32)
                {
                    return Err(bad_input(
                        be,
                        &g.tensor(node.inputs[3]).name,
                        format!("tree rows must be consecutive: row {t} is at {}", pos[t]),
                    ));
                }
                if let Some(pos) = input_i32(g, bound, node.inputs[3])
                    && let Some((t, p)) = pos
                        .iter()
                        .enumerate()
                        .find(|(_, p)| usize::try_from(**p).ok().is_none_or(|p| p >= cap))
                {
                    return Err(bad_input(
                        be,
                        &g.tensor(node.inputs[3]).name,
                        format!("position {p} of token {t} is outside the cache of {cap} rows"),
                    ));
                }
            }
            _ => {}
        }
    }
    Ok(())
}

const ELEM_PER_BLOCK: u64 = 256 * 4;

/// Launches the kernels of one node.
pub(super) fn node(
    be: &HipBackend,
    env: &Env,
    index: usize,
    node: &Node,
) -> Result<(), BackendError> {
    let g = env.graph;
    let inp = |i: usize| g.tensor(node.inputs[i]);
    let p_in = |i: usize| Arg::P(env.ptr(node.inputs[i]));
    let p_f32 = |i: usize| Arg::P(env.f32_ptr(node.inputs[i]));
    let p_out = |i: usize| Arg::P(env.ptr(node.outputs[i]));
    let out = |i: usize| g.tensor(node.outputs[i]);
    let u32_of = |v: usize| u32_arg(be, &node.op, v);
    // An attention node's folded q/k norms and ropes (the fusion plan).
    let prep = env.ex.fusion.qk_prep.get(index).copied().flatten();

    match &node.op {
        Op::Reshape { .. } => Ok(()),
        Op::Embed => {
            let table = inp(0);
            let (vocab, dim) = (table.shape[0], table.shape[1]);
            let t = inp(1).numel();
            let suffix = weight_kernel(table.dtype, dim).expect("checked at compile");
            let (_, _, sub) = kernels::geometry(suffix);
            let row_bytes = kernels::dev_bytes_for(table.dtype, dim).expect("whole blocks") as u64;
            launch(
                be,
                "matmul",
                &format!("embed_{suffix}"),
                [
                    blocks((dim / sub) as u64, 128),
                    u32::try_from(t).unwrap_or(u32::MAX),
                    1,
                ],
                128,
                &[
                    p_in(0),
                    p_in(1),
                    p_out(0),
                    u32_of(dim)?,
                    u32_of(vocab)?,
                    Arg::U64(row_bytes),
                ],
            )
        }
        Op::MatMul => {
            let (x, w) = (inp(0), inp(1));
            let (n, k, m) = (x.shape[0], x.shape[1], w.shape[0]);
            let suffix = weight_kernel(w.dtype, k).expect("checked at compile");
            let row_bytes = kernels::dev_bytes_for(w.dtype, k).expect("whole blocks") as u64;
            let args = [
                p_in(1),
                p_in(0),
                p_out(0),
                u32_of(n)?,
                u32_of(k)?,
                u32_of(m)?,
                Arg::U64(row_bytes),
            ];
            if n <= be.int8_max_n && be.int8_matmul && kernels::QGEMV_TYPES.contains(&suffix) {
                return qgemv(be, env, node, suffix, n, k, m, row_bytes, None);
            }
            if n <= be.gemv_max_n {
                let nt = match n {
                    0 | 1 => 1,
                    2 => 2,
                    3 | 4 => 4,
                    _ => 8,
                };
                launch(
                    be,
                    "matmul",
                    &format!("gemv_{suffix}_{nt}"),
                    [blocks(m as u64, u64::from(kernels::gemv_rows(nt))), 1, 1],
                    kernels::GEMV_THREADS,
                    &args,
                )
            } else {
                launch(
                    be,
                    "matmul",
                    &format!("mm_{suffix}"),
                    [blocks(m as u64, 64), blocks(n as u64, 64), 1],
                    256,
                    &args,
                )
            }
        }
        Op::Add | Op::SigmoidMul | Op::SwiGlu => {
            let name = match node.op {
                Op::Add => "add_f32",
                Op::SigmoidMul => "sigmoid_mul",
                _ => "swiglu",
            };
            let n = out(0).numel() as u64;
            launch(
                be,
                "elementwise",
                name,
                [blocks(n, ELEM_PER_BLOCK), 1, 1],
                256,
                &[p_in(0), p_in(1), p_out(0), Arg::U64(n)],
            )
        }
        Op::RmsNorm { eps } => {
            let x = inp(0);
            let d = x.last_dim();
            launch(
                be,
                "norm",
                "rms_norm",
                [blocks(x.rows() as u64, 1), 1, 1],
                norm_threads(d),
                &[p_in(0), p_f32(1), p_out(0), u32_of(d)?, Arg::F32(*eps)],
            )
        }
        Op::AddRmsNorm { eps } => {
            let x = inp(0);
            let d = x.last_dim();
            launch(
                be,
                "norm",
                "add_rms_norm",
                [blocks(x.rows() as u64, 1), 1, 1],
                norm_threads(d),
                &[
                    p_in(0),
                    p_in(1),
                    p_f32(2),
                    p_out(0),
                    p_out(1),
                    u32_of(d)?,
                    Arg::F32(*eps),
                ],
            )
        }
        Op::GatedRmsNorm { eps } => {
            let x = inp(0);
            let d = x.last_dim();
            launch(
                be,
                "norm",
                "gated_rms_norm",
                [blocks((x.numel() / d) as u64, 1), 1, 1],
                norm_threads(d),
                &[
                    p_in(0),
                    p_in(1),
                    p_f32(2),
                    p_out(0),
                    u32_of(d)?,
                    Arg::F32(*eps),
                ],
            )
        }
        Op::L2Norm { eps, scale } => {
            let x = inp(0);
            launch(
                be,
                "norm",
                "l2_norm",
                [blocks(x.rows() as u64, 1), 1, 1],
                NORM_THREADS,
                &[
                    p_in(0),
                    p_out(0),
                    u32_of(x.last_dim())?,
                    Arg::F32(*eps),
                    Arg::F32(*scale),
                ],
            )
        }
        Op::ConvStep => {
            let x = inp(0);
            let (t, c) = (x.shape[0], x.shape[1]);
            let k = inp(1).shape[1];
            launch(
                be,
                "conv",
                "conv_step",
                [blocks(c as u64, 128), 1, 1],
                128,
                &[
                    p_in(0),
                    p_f32(1),
                    p_in(2),
                    p_out(0),
                    u32_of(t)?,
                    u32_of(c)?,
                    u32_of(k)?,
                ],
            )
        }
        Op::ConvTree => {
            let x = inp(0);
            let (t, c) = (x.shape[0], x.shape[1]);
            let k = inp(1).shape[1];
            launch(
                be,
                "conv",
                "conv_tree",
                [blocks(c as u64, 128), 1, 1],
                128,
                &[
                    p_in(0),
                    p_f32(1),
                    p_in(2),
                    p_in(3),
                    p_in(4),
                    p_out(0),
                    u32_of(t)?,
                    u32_of(c)?,
                    u32_of(k)?,
                ],
            )
        }
        Op::GatedDeltaNet(p)
        | Op::GatedDeltaNetTree(p)
        | Op::GatedDeltaNetLog(p)
        | Op::GatedDeltaNetReplay { p, .. } => {
            let (name, cols) = match p.dk {
                64 => ("gdn_dk64", 16),
                128 => ("gdn_dk128", 8),
                _ => ("gdn_any", 32),
            };
            // q, k, v, b, a, the gate weights, then `states` pointers from input 5 on.
            let own = |states: usize| {
                let mut v = vec![p_in(0), p_in(1), p_in(2), p_f32(3), p_f32(4)];
                v.extend((5..5 + states).map(p_in));
                v
            };
            let (name, t, mut args) = match &node.op {
                // The tree kernel takes (parent, state, per-row states) where the step takes
                // the state; the logging step (state, log).
                Op::GatedDeltaNetTree(_) => (format!("{name}_tree"), inp(0).shape[0], own(3)),
                Op::GatedDeltaNetLog(_) => (format!("{name}_log"), inp(0).shape[0], own(2)),
                // The replay is the step reading its q, k, v, b, a from the log's rows.
                Op::GatedDeltaNetReplay { rows, .. } => {
                    let log = env.ptr(node.inputs[3]);
                    let cd = p.conv_dim() as DevPtr;
                    (
                        name.to_string(),
                        *rows,
                        vec![
                            Arg::P(log),
                            Arg::P(log + 4 * cd),
                            Arg::P(log + 4 * (cd + p.nv as DevPtr)),
                            p_f32(0),
                            p_f32(1),
                            p_in(2),
                        ],
                    )
                }
                _ => (name.to_string(), inp(0).shape[0], own(1)),
            };
            args.push(p_out(0));
            let q_scale = (1.0 / (p.dk as f64).sqrt()) as f32;
            let tiled = u32::from(p.head_map == HeadMap::Tiled);
            args.extend([
                u32_of(t)?,
                u32_of(p.nk)?,
                u32_of(p.nv)?,
                u32_of(p.dk)?,
                u32_of(p.dv)?,
                Arg::U32(tiled),
                Arg::F32(p.l2_eps),
                Arg::F32(q_scale),
            ]);
            // The step's row strides: its own inputs', or the log's.
            match &node.op {
                Op::GatedDeltaNet(_) => args.extend([u32_of(p.conv_dim())?, u32_of(p.nv)?]),
                Op::GatedDeltaNetReplay { .. } => {
                    args.extend([u32_of(p.log_width())?, u32_of(p.log_width())?])
                }
                _ => {}
            }
            launch(
                be,
                "gdn",
                &name,
                [
                    u32::try_from(p.nv).unwrap_or(u32::MAX),
                    blocks(p.dv as u64, cols),
                    1,
                ],
                32,
                &args,
            )
        }
        Op::SliceLast { offset, len } => {
            let width = inp(0).last_dim();
            let n = out(0).numel() as u64;
            launch(
                be,
                "elementwise",
                "slice_last",
                [blocks(n, ELEM_PER_BLOCK), 1, 1],
                256,
                &[
                    p_in(0),
                    p_out(0),
                    Arg::U64(n),
                    u32_of(width)?,
                    u32_of(*offset)?,
                    u32_of(*len)?,
                ],
            )
        }
        Op::Rows { start, len } => {
            let width = inp(0).shape[1];
            let src = env.ptr(node.inputs[0]) + (start * width * 4) as DevPtr;
            be.drv
                .dtod(env.ptr(node.outputs[0]), src, len * width * 4)
                .map_err(|e| be.dev_err(e))
        }
        Op::Rope(rp) => {
            let rot = rp.rot;
            let x = inp(0);
            let (h, d) = (x.shape[1], x.shape[2]);
            let n = x.numel() as u64;
            let freqs = env.consts_ptr(index);
            launch(
                be,
                "rope",
                "rope",
                [blocks(n, 256), 1, 1],
                256,
                &[
                    p_in(0),
                    p_in(1),
                    Arg::P(freqs),
                    p_out(0),
                    Arg::U64(n),
                    u32_of(h * d)?,
                    u32_of(d)?,
                    u32_of(rot / 2)?,
                    Arg::F32(rp.attention_factor()),
                ],
            )
        }
        Op::Attention(p) => super::attention::lower(be, env, node, p, None, prep),
        Op::AttentionNonCausal { attn, window } => {
            super::attention::lower(be, env, node, attn, Some(*window), prep)
        }
        Op::AttentionTree(p) => super::attention::lower(be, env, node, p, None, prep),
        Op::ArgMax => {
            let x = inp(0);
            let (rows, v) = (x.shape[0], x.shape[1]);
            let parts = v.div_ceil(kernels::ARGMAX_CHUNK);
            if rows == 0 {
                return Ok(());
            }
            // Per-part best value (f32) and index (u32) of every row (grid: rows x parts).
            let part_v = be.scratch((rows * parts * 8).max(8))?;
            let part_i = part_v + (rows * parts * 4) as DevPtr;
            launch(
                be,
                "select",
                "argmax_f32",
                [
                    blocks(rows as u64, 1),
                    blocks(v as u64, kernels::ARGMAX_CHUNK as u64),
                    1,
                ],
                256,
                &[
                    p_in(0),
                    Arg::P(part_v),
                    Arg::P(part_i),
                    p_out(0),
                    u32_of(v)?,
                    u32_of(parts)?,
                    Arg::U32(0),
                ],
            )?;
            launch(
                be,
                "select",
                "argmax_f32",
                [blocks(rows as u64, 1), 1, 1],
                256,
                &[
                    p_in(0),
                    Arg::P(part_v),
                    Arg::P(part_i),
                    p_out(0),
                    u32_of(v)?,
                    u32_of(parts)?,
                    Arg::U32(1),
                ],
            )
        }
        Op::Concat => {
            let mut at = env.ptr(node.outputs[0]);
            for (i, &id) in node.inputs.iter().enumerate() {
                let bytes = inp(i).numel() * 4;
                be.drv
                    .dtod(at, env.ptr(id), bytes)
                    .map_err(|e| be.dev_err(e))?;
                at += bytes as DevPtr;
            }
            Ok(())
        }
        Op::DynConv { .. } => dyn_conv(be, env, node, false),
        Op::SelectorWalk { block } => {
            let (m, k) = (inp(0).shape[0], inp(0).shape[1]);
            let r = inp(2).shape[1];
            if k > 64 {
                return Err(unsupported(
                    be,
                    &node.op,
                    format!("{k} candidates (at most 64)"),
                ));
            }
            launch(
                be,
                "dflash2",
                "selector_walk",
                [blocks((m / block) as u64, 1), 1, 1],
                kernels::WALK_THREADS,
                &[
                    p_in(0),
                    p_in(1),
                    p_in(2),
                    p_in(3),
                    p_in(4),
                    p_in(5),
                    p_out(0),
                    p_out(1),
                    u32_of(*block)?,
                    u32_of(k)?,
                    u32_of(r)?,
                ],
            )
        }
        Op::LogSumExp => {
            let x = inp(0);
            let (rows, v) = (x.shape[0], x.shape[1]);
            if rows == 0 {
                return Ok(());
            }
            launch(
                be,
                "select",
                "logsumexp_f32",
                [blocks(rows as u64, 1), 1, 1],
                256,
                &[p_in(0), p_out(0), u32_of(v)?],
            )
        }
        Op::TopK { k } => {
            let x = inp(0);
            let (rows, v, k) = (x.shape[0], x.shape[1], *k);
            if rows == 0 {
                return Ok(());
            }
            // Pass 0 keeps the kc best of every ARGMAX_CHUNK elements of a row (grid: rows x
            // parts); with more than one part, pass 1 merges a row's parts * kc candidates.
            // Where a row has k parts or more (and at most TOPK_MAX_PARTS), pass 2 first takes
            // every part's maximum, and pass 0 keeps only elements at or before the row's k-th
            // best maximum (`row_threshold` in hip/select.hip).
            let parts = v.div_ceil(kernels::ARGMAX_CHUNK);
            let kc = k.min(kernels::ARGMAX_CHUNK);
            let cands = rows * parts * kc;
            let threshold = parts > 1 && k <= parts && parts <= kernels::TOPK_MAX_PARTS;
            let maxima = if threshold { rows * parts } else { 0 };
            let (part_v, part_i, mx_v, mx_i) = if parts > 1 {
                let p = be.scratch((cands + maxima) * 8)?;
                let at = |floats: usize| p + (floats * 4) as DevPtr;
                if threshold {
                    (p, at(cands), at(2 * cands), at(2 * cands + maxima))
                } else {
                    (p, at(cands), 0, 0)
                }
            } else {
                (0, 0, 0, 0)
            };
            let args = |pass: u32| -> Result<Vec<Arg>, BackendError> {
                Ok(vec![
                    p_in(0),
                    Arg::P(part_v),
                    Arg::P(part_i),
                    Arg::P(mx_v),
                    Arg::P(mx_i),
                    p_out(0),
                    p_out(1),
                    u32_of(v)?,
                    u32_of(k)?,
                    u32_of(kc)?,
                    u32_of(parts)?,
                    Arg::U32(pass),
                ])
            };
            let row_parts = [
                blocks(rows as u64, 1),
                blocks(v as u64, kernels::ARGMAX_CHUNK as u64),
                1,
            ];
            if threshold {
                launch(be, "select", "top_k_f32", row_parts, 256, &args(2)?)?;
            }
            launch(be, "select", "top_k_f32", row_parts, 256, &args(0)?)?;
            if parts > 1 {
                launch(
                    be,
                    "select",
                    "top_k_f32",
                    [blocks(rows as u64, 1), 1, 1],
                    256,
                    &args(1)?,
                )?;
            }
            Ok(())
        }
    }
}

/// Weight rows per warp of the wide `qgemv_<type>_<nt>x<r>` variant an unfused int8 GEMV of
/// tile `nt` uses on `be`, or `None` for the portable kernel.
pub(super) fn qgemv_wide(be: &HipBackend, nt: u32) -> Option<u32> {
    let wide = match be.qgemv_wide {
        Some(0) => kernels::qgemv_wide_default(nt),
        r => r,
    };
    wide.filter(|r| {
        be.drv.api() == super::driver::Api::Cuda && kernels::QGEMV_WIDE.contains(&(nt, *r))
    })
}

/// The regrouped copies (`kernels::regroup_q8_0`) of the Q8_0 weights `ws` of the dp4a kernel
/// `suffix`, if every one has one: the kernel suffix then becomes `kernels::Q8_REGROUPED`.
pub(super) fn q8_regrouped(env: &Env<'_>, suffix: &str, ws: &[TensorId]) -> Option<Vec<DevPtr>> {
    if suffix != "q8_0" || env.ws.q8_regrouped.is_empty() {
        return None;
    }
    ws.iter()
        .map(|&w| {
            let t = env.graph.tensor(env.graph.storage_root(w));
            env.ws.q8_regrouped.get(&t.name).map(|b| b.ptr)
        })
        .collect()
}

/// `y = x · wᵀ` with int8 activations: [`quantize_input`], then `qgemv_<type>_<tile>` reads the
/// quantized rows (see `hip/qmatmul.hip`), or `qmma_<type>_<tile>` where the matrix-core kernel
/// is on (`hip/qmma.hip`, bit-identical). `gate`: the folded attention output gate (see
/// [`quantize_input`]).
#[allow(clippy::too_many_arguments)]
pub(super) fn qgemv(
    be: &HipBackend,
    env: &Env<'_>,
    node: &Node,
    suffix: &str,
    n: usize,
    k: usize,
    m: usize,
    row_bytes: u64,
    gate: Option<(TensorId, TensorId)>,
) -> Result<(), BackendError> {
    let frag = be.qmma_frag() && be.qmma_tile(n, suffix).is_some();
    let [xq, xd, xs] = quantize_input(be, env, node, gate, n, k, frag)?;
    // The dp4a kernels read a Q8_0 weight's regrouped copy where it has one.
    let mut wptr = env.ptr(node.inputs[1]);
    let mut suffix = suffix;
    if be.qmma_tile(n, suffix).is_none()
        && let Some(p) = q8_regrouped(env, suffix, &[node.inputs[1]])
    {
        (wptr, suffix) = (p[0], kernels::Q8_REGROUPED);
    }
    // (source, kernel, weight rows per block, threads, grid rows): the matrix-core tile where enabled, else
    // the dp4a GEMV (its wide variant where one is chosen); every kernel takes the same arguments.
    let (source, name, rows_per_block, threads, grid_y) = match be.qmma_tile(n, suffix) {
        Some(nt) => be.mma_launch("qmma", suffix, nt, n, env.graph.rows_match_decode),
        None => {
            let nt = kernels::qgemv_tile(n);
            let warps = u64::from(kernels::QGEMV_THREADS / 32);
            let (name, rows_per_block) =
                match (be.q1_variant(n, false, m, suffix), qgemv_wide(be, nt)) {
                    (Some(v), _) => (
                        format!("qgemv_{suffix}_{}", v.tag()),
                        v.block_rows(warps, false),
                    ),
                    (None, Some(r)) => (format!("qgemv_{suffix}_{nt}x{r}"), u64::from(r) * warps),
                    (None, None) => (
                        format!("qgemv_{suffix}_{nt}"),
                        u64::from(kernels::qgemv_rows(nt)) * warps,
                    ),
                };
            ("qmatmul", name, rows_per_block, kernels::QGEMV_THREADS, 1)
        }
    };
    launch(
        be,
        source,
        &name,
        [
            be.mma_grid(&name, blocks(m as u64, rows_per_block)),
            grid_y,
            1,
        ],
        threads,
        &[
            Arg::P(wptr),
            Arg::P(xq),
            Arg::P(xd),
            Arg::P(xs),
            Arg::P(env.ptr(node.outputs[0])),
            u32_arg(be, &node.op, n)?,
            u32_arg(be, &node.op, k)?,
            u32_arg(be, &node.op, m)?,
            Arg::U64(row_bytes),
        ],
    )
}

/// Writes the int8 rows of `node`'s activation (input 0, `[n, k]`) to the quantized-activation
/// buffer and returns the `(XQ, XD, XS)` parts the int8 GEMV over it reads: the plain rows, or
/// where that GEMV is a `qmma*f` kernel (`frag`) their fragment-ordered copy (`hip/qmma.hip`), written
/// by `qmma_quantize` along with the plain rows, or by `qmma_relayout` from plain rows a norm's
/// `_q8` kernel wrote. Skipped when an earlier int8 matmul of this run already quantized (and,
/// for the copy, reordered) the same tensor. `gate = Some((x, g))`: the activation is the
/// `SigmoidMul` `x · sigmoid(g)` that the fusion plan folded into this matmul (never written
/// itself), computed inside `quantize_q8_gate` / `qmma_quantize_gate`.
pub(super) fn quantize_input(
    be: &HipBackend,
    env: &Env<'_>,
    node: &Node,
    gate: Option<(TensorId, TensorId)>,
    n: usize,
    k: usize,
    frag: bool,
) -> Result<[DevPtr; 3], BackendError> {
    let x = node.inputs[0];
    let nb = k / 32;
    // One qscratch call for both layouts: growing the buffer forgets what it held.
    let ([xq, xd, xs], fparts) = if frag {
        let (plain, f) = q8_frag_parts(be, n, k)?;
        (plain, Some(f))
    } else {
        (q8_parts(be, n * k)?, None)
    };
    let root = env.graph.storage_root(x);
    let sizes = [u32_arg(be, &node.op, n)?, u32_arg(be, &node.op, k)?];
    // The activation read by the quantize kernels: x, or x and the folded gate's input.
    let input = || match gate {
        None => vec![Arg::P(env.ptr(x))],
        Some((gx, gg)) => vec![Arg::P(env.ptr(gx)), Arg::P(env.ptr(gg))],
    };
    let gated = gate.is_some();
    let Some([fq, fd, fs]) = fparts else {
        if be.quantized.get() != Some(root) {
            let grid = [
                blocks((n * nb) as u64, u64::from(kernels::QGEMV_THREADS / 32)),
                1,
                1,
            ];
            let name = if gated {
                "quantize_q8_gate"
            } else {
                "quantize_q8"
            };
            let args = [
                input(),
                vec![Arg::P(xq), Arg::P(xd), Arg::P(xs)],
                sizes.to_vec(),
            ]
            .concat();
            launch(be, "qmatmul", name, grid, kernels::QGEMV_THREADS, &args)?;
            be.quantized.set(Some(root));
        }
        return Ok([xq, xd, xs]);
    };
    if be.fragged.get() != Some(root) {
        // One warp per 32-value block over n rounded up to 8 rows (the copy's padding rows are
        // zeros); the plain rows are kept for any later dp4a reader.
        let grid = [
            blocks(
                (n.div_ceil(8) * 8 * nb) as u64,
                u64::from(kernels::QMMA_QUANT_THREADS / 32),
            ),
            1,
            1,
        ];
        let (name, input) = match (be.quantized.get() == Some(root), gated) {
            (true, _) => ("qmma_relayout", vec![]),
            (false, false) => ("qmma_quantize", input()),
            (false, true) => ("qmma_quantize_gate", input()),
        };
        let parts = [xq, xd, xs, fq, fd, fs].map(Arg::P).to_vec();
        let args = [input, parts, sizes.to_vec()].concat();
        launch(be, "qmma", name, grid, kernels::QMMA_QUANT_THREADS, &args)?;
        be.quantized.set(Some(root));
        be.fragged.set(Some(root));
    }
    Ok([fq, fd, fs])
}

/// The `(XQ, XD, XS)` parts of the quantized-activation buffer for `elems` values (a multiple
/// of 32); the layout depends only on `elems`, so a norm that quantizes its output and the
/// matmul that reads it agree on it.
pub(super) fn q8_parts(be: &HipBackend, elems: usize) -> Result<[DevPtr; 3], BackendError> {
    let (q_bytes, d_bytes) = q8_sizes(elems);
    let base = be.qscratch(q_bytes + 2 * d_bytes)?;
    Ok(q8_split(base, elems))
}

/// [`q8_parts`] for `n × k` values, and after them the parts of the fragment-ordered copy
/// (over `n` rounded up to 8 rows) the `qmma*f` kernels read.
fn q8_frag_parts(
    be: &HipBackend,
    n: usize,
    k: usize,
) -> Result<([DevPtr; 3], [DevPtr; 3]), BackendError> {
    let (q_bytes, d_bytes) = q8_sizes(n * k);
    let padded = n.div_ceil(8) * 8 * k;
    let (fq_bytes, fd_bytes) = q8_sizes(padded);
    let base = be.qscratch(q_bytes + 2 * d_bytes + fq_bytes + 2 * fd_bytes)?;
    let fbase = base + (q_bytes + 2 * d_bytes) as DevPtr;
    Ok((q8_split(base, n * k), q8_split(fbase, padded)))
}

/// Bytes of the int8 part and of each scale part for `elems` values, each 256-byte aligned.
fn q8_sizes(elems: usize) -> (usize, usize) {
    (align256(elems), align256(elems / 32 * 4))
}

/// `(XQ, XD, XS)` of `elems` values laid out from `base`.
fn q8_split(base: DevPtr, elems: usize) -> [DevPtr; 3] {
    let (q_bytes, d_bytes) = q8_sizes(elems);
    [
        base,
        base + q_bytes as DevPtr,
        base + (q_bytes + d_bytes) as DevPtr,
    ]
}

/// Slices of the sliced `add_rms_norm_q8s[f]` for a norm over `x` (`NormQ8::Slices`): rows in
/// the block form (`hip/norm.hip`: 512 < d ≤ 8192) cut into slices of 512 values (whole warps
/// of chunks in every pass), at most `max_rows` of them; `None` where that form does not apply.
pub(super) fn norm_slices(x: &crate::graph::TensorDecl, max_rows: usize) -> Option<u32> {
    let d = x.last_dim();
    let rows = x.numel() / d.max(1);
    ((1..=max_rows).contains(&rows) && d > 512 && d <= 8192 && d.is_multiple_of(512))
        .then_some((d / 512) as u32)
}

/// A norm node with its `_q8` kernel (see [`super::fused::norm_q8`]): the normalised output is
/// written as f32 and as int8 activations, which the next int8 matmul over it then reuses. Where
/// that matmul reads the fragment order ([`super::fused::frag_reader`]), the `_q8f` kernel writes
/// it too, over the copy's rows (input rows rounded up to 8; the padding rows get zeros).
pub(super) fn norm_q8(be: &HipBackend, env: &Env<'_>, node: &Node) -> Result<(), BackendError> {
    let g = env.graph;
    let x = g.tensor(node.inputs[0]);
    let d = x.last_dim();
    let rows = (x.numel() / d) as u64;
    let y = node.outputs[node.outputs.len() - 1];
    let root = g.storage_root(y);
    // The reader's rows and width must tile the norm's output exactly (a view of it).
    let frag = super::fused::frag_reader(be, g, root)
        .filter(|&(n, k)| n * k == g.tensor(y).numel() && k % d == 0);
    let ([xq, xd, xs], fparts) = match frag {
        Some((n, k)) => {
            let (plain, f) = q8_frag_parts(be, n, k)?;
            (plain, Some((f, n, k)))
        }
        None => (q8_parts(be, g.tensor(y).numel())?, None),
    };
    let p = |id: TensorId| Arg::P(env.ptr(id));
    let (name, eps, mut args) = match node.op {
        Op::RmsNorm { eps } => (
            "rms_norm_q8",
            eps,
            vec![p(node.inputs[0]), Arg::P(env.f32_ptr(node.inputs[1])), p(y)],
        ),
        Op::AddRmsNorm { eps } => (
            "add_rms_norm_q8",
            eps,
            vec![
                p(node.inputs[0]),
                p(node.inputs[1]),
                Arg::P(env.f32_ptr(node.inputs[2])),
                p(node.outputs[0]),
                p(y),
            ],
        ),
        Op::GatedRmsNorm { eps } => (
            "gated_rms_norm_q8",
            eps,
            vec![
                p(node.inputs[0]),
                p(node.inputs[1]),
                Arg::P(env.f32_ptr(node.inputs[2])),
                p(y),
            ],
        ),
        _ => return Err(unsupported(be, &node.op, "not a norm".into())),
    };
    args.extend([Arg::P(xq), Arg::P(xd), Arg::P(xs)]);
    let slices = match node.op {
        Op::AddRmsNorm { .. } if be.norm_q8 == super::NormQ8::Slices => {
            // With the fragment order, only where a norm row is the reader's input row.
            norm_slices(x, be.norm_slice_rows).filter(|_| fparts.is_none_or(|(_, _, k)| k == d))
        }
        _ => None,
    };
    let (name, grid) = match fparts {
        None => match slices {
            Some(s) => {
                args.push(Arg::U32(s));
                ("add_rms_norm_q8s".to_string(), [blocks(rows, 1), s, 1])
            }
            None => (name.to_string(), [blocks(rows, 1), 1, 1]),
        },
        Some(([fq, fd, fs], n, k)) => {
            args.extend([fq, fd, fs].map(Arg::P));
            args.extend([
                u32_arg(be, &node.op, k / 32)?,
                u32_arg(be, &node.op, rows as usize)?,
            ]);
            // Norm rows of the copy: the reader's input rows rounded up to 8, times the norm
            // rows per input row; the padding rows' blocks zero them.
            let copy_rows = (n.div_ceil(8) * 8 * (k / d)) as u64;
            match slices {
                Some(s) => {
                    args.push(Arg::U32(s));
                    (
                        "add_rms_norm_q8sf".to_string(),
                        [blocks(copy_rows, 1), s, 1],
                    )
                }
                None => (format!("{name}f"), [blocks(copy_rows, 1), 1, 1]),
            }
        }
    };
    args.extend([u32_arg(be, &node.op, d)?, Arg::F32(eps)]);
    launch(be, "norm", &name, grid, norm_threads(d), &args)?;
    be.quantized.set(Some(root));
    if fparts.is_some() {
        be.fragged.set(Some(root));
    }
    Ok(())
}

/// A `DynConv` node: `dyn_conv`, or with `q8` ([`super::fused::q8_out`]) its `_q8` kernel, which
/// also writes the output as the int8 activations of the matmul it feeds, in the fragment
/// order too where the matrix-core kernels read that (else `quantize_input` makes it from the
/// plain rows).
pub(super) fn dyn_conv(
    be: &HipBackend,
    env: &Env<'_>,
    node: &Node,
    q8: bool,
) -> Result<(), BackendError> {
    let Op::DynConv { side, block, group } = node.op else {
        return Err(unsupported(be, &node.op, "not a DynConv".into()));
    };
    let g = env.graph;
    let y = node.outputs[0];
    let b = g.tensor(node.inputs[1]);
    let (sides, k, ch) = (b.shape[0], b.shape[1], b.shape[2]);
    let groups = ch / group;
    let rows = g.tensor(y).numel() / ch;
    let u = |v: usize| u32_arg(be, &node.op, v);
    let mut args: Vec<Arg> = [node.inputs[0], node.inputs[1], node.inputs[2], y]
        .map(|t| Arg::P(env.ptr(t)))
        .to_vec();
    let dims = [
        u(ch)?,
        u(k)?,
        u(side)?,
        u(block)?,
        u(group)?,
        u(groups)?,
        u(sides * k * groups)?,
    ];
    if !q8 {
        let n = (rows * ch) as u64;
        args.push(Arg::U64(n));
        args.extend(dims);
        return launch(
            be,
            "dflash2",
            "dyn_conv",
            [blocks(n, 256), 1, 1],
            256,
            &args,
        );
    }
    let frag = be.matrix_cores() && be.qmma_frag();
    let ([xq, xd, xs], fparts) = if frag {
        let (plain, f) = q8_frag_parts(be, rows, ch)?;
        (plain, Some(f))
    } else {
        (q8_parts(be, rows * ch)?, None)
    };
    // Without the fragment copy its pointers are unused: the plain ones stand in.
    let [fq, fd, fs] = fparts.unwrap_or([xq, xd, xs]);
    args.extend([xq, xd, xs, fq, fd, fs].map(Arg::P));
    args.push(u(rows)?);
    args.extend(dims);
    let padded = if frag { rows.div_ceil(8) * 8 } else { rows };
    launch(
        be,
        "dflash2",
        if frag { "dyn_conv_q8f" } else { "dyn_conv_q8" },
        [blocks((padded * ch) as u64, 256), 1, 1],
        256,
        &args,
    )?;
    let root = g.storage_root(y);
    be.quantized.set(Some(root));
    if frag {
        be.fragged.set(Some(root));
    }
    Ok(())
}

fn align256(v: usize) -> usize {
    v.div_ceil(256) * 256
}

/// A size as a 32-bit kernel argument, or an error naming `op`.
pub(super) fn u32_arg(be: &HipBackend, op: &Op, v: usize) -> Result<Arg, BackendError> {
    u32::try_from(v).map(Arg::U32).map_err(|_| {
        unsupported(
            be,
            op,
            format!("size {v} does not fit the kernels' 32-bit sizes"),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::norm_slices;
    use crate::graph::{TensorDecl, TensorKind};
    use crate::tensor::DType;

    fn rows(shape: &[usize]) -> TensorDecl {
        TensorDecl {
            name: "x".into(),
            shape: shape.to_vec(),
            dtype: DType::F32,
            kind: TensorKind::Input,
        }
    }

    #[test]
    fn sliced_norms_take_block_form_rows_in_whole_512_value_slices() {
        // The 27B hidden size: 10 slices; the widest block-form row: 16.
        assert_eq!(norm_slices(&rows(&[1, 5120]), 1), Some(10));
        assert_eq!(norm_slices(&rows(&[5120]), 1), Some(10));
        assert_eq!(norm_slices(&rows(&[1, 8192]), 1), Some(16));
        assert_eq!(norm_slices(&rows(&[1, 1024]), 1), Some(2));
        // Verify widths where more rows are allowed.
        assert_eq!(norm_slices(&rows(&[16, 5120]), 16), Some(10));
        assert_eq!(norm_slices(&rows(&[3, 5120]), 16), Some(10));
        assert_eq!(norm_slices(&rows(&[17, 5120]), 16), None);
        // More rows than allowed, the warp form (≤ 512), past the block form, or not whole
        // slices.
        assert_eq!(norm_slices(&rows(&[2, 5120]), 1), None);
        assert_eq!(norm_slices(&rows(&[1, 512]), 16), None);
        assert_eq!(norm_slices(&rows(&[1, 16384]), 16), None);
        assert_eq!(norm_slices(&rows(&[1, 1280]), 16), None);
    }
}
