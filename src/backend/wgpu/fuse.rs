//! Dispatch fusion for decode-width steps, decided on the graph before buffer planning (the
//! graph IR itself is unchanged).
//!
//! A group is several `MatMul` nodes that read the same activation with weights of one type
//! and row length (the q/k/v projections, the DeltaNet qkv/z/β/α projections, ffn gate/up):
//! the GEMV kernel runs them as segments of one dispatch. A gate/up pair whose only reader is a
//! `SwiGlu` node also absorbs that node (the kernel writes `silu(gate) · up`; gate and up are
//! never materialised).
//!
//! A `SigmoidMul` read only by one GEMV-width `MatMul` (the attention output gate before o_proj)
//! is folded into that matmul's activation loads (`x · sigmoid(g)` per element).
//!
//! An attention node whose queries and keys are each `Rope(RmsNorm(x))` read by nothing else
//! runs the two norms, the two ropes and its cache writes as one dispatch
//! (`shaders/qkprep.wgsl`) at the attention node: five dispatches become one.
//!
//! The group runs at its first member, so later members (and the folded `SwiGlu`) write their
//! outputs early. [`extra_uses`] keeps every buffer that is live anywhere between the first
//! member and the group's last node live through that last node, so the planner can never
//! hand one of those early-written outputs a slot that is still in use.

use crate::graph::{Graph, Op, TensorId, TensorKind};
use crate::tensor::DType;

/// What the device allows a fused dispatch.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Largest weight binding: fused weights must each fit one binding (no split parts).
    pub max_binding: u64,
    /// Storage buffers one dispatch may bind.
    pub max_storage: u32,
    /// Widest input (rows) the GEMV kernel takes in one pass.
    pub max_rows: usize,
    /// Most weights in one dispatch (segments of the kernel).
    pub max_segments: usize,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Group {
    /// `MatMul` node indices in graph order.
    pub members: Vec<usize>,
    /// The `SwiGlu` node folded in (then `members` is `[gate, up]`).
    pub swiglu: Option<usize>,
    /// `SliceLast` nodes `(first half, second half)` of the first member's output (through a
    /// view with a last dimension of two halves) that the kernel writes directly.
    pub split: Option<(usize, usize)>,
}

impl Group {
    /// The node whose position ends the group's early writes.
    pub fn last(&self) -> usize {
        let m = *self.members.last().expect("a group has members");
        let s = self.split.map_or(0, |(a, b)| a.max(b));
        m.max(s).max(self.swiglu.unwrap_or(0))
    }
}

/// Every group, and each node's part in one.
#[derive(Default)]
pub struct Fusion {
    pub groups: Vec<Group>,
    /// Per node: the group it belongs to and whether it is where the group runs.
    pub role: Vec<Option<(usize, bool)>>,
    /// Per `MatMul` node: the `SigmoidMul` node folded into its activation loads.
    pub gate_of: Vec<Option<usize>>,
    /// Per node: folded into another node's dispatch, emits nothing itself.
    pub folded: Vec<bool>,
    /// Per attention node: its q/k norms and ropes, folded into one preparation dispatch.
    pub qk_prep: Vec<Option<QkPrep>>,
    /// Per group (indices past the end: none): the `ConvStep` node that is the only reader of
    /// the first member's output (the DeltaNet qkv projection); the GEMV runs the conv on its
    /// rows and writes the conv output instead.
    pub conv: Vec<Option<usize>>,
}

/// The nodes an attention node's preparation dispatch (`shaders/qkprep.wgsl`) replaces:
/// `RmsNorm` → `Rope` of its queries and of its keys.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct QkPrep {
    /// The queries' `(RmsNorm, Rope)`; `None` when nothing reads the attention's output (the
    /// drafters' context appends: zero queries, run only for their cache writes): then only
    /// the keys are prepared, by a launch with no query heads.
    pub q: Option<(usize, usize)>,
    pub k_norm: usize,
    pub k_rope: usize,
}

impl QkPrep {
    /// The nodes the preparation replaces.
    pub fn nodes(&self) -> Vec<usize> {
        let mut n = vec![self.k_norm, self.k_rope];
        n.extend(self.q.iter().flat_map(|&(a, b)| [a, b]));
        n
    }

