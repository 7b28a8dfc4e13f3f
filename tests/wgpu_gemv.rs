//! The GEMV kernel and the fused decode dispatches on wgpu against the CPU reference: every
//! work-item decoder at the decode and verify widths (N = 1, 2, 3, 8, 16, 17, 64; the tiled
//! kernel from 16 on), several rounds of items per thread, rows that do not fill the last
//! workgroup, both reduction paths (subgroups and workgroup memory), and the fused groups
//! (projection segments, gate+up+SwiGLU, the sigmoid gate folded into a matmul) with the
//! dispatch counts they must produce. The int8-activation path (Q8_0, Q4_K, Q5_K, Q6_K,
//! IQ4_XS) against the q8-activation CPU reference, batch invariance, and its fused groups.

#[path = "common/gpu_case.rs"]
mod gpu_case;
use deltaspec::backend::wgpu::{WgpuBackend, WgpuOptions};
use deltaspec::backend::{self, Backend, HostData, WeightStore};
use deltaspec::tensor::{DType, quant};
use gpu_case::{B, Case, assert_same_bits, check, gpu_with, rel_err, run_on};

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

/// Types with an int8-activation GEMV item.
const INT8_TYPES: &[DType] = &[
    DType::Q8_0,
    DType::Q4K,
    DType::Q5K,
    DType::Q6K,
    DType::Iq4Xs,
];

/// The backend with int8 activations, with subgroup reductions and without.
fn int8_gpus(fusion: bool) -> Vec<(WgpuBackend, &'static str)> {
    let mut v = Vec::new();
    for (no_sg, label) in [(false, "subgroups"), (true, "workgroup memory")] {
        if let Some(g) = gpu_with(WgpuOptions {
            no_subgroups: no_sg,
            no_fusion: !fusion,
            int8_matmul: Some(true),
            ..Default::default()
        }) {
            v.push((g, label));
        }
    }
    v
}

/// `c` with every f32 input replaced by what the int8 path sees (`q8_activation_roundtrip`).
fn roundtripped(c: &Case) -> Case {
    let mut b = B::new(0);
    b.w = c.w.clone();
    let inputs = c
        .inputs
        .iter()
        .map(|(n, d)| match d {
            HostData::F32(v) => (n.clone(), HostData::F32(quant::q8_activation_roundtrip(v))),
            other => (n.clone(), other.clone()),
        })
        .collect();
    Case {
        g: c.g.clone(),
        w: b.w,
        states: c.states.clone(),
        inputs,
    }
}

/// Output `name` of one run of `c` on `be`.
fn output(be: &mut dyn Backend, c: &Case, name: &str) -> Vec<f32> {
    let (outs, _) = run_on(be, c, 1);
    let (_, t) = outs[0].iter().find(|(n, _)| n == name).unwrap();
    t.to_f32().unwrap()
}

#[test]
fn gemv_int8_matches_the_q8_activation_reference() {
    // The GPU quantizes x per 32 values; the CPU gets those values as f32, so both compute the
    // same products and agree to rounding. K: odd multiples of the block (one block, and more
    // items than every workgroup size takes in one round); N across the GEMV buckets and the
    // multi-pass widths.
    let mut cpu = backend::create("cpu").unwrap();
    for (mut g, label) in int8_gpus(true) {
        for (i, &t) in INT8_TYPES.iter().enumerate() {
            let blk = t.block_elems();
            for k in [blk, blk * if blk == 32 { 45 } else { 17 }] {
                let mut b = B::new(500 + i as u64 + k as u64);
                let w = b.weight("w", t, &[13, k], 0.5, 0.0);
                for n in [1usize, 2, 3, 8, 16, 17] {
                    let x = b.input(&format!("x{n}"), &[n, k], 1.0);
                    let y = b.b.matmul(x, w).unwrap();
                    b.out(&format!("y{n}"), y);
                }
                let c = b.case();
                let (want, _) = run_on(cpu.as_mut(), &roundtripped(&c), 1);
                let (got, _) = run_on(&mut g, &c, 2);
                for run in &got {
                    for ((name, wt), (_, gt)) in want[0].iter().zip(run) {
                        let e = rel_err(&gt.to_f32().unwrap(), &wt.to_f32().unwrap());
                        assert!(
                            e <= 1e-5,
                            "int8 gemv {t} K={k} {name} ({label}): relative error {e:e}"
                        );
                    }
                }
            }
        }
    }
}

