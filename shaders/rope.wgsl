// Partial NeoX rotary embedding on x [T, H, D]: pairs (i, i + rot/2), i < rot/2, rotate by
// pos[t] · inv_freq[i] (inv_freq computed on the host exactly as the CPU reference does, YaRN
// included), cos and sin times the attention factor m (HF's `attention_scaling`).
// Params: 0 total (T·H·D), 1 H·D, 2 D, 3 rot, 4 threads per grid row, 5 m (f32 bits).

@group(0) @binding(1) var<storage, read> X: array<f32>;
@group(0) @binding(2) var<storage, read> Pos: array<i32>;
@group(0) @binding(3) var<storage, read> F: array<f32>;
@group(0) @binding(4) var<storage, read_write> Y: array<f32>;

const WG: u32 = 256u;

// cos and sin of an f32 angle with Cody–Waite reduction by 2π (exact for |k| < 2^16), so
// large positions keep their accuracy on GPUs whose sin/cos are only accurate near zero.
fn cos_sin(a: f32) -> vec2<f32> {
    let k = round(a * 0.15915494309189535);
    let r = ((a - k * 6.28125) - k * 0.0019353071693331003) - k * 1.0253131677018246e-11;
    return vec2<f32>(cos(r), sin(r));
}

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let idx = gid.x + gid.y * pu(4u);
    if idx >= pu(0u) {
        return;
    }
    let d = pu(2u);
    let i = idx % d;
    let half = pu(3u) / 2u;
    if i >= 2u * half {
        Y[idx] = X[idx];
        return;
    }
    let p = f32(Pos[idx / pu(1u)]);
    if i < half {
        let cs = cos_sin(p * F[i]) * pf(5u);
        Y[idx] = X[idx] * cs.x - X[idx + half] * cs.y;
    } else {
        let cs = cos_sin(p * F[i - half]) * pf(5u);
        Y[idx] = X[idx] * cs.x + X[idx - half] * cs.y;
    }
}