    /// The `(RmsNorm, Rope)` nodes whose parameters the launch takes: the queries', or the
    /// keys' when only keys are prepared (the two agree when both are folded).
    pub fn params(&self) -> (usize, usize) {
        self.q.unwrap_or((self.k_norm, self.k_rope))
    }
}

impl Fusion {
    /// No fusion at all.
    pub fn none(nodes: usize) -> Fusion {
        Fusion {
            groups: Vec::new(),
            role: vec![None; nodes],
            gate_of: vec![None; nodes],
            folded: vec![false; nodes],
            qk_prep: vec![None; nodes],
            conv: Vec::new(),
        }
    }

    /// The conv step folded into group `gi`.
    pub fn conv_of(&self, gi: usize) -> Option<usize> {
        self.conv.get(gi).copied().flatten()
    }

    /// The node whose position ends group `gi`'s early writes.
    pub fn last(&self, gi: usize) -> usize {
        self.groups[gi].last().max(self.conv_of(gi).unwrap_or(0))
    }
}

/// A matmul the fused GEMV can take: `(x root, dtype, K)`.
fn gemv_operand(g: &Graph, node: usize, lim: &Limits) -> Option<(TensorId, DType, usize)> {
    let nd = &g.nodes[node];
    if nd.op != Op::MatMul {
        return None;
    }
    let x = g.tensor(nd.inputs[0]);
    let w = g.tensor(g.storage_root(nd.inputs[1]));
    let (n, k) = (x.shape[0], x.shape[1]);
    let fits = w.kind == TensorKind::Weight
        && super::shaders::WEIGHT_TYPES.contains(&w.dtype)
        && n <= lim.max_rows
        && k.is_multiple_of(4)
        && (w.bytes() as u64) < lim.max_binding.saturating_sub(8);
    fits.then(|| (g.storage_root(nd.inputs[0]), w.dtype, k))
}

/// Readers of each tensor id (direct inputs of nodes).
fn readers(g: &Graph) -> Vec<Vec<usize>> {
    let mut r = vec![Vec::new(); g.tensors.len()];
    for (i, nd) in g.nodes.iter().enumerate() {
        for id in &nd.inputs {
            r[id.index()].push(i);
        }
    }
    r
}

/// `(first half, second half)` slice nodes when `t` is read only through one view whose last
/// dimension the two `SliceLast` nodes split into halves.
fn halves(
    g: &Graph,
    rd: &[Vec<usize>],
    is_output: &dyn Fn(TensorId) -> bool,
    t: TensorId,
) -> Option<(usize, usize)> {
    let only = |t: TensorId| -> Option<usize> {
        (rd[t.index()].len() == 1 && !is_output(t)).then(|| rd[t.index()][0])
    };
    let r = only(t)?;
    if !matches!(g.nodes[r].op, Op::Reshape { .. }) {
        return None;
    }
    let view = g.nodes[r].outputs[0];
    let w = g.tensor(view).last_dim();
    let rs = &rd[view.index()];
    if is_output(view) || rs.len() != 2 || !w.is_multiple_of(2) {
        return None;
    }
    let part = |i: usize| match g.nodes[i].op {
        Op::SliceLast { offset, len } if len == w / 2 => Some(offset),
        _ => None,
    };
    match (part(rs[0])?, part(rs[1])?) {
        (0, o) if o == w / 2 => Some((rs[0], rs[1])),
        (o, 0) if o == w / 2 => Some((rs[1], rs[0])),
        _ => None,
    }
}

/// The `ConvStep` node reading `t` (a group's first output) as its input when it is `t`'s only
/// reader and its taps have a decoder without workgroup tables (matmul.wgsl's CONV).
fn conv_reader(
    g: &Graph,
    rd: &[Vec<usize>],
    is_output: &dyn Fn(TensorId) -> bool,
    t: TensorId,
) -> Option<usize> {
    if rd[t.index()].len() != 1 || is_output(t) {
        return None;
    }
    let c = rd[t.index()][0];
    let nd = &g.nodes[c];
    if nd.op != Op::ConvStep || nd.inputs[0] != t {
        return None;
    }
    let taps = g.tensor(g.storage_root(nd.inputs[1]));
    let plain = matches!(taps.dtype, DType::F32 | DType::F16 | DType::BF16);
    (taps.kind == TensorKind::Weight && plain).then_some(c)
}

