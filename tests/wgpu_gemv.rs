//! The GEMV kernel and the fused decode dispatches on wgpu against the CPU reference: every
//! work-item decoder at the decode and verify widths (N = 1, 2, 3, 8, 16, 17, 64; the tiled
//! kernel from 16 on), several rounds of items per thread, rows that do not fill the last
//! workgroup, both reduction paths (subgroups and workgroup memory), and the fused groups
//! (projection segments, gate+up+SwiGLU, the sigmoid gate folded into a matmul) with the
//! dispatch counts they must produce.

#[path = "common/gpu_case.rs"]
mod gpu_case;
use deltaspec::backend::Backend;
use deltaspec::backend::wgpu::{WgpuBackend, WgpuOptions};
use deltaspec::tensor::DType;
use gpu_case::{B, Case, check, gpu_with};

/// The 27B files' types first, then a `dq4` type and the plain floats.
const TYPES: &[DType] = &[
    DType::Iq4Xs,
    DType::Q6K,
    DType::Q8_0,
    DType::Q4K,
    DType::Q5K,
    DType::Iq4Nl,
    DType::F16,
    DType::F32,
];

/// The backend with subgroup reductions (where the adapter has them) and without.
fn gpus(fusion: bool) -> Vec<(WgpuBackend, &'static str)> {
    let mut v = Vec::new();
    for (no_sg, label) in [(false, "subgroups"), (true, "workgroup memory")] {
        if let Some(g) = gpu_with(WgpuOptions {
            no_subgroups: no_sg,
            no_fusion: !fusion,
            ..Default::default()
        }) {
            v.push((g, label));
        }
    }
    v
}

fn tol(t: DType) -> f32 {
    if matches!(t, DType::F32 | DType::F16) {
        1e-5
    } else {
        1e-4
    }
}

#[test]
fn gemv_every_item_decoder_and_width() {
    for (mut g, label) in gpus(true) {
        for (i, &t) in TYPES.iter().enumerate() {
            // 17 superblocks: 136 items of 32, more than one round of every workgroup size.
            let k = 256 * 17;
            let mut b = B::new(300 + i as u64);
            let w = b.weight("w", t, &[13, k], 0.5, 0.0);
            for n in [1usize, 2, 3, 8, 16, 17, 64] {
                let x = b.input(&format!("x{n}"), &[n, k], 1.0);
                let y = b.b.matmul(x, w).unwrap();
                b.out(&format!("y{n}"), y);
            }
            check(&mut g, &b.case(), tol(t), &format!("gemv {t} ({label})"));
        }
    }
}

/// The decode-step shapes: four projections of one x (one type), a gate/up pair read only by
/// a SwiGLU, a down projection, q/k/v with q split into per-head halves (a view and two copies,
/// the second half sliced first), and a sigmoid gate before a last projection.
fn step_like(n: usize) -> Case {
    let (d, ff) = (512, 96);
    let mut b = B::new(400 + n as u64);
    let x = b.input("x", &[n, d], 1.0);
    for (name, rows) in [("qkv", 40), ("z", 24), ("beta", 3), ("alpha", 3)] {
        let w = b.weight(name, DType::Iq4Xs, &[rows, d], 0.5, 0.0);
        let y = b.b.matmul(x, w).unwrap();
        b.out(name, y);
    }
    let wg = b.weight("gate", DType::Q8_0, &[ff, d], 0.5, 0.0);
    let wu = b.weight("up", DType::Q8_0, &[ff, d], 0.5, 0.0);
    let wd = b.weight("down", DType::Q8_0, &[d, ff], 0.5, 0.0);
    let gt = b.b.matmul(x, wg).unwrap();
    let up = b.b.matmul(x, wu).unwrap();
    let s = b.b.swiglu(gt, up).unwrap();
    let y = b.b.matmul(s, wd).unwrap();
    b.out("ffn", y);
    let wq = b.weight("q", DType::Q6K, &[64, d], 0.5, 0.0);
    let wk = b.weight("k", DType::Q6K, &[16, d], 0.5, 0.0);
    let wv = b.weight("v", DType::Q6K, &[16, d], 0.5, 0.0);
    let q = b.b.matmul(x, wq).unwrap();
    let qh = b.b.reshape(q, &[n, 2, 32]).unwrap();
    let q1 = b.b.slice_last(qh, 16, 16).unwrap();
    let q0 = b.b.slice_last(qh, 0, 16).unwrap();
    let k = b.b.matmul(x, wk).unwrap();
    let v = b.b.matmul(x, wv).unwrap();
    b.out("q0", q0);
    b.out("q1", q1);
    b.out("k", k);
    b.out("v", v);
    // The attention output gate before o_proj: folded into the matmul's activation loads.
    let gated = b.b.sigmoid_mul(k, v).unwrap();
    let gated = b.b.reshape(gated, &[n, 1, 16]).unwrap();
    let gated = b.b.reshape(gated, &[n, 16]).unwrap();
    let wo = b.weight("o", DType::F16, &[24, 16], 0.5, 0.0);
    let o = b.b.matmul(gated, wo).unwrap();
    b.out("o", o);
    b.case()
}

fn dispatches(g: &mut WgpuBackend, c: &Case) -> usize {
    let exe = g.compile(&c.g).unwrap();
    g.dispatch_count(exe).unwrap()
}

#[test]
fn fused_projections_and_swiglu() {
    for (mut g, label) in gpus(true) {
        for n in [1usize, 3, 8, 16] {
            let c = step_like(n);
            check(&mut g, &c, 1e-4, &format!("fused step N={n} ({label})"));
            // Fused (N ≤ 8): [qkv z β α], [gate up swiglu], down, [q k v and q's halves],
            // [sigmoid_mul o]. Unfused: 4 + 2 + swiglu + down + 3 + 2 copies + sigmoid_mul + o.
            let want = if n <= 8 { 5 } else { 15 };
            assert_eq!(dispatches(&mut g, &c), want, "N={n} ({label})");
        }
    }
    let Some((mut plain, _)) = gpus(false).into_iter().next() else {
        return;
    };
    let c = step_like(1);
    check(&mut plain, &c, 1e-4, "unfused step N=1");
    assert_eq!(dispatches(&mut plain, &c), 15);
}
