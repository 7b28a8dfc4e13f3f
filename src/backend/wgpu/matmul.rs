//! Lowering of `MatMul`: the GEMV kernel for decode and verify widths (alone, or one dispatch
//! for a fused group, see [`super::fuse`]) and the tiled kernel beyond. With int8 activations
//! (`Caps::int8`) a quantize dispatch precedes the GEMV, skipped when the latest one already
//! quantized the same tensor (the projections of one x that are not fused).

use super::lower::{Ctx, Q8Buf, Res, p, unsupported};
use super::shaders::{self, GEMV_BUCKETS, INT8_TYPES, ShaderKey};
use crate::backend::BackendError;
use crate::graph::{Graph, Op, TensorId, TensorKind};
use crate::tensor::DType;

/// A GEMV's activations: buffers and the tensors they hold (x and a folded sigmoid gate).
#[derive(Clone, Copy)]
struct Src {
    x: Res,
    gate: Option<Res>,
    ids: (TensorId, Option<TensorId>),
}

/// One weight of a GEMV dispatch and where its rows go.
struct Seg {
    w: Res,
    rows: usize,
    ldy: usize,
    col_off: usize,
    y: Res,
}

/// What a GEMV dispatch does besides storing its sums.
#[derive(Clone, Copy, Default)]
struct Epi {
    /// The segments are gate and up and the output is silu(gate) · up.
    pair: bool,
    /// Segment 0's second halves go to this output: `(output, period, half)`.
    split: Option<(Res, usize, usize)>,
    /// Segment 0 feeds a conv step (CONV): `(taps, their type, state, taps per channel)`.
    conv: Option<(Res, DType, Res, usize)>,
    /// The SwiGLU output is also quantized (QOUT): `[values, counters, packed int8, scales]`.
    qout: Option<[Res; 4]>,
}

fn u(op: &Op, v: usize) -> Result<u32, BackendError> {
    u32::try_from(v).map_err(|_| unsupported(op, format!("size {v} exceeds u32")))
}

