//! Fused int8 GEMV launches of the hip backend (`src/backend/hip/fused.rs`): a group of
//! matmuls over one input as one `qgemv4_*` launch, gate/up + SwiGLU as one `qgemv_glu_*`, and
//! the attention output gate inside the quantization. Fused runs must equal unfused runs bit for
//! bit (the kernels do the same float operations), agree with the CPU reference on the same
//! int8-rounded activations, and launch fewer kernels.
//!
//! Skips without a GPU; runs on the CPU emulator of the CUDA driver API:
//! `tools/device/build_emu.sh target/libdsemu.so && DELTASPEC_CUDA_LIB=$PWD/target/libdsemu.so
//! cargo test --release --test hip_fused`.

mod common;

use common::{f32s, rel_err};
use deltaspec::backend::hip::{HipBackend, NormQ8, QkPrepMode};
use deltaspec::backend::{self, Backend, HostData, HostTensor, StateDecl, WeightStore};
use deltaspec::graph::{AttnParams, Graph, GraphBuilder, TensorId};
use deltaspec::tensor::{DType, quant};
use deltaspec::util::rng::Rng;

fn gpu(test: &str, fusion: bool) -> Option<HipBackend> {
    let mut b = common::open_hip(test)?;
    b.set_poison(true);
    b.set_int8_matmul(true);
    b.set_fusion(fusion);
    // Replayed graphs issue no counted launches.
    b.set_graphs(false);
    // The dp4a kernels' fusion plan (launch counts below); the matrix-core kernels, on by default
    // on NVIDIA, are compared with these in their own test.
    b.set_qgemv_mma(false);
    Some(b)
}

const INT8_TYPES: &[DType] = &[
    DType::Q8_0,
    DType::Q4K,
    DType::Q5K,
    DType::Q6K,
    DType::Iq4Xs,
];

// Odd row counts per weight.
const M_QKV: [usize; 3] = [37, 19, 5];
const M_FFN: usize = 45;
const M_O: usize = 29;

/// Three projections of `x` (a group), gate/up of `h` with SwiGLU, and `o · sigmoid(g)` (through
/// a head view) into one more matmul: every fusion kind.
fn graph(n: usize, k: usize, dtype: DType) -> Graph {
    let mut b = GraphBuilder::new();
    let x = b.input("x", DType::F32, &[n, k]).unwrap();
    let h = b.input("h", DType::F32, &[n, k]).unwrap();
    let o = b.input("o", DType::F32, &[n, 4, k / 4]).unwrap();
    let g = b.input("g", DType::F32, &[n, 4, k / 4]).unwrap();
    for (i, m) in M_QKV.iter().enumerate() {
        let w = b.weight(&format!("w{i}"), dtype, &[*m, k]).unwrap();
        let y = b.matmul(x, w).unwrap();
        b.output(&format!("y{i}"), y).unwrap();
    }
    let wg = b.weight("gate", dtype, &[M_FFN, k]).unwrap();
    let wu = b.weight("up", dtype, &[M_FFN, k]).unwrap();
    let gate = b.matmul(h, wg).unwrap();
    let up = b.matmul(h, wu).unwrap();
    let s = b.swiglu(gate, up).unwrap();
    b.output("ffn", s).unwrap();
    let gated = b.sigmoid_mul(o, g).unwrap();
    let flat = b.reshape(gated, &[n, k]).unwrap();
    let wo = b.weight("wo", dtype, &[M_O, k]).unwrap();
    let y = b.matmul(flat, wo).unwrap();
    b.output("attn", y).unwrap();
    b.build()
}

fn weights(rng: &mut Rng, dtype: DType, k: usize) -> WeightStore {
    let mut w = WeightStore::default();
    let mut add = |name: &str, m: usize| {
        let v = rng.vec_normal(m * k, 0.5);
        let bytes = quant::quantize(dtype, &v).unwrap();
        w.insert(name, HostTensor::from_bytes(dtype, &[m, k], bytes));
    };
    for (i, m) in M_QKV.iter().enumerate() {
        add(&format!("w{i}"), *m);
    }
    add("gate", M_FFN);
    add("up", M_FFN);
    add("wo", M_O);
    w
}

/// [`graph`] at `n` rows with random weights and inputs (seeded by `n`).
fn random_case(
    n: usize,
    k: usize,
    dtype: DType,
) -> (WeightStore, Graph, Vec<(&'static str, HostData)>) {
    let mut rng = Rng::new(2000 + n as u64);
    let w = weights(&mut rng, dtype, k);
    let inputs = ["x", "h", "o", "g"]
        .into_iter()
        .map(|name| (name, HostData::F32(rng.vec_normal(n * k, 1.0))))
        .collect();
    (w, graph(n, k, dtype), inputs)
}

/// Outputs and kernel launches of one run.
fn run(
    be: &mut dyn Backend,
    count: &dyn Fn() -> u64,
    g: &Graph,
    w: &WeightStore,
    inputs: &[(&str, HostData)],
) -> (Vec<(String, HostTensor)>, u64) {
    let wid = be.upload_weights(w).unwrap();
    let sid = be.alloc_states(&[]).unwrap();
    let e = be.compile(g).unwrap();
    let before = count();
    let out = be.run(e, wid, sid, inputs).unwrap();
    (out, count() - before)
}

/// Every output of `a` is written (finite) and equals the same output of `b` bit for bit.
/// A random `[m, k]` weight of `dtype` named `name` (values N(0, 0.5²)), and graph output `name`
/// = `a` times it.
fn matmul_output(
    b: &mut GraphBuilder,
    w: &mut WeightStore,
    rng: &mut Rng,
    dtype: DType,
    (name, m, k): (&str, usize, usize),
    a: TensorId,
) {
    let v = rng.vec_normal(m * k, 0.5);
    let bytes = quant::quantize(dtype, &v).unwrap();
    w.insert(name, HostTensor::from_bytes(dtype, &[m, k], bytes));
    let wt = b.weight(name, dtype, &[m, k]).unwrap();
    let y = b.matmul(a, wt).unwrap();
    b.output(name, y).unwrap();
}

fn assert_same_bits(what: &str, a: &[(String, HostTensor)], b: &[(String, HostTensor)]) {
    assert_eq!(a.len(), b.len(), "{what}: output count");
    for ((name, a), (_, b)) in a.iter().zip(b) {
        let (a, b) = (f32s(a), f32s(b));
        assert!(
            a.iter().all(|v| v.is_finite()),
            "{what}: {name} not written"
        );
        assert!(
            a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()),
            "{what}: {name} differs (rel err {:.2e})",
            rel_err(&a, &b)
        );
    }
}

