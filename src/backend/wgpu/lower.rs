//! Lowering: a planned graph becomes a list of dispatches (template specialisation, params,
//! bindings, grid). Reshapes are views and emit nothing.

use super::fuse::{self, Fusion};
use super::shaders::{self, PARAMS, ShaderKey};
use crate::backend::BackendError;
use crate::graph::{Graph, HeadMap, Op, Plan, TensorId, TensorKind};
use crate::tensor::DType;

/// A buffer a dispatch binds, resolved to a device buffer at run time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Res {
    Slot(usize),
    Input(usize),
    State(usize),
    Weight { w: usize, part: usize },
    Scratch(usize),
    Aux(usize),
}

pub struct Step {
    /// What the dispatch computes (the node's profile key), for per-dispatch timings.
    pub label: String,
    pub key: ShaderKey,
    pub params: [u32; PARAMS],
    /// Bindings 1.. in order (binding 0 is the params uniform).
    pub binds: Vec<Res>,
    pub groups: [u32; 3],
}

/// A weight the graph binds by name.
pub struct WeightUse {
    pub name: String,
    pub dtype: DType,
    pub shape: Vec<usize>,
}

/// A data check on an input before a run (token ids and positions index tables).
pub struct InputCheck {
    pub input: usize,
    /// Values must lie in `0 .. bound`.
    pub bound: usize,
    pub what: &'static str,
}

#[derive(Default)]
pub struct Lowered {
    pub steps: Vec<Step>,
    pub inputs: Vec<TensorId>,
    pub states: Vec<TensorId>,
    pub weights: Vec<WeightUse>,
    pub scratch: Vec<u64>,
    pub aux: Vec<Vec<u8>>,
    pub checks: Vec<InputCheck>,
    /// Graph outputs: name, where they live, declaration.
    pub outputs: Vec<(String, Res, TensorId)>,
}

/// How a weight of `dtype` and `shape` is split into bindings of at most `max_binding` bytes:
/// `(row bytes, [(first row, rows)])`.
pub fn split_rows(
    dtype: DType,
    shape: &[usize],
    max_binding: u64,
) -> Result<(usize, Vec<(usize, usize)>), String> {
    let row = shape.last().copied().unwrap_or(1);
    let rows: usize = if shape.len() <= 1 {
        1
    } else {
        shape[..shape.len() - 1].iter().product()
    };
    let rb = dtype
        .bytes_for(row)
        .ok_or_else(|| format!("rows of {row} {dtype} values are not whole blocks"))?;
    // Headroom: 8 bytes for the unaligned two-word reads at a part's end, and what a re-layout
    // adds to a part.
    let growth = super::relayout::LAYOUTS
        .iter()
        .map(|l| l.growth)
        .max()
        .unwrap_or(0);
    let headroom = 8 + growth as u64;
    let per = ((max_binding.saturating_sub(headroom)) / rb.max(1) as u64).max(1) as usize;
    let mut parts = Vec::new();
    let mut first = 0;
    while first < rows || parts.is_empty() {
        let n = per.min(rows - first);
        parts.push((first, n));
        first += n;
        if n == 0 {
            break;
        }
    }
    Ok((rb, parts))
}

/// A weight-position operand: its type, row bytes and parts `(buffer, first row, rows)`.
pub(super) struct WOperand {
    pub dtype: DType,
    pub row_bytes: usize,
    pub parts: Vec<(Res, usize, usize)>,
}

/// What the device offers the lowering.
#[derive(Clone, Debug)]
pub struct Caps {
    /// Largest weight binding.
    pub max_binding: u64,
    pub subgroups: bool,
    /// The device's smallest subgroup (lanes; meaningful only with `subgroups`).
    pub subgroup_min: u32,
    /// Storage buffers one dispatch may bind.
    pub max_storage: u32,
    /// Whether to fuse (see [`fuse`]).
    pub fusion: bool,
    /// Int8 activations for matmuls of at most `int8_max_n` rows over
    /// [`shaders::INT8_TYPES`] weights (see `shaders/quantize.wgsl`).
    pub int8: bool,
    /// The widest input on the int8 path (default [`shaders::INT8_MAX_N`]).
    pub int8_max_n: usize,
    /// Cooperative matrices for prompt-wide matmuls (see [`shaders::COOP_MIN_N`]).
    pub coop: bool,
    /// With `int8`: a norm whose output an int8 GEMV reads also writes the quantized
    /// activations, and the GEMV skips its quantize dispatch (`DELTASPEC_WGPU_NORM_Q8=0`: off).
    pub norm_q8: bool,
    /// Re-laid weight types and the IQ4_XS lookup: flags of every weight kernel.
    pub weight_kernels: shaders::WeightKernels,
    /// Workgroup memory `attn_nc` may use (bytes): the device's limit, 0 with
    /// `DELTASPEC_WGPU_ATTN_NC=0` (the kernel off).
    pub attn_nc_mem: u32,
}