/// `y = x · wᵀ` over the weight `w` ([m, k], type `t`) of `weights`, on the rows `x`.
fn matmul_case(weights: &WeightStore, t: DType, m: usize, k: usize, x: &[f32]) -> Case {
    let mut b = B::new(0);
    b.w = weights.clone();
    let xi = b.input_f32("x", &[x.len() / k, k], x.to_vec());
    let wt = b.b.weight("w", t, &[m, k]).unwrap();
    let y = b.b.matmul(xi, wt).unwrap();
    b.out("y", y);
    b.case()
}

/// A random `[m, k]` weight of type `t` and `n` random rows (seed `seed`): the matmul's case
/// and its rows.
fn random_matmul(seed: u64, t: DType, m: usize, k: usize, n: usize) -> (Case, Vec<f32>) {
    let mut b = B::new(seed);
    b.weight("w", t, &[m, k], 0.5, 0.0);
    let x = b.rng.vec_normal(n * k, 1.0);
    let c = matmul_case(&b.w, t, m, k, &x);
    (c, x)
}

#[test]
fn gemv_int8_rows_do_not_depend_on_the_batch() {
    // Lossless speculation needs a verified row to equal the decoded row bit for bit.
    let k = 256 * 5;
    for (mut g, label) in int8_gpus(true) {
        for (i, &t) in INT8_TYPES.iter().enumerate() {
            let (all, x16) = random_matmul(700 + i as u64, t, 37, k, 16);
            let wide = output(&mut g, &all, "y");
            for n in [1usize, 3, 8] {
                let some = output(&mut g, &matmul_case(&all.w, t, 37, k, &x16[..n * k]), "y");
                assert_eq!(some, wide[..n * 37], "{t} N={n} vs 16 ({label})");
            }
        }
    }
}

#[test]
fn prefill_widths_on_the_int8_path_equal_their_decode() {
    // The int8 path takes every width by default (`DELTASPEC_WGPU_INT8_MAX_N` narrows it): a
    // 90-row input runs as several GEMV dispatches over one quantization; each row must still
    // be its 1-row decode, bit for bit.
    let k = 256 * 2;
    for &t in &[DType::Q8_0, DType::Iq4Xs] {
        let Some(mut g) = gpu_with(WgpuOptions {
            int8_matmul: Some(true),
            ..Default::default()
        }) else {
            return;
        };
        let (mut all, x90) = random_matmul(71, t, 19, k, 90);
        // As a verify step: no prompt-only kernel (cooperative matrices) where the GPU has one.
        all.g.rows_match_decode = true;
        let wide = output(&mut g, &all, "y");
        for r in [0usize, 37, 89] {
            let one = output(
                &mut g,
                &matmul_case(&all.w, t, 19, k, &x90[r * k..(r + 1) * k]),
                "y",
            );
            assert_eq!(
                wide[r * 19..(r + 1) * 19]
                    .iter()
                    .map(|v| v.to_bits())
                    .collect::<Vec<_>>(),
                one.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                "{t}: row {r} of 90 differs from its decode"
            );
        }
    }
}

