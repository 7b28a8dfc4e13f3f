//! Every graph op on the wgpu backend against the CPU reference, on fresh random inputs with
//! odd sizes. Intermediate buffers are poisoned with NaN before each run so unwritten values
//! show; every case runs twice so state updates (and the second run's cached bind groups) are
//! compared too. Without an adapter the tests print why and pass.

use deltaspec::backend::wgpu::WgpuOptions;
use deltaspec::backend::{self, Backend, HostData};
use deltaspec::graph::{AttnParams, GdnParams, HeadMap, RopeParams, Yarn};
use deltaspec::tensor::DType;
use deltaspec::util::rng::Rng;

#[path = "common/gpu_case.rs"]
mod gpu_case;
use gpu_case::{B, check, gpu, gpu_with, run_on};
#[path = "common/select_case.rs"]
mod select_case;

const FLOAT_TYPES: &[DType] = &[DType::F32, DType::F16, DType::BF16];
const BLOCK32: &[DType] = &[
    DType::Q4_0,
    DType::Q4_1,
    DType::Q5_0,
    DType::Q5_1,
    DType::Q8_0,
    DType::Iq4Nl,
];
const BLOCK256: &[DType] = &[DType::Q4K, DType::Q5K, DType::Q6K, DType::Iq4Xs];

fn all_types() -> Vec<DType> {
    FLOAT_TYPES
        .iter()
        .chain(BLOCK32)
        .chain(BLOCK256)
        .copied()
        .collect()
}

/// A row length of type `t` that is not a multiple of 64 where the blocks allow it.
fn odd_k(t: DType) -> usize {
    match t.block_elems() {
        1 => 67,
        32 => 96,
        _ => 256 * 3,
    }
}

fn tol(t: DType) -> f32 {
    if FLOAT_TYPES.contains(&t) { 1e-5 } else { 1e-4 }
}

#[test]
fn matmul_every_type_and_width() {
    let Some(mut g) = gpu() else { return };
    for (i, t) in all_types().into_iter().enumerate() {
        let k = odd_k(t);
        let mut b = B::new(100 + i as u64);
        let w = b.weight("w", t, &[37, k], 0.5, 0.0);
        for n in [1usize, 3, 17, 64, 70] {
            let x = b.input(&format!("x{n}"), &[n, k], 1.0);
            let y = b.b.matmul(x, w).unwrap();
            b.out(&format!("y{n}"), y);
        }
        check(&mut g, &b.case(), tol(t), &format!("matmul {t}"));
    }
}

#[test]
fn matmul_and_embed_with_split_weights() {
    // 3 KiB bindings: a 37 × 256 Q8_0 weight (272 B rows) splits into 4 parts.
    let Some(mut g) = gpu_with(WgpuOptions {
        max_weight_binding: Some(3 << 10),
        ..Default::default()
    }) else {
        return;
    };
    for t in [DType::Q8_0, DType::F32, DType::Q6K] {
        let mut b = B::new(7);
        let k = if t.block_elems() == 256 { 256 } else { 64 };
        let w = b.weight("w", t, &[37, k], 0.5, 0.0);
        for n in [1usize, 5, 70] {
            let x = b.input(&format!("x{n}"), &[n, k], 1.0);
            let y = b.b.matmul(x, w).unwrap();
            b.out(&format!("y{n}"), y);
        }
        let ids = b.input_i32("ids", vec![0, 36, 5, 17, 36, 9, 30]);
        let e = b.b.embed(w, ids).unwrap();
        b.out("e", e);
        check(&mut g, &b.case(), tol(t), &format!("split {t}"));
    }
}

#[test]
fn matmul_with_an_activation_as_weight() {
    let Some(mut g) = gpu() else { return };
    let mut b = B::new(3);
    let x = b.input("x", &[5, 33], 1.0);
    let w = b.input("w", &[9, 33], 1.0);
    let y = b.b.matmul(x, w).unwrap();
    b.out("y", y);
    check(&mut g, &b.case(), 1e-5, "matmul x·aᵀ");
}