/// The quantized-activation buffers (one pair per executable, sized for its widest use) and
/// what they hold at the current point of the dispatch list.
#[derive(Clone, Copy)]
pub(super) struct Q8Buf {
    /// Scratch indices: packed int8 values, per-block (scale, scaled sum).
    pub xq: usize,
    pub xd: usize,
    /// `(x root, gate root, N, K)` quantized by the latest quantize dispatch.
    pub holds: Option<(TensorId, Option<TensorId>, usize, usize)>,
}

pub(super) struct Ctx<'g> {
    pub g: &'g Graph,
    plan: &'g Plan,
    max_binding: u64,
    pub subgroups: bool,
    /// The smallest subgroup the kernels may meet; 0 without subgroups.
    pub subgroup_min: u32,
    pub int8: bool,
    pub int8_max_n: usize,
    pub coop: bool,
    norm_q8: bool,
    weight_kernels: shaders::WeightKernels,
    /// Workgroup memory `attn_nc` may use (0: the kernel is off).
    attn_nc_mem: u32,
    pub q8: Option<Q8Buf>,
    /// A second pair of int8 buffers, written by GEMVs that quantize their own output (QOUT)
    /// while they read their input from the first pair.
    pub q8_out: Option<Q8Buf>,
    /// Scratch of QOUT: output values and per-block counters (zero between runs).
    pub qout_scratch: Option<(usize, usize)>,
    pub fusion: Fusion,
    /// Label of the node being lowered.
    label: String,
    out: Lowered,
}

pub(super) fn unsupported(op: &Op, msg: impl Into<String>) -> BackendError {
    BackendError::Unsupported {
        backend: super::NAME.into(),
        op: op.name().into(),
        msg: msg.into(),
    }
}

/// `(groups, groups per grid row)` for `n` workgroups in a 2-D grid of rows ≤ 65535.
pub(super) fn grid(n: usize) -> ([u32; 3], u32) {
    let n = n.max(1) as u64;
    let x = n.min(65535);
    ([x as u32, n.div_ceil(x) as u32, 1], x as u32)
}

pub(super) fn p(vals: &[u32]) -> [u32; PARAMS] {
    let mut a = [0u32; PARAMS];
    a[..vals.len()].copy_from_slice(vals);
    a
}

