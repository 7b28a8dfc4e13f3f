//! DFlash2 ops: the dynamic conv, the candidate selector (the library's selector subgraph: lm_head,
//! top-k, codebook gathers and the walk) and row concatenation, each against a direct CPU
//! implementation of the formula in drafters.md §4 written here independently; then the same
//! graphs on wgpu and hip against the CPU backend (skipped, printing why, where a backend is
//! unavailable; hip runs without a GPU through the CUDA-driver emulator, see
//! tools/device/build_emu.sh).

mod common;

use common::rel_err;
use deltaspec::backend::{self, Backend, HostData, HostTensor, WeightStore};
use deltaspec::graph::{Graph, GraphBuilder};
use deltaspec::model::draft::dflash2::selector;
use deltaspec::model::draft::names;
use deltaspec::tensor::{DType, quant};
use deltaspec::util::rng::Rng;

struct Case {
    g: Graph,
    w: WeightStore,
    inputs: Vec<(String, HostData)>,
}

type Outs = Vec<(String, HostTensor)>;

fn run(be: &mut dyn Backend, c: &Case) -> Outs {
    let w = be.upload_weights(&c.w).expect("upload");
    let s = be.alloc_states(&[]).expect("states");
    let e = be.compile(&c.g).expect("compile");
    let inputs: Vec<(&str, HostData)> = c
        .inputs
        .iter()
        .map(|(n, d)| (n.as_str(), d.clone()))
        .collect();
    be.run(e, w, s, &inputs).expect("run")
}

fn cpu(c: &Case) -> Outs {
    run(backend::create("cpu").unwrap().as_mut(), c)
}

fn out<'a>(o: &'a Outs, name: &str) -> &'a HostTensor {
    &o.iter().find(|(n, _)| n == name).expect(name).1
}

fn f32_weight(rng: &mut Rng, dtype: DType, shape: &[usize], scale: f32) -> (HostTensor, Vec<f32>) {
    let n: usize = shape.iter().product();
    let v = rng.vec_normal(n, scale);
    let bytes = quant::quantize(dtype, &v).unwrap();
    let back = quant::dequantize(dtype, &bytes, n).unwrap();
    (HostTensor::from_bytes(dtype, shape, bytes), back)
}

// ---------------------------------------------------------------------------------------------
// Dynamic conv

struct ConvData {
    t: usize,
    ch: usize,
    k: usize,
    block: usize,
    group: usize,
    x: Vec<f32>,
    base: Vec<f32>,
    dynk: Vec<f32>,
}

fn conv_case(
    seed: u64,
    t: usize,
    ch: usize,
    k: usize,
    block: usize,
    group: usize,
) -> (Case, ConvData) {
    let mut rng = Rng::new(seed);
    let g = ch / group;
    let x = rng.vec_normal(t * ch, 1.0);
    let dynk = rng.vec_normal(t * 2 * k * g, 0.5);
    let (bt, base) = f32_weight(&mut rng, DType::F32, &[2, k, ch], 0.7);
    let mut b = GraphBuilder::new();
    let xi = b.input("x", DType::F32, &[t, ch]).unwrap();
    let bw = b.weight("base", DType::F32, &[2, k, ch]).unwrap();
    let di = b.input("dyn", DType::F32, &[t, 2 * k * g]).unwrap();
    for side in 0..2 {
        let y = b.dyn_conv(xi, bw, di, side, block, group).unwrap();
        b.output(&format!("y{side}"), y).unwrap();
    }
    let mut w = WeightStore::default();
    w.insert("base", bt);
    let case = Case {
        g: b.build(),
        w,
        inputs: vec![
            ("x".into(), HostData::F32(x.clone())),
            ("dyn".into(), HostData::F32(dynk.clone())),
        ],
    };
    let d = ConvData {
        t,
        ch,
        k,
        block,
        group,
        x,
        base,
        dynk,
    };
    (case, d)
}

