// Normalisations over rows of D values, one workgroup per row.
// RMS: y = (x · r) · w, r = 1/sqrt(mean(x²) + eps); ADD: s = x + res, y = rmsnorm(s) · w;
// GATED: y = ((x · r) · w) · silu(z); L2: y = (x · 1/sqrt(Σx² + eps)) · scale.
// V4 (D % 4 == 0): every buffer is read as vec4, four values per thread and step, so a
// 5120-wide decode row is 5 loads per thread of a 256-thread workgroup. The sum of squares is
// reduced with subgroupAdd (SG) or a workgroup-memory tree.
// REG (rows of at most NV vectors per thread): each thread loads all its values (and its
// weights and gates) into registers up front, so every load of the row is in flight at once,
// and writes its outputs from those registers: one memory round trip per row. Without REG
// (wider rows) the kernel loops, reading its values again for the output pass. Both forms sum
// a thread's squares in the same order (vector tid, tid + WG, ...), so they agree bit for bit.
// Q8 (REG, V4, D % 32 == 0, not L2): the kernel also writes y quantized for the int8 GEMV
// (XQ, XD: the layout and rounding of quantize.wgsl, through the same q8block functions),
// replacing the quantize dispatch that would read y back.
// PART (REG): NV workgroups per row (decode widths, where one workgroup per row leaves the
// GPU idle and one SM moves the whole row in and out): each reads the row's x (and res) and
// sums its squares exactly as the one-workgroup form does, so r is the same bits in every
// part, then loads the weights of, and writes (S, Y, XQ, XD), only its slot j = part of the
// row (vectors j·WG .. j·WG + WG − 1): per SM half the traffic, five SMs at once for D = 5120.
// A row's outputs do not depend on the form (the form may follow the row count).
// Constants: WG (power of two), NV (REG). Params: 0 rows, 1 D, 2 eps (f32), 3 scale (f32),
// 4 grid x.

//#if V4
alias T = vec4<f32>;
const VW: u32 = 4u;
//#else
alias T = f32;
const VW: u32 = 1u;
//#endif

