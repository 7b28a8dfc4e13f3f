//! Lowering of `MatMul`: the GEMV kernel for decode and verify widths (alone, or one dispatch
//! for a fused group, see [`super::fuse`]) and the tiled kernel beyond.

use super::lower::{Ctx, Res, p, unsupported};
use super::shaders::{self, GEMV_BUCKETS};
use crate::backend::BackendError;
use crate::graph::{Graph, Op};
use crate::tensor::DType;

/// One weight of a GEMV dispatch and where its rows go.
struct Seg {
    w: Res,
    rows: usize,
    ldy: usize,
    col_off: usize,
    y: Res,
}

fn u(op: &Op, v: usize) -> Result<u32, BackendError> {
    u32::try_from(v).map_err(|_| unsupported(op, format!("size {v} exceeds u32")))
}

impl Ctx<'_> {
    /// One GEMV dispatch over `segs` (all of type `t`, rows of `rb` bytes, K = `k`) for `n`
    /// input rows; `pair`: segs are gate and up and the output is silu(gate) · up.
    /// `gate`: x is read as `x · sigmoid(gate)` (a folded `SigmoidMul`); `split`: segment 0's
    /// second halves go to this output, `(period, half)` (see matmul.wgsl).
    #[allow(clippy::too_many_arguments)]
    fn gemv(
        &mut self,
        op: &Op,
        t: DType,
        n: usize,
        k: usize,
        rb: usize,
        x: Res,
        gate: Option<Res>,
        segs: &[Seg],
        pair: bool,
        split: Option<(Res, usize, usize)>,
    ) -> Result<(), BackendError> {
        let items = k / shaders::item_elems(t);
        let shape = shaders::gemv_shape(n, items);
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
        let (groups, gx) = super::lower::grid(first);
        params[3] = gx;
        let mut binds = vec![x];
        binds.extend(gate);
        binds.extend(segs.iter().map(|s| s.w));
        if pair {
            binds.push(segs[0].y);
        } else {
            binds.extend(segs.iter().map(|s| s.y));
        }
        binds.extend(split.map(|s| s.0));
        let key = shaders::gemv_key(
            t,
            shape,
            self.subgroups,
            k.is_multiple_of(4),
            segs.len(),
            pair,
        );
        let key = key
            .flag_if(gate.is_some(), "XGATE")
            .flag_if(split.is_some(), "SPLIT");
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
        let (x, gate) = match self.fusion.gate_of[node] {
            Some(s) => {
                let si = g.nodes[s].inputs.clone();
                (self.res(si[0]), Some(self.res(si[1])))
            }
            None => (self.res(nd.inputs[0]), None),
        };
        let y = self.res(nd.outputs[0]);
        let gemv = n <= *GEMV_BUCKETS.last().expect("buckets") as usize;
        for (r, first, rows) in w.parts {
            if gemv {
                let seg = Seg {
                    w: r,
                    rows,
                    ldy: m,
                    col_off: first,
                    y,
                };
                self.gemv(op, w.dtype, n, k, w.row_bytes, x, gate, &[seg], false, None)?;
            } else {
                let tn = shaders::tile_n(n);
                let (gx, gy) = (u(op, rows.div_ceil(64))?, u(op, n.div_ceil(tn as usize))?);
                if gx > 65535 || gy > 65535 {
                    return Err(unsupported(
                        op,
                        format!("{n} × {rows} outputs exceed the grid"),
                    ));
                }
                self.step(
                    shaders::tiled_key(w.dtype, tn),
                    p(&[
                        u(op, n)?,
                        u(op, k)?,
                        u(op, rows)?,
                        u(op, w.row_bytes)?,
                        u(op, m)?,
                        u(op, first)?,
                    ]),
                    vec![x, r, y],
                    [gx, gy, 1],
                );
            }
        }
        Ok(())
    }

    /// Fusion group `gi` as one GEMV dispatch (run at its first member).
    pub(super) fn fused(&mut self, gi: usize) -> Result<(), BackendError> {
        let g: &Graph = self.g;
        let grp = self.fusion.groups[gi].clone();
        let first = &g.nodes[grp.members[0]];
        let op = &first.op;
        let xs = g.tensor(first.inputs[0]).shape.clone();
        let (n, k) = (xs[0], xs[1]);
        let x = self.res(first.inputs[0]);
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
        self.gemv(
            op,
            dtype,
            n,
            k,
            rb,
            x,
            None,
            &segs,
            grp.swiglu.is_some(),
            split,
        )
    }
}
