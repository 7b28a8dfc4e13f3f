//! Every op of the native GPU backend (`hip`) against the CPU reference backend, on random
//! inputs with odd sizes, plus a whole synthetic model (prefill and decode).
//!
//! Each test SKIPS (passes, printing why) when the backend is unavailable: no GPU driver on the
//! machine, or no kernels embedded because clang was missing at build time; with
//! `DELTASPEC_REQUIRE_GPU=1` an unavailable backend fails instead. On a GPU machine they run for
//! real. Without a GPU they can also run on the CPU emulator of the CUDA driver API:
//! `tools/device/build_emu.sh && DELTASPEC_CUDA_LIB=$PWD/target/libdsemu.so cargo test --test hip_ops`
//! (slow: about 10 minutes on 2 cores). The GPU backend poisons its intermediate buffers with NaN before every run, so a
//! kernel that leaves part of its output unwritten fails the comparison.
//!
//! Tolerances: relative L2 error (‖gpu − cpu‖ / ‖cpu‖) ≤ 1e-5 for f32 math, ≤ 1e-4 for matmuls over
//! quantized weights (dequantized products are fused into FMAs on the GPU), 1e-4 and the same
//! argmax for whole-model logits. Integer outputs (argmax, top-k indices) must match exactly.

mod common;
#[path = "common/select_case.rs"]
mod select_case;

use common::{f32s, rel_err};
use deltaspec::backend::hip::HipBackend;
use deltaspec::backend::{
    self, Backend, HostData, HostTensor, StateDecl, StatesId, WeightStore, WeightsId,
};
use deltaspec::graph::{AttnParams, GdnParams, Graph, GraphBuilder, HeadMap, RopeParams, Yarn};
use deltaspec::tensor::{DType, quant};
use deltaspec::util::rng::Rng;

// ---------------------------------------------------------------------------------------------
// Harness: the same graph on both backends.

/// Opens the GPU backend, or prints why the test is skipped.
fn gpu(test: &str) -> Option<HipBackend> {
    let mut b = common::open_hip(test)?;
    b.set_poison(true);
    eprintln!("{test}: running on {}", b.name());
    Some(b)
}

struct Side {
    be: Box<dyn Backend>,
    w: WeightsId,
    s: StatesId,
}

struct Pair {
    cpu: Side,
    gpu: Side,
}

type Outs = Vec<(String, HostTensor)>;

impl Pair {
    fn new(test: &str, weights: &WeightStore, states: &[StateDecl]) -> Option<Pair> {
        Self::with(test, weights, states, |_| {})
    }

    fn with(
        test: &str,
        weights: &WeightStore,
        states: &[StateDecl],
        cfg: impl FnOnce(&mut HipBackend),
    ) -> Option<Pair> {
        let mut g = gpu(test)?;
        cfg(&mut g);
        let side = |mut be: Box<dyn Backend>| {
            let w = be.upload_weights(weights).expect("upload");
            let s = be.alloc_states(states).expect("alloc states");
            Side { be, w, s }
        };
        Some(Pair {
            cpu: side(backend::create("cpu").expect("cpu")),
            gpu: side(Box::new(g)),
        })
    }

    fn run(&mut self, g: &Graph, inputs: &[(&str, HostData)]) -> (Outs, Outs) {
        let one = |s: &mut Side| {
            let e = s.be.compile(g).expect("compile");
            s.be.run(e, s.w, s.s, inputs).expect("run")
        };
        (one(&mut self.cpu), one(&mut self.gpu))
    }

    fn states(&mut self, name: &str) -> (Vec<f32>, Vec<f32>) {
        (
            self.cpu.be.read_state(self.cpu.s, name).expect("cpu state"),
            self.gpu.be.read_state(self.gpu.s, name).expect("gpu state"),
        )
    }

    fn write_state(&mut self, name: &str, v: &[f32]) {
        self.cpu.be.write_state(self.cpu.s, name, v).unwrap();
        self.gpu.be.write_state(self.gpu.s, name, v).unwrap();
    }

    /// Runs `g` on both and compares every output (and the named states) within `tol`.
    fn check(
        &mut self,
        what: &str,
        g: &Graph,
        inputs: &[(&str, HostData)],
        tol: f64,
        states: &[&str],
    ) {
        let (c, h) = self.run(g, inputs);
        compare(what, &c, &h, tol);
        for s in states {
            let (c, h) = self.states(s);
            close(&format!("{what}: state {s}"), &h, &c, tol);
        }
    }
}

/// GPU values `got` against CPU values `want`: no NaN where the CPU has none, relative L2 error.
fn close(what: &str, got: &[f32], want: &[f32], tol: f64) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    if let Some(i) = (0..got.len()).find(|&i| got[i].is_nan() != want[i].is_nan()) {
        panic!(
            "{what}: element {i} is {} on the GPU and {} on the CPU",
            got[i], want[i]
        );
    }
    let (g, w): (Vec<f32>, Vec<f32>) = got
        .iter()
        .zip(want)
        .filter(|(a, b)| !a.is_nan() && !b.is_nan())
        .map(|(a, b)| (*a, *b))
        .unzip();
    let e = rel_err(&g, &w);
    assert!(e <= tol, "{what}: relative error {e:.3e} > {tol:.0e}");
}

fn compare(what: &str, cpu: &Outs, gpu: &Outs, tol: f64) {
    assert_eq!(cpu.len(), gpu.len(), "{what}: output count");
    for ((cn, ct), (gn, gt)) in cpu.iter().zip(gpu) {
        assert_eq!(cn, gn, "{what}: output order");
        assert_eq!(ct.shape, gt.shape, "{what}: {cn} shape");
        assert_eq!(ct.dtype, gt.dtype, "{what}: {cn} dtype");
        if ct.dtype == DType::I32 {
            assert_eq!(gt.to_i32(), ct.to_i32(), "{what}: {cn}");
        } else {
            close(&format!("{what}: {cn}"), &f32s(gt), &f32s(ct), tol);
        }
    }
}

fn store(list: Vec<(&str, HostTensor)>) -> WeightStore {
    let mut w = WeightStore::default();
    for (n, t) in list {
        w.insert(n, t);
    }
    w
}

/// A weight of `dtype` holding (the quantization of) normal values of scale `scale`.
fn weight(rng: &mut Rng, dtype: DType, shape: &[usize], scale: f32) -> HostTensor {
    let n: usize = shape.iter().product();
    let v = rng.vec_normal(n, scale);
    HostTensor::from_bytes(dtype, shape, quant::quantize(dtype, &v).expect("quantize"))
}

const F32_TOL: f64 = 1e-5;
const QUANT_TOL: f64 = 1e-4;

const ALL_TYPES: &[DType] = &[
    DType::F32,
    DType::F16,
    DType::BF16,
    DType::Q4_0,
    DType::Q4_1,
    DType::Q5_0,
    DType::Q5_1,
    DType::Q8_0,
    DType::Q4K,
    DType::Q5K,
    DType::Q6K,
    DType::Iq4Nl,
    DType::Iq4Xs,
];

// ---------------------------------------------------------------------------------------------
// MatMul, Embed

fn matmul_graph(n: usize, k: usize, m: usize, dtype: DType) -> Graph {
    let mut b = GraphBuilder::new();
    let x = b.input("x", DType::F32, &[n, k]).unwrap();
    let w = b.weight("w", dtype, &[m, k]).unwrap();
    let y = b.matmul(x, w).unwrap();
    b.output("y", y).unwrap();
    b.build()
}