#[test]
fn fused_gemv_groups_equal_unfused_and_match_the_cpu() {
    let k = 256; // whole blocks of every type
    for &dtype in INT8_TYPES {
        let (Some(mut on), Some(mut off)) = (gpu("fused", true), gpu("fused", false)) else {
            return;
        };
        let mut cpu = backend::create("cpu").unwrap();
        let (c_on, c_off) = (on.launch_counter(), off.launch_counter());
        for n in [1, 3, 8, 16] {
            let mut rng = Rng::new(1000 + n as u64);
            let w = weights(&mut rng, dtype, k);
            let g = graph(n, k, dtype);
            let vals: Vec<(&str, Vec<f32>)> = ["x", "h", "o", "g"]
                .into_iter()
                .map(|name| (name, rng.vec_normal(n * k, 1.0)))
                .collect();
            let inputs: Vec<(&str, HostData)> = vals
                .iter()
                .map(|(name, v)| (*name, HostData::F32(v.clone())))
                .collect();
            let what = format!("{dtype} n={n}");
            let (fused, l_on) = run(&mut on, &|| c_on.get(), &g, &w, &inputs);
            let (plain, l_off) = run(&mut off, &|| c_off.get(), &g, &w, &inputs);
            assert_same_bits(&format!("{what}: fused vs unfused"), &fused, &plain);
            // Unfused: 3 × (quantize + gemv) reusing one quantization = 4, gate/up 3 + swiglu,
            // sigmoid_mul + quantize + gemv = 3. Fused: 2, 2 (3 at 16 rows: the SwiGLU kernel
            // takes up to 8), 2.
            assert_eq!(l_off, 4 + 4 + 3, "{what}: unfused launches");
            assert_eq!(l_on, if n > 8 { 7 } else { 6 }, "{what}: fused launches");
            // The CPU on the int8-rounded activations the GPU multiplies.
            let gated: Vec<f32> = vals[2]
                .1
                .iter()
                .zip(&vals[3].1)
                .map(|(o, g)| o * (1.0 / (1.0 + (-g).exp())))
                .collect();
            let cpu_in: Vec<(&str, HostData)> = vec![
                (
                    "x",
                    HostData::F32(quant::q8_activation_roundtrip(&vals[0].1)),
                ),
                (
                    "h",
                    HostData::F32(quant::q8_activation_roundtrip(&vals[1].1)),
                ),
                ("o", HostData::F32(quant::q8_activation_roundtrip(&gated))),
                ("g", HostData::F32(vec![30.0; n * k])), // sigmoid(30) = 1 in f32
            ];
            let (want, _) = run(cpu.as_mut(), &|| 0, &g, &w, &cpu_in);
            for ((name, a), (_, b)) in fused.iter().zip(&want) {
                let e = rel_err(&f32s(a), &f32s(b));
                // The host's exp may round a gated value to the other side of an int8 step.
                let tol = if name == "attn" { 1e-3 } else { 1e-4 };
                assert!(e <= tol, "{what}: {name} vs cpu: rel err {e:.2e}");
            }
        }
    }
}

#[test]
fn matrix_core_gemv_equals_the_dp4a_kernel_fused_and_unfused() {
    // `qmma_*` / `qmma4_*` / `qmma_glu_*` (NVIDIA matrix cores, on with set_qgemv_mma) give the
    // unfused dp4a kernels' bits: groups of segments, the gate/up pair with its SwiGLU (one
    // `qmma_glu_*` launch when fused) and the folded output gate. Elsewhere the setting keeps the
    // dp4a kernels and this holds trivially. K = 1280: 40 items per row, so some warps take two
    // chunks of items in one step and all take a single chunk after it.
    let k = 1280;
    for &dtype in INT8_TYPES {
        for fusion in [true, false] {
            let (Some(mut mma), Some(mut dp4a)) = (gpu("qmma", fusion), gpu("qmma", false)) else {
                return;
            };
            mma.set_qgemv_mma(true);
            mma.set_qmmp(false); // 33 rows: the verify tile, not the prefill tile's order
            mma.set_qmma_staged_grid(Some(3));
            dp4a.set_qgemv_mma(false);
            let count = mma.launch_counter();
            let mma_on = mma.matrix_cores();
            for n in [5, 16, 33] {
                let (w, g, inputs) = random_case(n, k, dtype);
                let (b, _) = run(&mut dp4a, &|| 0, &g, &w, &inputs);
                // Plain and fragment-ordered activations (`qmma*f`, quantized by
                // `qmma_quantize[_gate]`), the latter also as `qmma*p`, `qmma*q` and `qmma*w`.
                // And the staged `qmma*t` (IQ4_XS at 8 and 16 rows), 3 blocks walking all tiles.
                for (xl, v2) in [
                    (false, 0),
                    (true, 0),
                    (true, 1),
                    (true, 2),
                    (true, 3),
                    (true, 4),
                ] {
                    mma.set_qmma_xlayout(xl);
                    mma.set_qmma_v2(Some(v2));
                    let (a, launches) = run(&mut mma, &|| count.get(), &g, &w, &inputs);
                    let what = format!(
                        "{dtype} n={n} fusion={fusion} xlayout={xl} v2={v2}: matrix-core vs dp4a"
                    );
                    assert_same_bits(&what, &a, &b);
                    // Fused on the matrix cores: quantize + one launch for each of the three
                    // groups.
                    if fusion && mma_on {
                        assert_eq!(launches, 6, "{what}: fused launches");
                    }
                }
            }
        }
    }
}

#[test]
fn staged_matrix_core_tile_equals_the_dp4a_kernel() {
    // The staged, persistent verify tile (`qmma*t`, IQ4_XS at 8 and 16 rows; see
    // hip/qmma_staged.h) gives the dp4a kernels' bits for every kind (a group of three small
    // matrices sharing a weight panel, the gate/up pair, a single projection), with the grid
    // capped so one block walks every tile (its stage ring wrapping across tiles), with two and
    // three blocks, and uncapped. K = 1280: one full round and a short one (warps past the
    // items skip it); K = 3072: three full rounds.
    for k in [1280, 3072] {
        let (Some(mut mma), Some(mut dp4a)) = (gpu("qmma_t", true), gpu("qmma_t", false)) else {
            return;
        };
        mma.set_qgemv_mma(true);
        mma.set_qmma_v2(Some(4));
        dp4a.set_qgemv_mma(false);
        let count = mma.launch_counter();
        for n in [5, 16] {
            let (w, g, inputs) = random_case(n, k, DType::Iq4Xs);
            let (b, _) = run(&mut dp4a, &|| 0, &g, &w, &inputs);
            for cap in [Some(1), Some(2), Some(3), None] {
                mma.set_qmma_staged_grid(cap);
                let (a, launches) = run(&mut mma, &|| count.get(), &g, &w, &inputs);
                let what = format!("k={k} n={n} grid cap {cap:?}: staged vs dp4a");
                assert_same_bits(&what, &a, &b);
                if mma.matrix_cores() {
                    assert_eq!(launches, 6, "{what}: fused launches");
                }
            }
        }
    }
}