#[test]
fn embed_every_type() {
    let Some(mut g) = gpu() else { return };
    for (i, t) in all_types().into_iter().enumerate() {
        let d = odd_k(t);
        let mut b = B::new(200 + i as u64);
        let table = b.weight("tok", t, &[50, d], 1.0, 0.0);
        let ids = b.input_i32("ids", vec![3, 49, 0, 3, 17]);
        let y = b.b.embed(table, ids).unwrap();
        b.out("y", y);
        let one = b.input_i32("one", vec![11]);
        let y1 = b.b.embed(table, one).unwrap();
        b.out("y1", y1);
        check(&mut g, &b.case(), 0.0, &format!("embed {t}"));
    }
}

#[test]
fn embed_rejects_bad_ids() {
    let Some(mut g) = gpu() else { return };
    let mut b = B::new(1);
    let table = b.weight("tok", DType::F32, &[10, 8], 1.0, 0.0);
    let ids = b.input_i32("ids", vec![3, 10]);
    let y = b.b.embed(table, ids).unwrap();
    b.out("y", y);
    let c = b.case();
    let w = g.upload_weights(&c.w).unwrap();
    let s = g.alloc_states(&[]).unwrap();
    let e = g.compile(&c.g).unwrap();
    let err = g
        .run(e, w, s, &[("ids", HostData::I32(vec![3, 10]))])
        .unwrap_err();
    assert!(
        matches!(err, backend::BackendError::BadInput { .. }),
        "{err}"
    );
}

#[test]
fn elementwise_slices_and_views() {
    let Some(mut g) = gpu() else { return };
    let mut b = B::new(4);
    let x = b.input("x", &[5, 67], 2.0);
    let y = b.input("y", &[5, 67], 2.0);
    let a = b.b.add(x, y).unwrap();
    let s = b.b.sigmoid_mul(x, y).unwrap();
    let w = b.b.swiglu(x, y).unwrap();
    b.out("add", a);
    b.out("sigmoid_mul", s);
    b.out("swiglu", w);
    let big = b.input("big", &[3, 70001], 10.0);
    let big2 = b.input("big2", &[3, 70001], 10.0);
    let sw = b.b.swiglu(big, big2).unwrap();
    b.out("swiglu_big", sw);
    let r = b.b.reshape(a, &[5, 1, 67]).unwrap();
    let sl = b.b.slice_last(r, 13, 29).unwrap();
    b.out("slice", sl);
    let rows = b.b.rows(s, 2, 3).unwrap();
    b.out("rows", rows);
    let last = b.b.rows(w, 4, 1).unwrap();
    b.out("last", last);
    check(&mut g, &b.case(), 1e-5, "elementwise");
}

#[test]
fn norms() {
    let Some(mut g) = gpu() else { return };
    // Subgroup and workgroup-memory reductions.
    let Some(mut plain) = gpu_with(WgpuOptions {
        no_subgroups: true,
        ..Default::default()
    }) else {
        return;
    };
    for (t, no_sg) in [
        (DType::F32, false),
        (DType::F16, true),
        (DType::BF16, false),
        (DType::F32, true),
    ] {
        let g = if no_sg { &mut plain } else { &mut g };
        let mut b = B::new(5);
        let x = b.input("x", &[5, 3, 67], 3.0);
        let r = b.input("r", &[5, 3, 67], 3.0);
        let w = b.weight("w", t, &[67], 0.2, 1.0);
        let y = b.b.rms_norm(x, w, 1e-6).unwrap();
        b.out("rms", y);
        let (s, n) = b.b.add_rms_norm(x, r, w, 1e-5).unwrap();
        b.out("sum", s);
        b.out("normed", n);
        let xg = b.input("xg", &[5, 4, 16], 1.0);
        let z = b.input("z", &[5, 64], 2.0);
        let wg = b.weight("wg", t, &[16], 0.2, 1.0);
        let gy = b.b.gated_rms_norm(xg, z, wg, 1e-6).unwrap();
        b.out("gated", gy);
        let l2 = b.b.l2_norm(x, 1e-6, 0.25).unwrap();
        b.out("l2", l2);
        let wide = b.input("wide", &[2, 5000], 1.0);
        let ww = b.weight("ww", t, &[5000], 0.2, 1.0);
        let wy = b.b.rms_norm(wide, ww, 1e-6).unwrap();
        b.out("wide", wy);
        // Wider than the register form (more than 8 vectors per thread): the looping form.
        let wider = b.input("wider", &[2, 9000], 1.0);
        let wr = b.input("wider_r", &[2, 9000], 1.0);
        let w9 = b.weight("w9", t, &[9000], 0.2, 1.0);
        let (ws, wn) = b.b.add_rms_norm(wider, wr, w9, 1e-6).unwrap();
        b.out("wider_sum", ws);
        b.out("wider", wn);
        check(
            g,
            &b.case(),
            1e-5,
            &format!("norms {t} (no subgroups: {no_sg})"),
        );
    }
    // More rows than one grid dimension holds.
    let mut b = B::new(6);
    let x = b.input("x", &[65600, 2], 1.0);
    let y = b.b.l2_norm(x, 1e-6, 1.0).unwrap();
    b.out("l2", y);
    check(&mut g, &b.case(), 1e-5, "norm 2-D grid");
}

