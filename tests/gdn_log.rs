//! The factor-replay pair of the gated delta net (`GatedDeltaNetLog`, `GatedDeltaNetReplay`)
//! that speculative verify runs with `--rollback factors`:
//! - on the CPU, the logging step gives the plain step's outputs, leaves the state alone and
//!   logs exactly its inputs; replaying the first n logged rows leaves the state where the
//!   plain step over those n rows does, for every n;
//! - on wgpu and hip (when available; hip also through the CUDA-driver emulator), the logging
//!   step equals the CPU's (outputs, an untouched state, a log holding exactly the inputs), and
//!   a replay equals the same backend's plain step over the same rows bit for bit.

mod common;

use common::rel_err;
use deltaspec::backend::{self, Backend, HostData, HostTensor, StateDecl, WeightStore};
use deltaspec::graph::{GdnParams, Graph, GraphBuilder, HeadMap};
use deltaspec::tensor::DType;
use deltaspec::util::rng::Rng;

/// Verify rows logged per run, and the log's rows (more: a padded log).
const T: usize = 7;
const R: usize = 9;

fn params(dk: usize, head_map: HeadMap) -> GdnParams {
    GdnParams {
        nk: 2,
        nv: 6,
        dk,
        dv: 24,
        head_map,
        l2_eps: 1e-6,
    }
}

struct Data {
    p: GdnParams,
    qkv: Vec<f32>,
    b: Vec<f32>,
    a: Vec<f32>,
    w: WeightStore,
    ssm: Vec<f32>,
}

fn data(p: GdnParams, seed: u64) -> Data {
    let mut rng = Rng::new(seed);
    let mut w = WeightStore::default();
    let ssm_a: Vec<f32> = (0..p.nv).map(|_| -rng.range(0.05, 1.5)).collect();
    w.insert("ssm_a", HostTensor::from_f32(&[p.nv], &ssm_a));
    let dt: Vec<f32> = (0..p.nv).map(|_| rng.range(0.5, 1.5)).collect();
    w.insert("dt_bias", HostTensor::from_f32(&[p.nv], &dt));
    Data {
        p,
        qkv: rng.vec_normal(T * p.conv_dim(), 1.0),
        b: rng.vec_normal(T * p.nv, 1.5),
        a: rng.vec_normal(T * p.nv, 1.5),
        w,
        ssm: rng.vec_normal(p.nv * p.dk * p.dv, 0.3),
    }
}

/// Which graph a run builds.
#[derive(Clone, Copy)]
enum Kind {
    /// The plain step over the first n rows.
    Step(usize),
    /// The logging step over all T rows.
    Log,
    /// The replay of the first n logged rows.
    Replay(usize),
}

fn graph(p: &GdnParams, kind: Kind) -> Graph {
    let mut b = GraphBuilder::new();
    let sa = b.weight("ssm_a", DType::F32, &[p.nv]).unwrap();
    let dt = b.weight("dt_bias", DType::F32, &[p.nv]).unwrap();
    let ssm = b.state("ssm", &[p.nv, p.dk, p.dv]).unwrap();
    let log = b.state("log", &[R, p.log_width()]).unwrap();
    let rows_in = |b: &mut GraphBuilder, n: usize| {
        let qkv = b.input("qkv", DType::F32, &[n, p.conv_dim()]).unwrap();
        let bi = b.input("b", DType::F32, &[n, p.nv]).unwrap();
        let ai = b.input("a", DType::F32, &[n, p.nv]).unwrap();
        (qkv, bi, ai)
    };
    let o = match kind {
        Kind::Step(n) => {
            let (qkv, bi, ai) = rows_in(&mut b, n);
            b.gated_delta_net(*p, qkv, bi, ai, sa, dt, ssm).unwrap()
        }
        Kind::Log => {
            let (qkv, bi, ai) = rows_in(&mut b, T);
            b.gated_delta_net_log(*p, qkv, bi, ai, sa, dt, (ssm, log))
                .unwrap()
        }
        Kind::Replay(n) => b.gated_delta_net_replay(*p, n, sa, dt, ssm, log).unwrap(),
    };
    b.output("o", o).unwrap();
    b.build()
}

struct Run {
    o: Vec<f32>,
    ssm: Vec<f32>,
    log: Vec<f32>,
}

/// Runs `kind` on `be` from the data's state and the given log (NaN where `None`).
fn run(be: &mut dyn Backend, d: &Data, kind: Kind, log: Option<&[f32]>) -> Run {
    let p = &d.p;
    let decls = vec![
        StateDecl::new("ssm", &[p.nv, p.dk, p.dv]),
        StateDecl::new("log", &[R, p.log_width()]),
    ];
    let w = be.upload_weights(&d.w).unwrap();
    let st = be.alloc_states(&decls).unwrap();
    be.write_state(st, "ssm", &d.ssm).unwrap();
    let nan = vec![f32::NAN; R * p.log_width()];
    be.write_state(st, "log", log.unwrap_or(&nan)).unwrap();
    let first = |v: &[f32], n: usize| v[..n * v.len() / T].to_vec();
    let inputs = match kind {
        Kind::Step(n) => vec![
            ("qkv", HostData::F32(first(&d.qkv, n))),
            ("b", HostData::F32(first(&d.b, n))),
            ("a", HostData::F32(first(&d.a, n))),
        ],
        Kind::Log => vec![
            ("qkv", HostData::F32(d.qkv.clone())),
            ("b", HostData::F32(d.b.clone())),
            ("a", HostData::F32(d.a.clone())),
        ],
        Kind::Replay(_) => Vec::new(),
    };
    let exe = be.compile(&graph(p, kind)).unwrap();
    let outs = be.run(exe, w, st, &inputs).unwrap();
    let o = outs[0].1.to_f32().unwrap();
    let r = Run {
        o,
        ssm: be.read_state(st, "ssm").unwrap(),
        log: be.read_state(st, "log").unwrap(),
    };
    be.free_states(st).unwrap();
    r
}

