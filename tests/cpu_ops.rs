//! The CPU reference kernels against naive scalar implementations (f64 accumulation), through
//! the public backend API, plus the properties the engine relies on: splitting a sequence over
//! several calls changes nothing (conv, delta net, attention), quantized matmul equals matmul on
//! the dequantized weights, and bad token ids / positions are errors, not panics.

use deltaspec::backend::{
    self, Backend, BackendError, HostData, HostTensor, StateDecl, StatesId, TensorBytes,
    WeightStore, WeightsId,
};
use deltaspec::graph::{AttnParams, GdnParams, Graph, GraphBuilder, HeadMap, RopeParams, Yarn};
use deltaspec::tensor::{DType, quant};
use deltaspec::util::rng::Rng;
use std::sync::Arc;

// ---------------------------------------------------------------------------------------------
// Harness

/// One backend with one weight set and one state set, running graphs against them.
struct Harness {
    be: Box<dyn Backend>,
    weights: WeightsId,
    states: StatesId,
}

/// A run's named outputs.
struct Outputs(Vec<(String, HostTensor)>);

impl Outputs {
    fn get(&self, name: &str) -> &HostTensor {
        &self
            .0
            .iter()
            .find(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("no output {name}"))
            .1
    }
    fn f32(&self, name: &str) -> Vec<f32> {
        let t = self.get(name);
        assert_eq!(t.dtype, DType::F32, "{name}");
        t.bytes()
            .chunks_exact(4)
            .map(bytemuck::pod_read_unaligned)
            .collect()
    }
    fn i32(&self, name: &str) -> Vec<i32> {
        let t = self.get(name);
        assert_eq!(t.dtype, DType::I32, "{name}");
        t.to_i32()
    }
}

impl Harness {
    fn new(weights: &WeightStore, states: &[StateDecl]) -> Self {
        let mut be = backend::create("cpu").expect("cpu backend");
        let weights = be.upload_weights(weights).expect("upload");
        let states = be.alloc_states(states).expect("alloc states");
        Harness {
            be,
            weights,
            states,
        }
    }

    fn try_run(&mut self, g: &Graph, inputs: &[(&str, HostData)]) -> Result<Outputs, BackendError> {
        let exe = self.be.compile(g)?;
        Ok(Outputs(self.be.run(
            exe,
            self.weights,
            self.states,
            inputs,
        )?))
    }

    fn run(&mut self, g: &Graph, inputs: &[(&str, HostData)]) -> Outputs {
        self.try_run(g, inputs).expect("run")
    }

    fn state(&mut self, name: &str) -> Vec<f32> {
        self.be.read_state(self.states, name).expect("read state")
    }
}

fn weights(list: &[(&str, HostTensor)]) -> WeightStore {
    let mut w = WeightStore::default();
    for (n, t) in list {
        w.insert(*n, t.clone());
    }
    w
}

/// `|got − want| ≤ rtol·|want| + atol` elementwise, with the worst offender in the message.
fn assert_close_tol(what: &str, got: &[f32], want: &[f64], rtol: f64, atol: f64) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let fails: Vec<usize> = (0..got.len())
        .filter(|&i| {
            let err = (got[i] as f64 - want[i]).abs();
            err.is_nan() || err > rtol * want[i].abs() + atol
        })
        .collect();
    if let Some(&i) = fails.first() {
        panic!(
            "{what}: {} of {} elements off (rtol {rtol}, atol {atol}); first at {i}: got {}, want {}",
            fails.len(),
            got.len(),
            got[i],
            want[i]
        );
    }
}

fn assert_close(what: &str, got: &[f32], want: &[f64]) {
    assert_close_tol(what, got, want, 1e-5, 1e-6);
}