/// Finds the groups of `g`.
pub fn find(g: &Graph, lim: &Limits) -> Fusion {
    let mut f = Fusion::none(g.nodes.len());
    let rd = readers(g);
    let is_output = |id: TensorId| g.outputs.iter().any(|(_, o)| *o == id);
    for i in 0..g.nodes.len() {
        if f.role[i].is_some() {
            continue;
        }
        let Some(key) = gemv_operand(g, i, lim) else {
            continue;
        };
        let mut members = vec![i];
        for j in i + 1..g.nodes.len() {
            if members.len() >= lim.max_segments {
                break;
            }
            if f.role[j].is_none() && gemv_operand(g, j, lim) == Some(key) {
                members.push(j);
            }
        }
        // x, then a weight and an output per segment.
        while members.len() > 1 && 1 + 2 * members.len() as u32 > lim.max_storage {
            members.pop();
        }
        let swiglu = if members.len() == 2 {
            let (a, b) = (
                g.nodes[members[0]].outputs[0],
                g.nodes[members[1]].outputs[0],
            );
            let only = |t: TensorId| rd[t.index()].len() == 1 && !is_output(t);
            rd[a.index()].first().copied().filter(|&s| {
                let nd = &g.nodes[s];
                nd.op == Op::SwiGlu
                    && nd.inputs == [a, b]
                    && only(a)
                    && only(b)
                    && 3 <= lim.max_storage
            })
        } else {
            None
        };
        if members.len() < 2 {
            continue;
        }
        // Query/gate halves of the first member (x, weights, outputs and YS).
        let split = if swiglu.is_none() && 2 + 2 * members.len() as u32 <= lim.max_storage {
            halves(g, &rd, &is_output, g.nodes[members[0]].outputs[0])
        } else {
            None
        };
        // x, weights, outputs, the conv taps and state.
        let conv = if swiglu.is_none()
            && split.is_none()
            && 3 + 2 * members.len() as u32 <= lim.max_storage
        {
            conv_reader(g, &rd, &is_output, g.nodes[members[0]].outputs[0])
        } else {
            None
        };
        let gi = f.groups.len();
        for (k, &m) in members.iter().enumerate() {
            f.role[m] = Some((gi, k == 0));
        }
        if let Some(s) = swiglu {
            f.role[s] = Some((gi, false));
        }
        if let Some((a, b)) = split {
            f.folded[a] = true;
            f.folded[b] = true;
        }
        if let Some(c) = conv {
            f.folded[c] = true;
        }
        f.groups.push(Group {
            members,
            swiglu,
            split,
        });
        f.conv.push(conv);
    }
    // x · sigmoid(g) → (reshape) → a lone matmul.
    for j in 0..g.nodes.len() {
        if f.role[j].is_some() || gemv_operand(g, j, lim).is_none() {
            continue;
        }
        let mut src = g.nodes[j].inputs[0];
        while let TensorKind::Node { node, .. } = g.tensor(src).kind {
            let nd = &g.nodes[node];
            if rd[src.index()].len() != 1 || is_output(src) {
                break;
            }
            match nd.op {
                Op::Reshape { .. } => src = nd.inputs[0],
                Op::SigmoidMul => {
                    // x, g, the weight and the output.
                    if 4 <= lim.max_storage {
                        f.gate_of[j] = Some(node);
                        f.folded[node] = true;
                    }
                    break;
                }
                _ => break,
            }
        }
    }
    // RmsNorm → Rope of the queries and of the keys → attention.
    for a in 0..g.nodes.len() {
        if let Some(qp) = qk_prep(g, &rd, &is_output, a, lim) {
            for n in qp.nodes() {
                f.folded[n] = true;
            }
            f.qk_prep[a] = Some(qp);
        }
    }
    f
}

