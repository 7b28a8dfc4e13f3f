//! The tree forms of the recurrent and attention ops (`ConvTree`, `GatedDeltaNetTree`,
//! `AttentionTree`) that speculative verify runs:
//! - on the CPU, every row of a random draft tree equals the plain ops (`ConvStep`,
//!   `GatedDeltaNet`, causal `Attention`) run over that row's root-to-row path from the same
//!   state: its output, and its per-row conv and recurrent state; the live state is untouched;
//! - on wgpu and hip (when available; hip also through the CUDA-driver emulator), the same
//!   graph equals the CPU's, with the per-row state buffers poisoned (NaN) before the run and
//!   intermediate buffers poisoned by the backends, so an unwritten value shows.

mod common;

use common::rel_err;
use deltaspec::backend::{self, Backend, HostData, HostTensor, StateDecl, StatesId, WeightStore};
use deltaspec::graph::{AttnParams, GdnParams, Graph, GraphBuilder, HeadMap};
use deltaspec::tensor::DType;
use deltaspec::util::rng::Rng;

/// A tree in DFS order: two branches off the root, one of them splitting again.
const PARENTS: &[i32] = &[-1, 0, 1, 2, 1, 0, 5, 3];
/// Committed context rows in the caches before the tree.
const BASE: usize = 5;
const CAP: usize = 24;
const K: usize = 4;

fn attn() -> AttnParams {
    AttnParams {
        n_heads: 4,
        n_kv_heads: 2,
        head_dim: 12,
        scale: 12f32.powf(-0.5),
    }
}

fn gdn(dk: usize) -> GdnParams {
    GdnParams {
        nk: 2,
        nv: 4,
        dk,
        dv: 8,
        head_map: HeadMap::Tiled,
        l2_eps: 1e-6,
    }
}

fn path(i: usize) -> Vec<usize> {
    let mut p = vec![i];
    while PARENTS[*p.last().unwrap()] >= 0 {
        p.push(PARENTS[*p.last().unwrap()] as usize);
    }
    p.reverse();
    p
}

fn mask() -> Vec<i32> {
    let t = PARENTS.len();
    let mut m = vec![0; t * t];
    for i in 0..t {
        for j in path(i) {
            m[i * t + j] = 1;
        }
    }
    m
}

/// Random inputs of one case: per-row inputs of the whole tree, weights, initial states.
struct Data {
    p: GdnParams,
    x: Vec<f32>,
    b: Vec<f32>,
    a: Vec<f32>,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    w: WeightStore,
    /// (name, initial values)
    states: Vec<(StateDecl, Vec<f32>)>,
}

fn data(p: GdnParams, seed: u64) -> Data {
    let mut rng = Rng::new(seed);
    let t = PARENTS.len();
    let cd = p.conv_dim();
    let ap = attn();
    let (nh, nkv, hd) = (ap.n_heads, ap.n_kv_heads, ap.head_dim);
    let mut w = WeightStore::default();
    w.insert(
        "conv.w",
        HostTensor::from_f32(&[cd, K], &rng.vec_normal(cd * K, 0.5)),
    );
    let ssm_a: Vec<f32> = (0..p.nv).map(|_| -rng.range(0.05, 1.5)).collect();
    w.insert("ssm_a", HostTensor::from_f32(&[p.nv], &ssm_a));
    let dt: Vec<f32> = (0..p.nv).map(|_| rng.range(0.5, 1.5)).collect();
    w.insert("dt_bias", HostTensor::from_f32(&[p.nv], &dt));
    let hs = p.nv * p.dk * p.dv;
    let mut kc = rng.vec_normal(CAP * nkv * hd, 1.0);
    let mut vc = rng.vec_normal(CAP * nkv * hd, 1.0);
    // Rows past the context hold garbage the tree must overwrite or never read.
    for r in BASE..CAP {
        for c in [&mut kc, &mut vc] {
            c[r * nkv * hd..(r + 1) * nkv * hd].fill(1e4);
        }
    }
    let states = vec![
        (
            StateDecl::new("conv", &[K - 1, cd]),
            rng.vec_normal((K - 1) * cd, 1.0),
        ),
        (
            StateDecl::new("conv_tok", &[t + 2, K - 1, cd]),
            vec![f32::NAN; (t + 2) * (K - 1) * cd],
        ),
        (
            StateDecl::new("ssm", &[p.nv, p.dk, p.dv]),
            rng.vec_normal(hs, 0.3),
        ),
        (
            StateDecl::new("ssm_tok", &[t + 2, p.nv, p.dk, p.dv]),
            vec![f32::NAN; (t + 2) * hs],
        ),
        (StateDecl::new("k_cache", &[CAP, nkv, hd]), kc),
        (StateDecl::new("v_cache", &[CAP, nkv, hd]), vc),
    ];
    Data {
        p,
        x: rng.vec_normal(t * cd, 1.0),
        b: rng.vec_normal(t * p.nv, 1.5),
        a: rng.vec_normal(t * p.nv, 1.5),
        q: rng.vec_normal(t * nh * hd, 1.0),
        k: rng.vec_normal(t * nkv * hd, 1.0),
        v: rng.vec_normal(t * nkv * hd, 1.0),
        w,
        states,
    }
}

