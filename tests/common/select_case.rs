//! Top-k inputs that stress a chunked (two-pass) top-k, and an exact comparison; shared by the
//! hip and wgpu op tests (`#[path]` module).
#![allow(dead_code)]

use deltaspec::backend::HostTensor;
use deltaspec::util::rng::Rng;

/// Elements per pass-0 part of the hip top-k (`ARGMAX_CHUNK` in `hip/select.hip`); the rows
/// below put their traps on that grid.
const CHUNK: usize = 2048;

/// Number of rows [`top_k_rows`] makes.
pub const ROWS: usize = 6;

/// `ROWS` rows of width `v`: (0) few distinct values (ties everywhere), NaNs, signed zeros;
/// (1) all equal; (2) uniform noise with equal maxima at one position of every fourth part (on
/// the hip merge pass with k = 64 all of them belong to one thread, more than its register list
/// holds, so the thread refills); (3) all NaN; (4) increasing (the best at the end); (5) normal.
pub fn top_k_rows(rng: &mut Rng, v: usize) -> Vec<f32> {
    let mut x = Vec::with_capacity(ROWS * v);
    x.extend((0..v).map(|i| {
        let y = rng.below(40) as f32 * 0.25 - 5.0;
        if y == 0.0 && i % 2 == 1 { -0.0 } else { y }
    }));
    x[3] = f32::NAN;
    x[v - 1] = f32::NAN;
    x.extend(std::iter::repeat_n(1.5, v));
    let spiky = x.len();
    x.extend((0..v).map(|_| rng.uniform()));
    for p in (0..v.div_ceil(CHUNK)).step_by(4) {
        if p * CHUNK + 5 < v {
            x[spiky + p * CHUNK + 5] = 7.0;
        }
    }
    x.extend(std::iter::repeat_n(f32::NAN, v));
    x.extend((0..v).map(|i| i as f32));
    x.extend(rng.vec_normal(v, 1.0));
    x
}

/// `got` equals `want` bit for bit (values, NaNs and signed zeros included, and indices).
pub fn assert_same(what: &str, want: &HostTensor, got: &HostTensor) {
    assert_eq!(want.shape, got.shape, "{what}: shape");
    assert_eq!(want.dtype, got.dtype, "{what}: dtype");
    let (w, g) = (want.bytes(), got.bytes());
    if let Some(i) = (0..w.len() / 4).find(|&i| w[4 * i..4 * i + 4] != g[4 * i..4 * i + 4]) {
        let word = |b: &[u8]| u32::from_le_bytes(b[4 * i..4 * i + 4].try_into().unwrap());
        let k = want.shape[1];
        panic!(
            "{what}: row {} rank {}: bits {:#010x} (f32 {}, i32 {}) on the GPU, {:#010x} (f32 {}, \
             i32 {}) on the CPU",
            i / k,
            i % k,
            word(g),
            f32::from_bits(word(g)),
            word(g) as i32,
            word(w),
            f32::from_bits(word(w)),
            word(w) as i32,
        );
    }
}