impl Ctx<'_> {
    pub(super) fn res(&mut self, id: TensorId) -> Res {
        let root = self.g.storage_root(id);
        let t = self.g.tensor(root);
        match t.kind {
            TensorKind::Node { .. } => Res::Slot(
                self.plan.slot_of[root.index()].expect("planner places every node output"),
            ),
            TensorKind::Input => {
                let i = match self.out.inputs.iter().position(|x| *x == root) {
                    Some(i) => i,
                    None => {
                        self.out.inputs.push(root);
                        self.out.inputs.len() - 1
                    }
                };
                Res::Input(i)
            }
            TensorKind::State => {
                let i = match self.out.states.iter().position(|x| *x == root) {
                    Some(i) => i,
                    None => {
                        self.out.states.push(root);
                        self.out.states.len() - 1
                    }
                };
                Res::State(i)
            }
            TensorKind::Weight => {
                let w = self.weight_index(root);
                Res::Weight { w, part: 0 }
            }
        }
    }

    fn weight_index(&mut self, id: TensorId) -> usize {
        let t = self.g.tensor(id);
        match self.out.weights.iter().position(|w| w.name == t.name) {
            Some(i) => i,
            None => {
                self.out.weights.push(WeightUse {
                    name: t.name.clone(),
                    dtype: t.dtype,
                    shape: t.shape.clone(),
                });
                self.out.weights.len() - 1
            }
        }
    }

    pub(super) fn woperand(&mut self, op: &Op, id: TensorId) -> Result<WOperand, BackendError> {
        let root = self.g.storage_root(id);
        let t = self.g.tensor(root).clone();
        if t.kind == TensorKind::Weight {
            if !shaders::WEIGHT_TYPES.contains(&t.dtype) {
                return Err(unsupported(
                    op,
                    format!("weight {} of type {}", t.name, t.dtype),
                ));
            }
            let (rb, parts) =
                split_rows(t.dtype, &t.shape, self.max_binding).map_err(|m| unsupported(op, m))?;
            let w = self.weight_index(root);
            Ok(WOperand {
                dtype: t.dtype,
                row_bytes: rb,
                parts: parts
                    .into_iter()
                    .enumerate()
                    .map(|(part, (first, rows))| (Res::Weight { w, part }, first, rows))
                    .collect(),
            })
        } else {
            let decl = self.g.tensor(id);
            let rows = decl.rows();
            let rb = decl.last_dim() * 4;
            let r = self.res(id);
            Ok(WOperand {
                dtype: DType::F32,
                row_bytes: rb,
                parts: vec![(r, 0, rows)],
            })
        }
    }

    /// A small weight read whole by elementwise kernels (norm vectors, conv taps, gates).
    pub(super) fn whole(&mut self, op: &Op, id: TensorId) -> Result<(Res, DType), BackendError> {
        let w = self.woperand(op, id)?;
        if w.parts.len() != 1 {
            return Err(unsupported(op, "a split weight in an elementwise position"));
        }
        Ok((w.parts[0].0, w.dtype))
    }

    pub(super) fn scratch(&mut self, bytes: usize) -> Res {
        Res::Scratch(self.scratch_index(bytes))
    }

    pub(super) fn scratch_index(&mut self, bytes: usize) -> usize {
        self.out.scratch.push(bytes.max(16) as u64);
        self.out.scratch.len() - 1
    }

    /// Runs `f` with the label of the node being lowered extended by `what`.
    pub(super) fn labelled<T>(&mut self, what: &str, f: impl FnOnce(&mut Self) -> T) -> T {
        let saved = std::mem::take(&mut self.label);
        self.label = format!("{saved} {what}");
        let r = f(self);
        self.label = saved;
        r
    }

    /// Grows scratch buffer `i` to at least `bytes`.
    pub(super) fn grow_scratch(&mut self, i: usize, bytes: usize) {
        let b = &mut self.out.scratch[i];
        *b = (*b).max(bytes as u64);
    }

    pub(super) fn step(
        &mut self,
        key: ShaderKey,
        params: [u32; PARAMS],
        binds: Vec<Res>,
        groups: [u32; 3],
    ) {
        let key = shaders::specialize(key, &self.weight_kernels);
        self.out.steps.push(Step {
            label: self.label.clone(),
            key,
            params,
            binds,
            groups,
        });
    }

    fn check_input(&mut self, id: TensorId, bound: usize, what: &'static str) {
        let root = self.g.storage_root(id);
        if self.g.tensor(root).kind == TensorKind::Input
            && let Res::Input(i) = self.res(root)
        {
            self.out.checks.push(InputCheck {
                input: i,
                bound,
                what,
            });
        }
    }

    fn node(&mut self, idx: usize) -> Result<(), BackendError> {
        let g = self.g;
        let node = &g.nodes[idx];
        let op = &node.op;
        // Fused groups run at their first member; the other members emit nothing.
        if let Some((gi, at)) = self.fusion.role[idx] {
            if at {
                let grp = &self.fusion.groups[gi];
                let key = crate::backend::profile_key(g, node);
                self.label = match grp.swiglu {
                    Some(_) => format!("{key} gate+up+swiglu"),
                    None => format!("{key} ×{} fused", grp.members.len()),
                };
                if self.fusion.conv_of(gi).is_some() {
                    self.label.push_str(" +conv");
                }
                self.fused(gi)?;
            }
            return Ok(());
        }
        if self.fusion.folded[idx] {
            return Ok(());
        }
        self.label = crate::backend::profile_key(g, node);
        let ins = &node.inputs;
        let outs = &node.outputs;
        let shape = |id: TensorId| g.tensor(id).shape.clone();
        let numel = |id: TensorId| g.tensor(id).numel();
        let u = |v: usize| -> Result<u32, BackendError> {
            u32::try_from(v).map_err(|_| unsupported(op, format!("size {v} exceeds u32")))
        };
        match op {
            Op::Reshape { .. } => {}
            Op::Embed => {
                let s = shape(ins[0]);
                let (vocab, d) = (s[0], s[1]);
                let t = numel(ins[1]);
                self.check_input(ins[1], vocab, "token id");
                let table = self.woperand(op, ins[0])?;
                let ids = self.res(ins[1]);
                let y = self.res(outs[0]);
                let (groups, gx) = grid(t);
                for (r, first, rows) in table.parts {
                    self.step(
                        ShaderKey::new("embed").dq("W", table.dtype),
                        p(&[
                            u(t)?,
                            u(d)?,
                            u(table.row_bytes)?,
                            u(first)?,
                            u(rows)?,
                            u(vocab)?,
                            gx,
                        ]),
                        vec![ids, r, y],
                        groups,
                    );
                }
            }
            Op::MatMul => self.matmul(idx)?,
            Op::Add | Op::SigmoidMul | Op::SwiGlu => {
                let n = numel(outs[0]);
                let flag = match op {
                    Op::Add => "OP_ADD",
                    Op::SigmoidMul => "OP_SIGMOID_MUL",
                    _ => "OP_SWIGLU",
                };
                let (a, b, y) = (self.res(ins[0]), self.res(ins[1]), self.res(outs[0]));
                let (groups, gx) = grid(n.div_ceil(256));
                self.step(
                    ShaderKey::new("elementwise").flag(flag),
                    p(&[u(n)?, gx * 256]),
                    vec![a, b, y],
                    groups,
                );
            }
            Op::RmsNorm { eps }
            | Op::AddRmsNorm { eps }
            | Op::GatedRmsNorm { eps }
            | Op::L2Norm { eps, .. } => {
                let d = g.tensor(ins[0]).last_dim();
                let rows = numel(ins[0]) / d.max(1);
                let scale = if let Op::L2Norm { scale, .. } = op {
                    *scale
                } else {
                    1.0
                };
                let x = self.res(ins[0]);
                let (mode, y) = match op {
                    Op::RmsNorm { .. } => ("RMS", outs[0]),
                    Op::AddRmsNorm { .. } => ("ADD", outs[1]),
                    Op::GatedRmsNorm { .. } => ("GATED", outs[0]),
                    _ => ("L2", outs[0]),
                };
                // y quantized in the same dispatch when an int8 GEMV reads it.
                let q8 = if self.norm_q8 && shaders::norm_q8_applies(mode, d) {
                    self.int8_reader(y)
                } else {
                    None
                };
                let key = match q8 {
                    Some(_) => shaders::norm_q8_key(mode, d, self.subgroups),
                    None => shaders::norm_key(mode, d, self.subgroups),
                };
                let (key, parts) = shaders::norm_part(key, rows);
                let (groups, gx) = grid(rows * parts);
                let params = p(&[u(rows)?, u(d)?, eps.to_bits(), scale.to_bits(), gx]);
                let mut binds = vec![x];
                let key = match op {
                    Op::RmsNorm { .. } => {
                        let (w, wt) = self.whole(op, ins[1])?;
                        binds.extend([w, self.res(outs[0])]);
                        key.dq("W", wt)
                    }
                    Op::AddRmsNorm { .. } => {
                        let r = self.res(ins[1]);
                        let (w, wt) = self.whole(op, ins[2])?;
                        binds.extend([r, w, self.res(outs[0]), self.res(outs[1])]);
                        key.dq("W", wt)
                    }
                    Op::GatedRmsNorm { .. } => {
                        let z = self.res(ins[1]);
                        let (w, wt) = self.whole(op, ins[2])?;
                        binds.extend([z, w, self.res(outs[0])]);
                        key.dq("W", wt)
                    }
                    _ => {
                        binds.push(self.res(outs[0]));
                        key
                    }
                };
                match q8 {
                    Some((n, k)) => {
                        let (xq, xd) = self.norm_q8_bufs(y, n, k);
                        binds.extend([xq, xd]);
                        self.labelled("+q8", |cx| cx.step(key, params, binds, groups));
                    }
                    None => self.step(key, params, binds, groups),
                }
            }
            Op::ConvStep | Op::ConvTree => {
                let tree = *op == Op::ConvTree;
                let xs = shape(ins[0]);
                let (t, c) = (xs[0], xs[1]);
                let kw = shape(ins[1])[1];
                let x = self.res(ins[0]);
                let (w, wt) = self.whole(op, ins[1])?;
                // The tree form binds (parent, state, per-row states) where the step binds
                // the state.
                let mut binds = vec![x, w];
                binds.extend(ins[2..].iter().map(|i| self.res(*i)));
                binds.push(self.res(outs[0]));
                let (groups, gx) = grid(c.div_ceil(64));
                self.step(
                    ShaderKey::new("conv").flag_if(tree, "TREE").dq("W", wt),
                    p(&[u(t)?, u(c)?, u(kw)?, gx * 64]),
                    binds,
                    groups,
                );
            }
            Op::GatedDeltaNet(gp)
            | Op::GatedDeltaNetTree(gp)
            | Op::GatedDeltaNetLog(gp)
            | Op::GatedDeltaNetReplay { p: gp, .. } => {
                let tree = matches!(op, Op::GatedDeltaNetTree(_));
                let log = matches!(op, Op::GatedDeltaNetLog(_));
                let (cd, nv) = (u(gp.conv_dim())?, u(gp.nv)?);
                // Input positions of (q/k/v, b, a), the gate weights and the states, and the
                // params' row strides and b, a offsets: the replay is the step with the log bound
                // as q/k/v, b and a.
                let (t, qba, gates, states, strides) = match op {
                    Op::GatedDeltaNetReplay { rows, .. } => {
                        let w = u(gp.log_width())?;
                        let lg = ins[3];
                        (
                            *rows,
                            [lg; 3],
                            [ins[0], ins[1]],
                            &ins[2..3],
                            [w, w, cd, cd + nv],
                        )
                    }
                    _ => (
                        shape(ins[0])[0],
                        [ins[0], ins[1], ins[2]],
                        [ins[3], ins[4]],
                        &ins[5..],
                        [cd, nv, 0, 0],
                    ),
                };
                let (sa, sat) = self.whole(op, gates[0])?;
                let (dt, dtt) = self.whole(op, gates[1])?;
                let mut binds: Vec<_> = qba.iter().map(|i| self.res(*i)).collect();
                binds.extend([sa, dt]);
                binds.extend(states.iter().map(|i| self.res(*i)));
                let shape = shaders::gdn_shape(gp.dk, gp.dv, self.subgroup_min);
                binds.push(self.res(outs[0]));
                let q_scale = (1.0 / (gp.dk as f64).sqrt()) as f32;
                let map = match gp.head_map {
                    HeadMap::Tiled => 0,
                    HeadMap::Grouped => 1,
                };
                self.step(
                    shaders::gdn_key(u(gp.dk)?, shape, sat, dtt)
                        .flag_if(tree, "TREE")
                        .flag_if(log, "LOG"),
                    p(&[
                        u(t)?,
                        u(gp.nk)?,
                        u(gp.nv)?,
                        u(gp.dk)?,
                        u(gp.dv)?,
                        map,
                        gp.l2_eps.to_bits(),
                        q_scale.to_bits(),
                        strides[0],
                        strides[1],
                        strides[2],
                        strides[3],
                    ]),
                    binds,
                    [u(gp.nv)?, u(gp.dv.div_ceil(shape.cols as usize))?, 1],
                );
            }
            Op::SliceLast { offset, len } => {
                let w = g.tensor(ins[0]).last_dim();
                let total = numel(outs[0]);
                let (x, y) = (self.res(ins[0]), self.res(outs[0]));
                let (groups, gx) = grid(total.div_ceil(256));
                self.step(
                    ShaderKey::new("copy"),
                    p(&[u(total)?, u(w)?, u(*offset)?, u(*len)?, gx * 256]),
                    vec![x, y],
                    groups,
                );
            }
            Op::Rows { start, .. } => {
                let width = g.tensor(ins[0]).last_dim();
                let total = numel(outs[0]);
                let (x, y) = (self.res(ins[0]), self.res(outs[0]));
                let (groups, gx) = grid(total.div_ceil(256));
                self.step(
                    ShaderKey::new("copy"),
                    p(&[u(total)?, u(total)?, u(start * width)?, u(total)?, gx * 256]),
                    vec![x, y],
                    groups,
                );
            }
            Op::Rope(rp) => {
                let s = shape(ins[0]);
                let (h, d) = (s[1], s[2]);
                let total = numel(ins[0]);
                // HF's inv_freq (YaRN-scaled if so), computed exactly as the CPU reference does.
                let mut freqs = rp.inv_freq();
                if freqs.is_empty() {
                    freqs.push(0.0); // a binding may not be empty
                }
                self.out.aux.push(bytemuck::cast_slice(&freqs).to_vec());
                let f = Res::Aux(self.out.aux.len() - 1);
                let (x, pos, y) = (self.res(ins[0]), self.res(ins[1]), self.res(outs[0]));
                let (groups, gx) = grid(total.div_ceil(256));
                let m = rp.attention_factor().to_bits();
                self.step(
                    ShaderKey::new("rope"),
                    p(&[u(total)?, u(h * d)?, u(d)?, u(rp.rot)?, gx * 256, m]),
                    vec![x, pos, f, y],
                    groups,
                );
            }
            Op::Attention(_) | Op::AttentionNonCausal { .. } | Op::AttentionTree(_) => {
                let (ap, mode, window) = match op {
                    Op::AttentionNonCausal { attn, window } => (attn, 1, *window),
                    Op::Attention(ap) => (ap, 0, 0),
                    Op::AttentionTree(ap) => (ap, 2, 0),
                    _ => return Err(unsupported(op, "not an attention op")),
                };
                let tree = mode == 2;
                // The tree form has its mask at 4 and the caches after it.
                let kc = if tree { 5 } else { 4 };
                let t = shape(ins[0])[0];
                let cap = shape(ins[kc])[0];
                let (nh, nkv, hd) = (ap.n_heads, ap.n_kv_heads, ap.head_dim);
                self.check_input(ins[3], cap, "position");
                // The output times its gate quantized for o_proj by the kernel writing it.
                let gq8 = if self.int8 && hd.is_multiple_of(32) {
                    self.gated_int8_reader(outs[0])
                } else {
                    None
                };
                // `attn_nc` shares each kv head's key rows among its query vectors: the
                // drafters' non-causal blocks, and the causal or tree queries of decode steps
                // and of the verify steps compared with them (`attn` keeps prompts), where
                // `attn` re-read every row once per query head (wgpu decode after 4096 context
                // rows: ~200 µs a layer on an H100, session 27). Its workgroups own a kv head
                // each, not a query: more splits fill the GPU. It writes no int8 output, so
                // with a quantized output (the target's gate) it needs splits (the combine
                // writes it).
                let nc_splits = cap.div_ceil(64).clamp(1, 32);
                let nc = (mode == 1 || t == 1 || self.g.rows_match_decode)
                    && (gq8.is_none() || nc_splits > 1)
                    && nkv > 0
                    && nh.is_multiple_of(nkv)
                    && shaders::attn_nc_fits(hd, self.attn_nc_mem);
                let splits = if nc {
                    nc_splits
                } else {
                    cap.div_ceil(256).clamp(1, 32)
                };
                let fin = splits == 1;
                let part = self.scratch(if fin {
                    0
                } else {
                    t * nh * splits * (hd + 2) * 4
                });
                let mut binds: Vec<Res> = vec![
                    self.res(ins[0]),
                    self.res(ins[1]),
                    self.res(ins[2]),
                    self.res(ins[3]),
                    self.res(ins[kc]),
                    self.res(ins[kc + 1]),
                    part,
                    self.res(outs[0]),
                ];
                if tree {
                    binds.push(self.res(ins[4]));
                }
                let (wgroups, gx) = grid((t * nkv * hd).div_ceil(shaders::ATTN_WG as usize));
                let params = p(&[
                    u(t)?,
                    u(nh)?,
                    u(nkv)?,
                    u(hd)?,
                    u(cap)?,
                    u(splits)?,
                    ap.scale.to_bits(),
                    gx * shaders::ATTN_WG,
                    mode,
                    u(window)?,
                ]);
                if nh > 65535 || t > 65535 {
                    return Err(unsupported(op, "too many heads or tokens for the grid"));
                }
                let hd32 = u(hd)?;
                let q8_binds = |cx: &mut Self| -> Vec<Res> {
                    let mut b = binds.clone();
                    if let Some((gate, n, k)) = gq8 {
                        let gr = cx.res(gate);
                        let (xq, xd) = cx.gate_q8_bufs(outs[0], gate, n, k);
                        b.extend([gr, xq, xd]);
                    }
                    b
                };
                let key = |fin: bool, entry: &'static str| {
                    shaders::attn_key(hd32, fin, entry, tree).flag_if(gq8.is_some(), "Q8")
                };
                match self.fusion.qk_prep[idx] {
                    Some(qp) => self.labelled("+qk_prep", |cx| {
                        cx.qk_prep(op, qp, ins[2], ins[3], ins[kc], ins[kc + 1], ins[0])
                    })?,
                    None => self.step(
                        shaders::attn_key(hd32, fin, "write_kv", tree),
                        params,
                        binds.clone(),
                        wgroups,
                    ),
                }
                if self.g.unread(outs[0]) {
                    // Run only for the cache writes (the drafters' context appends).
                } else if nc {
                    let qg = (t * (nh / nkv)).div_ceil(shaders::ATTN_NC_Q as usize);
                    self.step(
                        shaders::attn_key(hd32, fin, "attn_nc", tree),
                        params,
                        binds.clone(),
                        [u(splits)?, u(nkv)?, u(qg)?],
                    );
                    if !fin {
                        let b = q8_binds(self);
                        self.step(key(fin, "combine"), params, b, [u(nh)?, u(t)?, 1]);
                    }
                } else if fin {
                    let b = q8_binds(self);
                    self.step(key(fin, "attn"), params, b, [u(splits)?, u(nh)?, u(t)?]);
                } else {
                    self.step(
                        shaders::attn_key(hd32, fin, "attn", tree),
                        params,
                        binds.clone(),
                        [u(splits)?, u(nh)?, u(t)?],
                    );
                    let b = q8_binds(self);
                    self.step(key(fin, "combine"), params, b, [u(nh)?, u(t)?, 1]);
                }
            }
            Op::Concat => {
                let y = self.res(outs[0]);
                let mut at = 0;
                for &x in ins {
                    let total = numel(x);
                    let xr = self.res(x);
                    let (groups, gx) = grid(total.div_ceil(256));
                    self.step(
                        ShaderKey::new("copy"),
                        p(&[u(total)?, u(total)?, 0, u(total)?, gx * 256, u(at)?]),
                        vec![xr, y],
                        groups,
                    );
                    at += total;
                }
            }
            Op::DynConv { side, block, group } => {
                let bs = shape(ins[1]);
                let (t, ch) = (shape(ins[0])[0], bs[2]);
                let total = t * ch;
                let x = self.res(ins[0]);
                let (b, bt) = self.whole(op, ins[1])?;
                let d = self.res(ins[2]);
                let y = self.res(outs[0]);
                let groups_c = ch / group;
                let (groups, gx) = grid(total.div_ceil(256));
                self.step(
                    ShaderKey::new("dflash2").entry("dyn_conv").dq("B", bt),
                    p(&[
                        u(total)?,
                        u(ch)?,
                        u(bs[1])?,
                        u(*side)?,
                        u(*block)?,
                        u(*group)?,
                        u(groups_c)?,
                        u(bs[0] * bs[1] * groups_c)?,
                        gx * 256,
                    ]),
                    vec![x, b, d, y],
                    groups,
                );
            }
            Op::SelectorWalk { block } => {
                let (m, k) = (shape(ins[0])[0], shape(ins[0])[1]);
                let r = shape(ins[2])[1];
                if k > 64 {
                    return Err(unsupported(op, format!("{k} candidates (at most 64)")));
                }
                let n = m / block;
                let binds: Vec<Res> = ins
                    .iter()
                    .chain(outs.iter())
                    .map(|&id| self.res(id))
                    .collect();
                let (groups, gx) = grid(n);
                self.step(
                    ShaderKey::new("dflash2").entry("walk").flag("WALK"),
                    p(&[u(n)?, u(*block)?, u(k)?, u(r)?, gx]),
                    binds,
                    groups,
                );
            }
            Op::LogSumExp => {
                let s = shape(ins[0]);
                let (n, w) = (s[0], s[1]);
                if n > 65535 {
                    return Err(unsupported(op, "more than 65535 rows"));
                }
                let (x, out) = (self.res(ins[0]), self.res(outs[0]));
                self.step(
                    ShaderKey::new("lse"),
                    p(&[u(n)?, u(w)?]),
                    vec![x, out],
                    [1, u(n)?, 1],
                );
            }
            Op::ArgMax | Op::TopK { .. } => {
                let s = shape(ins[0]);
                let (n, w) = (s[0], s[1]);
                if n > 65535 {
                    return Err(unsupported(op, "more than 65535 rows"));
                }
                let k = if let Op::TopK { k } = op { *k } else { 1 };
                let groups = w.div_ceil(shaders::SELECT_CHUNK).clamp(1, 256);
                let chunk = w.div_ceil(groups);
                let groups = w.div_ceil(chunk);
                let x = self.res(ins[0]);
                let (vout, iout) = match op {
                    Op::TopK { .. } => (self.res(outs[0]), self.res(outs[1])),
                    _ => (self.scratch(n * 4), self.res(outs[0])),
                };
                if groups == 1 {
                    self.step(
                        shaders::select_key(false, chunk),
                        p(&[u(n)?, u(w)?, 1, u(k)?, u(chunk)?]),
                        vec![x, vout, iout],
                        [1, u(n)?, 1],
                    );
                } else {
                    let vp = self.scratch(n * groups * k * 4);
                    let ip = self.scratch(n * groups * k * 4);
                    self.step(
                        shaders::select_key(false, chunk),
                        p(&[u(n)?, u(w)?, u(groups)?, u(k)?, u(chunk)?]),
                        vec![x, vp, ip],
                        [u(groups)?, u(n)?, 1],
                    );
                    let c = groups * k;
                    self.step(
                        shaders::select_key(true, c),
                        p(&[u(n)?, u(c)?, 1, u(k)?, u(c)?]),
                        vec![vp, ip, vout, iout],
                        [1, u(n)?, 1],
                    );
                }
            }
        }
        Ok(())
    }
}