/// Row lengths to test per type: whole blocks, including a non-multiple of 8 for the scalar
/// float kernels.
fn ks(dtype: DType) -> Vec<usize> {
    match dtype.block_elems() {
        1 => vec![64, 67, 300],
        32 => vec![96, 512],
        _ => vec![256, 768],
    }
}

#[test]
fn matmul_every_type_gemv_and_tiled() {
    // gemv_max_n: default (f32 GEMV up to 64 rows), 0 (always tiled), huge (always GEMV); f32
    // activations (the int8 path has its own test below).
    for (label, max_n) in [
        ("default", None),
        ("tiled", Some(0)),
        ("gemv", Some(usize::MAX)),
    ] {
        for &dtype in ALL_TYPES {
            for k in ks(dtype) {
                let m = 37;
                let mut rng = Rng::new(k as u64 * 31 + m as u64);
                let w = store(vec![("w", weight(&mut rng, dtype, &[m, k], 0.5))]);
                let Some(mut p) = Pair::with("matmul", &w, &[], |g| {
                    g.set_int8_matmul(false);
                    if let Some(n) = max_n {
                        g.set_gemv_max_n(n);
                    }
                }) else {
                    return;
                };
                for n in [1, 2, 3, 5, 8, 13, 33, 70] {
                    let x = rng.vec_normal(n * k, 1.0);
                    let tol = if dtype.is_quantized() {
                        QUANT_TOL
                    } else {
                        F32_TOL
                    };
                    p.check(
                        &format!("matmul[{label}] {dtype} n={n} k={k} m={m}"),
                        &matmul_graph(n, k, m, dtype),
                        &[("x", HostData::F32(x))],
                        tol,
                        &[],
                    );
                }
            }
        }
    }
}

/// Types with an int8-activation kernel (`kernels::QGEMV_TYPES`).
const INT8_TYPES: &[DType] = &[
    DType::Q8_0,
    DType::Q4K,
    DType::Q5K,
    DType::Q6K,
    DType::Iq4Xs,
];

/// One int8-activation matmul of fresh inputs on the GPU against the CPU, which gets the same
/// int8-rounded values as f32 (`q8_activation_roundtrip`): the same products, to rounding.
fn int8_matmul_vs_cpu(
    p: &mut Pair,
    rng: &mut Rng,
    what: &str,
    dtype: DType,
    n: usize,
    k: usize,
    m: usize,
) {
    let x = rng.vec_normal(n * k, 1.0);
    let xq = quant::q8_activation_roundtrip(&x);
    let g = matmul_graph(n, k, m, dtype);
    let ec = p.cpu.be.compile(&g).unwrap();
    let c = p
        .cpu
        .be
        .run(ec, p.cpu.w, p.cpu.s, &[("x", HostData::F32(xq))]);
    let eg = p.gpu.be.compile(&g).unwrap();
    let h = p
        .gpu
        .be
        .run(eg, p.gpu.w, p.gpu.s, &[("x", HostData::F32(x))]);
    compare(
        &format!("matmul[{what}] {dtype} n={n} k={k} m={m}"),
        &c.unwrap(),
        &h.unwrap(),
        F32_TOL,
    );
}

#[test]
fn matmul_int8_activations_match_the_quantized_reference() {
    // The GPU quantizes x to int8 per 32 values; the CPU gets those same values as f32
    // (`q8_activation_roundtrip`), so both compute the same products and agree to rounding.
    // K = 4352: more than four items per lane (the GEMV's unrolled main loop and its tail).
    for &dtype in INT8_TYPES {
        for k in ks(dtype).into_iter().chain([4352]) {
            for m in [1, 37, 130] {
                let mut rng = Rng::new(k as u64 * 7 + m as u64);
                let w = store(vec![("w", weight(&mut rng, dtype, &[m, k], 0.5))]);
                let Some(mut p) = Pair::with("matmul_int8", &w, &[], |g| {
                    g.set_int8_matmul(true);
                    g.set_int8_max_n(usize::MAX); // the default: 33 rows too (two passes of 16 + 1)
                }) else {
                    return;
                };
                for n in [1, 2, 3, 5, 8, 13, 16, 17, 33] {
                    int8_matmul_vs_cpu(&mut p, &mut rng, "int8", dtype, n, k, m);
                }
            }
        }
    }
}

#[test]
fn matmul_int8_prefill_tile_matches_the_quantized_reference() {
    // The prefill tile (`qmmp*`, NVIDIA; elsewhere the setting keeps the other kernels): one
    // accumulator per output over all of K, 64 input rows a pass, 64 weight rows a block. Inputs
    // past one pass and not a multiple of 8 (33, 70), weight rows past one block and not a
    // multiple of 16 (37, 130), against the CPU on the same int8-rounded inputs.
    for &dtype in INT8_TYPES {
        for k in ks(dtype) {
            for m in [37, 130] {
                let mut rng = Rng::new(k as u64 * 11 + m as u64);
                let w = store(vec![("w", weight(&mut rng, dtype, &[m, k], 0.5))]);
                let Some(mut p) = Pair::with("matmul_int8_prefill", &w, &[], |g| {
                    g.set_int8_matmul(true);
                    g.set_qmma_skip(Some(Vec::new()));
                    g.set_qmmp(true);
                }) else {
                    return;
                };
                for n in [33, 70] {
                    int8_matmul_vs_cpu(&mut p, &mut rng, "prefill tile", dtype, n, k, m);
                }
            }
        }
    }
}

#[test]
fn matmul_int8_rows_do_not_depend_on_the_batch() {
    // Lossless speculation needs a verify row to equal the decode of the same row bit for bit.
    // K = 4352 gives every lane more than four 32-value items, so the unrolled main loop of
    // the GEMV (several items in flight per lane) and its tail both run.
    let m = 77;
    for k in [512, 4352] {
        for &dtype in INT8_TYPES {
            let mut rng = Rng::new(99);
            let w = store(vec![("w", weight(&mut rng, dtype, &[m, k], 0.5))]);
            let Some(mut g) = gpu("matmul_int8_batch") else {
                return;
            };
            g.set_int8_matmul(true);
            let wid = g.upload_weights(&w).unwrap();
            let sid = g.alloc_states(&[]).unwrap();
            let x = rng.vec_normal(16 * k, 1.0);
            let mut run = |n: usize, x: &[f32], wide: Option<u32>| {
                g.set_qgemv_wide_rows(wide);
                let e = g.compile(&matmul_graph(n, k, m, dtype)).unwrap();
                f32s(
                    &g.run(e, wid, sid, &[("x", HostData::F32(x.to_vec()))])
                        .unwrap()[0]
                        .1,
                )
            };
            let all = run(16, &x, None);
            for n in [1, 3, 8] {
                let some = run(n, &x[..n * k], None);
                assert_eq!(
                    some,
                    all[..n * m],
                    "{dtype}: rows of an n={n} batch differ from n=16"
                );
            }
            // The wide variants (NVIDIA: several weight rows per warp at 8/16 input rows) give the
            // same bits; elsewhere the setting falls back to the portable kernel.
            for wide in [2, 4] {
                for n in [8, 13, 16] {
                    let some = run(n, &x[..n * k], Some(wide));
                    assert_eq!(
                        some,
                        all[..n * m],
                        "{dtype}: n={n} with {wide} rows per warp differs from the portable kernel"
                    );
                }
            }
        }
    }
}

