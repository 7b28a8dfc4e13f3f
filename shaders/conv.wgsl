// Causal depthwise conv + SiLU over T new rows, continuing from the state (the previous
// K-1 input rows): one thread per channel, which also rewrites its state column.
// TREE (graph op ConvTree): row t continues from its parent's conv state (Tok[parent], or the
// state for parent < 0) and writes its own to Tok[t]; the state is only read. A thread reads
// and writes only its own channel, so rows need no barrier between them.
// Params: 0 T, 1 C, 2 K, 3 threads per grid row.

@group(0) @binding(1) var<storage, read> X: array<f32>;
@group(0) @binding(2) var<storage, read> W: array<u32>;
//#if TREE
@group(0) @binding(3) var<storage, read> Par: array<i32>;
@group(0) @binding(4) var<storage, read_write> St: array<f32>;
@group(0) @binding(5) var<storage, read_write> Tok: array<f32>;
@group(0) @binding(6) var<storage, read_write> Y: array<f32>;
//#else
@group(0) @binding(3) var<storage, read_write> St: array<f32>;
@group(0) @binding(4) var<storage, read_write> Y: array<f32>;
//#endif

//#dequant W

const WG: u32 = 64u;

fn xin(r: u32, c: u32, ch: u32, hist: u32) -> f32 {
    if r < hist {
        return St[r * ch + c];
    }
    return X[(r - hist) * ch + c];
}

//#if TREE
// Row r of row t's window: its parent's conv state rows, then x[t].
fn win(t: u32, par: i32, r: u32, c: u32, ch: u32, hist: u32) -> f32 {
    if r == hist {
        return X[t * ch + c];
    }
    if par < 0 {
        return St[r * ch + c];
    }
    return Tok[(u32(par) * hist + r) * ch + c];
}
//#endif

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let c = gid.x + gid.y * pu(3u);
    let t_n = pu(0u);
    let ch = pu(1u);
    let kw = pu(2u);
    if c >= ch {
        return;
    }
    let hist = kw - 1u;
//#if TREE
    for (var t = 0u; t < t_n; t++) {
        let par = Par[t];
        var acc = 0.0;
        for (var j = 0u; j < kw; j++) {
            acc += W_dq1(c * kw + j) * win(t, par, j, c, ch, hist);
        }
        Y[t * ch + c] = acc / (1.0 + exp(-acc));
        // The parent's row (< t) is never the one written here.
        for (var r = 0u; r < hist; r++) {
            Tok[(t * hist + r) * ch + c] = win(t, par, r + 1u, c, ch, hist);
        }
    }
//#else
    for (var t = 0u; t < t_n; t++) {
        var acc = 0.0;
        for (var j = 0u; j < kw; j++) {
            acc += W_dq1(c * kw + j) * xin(t + j, c, ch, hist);
        }
        Y[t * ch + c] = acc / (1.0 + exp(-acc));
    }
    // Ascending rows: row r reads input row T + r > r, which is not yet overwritten.
    for (var r = 0u; r < hist; r++) {
        St[r * ch + c] = xin(t_n + r, c, ch, hist);
    }
//#endif
}