#[test]
fn fused_projections_and_swiglu_int8() {
    // Fused and unfused int8 dispatches quantize the same values (the folded sigmoid gate is
    // applied before quantization), so they agree to rounding; against the f32 CPU reference
    // only to the int8 activation error. Inputs of the first projections are graph inputs:
    // those match the q8-activation reference tightly.
    let mut cpu = backend::create("cpu").unwrap();
    let Some((mut plain, _)) = int8_gpus(false).into_iter().next() else {
        return;
    };
    for (mut g, label) in int8_gpus(true) {
        for n in [1usize, 3, 8, 16] {
            let c = step_like(n);
            let exact = run_on(cpu.as_mut(), &roundtripped(&c), 1).0;
            let f32_ref = run_on(cpu.as_mut(), &c, 1).0;
            let fused = run_on(&mut g, &c, 2).0;
            let unfused = run_on(&mut plain, &c, 1).0;
            for run in &fused {
                for (j, (name, t)) in run.iter().enumerate() {
                    let got = t.to_f32().unwrap();
                    let ctx = format!("int8 step N={n} {name} ({label})");
                    let e = rel_err(&got, &unfused[0][j].1.to_f32().unwrap());
                    assert!(e <= 1e-5, "{ctx}: vs unfused {e:e}");
                    let e = rel_err(&got, &f32_ref[0][j].1.to_f32().unwrap());
                    assert!(e <= 5e-2, "{ctx}: vs f32 reference {e:e}");
                    if ["qkv", "z", "beta", "alpha", "q0", "q1", "k", "v"].contains(&name.as_str())
                    {
                        let e = rel_err(&got, &exact[0][j].1.to_f32().unwrap());
                        assert!(e <= 1e-5, "{ctx}: vs q8 reference {e:e}");
                    }
                }
            }
            if n <= 8 {
                // The five fused GEMVs, and x quantized once for [qkv z β α], [gate up] and
                // [q k v] (reused): [gate up] quantizes down's input itself (QOUT, into the
                // second buffer pair); o is F16 (f32 activations, gate folded). Two runs: the
                // block counters are back at zero after each.
                assert_eq!(dispatches(&mut g, &c), 6, "N={n} ({label})");
            }
        }
    }
}

/// The decode graph's norms feeding int8 GEMVs: add_rms_norm → a projection, rms_norm of the
/// residual sum → two projections (one fused group), gated_rms_norm per head → (a view) → an
/// out projection. Row widths `d`: one block, odd block counts, a partly masked last pass.
fn norms_into_gemvs(n: usize, d: usize, t: DType) -> Case {
    let mut b = B::new(900 + (n * d) as u64);
    let x = b.input("x", &[n, d], 1.0);
    let r = b.input("r", &[n, d], 1.0);
    let w1 = b.weight("w1", DType::F32, &[d], 0.2, 1.0);
    let (s, y1) = b.b.add_rms_norm(x, r, w1, 1e-6).unwrap();
    let wa = b.weight("a", t, &[19, d], 0.5, 0.0);
    let a = b.b.matmul(y1, wa).unwrap();
    b.out("sum", s);
    b.out("y1", y1);
    b.out("a", a);
    let w2 = b.weight("w2", DType::F16, &[d], 0.2, 1.0);
    let y2 = b.b.rms_norm(s, w2, 1e-6).unwrap();
    for name in ["b", "c"] {
        let wb = b.weight(name, t, &[7, d], 0.5, 0.0);
        let o = b.b.matmul(y2, wb).unwrap();
        b.out(name, o);
    }
    // Heads of 32 values: d / 32 heads per row.
    let h = d / 32;
    let xg = b.input("xg", &[n * h, 32], 1.0);
    let z = b.input("z", &[n * h, 32], 2.0);
    let wg = b.weight("wg", DType::F32, &[32], 0.2, 1.0);
    let gy = b.b.gated_rms_norm(xg, z, wg, 1e-6).unwrap();
    let gy = b.b.reshape(gy, &[n, d]).unwrap();
    let wo = b.weight("o", t, &[11, d], 0.5, 0.0);
    let o = b.b.matmul(gy, wo).unwrap();
    b.out("o", o);
    b.case()
}