#[test]
fn matmul_int8_matrix_core_rows_equal_the_dp4a_rows() {
    // The matrix-core kernel (NVIDIA; elsewhere the setting keeps the dp4a kernel, and this
    // holds trivially) must give the dp4a kernel's bits, whose rows equal the 1-row decode's
    // (previous test). M = 77: not a multiple of its 16 rows per block. K = 512 and 1280: 16
    // and 40 items of 32 values per row (it replays the dp4a kernel's 32 lane partials, split
    // over the block's warps: part of one round of 32 items, where some warps have no items, and
    // one round plus a part); Q8_0 also K = 416, 13 items, where a warp's run of consecutive
    // items is cut short (the tail path). Inputs at every tile (8, 16, 32 rows per block; 33
    // loops over a second group) and not a multiple of 8, down to 2 rows (the 8-row tile with
    // the matrix-core kernel's fewest rows lowered, as `DELTASPEC_HIP_QMMA_MIN_ROWS` does), on
    // plain and on fragment-ordered activations (`qmma*f`, whose padding rows and groups past N
    // must not leak into results).
    let m = 77;
    for &dtype in INT8_TYPES {
        let tail = (dtype == DType::Q8_0).then_some(416);
        for k in [512, 2304].into_iter().chain(tail) {
            let mut rng = Rng::new(7 + k as u64);
            let w = store(vec![("w", weight(&mut rng, dtype, &[m, k], 0.5))]);
            let Some(mut g) = gpu("matmul_int8_mma") else {
                return;
            };
            g.set_int8_matmul(true);
            g.set_qmma_min_rows(2);
            g.set_qmma_skip(Some(Vec::new())); // every type on the matrix cores, Q8_0 too
            g.set_qmmp(false); // the verify tile at 33 rows: the prefill tile sums in another order
            g.set_qmma_staged_grid(Some(2));
            let wid = g.upload_weights(&w).unwrap();
            let sid = g.alloc_states(&[]).unwrap();
            let x = rng.vec_normal(33 * k, 1.0);
            let mut run = |n: usize, mma: bool, one: bool, xl: bool, v2: u8| {
                g.set_qgemv_mma(mma);
                g.set_qmma_unroll_one(one);
                g.set_qmma_xlayout(xl);
                g.set_qmma_v2(Some(v2));
                let e = g.compile(&matmul_graph(n, k, m, dtype)).unwrap();
                f32s(
                    &g.run(e, wid, sid, &[("x", HostData::F32(x[..n * k].to_vec()))])
                        .unwrap()[0]
                        .1,
                )
            };
            let want = run(33, false, false, false, 0);
            // Two chunks of items per warp step (the default) on plain and fragment-ordered
            // activations, the latter also with L2 prefetch (`qmma*p`), hoisted loads (`qmma*q`)
            // and half the warps (`qmma*w`), and one chunk (`u1`) at 8 and 16 rows.
            let ns = [2, 4, 5, 13, 16, 17, 33];
            let cases = ns.map(|n| (n, false, false, 0)).into_iter();
            let cases = cases.chain(ns.map(|n| (n, false, true, 0)));
            let cases = cases.chain([5, 16, 17, 33].map(|n| (n, false, true, 1)));
            let cases = cases.chain([5, 16, 17, 33].map(|n| (n, false, true, 2)));
            // Half the warps per block at 8 and 16 rows (`qmma*w`).
            let cases = cases.chain([5, 16, 17, 33].map(|n| (n, false, true, 3)));
            // The staged kernels (`qmma*t`, IQ4_XS at 8 and 16 rows; the default elsewhere),
            // their grid capped at 2 blocks so each walks several tiles (77 rows: 5 tiles).
            let cases = cases.chain([5, 8, 13, 16, 17].map(|n| (n, false, true, 4)));
            for (n, one, xl, v2) in cases.chain([(5, true, false, 0), (16, true, false, 0)]) {
                let got = run(n, true, one, xl, v2);
                if let Some(i) = (0..n * m).find(|&i| got[i].to_bits() != want[i].to_bits()) {
                    panic!(
                        "{dtype} k={k}: n={n} (u1: {one}, xlayout: {xl}, v2: {v2}) matrix-core row {} col {} is {} not {}",
                        i / m,
                        i % m,
                        got[i],
                        want[i]
                    );
                }
            }
        }
    }
}

#[test]
fn matmul_with_an_activation_as_weight() {
    let (n, k, m) = (3, 45, 19);
    let Some(mut p) = Pair::new("matmul_activation", &WeightStore::default(), &[]) else {
        return;
    };
    let mut rng = Rng::new(5);
    let mut b = GraphBuilder::new();
    let x = b.input("x", DType::F32, &[n, k]).unwrap();
    let w = b.input("w", DType::F32, &[m, k]).unwrap();
    let y = b.matmul(x, w).unwrap();
    b.output("y", y).unwrap();
    p.check(
        "matmul x·wᵀ, w an input",
        &b.build(),
        &[
            ("x", HostData::F32(rng.vec_normal(n * k, 1.0))),
            ("w", HostData::F32(rng.vec_normal(m * k, 1.0))),
        ],
        F32_TOL,
        &[],
    );
}

#[test]
fn embed_every_type() {
    for &dtype in ALL_TYPES {
        let (v, d) = (41, ks(dtype)[0]);
        let mut rng = Rng::new(d as u64);
        let w = store(vec![("table", weight(&mut rng, dtype, &[v, d], 1.0))]);
        let Some(mut p) = Pair::new("embed", &w, &[]) else {
            return;
        };
        let ids: Vec<i32> = [0, 40, 7, 7, 13].to_vec();
        let mut b = GraphBuilder::new();
        let t = b.weight("table", dtype, &[v, d]).unwrap();
        let i = b.input("ids", DType::I32, &[ids.len()]).unwrap();
        let y = b.embed(t, i).unwrap();
        b.output("y", y).unwrap();
        p.check(
            &format!("embed {dtype} d={d}"),
            &b.build(),
            &[("ids", HostData::I32(ids))],
            1e-6,
            &[],
        );
    }
}

#[test]
fn bad_token_ids_and_positions_are_input_errors() {
    let mut rng = Rng::new(3);
    let w = store(vec![("table", weight(&mut rng, DType::F32, &[10, 8], 1.0))]);
    let Some(mut g) = gpu("bad_inputs") else {
        return;
    };
    let wid = g.upload_weights(&w).unwrap();
    let sid = g
        .alloc_states(&[
            StateDecl::new("kc", &[4, 1, 8]),
            StateDecl::new("vc", &[4, 1, 8]),
        ])
        .unwrap();
    let mut b = GraphBuilder::new();
    let t = b.weight("table", DType::F32, &[10, 8]).unwrap();
    let i = b.input("ids", DType::I32, &[2]).unwrap();
    let y = b.embed(t, i).unwrap();
    b.output("y", y).unwrap();
    let e = g.compile(&b.build()).unwrap();
    let err = g
        .run(e, wid, sid, &[("ids", HostData::I32(vec![3, 10]))])
        .unwrap_err();
    assert!(err.to_string().contains("outside the vocabulary"), "{err}");

    let p = AttnParams {
        n_heads: 1,
        n_kv_heads: 1,
        head_dim: 8,
        scale: 0.35,
    };
    let e = g.compile(&attention_graph(p, 1, 4, None)).unwrap();
    let err = g
        .run(e, wid, sid, &attn_inputs(&mut rng, 1, 1, 1, 8, &[4]))
        .unwrap_err();
    assert!(err.to_string().contains("outside the cache"), "{err}");
}