#[test]
fn rope() {
    let Some(mut g) = gpu() else { return };
    for (pos, rot) in [
        (vec![0, 1, 2, 3, 4], 16),
        (vec![7], 64),
        (vec![1000, 4095, 65000, 262143, 99], 32),
    ] {
        let t = pos.len();
        let mut b = B::new(8);
        let x = b.input("x", &[t, 3, 64], 1.0);
        let p = b.input_i32("pos", pos);
        let y = b.b.rope(x, p, rot, 1e7).unwrap();
        b.out("y", y);
        check(&mut g, &b.case(), 1e-5, &format!("rope rot {rot}"));
    }
    // YaRN: scaled frequency table and attention factor.
    let yarn = Yarn {
        factor: 32.0,
        original_context: 8192,
        beta_fast: 32.0,
        beta_slow: 1.0,
        attention_factor: None,
        truncate: true,
    };
    let mut b = B::new(9);
    let x = b.input("x", &[4, 3, 64], 1.0);
    let p = b.input_i32("pos", vec![0, 5, 9000, 200000]);
    let rp = RopeParams {
        rot: 64,
        theta: 1e7,
        yarn: Some(yarn),
    };
    let y = b.b.rope_with(x, p, rp).unwrap();
    b.out("y", y);
    check(&mut g, &b.case(), 1e-5, "rope yarn");
}

#[test]
fn conv_step() {
    let Some(mut g) = gpu() else { return };
    for t in [1usize, 2, 5] {
        for wt in [DType::F32, DType::F16] {
            let mut b = B::new(9 + t as u64);
            let x = b.input("x", &[t, 70], 1.0);
            let w = b.weight("w", wt, &[70, 4], 0.5, 0.0);
            let s = b.state("conv", &[3, 70], 1.0);
            let y = b.b.conv_step(x, w, s).unwrap();
            b.out("y", y);
            check(&mut g, &b.case(), 1e-5, &format!("conv T={t} {wt}"));
        }
    }
}

/// The delta net on (nk, nv, dk, dv, token counts): odd head counts, key dims that take 4, 2 or
/// 1 lanes per state column (24, 6, 5), value dims that leave a workgroup's columns partly idle,
/// and chains of up to 64 tokens (verify widths) in one call.
const GDN_CASES: &[(usize, usize, usize, usize, &[usize])] = &[
    (2, 6, 16, 24, &[1, 5]),
    (1, 3, 32, 40, &[1, 5]),
    (3, 9, 24, 37, &[1, 3, 17]),
    (1, 5, 6, 7, &[2, 9]),
    (1, 1, 5, 3, &[1, 4]),
    (2, 4, 64, 64, &[1, 5]),
    (1, 1, 128, 128, &[1, 2, 64]),
];

fn gdn_cases(g: &mut deltaspec::backend::wgpu::WgpuBackend, label: &str) {
    for &(nk, nv, dk, dv, steps) in GDN_CASES {
        for map in [HeadMap::Tiled, HeadMap::Grouped] {
            for &t in steps {
                let p = GdnParams {
                    nk,
                    nv,
                    dk,
                    dv,
                    head_map: map,
                    l2_eps: 1e-6,
                };
                let mut b = B::new(11 + t as u64);
                let qkv = b.input("qkv", &[t, p.conv_dim()], 1.0);
                let beta = b.input("b", &[t, nv], 1.0);
                let alpha = b.input("a", &[t, nv], 2.0);
                let ssm_a = b.weight("ssm_a", DType::F32, &[nv], 0.5, -1.0);
                let dt = b.weight("dt", DType::F32, &[nv], 0.5, 0.0);
                let st = b.state("ssm", &[nv, dk, dv], 0.3);
                let o =
                    b.b.gated_delta_net(p, qkv, beta, alpha, ssm_a, dt, st)
                        .unwrap();
                b.out("o", o);
                check(
                    g,
                    &b.case(),
                    1e-5,
                    &format!("gdn {label} {nk}/{nv} {dk}×{dv} {map:?} T={t}"),
                );
            }
        }
    }
}

