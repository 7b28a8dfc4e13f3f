// Top-k selection (argmax is k = 1) over rows, in two passes. Pass one (FIRST): workgroup
// (g, row) takes chunk g of the row and finds its k best entries in k rounds; round r keeps
// the best entry that ranks strictly after the previous winner (the order is total, so no
// storage is needed). Pass two (MERGE) runs the same rounds over the groups' candidates with
// their carried indices. Order: larger first, NaN above every number, ties by lower index;
// an index of 0xffffffff marks an empty candidate and ranks last.
// REG: every thread loads its at most E elements of the chunk (e0 + tid + j·WG) once, and the
// rounds scan registers; without it (chunks wider than WG·E) each round re-reads the chunk. (The
// re-reading form, 4096-element chunks of 64 threads, took ~130 µs a call for 7 rows of 248,320
// at k = 16 in an H100 profile: 16 rounds of 64 dependent loads a thread.)
// Params: 0 rows, 1 W (candidates per row), 2 groups per row, 3 k, 4 chunk.
// Constants: WG (threads), E (elements a thread holds with REG).

@group(0) @binding(1) var<storage, read> Vin: array<f32>;
//#if MERGE
@group(0) @binding(2) var<storage, read> Iin: array<u32>;
@group(0) @binding(3) var<storage, read_write> Vout: array<f32>;
@group(0) @binding(4) var<storage, read_write> Iout: array<u32>;
//#else
@group(0) @binding(2) var<storage, read_write> Vout: array<f32>;
@group(0) @binding(3) var<storage, read_write> Iout: array<u32>;
//#endif

const NONE: u32 = 0xffffffffu;

var<workgroup> rv: array<f32, WG>;
var<workgroup> ri: array<u32, WG>;

fn is_nan(v: f32) -> bool {
    return (bitcast<u32>(v) & 0x7fffffffu) > 0x7f800000u;
}

// Whether (av, ai) ranks before (bv, bi).
fn before(av: f32, ai: u32, bv: f32, bi: u32) -> bool {
    if ai == NONE {
        return false;
    }
    if bi == NONE {
        return true;
    }
    let an = is_nan(av);
    let bn = is_nan(bv);
    if an != bn {
        return an;
    }
    if !an && av != bv {
        return av > bv;
    }
    return ai < bi;
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let w = pu(1u);
    let groups = pu(2u);
    let k = pu(3u);
    let chunk = pu(4u);
    let g = wid.x;
    let row = wid.y;
    let e0 = min(w, g * chunk);
    let e1 = min(w, e0 + chunk);
    var pv = 0.0;
    var pi = NONE;
//#if REG
    var xv: array<f32, E>;
    var xi: array<u32, E>;
    for (var j = 0u; j < E; j++) {
        let e = e0 + tid + j * WG;
        var v = 0.0;
        var i = NONE;
        if e < e1 {
            v = Vin[row * w + e];
//#if MERGE
            i = Iin[row * w + e];
//#else
            i = e;
//#endif
        }
        xv[j] = v;
        xi[j] = i;
    }
//#endif
    for (var r = 0u; r < k; r++) {
        var bv = 0.0;
        var bi = NONE;
//#if REG
        for (var j = 0u; j < E; j++) {
            let v = xv[j];
            let i = xi[j];
//#else
        for (var e = e0 + tid; e < e1; e += WG) {
            let v = Vin[row * w + e];
//#if MERGE
            let i = Iin[row * w + e];
//#else
            let i = e;
//#endif
//#endif
            let after = r == 0u || before(pv, pi, v, i);
            if after && before(v, i, bv, bi) {
                bv = v;
                bi = i;
            }
        }
        rv[tid] = bv;
        ri[tid] = bi;
        workgroupBarrier();
        for (var s = WG / 2u; s > 0u; s >>= 1u) {
            if tid < s && before(rv[tid + s], ri[tid + s], rv[tid], ri[tid]) {
                rv[tid] = rv[tid + s];
                ri[tid] = ri[tid + s];
            }
            workgroupBarrier();
        }
        pv = rv[0];
        pi = ri[0];
        if tid == 0u {
            let o = (row * groups + g) * k + r;
            Vout[o] = pv;
            Iout[o] = pi;
        }
        workgroupBarrier();
    }
}
