// GEMV for decode and verify widths: y[n, col_off + m] = Σ_k x[n, k] · w[m, k], n < N ≤ NT.
//
// A workgroup owns R weight rows and splits K between its WG threads: thread t takes work
// items t, t + WG, … (an item is W0_SUB contiguous elements of a row, decoded from whole words
// by `W_item`, see dequant.wgsl). For each item a thread either holds the activations of all
// NT input rows and decodes the R weight rows one after the other (HOLD_X, NT ≤ R), or holds
// the R decoded rows and streams the NT activation rows: either way every weight element is
// decoded once and applied to every input row, and every activation load serves R rows.
// Partial sums are reduced with subgroupAdd (SG) and across subgroups (or, without SG, all
// threads) through workgroup memory. The loop body has no branches (input rows past N repeat
// row N − 1 and are never written), so the compiler can issue every row's loads up front.
//
// Fusion (one dispatch over several weights that read the same x, all of one type):
// - SEG2..SEG4: weights W0..W3 are segments; workgroups [first_s, first_{s+1}) compute rows
//   of W_s into Y_s.
// - PAIR: SwiGLU folded in: a workgroup's R rows are R/2 rows of W0 (gate) and the same R/2
//   rows of W1 (up); it writes silu(gate) · up into Y0.
// - XGATE: x is read as x · sigmoid(G) (the attention output gate folded into o_proj).
// - SPLIT: segment 0's rows are periods of P = pu(20) rows whose first H = pu(21) go to Y0 and
//   the rest to YS, each as rows of H (attn_q's per-head [query | gate] halves).
// - Q8 (int8 activations): x comes quantized by quantize.wgsl (XQ packed int8, XD per-32
//   (scale, scaled sum)); each weight item is decoded to packed int8 words (`$F_qitem`,
//   section "<type> q8") that meet the activations in dot4I8Packed (hardware 4-way dot
//   products where the device has them, naga's polyfill elsewhere). XGATE is applied by the
//   quantize kernel instead. Integer sums are exact and a row's accumulation order does not
//   depend on N, so a row of an N-row run equals the 1-row run bit for bit. Inputs wider than
//   NT run as several dispatches over one quantization: rows n0 .. n0 + N.
// The int8 loop is unrolled by the generator (`//#unroll`): each lane takes U items per round
// for all R rows (U·R items' loads in flight), then adds them in item order; rows and
// segments are indexed by constants, so no per-thread array lives in memory.
// - CONV: segment 0's rows are the channels of a causal depthwise conv + SiLU (graph op
//   ConvStep, as conv.wgsl) that reads them: a thread per channel runs the conv over the N
//   rows and the conv state ST, writes its outputs to Y0 and rewrites the channel's state
//   column. The raw projection is never stored. Needs a single pass (N ≤ NT).
// - QOUT (with PAIR and Q8): the SwiGLU outputs are also quantized for the int8 GEMV that reads
//   them (down), replacing its quantize dispatch. Workgroups hold RW (dividing 32) consecutive
//   outputs, so a 32-value block spans several: each workgroup publishes its outputs to QY
//   (atomics: coherent across workgroups), then counts them into the block's counter QC
//   (storageBarrier before and after: device-scope fences); the workgroup that completes the
//   block quantizes it (the arithmetic of quantize.wgsl, q8block.wgsl) into XQO, XDO and
//   resets the counter for the next run. Needs M % 32 == 0 and a single pass (N ≤ NT).
// Constants: WG, R, RW (weight rows per workgroup: R, or R / 2 with PAIR), NT, U (int8 items
// per round), RNT = R·NT, SEGS (weights). Flags: SG, XV4 (K % 4 == 0: x read as vec4), PAIR, SEG2..SEG4, XGATE,
// SPLIT, Q8.
// Params: 0 N, 1 K, 2 row bytes, 3 grid x, then per segment s at 4 + 4s: first workgroup,
// rows, ldy, col_off; 20, 21 SPLIT's period and half; 22 n0 (Q8); 23 conv taps (CONV).