/// conv → gated delta net, and attention, over `t` rows; the tree form when `tree`.
fn graph(p: &GdnParams, t: usize, tree: bool) -> Graph {
    let ap = attn();
    let (nh, nkv, hd, cd) = (ap.n_heads, ap.n_kv_heads, ap.head_dim, p.conv_dim());
    let mut b = GraphBuilder::new();
    let x = b.input("x", DType::F32, &[t, cd]).unwrap();
    let bi = b.input("b", DType::F32, &[t, p.nv]).unwrap();
    let ai = b.input("a", DType::F32, &[t, p.nv]).unwrap();
    let q = b.input("q", DType::F32, &[t, nh, hd]).unwrap();
    let k = b.input("k", DType::F32, &[t, nkv, hd]).unwrap();
    let v = b.input("v", DType::F32, &[t, nkv, hd]).unwrap();
    let pos = b.input("pos", DType::I32, &[t]).unwrap();
    let w = b.weight("conv.w", DType::F32, &[cd, K]).unwrap();
    let sa = b.weight("ssm_a", DType::F32, &[p.nv]).unwrap();
    let dt = b.weight("dt_bias", DType::F32, &[p.nv]).unwrap();
    let conv = b.state("conv", &[K - 1, cd]).unwrap();
    let ssm = b.state("ssm", &[p.nv, p.dk, p.dv]).unwrap();
    let kc = b.state("k_cache", &[CAP, nkv, hd]).unwrap();
    let vc = b.state("v_cache", &[CAP, nkv, hd]).unwrap();
    let (o, att) = if tree {
        let rows = PARENTS.len() + 2;
        let parent = b.input("parent", DType::I32, &[t]).unwrap();
        let m = b.input("mask", DType::I32, &[t, t]).unwrap();
        let ct = b.state("conv_tok", &[rows, K - 1, cd]).unwrap();
        let st = b.state("ssm_tok", &[rows, p.nv, p.dk, p.dv]).unwrap();
        let qkv = b.conv_tree(x, w, parent, conv, ct).unwrap();
        let o = b
            .gated_delta_net_tree(*p, qkv, bi, ai, sa, dt, (parent, ssm, st))
            .unwrap();
        (o, b.attention_tree(ap, q, k, v, pos, m, kc, vc).unwrap())
    } else {
        let qkv = b.conv_step(x, w, conv).unwrap();
        let o = b.gated_delta_net(*p, qkv, bi, ai, sa, dt, ssm).unwrap();
        (o, b.attention(ap, q, k, v, pos, kc, vc).unwrap())
    };
    b.output("o", o).unwrap();
    b.output("att", att).unwrap();
    b.build()
}

/// Rows `rows` of a `[T, width]` input.
fn pick(v: &[f32], rows: &[usize]) -> Vec<f32> {
    let width = v.len() / PARENTS.len();
    rows.iter()
        .flat_map(|r| v[r * width..(r + 1) * width].iter().copied())
        .collect()
}

struct Run {
    o: Vec<f32>,
    att: Vec<f32>,
    states: Vec<(String, Vec<f32>)>,
}

impl Run {
    fn state(&self, name: &str) -> &[f32] {
        &self.states.iter().find(|(n, _)| n == name).unwrap().1
    }
}