/// The q/k preparation of attention node `a` when its queries and keys are each
/// `Rope(RmsNorm(x))` read by nothing else, with one position input and rope parameters.
fn qk_prep(
    g: &Graph,
    rd: &[Vec<usize>],
    is_output: &dyn Fn(TensorId) -> bool,
    a: usize,
    lim: &Limits,
) -> Option<QkPrep> {
    let nd = &g.nodes[a];
    // Queries, keys, values, norm weights, positions ×2, frequencies, Q, both caches.
    // Every attention kind writes its new k/v rows at their positions before attending, so the
    // drafters' non-causal blocks fold the same way as the target's causal rows.
    let attention = matches!(
        nd.op,
        Op::Attention(_) | Op::AttentionNonCausal { .. } | Op::AttentionTree(_)
    );
    if !attention || lim.max_storage < 11 {
        return None;
    }
    // The node producing `t` when `a` (or that node's single reader) is its only reader.
    let sole = |t: TensorId, op: fn(&Op) -> bool| -> Option<usize> {
        let TensorKind::Node { node, .. } = g.tensor(t).kind else {
            return None;
        };
        (rd[t.index()].len() == 1 && !is_output(t) && op(&g.nodes[node].op)).then_some(node)
    };
    let chain = |t| {
        let r = sole(t, |o| matches!(o, Op::Rope(_)))?;
        Some((
            sole(g.nodes[r].inputs[0], |o| matches!(o, Op::RmsNorm { .. }))?,
            r,
        ))
    };
    let (k_norm, k_rope) = chain(nd.inputs[1])?;
    let q = match chain(nd.inputs[0]) {
        Some(q) => Some(q),
        // Queries nobody sees (the output is unread): prepare the keys alone.
        None if g.unread(nd.outputs[0]) => None,
        None => return None,
    };
    let (q_norm, q_rope) = q.unwrap_or((k_norm, k_rope));
    let same_rope = g.nodes[q_rope].op == g.nodes[k_rope].op
        && g.nodes[q_rope].inputs[1] == g.nodes[k_rope].inputs[1];
    let same_eps = g.nodes[q_norm].op == g.nodes[k_norm].op;
    let hd = g.tensor(nd.inputs[0]).last_dim();
    let whole = |n: usize| {
        let w = g.tensor(g.storage_root(g.nodes[n].inputs[1]));
        w.kind == TensorKind::Weight && w.numel() == hd
    };
    (same_rope && same_eps && whole(q_norm) && whole(k_norm)).then_some(QkPrep {
        q,
        k_norm,
        k_rope,
    })
}