fn to_f64(v: &[f32]) -> Vec<f64> {
    v.iter().map(|x| *x as f64).collect()
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

fn silu(x: f64) -> f64 {
    x * sigmoid(x)
}

// ---------------------------------------------------------------------------------------------
// MatMul and Embed

fn matmul_ref(x: &[f32], w: &[f32], n: usize, k: usize, m: usize) -> Vec<f64> {
    let mut y = vec![0.0; n * m];
    for i in 0..n {
        for j in 0..m {
            y[i * m + j] = (0..k)
                .map(|c| x[i * k + c] as f64 * w[j * k + c] as f64)
                .sum();
        }
    }
    y
}

fn matmul_graph(n: usize, k: usize, m: usize, dtype: DType) -> Graph {
    let mut b = GraphBuilder::new();
    let x = b.input("x", DType::F32, &[n, k]).unwrap();
    let w = b.weight("w", dtype, &[m, k]).unwrap();
    let y = b.matmul(x, w).unwrap();
    b.output("y", y).unwrap();
    b.build()
}

#[test]
fn matmul_f32_matches_reference() {
    let mut rng = Rng::new(1);
    for (n, k, m) in [
        (1, 37, 13),
        (5, 37, 13),
        (7, 8, 1),
        (3, 129, 30),
        (2, 4096, 5),
    ] {
        let x = rng.vec_normal(n * k, 1.0);
        let w = rng.vec_normal(m * k, 0.5);
        let mut h = Harness::new(&weights(&[("w", HostTensor::from_f32(&[m, k], &w))]), &[]);
        let out = h.run(
            &matmul_graph(n, k, m, DType::F32),
            &[("x", HostData::F32(x.clone()))],
        );
        assert_close(
            &format!("matmul {n}x{k}x{m}"),
            &out.f32("y"),
            &matmul_ref(&x, &w, n, k, m),
        );
    }
}

/// A Q8_0 weight must give exactly what its dequantized F32 copy gives: the kernel dequantizes
/// each row with the reference dequantizer and then runs the same dot product.
#[test]
fn matmul_q8_0_equals_dequantized_f32() {
    let (n, k, m) = (3, 96, 11);
    let mut rng = Rng::new(2);
    let x = rng.vec_normal(n * k, 1.0);
    let w = rng.vec_normal(m * k, 0.5);
    let q = match quant::quantize(DType::Q8_0, &w) {
        Ok(q) => q,
        Err(e) => {
            eprintln!(
                "SKIPPED matmul_q8_0_equals_dequantized_f32: Q8_0 quantization unavailable ({e})"
            );
            return;
        }
    };
    let deq = quant::dequantize(DType::Q8_0, &q, m * k).expect("Q8_0 dequantization");
    let store = weights(&[
        ("w", HostTensor::from_bytes(DType::Q8_0, &[m, k], q)),
        ("wf", HostTensor::from_f32(&[m, k], &deq)),
    ]);
    let mut h = Harness::new(&store, &[]);
    let mut b = GraphBuilder::new();
    let xi = b.input("x", DType::F32, &[n, k]).unwrap();
    let wq = b.weight("w", DType::Q8_0, &[m, k]).unwrap();
    let wf = b.weight("wf", DType::F32, &[m, k]).unwrap();
    let (yq, yf) = (b.matmul(xi, wq).unwrap(), b.matmul(xi, wf).unwrap());
    b.output("yq", yq).unwrap();
    b.output("yf", yf).unwrap();
    let out = h.run(&b.build(), &[("x", HostData::F32(x.clone()))]);
    assert_eq!(out.f32("yq"), out.f32("yf"));
    assert_close(
        "q8_0 matmul",
        &out.f32("yq"),
        &matmul_ref(&x, &deq, n, k, m),
    );
}

/// F32 weights mapped from a file need not be 4-byte aligned; the kernel must copy, not fail.
#[test]
fn matmul_reads_unaligned_f32_weights() {
    let (n, k, m) = (2, 9, 5);
    let mut rng = Rng::new(3);
    let x = rng.vec_normal(n * k, 1.0);
    let w = rng.vec_normal(m * k, 1.0);
    let bytes: &[u8] = bytemuck::cast_slice(&w);
    let mut map = memmap2::MmapMut::map_anon(bytes.len() + 1).expect("anonymous map");
    map[1..].copy_from_slice(bytes);
    let map = Arc::new(map.make_read_only().expect("read-only map"));
    let t = HostTensor {
        dtype: DType::F32,
        shape: vec![m, k],
        data: TensorBytes::Mapped(map, 1..1 + bytes.len()),
    };
    let mut h = Harness::new(&weights(&[("w", t)]), &[]);
    let out = h.run(
        &matmul_graph(n, k, m, DType::F32),
        &[("x", HostData::F32(x.clone()))],
    );
    assert_close(
        "unaligned matmul",
        &out.f32("y"),
        &matmul_ref(&x, &w, n, k, m),
    );
}

fn embed_graph(vocab: usize, dim: usize, t: usize, dtype: DType) -> Graph {
    let mut b = GraphBuilder::new();
    let table = b.weight("table", dtype, &[vocab, dim]).unwrap();
    let ids = b.input("ids", DType::I32, &[t]).unwrap();
    let y = b.embed(table, ids).unwrap();
    b.output("y", y).unwrap();
    b.build()
}

#[test]
fn embed_gathers_rows_and_rejects_bad_ids() {
    let (vocab, dim) = (10, 7);
    let mut rng = Rng::new(4);
    let table = rng.vec_normal(vocab * dim, 1.0);
    let mut h = Harness::new(
        &weights(&[("table", HostTensor::from_f32(&[vocab, dim], &table))]),
        &[],
    );
    let ids = vec![3, 0, 9, 3, 5];
    let out = h.run(
        &embed_graph(vocab, dim, ids.len(), DType::F32),
        &[("ids", HostData::I32(ids.clone()))],
    );
    let want: Vec<f32> = ids
        .iter()
        .flat_map(|i| table[*i as usize * dim..][..dim].to_vec())
        .collect();
    assert_eq!(out.f32("y"), want);

    for bad in [-1, vocab as i32, i32::MAX, i32::MIN] {
        let g = embed_graph(vocab, dim, 2, DType::F32);
        match h.try_run(&g, &[("ids", HostData::I32(vec![1, bad]))]) {
            Err(BackendError::BadInput { name, .. }) => assert_eq!(name, "ids"),
            Err(e) => panic!("id {bad}: wrong error {e}"),
            Ok(_) => panic!("id {bad} was accepted"),
        }
    }
}

#[test]
fn embed_dequantizes_q8_0_rows() {
    let (vocab, dim) = (6, 64);
    let mut rng = Rng::new(5);
    let table = rng.vec_normal(vocab * dim, 1.0);
    let Ok(q) = quant::quantize(DType::Q8_0, &table) else {
        eprintln!("SKIPPED embed_dequantizes_q8_0_rows: Q8_0 quantization unavailable");
        return;
    };
    let deq = quant::dequantize(DType::Q8_0, &q, vocab * dim).expect("dequantize");
    let mut h = Harness::new(
        &weights(&[(
            "table",
            HostTensor::from_bytes(DType::Q8_0, &[vocab, dim], q),
        )]),
        &[],
    );
    let ids = vec![5, 1, 1];
    let out = h.run(
        &embed_graph(vocab, dim, 3, DType::Q8_0),
        &[("ids", HostData::I32(ids.clone()))],
    );
    let want: Vec<f32> = ids
        .iter()
        .flat_map(|i| deq[*i as usize * dim..][..dim].to_vec())
        .collect();
    assert_eq!(out.f32("y"), want);
}

// ---------------------------------------------------------------------------------------------
// Elementwise ops and slices

#[test]
fn elementwise_ops_match_reference() {
    let shape = [3, 13];
    let n = 39;
    let mut rng = Rng::new(6);
    let a = rng.vec_normal(n, 3.0);
    let c = rng.vec_normal(n, 3.0);
    let mut b = GraphBuilder::new();
    let ai = b.input("a", DType::F32, &shape).unwrap();
    let ci = b.input("c", DType::F32, &shape).unwrap();
    let add = b.add(ai, ci).unwrap();
    let sm = b.sigmoid_mul(ai, ci).unwrap();
    let sw = b.swiglu(ai, ci).unwrap();
    let sl = b.slice_last(ai, 4, 6).unwrap();
    let rows = b.rows(ai, 1, 2).unwrap();
    for (name, id) in [
        ("add", add),
        ("sm", sm),
        ("sw", sw),
        ("sl", sl),
        ("rows", rows),
    ] {
        b.output(name, id).unwrap();
    }
    let mut h = Harness::new(&WeightStore::default(), &[]);
    let out = h.run(
        &b.build(),
        &[
            ("a", HostData::F32(a.clone())),
            ("c", HostData::F32(c.clone())),
        ],
    );

    let zip = |f: fn(f64, f64) -> f64| -> Vec<f64> {
        a.iter()
            .zip(&c)
            .map(|(x, y)| f(*x as f64, *y as f64))
            .collect()
    };
    assert_close("add", &out.f32("add"), &zip(|x, y| x + y));
    assert_close("sigmoid_mul", &out.f32("sm"), &zip(|x, g| x * sigmoid(g)));
    assert_close("swiglu", &out.f32("sw"), &zip(|g, u| silu(g) * u));
    let want_sl: Vec<f32> = a.chunks(13).flat_map(|r| r[4..10].to_vec()).collect();
    assert_eq!(out.f32("sl"), want_sl);
    assert_eq!(out.f32("rows"), a[13..39].to_vec());
}

#[test]
fn activations_saturate_without_nan() {
    let x = vec![-1000.0, -100.0, -20.0, 0.0, 20.0, 100.0, 1000.0];
    let n = x.len();
    let mut b = GraphBuilder::new();
    let xi = b.input("x", DType::F32, &[1, n]).unwrap();
    let sm = b.sigmoid_mul(xi, xi).unwrap();
    let sw = b.swiglu(xi, xi).unwrap();
    b.output("sm", sm).unwrap();
    b.output("sw", sw).unwrap();
    let mut h = Harness::new(&WeightStore::default(), &[]);
    let out = h.run(&b.build(), &[("x", HostData::F32(x.clone()))]);
    for v in out.f32("sm").into_iter().chain(out.f32("sw")) {
        assert!(v.is_finite(), "{v}");
    }
    assert_eq!(out.f32("sm")[0], 0.0);
    assert_eq!(out.f32("sm")[6], 1000.0);
}

// ---------------------------------------------------------------------------------------------
// Norms

fn rms_ref(x: &[f32], eps: f32) -> f64 {
    let ms = x.iter().map(|v| (*v as f64).powi(2)).sum::<f64>() / x.len() as f64;
    1.0 / (ms + eps as f64).sqrt()
}

#[test]
fn norms_match_reference() {
    let (t, g, d) = (5, 3, 11);
    let eps = 1e-6f32;
    let mut rng = Rng::new(7);
    let x = rng.vec_normal(t * g * d, 2.0);
    let r = rng.vec_normal(t * g * d, 1.0);
    let z = rng.vec_normal(t * g * d, 2.0);
    let w = rng.vec_normal(d, 1.0);
    let store = weights(&[("w", HostTensor::from_f32(&[d], &w))]);

    let mut b = GraphBuilder::new();
    let xi = b.input("x", DType::F32, &[t, g, d]).unwrap();
    let ri = b.input("r", DType::F32, &[t, g, d]).unwrap();
    let zi = b.input("z", DType::F32, &[t, g * d]).unwrap();
    let wi = b.weight("w", DType::F32, &[d]).unwrap();
    let rms = b.rms_norm(xi, wi, eps).unwrap();
    let (sum, normed) = b.add_rms_norm(xi, ri, wi, eps).unwrap();
    let gated = b.gated_rms_norm(xi, zi, wi, eps).unwrap();
    let l2 = b.l2_norm(xi, eps, 0.25).unwrap();
    for (n, id) in [
        ("rms", rms),
        ("sum", sum),
        ("normed", normed),
        ("gated", gated),
        ("l2", l2),
    ] {
        b.output(n, id).unwrap();
    }
    let mut h = Harness::new(&store, &[]);
    let inputs = [
        ("x", HostData::F32(x.clone())),
        ("r", HostData::F32(r.clone())),
        ("z", HostData::F32(z.clone())),
    ];
    let out = h.run(&b.build(), &inputs);

    let (mut want_rms, mut want_sum, mut want_normed, mut want_gated, mut want_l2) =
        (vec![], vec![], vec![], vec![], vec![]);
    for row in 0..t * g {
        let xr = &x[row * d..][..d];
        let f = rms_ref(xr, eps);
        let l2 = 1.0 / (xr.iter().map(|v| (*v as f64).powi(2)).sum::<f64>() + eps as f64).sqrt();
        let s: Vec<f32> = xr
            .iter()
            .zip(&r[row * d..][..d])
            .map(|(a, b)| a + b)
            .collect();
        let fs = rms_ref(&s, eps);
        for i in 0..d {
            let (xv, wv, zv) = (xr[i] as f64, w[i] as f64, z[row * d + i] as f64);
            want_rms.push(xv * f * wv);
            want_gated.push(xv * f * wv * silu(zv));
            want_l2.push(xv * l2 * 0.25);
            want_sum.push(s[i] as f64);
            want_normed.push(s[i] as f64 * fs * wv);
        }
    }
    assert_close("rms_norm", &out.f32("rms"), &want_rms);
    assert_close("add_rms_norm sum", &out.f32("sum"), &want_sum);
    assert_close("add_rms_norm normed", &out.f32("normed"), &want_normed);
    assert_close("gated_rms_norm", &out.f32("gated"), &want_gated);
    assert_close("l2_norm", &out.f32("l2"), &want_l2);
}

// ---------------------------------------------------------------------------------------------
// ConvStep

fn conv_graph(t: usize, c: usize, k: usize) -> Graph {
    let mut b = GraphBuilder::new();
    let x = b.input("x", DType::F32, &[t, c]).unwrap();
    let w = b.weight("conv.w", DType::F32, &[c, k]).unwrap();
    let s = b.state("conv", &[k - 1, c]).unwrap();
    let y = b.conv_step(x, w, s).unwrap();
    b.output("y", y).unwrap();
    b.build()
}

/// HF's causal depthwise conv1d + SiLU over a whole sequence, zero-padded on the left.
fn conv_ref(x: &[f32], w: &[f32], t: usize, c: usize, k: usize) -> Vec<f64> {
    let mut y = vec![0.0; t * c];
    for tt in 0..t {
        for ch in 0..c {
            let mut acc = 0.0f64;
            for j in 0..k {
                let src = tt as isize - (k as isize - 1) + j as isize;
                if src >= 0 {
                    acc += w[ch * k + j] as f64 * x[src as usize * c + ch] as f64;
                }
            }
            y[tt * c + ch] = silu(acc);
        }
    }
    y
}

#[test]
fn conv_step_matches_reference_and_splits() {
    let (t, c) = (7, 5);
    for k in [3, 4] {
        let mut rng = Rng::new(8 + k as u64);
        let x = rng.vec_normal(t * c, 1.0);
        let w = rng.vec_normal(c * k, 0.7);
        let store = weights(&[("conv.w", HostTensor::from_f32(&[c, k], &w))]);
        let decl = [StateDecl::new("conv", &[k - 1, c])];

        let mut whole = Harness::new(&store, &decl);
        let y = whole
            .run(&conv_graph(t, c, k), &[("x", HostData::F32(x.clone()))])
            .f32("y");
        assert_close(&format!("conv K={k}"), &y, &conv_ref(&x, &w, t, c, k));
        assert_eq!(
            whole.state("conv"),
            x[(t - (k - 1)) * c..].to_vec(),
            "state = last K-1 inputs"
        );

        // The same sequence as 1 + 1 + 2 + 3 rows (chunks both shorter and longer than K-1).
        let mut split = Harness::new(&store, &decl);
        let mut ys = Vec::new();
        let mut at = 0;
        for len in [1, 1, 2, 3] {
            let xs = x[at * c..(at + len) * c].to_vec();
            ys.extend(
                split
                    .run(&conv_graph(len, c, k), &[("x", HostData::F32(xs))])
                    .f32("y"),
            );
            at += len;
        }
        assert_close_tol(&format!("conv K={k} split"), &ys, &to_f64(&y), 1e-6, 0.0);
        assert_eq!(split.state("conv"), whole.state("conv"));
    }
}

// ---------------------------------------------------------------------------------------------
// GatedDeltaNet

struct GdnInputs {
    qkv: Vec<f32>,
    b: Vec<f32>,
    a: Vec<f32>,
    ssm_a: Vec<f32>,
    dt_bias: Vec<f32>,
}

fn gdn_inputs(p: &GdnParams, t: usize, rng: &mut Rng) -> GdnInputs {
    let mut a = rng.vec_normal(t * p.nv, 2.0);
    a[0] = 25.0; // above softplus' threshold of 20
    GdnInputs {
        qkv: rng.vec_normal(t * p.conv_dim(), 1.0),
        b: rng.vec_normal(t * p.nv, 2.0),
        a,
        // −exp(A_log); HF initialises A_log = ln U(0.01, 16), but decays of up to e^-16 per token
        // would wipe the state and hide carry bugs, so most heads here decay slowly.
        ssm_a: (0..p.nv)
            .map(|h| if h == 0 { -16.0 } else { -rng.range(0.01, 2.0) })
            .collect(),
        dt_bias: (0..p.nv).map(|_| 1.0 + rng.range(-0.5, 0.5)).collect(),
    }
}

fn gdn_graph(p: &GdnParams, t: usize) -> Graph {
    let mut b = GraphBuilder::new();
    let qkv = b.input("qkv", DType::F32, &[t, p.conv_dim()]).unwrap();
    let bi = b.input("b", DType::F32, &[t, p.nv]).unwrap();
    let ai = b.input("a", DType::F32, &[t, p.nv]).unwrap();
    let ssm_a = b.weight("ssm_a", DType::F32, &[p.nv]).unwrap();
    let dt = b.weight("dt_bias", DType::F32, &[p.nv]).unwrap();
    let s = b.state("ssm", &[p.nv, p.dk, p.dv]).unwrap();
    let o = b.gated_delta_net(*p, qkv, bi, ai, ssm_a, dt, s).unwrap();
    b.output("o", o).unwrap();
    b.build()
}

/// The recurrent gated delta rule (model notes §4.3–4.4) in f64: returns (o, final state).
fn gdn_ref(p: &GdnParams, t: usize, inp: &GdnInputs) -> (Vec<f64>, Vec<f64>) {
    let (nk, nv, dk, dv) = (p.nk, p.nv, p.dk, p.dv);
    let cd = p.conv_dim();
    let l2 = |v: &[f32]| -> Vec<f64> {
        let inv =
            1.0 / (v.iter().map(|x| (*x as f64).powi(2)).sum::<f64>() + p.l2_eps as f64).sqrt();
        v.iter().map(|x| *x as f64 * inv).collect()
    };
    let mut s = vec![0.0f64; nv * dk * dv];
    let mut o = vec![0.0f64; t * nv * dv];
    for tt in 0..t {
        let row = &inp.qkv[tt * cd..(tt + 1) * cd];
        for h in 0..nv {
            let kh = match p.head_map {
                HeadMap::Tiled => h % nk,
                HeadMap::Grouped => h / (nv / nk),
            };
            let q: Vec<f64> = l2(&row[kh * dk..(kh + 1) * dk])
                .iter()
                .map(|x| x / (dk as f64).sqrt())
                .collect();
            let k = l2(&row[nk * dk + kh * dk..nk * dk + (kh + 1) * dk]);
            let v = &row[2 * nk * dk + h * dv..2 * nk * dk + (h + 1) * dv];
            let beta = sigmoid(inp.b[tt * nv + h] as f64);
            let softplus = (1.0 + (inp.a[tt * nv + h] as f64 + inp.dt_bias[h] as f64).exp()).ln();
            let decay = (inp.ssm_a[h] as f64 * softplus).exp();
            let sh = &mut s[h * dk * dv..(h + 1) * dk * dv];
            sh.iter_mut().for_each(|x| *x *= decay);
            for j in 0..dv {
                let kv: f64 = (0..dk).map(|i| sh[i * dv + j] * k[i]).sum();
                let delta = beta * (v[j] as f64 - kv);
                for i in 0..dk {
                    sh[i * dv + j] += k[i] * delta;
                }
            }
            for j in 0..dv {
                o[(tt * nv + h) * dv + j] = (0..dk).map(|i| sh[i * dv + j] * q[i]).sum();
            }
        }
    }
    (o, s)
}

fn check_gdn(p: GdnParams, seed: u64) {
    let t = 7;
    let mut rng = Rng::new(seed);
    let inp = gdn_inputs(&p, t, &mut rng);
    let store = weights(&[
        ("ssm_a", HostTensor::from_f32(&[p.nv], &inp.ssm_a)),
        ("dt_bias", HostTensor::from_f32(&[p.nv], &inp.dt_bias)),
    ]);
    let decl = [StateDecl::new("ssm", &[p.nv, p.dk, p.dv])];
    let what = format!("gdn {:?} nk={} nv={}", p.head_map, p.nk, p.nv);

    let mut whole = Harness::new(&store, &decl);
    let feed = |lo: usize, hi: usize| {
        [
            (
                "qkv",
                HostData::F32(inp.qkv[lo * p.conv_dim()..hi * p.conv_dim()].to_vec()),
            ),
            ("b", HostData::F32(inp.b[lo * p.nv..hi * p.nv].to_vec())),
            ("a", HostData::F32(inp.a[lo * p.nv..hi * p.nv].to_vec())),
        ]
    };
    let o = whole.run(&gdn_graph(&p, t), &feed(0, t)).f32("o");
    let (want_o, want_s) = gdn_ref(&p, t, &inp);
    assert_close(&what, &o, &want_o);
    assert_close(&format!("{what} state"), &whole.state("ssm"), &want_s);

    // Token by token, the state carried between calls.
    let mut step = Harness::new(&store, &decl);
    let one = gdn_graph(&p, 1);
    let mut os = Vec::new();
    for tt in 0..t {
        os.extend(step.run(&one, &feed(tt, tt + 1)).f32("o"));
    }
    assert_close_tol(
        &format!("{what} token by token"),
        &os,
        &to_f64(&o),
        1e-6,
        1e-7,
    );
    assert_close_tol(
        &format!("{what} token by token state"),
        &step.state("ssm"),
        &to_f64(&whole.state("ssm")),
        1e-6,
        1e-7,
    );
}

#[test]
fn gated_delta_net_matches_reference_and_splits() {
    for (i, head_map) in [HeadMap::Tiled, HeadMap::Grouped].into_iter().enumerate() {
        let p = GdnParams {
            nk: 2,
            nv: 6,
            dk: 5,
            dv: 3,
            head_map,
            l2_eps: 1e-6,
        };
        check_gdn(p, 20 + i as u64);
    }
    let equal_heads = GdnParams {
        nk: 2,
        nv: 2,
        dk: 8,
        dv: 4,
        head_map: HeadMap::Tiled,
        l2_eps: 1e-6,
    };
    check_gdn(equal_heads, 23);
}

/// The two head maps must differ when nv > nk (a wrong map is otherwise invisible).
#[test]
fn gated_delta_net_head_maps_differ() {
    let mk = |head_map| GdnParams {
        nk: 2,
        nv: 4,
        dk: 4,
        dv: 2,
        head_map,
        l2_eps: 1e-6,
    };
    let mut rng = Rng::new(30);
    let p = mk(HeadMap::Tiled);
    let inp = gdn_inputs(&p, 2, &mut rng);
    let store = weights(&[
        ("ssm_a", HostTensor::from_f32(&[p.nv], &inp.ssm_a)),
        ("dt_bias", HostTensor::from_f32(&[p.nv], &inp.dt_bias)),
    ]);
    let feed = [
        ("qkv", HostData::F32(inp.qkv.clone())),
        ("b", HostData::F32(inp.b.clone())),
        ("a", HostData::F32(inp.a.clone())),
    ];
    let decl = [StateDecl::new("ssm", &[p.nv, p.dk, p.dv])];
    let tiled = Harness::new(&store, &decl)
        .run(&gdn_graph(&mk(HeadMap::Tiled), 2), &feed)
        .f32("o");
    let grouped = Harness::new(&store, &decl)
        .run(&gdn_graph(&mk(HeadMap::Grouped), 2), &feed)
        .f32("o");
    // Value head 0 uses key head 0 either way; head 1 uses key head 1 (tiled) or 0 (grouped).
    assert_eq!(tiled[..2], grouped[..2]);
    assert_ne!(tiled[2..4], grouped[2..4]);
}

// ---------------------------------------------------------------------------------------------
// Rope

/// Partial NeoX rope. inv_freq and the angle are formed in f32 exactly as HF does (that rounding
/// is part of the contract: at position 5000 it moves the angle by ~1e-4), the rest in f64.
fn rope_ref(x: &[f32], pos: &[i32], h: usize, d: usize, rot: usize, theta: f32) -> Vec<f64> {
    let half = rot / 2;
    let mut y = to_f64(x);
    for (t, p) in pos.iter().enumerate() {
        for head in 0..h {
            let base = (t * h + head) * d;
            for i in 0..half {
                let inv_freq = 1.0f32 / theta.powf((2 * i) as f32 / rot as f32);
                let angle = (*p as f32 * inv_freq) as f64;
                let (x0, x1) = (x[base + i] as f64, x[base + i + half] as f64);
                y[base + i] = x0 * angle.cos() - x1 * angle.sin();
                y[base + i + half] = x1 * angle.cos() + x0 * angle.sin();
            }
        }
    }
    y
}

#[test]
fn rope_matches_reference() {
    let (t, h) = (7, 3);
    let mut rng = Rng::new(40);
    for (d, rot, theta) in [(10, 6, 1e6f32), (8, 8, 10000.0), (12, 4, 5e6)] {
        let x = rng.vec_normal(t * h * d, 1.0);
        let pos: Vec<i32> = (0..t)
            .map(|i| if i == 0 { 0 } else { rng.below(5000) as i32 })
            .collect();
        let mut b = GraphBuilder::new();
        let xi = b.input("x", DType::F32, &[t, h, d]).unwrap();
        let pi = b.input("pos", DType::I32, &[t]).unwrap();
        let y = b.rope(xi, pi, rot, theta).unwrap();
        b.output("y", y).unwrap();
        let mut hs = Harness::new(&WeightStore::default(), &[]);
        let out = hs.run(
            &b.build(),
            &[
                ("x", HostData::F32(x.clone())),
                ("pos", HostData::I32(pos.clone())),
            ],
        );
        let got = out.f32("y");
        assert_close(
            &format!("rope d={d} rot={rot}"),
            &got,
            &rope_ref(&x, &pos, h, d, rot, theta),
        );
        // Dims at and above rot pass through bit for bit.
        for (gr, xr) in got.chunks(d).zip(x.chunks(d)) {
            assert_eq!(gr[rot..], xr[rot..]);
        }
    }
}

/// YaRN written out from HF's `_compute_yarn_parameters` (transformers 5.23) in f64 apart from
/// the f32 tensors HF forms (`pos_freqs`, the ramp): low-frequency dims are divided by the
/// factor, high-frequency ones kept, a linear ramp between; cos and sin times 0.1·ln(f) + 1.
fn yarn_ref(
    x: &[f32],
    pos: &[i32],
    h: usize,
    d: usize,
    rot: usize,
    theta: f32,
    y: &Yarn,
) -> Vec<f64> {
    let half = rot / 2;
    let corr = |r: f32| {
        rot as f64 * (y.original_context as f64 / (r as f64 * 2.0 * std::f64::consts::PI)).ln()
            / (2.0 * (theta as f64).ln())
    };
    let low = corr(y.beta_fast).floor().max(0.0);
    let high = corr(y.beta_slow).ceil().min(rot as f64 - 1.0);
    let m = 0.1 * (y.factor as f64).ln() + 1.0;
    let mut out = to_f64(x);
    for (t, p) in pos.iter().enumerate() {
        for head in 0..h {
            let base = (t * h + head) * d;
            for i in 0..half {
                let pf = theta.powf((2 * i) as f32 / rot as f32) as f64;
                let ramp = ((i as f64 - low) / (high - low)).clamp(0.0, 1.0);
                let inv = (1.0 / (y.factor as f64 * pf)) * ramp + (1.0 / pf) * (1.0 - ramp);
                let angle = (*p as f32 * inv as f32) as f64;
                let (x0, x1) = (x[base + i] as f64, x[base + i + half] as f64);
                out[base + i] = m * (x0 * angle.cos() - x1 * angle.sin());
                out[base + i + half] = m * (x1 * angle.cos() + x0 * angle.sin());
            }
        }
    }
    out
}

#[test]
fn rope_yarn_matches_hf_formula() {
    let (t, h) = (6, 2);
    let mut rng = Rng::new(41);
    for (d, rot, theta, factor, ctx) in [(32, 32, 1e4f32, 8.0f32, 256), (24, 16, 1e6, 32.0, 4096)] {
        let yarn = Yarn {
            factor,
            original_context: ctx,
            beta_fast: 32.0,
            beta_slow: 1.0,
            attention_factor: None,
            truncate: true,
        };
        let x = rng.vec_normal(t * h * d, 1.0);
        let pos: Vec<i32> = vec![0, 1, 9, 300, 4000, 20000];
        let mut b = GraphBuilder::new();
        let xi = b.input("x", DType::F32, &[t, h, d]).unwrap();
        let pi = b.input("pos", DType::I32, &[t]).unwrap();
        let rp = RopeParams {
            rot,
            theta,
            yarn: Some(yarn),
        };
        let yo = b.rope_with(xi, pi, rp).unwrap();
        b.output("y", yo).unwrap();
        let mut hs = Harness::new(&WeightStore::default(), &[]);
        let out = hs.run(
            &b.build(),
            &[
                ("x", HostData::F32(x.clone())),
                ("pos", HostData::I32(pos.clone())),
            ],
        );
        // The f32 blend of the two frequencies differs from the f64 one by an ulp or so, which
        // at position 20000 moves the angle by ~1e-4 rad.
        assert_close_tol(
            &format!("yarn d={d} rot={rot} factor={factor}"),
            &out.f32("y"),
            &yarn_ref(&x, &pos, h, d, rot, theta, &yarn),
            1e-3,
            1e-3,
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Attention

const NH: usize = 6;
const NKV: usize = 2;
const HD: usize = 8;
const CAP: usize = 12;

fn attn_params() -> AttnParams {
    AttnParams {
        n_heads: NH,
        n_kv_heads: NKV,
        head_dim: HD,
        scale: (HD as f32).powf(-0.5),
    }
}

fn attn_graph(t: usize) -> Graph {
    let mut b = GraphBuilder::new();
    let q = b.input("q", DType::F32, &[t, NH, HD]).unwrap();
    let k = b.input("k", DType::F32, &[t, NKV, HD]).unwrap();
    let v = b.input("v", DType::F32, &[t, NKV, HD]).unwrap();
    let pos = b.input("pos", DType::I32, &[t]).unwrap();
    let kc = b.state("k_cache", &[CAP, NKV, HD]).unwrap();
    let vc = b.state("v_cache", &[CAP, NKV, HD]).unwrap();
    let o = b.attention(attn_params(), q, k, v, pos, kc, vc).unwrap();
    b.output("o", o).unwrap();
    b.build()
}

fn attn_states() -> [StateDecl; 2] {
    [
        StateDecl::new("k_cache", &[CAP, NKV, HD]),
        StateDecl::new("v_cache", &[CAP, NKV, HD]),
    ]
}

/// Causal GQA attention of a sequence starting at position 0, in f64.
fn attn_ref(q: &[f32], k: &[f32], v: &[f32], t: usize) -> Vec<f64> {
    let scale = attn_params().scale as f64;
    let mut o = vec![0.0; t * NH * HD];
    for tt in 0..t {
        for h in 0..NH {
            let kvh = h / (NH / NKV);
            let qv = &q[(tt * NH + h) * HD..][..HD];
            let scores: Vec<f64> = (0..=tt)
                .map(|j| {
                    let kr = &k[(j * NKV + kvh) * HD..][..HD];
                    qv.iter()
                        .zip(kr)
                        .map(|(a, b)| *a as f64 * *b as f64)
                        .sum::<f64>()
                        * scale
                })
                .collect();
            let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let e: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
            let sum: f64 = e.iter().sum();
            for (j, ej) in e.iter().enumerate() {
                for dd in 0..HD {
                    o[(tt * NH + h) * HD + dd] += ej / sum * v[(j * NKV + kvh) * HD + dd] as f64;
                }
            }
        }
    }
    o
}

fn attn_feed(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    lo: usize,
    hi: usize,
) -> Vec<(&'static str, HostData)> {
    vec![
        ("q", HostData::F32(q[lo * NH * HD..hi * NH * HD].to_vec())),
        ("k", HostData::F32(k[lo * NKV * HD..hi * NKV * HD].to_vec())),
        ("v", HostData::F32(v[lo * NKV * HD..hi * NKV * HD].to_vec())),
        ("pos", HostData::I32((lo as i32..hi as i32).collect())),
    ]
}

#[test]
fn attention_matches_reference_and_decode() {
    let t = 7;
    let mut rng = Rng::new(50);
    let q = rng.vec_normal(t * NH * HD, 1.5);
    let k = rng.vec_normal(t * NKV * HD, 1.5);
    let v = rng.vec_normal(t * NKV * HD, 1.0);
    let want = attn_ref(&q, &k, &v, t);

    let mut prefill = Harness::new(&WeightStore::default(), &attn_states());
    let o = prefill
        .run(&attn_graph(t), &attn_feed(&q, &k, &v, 0, t))
        .f32("o");
    assert_close("attention prefill", &o, &want);
    let kc = prefill.state("k_cache");
    assert_eq!(
        kc[..t * NKV * HD],
        k[..],
        "new rows land at their positions"
    );
    assert!(
        kc[t * NKV * HD..].iter().all(|x| *x == 0.0),
        "rows past the sequence untouched"
    );

    // Row by row, as decode runs it.
    let mut decode = Harness::new(&WeightStore::default(), &attn_states());
    let one = attn_graph(1);
    let mut os = Vec::new();
    for tt in 0..t {
        os.extend(
            decode
                .run(&one, &attn_feed(&q, &k, &v, tt, tt + 1))
                .f32("o"),
        );
    }
    assert_close_tol("attention decode", &os, &to_f64(&o), 1e-6, 1e-7);

    // A prefill of 4 continued by a batch of 3 (the speculative-verify shape).
    let mut cont = Harness::new(&WeightStore::default(), &attn_states());
    let mut oc = cont
        .run(&attn_graph(4), &attn_feed(&q, &k, &v, 0, 4))
        .f32("o");
    oc.extend(
        cont.run(&attn_graph(3), &attn_feed(&q, &k, &v, 4, 7))
            .f32("o"),
    );
    assert_close_tol("attention 4 + 3", &oc, &to_f64(&o), 1e-6, 1e-7);
    assert_eq!(cont.state("v_cache"), prefill.state("v_cache"));
}

#[test]
fn attention_rejects_positions_outside_the_cache() {
    let mut rng = Rng::new(51);
    let q = rng.vec_normal(2 * NH * HD, 1.0);
    let k = rng.vec_normal(2 * NKV * HD, 1.0);
    let v = rng.vec_normal(2 * NKV * HD, 1.0);
    let mut h = Harness::new(&WeightStore::default(), &attn_states());
    for bad in [CAP as i32, -1, i32::MAX] {
        let mut feed = attn_feed(&q, &k, &v, 0, 2);
        feed[3].1 = HostData::I32(vec![0, bad]);
        match h.try_run(&attn_graph(2), &feed) {
            Err(BackendError::BadInput { name, .. }) => assert_eq!(name, "pos"),
            Err(e) => panic!("pos {bad}: wrong error {e}"),
            Ok(_) => panic!("pos {bad} was accepted"),
        }
        assert!(
            h.state("k_cache").iter().all(|x| *x == 0.0),
            "a rejected call writes nothing"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// ArgMax and TopK

#[test]
fn argmax_and_top_k_order_and_ties() {
    let (n, width, k) = (4, 11, 4);
    let mut rng = Rng::new(60);
    let mut x: Vec<f32> = (0..n * width)
        .map(|_| (rng.below(5) as f32) - 2.0)
        .collect(); // many ties
    x[2 * width + 7] = 9.0; // a unique maximum
    x[3 * width..].fill(-0.0);
    x[3 * width + 4] = 0.0; // -0.0 and +0.0 tie

    let mut b = GraphBuilder::new();
    let xi = b.input("x", DType::F32, &[n, width]).unwrap();
    let am = b.argmax(xi).unwrap();
    let (vals, idxs) = b.top_k(xi, k).unwrap();
    b.output("am", am).unwrap();
    b.output("vals", vals).unwrap();
    b.output("idxs", idxs).unwrap();
    let mut h = Harness::new(&WeightStore::default(), &[]);
    let out = h.run(&b.build(), &[("x", HostData::F32(x.clone()))]);

    let (am, vals, idxs) = (out.i32("am"), out.f32("vals"), out.i32("idxs"));
    for r in 0..n {
        let row = &x[r * width..(r + 1) * width];
        // A stable sort by descending value keeps equal values in index order.
        let mut order: Vec<usize> = (0..width).collect();
        order.sort_by(|a, b| row[*b].partial_cmp(&row[*a]).unwrap());
        let want_idx: Vec<i32> = order[..k].iter().map(|i| *i as i32).collect();
        assert_eq!(idxs[r * k..(r + 1) * k], want_idx, "row {r}");
        let want_vals: Vec<f32> = order[..k].iter().map(|i| row[*i]).collect();
        assert_eq!(vals[r * k..(r + 1) * k], want_vals, "row {r}");
        assert_eq!(am[r], order[0] as i32, "argmax row {r}: first maximum");
    }
    assert_eq!(am[2], 7);
    assert_eq!(am[3], 0, "-0.0 == +0.0: the first wins");
}
