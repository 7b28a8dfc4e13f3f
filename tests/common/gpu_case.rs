//! The wgpu-vs-CPU op harness (tests/wgpu_ops.rs, tests/wgpu_gemv.rs): graphs built with their
//! random data, run twice on both backends with poisoned intermediates, every output and
//! state compared.
#![allow(dead_code)]

use deltaspec::backend::wgpu::{WgpuBackend, WgpuOptions};
use deltaspec::backend::{self, Backend, HostData, HostTensor, StateDecl, WeightStore};
use deltaspec::graph::{Graph, GraphBuilder, TensorId};
use deltaspec::tensor::{DType, quant};
use deltaspec::util::rng::Rng;

pub fn gpu_with(opts: WgpuOptions) -> Option<WgpuBackend> {
    // Strict comparisons use f32 activations and, for inputs of 65+ rows, the f32 tiled kernel
    // unless a test asks for int8 or for the f16 cooperative-matrix kernel (tolerance ~1e-3).
    match WgpuBackend::with_options(WgpuOptions {
        poison: true,
        int8_matmul: Some(opts.int8_matmul.unwrap_or(false)),
        coop: Some(opts.coop.unwrap_or(false)),
        ..opts
    }) {
        Ok(b) => Some(b),
        Err(e) => {
            eprintln!("skipped: no wgpu adapter ({e})");
            None
        }
    }
}

pub fn gpu() -> Option<WgpuBackend> {
    gpu_with(WgpuOptions::default())
}

/// A graph with everything it needs to run.
pub struct Case {
    pub g: Graph,
    pub w: WeightStore,
    pub states: Vec<(StateDecl, Vec<f32>)>,
    pub inputs: Vec<(String, HostData)>,
}

/// Builder helpers that also record the data.
pub struct B {
    pub b: GraphBuilder,
    pub rng: Rng,
    pub w: WeightStore,
    pub states: Vec<(StateDecl, Vec<f32>)>,
    pub inputs: Vec<(String, HostData)>,
}

impl B {
    pub fn new(seed: u64) -> Self {
        B {
            b: GraphBuilder::new(),
            rng: Rng::new(seed),
            w: WeightStore::default(),
            states: Vec::new(),
            inputs: Vec::new(),
        }
    }
    pub fn input(&mut self, name: &str, shape: &[usize], scale: f32) -> TensorId {
        let n = shape.iter().product();
        let v = self.rng.vec_normal(n, scale);
        self.input_f32(name, shape, v)
    }
    pub fn input_f32(&mut self, name: &str, shape: &[usize], v: Vec<f32>) -> TensorId {
        self.inputs.push((name.into(), HostData::F32(v)));
        self.b.input(name, DType::F32, shape).unwrap()
    }
    pub fn input_i32(&mut self, name: &str, v: Vec<i32>) -> TensorId {
        let n = v.len();
        self.inputs.push((name.into(), HostData::I32(v)));
        self.b.input(name, DType::I32, &[n]).unwrap()
    }
    pub fn weight(
        &mut self,
        name: &str,
        dtype: DType,
        shape: &[usize],
        scale: f32,
        offset: f32,
    ) -> TensorId {
        let n = shape.iter().product();
        let v: Vec<f32> = self
            .rng
            .vec_normal(n, scale)
            .into_iter()
            .map(|x| x + offset)
            .collect();
        let bytes = quant::quantize(dtype, &v).unwrap();
        self.w
            .insert(name, HostTensor::from_bytes(dtype, shape, bytes));
        self.b.weight(name, dtype, shape).unwrap()
    }
    pub fn state(&mut self, name: &str, shape: &[usize], scale: f32) -> TensorId {
        let n = shape.iter().product();
        let v = self.rng.vec_normal(n, scale);
        self.states.push((StateDecl::new(name, shape), v));
        self.b.state(name, shape).unwrap()
    }
    pub fn out(&mut self, name: &str, id: TensorId) {
        self.b.output(name, id).unwrap();
    }
    pub fn case(self) -> Case {
        Case {
            g: self.b.build(),
            w: self.w,
            states: self.states,
            inputs: self.inputs,
        }
    }
}

/// Outputs of each run, and the final states.
pub type RunResult = (Vec<Vec<(String, HostTensor)>>, Vec<Vec<f32>>);