@group(0) @binding(#) var<storage, read> X: array<T>;
//#if ADD
@group(0) @binding(#) var<storage, read> R: array<T>;
//#endif
//#if GATED
@group(0) @binding(#) var<storage, read> Z: array<T>;
//#endif
//#if !L2
@group(0) @binding(#) var<storage, read> W: array<u32>;
//#endif
//#if ADD
@group(0) @binding(#) var<storage, read_write> S: array<T>;
//#endif
@group(0) @binding(#) var<storage, read_write> Y: array<T>;
//#if Q8
@group(0) @binding(#) var<storage, read_write> XQ: array<u32>;
@group(0) @binding(#) var<storage, read_write> XD: array<vec2<f32>>;
const QWG: u32 = WG * NV;
//#include q8block
//#endif

//#if !L2
//#dequant W
//#endif

var<workgroup> red: array<f32, WG>;

fn load(i: u32) -> T {
//#if ADD
    return X[i] + R[i];
//#else
    return X[i];
//#endif
}

fn sq(v: T) -> f32 {
//#if V4
    return dot(v, v);
//#else
    return v * v;
//#endif
}

//#if !L2
// Weight values of vector index i.
fn wv(i: u32) -> T {
//#if V4
    return W_dq4(0u, 4u * i);
//#else
    return W_dq1(i);
//#endif
}
//#endif

// The workgroup's total of `ss` (every thread calls it).
fn total_of(
    ss: f32,
    tid: u32,
//#if SG
    sg_lane: u32,
    sg_id: u32,
    n_sg: u32,
//#endif
) -> f32 {
//#if SG
    let part = subgroupAdd(ss);
    if sg_lane == 0u {
        red[sg_id] = part;
    }
    workgroupBarrier();
    var total = 0.0;
    for (var i = 0u; i < n_sg; i++) {
        total += red[i];
    }
    return total;
//#else
    red[tid] = ss;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        if tid < s {
            red[tid] += red[tid + s];
        }
        workgroupBarrier();
    }
    return red[0];
//#endif
}

// 1/sqrt(mean(x²) + eps), or for L2 1/sqrt(Σx² + eps).
fn rscale(total: f32, d: u32) -> f32 {
//#if L2
    return 1.0 / sqrt(total + pf(2u));
//#else
    return 1.0 / sqrt(total / f32(d) + pf(2u));
//#endif
}

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
//#if SG
    @builtin(subgroup_invocation_id) sg_lane: u32,
    @builtin(subgroup_id) sg_id: u32,
    @builtin(num_subgroups) n_sg: u32,
//#endif
) {
    let g = wid.x + wid.y * pu(4u);
//#if PART
    let row = g / NV;
    let part = g % NV;
//#else
    let row = g;
//#endif
    let live = row < pu(0u);
    let d = pu(1u);
    let dv = d / VW;
    let base = row * dv;
    var ss = 0.0;
//#if REG
    // Every load first (masked lanes hold zeros), then the sums in the looping form's order.
//#unroll j NV
    let i%{j} = tid + %{j}u * WG;
    let on%{j} = live && i%{j} < dv;
//#if PART
    // This workgroup's slot: its weights, gates and outputs.
    let own%{j} = on%{j} && part == %{j}u;
//#else
    let own%{j} = on%{j};
//#endif
    var v%{j} = T(0.0);
//#if !L2
    var w%{j} = T(0.0);
//#endif
//#if GATED
    var z%{j} = T(0.0);
//#endif
    if on%{j} {
        v%{j} = load(base + i%{j});
    }
    if own%{j} {
//#if !L2
        w%{j} = wv(i%{j});
//#endif
//#if GATED
        z%{j} = Z[base + i%{j}];
//#endif
    }
//#end
//#unroll j NV
    if on%{j} {
        ss += sq(v%{j});
    }
//#if ADD
    if own%{j} {
        S[base + i%{j}] = v%{j};
    }
//#endif
//#end
//#if SG
    let r = rscale(total_of(ss, tid, sg_lane, sg_id, n_sg), d);
//#else
    let r = rscale(total_of(ss, tid), d);
//#endif
//#unroll j NV
//#if L2
    let y%{j} = (v%{j} * r) * pf(3u);
//#else
//#if GATED
    let y%{j} = ((v%{j} * r) * w%{j}) * (z%{j} / (1.0 + exp(-z%{j})));
//#else
    let y%{j} = (v%{j} * r) * w%{j};
//#endif
//#endif
    if own%{j} {
        Y[base + i%{j}] = y%{j};
    }
//#if Q8
    q8_put_max(%{j}u * WG + tid, y%{j});
//#endif
//#end
//#if Q8
    // Blocks are 8 consecutive vectors: 8 consecutive threads of one pass (WG % 8 == 0), all
    // on or all off (dv % 8 == 0).
    workgroupBarrier();
//#unroll j NV
    let s%{j} = %{j}u * WG + tid;
    let dq%{j} = q8_scale(s%{j});
    let q%{j} = q8_round(y%{j}, dq%{j}.y);
    q8_put_sum(s%{j}, q%{j});
    if own%{j} {
        XQ[base + i%{j}] = pack4xI8(vec4<i32>(q%{j}));
    }
//#end
    workgroupBarrier();
//#unroll j NV
    if own%{j} && (tid & 7u) == 0u {
        XD[(base + i%{j}) / 8u] = vec2<f32>(dq%{j}.x, dq%{j}.x * q8_sum(s%{j}));
    }
//#end
//#endif
//#else
    if live {
        for (var i = tid; i < dv; i += WG) {
            let v = load(base + i);
//#if ADD
            S[base + i] = v;
//#endif
            ss += sq(v);
        }
    }
//#if SG
    let r = rscale(total_of(ss, tid, sg_lane, sg_id, n_sg), d);
//#else
    let r = rscale(total_of(ss, tid), d);
//#endif
    if !live {
        return;
    }
    for (var i = tid; i < dv; i += WG) {
//#if L2
        Y[base + i] = (X[base + i] * r) * pf(3u);
//#else
//#if GATED
        let z = Z[base + i];
        Y[base + i] = ((X[base + i] * r) * wv(i)) * (z / (1.0 + exp(-z)));
//#else
        Y[base + i] = (load(base + i) * r) * wv(i);
//#endif
//#endif
    }
//#endif
}