/// drafters.md §4.2 as written: `dyn` viewed as `[rows, 2 sides, K taps, G groups]`,
/// `coef[s][t][c](i) = base[s][t][c] + dyn[i][s][t][c / group]`,
/// `conv_s(x)[i, c] = Σ_t coef[s][t][c](i) · x[i − t, c]` with x before the block start = 0.
fn conv_direct(d: &ConvData, side: usize) -> Vec<f32> {
    let g = d.ch / d.group;
    let dyn_at =
        |i: usize, s: usize, t: usize, grp: usize| d.dynk[((i * 2 + s) * d.k + t) * g + grp];
    let base_at = |s: usize, t: usize, c: usize| d.base[(s * d.k + t) * d.ch + c];
    let mut y = vec![0.0f32; d.t * d.ch];
    for i in 0..d.t {
        let block_start = i / d.block * d.block;
        for c in 0..d.ch {
            let mut acc = 0.0f64;
            for t in 0..d.k {
                if i < block_start + t {
                    continue; // x[i − t] lies before the block: zero
                }
                let coef = base_at(side, t, c) + dyn_at(i, side, t, c / d.group);
                acc += coef as f64 * d.x[(i - t) * d.ch + c] as f64;
            }
            y[i * d.ch + c] = acc as f32;
        }
    }
    y
}

fn conv_cases() -> Vec<(Case, ConvData)> {
    vec![
        // Qwen3.8 DFlash2 layout (K = 2, groups of 16), three blocks of 8.
        conv_case(1, 24, 64, 2, 8, 16),
        // Odd sizes: blocks of 5, 3 taps, groups of 3 over 21 channels.
        conv_case(2, 15, 21, 3, 5, 3),
        // One row per block: only tap 0 applies.
        conv_case(3, 4, 16, 2, 1, 16),
    ]
}

#[test]
fn dyn_conv_matches_the_formula() {
    for (case, d) in conv_cases() {
        let o = cpu(&case);
        for side in 0..2 {
            let got = out(&o, &format!("y{side}")).to_f32().unwrap();
            let want = conv_direct(&d, side);
            let e = rel_err(&got, &want);
            eprintln!(
                "dyn_conv t={} ch={} k={} block={} side={side}: rel err {e:.2e}",
                d.t, d.ch, d.k, d.block
            );
            assert!(e < 1e-6, "side {side}: {e}");
        }
    }
}

#[test]
fn dyn_conv_rejects_bad_shapes() {
    let mut b = GraphBuilder::new();
    let x = b.input("x", DType::F32, &[10, 48]).unwrap();
    let base = b.weight("base", DType::F32, &[2, 2, 48]).unwrap();
    let d = b.input("d", DType::F32, &[10, 12]).unwrap();
    assert!(b.dyn_conv(x, base, d, 0, 5, 16).is_ok());
    assert!(
        b.dyn_conv(x, base, d, 0, 4, 16).is_err(),
        "10 rows, blocks of 4"
    );
    assert!(
        b.dyn_conv(x, base, d, 0, 5, 7).is_err(),
        "48 channels, groups of 7"
    );
    assert!(b.dyn_conv(x, base, d, 2, 5, 16).is_err(), "side 2 of 2");
    let bad = b.input("bad", DType::F32, &[10, 11]).unwrap();
    assert!(b.dyn_conv(x, base, bad, 0, 5, 16).is_err(), "dyn width");
    let half = b.weight("half", DType::F16, &[2, 2, 48]).unwrap();
    assert!(
        b.dyn_conv(x, half, d, 0, 5, 16).is_err(),
        "base must be F32"
    );
}

// ---------------------------------------------------------------------------------------------
// Candidate selector

struct SelData {
    n: usize,
    l: usize,
    h: usize,
    vocab: usize,
    r: usize,
    k: usize,
    hidden: Vec<f32>,
    lm: Vec<f32>,
    hproj: Vec<f32>,
    pred: Vec<f32>,
    succ: Vec<f32>,
    seeds: Vec<i32>,
}