impl Ctx<'_> {
    /// The attention preparation dispatch of [`fuse::QkPrep`] `qp`: normed and rotated
    /// queries into `q_out`, keys and values `v` into the caches at rows `kpos`.
    #[allow(clippy::too_many_arguments)]
    fn qk_prep(
        &mut self,
        op: &Op,
        qp: fuse::QkPrep,
        v: TensorId,
        kpos: TensorId,
        kc: TensorId,
        vc: TensorId,
        q_out: TensorId,
    ) -> Result<(), BackendError> {
        let g = self.g;
        let u = |v: usize| {
            u32::try_from(v).map_err(|_| unsupported(op, format!("size {v} exceeds u32")))
        };
        let (qn, qr) = qp.params();
        let (Op::RmsNorm { eps }, Op::Rope(rp)) = (&g.nodes[qn].op, &g.nodes[qr].op) else {
            return Err(unsupported(op, "q/k preparation of other ops"));
        };
        let qs = &g.tensor(q_out).shape;
        // Keys alone: no query workgroups (`q_out`, the unread queries, is bound, not written).
        let nh = if qp.q.is_some() { qs[1] } else { 0 };
        let (t, hd) = (qs[0], qs[2]);
        let nkv = g.tensor(g.nodes[qp.k_rope].outputs[0]).shape[1];
        let cap = g.tensor(kc).shape[0];
        let mut freqs = rp.inv_freq();
        if freqs.is_empty() {
            freqs.push(0.0); // a binding may not be empty
        }
        self.out.aux.push(bytemuck::cast_slice(&freqs).to_vec());
        let f = Res::Aux(self.out.aux.len() - 1);
        let (qn, kn) = (&g.nodes[qn], &g.nodes[qp.k_norm]);
        let (qw, qwt) = self.whole(op, qn.inputs[1])?;
        let (kw, kwt) = self.whole(op, kn.inputs[1])?;
        let binds = vec![
            self.res(qn.inputs[0]),
            self.res(kn.inputs[0]),
            self.res(v),
            qw,
            kw,
            self.res(g.nodes[qr].inputs[1]),
            self.res(kpos),
            f,
            self.res(q_out),
            self.res(kc),
            self.res(vc),
        ];
        if nh + nkv > 65535 || t > 65535 {
            return Err(unsupported(op, "too many heads or tokens for the grid"));
        }
        self.step(
            shaders::qk_prep_key(u(hd)?, qwt, kwt),
            p(&[
                u(t)?,
                u(nh)?,
                u(nkv)?,
                u(hd)?,
                u(cap)?,
                u(rp.rot)?,
                eps.to_bits(),
                rp.attention_factor().to_bits(),
            ]),
            binds,
            [u(nh + nkv)?, u(t)?, 1],
        );
        Ok(())
    }
}