#[test]
fn norm_q8_matches_norm_then_quantize() {
    // The fused norm writes the int8 values and scales the quantize kernel would compute from
    // the norm's f32 output, so every GEMV result is bit-identical with the fusion off, and the
    // norm outputs are unchanged. Three quantize dispatches fewer.
    for no_sg in [false, true] {
        let opts = |q8| WgpuOptions {
            no_subgroups: no_sg,
            int8_matmul: Some(true),
            norm_q8: Some(q8),
            ..Default::default()
        };
        let (Some(mut on), Some(mut off)) = (gpu_with(opts(true)), gpu_with(opts(false))) else {
            return;
        };
        for (t, d) in [
            (DType::Q8_0, 32),
            (DType::Q8_0, 96),
            (DType::Q8_0, 2080),
            (DType::Q4K, 768),
            (DType::Iq4Xs, 5120),
        ] {
            for n in [1usize, 3, 17] {
                let c = norms_into_gemvs(n, d, t);
                let ctx = format!("{t} d={d} N={n} (no subgroups: {no_sg})");
                let got = run_on(&mut on, &c, 2).0;
                let want = run_on(&mut off, &c, 1).0;
                assert_same_bits(&got, &want, &ctx, "differs with the fusion on");
                assert_eq!(
                    dispatches(&mut on, &c) + 3,
                    dispatches(&mut off, &c),
                    "{ctx}"
                );
            }
        }
        // Against the CPU reference (f32 activations) to the int8 activation error.
        let mut cpu = backend::create("cpu").unwrap();
        let c = norms_into_gemvs(3, 2080, DType::Q8_0);
        let want = run_on(cpu.as_mut(), &c, 1).0;
        let got = run_on(&mut on, &c, 1).0;
        for ((name, g), (_, w)) in got[0].iter().zip(&want[0]) {
            let e = rel_err(&g.to_f32().unwrap(), &w.to_f32().unwrap());
            let tol = if ["sum", "y1"].contains(&name.as_str()) {
                1e-5
            } else {
                5e-2
            };
            assert!(
                e <= tol,
                "{name} (no subgroups: {no_sg}): vs f32 reference {e:e}"
            );
        }
    }
}

/// add_rms_norm (+ its int8 quantization) → an IQ4_XS projection over the first `n` of the
/// rows `x`, `r` (width `d`); the weights come first from the same seed in every case.
fn norm_rows_case(x: &[f32], r: &[f32], n: usize, d: usize) -> Case {
    let mut b = B::new(77);
    let w = b.weight("w", DType::F32, &[d], 0.2, 1.0);
    let wp = b.weight("p", DType::Iq4Xs, &[24, d], 0.5, 0.0);
    let xi = b.input_f32("x", &[n, d], x[..n * d].to_vec());
    let ri = b.input_f32("r", &[n, d], r[..n * d].to_vec());
    let (s, y) = b.b.add_rms_norm(xi, ri, w, 1e-6).unwrap();
    let p = b.b.matmul(y, wp).unwrap();
    b.out("sum", s);
    b.out("y", y);
    b.out("p", p);
    b.case()
}

#[test]
fn norm_rows_do_not_depend_on_the_row_count() {
    // Up to 16 rows a wide norm runs several workgroups per row (PART), beyond one: the same
    // bits either way, so a verified row equals the decoded row.
    let d = 5120;
    let mut rng = deltaspec::util::rng::Rng::new(5);
    let x = rng.vec_normal(20 * d, 1.0);
    let r = rng.vec_normal(20 * d, 1.0);
    for no_sg in [false, true] {
        let Some(mut g) = gpu_with(WgpuOptions {
            no_subgroups: no_sg,
            int8_matmul: Some(true),
            ..Default::default()
        }) else {
            return;
        };
        let whole = run_on(&mut g, &norm_rows_case(&x, &r, 20, d), 1).0;
        for n in [1usize, 2, 16] {
            let part = run_on(&mut g, &norm_rows_case(&x, &r, n, d), 1).0;
            for ((name, p), (_, w)) in part[0].iter().zip(&whole[0]) {
                let (p, w) = (p.to_f32().unwrap(), w.to_f32().unwrap());
                let same = p.iter().zip(&w).all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(
                    same,
                    "{name}: {n} rows differ from 20 (no subgroups: {no_sg})"
                );
            }
        }
    }
}