#[allow(clippy::too_many_arguments)]
fn sel_case(
    seed: u64,
    n: usize,
    l: usize,
    h: usize,
    vocab: usize,
    r: usize,
    k: usize,
    cb: DType,
) -> (Case, SelData) {
    let mut rng = Rng::new(seed);
    let hidden = rng.vec_normal(n * l * h, 1.0);
    let (lm_t, lm) = f32_weight(&mut rng, DType::F32, &[vocab, h], 0.3);
    let (hp_t, hproj) = f32_weight(&mut rng, DType::F32, &[r, h], 0.5);
    let (pred_t, pred) = f32_weight(&mut rng, cb, &[vocab, r], 0.8);
    let (succ_t, succ) = f32_weight(&mut rng, cb, &[vocab, r], 0.8);
    let seeds: Vec<i32> = (0..n).map(|_| rng.below(vocab) as i32).collect();
    let mut b = GraphBuilder::new();
    let hi = b.input("hidden", DType::F32, &[n * l, h]).unwrap();
    let si = b.input("seed", DType::I32, &[n]).unwrap();
    let mut w = WeightStore::default();
    w.insert(names::OUTPUT, lm_t);
    w.insert(names::SELECTOR_HPROJ, hp_t);
    w.insert(names::SELECTOR_PRED, pred_t);
    w.insert(names::SELECTOR_SUCC, succ_t);
    let s = selector(&mut b, &w, hi, si, l, k).unwrap();
    b.output("tokens", s.tokens).unwrap();
    b.output("scores", s.scores).unwrap();
    b.output("cand", s.cand).unwrap();
    let case = Case {
        g: b.build(),
        w,
        inputs: vec![
            ("hidden".into(), HostData::F32(hidden.clone())),
            ("seed".into(), HostData::I32(seeds.clone())),
        ],
    };
    let d = SelData {
        n,
        l,
        h,
        vocab,
        r,
        k,
        hidden,
        lm,
        hproj,
        pred,
        succ,
        seeds,
    };
    (case, d)
}

/// drafters.md §4.3 as written, in f64: `unary, cand = topk(lm_head(hidden_l), k)`,
/// `hp_l = hidden_projection · hidden_l`,
/// `score(l, prev, c) = unary[l, c] + Σ_r pred[prev][r] · hp_l[r] · succ[cand[l, c]][r]`,
/// `prev_0 = seed`, `proposal_l = argmax_c score(l, proposal_{l−1}, c)`.
/// Returns (proposals, scores, plain argmax of the logits).
fn sel_direct(d: &SelData) -> (Vec<i32>, Vec<f32>, Vec<i32>) {
    let (mut toks, mut scores, mut plain) = (Vec::new(), Vec::new(), Vec::new());
    for n in 0..d.n {
        let mut prev = d.seeds[n] as usize;
        for l in 0..d.l {
            let hid = &d.hidden[(n * d.l + l) * d.h..][..d.h];
            let logits: Vec<f64> = (0..d.vocab)
                .map(|v| {
                    (0..d.h)
                        .map(|j| d.lm[v * d.h + j] as f64 * hid[j] as f64)
                        .sum()
                })
                .collect();
            let mut order: Vec<usize> = (0..d.vocab).collect();
            order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]).then(a.cmp(&b)));
            plain.push(order[0] as i32);
            let hp: Vec<f64> = (0..d.r)
                .map(|i| {
                    (0..d.h)
                        .map(|j| d.hproj[i * d.h + j] as f64 * hid[j] as f64)
                        .sum()
                })
                .collect();
            let sc: Vec<f64> = order[..d.k]
                .iter()
                .map(|&c| {
                    logits[c]
                        + (0..d.r)
                            .map(|i| {
                                d.pred[prev * d.r + i] as f64 * hp[i] * d.succ[c * d.r + i] as f64
                            })
                            .sum::<f64>()
                })
                .collect();
            let best = (0..d.k).fold(0, |b, c| if sc[c] > sc[b] { c } else { b });
            prev = order[best];
            toks.push(prev as i32);
            scores.extend(sc.iter().map(|&v| v as f32));
        }
    }
    (toks, scores, plain)
}

fn sel_cases() -> Vec<(Case, SelData)> {
    vec![
        sel_case(10, 3, 7, 40, 300, 16, 16, DType::F32),
        // Odd sizes, f16 codebooks (gathered through Embed), k = 5.
        sel_case(11, 2, 5, 23, 97, 9, 5, DType::F16),
        sel_case(12, 1, 1, 8, 31, 4, 1, DType::BF16),
        // More candidates than one pass of the wgpu walk scores (16), with a partial last pass.
        sel_case(13, 2, 4, 24, 200, 37, 40, DType::F32),
    ]
}