/// Fusion groups of `g` (see [`fuse`]) and the buffer plan that makes them safe.
pub fn plan(g: &Graph, caps: &Caps) -> (Fusion, Plan) {
    let lim = fuse::Limits {
        max_binding: caps.max_binding,
        // The int8 GEMV binds two activation buffers (values, scales) where the f32 one binds x.
        max_storage: caps.max_storage - u32::from(caps.int8),
        max_rows: *shaders::GEMV_BUCKETS.last().expect("buckets") as usize,
        max_segments: 4,
    };
    let fusion = if !caps.fusion {
        Fusion::none(g.nodes.len())
    } else {
        fuse::find(g, &lim)
    };
    let plan = Plan::with_uses(g, &fuse::extra_uses(g, &fusion));
    (fusion, plan)
}

/// Lowers every node of `g` (planned by [`plan`]) into dispatches.
pub fn lower(g: &Graph, plan: &Plan, fusion: Fusion, caps: &Caps) -> Result<Lowered, BackendError> {
    let mut cx = Ctx {
        g,
        plan,
        max_binding: caps.max_binding,
        subgroups: caps.subgroups,
        subgroup_min: if caps.subgroups { caps.subgroup_min } else { 0 },
        int8: caps.int8,
        int8_max_n: caps.int8_max_n,
        coop: caps.coop,
        norm_q8: caps.int8 && caps.norm_q8,
        weight_kernels: caps.weight_kernels.clone(),
        attn_nc_mem: caps.attn_nc_mem,
        q8: None,
        q8_out: None,
        qout_scratch: None,
        fusion,
        label: String::new(),
        out: Lowered::default(),
    };
    for i in 0..g.nodes.len() {
        cx.node(i)?;
    }
    // Inputs the nodes never read still need buffers (they may be outputs).
    for id in g.inputs() {
        cx.res(id);
    }
    for (name, id) in &g.outputs {
        if g.tensor(g.storage_root(*id)).kind == TensorKind::Weight {
            return Err(BackendError::Unsupported {
                backend: super::NAME.into(),
                op: "output".into(),
                msg: format!("output {name} is a weight"),
            });
        }
        let r = cx.res(*id);
        cx.out.outputs.push((name.clone(), r, *id));
    }
    Ok(cx.out)
}