/// Every kind of kernel that reads weights of type `t` (IQ4_XS or Q8_0): an embedding, a norm
/// weight, GEMVs at decode and verify widths (17: the tiled kernel without int8 activations),
/// fused projection segments and a gate/up/down SwiGLU. Block counts per buffer are odd and
/// not multiples of 8 (a lone IQ4_XS block, a short Q8_0 group) as well as whole pairs/groups.
fn reader_case(t: DType) -> Case {
    // Weight rows of 3 and 17 (IQ4_XS) or 3 and 45 (Q8_0) blocks.
    let blk = t.block_elems();
    let (ke, kg) = (blk * 3, if blk == 256 { blk * 17 } else { blk * 45 });
    let mut b = B::new(1234);
    let table = b.weight("table", t, &[7, ke], 0.5, 0.0);
    let ids = b.input_i32("ids", vec![6, 0, 3]);
    let e = b.b.embed(table, ids).unwrap();
    b.out("embed", e);
    let wn = b.weight("norm", t, &[ke], 0.5, 1.0);
    let y = b.b.rms_norm(e, wn, 1e-6).unwrap();
    b.out("norm", y);
    let w = b.weight("w", t, &[13, kg], 0.5, 0.0);
    for n in [1usize, 3, 17] {
        let x = b.input(&format!("x{n}"), &[n, kg], 1.0);
        let y = b.b.matmul(x, w).unwrap();
        b.out(&format!("y{n}"), y);
    }
    let (d, ff) = (512, 256);
    for n in [1usize, 3] {
        let x = b.input(&format!("s{n}"), &[n, d], 1.0);
        for (name, rows) in [("qkv", 40), ("z", 24), ("beta", 3)] {
            let name = format!("{name}{n}");
            let w = b.weight(&name, t, &[rows, d], 0.5, 0.0);
            let y = b.b.matmul(x, w).unwrap();
            b.out(&name, y);
        }
        let wg = b.weight(&format!("gate{n}"), t, &[ff, d], 0.5, 0.0);
        let wu = b.weight(&format!("up{n}"), t, &[ff, d], 0.5, 0.0);
        let wd = b.weight(&format!("down{n}"), t, &[d, ff], 0.5, 0.0);
        let gt = b.b.matmul(x, wg).unwrap();
        let up = b.b.matmul(x, wu).unwrap();
        let s = b.b.swiglu(gt, up).unwrap();
        let y = b.b.matmul(s, wd).unwrap();
        b.out(&format!("ffn{n}"), y);
    }
    b.case()
}

#[test]
fn relaid_weights_match_the_ggml_layout_bit_for_bit() {
    // A re-layout moves bytes, not arithmetic: every output equals the ggml layout's bit for
    // bit, with f32 and int8 activations, with subgroups and without. (The ggml layout is
    // checked against the CPU reference by the tests above.)
    for t in [DType::Iq4Xs, DType::Q8_0] {
        let c = reader_case(t);
        for int8 in [false, true] {
            for no_sg in [false, true] {
                let opts = |laid: Vec<DType>| WgpuOptions {
                    no_subgroups: no_sg,
                    int8_matmul: Some(int8),
                    relayout: Some(laid),
                    ..Default::default()
                };
                let (Some(mut laid), Some(mut ggml)) =
                    (gpu_with(opts(vec![t])), gpu_with(opts(Vec::new())))
                else {
                    return;
                };
                assert!(laid.name().contains("re-laid"), "{}", laid.name());
                let ctx = format!("{t}, int8 {int8}, no subgroups {no_sg}");
                let got = run_on(&mut laid, &c, 2).0;
                let want = run_on(&mut ggml, &c, 1).0;
                assert_same_bits(&got, &want, &ctx, "the re-laid weights differ");
            }
        }
        // Weights split into parts of a few rows (odd block counts: a lone IQ4_XS block, a
        // short Q8_0 group at each part's end), each part re-laid on its own.
        let Some(mut split) = gpu_with(WgpuOptions {
            relayout: Some(vec![t]),
            max_weight_binding: Some(8 << 10),
            ..Default::default()
        }) else {
            return;
        };
        let want = run_on(&mut gpu_with(WgpuOptions::default()).unwrap(), &c, 1).0;
        let got = run_on(&mut split, &c, 1).0;
        let ctx = format!("{t}, split into 8 KiB parts");
        assert_same_bits(&got, &want, &ctx, "the re-laid parts differ");
    }
}

#[test]
fn relayout_setting_names_types() {
    use deltaspec::backend::wgpu::parse_relayout;
    assert_eq!(parse_relayout("").unwrap(), Vec::<DType>::new());
    assert_eq!(parse_relayout("none").unwrap(), Vec::<DType>::new());
    assert_eq!(
        parse_relayout("q8_0, IQ4_XS,q8_0").unwrap(),
        vec![DType::Iq4Xs, DType::Q8_0]
    );
    assert_eq!(parse_relayout("all").unwrap().len(), 2);
    let e = parse_relayout("q4_k").unwrap_err();
    assert!(e.contains("q4_k") && e.contains("IQ4_XS"), "{e}");
}