/// Every output of every run in `got` is finite and equals `want`'s first run bit for bit
/// (`ctx` and `what` name the failure: "<ctx> <output>: <what>").
#[allow(dead_code)] // not every test binary that includes this file uses it
pub fn assert_same_bits(
    got: &[Vec<(String, HostTensor)>],
    want: &[Vec<(String, HostTensor)>],
    ctx: &str,
    what: &str,
) {
    for run in got {
        for ((name, g), (_, w)) in run.iter().zip(&want[0]) {
            let (g, w) = (g.to_f32().unwrap(), w.to_f32().unwrap());
            assert!(g.iter().all(|v| v.is_finite()), "{ctx} {name}: not finite");
            let same =
                g.len() == w.len() && g.iter().zip(&w).all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same, "{ctx} {name}: {what}");
        }
    }
}

pub fn rel_err(a: &[f32], b: &[f32]) -> f32 {
    let (mut num, mut den) = (0.0f64, 0.0f64);
    for (x, y) in a.iter().zip(b) {
        num += ((*x - *y) as f64).powi(2);
        den += (*y as f64).powi(2);
    }
    if a.len() != b.len() {
        return f32::INFINITY;
    }
    (num.sqrt() / den.sqrt().max(1e-30)) as f32
}

pub fn run_on(be: &mut dyn Backend, c: &Case, runs: usize) -> RunResult {
    let w = be.upload_weights(&c.w).unwrap();
    let decls: Vec<StateDecl> = c.states.iter().map(|s| s.0.clone()).collect();
    let s = be.alloc_states(&decls).unwrap();
    for (d, v) in &c.states {
        be.write_state(s, &d.name, v).unwrap();
    }
    let e = be.compile(&c.g).unwrap();
    let inputs: Vec<(&str, HostData)> = c
        .inputs
        .iter()
        .map(|(n, d)| (n.as_str(), d.clone()))
        .collect();
    let outs = (0..runs)
        .map(|_| be.run(e, w, s, &inputs).unwrap())
        .collect();
    let states = decls
        .iter()
        .map(|d| be.read_state(s, &d.name).unwrap())
        .collect();
    (outs, states)
}

/// Runs `c` twice on both backends and compares every output and state.
pub fn check(gpu: &mut WgpuBackend, c: &Case, tol: f32, label: &str) {
    let mut cpu = backend::create("cpu").unwrap();
    let (want, want_s) = run_on(cpu.as_mut(), c, 2);
    let (got, got_s) = run_on(gpu, c, 2);
    for (run, (w, g)) in want.iter().zip(&got).enumerate() {
        for ((name, wt), (gname, gt)) in w.iter().zip(g) {
            assert_eq!(name, gname);
            assert_eq!(wt.shape, gt.shape, "{label}: {name}");
            assert_eq!(wt.dtype, gt.dtype, "{label}: {name}");
            if wt.dtype == DType::I32 {
                assert_eq!(wt.to_i32(), gt.to_i32(), "{label}: {name} (run {run})");
            } else {
                let (a, b) = (gt.to_f32().unwrap(), wt.to_f32().unwrap());
                let nan_b = b.iter().filter(|x| x.is_nan()).count();
                let nan_a = a.iter().filter(|x| x.is_nan()).count();
                assert_eq!(
                    nan_a, nan_b,
                    "{label}: {name} (run {run}): NaN count (unwritten values?)"
                );
                let fa: Vec<f32> = a
                    .iter()
                    .map(|x| if x.is_nan() { 0.0 } else { *x })
                    .collect();
                let fb: Vec<f32> = b
                    .iter()
                    .map(|x| if x.is_nan() { 0.0 } else { *x })
                    .collect();
                let e = rel_err(&fa, &fb);
                assert!(
                    e <= tol,
                    "{label}: {name} (run {run}): relative error {e:e} > {tol:e}"
                );
            }
        }
    }
    for ((d, _), (w, g)) in c.states.iter().zip(want_s.iter().zip(&got_s)) {
        let e = rel_err(g, w);
        assert!(
            e <= tol,
            "{label}: state {} relative error {e:e} > {tol:e}",
            d.name
        );
    }
}