#[test]
fn gated_delta_net() {
    let Some(mut g) = gpu() else { return };
    let label = if g.subgroups() { "sg" } else { "no-sg adapter" };
    eprintln!("gated_delta_net: {label}");
    gdn_cases(&mut g, label);
}

#[test]
fn gated_delta_net_without_subgroups() {
    let Some(mut g) = gpu_with(WgpuOptions {
        no_subgroups: true,
        ..Default::default()
    }) else {
        return;
    };
    gdn_cases(&mut g, "no-sg");
}

/// One delta-net graph of `w` rows; weights and state drawn from seed 1, so every width gets
/// the same ones.
fn gdn_width_case(p: GdnParams, w: usize) -> gpu_case::Case {
    let mut b = B::new(1);
    let qkv = b.b.input("qkv", DType::F32, &[w, p.conv_dim()]).unwrap();
    let beta = b.b.input("b", DType::F32, &[w, p.nv]).unwrap();
    let alpha = b.b.input("a", DType::F32, &[w, p.nv]).unwrap();
    let ssm_a = b.weight("ssm_a", DType::F32, &[p.nv], 0.5, -1.0);
    let dt = b.weight("dt", DType::F32, &[p.nv], 0.5, 0.0);
    let st = b.state("ssm", &[p.nv, p.dk, p.dv], 0.3);
    let o =
        b.b.gated_delta_net(p, qkv, beta, alpha, ssm_a, dt, st)
            .unwrap();
    b.out("o", o);
    b.case()
}

/// Runs the `rows` rows of (qkv, b, a) through `c` (w rows per call) call after call; returns the
/// outputs of all rows and the final state.
fn gdn_run_rows(
    g: &mut deltaspec::backend::wgpu::WgpuBackend,
    c: &gpu_case::Case,
    w: usize,
    rows: usize,
    data: [&[f32]; 3],
) -> (Vec<f32>, Vec<f32>) {
    let wts = g.upload_weights(&c.w).unwrap();
    let decl = c.states[0].0.clone();
    let s = g.alloc_states(std::slice::from_ref(&decl)).unwrap();
    g.write_state(s, &decl.name, &c.states[0].1).unwrap();
    let e = g.compile(&c.g).unwrap();
    let mut out = Vec::new();
    for call in 0..rows / w {
        let inputs: Vec<(&str, HostData)> = ["qkv", "b", "a"]
            .into_iter()
            .zip(data)
            .map(|(name, d)| {
                let per = d.len() / rows;
                (
                    name,
                    HostData::F32(d[call * w * per..(call + 1) * w * per].to_vec()),
                )
            })
            .collect();
        let o = g.run(e, wts, s, &inputs).unwrap();
        out.extend(o[0].1.to_f32().unwrap());
    }
    (out, g.read_state(s, &decl.name).unwrap())
}

/// Speculative verify must reproduce decoding bit for bit: T rows in one delta-net call give
/// the same outputs and final state as T one-row calls from the same state.
#[test]
fn gated_delta_net_rows_do_not_depend_on_the_call_width() {
    let Some(mut g) = gpu() else { return };
    for (nk, nv, dk, dv) in [(3, 9, 24, 37), (1, 2, 128, 128)] {
        let p = GdnParams {
            nk,
            nv,
            dk,
            dv,
            head_map: HeadMap::Grouped,
            l2_eps: 1e-6,
        };
        // Two of the shader's 8-token chunks and a part.
        let t = 19;
        let mut rng = Rng::new(5);
        let qkv = rng.vec_normal(t * p.conv_dim(), 1.0);
        let b = rng.vec_normal(t * nv, 1.0);
        let a = rng.vec_normal(t * nv, 2.0);
        let data = [&qkv[..], &b[..], &a[..]];
        let (o_wide, s_wide) = gdn_run_rows(&mut g, &gdn_width_case(p, t), t, t, data);
        let (o_one, s_one) = gdn_run_rows(&mut g, &gdn_width_case(p, 1), 1, t, data);
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(o_wide.len(), t * nv * dv);
        assert_eq!(bits(&o_wide), bits(&o_one), "{dk}×{dv}: outputs");
        assert_eq!(bits(&s_wide), bits(&s_one), "{dk}×{dv}: state");
    }
}