//#if Q8
@group(0) @binding(#) var<storage, read> XQ: array<vec4<u32>>;
@group(0) @binding(#) var<storage, read> XD: array<vec2<f32>>;
//#else
//#if XV4
@group(0) @binding(#) var<storage, read> X: array<vec4<f32>>;
//#if XGATE
@group(0) @binding(#) var<storage, read> G: array<vec4<f32>>;
//#endif
//#else
@group(0) @binding(#) var<storage, read> X: array<f32>;
//#endif
//#endif
@group(0) @binding(#) var<storage, read> W0: array<u32>;
//#if SEG2
@group(0) @binding(#) var<storage, read> W1: array<u32>;
//#endif
//#if SEG3
@group(0) @binding(#) var<storage, read> W2: array<u32>;
//#endif
//#if SEG4
@group(0) @binding(#) var<storage, read> W3: array<u32>;
//#endif
@group(0) @binding(#) var<storage, read_write> Y0: array<f32>;
//#if !PAIR
//#if SEG2
@group(0) @binding(#) var<storage, read_write> Y1: array<f32>;
//#endif
//#if SEG3
@group(0) @binding(#) var<storage, read_write> Y2: array<f32>;
//#endif
//#if SEG4
@group(0) @binding(#) var<storage, read_write> Y3: array<f32>;
//#endif
//#endif
//#if SPLIT
@group(0) @binding(#) var<storage, read_write> YS: array<f32>;
//#endif
//#if CONV
@group(0) @binding(#) var<storage, read> CW: array<u32>;
@group(0) @binding(#) var<storage, read_write> ST: array<f32>;
//#endif
//#if QOUT
@group(0) @binding(#) var<storage, read_write> QY: array<atomic<u32>>;
@group(0) @binding(#) var<storage, read_write> QC: array<atomic<u32>>;
@group(0) @binding(#) var<storage, read_write> XQO: array<u32>;
@group(0) @binding(#) var<storage, read_write> XDO: array<vec2<f32>>;
// Only div_rn and q8_round are used here.
const QWG: u32 = 8u;
//#include q8block
var<workgroup> q_last: u32;

// Quantizes output block b of input row n (QY holds [N, M] as f32 bits): as quantize.wgsl.
fn qout_block(b: u32, n: u32, m_rows: u32) {
    let base = n * m_rows + b * 32u;
    var v: array<vec4<f32>, 8>;
    var mx = 0.0;
    for (var w = 0u; w < 8u; w++) {
        let e = base + 4u * w;
        let x = vec4<f32>(
            bitcast<f32>(atomicLoad(&QY[e])),
            bitcast<f32>(atomicLoad(&QY[e + 1u])),
            bitcast<f32>(atomicLoad(&QY[e + 2u])),
            bitcast<f32>(atomicLoad(&QY[e + 3u])),
        );
        v[w] = x;
        let a = abs(x);
        mx = max(mx, max(max(a.x, a.y), max(a.z, a.w)));
    }
    let d = div_rn(mx, 127.0);
    let id = select(0.0, div_rn(1.0, d), d != 0.0);
    var sum = 0.0;
    for (var w = 0u; w < 8u; w++) {
        let q = q8_round(v[w], id);
        sum += (q.x + q.y) + (q.z + q.w);
        XQO[base / 4u + w] = pack4xI8(vec4<i32>(q));
    }
    XDO[base / 32u] = vec2<f32>(d, d * sum);
}
//#endif

//#dequant W0
//#if CONV
//#dequant CW
//#endif
//#if SEG2
//#dequant W1
//#endif
//#if SEG3
//#dequant W2
//#endif
//#if SEG4
//#dequant W3
//#endif
//#if Q8
//#dequant8 W0
//#if SEG2
//#dequant8 W1
//#endif
//#if SEG3
//#dequant8 W2
//#endif
//#if SEG4
//#dequant8 W3
//#endif
//#endif

const SUB4: u32 = W0_SUB4;
const HOLD_X: bool = NT <= R;

var<workgroup> red: array<f32, R * NT * WG>;

fn item(seg: u32, ro: u32, s: u32, v: ptr<function, array<vec4<f32>, SUB4>>) -> f32 {
//#if SEG4
    if seg == 3u {
        return W3_item(ro, s, v);
    }
//#endif
//#if SEG3
    if seg == 2u {
        return W2_item(ro, s, v);
    }
//#endif
//#if SEG2
    if seg == 1u {
        return W1_item(ro, s, v);
    }
//#endif
    return W0_item(ro, s, v);
}

//#if Q8
// An int8 work item: 32 weights as packed int8 words (value e in byte e % 4 of lo/hi word
// (e % 16) / 4, hi for e ≥ 16) and (s0, s1, m) (see the q8 sections of dequant.wgsl).
struct QItem {
    lo: vec4<u32>,
    hi: vec4<u32>,
    sc: vec3<f32>,
}

// Item s of the R row slots. Unrolled with constant indices and, without PAIR, one branch per
// weight around all R rows (seg is uniform in a workgroup): the loads of every row issue
// before any is used, and nothing lands in function-local memory.
fn qrows(seg: u32, ro: array<u32, R>, s: u32) -> array<QItem, R> {
    var q: array<QItem, R>;
//#if PAIR
//#unroll r RW
    q[%{r}] = W0_qitem(ro[%{r}], s);
    q[RW + %{r}u] = W1_qitem(ro[RW + %{r}u], s);
//#end
//#else
//#unroll g SEGS
    if seg == %{g}u {
//#unroll r R
        q[%{r}] = W%{g}_qitem(ro[%{r}], s);
//#end
    }
//#end
//#endif
    return q;
}

// Adds item s of every row slot times the activations of every input row to acc (order per
// (row, input row) fixed: the item sequence of the lane, whatever NT and U are).
fn qacc(acc: ptr<function, array<f32, R * NT>>, q: array<QItem, R>, s: u32, n0: u32, n_rows: u32, items: u32) {
//#unroll n NT
    {
        let xb = (n0 + min(%{n}u, n_rows - 1u)) * items + s;
        let a = XQ[2u * xb];
        let b = XQ[2u * xb + 1u];
        let xd = XD[xb];
//#unroll r R
        {
            let w = q[%{r}];
            let s0 = dot4I8Packed(w.lo.x, a.x) + dot4I8Packed(w.lo.y, a.y) + dot4I8Packed(w.lo.z, a.z) + dot4I8Packed(w.lo.w, a.w);
            let s1 = dot4I8Packed(w.hi.x, b.x) + dot4I8Packed(w.hi.y, b.y) + dot4I8Packed(w.hi.z, b.z) + dot4I8Packed(w.hi.w, b.w);
            // Explicit fmas, no a·b + c left for the compiler to contract: variants for
            // different NT and R must round a row's sum the same way (batch invariance).
            let t = fma(w.sc.x, f32(s0), w.sc.y * f32(s1));
            let v = %{r}u * NT + %{n}u;
            (*acc)[v] = fma(xd.x, t, fma(w.sc.z, xd.y, (*acc)[v]));
        }
//#end
    }
//#end
}
//#else
// Four activations of row-major x starting at element e (a multiple of 4).
fn x4(e: u32) -> vec4<f32> {
//#if XV4
//#if XGATE
    return X[e >> 2u] * (1.0 / (1.0 + exp(-G[e >> 2u])));
//#else
    return X[e >> 2u];
//#endif
//#else
    return vec4<f32>(X[e], X[e + 1u], X[e + 2u], X[e + 3u]);
//#endif
}
//#endif

// Output (n, m) of segment seg (m: row of the segment's weight).
fn store(seg: u32, n: u32, m: u32, v: f32) {
    let sp = 4u + 4u * seg;
    let i = n * pu(sp + 2u) + pu(sp + 3u) + m;
//#if SPLIT
    if seg == 0u {
        let per = pu(20u);
        let h = pu(21u);
        let c = n * pu(6u) + (m / per) * h;
        let j = m % per;
        if j < h {
            Y0[c + j] = v;
        } else {
            YS[c + j - h] = v;
        }
        return;
    }
//#endif
//#if !PAIR
//#if SEG4
    if seg == 3u {
        Y3[i] = v;
        return;
    }
//#endif
//#if SEG3
    if seg == 2u {
        Y2[i] = v;
        return;
    }
//#endif
//#if SEG2
    if seg == 1u {
        Y1[i] = v;
        return;
    }
//#endif
//#endif
    Y0[i] = v;
}

//#if CONV
// Output (slot v = r·NT + n) of the workgroup: the sum of its parts.
fn out_sum(v: u32, parts: u32) -> f32 {
    var sum = 0.0;
    for (var i = 0u; i < parts; i++) {
        sum += red[v * WG + i];
    }
    return sum;
}

// Row `row` of channel c's conv window (slot r): the hist state rows, then the N new rows.
fn cwin(row: u32, r: u32, c: u32, ch: u32, hist: u32, parts: u32) -> f32 {
    if row < hist {
        return ST[row * ch + c];
    }
    return out_sum(r * NT + row - hist, parts);
}

// conv.wgsl's step for channel c = m0 + r of segment 0 over rows 0 .. n_rows.
fn conv_rows(r: u32, c: u32, n_rows: u32, parts: u32) {
    let ch = pu(5u);
    let ldy = pu(6u);
    let off = pu(7u);
    let kw = pu(23u);
    let hist = kw - 1u;
    for (var t = 0u; t < n_rows; t++) {
        var acc = 0.0;
        for (var j = 0u; j < kw; j++) {
            acc += CW_dq1(c * kw + j) * cwin(t + j, r, c, ch, hist, parts);
        }
        Y0[t * ldy + off + c] = acc / (1.0 + exp(-acc));
    }
    // Ascending rows: row j reads window row N + j > j, which is not yet overwritten.
    for (var j = 0u; j < hist; j++) {
        ST[j * ch + c] = cwin(n_rows + j, r, c, ch, hist, parts);
    }
}
//#endif

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
//#if Q8
    W0_qinit(tid);
//#if SEG2
    W1_qinit(tid);
//#endif
//#if SEG3
    W2_qinit(tid);
//#endif
//#if SEG4
    W3_qinit(tid);
//#endif
//#else
    W0_init(tid);
//#if SEG2
    W1_init(tid);
//#endif
//#if SEG3
    W2_init(tid);
//#endif
//#if SEG4
    W3_init(tid);
//#endif
//#endif
    workgroupBarrier();
    let n_rows = pu(0u);
    let k = pu(1u);
    let rb = pu(2u);
    let g = wid.x + wid.y * pu(3u);
    var seg = 0u;
//#if !PAIR
//#if SEG2
    if g >= pu(8u) {
        seg = 1u;
    }
//#endif
//#if SEG3
    if g >= pu(12u) {
        seg = 2u;
    }
//#endif
//#if SEG4
    if g >= pu(16u) {
        seg = 3u;
    }
//#endif
//#endif
    let sp = 4u + 4u * seg;
    let m0 = (g - pu(sp)) * RW;
    let m_rows = pu(sp + 1u);
    // Row slot r: weight (segment) and byte offset. Rows past the end decode the last row
    // again (never written), so the loads need no guard.
    var rseg: array<u32, R>;
    var ro: array<u32, R>;
//#unroll r R
//#if PAIR
    rseg[%{r}] = %{r}u / RW;
//#else
    rseg[%{r}] = seg;
//#endif
    ro[%{r}] = min(m0 + %{r}u % RW, m_rows - 1u) * rb;
//#end
    var acc: array<f32, R * NT>;
//#if Q8
    let n0 = pu(22u);
    let items = k / 32u;
    // U items per lane and round, all their loads before any use; the remainder one by one.
    var s = tid;
    for (; s + (U - 1u) * WG < items; s += U * WG) {
//#unroll u U
        let q%{u} = qrows(seg, ro, s + %{u}u * WG);
//#end
//#unroll u U
        qacc(&acc, q%{u}, s + %{u}u * WG, n0, n_rows, items);
//#end
    }
    for (; s < items; s += WG) {
        qacc(&acc, qrows(seg, ro, s), s, n0, n_rows, items);
    }
//#else
    let items = k / W0_SUB;
    for (var s = tid; s < items; s += WG) {
        let e = s * W0_SUB;
        if HOLD_X {
            var x: array<vec4<f32>, NT * SUB4>;
            for (var n = 0u; n < NT; n++) {
                let xo = min(n, n_rows - 1u) * k + e;
                for (var i = 0u; i < SUB4; i++) {
                    x[n * SUB4 + i] = x4(xo + 4u * i);
                }
            }
            for (var r = 0u; r < R; r++) {
                var w: array<vec4<f32>, SUB4>;
                let d = item(rseg[r], ro[r], s, &w);
                for (var n = 0u; n < NT; n++) {
                    var t = vec4<f32>(0.0);
                    for (var i = 0u; i < SUB4; i++) {
                        t += w[i] * x[n * SUB4 + i];
                    }
                    acc[r * NT + n] += d * ((t.x + t.y) + (t.z + t.w));
                }
            }
        } else {
            var w: array<array<vec4<f32>, SUB4>, R>;
            var d: array<f32, R>;
            for (var r = 0u; r < R; r++) {
                // Through a local: passing &w[r] to a function crashes naga 30's SPIR-V writer
                // ("Expression [..] is not cached") on Vulkan devices.
                var wr: array<vec4<f32>, SUB4>;
                d[r] = item(rseg[r], ro[r], s, &wr);
                w[r] = wr;
            }
            for (var n = 0u; n < NT; n++) {
                var x: array<vec4<f32>, SUB4>;
                let xo = min(n, n_rows - 1u) * k + e;
                for (var i = 0u; i < SUB4; i++) {
                    x[i] = x4(xo + 4u * i);
                }
                for (var r = 0u; r < R; r++) {
                    var t = vec4<f32>(0.0);
                    for (var i = 0u; i < SUB4; i++) {
                        t += w[r][i] * x[i];
                    }
                    acc[r * NT + n] += d[r] * ((t.x + t.y) + (t.z + t.w));
                }
            }
        }
    }
//#if !XV4
    // Ragged end of a plain-float row (K % 4 != 0; only W0, never fused): element by element.
    for (var e = items * W0_SUB + tid; e < k; e += WG) {
        for (var r = 0u; r < R; r++) {
            let w = W0_dq4(ro[r], e & ~3u)[e & 3u];
            for (var n = 0u; n < NT; n++) {
                acc[r * NT + n] += w * X[min(n, n_rows - 1u) * k + e];
            }
        }
    }
//#endif
//#endif
//#if SG
//#unroll v RNT
    {
        let t = subgroupAdd(acc[%{v}]);
        if sg_lane == 0u {
            red[%{v}u * WG + sg_id] = t;
        }
    }
//#end
    workgroupBarrier();
    let parts = n_sg;
//#else
//#unroll v RNT
    red[%{v}u * WG + tid] = acc[%{v}];
//#end
    workgroupBarrier();
    for (var h = WG / 2u; h > 0u; h >>= 1u) {
        if tid < h {
            for (var v = 0u; v < R * NT; v++) {
                red[v * WG + tid] += red[v * WG + tid + h];
            }
        }
        workgroupBarrier();
    }
    let parts = 1u;
//#endif
//#if CONV
    if seg == 0u {
        for (var r = tid; r < RW; r += WG) {
            if m0 + r < m_rows {
                conv_rows(r, m0 + r, n_rows, parts);
            }
        }
        return;
    }
//#endif
    for (var v = tid; v < RW * NT; v += WG) {
        let r = v / NT;
        let n = v % NT;
        if n < n_rows && m0 + r < m_rows {
            var sum = 0.0;
            for (var i = 0u; i < parts; i++) {
                sum += red[v * WG + i];
            }
//#if PAIR
            var up = 0.0;
            for (var i = 0u; i < parts; i++) {
                up += red[(v + RW * NT) * WG + i];
            }
            sum = (sum / (1.0 + exp(-sum))) * up;
//#endif
//#if Q8
            store(seg, n0 + n, m0 + r, sum);
//#if QOUT
            atomicStore(&QY[n * m_rows + m0 + r], bitcast<u32>(sum));
//#endif
//#else
            store(seg, n, m0 + r, sum);
//#endif
        }
    }
//#if QOUT
    // This workgroup's outputs are published before it counts them.
    storageBarrier();
    let b = m0 / 32u;
    if tid == 0u {
        let mine = min(RW, m_rows - m0);
        let total = min(32u, m_rows - b * 32u);
        q_last = select(0u, 1u, atomicAdd(&QC[b], mine) + mine == total);
    }
    if workgroupUniformLoad(&q_last) == 1u {
        storageBarrier();
        for (var n = tid; n < n_rows; n += WG) {
            qout_block(b, n, m_rows);
        }
        if tid == 0u {
            atomicStore(&QC[b], 0u);
        }
    }
//#endif
}