/// Runs the graph over `rows` of the tree (all of them with the tree form) on `be`, from the
/// initial states; returns the outputs and every state afterwards.
fn run(be: &mut dyn Backend, d: &Data, rows: &[usize], tree: bool) -> Run {
    let t = rows.len();
    let g = graph(&d.p, t, tree);
    let decls: Vec<StateDecl> = d.states.iter().map(|(s, _)| s.clone()).collect();
    let w = be.upload_weights(&d.w).unwrap();
    let st: StatesId = be.alloc_states(&decls).unwrap();
    for (decl, init) in &d.states {
        be.write_state(st, &decl.name, init).unwrap();
    }
    let mut inputs = vec![
        ("x", HostData::F32(pick(&d.x, rows))),
        ("b", HostData::F32(pick(&d.b, rows))),
        ("a", HostData::F32(pick(&d.a, rows))),
        ("q", HostData::F32(pick(&d.q, rows))),
        ("k", HostData::F32(pick(&d.k, rows))),
        ("v", HostData::F32(pick(&d.v, rows))),
        (
            "pos",
            HostData::I32((0..t).map(|i| (BASE + i) as i32).collect()),
        ),
    ];
    if tree {
        inputs.push(("parent", HostData::I32(PARENTS.to_vec())));
        inputs.push(("mask", HostData::I32(mask())));
    }
    let exe = be.compile(&g).unwrap();
    let outs = be.run(exe, w, st, &inputs).unwrap();
    let get = |n: &str| {
        outs.iter()
            .find(|(x, _)| x == n)
            .unwrap()
            .1
            .to_f32()
            .unwrap()
    };
    let states = decls
        .iter()
        .map(|s| (s.name.clone(), be.read_state(st, &s.name).unwrap()))
        .collect();
    be.free_states(st).unwrap();
    Run {
        o: get("o"),
        att: get("att"),
        states,
    }
}

fn row(v: &[f32], r: usize, width: usize) -> &[f32] {
    &v[r * width..(r + 1) * width]
}

#[test]
fn cpu_tree_rows_equal_the_plain_ops_over_their_paths() {
    for (i, dk) in [16, 64].into_iter().enumerate() {
        let d = data(gdn(dk), 70 + i as u64);
        let p = d.p;
        let ap = attn();
        let (ow, aw) = (p.nv * p.dv, ap.n_heads * ap.head_dim);
        let (cw, sw) = ((K - 1) * p.conv_dim(), p.nv * p.dk * p.dv);
        let mut cpu = backend::create("cpu").unwrap();
        let tree = run(
            cpu.as_mut(),
            &d,
            &(0..PARENTS.len()).collect::<Vec<_>>(),
            true,
        );
        for (name, init) in [("conv", &d.states[0].1), ("ssm", &d.states[2].1)] {
            assert_eq!(tree.state(name), &init[..], "{name} must stay untouched");
        }
        for n in 0..PARENTS.len() {
            let pth = path(n);
            let last = pth.len() - 1;
            let want = run(cpu.as_mut(), &d, &pth, false);
            let what = format!("dk {dk} row {n} (path {pth:?})");
            let e = rel_err(row(&tree.o, n, ow), row(&want.o, last, ow));
            assert!(e <= 1e-6, "{what}: delta net output rel err {e:e}");
            let e = rel_err(row(&tree.att, n, aw), row(&want.att, last, aw));
            assert!(e <= 1e-6, "{what}: attention rel err {e:e}");
            let e = rel_err(row(tree.state("conv_tok"), n, cw), want.state("conv"));
            assert!(e <= 1e-7, "{what}: conv state rel err {e:e}");
            let e = rel_err(row(tree.state("ssm_tok"), n, sw), want.state("ssm"));
            assert!(e <= 1e-6, "{what}: recurrent state rel err {e:e}");
        }
        // A chain is the tree whose rows are all on one path: the plain ops' rows.
        let chain: Vec<usize> = path(7);
        let want = run(cpu.as_mut(), &d, &chain, false);
        for (depth, &n) in chain.iter().enumerate() {
            let e = rel_err(row(&tree.o, n, ow), row(&want.o, depth, ow));
            assert!(e <= 1e-6, "dk {dk} chain row {depth}: rel err {e:e}");
        }
    }
}