#[test]
fn attention() {
    let Some(mut g) = gpu() else { return };
    // (heads, kv heads, head dim, cache rows, positions)
    let cases: Vec<(usize, usize, usize, usize, Vec<i32>)> = vec![
        (4, 2, 16, 64, vec![0]),
        (4, 2, 16, 64, vec![10, 11, 12, 13, 14]),
        (4, 2, 16, 64, vec![63]),
        (4, 1, 100, 600, vec![300]),
        (4, 2, 16, 600, vec![500, 501, 502, 503, 504]),
        (2, 2, 64, 1000, vec![0, 1, 2]),
        (6, 2, 256, 300, vec![299]),
    ];
    for (nh, nkv, hd, cap, pos) in cases {
        let t = pos.len();
        let p = AttnParams {
            n_heads: nh,
            n_kv_heads: nkv,
            head_dim: hd,
            scale: 1.0 / (hd as f32).sqrt(),
        };
        let mut b = B::new(21 + cap as u64);
        let q = b.input("q", &[t, nh, hd], 1.0);
        let k = b.input("k", &[t, nkv, hd], 1.0);
        let v = b.input("v", &[t, nkv, hd], 1.0);
        let ps = b.input_i32("pos", pos.clone());
        let kc = b.state("kc", &[cap, nkv, hd], 1.0);
        let vc = b.state("vc", &[cap, nkv, hd], 1.0);
        let o = b.b.attention(p, q, k, v, ps, kc, vc).unwrap();
        b.out("o", o);
        check(
            &mut g,
            &b.case(),
            1e-5,
            &format!("attention {nh}/{nkv}×{hd} cap {cap} pos {pos:?}"),
        );
    }
}

#[test]
fn attention_non_causal() {
    let Some(mut g) = gpu() else { return };
    // (cache rows, positions, window, heads, kv heads, head size). The drafters' blocks run on
    // `attn_nc` (a workgroup per kv head and 16 query vectors): several query groups (9 rows ×
    // 4 heads a kv head), splits of one key and of many tiles, odd head sizes (18: rows of
    // whole vec4s, zero-padded).
    let block = |at: i32, n: i32| (at..at + n).collect::<Vec<i32>>();
    let cases: Vec<(usize, Vec<i32>, usize, usize, usize, usize)> = vec![
        (64, vec![20, 21, 22, 23, 24], 0, 4, 2, 32),
        (64, vec![20, 21, 22, 23, 24], 2, 4, 2, 32),
        (600, vec![400, 401, 402], 0, 4, 2, 32),
        (600, vec![400, 401, 402, 403, 404, 405, 406], 3, 4, 2, 32),
        (1100, block(1030, 8), 0, 8, 2, 128),
        (1100, block(700, 9), 0, 8, 2, 80),
        (40, block(3, 9), 0, 12, 3, 16),
        (70, block(50, 5), 0, 4, 2, 18),
        (300, block(250, 8), 5, 8, 2, 64),
        (96, block(90, 3), 0, 2, 1, 256),
    ];
    for (cap, pos, window, nh, nkv, hd) in cases {
        let t = pos.len();
        let p = AttnParams {
            n_heads: nh,
            n_kv_heads: nkv,
            head_dim: hd,
            scale: 1.0 / (hd as f32).sqrt(),
        };
        let mut b = B::new(41 + cap as u64);
        let q = b.input("q", &[t, nh, hd], 1.0);
        let k = b.input("k", &[t, nkv, hd], 1.0);
        let v = b.input("v", &[t, nkv, hd], 1.0);
        let ps = b.input_i32("pos", pos.clone());
        let kc = b.state("kc", &[cap, nkv, hd], 1.0);
        let vc = b.state("vc", &[cap, nkv, hd], 1.0);
        let o =
            b.b.attention_non_causal(p, window, q, k, v, ps, kc, vc)
                .unwrap();
        b.out("o", o);
        check(
            &mut g,
            &b.case(),
            1e-5,
            &format!("non-causal {nh}/{nkv}×{hd} cap {cap} pos {pos:?} window {window}"),
        );
    }
}