/// The log a run over all T rows must leave: `[qkv_t | b_t | a_t]` per row, NaN past T.
fn expected_log(d: &Data) -> Vec<f32> {
    let (cd, nv) = (d.p.conv_dim(), d.p.nv);
    let mut v = Vec::new();
    for t in 0..T {
        v.extend_from_slice(&d.qkv[t * cd..(t + 1) * cd]);
        v.extend_from_slice(&d.b[t * nv..(t + 1) * nv]);
        v.extend_from_slice(&d.a[t * nv..(t + 1) * nv]);
    }
    v
}

fn same_bits(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

fn cases() -> Vec<GdnParams> {
    vec![
        params(16, HeadMap::Tiled),
        params(64, HeadMap::Grouped),
        params(128, HeadMap::Tiled),
    ]
}

#[test]
fn cpu_log_then_replay_equals_the_plain_step() {
    let mut cpu = backend::create("cpu").unwrap();
    for (i, p) in cases().into_iter().enumerate() {
        let d = data(p, 300 + i as u64);
        let what = format!("dk {} {:?}", p.dk, p.head_map);
        let step = run(cpu.as_mut(), &d, Kind::Step(T), None);
        let log = run(cpu.as_mut(), &d, Kind::Log, None);
        assert!(same_bits(&log.o, &step.o), "{what}: logging step output");
        assert!(same_bits(&log.ssm, &d.ssm), "{what}: the state must stay");
        let n = T * p.log_width();
        assert!(same_bits(&log.log[..n], &expected_log(&d)), "{what}: log");
        assert!(
            log.log[n..].iter().all(|x| x.is_nan()),
            "{what}: log past T"
        );
        for rows in 1..=T {
            let want = run(cpu.as_mut(), &d, Kind::Step(rows), None);
            let got = run(cpu.as_mut(), &d, Kind::Replay(rows), Some(&log.log));
            assert!(same_bits(&got.ssm, &want.ssm), "{what}: replay of {rows}");
            assert!(same_bits(&got.o, &want.o), "{what}: replay output {rows}");
        }
    }
}

/// A device backend against the CPU (logging step) and against itself (replay = step).
/// `log_dks`: the head sizes whose logging step the backend has.
fn matches_cpu(be: &mut dyn Backend, label: &str, log_dks: &[usize]) {
    let mut cpu = backend::create("cpu").unwrap();
    for (i, p) in cases().into_iter().enumerate() {
        let d = data(p, 400 + i as u64);
        let what = format!("{label} dk {} {:?}", p.dk, p.head_map);
        let want = run(cpu.as_mut(), &d, Kind::Log, None);
        if log_dks.contains(&p.dk) {
            let got = run(be, &d, Kind::Log, None);
            let e = rel_err(&got.o, &want.o);
            assert!(e <= 1e-5, "{what}: logging step output rel err {e:e}");
            assert!(same_bits(&got.ssm, &d.ssm), "{what}: the state must stay");
            let n = T * p.log_width();
            assert!(same_bits(&got.log[..n], &want.log[..n]), "{what}: log");
        }
        for rows in [1, 3, T] {
            let step = run(be, &d, Kind::Step(rows), None);
            let replay = run(be, &d, Kind::Replay(rows), Some(&want.log));
            assert!(same_bits(&replay.ssm, &step.ssm), "{what}: replay {rows}");
            assert!(
                same_bits(&replay.o, &step.o),
                "{what}: replay {rows} output"
            );
            let cpu_step = run(cpu.as_mut(), &d, Kind::Step(rows), None);
            let e = rel_err(&replay.ssm, &cpu_step.ssm);
            assert!(e <= 1e-5, "{what}: replay {rows} vs CPU rel err {e:e}");
        }
    }
}

#[test]
fn wgpu_log_and_replay_match() {
    use deltaspec::backend::wgpu::{WgpuBackend, WgpuOptions};
    for no_subgroups in [false, true] {
        match WgpuBackend::with_options(WgpuOptions {
            poison: true,
            no_subgroups,
            ..Default::default()
        }) {
            Ok(mut b) => matches_cpu(&mut b, "wgpu", &[16, 64, 128]),
            Err(e) => eprintln!("skipped: no wgpu adapter ({e})"),
        }
    }
}

#[test]
fn hip_log_and_replay_match() {
    use deltaspec::backend::hip::{HipBackend, Which};
    match HipBackend::open(Which::Any) {
        Ok(mut b) => {
            b.set_poison(true);
            matches_cpu(&mut b, "hip", &[16, 64, 128])
        }
        Err(e) => {
            if std::env::var("DELTASPEC_REQUIRE_GPU").is_ok_and(|v| v == "1") {
                panic!("hip backend unavailable but DELTASPEC_REQUIRE_GPU=1: {e}");
            }
            eprintln!("SKIP: hip backend unavailable: {e}")
        }
    }
}