// ---------------------------------------------------------------------------------------------
// Elementwise, norms, slices

fn binary_graph(shape: &[usize], op: &str) -> Graph {
    let mut b = GraphBuilder::new();
    let x = b.input("a", DType::F32, shape).unwrap();
    let y = b.input("b", DType::F32, shape).unwrap();
    let o = match op {
        "add" => b.add(x, y),
        "sigmoid_mul" => b.sigmoid_mul(x, y),
        _ => b.swiglu(x, y),
    }
    .unwrap();
    b.output("y", o).unwrap();
    b.build()
}

#[test]
fn elementwise_ops() {
    let Some(mut p) = Pair::new("elementwise", &WeightStore::default(), &[]) else {
        return;
    };
    let mut rng = Rng::new(7);
    let shape = [3, 1001];
    for op in ["add", "sigmoid_mul", "swiglu"] {
        let mut a = rng.vec_normal(3003, 4.0);
        a[0] = 90.0; // saturating sigmoid / silu
        a[1] = -90.0;
        let bv = rng.vec_normal(3003, 4.0);
        p.check(
            op,
            &binary_graph(&shape, op),
            &[("a", HostData::F32(a)), ("b", HostData::F32(bv))],
            F32_TOL,
            &[],
        );
    }
}

#[test]
fn norms_with_f32_and_quantized_weights() {
    let mut rng = Rng::new(11);
    for wt in [DType::F32, DType::F16, DType::BF16] {
        // Row lengths for each kernel form (hip/norm.hip): odd (strided loop), D % 4 == 0 up to
        // 512 (one warp per row, 1 or several passes), and wider (one 512-thread block per row,
        // 1 to 4 passes, some with a partly filled last pass).
        let w = store(vec![
            ("w333", weight(&mut rng, wt, &[333], 1.0)),
            ("w257", weight(&mut rng, wt, &[257], 1.0)),
            ("w48", weight(&mut rng, wt, &[48], 1.0)),
            ("w1040", weight(&mut rng, wt, &[1040], 1.0)),
            ("w2064", weight(&mut rng, wt, &[2064], 1.0)),
            ("w300", weight(&mut rng, wt, &[300], 1.0)),
            ("w5120", weight(&mut rng, wt, &[5120], 1.0)),
            ("w6148", weight(&mut rng, wt, &[6148], 1.0)),
        ]);
        let Some(mut p) = Pair::new("norms", &w, &[]) else {
            return;
        };
        // rms_norm
        for (rows, d) in [(5, 333), (3, 1040), (4, 300), (2, 5120), (1, 6148)] {
            let mut b = GraphBuilder::new();
            let x = b.input("x", DType::F32, &[rows, d]).unwrap();
            let wi = b.weight(&format!("w{d}"), wt, &[d]).unwrap();
            let y = b.rms_norm(x, wi, 1e-6).unwrap();
            b.output("y", y).unwrap();
            p.check(
                &format!("rms_norm d={d} w {wt}"),
                &b.build(),
                &[("x", HostData::F32(rng.vec_normal(rows * d, 2.0)))],
                F32_TOL,
                &[],
            );
        }
        // add_rms_norm (two outputs)
        for (rows, d) in [(4, 257), (2, 2064), (3, 300), (2, 5120)] {
            let mut b = GraphBuilder::new();
            let x = b.input("x", DType::F32, &[rows, d]).unwrap();
            let r = b.input("r", DType::F32, &[rows, d]).unwrap();
            let wi = b.weight(&format!("w{d}"), wt, &[d]).unwrap();
            let (s, y) = b.add_rms_norm(x, r, wi, 1e-6).unwrap();
            b.output("sum", s).unwrap();
            b.output("y", y).unwrap();
            p.check(
                &format!("add_rms_norm d={d} w {wt}"),
                &b.build(),
                &[
                    ("x", HostData::F32(rng.vec_normal(rows * d, 1.0))),
                    ("r", HostData::F32(rng.vec_normal(rows * d, 1.0))),
                ],
                F32_TOL,
                &[],
            );
        }
        // gated_rms_norm over groups of 48 (warp form) and 1040 (block form)
        for (groups, d) in [(5, 48), (2, 1040)] {
            let mut b = GraphBuilder::new();
            let x = b.input("x", DType::F32, &[3, groups, d]).unwrap();
            let z = b.input("z", DType::F32, &[3, groups * d]).unwrap();
            let wi = b.weight(&format!("w{d}"), wt, &[d]).unwrap();
            let y = b.gated_rms_norm(x, z, wi, 1e-6).unwrap();
            b.output("y", y).unwrap();
            p.check(
                &format!("gated_rms_norm d={d} w {wt}"),
                &b.build(),
                &[
                    ("x", HostData::F32(rng.vec_normal(3 * groups * d, 1.0))),
                    ("z", HostData::F32(rng.vec_normal(3 * groups * d, 3.0))),
                ],
                F32_TOL,
                &[],
            );
        }
    }
    let Some(mut p) = Pair::new("l2_norm", &WeightStore::default(), &[]) else {
        return;
    };
    let mut b = GraphBuilder::new();
    let x = b.input("x", DType::F32, &[7, 129]).unwrap();
    let y = b.l2_norm(x, 1e-6, 0.3).unwrap();
    b.output("y", y).unwrap();
    p.check(
        "l2_norm",
        &b.build(),
        &[("x", HostData::F32(rng.vec_normal(7 * 129, 1.0)))],
        F32_TOL,
        &[],
    );
}

#[test]
fn slices_rows_and_reshape_views() {
    let Some(mut p) = Pair::new("slices", &WeightStore::default(), &[]) else {
        return;
    };
    let mut rng = Rng::new(13);
    let mut b = GraphBuilder::new();
    let x = b.input("x", DType::F32, &[4, 100]).unwrap();
    let s = b.slice_last(x, 17, 31).unwrap();
    let v = b.reshape(x, &[8, 50]).unwrap();
    let r = b.rows(v, 2, 5).unwrap();
    let r2 = b.reshape(r, &[10, 25]).unwrap();
    let s2 = b.slice_last(r2, 0, 25).unwrap();
    b.output("slice", s).unwrap();
    b.output("rows", r).unwrap();
    b.output("view_of_rows", r2).unwrap();
    b.output("slice_all", s2).unwrap();
    b.output("input_view", v).unwrap();
    p.check(
        "slices",
        &b.build(),
        &[("x", HostData::F32(rng.vec_normal(400, 1.0)))],
        0.0,
        &[],
    );
}