#[test]
fn tiny_model_decode_with_fusion_equals_without_and_launches_less() {
    use deltaspec::model::qwen35::{GraphOptions, LogitRows};
    use deltaspec::model::{Qwen35, Session, synth};
    let (Some(mut on), Some(mut off)) = (gpu("tiny_fused", true), gpu("tiny_fused", false)) else {
        return;
    };
    on.set_norm_q8(NormQ8::All); // the norm + quantize fusion too, on the whole model
    on.set_qk_prep(QkPrepMode::All); // and the attention layers' q/k preparation
    let (c_on, c_off) = (on.launch_counter(), off.launch_counter());
    let dir = std::env::temp_dir().join(format!("deltaspec-hip-fused-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("tiny-q8_0.gguf");
    let recipe = synth::Recipe::Q8_0;
    synth::write(&synth::preset("tiny").unwrap(), recipe, 7, &path).unwrap();
    let model = Qwen35::load(&path).unwrap();
    let vocab = model.cfg.vocab;
    let mut s_on = Session::new(&model, &mut on, 64).unwrap();
    let mut s_off = Session::new(&model, &mut off, 64).unwrap();
    let last = GraphOptions {
        logits: LogitRows::Last,
        argmax: true,
        capture: vec![],
        read_logits: true,
    };
    let all = GraphOptions {
        logits: LogitRows::All,
        argmax: true,
        capture: vec![],
        read_logits: true,
    };
    // Decode steps from an empty context, then a 3-row verify-width step.
    let mut tok = 3u32;
    for step in 0..5 {
        let toks: Vec<u32> = if step == 4 {
            vec![tok, 5, 9]
        } else {
            vec![tok]
        };
        let opts = if step == 4 { &all } else { &last };
        let (a0, b0) = (c_on.get(), c_off.get());
        let a = s_on.forward(&toks, opts).unwrap();
        let b = s_off.forward(&toks, opts).unwrap();
        let (l_on, l_off) = (c_on.get() - a0, c_off.get() - b0);
        let e = rel_err(&a.logits, &b.logits);
        eprintln!("step {step}: launches fused {l_on}, unfused {l_off}; logits rel err {e:.2e}");
        assert!(e <= 1e-6, "step {step}: logits rel err {e:.2e}");
        assert_eq!(a.argmax, b.argmax, "step {step}: argmax");
        assert_eq!(
            common::argmax_rows(&a.logits, vocab),
            a.argmax.iter().map(|&t| t as usize).collect::<Vec<_>>()
        );
        assert!(
            l_on < l_off,
            "step {step}: {l_on} fused launches vs {l_off}"
        );
        tok = a.argmax[a.argmax.len() - 1];
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Two attention epilogues that save launches, each on against off with everything else
/// fused, over decode steps and a 3-row verify-width step (the 4-row dp4a tile), at a context
/// capacity of 1024 rows (four attention splits, so the combine runs): logits equal bit for
/// bit, and the launches saved per attention layer.
/// - The q/k/v group writes the query and gate halves of its first output itself (`QSplit`):
///   two `slice_last` launches less.
/// - The combine writes the gated o_proj's int8 rows (`attn_combine_q8g`): one
///   `quantize_q8_gate` launch less.
///
/// For a type whose 1-row kernels are the portable ones (Q8_0) and one with `1r<R>u<U>`
/// variants on NVIDIA (IQ4_XS).
#[test]
fn attention_epilogues_save_launches_and_keep_the_bits() {
    use deltaspec::model::qwen35::{GraphOptions, LogitRows};
    use deltaspec::model::{LayerKind, Qwen35, Session, synth};
    type Toggle = fn(&mut HipBackend, bool);
    let toggles: [(&str, Toggle, u64); 2] = [
        ("split_out", |b, on| b.set_split_out(on), 2),
        ("combine_q8", |b, on| b.set_combine_q8(on), 1),
    ];
    for (recipe, tag) in [
        (synth::Recipe::Q8_0, "q8_0"),
        (synth::Recipe::Iq4Xs, "iq4_xs"),
    ] {
        let dir = std::env::temp_dir().join(format!("deltaspec-attn-epi-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("tiny-{tag}.gguf"));
        synth::write(&synth::preset("tiny").unwrap(), recipe, 11, &path).unwrap();
        let model = Qwen35::load(&path).unwrap();
        let attn = model
            .cfg
            .layers
            .iter()
            .filter(|k| **k == LayerKind::Attention)
            .count() as u64;
        assert!(attn > 0, "the tiny preset has an attention layer");
        for (name, set, per_layer) in toggles {
            let (Some(mut on), Some(mut off)) = (gpu(name, true), gpu(name, true)) else {
                return;
            };
            set(&mut on, true);
            set(&mut off, false);
            let (c_on, c_off) = (on.launch_counter(), off.launch_counter());
            let mut s_on = Session::new(&model, &mut on, 1024).unwrap();
            let mut s_off = Session::new(&model, &mut off, 1024).unwrap();
            let opts = |logits| GraphOptions {
                logits,
                argmax: true,
                capture: vec![],
                read_logits: true,
            };
            let mut tok = 5u32;
            for step in 0..4 {
                let (toks, o) = if step == 3 {
                    (vec![tok, 7, 2], opts(LogitRows::All))
                } else {
                    (vec![tok], opts(LogitRows::Last))
                };
                let (a0, b0) = (c_on.get(), c_off.get());
                let a = s_on.forward(&toks, &o).unwrap();
                let b = s_off.forward(&toks, &o).unwrap();
                let (l_on, l_off) = (c_on.get() - a0, c_off.get() - b0);
                assert_eq!(a.logits, b.logits, "{tag} {name} step {step}: logits");
                assert_eq!(
                    l_off - l_on,
                    per_layer * attn,
                    "{tag} {name} step {step}: {l_on} vs {l_off} launches"
                );
                tok = a.argmax[a.argmax.len() - 1];
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// The pipelined 1-row IQ4_XS kernels (`qgemv*_1r<R>p<U>`, `qgemv_glu_*_1p<U>`: a stage of
/// weight loads in flight while the previous one is used) and the staged ones
/// (`qgemv*_1t<S>`, `qgemv_glu_*_1t<S>`: rows streamed through S shared-memory stages) equal the
/// default kernels bit for bit on every fusion kind of [`graph`] (single projection, group and
/// pair), for K whose item count is a multiple
/// of a warp's 32 rounds, for K that leaves a partial last round (768: 24 items per row) and for
/// K with more rounds than stages (6144: 6 rounds, each stage refilled); the gate/up pair has
/// 45 rows, so the staged kernels' last block is partial.
#[test]
fn pipelined_one_row_variants_keep_the_bits() {
    use deltaspec::backend::hip::kernels::{Q1, Q1Form, parse_q1};
    let Some(mut base) = gpu("q1_pipe", true) else {
        return;
    };
    let count = base.launch_counter();
    for k in [768, 2048, 6144] {
        let (w, g, inputs) = random_case(1, k, DType::Iq4Xs);
        let (want, _) = run(&mut base, &|| count.get(), &g, &w, &inputs);
        for (plain, glu) in [
            ("r1p1", "p1"),
            ("r1p2", "p2"),
            ("r2p1", "t3"),
            ("t5", "t5"),
            ("t3", "p2"),
        ] {
            let (plain, glu): (Option<Q1>, Option<Q1>) = (parse_q1(plain), parse_q1(glu));
            assert!(plain.is_some_and(|v| v.form != Q1Form::Plain));
            assert!(glu.is_some_and(|v| v.form != Q1Form::Plain));
            let Some(mut be) = gpu("q1_pipe", true) else {
                return;
            };
            be.set_q1(plain, glu);
            let c = be.launch_counter();
            let (got, _) = run(&mut be, &|| c.get(), &g, &w, &inputs);
            assert_same_bits(&format!("k {k} {plain:?} {glu:?}"), &got, &want);
        }
    }
}

/// The staged 1-row kernels everywhere on a model (`DELTASPEC_HIP_Q1=t<S>` with the pair's
/// `t<S>`): decode steps of the tiny IQ4_XS model equal the default kernels' bit for bit, with
/// the same launches, so the grouped form (`qgemv4_*_1t<S>`) keeps the DeltaNet group's folded
/// conv step and the attention group's query/gate halves (either lost would add launches).
#[test]
fn staged_one_row_kernels_keep_a_model_s_bits() {
    use deltaspec::backend::hip::kernels::parse_q1;
    use deltaspec::model::qwen35::{GraphOptions, LogitRows};
    use deltaspec::model::{Qwen35, Session, synth};
    let dir = std::env::temp_dir().join(format!("deltaspec-staged-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("tiny-iq4_xs.gguf");
    synth::write(
        &synth::preset("tiny").unwrap(),
        synth::Recipe::Iq4Xs,
        12,
        &path,
    )
    .unwrap();
    let model = Qwen35::load(&path).unwrap();
    let opts = GraphOptions {
        logits: LogitRows::Last,
        argmax: true,
        capture: vec![],
        read_logits: true,
    };
    let Some(mut base) = gpu("staged_model", true) else {
        return;
    };
    let c_base = base.launch_counter();
    let mut want = Vec::new();
    {
        let mut s = Session::new(&model, &mut base, 64).unwrap();
        let mut tok = 3u32;
        for _ in 0..4 {
            let before = c_base.get();
            let a = s.forward(&[tok], &opts).unwrap();
            tok = a.argmax[0];
            want.push((a.logits, c_base.get() - before));
        }
    }
    for st in ["t3", "t5"] {
        let Some(mut be) = gpu("staged_model", true) else {
            return;
        };
        be.set_q1(parse_q1(st), parse_q1(st));
        let c = be.launch_counter();
        let mut s = Session::new(&model, &mut be, 64).unwrap();
        let mut tok = 3u32;
        for (step, (logits, launches)) in want.iter().enumerate() {
            let before = c.get();
            let a = s.forward(&[tok], &opts).unwrap();
            tok = a.argmax[0];
            assert_eq!(&a.logits, logits, "{st} step {step}: logits");
            assert_eq!(c.get() - before, *launches, "{st} step {step}: launches");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The DeltaNet pattern: a projection group whose first output only feeds a K = 4 conv step. At
/// one input row the conv runs in the group's `qgemv4_*` epilogue (one `conv_step` launch less);
/// the conv output, the other projection and the conv state equal the unfused run bit for bit
/// over a sequence of 1- and 3-row calls (the state carries between them; 3 rows keep the
/// `conv_step` launch).
#[test]
fn conv_step_folds_into_the_one_row_projection_group() {
    let (k, c) = (256, 37); // odd channel count: a warp's second row past the end
    for &dtype in &[DType::Q8_0, DType::Iq4Xs] {
        let (Some(mut on), Some(mut off)) = (gpu("conv_fold", true), gpu("conv_fold", false))
        else {
            return;
        };
        let Some(mut nofold) = gpu("conv_fold_off", true) else {
            return;
        };
        nofold.set_conv_fold(false);
        let counters = [
            on.launch_counter(),
            off.launch_counter(),
            nofold.launch_counter(),
        ];
        let mut rng = Rng::new(4242);
        let mut w = WeightStore::default();
        for (name, m) in [("wqkv", c), ("wz", 19)] {
            let v = rng.vec_normal(m * k, 0.5);
            let bytes = quant::quantize(dtype, &v).unwrap();
            w.insert(name, HostTensor::from_bytes(dtype, &[m, k], bytes));
        }
        w.insert(
            "taps",
            HostTensor::from_f32(&[c, 4], &rng.vec_normal(c * 4, 0.5)),
        );
        let decls = [StateDecl::new("st", &[3, c])];
        let graph = |n: usize| {
            let mut b = GraphBuilder::new();
            let x = b.input("x", DType::F32, &[n, k]).unwrap();
            let wq = b.weight("wqkv", dtype, &[c, k]).unwrap();
            let wz = b.weight("wz", dtype, &[19, k]).unwrap();
            let taps = b.weight("taps", DType::F32, &[c, 4]).unwrap();
            let st = b.state("st", &[3, c]).unwrap();
            let qkv = b.matmul(x, wq).unwrap();
            let z = b.matmul(x, wz).unwrap();
            let y = b.conv_step(qkv, taps, st).unwrap();
            b.output("conv", y).unwrap();
            b.output("z", z).unwrap();
            b.build()
        };
        let steps = [1, 1, 3, 1, 1];
        let xs: Vec<Vec<f32>> = steps.iter().map(|&n| rng.vec_normal(n * k, 1.0)).collect();
        // Per backend: every step's outputs and state, and its launches.
        let mut runs = Vec::new();
        for (be, count) in [&mut on, &mut off, &mut nofold].into_iter().zip(&counters) {
            let wid = be.upload_weights(&w).unwrap();
            let sid = be.alloc_states(&decls).unwrap();
            let mut got = Vec::new();
            for (&n, x) in steps.iter().zip(&xs) {
                let e = be.compile(&graph(n)).unwrap();
                let before = count.get();
                let mut out = be
                    .run(e, wid, sid, &[("x", HostData::F32(x.clone()))])
                    .unwrap();
                let launches = count.get() - before;
                let st = be.read_state(sid, "st").unwrap();
                out.push(("st".into(), HostTensor::from_f32(&[3, c], &st)));
                got.push((n, out, launches));
            }
            runs.push(got);
        }
        for (i, ((n, fold, l_fold), ((_, plain, _), (_, unfolded, l_unfolded)))) in
            runs[0].iter().zip(runs[1].iter().zip(&runs[2])).enumerate()
        {
            let what = format!("{dtype} step {i} ({n} rows)");
            assert_same_bits(&format!("{what}: folded vs unfused"), fold, plain);
            assert_same_bits(&format!("{what}: folded vs fused unfolded"), fold, unfolded);
            // Fused: quantize + qgemv4 (+ conv_step unless folded).
            assert_eq!(*l_unfolded, 3, "{what}: launches without the fold");
            assert_eq!(*l_fold, if *n == 1 { 2 } else { 3 }, "{what}: launches");
        }
    }
}

/// An attention layer's q/k preparation (`set_qk_prep`): `RmsNorm` → `Rope` of the queries and
/// of the keys and the cache write run as one `qk_prep` launch. The attention output and both
/// caches equal the unfused run bit for bit over a prefill and decode steps, at head sizes of the
/// norms' 1- and 2-pass warp forms with partial rotation; four launches go. The same for the
/// drafters' non-causal attention (a block attending to itself and the cached rows) and for a
/// verify tree (rope positions by depth, cache rows consecutive, siblings masked). A node
/// whose output nothing reads (a drafter's context append: raw queries, run for its cache
/// writes) prepares its keys alone (`QkPrepMode::KeysOnly`): the caches equal, two launches go.
#[test]
fn qk_preparation_runs_as_one_launch() {
    #[derive(Clone, Copy, Debug, PartialEq)]
    enum Kind {
        Causal,
        NonCausal,
        Tree,
        KeysOnly,
    }
    let cases = [
        (64, 16, Kind::Causal),
        (256, 64, Kind::Causal),
        (64, 16, Kind::NonCausal),
        (64, 16, Kind::Tree),
        (64, 16, Kind::KeysOnly),
        (128, 64, Kind::KeysOnly),
    ];
    for (hd, rot, kind) in cases {
        let keys_only = kind == Kind::KeysOnly;
        let (Some(mut on), Some(mut off)) = (gpu("qk_prep", true), gpu("qk_prep", true)) else {
            return;
        };
        on.set_qk_prep(if keys_only {
            QkPrepMode::KeysOnly
        } else {
            QkPrepMode::All
        });
        off.set_qk_prep(QkPrepMode::Off);
        let (nh, nkv, cap) = (4, 2, 16);
        let p = AttnParams {
            n_heads: nh,
            n_kv_heads: nkv,
            head_dim: hd,
            scale: 1.0 / (hd as f32).sqrt(),
        };
        let mut rng = Rng::new(hd as u64);
        let mut w = WeightStore::default();
        for name in ["qn", "kn"] {
            w.insert(name, HostTensor::from_f32(&[hd], &rng.vec_normal(hd, 1.0)));
        }
        let decls = [
            StateDecl::new("kc", &[cap, nkv, hd]),
            StateDecl::new("vc", &[cap, nkv, hd]),
        ];
        let graph = |t: usize| {
            let mut b = GraphBuilder::new();
            let q = b.input("q", DType::F32, &[t, nh, hd]).unwrap();
            let k = b.input("k", DType::F32, &[t, nkv, hd]).unwrap();
            let v = b.input("v", DType::F32, &[t, nkv, hd]).unwrap();
            let pos = b.input("pos", DType::I32, &[t]).unwrap();
            // A tree's rope positions (depths) differ from its cache rows (`pos`).
            let rp = if kind == Kind::Tree {
                b.input("rp", DType::I32, &[t]).unwrap()
            } else {
                pos
            };
            let (qn, kn) = (
                b.weight("qn", DType::F32, &[hd]).unwrap(),
                b.weight("kn", DType::F32, &[hd]).unwrap(),
            );
            let kc = b.state("kc", &[cap, nkv, hd]).unwrap();
            let vc = b.state("vc", &[cap, nkv, hd]).unwrap();
            let q = if keys_only {
                q
            } else {
                let q = b.rms_norm(q, qn, 1e-6).unwrap();
                b.rope(q, rp, rot, 10000.0).unwrap()
            };
            let k = b.rms_norm(k, kn, 1e-6).unwrap();
            let k = b.rope(k, rp, rot, 10000.0).unwrap();
            let o = match kind {
                Kind::Causal => b.attention(p, q, k, v, pos, kc, vc).unwrap(),
                Kind::Tree => {
                    let mask = b.input("mask", DType::I32, &[t, t]).unwrap();
                    b.attention_tree(p, q, k, v, pos, mask, kc, vc).unwrap()
                }
                _ => b.attention_non_causal(p, 0, q, k, v, pos, kc, vc).unwrap(),
            };
            if !keys_only {
                b.output("o", o).unwrap();
            }
            b.build()
        };
        let steps: [&[i32]; 3] = [&[0, 1, 2], &[3], &[4]];
        let inputs: Vec<Vec<(&str, HostData)>> = steps
            .iter()
            .map(|pos| {
                let t = pos.len();
                let mut inp = vec![
                    ("q", HostData::F32(rng.vec_normal(t * nh * hd, 1.0))),
                    ("k", HostData::F32(rng.vec_normal(t * nkv * hd, 1.0))),
                    ("v", HostData::F32(rng.vec_normal(t * nkv * hd, 1.0))),
                    ("pos", HostData::I32(pos.to_vec())),
                ];
                if kind == Kind::Tree {
                    // A root and two siblings (depth 1) after the committed rows.
                    let (rp, mask) = if t == 3 {
                        (
                            vec![pos[0], pos[0] + 1, pos[0] + 1],
                            vec![1, 0, 0, 1, 1, 0, 1, 0, 1],
                        )
                    } else {
                        (pos.to_vec(), vec![1; t * t])
                    };
                    inp.push(("rp", HostData::I32(rp)));
                    inp.push(("mask", HostData::I32(mask)));
                }
                inp
            })
            .collect();
        let counters = [on.launch_counter(), off.launch_counter()];
        let mut runs = Vec::new();
        for (be, count) in [&mut on, &mut off].into_iter().zip(&counters) {
            let wid = be.upload_weights(&w).unwrap();
            let sid = be.alloc_states(&decls).unwrap();
            let mut got = Vec::new();
            for (pos, inp) in steps.iter().zip(&inputs) {
                let e = be.compile(&graph(pos.len())).unwrap();
                let before = count.get();
                let mut out = be.run(e, wid, sid, inp).unwrap();
                let launches = count.get() - before;
                for st in ["kc", "vc"] {
                    let v = be.read_state(sid, st).unwrap();
                    out.push((st.into(), HostTensor::from_f32(&[cap, nkv, hd], &v)));
                }
                got.push((out, launches));
            }
            runs.push(got);
        }
        for (i, ((a, l_on), (b, l_off))) in runs[0].iter().zip(&runs[1]).enumerate() {
            let what = format!("hd {hd} {kind:?} step {i}");
            // Unwritten cache rows are poisoned alike on both sides: compare the written ones.
            let written = |v: &[(String, HostTensor)]| -> Vec<(String, HostTensor)> {
                let rows = steps[..=i].iter().map(|p| p.len()).sum::<usize>() * nkv * hd;
                v.iter()
                    .map(|(n, t)| {
                        let x = f32s(t);
                        let x = if n == "o" { x } else { x[..rows].to_vec() };
                        (n.clone(), HostTensor::from_f32(&[x.len()], &x))
                    })
                    .collect()
            };
            assert_same_bits(&what, &written(a), &written(b));
            assert_eq!(
                *l_on + if keys_only { 2 } else { 4 },
                *l_off,
                "{what}: launches {l_on} fused, {l_off} unfused"
            );
        }
    }
}

/// Where the unfused GEMV of a tile is a wide variant (NVIDIA; the emulator poses as one), a
/// tile in `set_unfused_wide_tiles` runs its groups unfused (the default leaves 16-row groups
/// unfused), with the same results bit for bit; other tiles stay fused.
#[test]
fn wide_tiles_can_stay_unfused() {
    let k = 256;
    let dtype = DType::Q8_0;
    let (Some(mut sel), Some(mut off)) = (gpu("wide_unfused", true), gpu("wide_unfused", false))
    else {
        return;
    };
    if !sel.name().starts_with("hip:cuda") {
        eprintln!(
            "SKIP wide_tiles_can_stay_unfused: no wide variants on {}",
            sel.name()
        );
        return;
    }
    sel.set_unfused_wide_tiles(&[16]);
    let (c_sel, c_off) = (sel.launch_counter(), off.launch_counter());
    for n in [8, 16] {
        let (w, g, inputs) = random_case(n, k, dtype);
        let (a, l_sel) = run(&mut sel, &|| c_sel.get(), &g, &w, &inputs);
        let (b, l_off) = run(&mut off, &|| c_off.get(), &g, &w, &inputs);
        assert_same_bits(&format!("n={n}"), &a, &b);
        // 16 rows: unfused but for the folded gate (one launch less than fusion off); 8: fused.
        let want = if n == 16 { 4 + 4 + 2 } else { 6 };
        assert_eq!(l_sel, want, "n={n}: launches (fusion off: {l_off})");
    }
}

/// The fused wide kernels (`qgemv4_*_8x4`, `qgemv_glu_*_8x4`, `set_fused_wide`): the 8-row
/// groups keep the wide tile's rows per warp and give the unfused run's bits, with the fused
/// launch count, for every int8 type and odd row counts (the gate/up kernel's last warp holds
/// a partial pair set).
#[test]
fn fused_wide_kernels_equal_unfused() {
    let k = 256;
    for &dtype in INT8_TYPES {
        let (Some(mut wide), Some(mut off)) = (gpu("fused_wide", true), gpu("fused_wide", false))
        else {
            return;
        };
        if !wide.name().starts_with("hip:cuda") {
            eprintln!(
                "SKIP fused_wide_kernels_equal_unfused: no wide variants on {}",
                wide.name()
            );
            return;
        }
        wide.set_fused_wide(true);
        let (c_wide, c_off) = (wide.launch_counter(), off.launch_counter());
        for n in [5, 8] {
            let (w, g, inputs) = random_case(n, k, dtype);
            let (a, l_wide) = run(&mut wide, &|| c_wide.get(), &g, &w, &inputs);
            let (b, _) = run(&mut off, &|| c_off.get(), &g, &w, &inputs);
            assert_same_bits(&format!("{dtype} n={n}: fused wide vs unfused"), &a, &b);
            assert_eq!(l_wide, 6, "{dtype} n={n}: fused launches");
        }
    }
}

/// Q8_0 weights regrouped at upload (`set_q8_regroup`: per 16 blocks the scales, then the
/// values; the `q8_0g` dp4a kernels) give the plain layout's bits at every tile, fused and
/// unfused, wide and 1-row variants included; a K that is no multiple of 512 keeps the plain
/// copy.
#[test]
fn regrouped_q8_0_equals_the_plain_layout() {
    for k in [512, 1024, 256] {
        for fusion in [true, false] {
            let (Some(mut re), Some(mut plain)) =
                (gpu("q8_regroup", fusion), gpu("q8_regroup", fusion))
            else {
                return;
            };
            re.set_q8_regroup(true);
            re.set_fused_wide(true);
            for n in [1, 2, 3, 5, 8, 16] {
                let (w, g, inputs) = random_case(n, k, DType::Q8_0);
                let (a, _) = run(&mut re, &|| 0, &g, &w, &inputs);
                let (b, _) = run(&mut plain, &|| 0, &g, &w, &inputs);
                assert_same_bits(&format!("k={k} n={n} fusion={fusion}"), &a, &b);
            }
        }
    }
}

/// A norm whose output feeds an int8 matmul writes the int8 rows itself (`*_rms_norm_q8`):
/// rms_norm, add_rms_norm (its second output) and gated_rms_norm through a head view, each into
/// a matmul. Outputs equal the unfused run bit for bit; three `quantize_q8` launches go. On the
/// matrix cores with fragment-ordered activations (`qmma*f`) each norm writes that order too
/// (`*_rms_norm_q8f`, over the copy's rows: 13 inputs pad to 16), or with that off its rows are
/// reordered by one `qmma_relayout` launch, with the same results either way.
#[test]
fn norms_feeding_int8_matmuls_quantize_their_own_output() {
    for &dtype in &[DType::Q8_0, DType::Iq4Xs] {
        // Q8_0: 10 quantization blocks per row; IQ4_XS needs K % 256. Heads of 64 (2 blocks).
        // 1280 and 5120 (1 and 3 passes): the one-block-per-row form of the norm kernels (the
        // others: one warp per row).
        let ks = if dtype == DType::Iq4Xs {
            [512, 5120]
        } else {
            [320, 1280]
        };
        let (Some(mut on), Some(mut off)) = (gpu("norm_q8", true), gpu("norm_q8", false)) else {
            return;
        };
        on.set_norm_q8(NormQ8::All);
        let Some(mut gated) = gpu("norm_q8_gated", true) else {
            return;
        };
        gated.set_norm_q8(NormQ8::Gated);
        // The sliced one-row add_rms_norm_q8s (5120-wide rows: 10 slices of 512 values).
        let Some(mut sliced) = gpu("norm_q8_slices", true) else {
            return;
        };
        sliced.set_norm_q8(NormQ8::Slices);
        // Fused, on the matrix-core kernels with fragment-ordered activations.
        let mma = |test: &str, norms: NormQ8, q8f: bool| {
            gpu(test, true).map(|mut b| {
                b.set_norm_q8(norms);
                b.set_qgemv_mma(true);
                b.set_qmma_xlayout(true);
                b.set_norm_q8f(q8f);
                b
            })
        };
        let Some(mut frag) = mma("norm_q8_frag", NormQ8::All, true) else {
            return;
        };
        // The sliced add_rms_norm at every width here: on the dp4a kernels (plain int8 rows)
        // and on the matrix cores, where it writes the fragment order too (add_rms_norm_q8sf).
        let Some(mut sliced_rows) = gpu("norm_q8_slice_rows", true) else {
            return;
        };
        sliced_rows.set_norm_q8(NormQ8::Slices);
        sliced_rows.set_norm_slice_rows(16);
        let Some(mut sliced_frag) = mma("norm_q8_slice_frag", NormQ8::Slices, true) else {
            return;
        };
        sliced_frag.set_norm_slice_rows(16);
        let Some(mut relaid) = mma("norm_q8_relayout", NormQ8::All, false) else {
            return;
        };
        let (c_on, c_off) = (on.launch_counter(), off.launch_counter());
        let (c_frag, c_gated) = (frag.launch_counter(), gated.launch_counter());
        let c_relaid = relaid.launch_counter();
        let c_sliced = sliced.launch_counter();
        let (c_srows, c_sfrag) = (sliced_rows.launch_counter(), sliced_frag.launch_counter());
        for (k, n) in ks.into_iter().flat_map(|k| [1, 3, 13, 16].map(|n| (k, n))) {
            let heads = k / 64;
            let mut rng = Rng::new(77 + n as u64 + k as u64);
            let mut b = GraphBuilder::new();
            let x = b.input("x", DType::F32, &[n, k]).unwrap();
            let r = b.input("r", DType::F32, &[n, k]).unwrap();
            let z = b.input("z", DType::F32, &[n, heads, k / heads]).unwrap();
            let nw = b.weight("nw", DType::F32, &[k]).unwrap();
            let hw = b.weight("hw", DType::F32, &[k / heads]).unwrap();
            let mut w = WeightStore::default();
            for (name, shape) in [("nw", vec![k]), ("hw", vec![k / heads])] {
                let v: Vec<f32> = rng
                    .vec_normal(shape[0], 0.3)
                    .iter()
                    .map(|v| 1.0 + v)
                    .collect();
                w.insert(name, HostTensor::from_f32(&shape, &v));
            }
            let y0 = b.rms_norm(x, nw, 1e-6).unwrap();
            matmul_output(&mut b, &mut w, &mut rng, dtype, ("m0", 21, k), y0);
            let (s, y1) = b.add_rms_norm(x, r, nw, 1e-6).unwrap();
            b.output("sum", s).unwrap();
            matmul_output(&mut b, &mut w, &mut rng, dtype, ("m1", 13, k), y1);
            let zx = b.reshape(x, &[n, heads, k / heads]).unwrap();
            let y2 = b.gated_rms_norm(zx, z, hw, 1e-6).unwrap();
            let y2 = b.reshape(y2, &[n, k]).unwrap();
            matmul_output(&mut b, &mut w, &mut rng, dtype, ("m2", 7, k), y2);
            let g = b.build();
            let inputs = [
                ("x", HostData::F32(rng.vec_normal(n * k, 1.0))),
                ("r", HostData::F32(rng.vec_normal(n * k, 1.0))),
                ("z", HostData::F32(rng.vec_normal(n * k, 1.0))),
            ];
            let what = format!("{dtype} k={k} n={n}");
            let (fused, l_on) = run(&mut on, &|| c_on.get(), &g, &w, &inputs);
            let (plain, l_off) = run(&mut off, &|| c_off.get(), &g, &w, &inputs);
            assert_same_bits(&format!("{what}: fused vs unfused"), &fused, &plain);
            assert_eq!(
                l_off,
                3 * 3,
                "{what}: unfused launches (norm, quantize, gemv) × 3"
            );
            assert_eq!(l_on, 3 * 2, "{what}: fused launches (norm_q8, gemv) × 3");
            // Gated norms only: the other two keep their quantize launch.
            let (a, l_gated) = run(&mut gated, &|| c_gated.get(), &g, &w, &inputs);
            assert_same_bits(&format!("{what}: gated norm_q8 vs unfused"), &a, &plain);
            assert_eq!(l_gated, 3 * 3 - 1, "{what}: gated norm_q8 launches");
            // Slices: the gated norm, and the add_rms_norm of one row in the block form.
            let (a, l_sliced) = run(&mut sliced, &|| c_sliced.get(), &g, &w, &inputs);
            assert_same_bits(&format!("{what}: sliced norm_q8 vs unfused"), &a, &plain);
            let block_form = k > 512 && k % 512 == 0;
            let sliceable = n == 1 && block_form;
            assert_eq!(
                l_sliced,
                3 * 3 - 1 - u64::from(sliceable),
                "{what}: sliced norm_q8 launches"
            );
            let (a, l_srows) = run(&mut sliced_rows, &|| c_srows.get(), &g, &w, &inputs);
            assert_same_bits(&format!("{what}: sliced rows vs unfused"), &a, &plain);
            assert_eq!(
                l_srows,
                3 * 3 - 1 - u64::from(block_form),
                "{what}: sliced rows launches"
            );
            if n >= 13 {
                let (a, l_sfrag) = run(&mut sliced_frag, &|| c_sfrag.get(), &g, &w, &inputs);
                assert_same_bits(
                    &format!("{what}: sliced fragment order vs unfused"),
                    &a,
                    &plain,
                );
                if sliced_frag.matrix_cores() {
                    // rms_norm + quantize + tile; add_rms_norm_q8sf (or the norm and its
                    // quantize) + tile; gated_rms_norm_q8f + tile.
                    assert_eq!(
                        l_sfrag,
                        3 * 3 - 1 - u64::from(block_form),
                        "{what}: sliced fragment-order launches"
                    );
                }
                let (a, l_frag) = run(&mut frag, &|| c_frag.get(), &g, &w, &inputs);
                assert_same_bits(&format!("{what}: fragment order vs unfused"), &a, &plain);
                let (b, l_relaid) = run(&mut relaid, &|| c_relaid.get(), &g, &w, &inputs);
                assert_same_bits(&format!("{what}: relaid vs unfused"), &b, &plain);
                if frag.matrix_cores() {
                    assert_eq!(l_frag, 3 * 2, "{what}: (norm_q8f, qmma) × 3");
                    assert_eq!(l_relaid, 3 * 3, "{what}: (norm_q8, relayout, qmma) × 3");
                }
            }
        }
    }
}

#[test]
fn convs_feeding_int8_matmuls_quantize_their_own_output() {
    // The DFlash2 drafter's shape: blocks of 8 rows, 2 sides × 2 taps, groups of 16 channels.
    let (Some(mut on), Some(mut off)) = (gpu("conv_q8", true), gpu("conv_q8", false)) else {
        return;
    };
    let Some(mut frag) = gpu("conv_q8_frag", true) else {
        return;
    };
    frag.set_qgemv_mma(true);
    frag.set_qmma_xlayout(true);
    let Some(mut frag_off) = gpu("conv_q8_frag_off", true) else {
        return;
    };
    frag_off.set_qgemv_mma(true);
    frag_off.set_qmma_xlayout(true);
    frag_off.set_conv_q8(false);
    let counters = [&on, &off, &frag, &frag_off].map(|b| b.launch_counter());
    let (block, group, taps) = (8, 16, 2);
    for (dtype, k, rows) in [
        (DType::Q8_0, 96, 8),
        (DType::Iq4Xs, 512, 16),
        (DType::Q6K, 256, 8),
    ] {
        let mut rng = Rng::new(91 + k as u64 + rows as u64);
        let dyn_w = 2 * taps * (k / group);
        let mut b = GraphBuilder::new();
        let x = b.input("x", DType::F32, &[rows, k]).unwrap();
        let dk = b.input("dk", DType::F32, &[rows, dyn_w]).unwrap();
        let base = b.weight("base", DType::F32, &[2, taps, k]).unwrap();
        let mut w = WeightStore::default();
        w.insert(
            "base",
            HostTensor::from_f32(&[2, taps, k], &rng.vec_normal(2 * taps * k, 0.5)),
        );
        // Side 0 feeds two matmuls (a group), side 1 only an output.
        let c0 = b.dyn_conv(x, base, dk, 0, block, group).unwrap();
        for (name, m) in [("m0", 21), ("m1", 13)] {
            matmul_output(&mut b, &mut w, &mut rng, dtype, (name, m, k), c0);
        }
        let c1 = b.dyn_conv(x, base, dk, 1, block, group).unwrap();
        b.output("c1", c1).unwrap();
        let g = b.build();
        let inputs = [
            ("x", HostData::F32(rng.vec_normal(rows * k, 1.0))),
            ("dk", HostData::F32(rng.vec_normal(rows * dyn_w, 0.3))),
        ];
        let what = format!("{dtype} k={k} rows={rows}");
        let mut runs = Vec::new();
        for (be, c) in [&mut on, &mut off, &mut frag, &mut frag_off]
            .into_iter()
            .zip(&counters)
        {
            runs.push(run(be, &|| c.get(), &g, &w, &inputs));
        }
        let [
            (fused, l_on),
            (plain, l_off),
            (fr, l_fr),
            (fr_off, l_fr_off),
        ] = runs.try_into().expect("four runs");
        assert_same_bits(&format!("{what}: fused vs unfused"), &fused, &plain);
        assert_same_bits(&format!("{what}: fragment order vs unfused"), &fr, &plain);
        assert_same_bits(
            &format!("{what}: fragment order, conv_q8 off"),
            &fr_off,
            &plain,
        );
        // Unfused: two convs, one quantize, two GEMVs; fused: the GEMVs as one launch and the
        // quantize inside the conv.
        assert_eq!(l_off, 5, "{what}: unfused launches");
        assert_eq!(
            l_on, 3,
            "{what}: fused launches (conv_q8, gemv group, conv)"
        );
        if frag.matrix_cores() && dtype != DType::Q8_0 {
            assert_eq!(l_fr, 3, "{what}: conv_q8f, qmma group, conv");
            assert_eq!(l_fr_off, 4, "{what}: conv, qmma_quantize, qmma group, conv");
        }
    }
}

/// The row tiles a DDTree round trims its budget to (`spec::tree::tile_budget`) are the tiles
/// the int8 lowering picks: the dp4a ones below 5 rows and the matrix-core ones from there
/// where those run (NVIDIA), the dp4a ones throughout otherwise; none without int8 matmuls.
#[test]
fn step_row_tiles_are_the_int8_matmul_tiles() {
    let Some(mut be) = common::open_hip("step_row_tiles_are_the_int8_matmul_tiles") else {
        return;
    };
    be.set_int8_matmul(true);
    be.set_qgemv_mma(true);
    let want: &[usize] = if be.matrix_cores() {
        &[1, 2, 4, 8, 16, 32]
    } else {
        &[1, 2, 4, 8, 16]
    };
    assert_eq!(be.step_row_tiles(), want);
    be.set_qgemv_mma(false);
    assert_eq!(be.step_row_tiles(), [1, 2, 4, 8, 16]);
    be.set_int8_matmul(false);
    assert!(be.step_row_tiles().is_empty());
}