/// Compares a device backend's tree ops with the CPU's.
fn matches_cpu(be: &mut dyn Backend, label: &str) {
    for (i, dk) in [16, 64, 128].into_iter().enumerate() {
        let d = data(gdn(dk), 90 + i as u64);
        let rows: Vec<usize> = (0..PARENTS.len()).collect();
        let mut cpu = backend::create("cpu").unwrap();
        let want = run(cpu.as_mut(), &d, &rows, true);
        let got = run(be, &d, &rows, true);
        let t = PARENTS.len();
        let what = format!("{label} dk {dk}");
        let e = rel_err(&got.o, &want.o);
        assert!(e <= 1e-5, "{what}: delta net output rel err {e:e}");
        let e = rel_err(&got.att, &want.att);
        assert!(e <= 1e-5, "{what}: attention rel err {e:e}");
        for name in ["conv_tok", "ssm_tok"] {
            let (g, w) = (got.state(name), want.state(name));
            let n = w.len() / (t + 2) * t;
            let e = rel_err(&g[..n], &w[..n]);
            assert!(e <= 1e-5, "{what}: {name} rel err {e:e}");
        }
        for name in ["conv", "ssm", "k_cache", "v_cache"] {
            let e = rel_err(got.state(name), want.state(name));
            assert!(e <= 1e-6, "{what}: {name} rel err {e:e}");
        }
    }
}

#[test]
fn wgpu_tree_ops_match_cpu() {
    use deltaspec::backend::wgpu::{WgpuBackend, WgpuOptions};
    match WgpuBackend::with_options(WgpuOptions {
        poison: true,
        // Strict comparison: f32 activations.
        int8_matmul: Some(false),
        ..Default::default()
    }) {
        Ok(mut b) => matches_cpu(&mut b, "wgpu"),
        Err(e) => eprintln!("skipped: no wgpu adapter ({e})"),
    }
}

#[test]
fn wgpu_tree_ops_match_cpu_without_subgroups() {
    use deltaspec::backend::wgpu::{WgpuBackend, WgpuOptions};
    match WgpuBackend::with_options(WgpuOptions {
        poison: true,
        int8_matmul: Some(false),
        no_subgroups: true,
        ..Default::default()
    }) {
        Ok(mut b) => matches_cpu(&mut b, "wgpu no-sg"),
        Err(e) => eprintln!("skipped: no wgpu adapter ({e})"),
    }
}

#[test]
fn hip_tree_ops_match_cpu() {
    use deltaspec::backend::hip::{HipBackend, Which};
    match HipBackend::open(Which::Any) {
        Ok(mut b) => {
            b.set_poison(true);
            matches_cpu(&mut b, "hip")
        }
        Err(e) => {
            if std::env::var("DELTASPEC_REQUIRE_GPU").is_ok_and(|v| v == "1") {
                panic!("hip backend unavailable but DELTASPEC_REQUIRE_GPU=1: {e}");
            }
            eprintln!("SKIP: hip backend unavailable: {e}")
        }
    }
}

#[test]
fn copy_state_ranges_moves_rows_and_refuses_bad_ranges() {
    use deltaspec::backend::StateCopy;
    let mut cpu = backend::create("cpu").unwrap();
    let st = cpu
        .alloc_states(&[StateDecl::new("a", &[6]), StateDecl::new("b", &[4])])
        .unwrap();
    cpu.write_state(st, "a", &[0., 1., 2., 3., 4., 5.]).unwrap();
    let c = |src: &str, so, dst: &str, dso, len| StateCopy {
        src: src.into(),
        src_off: so,
        dst: dst.into(),
        dst_off: dso,
        len,
    };
    cpu.copy_state_ranges(st, &[c("a", 4, "a", 1, 2), c("a", 0, "b", 2, 2)])
        .unwrap();
    assert_eq!(
        cpu.read_state(st, "a").unwrap(),
        vec![0., 4., 5., 3., 4., 5.]
    );
    assert_eq!(cpu.read_state(st, "b").unwrap(), vec![0., 0., 0., 4.]);
    let e = cpu
        .copy_state_ranges(st, &[c("a", 5, "b", 0, 2)])
        .unwrap_err();
    assert!(e.to_string().contains("out of range"), "{e}");
    let e = cpu
        .copy_state_ranges(st, &[c("a", 0, "a", 1, 2)])
        .unwrap_err();
    assert!(e.to_string().contains("overlaps"), "{e}");
}
