//! Kernel benchmarks on any backend: quantized matmul at the 27B shapes for N = 1..64 rows (the
//! decode and verify widths), the gated delta net and decode attention.
//!
//! `DELTASPEC_BENCH_BACKEND=hip:cuda cargo bench --bench kernels -- matmul/IQ4_XS` (default `cpu`).
//! Matmul throughput is reported in weight bytes per second: compare with `deltaspec bench bandwidth`.
//! wgpu takes int8 activations for N ≤ 64 over Q8_0/Q4_K/Q5_K/Q6_K/IQ4_XS by default:
//! `DELTASPEC_BENCH_BACKEND=wgpu:f32` (or `DELTASPEC_WGPU_MATMUL=f32`) measures the f32 path; the
//! group name says which (`matmul[wgpu (…, int8 activations)]`).

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use deltaspec::backend::{self, Backend, HostData, HostTensor, StateDecl, WeightStore};
use deltaspec::graph::{AttnParams, GdnParams, GraphBuilder, HeadMap};
use deltaspec::model::synth::random_weight;
use deltaspec::tensor::DType;
use deltaspec::util::rng::Rng;
use std::time::Duration;

fn backend() -> Box<dyn Backend> {
    let name = std::env::var("DELTASPEC_BENCH_BACKEND").unwrap_or_else(|_| "cpu".into());
    backend::create(&name).unwrap_or_else(|e| panic!("backend {name}: {e}"))
}

/// (out rows M, in columns K): ffn gate/up, ffn down, GDN qkv.
const SHAPES: &[(usize, usize)] = &[(17408, 5120), (5120, 17408), (10240, 5120)];
const TYPES: &[DType] = &[
    DType::Q8_0,
    DType::Q4K,
    DType::Q5K,
    DType::Q6K,
    DType::Iq4Xs,
    DType::F16,
];
const ROWS: &[usize] = &[1, 4, 8, 16, 32, 64];

fn matmul(c: &mut Criterion) {
    let mut be = backend();
    let mut group = c.benchmark_group(format!("matmul[{}]", be.name()));
    group
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
        .sample_size(10);
    for &dtype in TYPES {
        for &(m, k) in SHAPES {
            let bytes = random_weight(dtype, m, k, 0.01, 7).expect("whole blocks");
            let mut ws = WeightStore::default();
            ws.insert("w", HostTensor::from_bytes(dtype, &[m, k], bytes));
            let wid = be.upload_weights(&ws).expect("upload");
            let sid = be.alloc_states(&[]).expect("states");
            for &n in ROWS {
                let mut b = GraphBuilder::new();
                let x = b.input("x", DType::F32, &[n, k]).unwrap();
                let w = b.weight("w", dtype, &[m, k]).unwrap();
                let y = b.matmul(x, w).unwrap();
                let am = b.argmax(y).unwrap();
                b.output("argmax", am).unwrap();
                let exe = be.compile(&b.build()).expect("compile");
                let xs = HostData::F32(Rng::new(n as u64).vec_normal(n * k, 1.0));
                group.throughput(Throughput::Bytes(ws.total_bytes() as u64));
                group.bench_function(format!("{dtype}/{m}x{k}/n{n}"), |bench| {
                    bench.iter(|| be.run(exe, wid, sid, &[("x", xs.clone())]).expect("run"))
                });
            }
        }
    }
    group.finish();
}

fn recurrent(c: &mut Criterion) {
    let mut be = backend();
    let mut group = c.benchmark_group(format!("mixers[{}]", be.name()));
    group
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
        .sample_size(10);
    let mut rng = Rng::new(3);
    // Gated delta net at 27B shapes (nk 16, nv 48, dk = dv = 128), T = 1 and 16.
    let p = GdnParams {
        nk: 16,
        nv: 48,
        dk: 128,
        dv: 128,
        head_map: HeadMap::Tiled,
        l2_eps: 1e-6,
    };
    let mut ws = WeightStore::default();
    ws.insert("a", HostTensor::from_f32(&[p.nv], &vec![-1.0; p.nv]));
    ws.insert("dt", HostTensor::from_f32(&[p.nv], &vec![1.0; p.nv]));
    let wid = be.upload_weights(&ws).unwrap();
    let sid = be
        .alloc_states(&[StateDecl::new("s", &[p.nv, p.dk, p.dv])])
        .unwrap();
    for t in [1usize, 16] {
        let mut b = GraphBuilder::new();
        let qkv = b.input("qkv", DType::F32, &[t, p.conv_dim()]).unwrap();
        let beta = b.input("b", DType::F32, &[t, p.nv]).unwrap();
        let alpha = b.input("al", DType::F32, &[t, p.nv]).unwrap();
        let a = b.weight("a", DType::F32, &[p.nv]).unwrap();
        let dt = b.weight("dt", DType::F32, &[p.nv]).unwrap();
        let s = b.state("s", &[p.nv, p.dk, p.dv]).unwrap();
        let o = b.gated_delta_net(p, qkv, beta, alpha, a, dt, s).unwrap();
        let flat = b.reshape(o, &[t, p.nv * p.dv]).unwrap();
        let r = b.rows(flat, 0, 1).unwrap();
        b.output("o", r).unwrap();
        let exe = be.compile(&b.build()).unwrap();
        let ins = [
            ("qkv", HostData::F32(rng.vec_normal(t * p.conv_dim(), 1.0))),
            ("b", HostData::F32(rng.vec_normal(t * p.nv, 1.0))),
            ("al", HostData::F32(rng.vec_normal(t * p.nv, 1.0))),
        ];
        group.bench_function(format!("gated_delta_net/t{t}"), |bench| {
            bench.iter(|| be.run(exe, wid, sid, &ins).unwrap())
        });
    }
    // Decode attention (24 q / 4 kv heads × 256) over 1024 and 4096 cached positions.
    for ctx in [1024usize, 4096] {
        let p = AttnParams {
            n_heads: 24,
            n_kv_heads: 4,
            head_dim: 256,
            scale: 1.0 / 16.0,
        };
        let sid = be
            .alloc_states(&[
                StateDecl::new("k", &[ctx, 4, 256]),
                StateDecl::new("v", &[ctx, 4, 256]),
            ])
            .unwrap();
        let mut b = GraphBuilder::new();
        let q = b.input("q", DType::F32, &[1, 24, 256]).unwrap();
        let k = b.input("kn", DType::F32, &[1, 4, 256]).unwrap();
        let v = b.input("vn", DType::F32, &[1, 4, 256]).unwrap();
        let pos = b.input("pos", DType::I32, &[1]).unwrap();
        let kc = b.state("k", &[ctx, 4, 256]).unwrap();
        let vc = b.state("v", &[ctx, 4, 256]).unwrap();
        let o = b.attention(p, q, k, v, pos, kc, vc).unwrap();
        b.output("o", o).unwrap();
        let exe = be.compile(&b.build()).unwrap();
        let ins = [
            ("q", HostData::F32(rng.vec_normal(24 * 256, 1.0))),
            ("kn", HostData::F32(rng.vec_normal(4 * 256, 1.0))),
            ("vn", HostData::F32(rng.vec_normal(4 * 256, 1.0))),
            ("pos", HostData::I32(vec![ctx as i32 - 1])),
        ];
        group.bench_function(format!("attention_decode/ctx{ctx}"), |bench| {
            bench.iter(|| be.run(exe, wid, sid, &ins).unwrap())
        });
    }
    group.finish();
}

criterion_group!(benches, matmul, recurrent);
criterion_main!(benches);