#[test]
fn iq4_grid_lookups_match_the_table_bit_for_bit() {
    // The lookups produce the same int8 grid words, so every output is the table's bit for bit
    // (also over re-laid weights).
    use deltaspec::backend::wgpu::shaders::Iq4Lookup;
    let c = reader_case(DType::Iq4Xs);
    for no_sg in [false, true] {
        let opts = |lookup, laid: Vec<DType>| WgpuOptions {
            no_subgroups: no_sg,
            int8_matmul: Some(true),
            iq4_lookup: Some(lookup),
            relayout: Some(laid),
            ..Default::default()
        };
        let Some(mut table) = gpu_with(opts(Iq4Lookup::Table, Vec::new())) else {
            return;
        };
        let want = run_on(&mut table, &c, 1).0;
        for (lookup, laid) in [
            (Iq4Lookup::Alu, Vec::new()),
            (Iq4Lookup::Mix, Vec::new()),
            (Iq4Lookup::Mix, vec![DType::Iq4Xs]),
        ] {
            let mut g = gpu_with(opts(lookup, laid.clone())).unwrap();
            assert!(g.name().contains(lookup.name()), "{}", g.name());
            let got = run_on(&mut g, &c, 1).0;
            let ctx = format!("{lookup:?} (re-laid {laid:?}, no subgroups {no_sg})");
            assert_same_bits(&got, &want, &ctx, "differs from the table");
        }
    }
    assert!(Iq4Lookup::parse("selects").is_err());
}

/// The backend when its adapter has cooperative matrices, else `None` (with a note on stderr;
/// `DELTASPEC_REQUIRE_COOP=1` turns the skip into a failure, for the GPU machine's runs).
fn coop_gpu(int8: bool) -> Option<WgpuBackend> {
    let g = gpu_with(WgpuOptions {
        int8_matmul: Some(int8),
        coop: Some(true),
        ..Default::default()
    })?;
    if g.has_coop() {
        return Some(g);
    }
    assert!(
        std::env::var("DELTASPEC_REQUIRE_COOP").is_err(),
        "DELTASPEC_REQUIRE_COOP is set but {} has no usable cooperative matrices",
        g.name()
    );
    eprintln!("skipped: {} has no usable cooperative matrices", g.name());
    None
}

#[test]
fn coop_prompt_widths_every_type_and_odd_sizes() {
    // f16 operands keep 11 bits: the L2-relative error of a sum of random products is ~1e-3.
    for int8 in [false, true] {
        let Some(mut g) = coop_gpu(int8) else {
            return;
        };
        for (i, &t) in TYPES.iter().enumerate() {
            let mut b = B::new(900 + i as u64);
            // K = 288 for the plain floats: not a multiple of the kernel's 32-wide K steps.
            let k = if t.is_quantized() { 256 * 3 } else { 288 + 5 };
            // 130 and 37 rows: the last 64-row tile part full, part empty.
            let w = b.weight("w", t, &[130, k], 0.5, 0.0);
            let w2 = b.weight("w2", t, &[37, k], 0.5, 0.0);
            for n in [65usize, 100, 129, 200] {
                let x = b.input(&format!("x{n}"), &[n, k], 1.0);
                let y = b.b.matmul(x, w).unwrap();
                b.out(&format!("y{n}"), y);
                let y2 = b.b.matmul(x, w2).unwrap();
                b.out(&format!("z{n}"), y2);
            }
            check(&mut g, &b.case(), 3e-3, &format!("coop {t} (int8 {int8})"));
        }
    }
}

#[test]
fn coop_prompt_step_with_fusable_neighbours() {
    // A prompt-wide step: projections sharing an input, the SwiGLU and the sigmoid gate around
    // matmuls on the cooperative-matrix kernel, none fused into GEMVs at this width.
    for int8 in [false, true] {
        let Some(mut g) = coop_gpu(int8) else {
            return;
        };
        check(
            &mut g,
            &step_like(70),
            3e-3,
            &format!("coop step (int8 {int8})"),
        );
    }
}