#[test]
fn rope_partial_and_full() {
    let Some(mut p) = Pair::new("rope", &WeightStore::default(), &[]) else {
        return;
    };
    let mut rng = Rng::new(17);
    let yarn = Yarn {
        factor: 32.0,
        original_context: 8192,
        beta_fast: 32.0,
        beta_slow: 1.0,
        attention_factor: None,
        truncate: true,
    };
    for (rot, theta, yarn) in [
        (16, 1e4f32, None),
        (40, 1e7, None),
        (0, 1e4, None),
        (40, 1e7, Some(yarn)),
    ] {
        let (t, h, d) = (6, 3, 40);
        let mut b = GraphBuilder::new();
        let x = b.input("x", DType::F32, &[t, h, d]).unwrap();
        let pos = b.input("pos", DType::I32, &[t]).unwrap();
        let y = b
            .rope_with(x, pos, RopeParams { rot, theta, yarn })
            .unwrap();
        b.output("y", y).unwrap();
        p.check(
            &format!("rope rot={rot} theta={theta} yarn={}", yarn.is_some()),
            &b.build(),
            &[
                ("x", HostData::F32(rng.vec_normal(t * h * d, 1.0))),
                ("pos", HostData::I32(vec![0, 1, 7, 100, 4000, 65000])),
            ],
            F32_TOL,
            &[],
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Stateful ops: conv, gated delta net, attention. Sequences are split over several calls, so the
// state carried between calls is compared too.

#[test]
fn conv_step_over_split_calls() {
    // k = 4: the kernel's register path (rows in batches of 8, so t = 11 takes two); k = 3:
    // the generic loop.
    for (c, k) in [(67, 4), (67, 3)] {
        let mut rng = Rng::new(19 + k as u64);
        let w = store(vec![("w", weight(&mut rng, DType::F32, &[c, k], 0.5))]);
        let Some(mut p) = Pair::new("conv_step", &w, &[StateDecl::new("st", &[k - 1, c])]) else {
            return;
        };
        for t in [5, 1, 2, 1, 11] {
            let mut b = GraphBuilder::new();
            let x = b.input("x", DType::F32, &[t, c]).unwrap();
            let wi = b.weight("w", DType::F32, &[c, k]).unwrap();
            let st = b.state("st", &[k - 1, c]).unwrap();
            let y = b.conv_step(x, wi, st).unwrap();
            b.output("y", y).unwrap();
            p.check(
                &format!("conv_step k={k} t={t}"),
                &b.build(),
                &[("x", HostData::F32(rng.vec_normal(t * c, 1.0)))],
                F32_TOL,
                &["st"],
            );
        }
    }
}

fn gdn_graph(p: GdnParams, t: usize) -> Graph {
    let mut b = GraphBuilder::new();
    let qkv = b.input("qkv", DType::F32, &[t, p.conv_dim()]).unwrap();
    let bb = b.input("b", DType::F32, &[t, p.nv]).unwrap();
    let a = b.input("a", DType::F32, &[t, p.nv]).unwrap();
    let ssm_a = b.weight("ssm_a", DType::F32, &[p.nv]).unwrap();
    let dt = b.weight("dt_bias", DType::F16, &[p.nv]).unwrap();
    let st = b.state("S", &[p.nv, p.dk, p.dv]).unwrap();
    let o = b.gated_delta_net(p, qkv, bb, a, ssm_a, dt, st).unwrap();
    b.output("o", o).unwrap();
    b.build()
}

/// The delta net's per-head weights: ssm_a in [-16, -0.01), dt_bias (f16) in [0.5, 1.5).
fn gdn_weights(rng: &mut Rng, nv: usize) -> WeightStore {
    let ssm_a: Vec<f32> = (0..nv).map(|_| -rng.range(0.01, 16.0)).collect();
    let dt: Vec<f32> = (0..nv).map(|_| rng.range(0.5, 1.5)).collect();
    store(vec![
        ("ssm_a", HostTensor::from_f32(&[nv], &ssm_a)),
        (
            "dt_bias",
            HostTensor::from_bytes(DType::F16, &[nv], quant::quantize(DType::F16, &dt).unwrap()),
        ),
    ])
}

#[test]
fn gated_delta_net_register_and_generic_paths() {
    for (dk, dv) in [(64, 64), (128, 128), (128, 40), (48, 72)] {
        for head_map in [HeadMap::Tiled, HeadMap::Grouped] {
            let p = GdnParams {
                nk: 2,
                nv: 6,
                dk,
                dv,
                head_map,
                l2_eps: 1e-6,
            };
            let mut rng = Rng::new((dk * 1000 + dv) as u64);
            let w = gdn_weights(&mut rng, p.nv);
            let Some(mut pair) = Pair::new(
                "gated_delta_net",
                &w,
                &[StateDecl::new("S", &[p.nv, p.dk, p.dv])],
            ) else {
                return;
            };
            // 16 and 37 rows: one full chunk of the register variants, and two and a part.
            for t in [6, 1, 1, 3, 16, 37] {
                let inputs = [
                    ("qkv", HostData::F32(rng.vec_normal(t * p.conv_dim(), 1.0))),
                    ("b", HostData::F32(rng.vec_normal(t * p.nv, 2.0))),
                    ("a", HostData::F32(rng.vec_normal(t * p.nv, 2.0))),
                ];
                pair.check(
                    &format!("gdn dk={dk} dv={dv} {head_map:?} t={t}"),
                    &gdn_graph(p, t),
                    &inputs,
                    F32_TOL,
                    &["S"],
                );
            }
        }
    }
}

/// Decode (one row a call) and verify (many rows a call) must agree bit for bit, or greedy
/// speculation would not be lossless: the gated delta net over 37 rows at once (the register
/// variants' chunks of 16: two and a part) equals 37 one-row calls, outputs and state.
#[test]
fn gated_delta_net_rows_at_once_equal_one_row_calls() {
    const T: usize = 37;
    for (dk, dv) in [(64, 40), (128, 128), (128, 40)] {
        let p = GdnParams {
            nk: 2,
            nv: 4,
            dk,
            dv,
            head_map: HeadMap::Grouped,
            l2_eps: 1e-6,
        };
        let mut rng = Rng::new((dk * 7 + dv) as u64);
        let w = gdn_weights(&mut rng, p.nv);
        let Some(mut pair) = Pair::new(
            "gated_delta_net_rows",
            &w,
            &[StateDecl::new("S", &[p.nv, p.dk, p.dv])],
        ) else {
            return;
        };
        let s0 = rng.vec_normal(p.nv * p.dk * p.dv, 0.1);
        let (qkv, b, a) = (
            rng.vec_normal(T * p.conv_dim(), 1.0),
            rng.vec_normal(T * p.nv, 2.0),
            rng.vec_normal(T * p.nv, 2.0),
        );
        let run = |g: &mut Side, t0: usize, n: usize| {
            let rows = |v: &[f32], w: usize| HostData::F32(v[t0 * w..(t0 + n) * w].to_vec());
            let inputs = [
                ("qkv", rows(&qkv, p.conv_dim())),
                ("b", rows(&b, p.nv)),
                ("a", rows(&a, p.nv)),
            ];
            let e = g.be.compile(&gdn_graph(p, n)).expect("compile");
            let o = g.be.run(e, g.w, g.s, &inputs).expect("run");
            o[0].1.to_f32().unwrap()
        };
        let g = &mut pair.gpu;
        g.be.write_state(g.s, "S", &s0).unwrap();
        let all = run(g, 0, T);
        let all_state = g.be.read_state(g.s, "S").unwrap();
        g.be.write_state(g.s, "S", &s0).unwrap();
        let mut one = Vec::new();
        for t in 0..T {
            one.extend(run(g, t, 1));
        }
        let one_state = g.be.read_state(g.s, "S").unwrap();
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&all), bits(&one), "dk {dk} dv {dv}: outputs");
        assert_eq!(bits(&all_state), bits(&one_state), "dk {dk} dv {dv}: state");
    }
}

/// Attention over caches of `cap` rows; `window` Some(w) for the non-causal variant.
/// Attention parameters with the usual 1/sqrt(head_dim) scale and `cap`-row K/V cache decls.
fn attn_case(nh: usize, nkv: usize, hd: usize, cap: usize) -> (AttnParams, [StateDecl; 2]) {
    let p = AttnParams {
        n_heads: nh,
        n_kv_heads: nkv,
        head_dim: hd,
        scale: 1.0 / (hd as f32).sqrt(),
    };
    let decls = [
        StateDecl::new("kc", &[cap, nkv, hd]),
        StateDecl::new("vc", &[cap, nkv, hd]),
    ];
    (p, decls)
}

fn attention_graph(p: AttnParams, t: usize, cap: usize, window: Option<usize>) -> Graph {
    let mut b = GraphBuilder::new();
    let q = b
        .input("q", DType::F32, &[t, p.n_heads, p.head_dim])
        .unwrap();
    let k = b
        .input("k", DType::F32, &[t, p.n_kv_heads, p.head_dim])
        .unwrap();
    let v = b
        .input("v", DType::F32, &[t, p.n_kv_heads, p.head_dim])
        .unwrap();
    let pos = b.input("pos", DType::I32, &[t]).unwrap();
    let kc = b.state("kc", &[cap, p.n_kv_heads, p.head_dim]).unwrap();
    let vc = b.state("vc", &[cap, p.n_kv_heads, p.head_dim]).unwrap();
    let o = match window {
        None => b.attention(p, q, k, v, pos, kc, vc),
        Some(w) => b.attention_non_causal(p, w, q, k, v, pos, kc, vc),
    }
    .unwrap();
    b.output("o", o).unwrap();
    b.build()
}

fn attn_inputs(
    rng: &mut Rng,
    t: usize,
    nh: usize,
    nkv: usize,
    hd: usize,
    pos: &[i32],
) -> Vec<(&'static str, HostData)> {
    assert_eq!(pos.len(), t);
    vec![
        ("q", HostData::F32(rng.vec_normal(t * nh * hd, 1.0))),
        ("k", HostData::F32(rng.vec_normal(t * nkv * hd, 1.0))),
        ("v", HostData::F32(rng.vec_normal(t * nkv * hd, 1.0))),
        ("pos", HostData::I32(pos.to_vec())),
    ]
}

#[test]
fn attention_prefill_decode_and_long_context() {
    let cap = 1500;
    for (nh, nkv, hd) in [(4, 2, 64), (6, 2, 40), (2, 1, 256), (3, 3, 17)] {
        let (p, decls) = attn_case(nh, nkv, hd, cap);
        let Some(mut pair) = Pair::new("attention", &WeightStore::default(), &decls) else {
            return;
        };
        let mut rng = Rng::new((nh * 100 + hd) as u64);
        let what = format!("attention nh={nh} nkv={nkv} hd={hd}");
        // Prefill 9 rows, then decode 2.
        let pos: Vec<i32> = (0..9).collect();
        pair.check(
            &format!("{what} prefill"),
            &attention_graph(p, 9, cap, None),
            &attn_inputs(&mut rng, 9, nh, nkv, hd, &pos),
            F32_TOL,
            &["kc", "vc"],
        );
        for at in [9, 10] {
            pair.check(
                &format!("{what} decode@{at}"),
                &attention_graph(p, 1, cap, None),
                &attn_inputs(&mut rng, 1, nh, nkv, hd, &[at]),
                F32_TOL,
                &["kc", "vc"],
            );
        }
        // A long context (split over several blocks and combined): fill the caches directly.
        let kc = rng.vec_normal(cap * nkv * hd, 1.0);
        let vc = rng.vec_normal(cap * nkv * hd, 1.0);
        pair.write_state("kc", &kc);
        pair.write_state("vc", &vc);
        for at in [700, 1499] {
            pair.check(
                &format!("{what} decode@{at}"),
                &attention_graph(p, 1, cap, None),
                &attn_inputs(&mut rng, 1, nh, nkv, hd, &[at]),
                F32_TOL,
                &["kc", "vc"],
            );
        }
        // A verify block of 4 rows deep in the context.
        let pos = [1200, 1201, 1202, 1203];
        pair.check(
            &format!("{what} block@1200"),
            &attention_graph(p, 4, cap, None),
            &attn_inputs(&mut rng, 4, nh, nkv, hd, &pos),
            F32_TOL,
            &["kc", "vc"],
        );
        // Non-causal (drafter blocks), unlimited and windowed.
        for window in [0, 3, 300] {
            pair.check(
                &format!("{what} non-causal window={window}"),
                &attention_graph(p, 4, cap, Some(window)),
                &attn_inputs(&mut rng, 4, nh, nkv, hd, &[900, 901, 902, 903]),
                F32_TOL,
                &["kc", "vc"],
            );
        }
    }
}

/// Non-causal attention as the drafters run it (`attn_nc_*`: one block per kv head and group of
/// query vectors, split over the keys): a context append whose output nothing reads (only its
/// cache writes run on the GPU), then a block of queries over the context and the block. Odd
/// head dims and head counts, more query vectors than one block holds, one and several key
/// splits, windows, and positions that are not consecutive.
#[test]
fn non_causal_attention_blocks_over_context() {
    let cap = 1100;
    // (nh, nkv, hd, block rows): 32 query vectors (one block), 39 (two, the second partial),
    // 5, 36 at head dim 256.
    for (nh, nkv, hd, t) in [
        (8, 2, 128, 8),
        (6, 2, 40, 13),
        (3, 3, 17, 5),
        (4, 1, 256, 9),
    ] {
        let (p, decls) = attn_case(nh, nkv, hd, cap);
        let Some(mut pair) = Pair::new("attention_nc", &WeightStore::default(), &decls) else {
            return;
        };
        let mut rng = Rng::new((nh * 1000 + hd * 10 + t) as u64);
        let what = format!("non-causal nh={nh} nkv={nkv} hd={hd} t={t}");
        let kc = rng.vec_normal(cap * nkv * hd, 1.0);
        let vc = rng.vec_normal(cap * nkv * hd, 1.0);
        pair.write_state("kc", &kc);
        pair.write_state("vc", &vc);
        // (context rows appended first, block positions, window)
        let at = |p0: i32| (p0..p0 + t as i32).collect::<Vec<i32>>();
        let spread: Vec<i32> = (0..t as i32).map(|i| 40 + 83 * i).collect();
        let cases: [(usize, Vec<i32>, usize); 6] = [
            (3, at(3), 0),     // short: one split
            (5, at(900), 0),   // long: several splits and the combine
            (0, at(900), 300), // windowed: the union starts at 600
            (2, at(1000), 5),  // narrow window inside the block
            (0, spread.clone(), 0),
            (0, spread, 64), // each query its own window
        ];
        for (ctx, pos, window) in cases {
            let mut b = GraphBuilder::new();
            let mut inputs = Vec::new();
            let kcs = b.state("kc", &[cap, nkv, hd]).unwrap();
            let vcs = b.state("vc", &[cap, nkv, hd]).unwrap();
            if ctx > 0 {
                // The drafters' context append: zero queries, output unused.
                let cq = b.input("cq", DType::F32, &[ctx, nh, hd]).unwrap();
                let ck = b.input("ck", DType::F32, &[ctx, nkv, hd]).unwrap();
                let cv = b.input("cv", DType::F32, &[ctx, nkv, hd]).unwrap();
                let cpos = b.input("cpos", DType::I32, &[ctx]).unwrap();
                b.attention_non_causal(p, window, cq, ck, cv, cpos, kcs, vcs)
                    .unwrap();
                let p0 = pos.iter().min().copied().unwrap_or(0) - ctx as i32;
                inputs.extend([
                    ("cq", HostData::F32(vec![0.0; ctx * nh * hd])),
                    ("ck", HostData::F32(rng.vec_normal(ctx * nkv * hd, 1.0))),
                    ("cv", HostData::F32(rng.vec_normal(ctx * nkv * hd, 1.0))),
                    ("cpos", HostData::I32((p0..p0 + ctx as i32).collect())),
                ]);
            }
            let q = b.input("q", DType::F32, &[t, nh, hd]).unwrap();
            let k = b.input("k", DType::F32, &[t, nkv, hd]).unwrap();
            let v = b.input("v", DType::F32, &[t, nkv, hd]).unwrap();
            let ps = b.input("pos", DType::I32, &[t]).unwrap();
            let o = b
                .attention_non_causal(p, window, q, k, v, ps, kcs, vcs)
                .unwrap();
            b.output("o", o).unwrap();
            inputs.extend(attn_inputs(&mut rng, t, nh, nkv, hd, &pos));
            pair.check(
                &format!("{what} ctx={ctx} pos={pos:?} window={window}"),
                &b.build(),
                &inputs,
                F32_TOL,
                &["kc", "vc"],
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Selection

#[test]
fn argmax_and_top_k_with_ties_and_nan() {
    let Some(mut p) = Pair::new("select", &WeightStore::default(), &[]) else {
        return;
    };
    let mut rng = Rng::new(23);
    let (rows, v) = (4, 1003);
    let mut x: Vec<f32> = (0..rows * v)
        .map(|_| (rng.below(50) as f32) * 0.5 - 10.0)
        .collect(); // many ties
    x[v + 5] = f32::NAN; // row 1: NaN ranks first
    x[2 * v + 7] = -0.0;
    x[2 * v + 3] = 0.0;
    for (i, val) in x[3 * v..4 * v].iter_mut().enumerate() {
        *val = -(i as f32); // row 3: strictly decreasing
    }
    for k in [1, 5, 64] {
        let mut b = GraphBuilder::new();
        let xi = b.input("x", DType::F32, &[rows, v]).unwrap();
        let am = b.argmax(xi).unwrap();
        let (vals, idx) = b.top_k(xi, k).unwrap();
        b.output("argmax", am).unwrap();
        b.output("values", vals).unwrap();
        b.output("indices", idx).unwrap();
        p.check(
            &format!("argmax/top_k k={k}"),
            &b.build(),
            &[("x", HostData::F32(x.clone()))],
            0.0,
            &[],
        );
    }
}

/// Runs top-k for every k in `ks` over the rows `rows` of [`select_case::top_k_rows`] of width `v`
/// and asserts that the GPU equals the CPU bit for bit.
fn top_k_case(p: &mut Pair, seed: u64, v: usize, rows: &[usize], ks: &[usize]) {
    let all = select_case::top_k_rows(&mut Rng::new(seed), v);
    let x: Vec<f32> = rows
        .iter()
        .flat_map(|&r| all[r * v..(r + 1) * v].iter().copied())
        .collect();
    let mut b = GraphBuilder::new();
    let xi = b.input("x", DType::F32, &[rows.len(), v]).unwrap();
    for &k in ks {
        let (vals, idx) = b.top_k(xi, k).unwrap();
        b.output(&format!("values{k}"), vals).unwrap();
        b.output(&format!("indices{k}"), idx).unwrap();
    }
    let (cpu, gpu) = p.run(&b.build(), &[("x", HostData::F32(x))]);
    assert_eq!(cpu.len(), gpu.len());
    for ((name, want), (_, got)) in cpu.iter().zip(&gpu) {
        select_case::assert_same(&format!("V={v} rows {rows:?} {name}"), want, got);
    }
}

const ALL_ROWS: [usize; select_case::ROWS] = [0, 1, 2, 3, 4, 5];

/// The two-pass top-k (parts of 2048 elements, then a merge) against the CPU: one part, a last
/// part shorter than k, odd widths, k up to 64. (The cases are sized for the CPU emulator, which
/// pays for every barrier of every round.)
#[test]
fn top_k_two_pass_matches_cpu_exactly() {
    let Some(mut p) = Pair::new("top_k_two_pass", &WeightStore::default(), &[]) else {
        return;
    };
    top_k_case(&mut p, 41, 300, &ALL_ROWS, &[1, 16, 64]);
    top_k_case(&mut p, 42, 2049, &ALL_ROWS, &[16, 64]);
    top_k_case(&mut p, 43, 5003, &ALL_ROWS, &[1, 8, 16, 64]);
}

/// 35 parts: up to k = 35 pass 0 keeps only elements at or before the row's threshold (the
/// k-th best part maximum); with k = 64 the merge pass's thread 0 owns the nine equal maxima of
/// row 2, more than its register list holds, so it refills from the candidates.
#[test]
fn top_k_wide_rows_match_cpu_exactly() {
    let Some(mut p) = Pair::new("top_k_wide", &WeightStore::default(), &[]) else {
        return;
    };
    top_k_case(&mut p, 44, 70001, &[0, 2, 4], &[8, 16, 35, 36, 64]);
}

/// k past a part's length: every part keeps all its elements (kc = 2048 < k).
#[test]
fn top_k_past_a_part_matches_cpu_exactly() {
    let Some(mut p) = Pair::new("top_k_past_a_part", &WeightStore::default(), &[]) else {
        return;
    };
    top_k_case(&mut p, 45, 2100, &[0], &[2050]);
}

/// Row log-sum-exps (a tree's top-k normalisers) against the CPU on odd widths, a 248k-wide
/// row, huge and tiny values, all equal, and NaN / all −inf rows (NaN on both).
#[test]
fn log_sum_exp_matches_cpu() {
    let Some(mut p) = Pair::new("log_sum_exp", &WeightStore::default(), &[]) else {
        return;
    };
    let mut rng = Rng::new(47);
    for v in [1usize, 300, 5003, 248_320] {
        let mut x = Vec::new();
        x.extend(rng.vec_normal(v, 3.0));
        x.extend((0..v).map(|i| i as f32 * 0.01 - 80.0));
        x.extend(std::iter::repeat_n(1.5, v));
        x.extend(rng.vec_normal(v, 1.0).iter().map(|y| y * 1e3));
        let mut nan = rng.vec_normal(v, 1.0);
        nan[v / 2] = f32::NAN;
        x.extend(nan);
        x.extend(std::iter::repeat_n(f32::NEG_INFINITY, v));
        let mut b = GraphBuilder::new();
        let xi = b.input("x", DType::F32, &[6, v]).unwrap();
        let l = b.log_sum_exp(xi).unwrap();
        b.output("lse", l).unwrap();
        let (cpu, gpu) = p.run(&b.build(), &[("x", HostData::F32(x))]);
        let (want, got) = (f32s(&cpu[0].1), f32s(&gpu[0].1));
        // The CPU sums a row in index order in f32 (its rounding grows with the width); the
        // GPU sums a tree.
        let tol = 2e-6 * (1.0 + (v as f32).sqrt() / 20.0);
        for (r, (w, g)) in want.iter().zip(&got).enumerate() {
            if w.is_nan() {
                assert!(g.is_nan(), "V={v} row {r}: {g} on the GPU, NaN on the CPU");
            } else {
                let e = (w - g).abs() / w.abs().max(1.0);
                assert!(e <= tol, "V={v} row {r}: {g} on the GPU, {w} on the CPU");
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// A whole model.

#[test]
fn tiny_q8_0_model_prefill_and_decode_match_cpu() {
    // f32 activations: the CPU reference's arithmetic, to rounding.
    tiny_model(false, 1e-4);
}

#[test]
fn tiny_q8_0_model_with_int8_activations_stays_close_to_cpu() {
    // Int8 activations (the default decode path) quantize every matmul input, as llama.cpp does;
    // the model then sits about 1e-2 from the f32 reference (tests/fixtures/models/README.md
    // measures llama.cpp at 3e-3 … 1e-2 on the same kind of model).
    tiny_model(true, 5e-2);
}

#[test]
fn tiny_model_prompt_on_the_prefill_tile() {
    // A 70-token prompt (last-row logits: its rows are not compared with decode) with the
    // prefill tile (`qmmp*`, also its fused gate/up and grouped launches) against the verify
    // tile on the same int8 inputs (only the summation order differs) and against the CPU.
    use deltaspec::model::Session;
    use deltaspec::model::qwen35::{GraphOptions, LogitRows};
    let dir = std::env::temp_dir().join(format!("deltaspec-hip-ops-{}", std::process::id()));
    let model = common::tiny_q8_0(&dir, "tiny-q8_0-prefill.gguf");
    let opts = GraphOptions {
        logits: LogitRows::Last,
        argmax: true,
        capture: vec![1, 3],
        read_logits: true,
    };
    let prompt: Vec<u32> = (0..70)
        .map(|i| (i * 37 + 3) % model.cfg.vocab as u32)
        .collect();
    let mut outs = Vec::new();
    for qmmp in [false, true] {
        let Some(mut g) = gpu("tiny_model_prefill") else {
            return;
        };
        g.set_int8_matmul(true);
        g.set_qmmp(qmmp);
        let mut be: Box<dyn Backend> = Box::new(g);
        let mut s = Session::new(&model, be.as_mut(), 128).unwrap();
        outs.push(s.forward(&prompt, &opts).unwrap());
    }
    let mut cpu = backend::create("cpu").unwrap();
    let mut sc = Session::new(&model, cpu.as_mut(), 128).unwrap();
    let c = sc.forward(&prompt, &opts).unwrap();
    // Another summation order moves a matmul output by an ulp or so, which can flip the int8
    // rounding of a value the next matmul reads (a step of 1/127 of its block's largest): the
    // emulator measured 3.0e-4 on the logits, far inside the int8 path's 5e-2 to the CPU.
    let (tile, pf) = (&outs[0], &outs[1]);
    let e = rel_err(&pf.logits, &tile.logits);
    assert!(
        e <= 2e-3,
        "prefill tile vs verify tile: logits relative error {e:.3e}"
    );
    for ((l, a), (_, b)) in pf.hidden.iter().zip(&tile.hidden) {
        let e = rel_err(a, b);
        assert!(
            e <= 2e-3,
            "prefill tile vs verify tile: hidden.{l} relative error {e:.3e}"
        );
    }
    let e = rel_err(&pf.logits, &c.logits);
    assert!(
        e <= 5e-2,
        "prefill tile vs CPU: logits relative error {e:.3e}"
    );
    let _ = std::fs::remove_file(dir.join("tiny-q8_0-prefill.gguf"));
}

fn tiny_model(int8: bool, tol: f64) {
    use deltaspec::model::Session;
    use deltaspec::model::qwen35::{GraphOptions, LogitRows};
    let Some(mut g) = gpu("tiny_model") else {
        return;
    };
    g.set_int8_matmul(int8);
    let dir = std::env::temp_dir().join(format!("deltaspec-hip-ops-{}", std::process::id()));
    // One file per test (the two callers run on parallel test threads: see common::tiny_q8_0).
    let model = common::tiny_q8_0(&dir, &format!("tiny-q8_0-int8-{int8}.gguf"));
    let vocab = model.cfg.vocab;

    let mut cpu = backend::create("cpu").unwrap();
    let mut gpu_be: Box<dyn Backend> = Box::new(g);
    let mut sc = Session::new(&model, cpu.as_mut(), 64).unwrap();
    let mut sg = Session::new(&model, gpu_be.as_mut(), 64).unwrap();
    let all = GraphOptions {
        logits: LogitRows::All,
        argmax: true,
        capture: vec![1, 3],
        read_logits: true,
    };
    let prompt: Vec<u32> = vec![3, 141, 59, 265, 35, 89, 7];
    let (c, h) = (
        sc.forward(&prompt, &all).unwrap(),
        sg.forward(&prompt, &all).unwrap(),
    );
    let check = |what: &str,
                 c: &deltaspec::model::session::StepOutput,
                 h: &deltaspec::model::session::StepOutput| {
        assert_eq!(c.logits.len(), h.logits.len());
        let e = rel_err(&h.logits, &c.logits);
        assert!(e <= tol, "{what}: logits relative error {e:.3e}");
        // Greedy tokens of a nearly flat random model may flip under int8 rounding.
        assert_eq!(
            common::argmax_rows(&h.logits, vocab),
            h.argmax.iter().map(|&a| a as usize).collect::<Vec<_>>(),
            "{what}: argmax output vs logits"
        );
        if !int8 {
            assert_eq!(h.argmax, c.argmax, "{what}: argmax");
        }
        for ((lc, vc), (lh, vh)) in c.hidden.iter().zip(&h.hidden) {
            assert_eq!(lc, lh);
            let e = rel_err(vh, vc);
            assert!(e <= tol, "{what}: hidden.{lc} relative error {e:.3e}");
        }
        eprintln!("{what}: logits rel err {e:.2e}");
    };
    check("prefill", &c, &h);
    let last = GraphOptions {
        logits: LogitRows::Last,
        argmax: true,
        capture: vec![],
        read_logits: true,
    };
    let mut tok = c.argmax[c.argmax.len() - 1];
    for step in 0..4 {
        let (c, h) = (
            sc.forward(&[tok], &last).unwrap(),
            sg.forward(&[tok], &last).unwrap(),
        );
        check(&format!("decode {step}"), &c, &h);
        tok = c.argmax[0];
    }
    // A second chunk of prefill on top of the decoded context.
    let (c, h) = (
        sc.forward(&[5, 6, 7], &all).unwrap(),
        sg.forward(&[5, 6, 7], &all).unwrap(),
    );
    check("second prefill chunk", &c, &h);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(tok < vocab as u32);
}
