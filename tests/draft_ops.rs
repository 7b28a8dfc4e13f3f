//! `AttentionNonCausal` (the DFlash drafter's block attention) on the CPU backend against a
//! naive f64 reference: context rows written by one run, block rows by the next, every query
//! seeing all rows up to the largest position, with and without a bidirectional window.

use deltaspec::backend::{self, HostData, StateDecl, WeightStore};
use deltaspec::graph::{AttnParams, GraphBuilder};
use deltaspec::tensor::DType;
use deltaspec::util::rng::Rng;

const NH: usize = 4;
const NKV: usize = 2;
const HD: usize = 8;
const CAP: usize = 16;

fn graph(t: usize, window: usize) -> deltaspec::graph::Graph {
    let p = AttnParams {
        n_heads: NH,
        n_kv_heads: NKV,
        head_dim: HD,
        scale: 1.0 / (HD as f32).sqrt(),
    };
    let mut b = GraphBuilder::new();
    let q = b.input("q", DType::F32, &[t, NH, HD]).unwrap();
    let k = b.input("k", DType::F32, &[t, NKV, HD]).unwrap();
    let v = b.input("v", DType::F32, &[t, NKV, HD]).unwrap();
    let pos = b.input("pos", DType::I32, &[t]).unwrap();
    let kc = b.state("kc", &[CAP, NKV, HD]).unwrap();
    let vc = b.state("vc", &[CAP, NKV, HD]).unwrap();
    let o = b
        .attention_non_causal(p, window, q, k, v, pos, kc, vc)
        .unwrap();
    b.output("o", o).unwrap();
    b.build()
}

/// Naive reference: all rows `0 ..= max(pos)` (within the window) for every query.
fn reference(q: &[f32], pos: &[i32], kc: &[f32], vc: &[f32], window: usize) -> Vec<f32> {
    let t = pos.len();
    let maxp = *pos.iter().max().unwrap() as usize;
    let mut out = vec![0.0f32; t * NH * HD];
    for ti in 0..t {
        let p = pos[ti] as usize;
        for h in 0..NH {
            let kvh = h / (NH / NKV);
            let qv = &q[(ti * NH + h) * HD..][..HD];
            let rows: Vec<usize> = (0..=maxp)
                .filter(|&j| window == 0 || p.abs_diff(j) <= window)
                .collect();
            let s: Vec<f64> = rows
                .iter()
                .map(|&j| {
                    let kr = &kc[(j * NKV + kvh) * HD..][..HD];
                    qv.iter()
                        .zip(kr)
                        .map(|(a, b)| *a as f64 * *b as f64)
                        .sum::<f64>()
                        / (HD as f64).sqrt()
                })
                .collect();
            let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let e: Vec<f64> = s.iter().map(|x| (x - m).exp()).collect();
            let z: f64 = e.iter().sum();
            for d in 0..HD {
                let acc: f64 = rows
                    .iter()
                    .zip(&e)
                    .map(|(&j, w)| w / z * vc[(j * NKV + kvh) * HD + d] as f64)
                    .sum();
                out[(ti * NH + h) * HD + d] = acc as f32;
            }
        }
    }
    out
}

#[test]
fn non_causal_attention_matches_reference() {
    for window in [0usize, 2] {
        let mut rng = Rng::new(7 + window as u64);
        let mut be = backend::create("cpu").unwrap();
        let w = be.upload_weights(&WeightStore::default()).unwrap();
        let s = be
            .alloc_states(&[
                StateDecl::new("kc", &[CAP, NKV, HD]),
                StateDecl::new("vc", &[CAP, NKV, HD]),
            ])
            .unwrap();
        // Round 1: 5 context rows at 0..5 (queries unused), round 2: a block of 4 at 5..9.
        for (start, t) in [(0usize, 5usize), (5, 4)] {
            let g = graph(t, window);
            let e = be.compile(&g).unwrap();
            let q = rng.vec_normal(t * NH * HD, 1.0);
            let k = rng.vec_normal(t * NKV * HD, 1.0);
            let v = rng.vec_normal(t * NKV * HD, 1.0);
            let pos: Vec<i32> = (start..start + t).map(|p| p as i32).collect();
            let out = be
                .run(
                    e,
                    w,
                    s,
                    &[
                        ("q", HostData::F32(q.clone())),
                        ("k", HostData::F32(k)),
                        ("v", HostData::F32(v)),
                        ("pos", HostData::I32(pos.clone())),
                    ],
                )
                .unwrap();
            let got = out[0].1.to_f32().unwrap();
            let kc = be.read_state(s, "kc").unwrap();
            let vc = be.read_state(s, "vc").unwrap();
            let want = reference(&q, &pos, &kc, &vc, window);
            let err = got
                .iter()
                .zip(&want)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0f32, f32::max);
            assert!(
                err < 1e-5,
                "window {window} start {start}: max abs err {err}"
            );
        }
    }
}

#[test]
fn non_causal_attention_rejects_positions_past_the_cache() {
    let mut be = backend::create("cpu").unwrap();
    let w = be.upload_weights(&WeightStore::default()).unwrap();
    let s = be
        .alloc_states(&[
            StateDecl::new("kc", &[CAP, NKV, HD]),
            StateDecl::new("vc", &[CAP, NKV, HD]),
        ])
        .unwrap();
    let e = be.compile(&graph(1, 0)).unwrap();
    let err = be
        .run(
            e,
            w,
            s,
            &[
                ("q", HostData::F32(vec![0.0; NH * HD])),
                ("k", HostData::F32(vec![0.0; NKV * HD])),
                ("v", HostData::F32(vec![0.0; NKV * HD])),
                ("pos", HostData::I32(vec![CAP as i32])),
            ],
        )
        .unwrap_err();
    assert!(err.to_string().contains("outside the cache"), "{err}");
}