/// The extra reads that make running each group at its first member safe: every node output
/// live at any point in `[first, last)` stays live through `last`.
pub fn extra_uses(g: &Graph, f: &Fusion) -> Vec<(TensorId, usize)> {
    let mut last_use = crate::graph::planner::last_uses(g);
    // (root tensor, producing node) of every slot-holding tensor.
    let owned: Vec<(TensorId, usize)> = g
        .nodes
        .iter()
        .enumerate()
        .filter(|(_, nd)| !matches!(nd.op, Op::Reshape { .. }))
        .flat_map(|(i, nd)| nd.outputs.iter().map(move |o| (*o, i)))
        .collect();
    let mut extra = Vec::new();
    // The q/k preparation reads the norms' inputs at the attention node.
    for (a, qp) in f.qk_prep.iter().enumerate() {
        if let Some(qp) = qp {
            let norms = [Some(qp.k_norm), qp.q.map(|(n, _)| n)];
            for n in norms.into_iter().flatten() {
                extra.push((g.nodes[n].inputs[0], a));
            }
        }
    }
    // A folded gate's operands are read by the matmul instead.
    for (j, s) in f.gate_of.iter().enumerate() {
        if let Some(s) = s {
            for id in &g.nodes[*s].inputs {
                extra.push((*id, j));
            }
        }
    }
    // Those reads count below: a folded gate's operands (last read by the `SigmoidMul`, which
    // may come before a group's first member) are read by the GEMV, which may come inside the
    // group's span, where the group's early-written outputs must not take their slots.
    for &(t, n) in &extra {
        let r = g.storage_root(t).index();
        if last_use[r] != usize::MAX {
            last_use[r] = last_use[r].max(n);
        }
    }
    // Until nothing changes: a tensor kept live into one group's span may then reach into
    // another's (groups gather GEMVs from anywhere later in the graph, so spans overlap).
    let mut changed = true;
    while changed {
        changed = false;
        for gi in 0..f.groups.len() {
            let (first, last) = (f.groups[gi].members[0], f.last(gi));
            for &(t, p) in &owned {
                let lu = &mut last_use[t.index()];
                if p < last && *lu >= first && *lu < last {
                    *lu = last;
                    extra.push((t, last));
                    changed = true;
                }
            }
        }
    }
    extra
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{GraphBuilder, Plan};

    /// A group's first output read by a conv step is folded into the group; read by a
    /// one-input op it is not (and nothing is indexed past that op's inputs).
    #[test]
    fn conv_epilogue_only_for_conv_steps() {
        for conv in [true, false] {
            let mut b = GraphBuilder::new();
            let x = b.input("x", DType::F32, &[1, 64]).unwrap();
            let wa = b.weight("a", DType::Q8_0, &[32, 64]).unwrap();
            let wb = b.weight("b", DType::Q8_0, &[32, 64]).unwrap();
            let a = b.matmul(x, wa).unwrap();
            let y = b.matmul(x, wb).unwrap();
            let r = if conv {
                let taps = b.weight("taps", DType::F32, &[32, 4]).unwrap();
                let st = b.state("st", &[3, 32]).unwrap();
                b.conv_step(a, taps, st).unwrap()
            } else {
                b.argmax(a).unwrap()
            };
            b.output("r", r).unwrap();
            b.output("y", y).unwrap();
            let g = b.build();
            let f = find(&g, &LIM);
            assert_eq!(f.groups.len(), 1);
            assert_eq!(f.conv_of(0).is_some(), conv);
            assert_eq!(f.folded.iter().filter(|x| **x).count(), usize::from(conv));
            if conv {
                assert_eq!(f.last(0), g.nodes.len() - 1);
            }
        }
    }

    /// A folded gate's GEMV inside a group's span reads the gate operands there, after their
    /// last read in the graph (the `SigmoidMul`, before the group): they stay live through
    /// the group's last member, whose output the group writes at its first.
    #[test]
    fn gate_reads_inside_a_group_span() {
        let mut b = GraphBuilder::new();
        let x0 = b.input("x0", DType::F32, &[1, 64]).unwrap();
        let x = b.input("x", DType::F32, &[1, 64]).unwrap();
        let a = b.add(x0, x0).unwrap();
        let gt = b.add(x0, x).unwrap();
        let s = b.sigmoid_mul(a, gt).unwrap();
        let w1 = b.weight("w1", DType::Q8_0, &[64, 64]).unwrap();
        let w3 = b.weight("w3", DType::F16, &[32, 64]).unwrap();
        let w2 = b.weight("w2", DType::Q8_0, &[64, 64]).unwrap();
        let m1 = b.matmul(x, w1).unwrap();
        let y = b.matmul(s, w3).unwrap();
        let m2 = b.matmul(x, w2).unwrap();
        b.output("m1", m1).unwrap();
        b.output("y", y).unwrap();
        b.output("m2", m2).unwrap();
        let g = b.build();
        let f = find(&g, &LIM);
        let idx = |t: TensorId| match g.tensor(t).kind {
            TensorKind::Node { node, .. } => node,
            _ => unreachable!(),
        };
        assert_eq!(f.groups.len(), 1);
        assert_eq!(f.groups[0].members, vec![idx(m1), idx(m2)]);
        assert_eq!(f.gate_of[idx(y)], Some(idx(s)));
        let extra = extra_uses(&g, &f);
        let plan = Plan::with_uses(&g, &extra);
        let slot = |t: TensorId| plan.slot_of[g.storage_root(t).index()];
        for t in [a, gt] {
            assert!(extra.contains(&(t, idx(m2))), "{}", g.tensor(t).name);
            assert_ne!(slot(t), slot(m2), "{}", g.tensor(t).name);
        }
    }

    /// Queries and keys each `Rope(RmsNorm(x))`: both fold. Raw queries: the keys fold alone
    /// when nothing reads the attention's output, and nothing folds when something does.
    #[test]
    fn qk_prep_folds_keys_alone_only_for_unread_outputs() {
        for (q_chain, read) in [(true, true), (false, false), (false, true)] {
            let mut b = GraphBuilder::new();
            let (nh, nkv, hd) = (4, 2, 16);
            let q = b.input("q", DType::F32, &[3, nh, hd]).unwrap();
            let k = b.input("k", DType::F32, &[3, nkv, hd]).unwrap();
            let v = b.input("v", DType::F32, &[3, nkv, hd]).unwrap();
            let pos = b.input("pos", DType::I32, &[3]).unwrap();
            let w = b.weight("n", DType::F32, &[hd]).unwrap();
            let kc = b.state("kc", &[8, nkv, hd]).unwrap();
            let vc = b.state("vc", &[8, nkv, hd]).unwrap();
            let q = if q_chain {
                let q = b.rms_norm(q, w, 1e-6).unwrap();
                b.rope(q, pos, 8, 1e4).unwrap()
            } else {
                q
            };
            let kn = b.rms_norm(k, w, 1e-6).unwrap();
            let kr = b.rope(kn, pos, 8, 1e4).unwrap();
            let p = crate::graph::AttnParams {
                n_heads: nh,
                n_kv_heads: nkv,
                head_dim: hd,
                scale: 0.25,
            };
            let o = b.attention_non_causal(p, 0, q, kr, v, pos, kc, vc).unwrap();
            if read {
                b.output("o", o).unwrap();
            }
            let g = b.build();
            let f = find(&g, &LIM);
            let node = |t: TensorId| match g.tensor(t).kind {
                TensorKind::Node { node, .. } => node,
                _ => unreachable!(),
            };
            let a = node(o);
            let got = f.qk_prep[a];
            match (q_chain, read) {
                (true, _) => assert_eq!(got.and_then(|qp| qp.q).map(|(_, r)| r), Some(node(q))),
                (false, false) => {
                    let qp = got.expect("keys alone fold");
                    assert_eq!((qp.q, qp.k_norm, qp.k_rope), (None, node(kn), node(kr)));
                    assert_eq!(qp.params(), (node(kn), node(kr)));
                    assert!(f.folded[node(kn)] && f.folded[node(kr)]);
                }
                (false, true) => assert_eq!(got, None),
            }
        }
    }

    const LIM: Limits = Limits {
        max_binding: 1 << 30,
        max_storage: 32,
        max_rows: 8,
        max_segments: 4,
    };

    /// x → (a, b) → swiglu → matmul c; plus q/k/v style projections with views in between.
    #[test]
    fn groups_and_safe_plans() {
        let mut b = GraphBuilder::new();
        let x = b.input("x", DType::F32, &[1, 64]).unwrap();
        let wa = b.weight("a", DType::Q8_0, &[96, 64]).unwrap();
        let wb = b.weight("b", DType::Q8_0, &[96, 64]).unwrap();
        let wc = b.weight("c", DType::Q8_0, &[64, 96]).unwrap();
        let ga = b.matmul(x, wa).unwrap();
        let up = b.matmul(x, wb).unwrap();
        let s = b.swiglu(ga, up).unwrap();
        let y = b.matmul(s, wc).unwrap();
        let wa = b.weight("a2", DType::Q8_0, &[96, 64]).unwrap();
        let wb = b.weight("b2", DType::Q8_0, &[96, 64]).unwrap();
        let wd = b.weight("d2", DType::F16, &[32, 64]).unwrap();
        // Three projections of y, one of another type, views and a copy in between.
        let q = b.matmul(y, wa).unwrap();
        let qr = b.reshape(q, &[1, 2, 48]).unwrap();
        let q0 = b.slice_last(qr, 0, 24).unwrap();
        let k = b.matmul(y, wb).unwrap();
        let d = b.matmul(y, wd).unwrap();
        let sum = b.add(k, q).unwrap();
        b.output("q0", q0).unwrap();
        b.output("sum", sum).unwrap();
        b.output("d", d).unwrap();
        let g = b.build();
        let f = find(&g, &LIM);
        let idx = |t: TensorId| match g.tensor(t).kind {
            TensorKind::Node { node, .. } => node,
            _ => unreachable!(),
        };
        assert_eq!(
            f.groups[0],
            Group {
                members: vec![idx(ga), idx(up)],
                swiglu: Some(idx(s)),
                split: None,
            }
        );
        // q and k share x = y and Q8_0; d is F16 and stays alone.
        assert_eq!(f.groups[1].members, vec![idx(q), idx(k)]);
        assert_eq!(f.groups[1].swiglu, None);
        assert!(f.role[idx(d)].is_none());
        // The plan with the extra uses never gives an early-written output a slot that holds
        // a value live between the group's first and last node.
        let plan = Plan::with_uses(&g, &extra_uses(&g, &f));
        let slot = |t: TensorId| plan.slot_of[g.storage_root(t).index()];
        for (early, from) in [(s, ga), (k, q)] {
            let (first, last) = (idx(from), idx(early));
            for nd in &g.nodes[first..last] {
                for t in nd.inputs.iter().chain(&nd.outputs) {
                    if g.storage_root(*t) != g.storage_root(early) && slot(*t).is_some() {
                        assert_ne!(slot(*t), slot(early), "{}", g.tensor(*t).name);
                    }
                }
            }
        }
    }
}
