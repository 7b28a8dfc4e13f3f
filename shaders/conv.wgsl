// Causal depthwise conv + SiLU over T new rows, continuing from the state (the previous
// K-1 input rows): one thread per channel, which also rewrites its state column.
// Params: 0 T, 1 C, 2 K, 3 threads per grid row.

@group(0) @binding(1) var<storage, read> X: array<f32>;
@group(0) @binding(2) var<storage, read> W: array<u32>;
@group(0) @binding(3) var<storage, read_write> St: array<f32>;
@group(0) @binding(4) var<storage, read_write> Y: array<f32>;

//#dequant W

const WG: u32 = 64u;

fn xin(r: u32, c: u32, ch: u32, hist: u32) -> f32 {
    if r < hist {
        return St[r * ch + c];
    }
    return X[(r - hist) * ch + c];
}

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
}