#[test]
fn argmax_and_top_k() {
    let Some(mut g) = gpu() else { return };
    for w in [10usize, 70001] {
        let mut rng = Rng::new(31);
        let mut x = rng.vec_normal(3 * w, 1.0);
        // Ties, signed zeros and a NaN.
        x[5] = 9.0;
        x[7] = 9.0;
        x[w + 1] = 0.0;
        x[w + 3] = -0.0;
        for v in &mut x[w..2 * w] {
            *v = v.min(0.0);
        }
        x[2 * w + w / 2] = f32::NAN;
        let mut b = B::new(32);
        let xi = b.input_f32("x", &[3, w], x);
        let am = b.b.argmax(xi).unwrap();
        b.out("argmax", am);
        for k in [1usize, 5, 10] {
            let (v, i) = b.b.top_k(xi, k).unwrap();
            b.out(&format!("v{k}"), v);
            b.out(&format!("i{k}"), i);
        }
        if w > 40 {
            let (v, i) = b.b.top_k(xi, 40).unwrap();
            b.out("v40", v);
            b.out("i40", i);
        }
        check(&mut g, &b.case(), 0.0, &format!("select W={w}"));
    }
}

/// Top-k against the CPU bit for bit on rows built to trip a chunked top-k (ties across chunks,
/// all equal, all NaN, the best at the end), odd widths, k up to 64.
#[test]
fn top_k_matches_cpu_exactly() {
    let Some(mut g) = gpu() else { return };
    let mut rng = Rng::new(43);
    // 300001: parts wider than a first-pass workgroup's registers, and (k = 64) more candidates
    // than the merge's registers hold: the re-reading forms of both passes.
    for v in [300usize, 5003, 70001, 300_001] {
        let x = select_case::top_k_rows(&mut rng, v);
        let mut b = B::new(5);
        let xi = b.input_f32("x", &[select_case::ROWS, v], x);
        for k in [1usize, 8, 16, 64] {
            let (vals, idx) = b.b.top_k(xi, k).unwrap();
            b.out(&format!("values{k}"), vals);
            b.out(&format!("indices{k}"), idx);
        }
        let c = b.case();
        let mut cpu = backend::create("cpu").unwrap();
        let (want, _) = run_on(cpu.as_mut(), &c, 1);
        let (got, _) = run_on(&mut g, &c, 1);
        for ((name, w), (_, o)) in want[0].iter().zip(&got[0]) {
            select_case::assert_same(&format!("V={v} {name}"), w, o);
        }
    }
}

/// Row log-sum-exps (a tree's top-k normalisers) against the CPU on odd and 248k widths.
#[test]
fn log_sum_exp_matches_cpu() {
    let Some(mut g) = gpu() else { return };
    let mut rng = Rng::new(47);
    for v in [1usize, 300, 5003, 248_320] {
        let mut x = Vec::new();
        x.extend(rng.vec_normal(v, 3.0));
        x.extend((0..v).map(|i| i as f32 * 0.01 - 80.0));
        x.extend(std::iter::repeat_n(1.5, v));
        let mut b = B::new(5);
        let xi = b.input_f32("x", &[3, v], x);
        let l = b.b.log_sum_exp(xi).unwrap();
        b.out("lse", l);
        let c = b.case();
        let mut cpu = backend::create("cpu").unwrap();
        let (want, _) = run_on(cpu.as_mut(), &c, 1);
        let (got, _) = run_on(&mut g, &c, 1);
        let (w, o) = (
            want[0][0].1.to_f32().unwrap(),
            got[0][0].1.to_f32().unwrap(),
        );
        // The CPU sums a row in index order in f32 (its rounding grows with the width); the
        // GPU sums a tree.
        let tol = 2e-6 * (1.0 + (v as f32).sqrt() / 20.0);
        for (r, (w, o)) in w.iter().zip(&o).enumerate() {
            let e = (w - o).abs() / w.abs().max(1.0);
            assert!(e <= tol, "V={v} row {r}: {o} on wgpu, {w} on the CPU");
        }
    }
}

#[test]
fn create_by_name() {
    if let Ok(b) = backend::create("wgpu:f32") {
        assert!(b.name().contains("f32 activations"), "{}", b.name());
    }
    match backend::create("wgpu") {
        Ok(b) => assert!(b.name().starts_with("wgpu")),
        Err(e) => {
            assert!(
                matches!(e, backend::BackendError::Unavailable { .. }),
                "{e}"
            );
            eprintln!("skipped: no wgpu adapter ({e})");
        }
    }
}