#[test]
fn selector_matches_the_formula() {
    let mut changed = 0;
    for (case, d) in sel_cases() {
        let o = cpu(&case);
        let (toks, scores, plain) = sel_direct(&d);
        assert_eq!(out(&o, "tokens").to_i32(), toks, "proposals");
        let e = rel_err(&out(&o, "scores").to_f32().unwrap(), &scores);
        eprintln!(
            "selector n={} l={} k={}: tokens equal, scores rel err {e:.2e}",
            d.n, d.l, d.k
        );
        assert!(e < 1e-5, "scores {e}");
        changed += toks.iter().zip(&plain).filter(|(a, b)| a != b).count();
    }
    // The bilinear term must matter on these weights, or the test would not see the walk.
    eprintln!("{changed} proposals differ from the plain argmax");
    assert!(changed > 0, "the selector never changed a proposal");
}

// ---------------------------------------------------------------------------------------------
// Concat

fn concat_case() -> (Case, Vec<f32>) {
    let mut rng = Rng::new(20);
    let mut b = GraphBuilder::new();
    let mut ids = Vec::new();
    let mut inputs = Vec::new();
    let mut all = Vec::new();
    for (i, rows) in [3usize, 1, 5].into_iter().enumerate() {
        let v = rng.vec_normal(rows * 7, 1.0);
        all.extend_from_slice(&v);
        let name = format!("x{i}");
        ids.push(b.input(&name, DType::F32, &[rows, 7]).unwrap());
        inputs.push((name, HostData::F32(v)));
    }
    let y = b.concat(&ids).unwrap();
    b.output("y", y).unwrap();
    let bad = b.input("bad", DType::F32, &[2, 6]).unwrap();
    assert!(b.concat(&[ids[0], bad]).is_err(), "widths differ");
    inputs.push(("bad".into(), HostData::F32(vec![0.0; 12])));
    let case = Case {
        g: b.build(),
        w: WeightStore::default(),
        inputs,
    };
    (case, all)
}

#[test]
fn concat_keeps_rows_in_order() {
    let (case, all) = concat_case();
    assert_eq!(out(&cpu(&case), "y").to_f32().unwrap(), all);
}

// ---------------------------------------------------------------------------------------------
// GPU backends against the CPU backend

fn compare(label: &str, gpu: &mut dyn Backend) {
    let mut cases: Vec<(String, Case)> = Vec::new();
    for (c, d) in conv_cases() {
        cases.push((format!("dyn_conv t={} ch={} k={}", d.t, d.ch, d.k), c));
    }
    for (c, d) in sel_cases() {
        cases.push((format!("selector n={} l={} k={}", d.n, d.l, d.k), c));
    }
    cases.push(("concat".into(), concat_case().0));
    for (what, c) in &cases {
        let want = cpu(c);
        let got = run(gpu, c);
        for ((n, w), (_, g)) in want.iter().zip(&got) {
            if w.dtype == DType::I32 {
                assert_eq!(g.to_i32(), w.to_i32(), "{label} {what}: {n}");
            } else {
                let e = rel_err(&g.to_f32().unwrap(), &w.to_f32().unwrap());
                eprintln!("{label} {what}: {n} rel err {e:.2e}");
                assert!(e < 1e-5, "{label} {what}: {n} rel err {e}");
            }
        }
    }
}

#[test]
fn wgpu_matches_cpu() {
    use deltaspec::backend::wgpu::{WgpuBackend, WgpuOptions};
    match WgpuBackend::with_options(WgpuOptions {
        poison: true,
        // Strict comparison: f32 activations.
        int8_matmul: Some(false),
        ..WgpuOptions::default()
    }) {
        Ok(mut b) => compare("wgpu", &mut b),
        Err(e) => eprintln!("skipped: no wgpu adapter ({e})"),
    }
}

#[test]
fn hip_matches_cpu() {
    use deltaspec::backend::hip::{HipBackend, Which};
    match HipBackend::open(Which::Any) {
        Ok(mut b) => {
            b.set_poison(true);
            compare(&b.name(), &mut b)
        }
        Err(e) => {
            if std::env::var("DELTASPEC_REQUIRE_GPU").is_ok_and(|v| v == "1") {
                panic!("hip backend unavailable but DELTASPEC_REQUIRE_GPU=1: {e}");
            }
            eprintln!("SKIP: hip backend unavailable: {e}")
        }
    }
}