impl Ctx<'_> {
    /// Whether a matmul of `n` rows over K = `k` takes the int8-activation path.
    fn int8_applies(&self, t: DType, n: usize, k: usize) -> bool {
        self.int8
            && INT8_TYPES.contains(&t)
            && k.is_multiple_of(32)
            && n <= self.int8_max_n
            && !self.coop_applies(n)
    }

    /// Whether a matmul of `n` rows takes the cooperative-matrix kernel.
    fn coop_applies(&self, n: usize) -> bool {
        self.coop && n >= shaders::COOP_MIN_N && !self.g.rows_match_decode
    }

    /// The int8 activation buffers sized for N = `n`, K = `k`: `(packed values, scales)`.
    fn q8_bufs(&mut self, n: usize, k: usize) -> (Q8Buf, Res, Res) {
        let q = match self.q8 {
            Some(q) => q,
            None => Q8Buf {
                xq: self.scratch_index(0),
                xd: self.scratch_index(0),
                holds: None,
            },
        };
        self.grow_scratch(q.xq, n * k);
        self.grow_scratch(q.xd, n * k / 32 * 8);
        (q, Res::Scratch(q.xq), Res::Scratch(q.xd))
    }

    /// `(N, K)` of an int8-activation GEMV that reads `y` (a node output) as its x, if any:
    /// a norm writing `y` can quantize it for that GEMV ([`Ctx::norm_q8_bufs`]).
    pub(super) fn int8_reader(&mut self, y: TensorId) -> Option<(usize, usize)> {
        let g: &Graph = self.g;
        let root = g.storage_root(y);
        g.nodes.iter().enumerate().find_map(|(i, nd)| {
            if nd.op != Op::MatMul
                || self.fusion.gate_of[i].is_some()
                || g.storage_root(nd.inputs[0]) != root
            {
                return None;
            }
            let xs = &g.tensor(nd.inputs[0]).shape;
            let w = g.tensor(g.storage_root(nd.inputs[1]));
            let (n, k) = (xs[0], xs[1]);
            (w.kind == TensorKind::Weight && self.int8_applies(w.dtype, n, k)).then_some((n, k))
        })
    }

    /// `(gate, N, K)` when `y` (an attention output) is read only by a `SigmoidMul` folded
    /// into an int8-activation GEMV (o_proj): the attention kernel can quantize `y · sigmoid(gate)`
    /// for it ([`Ctx::gate_q8_bufs`]).
    pub(super) fn gated_int8_reader(&mut self, y: TensorId) -> Option<(TensorId, usize, usize)> {
        let g: &Graph = self.g;
        let root = g.storage_root(y);
        (0..g.nodes.len()).find_map(|j| {
            let s = self.fusion.gate_of[j]?;
            let si = &g.nodes[s].inputs;
            let nd = &g.nodes[j];
            let xs = &g.tensor(nd.inputs[0]).shape;
            let w = g.tensor(g.storage_root(nd.inputs[1]));
            let (n, k) = (xs[0], xs[1]);
            let gate = g.tensor(g.storage_root(si[1]));
            (g.storage_root(si[0]) == root
                && gate.kind != TensorKind::State
                && gate.numel() == g.tensor(root).numel()
                && w.kind == TensorKind::Weight
                && self.int8_applies(w.dtype, n, k))
            .then_some((si[1], n, k))
        })
    }

    /// The int8 buffers an attention kernel writing `y` fills with `y · sigmoid(gate)` (N =
    /// `n`, K = `k`); from then on they hold that product (the o_proj GEMV skips its quantize).
    pub(super) fn gate_q8_bufs(
        &mut self,
        y: TensorId,
        gate: TensorId,
        n: usize,
        k: usize,
    ) -> (Res, Res) {
        let (mut q, xq, xd) = self.q8_bufs(n, k);
        let g = self.g;
        q.holds = Some((g.storage_root(y), Some(g.storage_root(gate)), n, k));
        self.q8 = Some(q);
        (xq, xd)
    }

    /// The int8 buffers a norm that writes `y` (N = `n`, K = `k` as its GEMV reads it) fills
    /// in the same dispatch; from then on they hold `y` (its GEMVs skip the quantize).
    pub(super) fn norm_q8_bufs(&mut self, y: TensorId, n: usize, k: usize) -> (Res, Res) {
        let (mut q, xq, xd) = self.q8_bufs(n, k);
        q.holds = Some((self.g.storage_root(y), None, n, k));
        self.q8 = Some(q);
        (xq, xd)
    }

    /// Quantizes `src` (N = `n`, K = `k`) into the int8 buffers unless they hold it already:
    /// `(packed values, scales)`.
    fn quantize(
        &mut self,
        op: &Op,
        src: Src,
        n: usize,
        k: usize,
    ) -> Result<(Res, Res), BackendError> {
        let blocks = n * k / 32;
        let (mut q, xq, xd) = self.q8_bufs(n, k);
        let key = (src.ids.0, src.ids.1, n, k);
        // A GEMV quantized its own output (QOUT) for this one: read that pair.
        if let Some(o) = self.q8_out
            && o.holds == Some(key)
            && matches!(self.g.tensor(key.0).kind, TensorKind::Node { .. })
        {
            self.q8 = Some(q);
            return Ok((Res::Scratch(o.xq), Res::Scratch(o.xd)));
        }
        // Node outputs and inputs are written once per run; a state may change in between.
        let stable = |id: TensorId| self.g.tensor(id).kind != TensorKind::State;
        let fresh = q.holds == Some(key) && stable(src.ids.0) && src.ids.1.is_none_or(stable);
        if !fresh {
            // Eight threads per block (one vec4 each), 64 per workgroup.
            let (groups, gx) = super::lower::grid(blocks.div_ceil(8));
            let mut binds = vec![src.x];
            binds.extend(src.gate);
            binds.extend([xq, xd]);
            let sk = ShaderKey::new("quantize").flag_if(src.gate.is_some(), "XGATE");
            let params = p(&[u(op, blocks)?, gx * 64]);
            self.labelled("quantize", |cx| cx.step(sk, params, binds, groups));
            q.holds = Some(key);
        }
        self.q8 = Some(q);
        Ok((xq, xd))
    }

    /// One GEMV over `segs` (all of type `t`, rows of `rb` bytes, K = `k`) for `n` input rows:
    /// one dispatch, or with int8 activations a quantize dispatch and one GEMV per
    /// [`GEMV_BUCKETS`]-wide pass. `pair`: segs are gate and up and the output is
    /// silu(gate) · up, see [`Epi`]. `src.gate`: x is read as `x · sigmoid(gate)` (a folded
    /// `SigmoidMul`).
    #[allow(clippy::too_many_arguments)]
    fn gemv(
        &mut self,
        op: &Op,
        t: DType,
        n: usize,
        k: usize,
        rb: usize,
        src: Src,
        segs: &[Seg],
        epi: Epi,
    ) -> Result<(), BackendError> {
        let widest = *GEMV_BUCKETS.last().expect("buckets") as usize;
        if epi.conv.is_some() && n > widest {
            return Err(unsupported(op, "a conv epilogue over several GEMV passes"));
        }
        if !self.int8_applies(t, n, k) {
            let x = vec![src.x];
            let x = x.into_iter().chain(src.gate).collect();
            return self.gemv_pass(op, t, n, k, rb, x, segs, epi, None);
        }
        let (xq, xd) = self.quantize(op, src, n, k)?;
        for n0 in (0..n).step_by(widest) {
            let rows = (n - n0).min(widest);
            self.gemv_pass(op, t, rows, k, rb, vec![xq, xd], segs, epi, Some(n0))?;
        }
        Ok(())
    }

    /// One GEMV dispatch reading activations `x` (x and gate, or with `n0` int8 rows
    /// `n0 .. n0 + n` of the quantized buffers).
    #[allow(clippy::too_many_arguments)]
    fn gemv_pass(
        &mut self,
        op: &Op,
        t: DType,
        n: usize,
        k: usize,
        rb: usize,
        x: Vec<Res>,
        segs: &[Seg],
        epi: Epi,
        n0: Option<usize>,
    ) -> Result<(), BackendError> {
        let Epi {
            pair,
            split,
            conv,
            qout,
        } = epi;
        let items = k / shaders::item_elems(t);
        let rows = if pair {
            segs[0].rows
        } else {
            segs.iter().map(|s| s.rows).sum()
        };
        let shape = shaders::gemv_shape_for(n, items, rows);
        let rw = if pair { shape.r / 2 } else { shape.r } as usize;
        let mut params = vec![u(op, n)?, u(op, k)?, u(op, rb)?, 0];
        let mut first = 0usize;
        for s in segs {
            params.extend([
                u(op, first)?,
                u(op, s.rows)?,
                u(op, s.ldy)?,
                u(op, s.col_off)?,
            ]);
            if !pair {
                first += s.rows.div_ceil(rw);
            }
        }
        if pair {
            first = segs[0].rows.div_ceil(rw);
        }
        if let Some((_, per, half)) = split {
            params.resize(20, 0);
            params.extend([u(op, per)?, u(op, half)?]);
        }
        if let Some(n0) = n0 {
            params.resize(22, 0);
            params.push(u(op, n0)?);
        }
        if let Some((.., kw)) = conv {
            params.resize(23, 0);
            params.push(u(op, kw)?);
        }
        let (groups, gx) = super::lower::grid(first);
        params[3] = gx;
        let gate = x.len() == 2 && n0.is_none();
        let mut binds = x;
        binds.extend(segs.iter().map(|s| s.w));
        if pair {
            binds.push(segs[0].y);
        } else {
            binds.extend(segs.iter().map(|s| s.y));
        }
        binds.extend(split.map(|s| s.0));
        if let Some((w, _, st, _)) = conv {
            binds.extend([w, st]);
        }
        if let Some(q) = qout {
            if !pair || n0 != Some(0) || 32 % rw != 0 {
                return Err(unsupported(op, "a quantized output of this GEMV"));
            }
            binds.extend(q);
        }
        let key = shaders::gemv_key(
            t,
            shape,
            self.subgroups,
            k.is_multiple_of(4),
            segs.len(),
            pair,
        );
        let key = key
            .flag_if(gate, "XGATE")
            .flag_if(split.is_some(), "SPLIT")
            .flag_if(n0.is_some(), "Q8");
        let key = match conv {
            Some((_, wt, ..)) => key.flag("CONV").dq("CW", wt),
            None => key,
        }
        .flag_if(qout.is_some(), "QOUT");
        self.step(key, p(&params), binds, groups);
        Ok(())
    }

    /// A `MatMul` node on its own: one dispatch per weight part.
    pub(super) fn matmul(&mut self, node: usize) -> Result<(), BackendError> {
        let g: &Graph = self.g;
        let nd = &g.nodes[node];
        let op = &nd.op;
        let xs = g.tensor(nd.inputs[0]).shape.clone();
        let (n, k) = (xs[0], xs[1]);
        let m = g.tensor(nd.inputs[1]).shape[0];
        let w = self.woperand(op, nd.inputs[1])?;
        // A folded gate: read the SigmoidMul's operands instead of its (unwritten) product.
        let src = match self.fusion.gate_of[node] {
            Some(s) => {
                let si = g.nodes[s].inputs.clone();
                Src {
                    x: self.res(si[0]),
                    gate: Some(self.res(si[1])),
                    ids: (g.storage_root(si[0]), Some(g.storage_root(si[1]))),
                }
            }
            None => Src {
                x: self.res(nd.inputs[0]),
                gate: None,
                ids: (g.storage_root(nd.inputs[0]), None),
            },
        };
        let y = self.res(nd.outputs[0]);
        // A cooperative-matrix width is wider than any GEMV bucket and off the int8 path.
        let gemv = n <= *GEMV_BUCKETS.last().expect("buckets") as usize
            || self.int8_applies(w.dtype, n, k);
        for (r, first, rows) in w.parts {
            if gemv {
                let seg = Seg {
                    w: r,
                    rows,
                    ldy: m,
                    col_off: first,
                    y,
                };
                self.gemv(op, w.dtype, n, k, w.row_bytes, src, &[seg], Epi::default())?;
                continue;
            }
            // Both tiled kernels cover 64 weight rows per workgroup.
            let (key, tn) = if self.coop_applies(n) {
                (shaders::coop_key(w.dtype), shaders::COOP_TILE)
            } else {
                let tn = shaders::tile_n(n);
                (shaders::tiled_key(w.dtype, tn), tn as usize)
            };
            let (gx, gy) = (u(op, rows.div_ceil(64))?, u(op, n.div_ceil(tn))?);
            if gx > 65535 || gy > 65535 {
                return Err(unsupported(
                    op,
                    format!("{n} × {rows} outputs exceed the grid"),
                ));
            }
            self.step(
                key,
                p(&[
                    u(op, n)?,
                    u(op, k)?,
                    u(op, rows)?,
                    u(op, w.row_bytes)?,
                    u(op, m)?,
                    u(op, first)?,
                ]),
                vec![src.x, r, y],
                [gx, gy, 1],
            );
        }
        Ok(())
    }

    /// The QOUT buffers of a gate/up GEMV (weights `t`, `n` rows over K = `k`) writing the
    /// SwiGLU output `y` of `m` values per row, when an int8 GEMV reads `y` (then the second
    /// int8 pair holds `y` from this dispatch on), or `None`.
    fn qout_bufs(
        &mut self,
        y: TensorId,
        t: DType,
        n: usize,
        k: usize,
        m: usize,
    ) -> Option<[Res; 4]> {
        let widest = *GEMV_BUCKETS.last().expect("buckets") as usize;
        let rw = shaders::gemv_shape_for(n, k / shaders::item_elems(t), m).r as usize / 2;
        if !self.int8_applies(t, n, k) || n > widest || 32 % rw.max(1) != 0 {
            return None;
        }
        if self.int8_reader(y) != Some((n, m)) {
            return None;
        }
        let mut o = self.q8_out.unwrap_or(Q8Buf {
            xq: self.scratch_index(0),
            xd: self.scratch_index(0),
            holds: None,
        });
        self.grow_scratch(o.xq, n * m);
        self.grow_scratch(o.xd, n * m / 32 * 8);
        o.holds = Some((self.g.storage_root(y), None, n, m));
        self.q8_out = Some(o);
        let (vals, counts) = match self.qout_scratch {
            Some(s) => s,
            None => (self.scratch_index(0), self.scratch_index(0)),
        };
        self.qout_scratch = Some((vals, counts));
        self.grow_scratch(vals, n * m * 4);
        self.grow_scratch(counts, m / 32 * 4);
        Some([
            Res::Scratch(vals),
            Res::Scratch(counts),
            Res::Scratch(o.xq),
            Res::Scratch(o.xd),
        ])
    }

    /// Fusion group `gi` as one GEMV dispatch (run at its first member).
    pub(super) fn fused(&mut self, gi: usize) -> Result<(), BackendError> {
        let g: &Graph = self.g;
        let grp = self.fusion.groups[gi].clone();
        let first = &g.nodes[grp.members[0]];
        let op = &first.op;
        let xs = g.tensor(first.inputs[0]).shape.clone();
        let (n, k) = (xs[0], xs[1]);
        let src = Src {
            x: self.res(first.inputs[0]),
            gate: None,
            ids: (g.storage_root(first.inputs[0]), None),
        };
        let mut segs = Vec::new();
        let mut dtype = DType::F32;
        let mut rb = 0;
        for &mi in &grp.members {
            let nd = &g.nodes[mi];
            let w = self.woperand(&nd.op, nd.inputs[1])?;
            let (r, _, rows) = w.parts[0];
            let y = match grp.swiglu {
                Some(s) => self.res(g.nodes[s].outputs[0]),
                None => self.res(nd.outputs[0]),
            };
            (dtype, rb) = (w.dtype, w.row_bytes);
            segs.push(Seg {
                w: r,
                rows,
                ldy: rows,
                col_off: 0,
                y,
            });
        }
        // Query/gate halves: segment 0 writes the two slices' outputs directly.
        let mut split = None;
        if let Some((a, b)) = grp.split {
            let view = g.nodes[a].inputs[0];
            let per = g.tensor(view).last_dim();
            let out_a = g.nodes[a].outputs[0];
            segs[0].y = self.res(out_a);
            segs[0].ldy = g.tensor(out_a).numel() / n;
            split = Some((self.res(g.nodes[b].outputs[0]), per, per / 2));
        }
        // The conv step reading segment 0: its output and state instead of the projection.
        let mut conv = None;
        if let Some(c) = self.fusion.conv_of(gi) {
            let cn = &g.nodes[c];
            let (taps, tt) = self.whole(&cn.op, cn.inputs[1])?;
            let kw = g.tensor(cn.inputs[1]).shape[1];
            segs[0].y = self.res(cn.outputs[0]);
            conv = Some((taps, tt, self.res(cn.inputs[2]), kw));
        }
        let qout = match grp.swiglu {
            Some(sw) => self.qout_bufs(g.nodes[sw].outputs[0], dtype, n, k, segs[0].rows),
            None => None,
        };
        let epi = Epi {
            pair: grp.swiglu.is_some(),
            split,
            conv,
            qout,
        };
        self.gemv(op, dtype, n, k, rb, src, &segs, epi)
    }
}
