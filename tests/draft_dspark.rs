//! The DSpark Markov head as a graph (chained left to right after the DFlash backbone) against
//! the formula computed directly on the host from the backbone's own logits:
//! `corrected_i = U_i + W2 · W1[x_{i−1}]`, `x_i = argmax(corrected_i)`, `x_{−1}` = the seed.

use deltaspec::backend::{self, HostData, HostTensor, StateDecl, WeightStore};
use deltaspec::model::draft::{DFlash, DFlashConfig, DSparkConfig, names};
use deltaspec::util::rng::Rng;

const H: usize = 32;
const V: usize = 64;
const R: usize = 8;
const B: usize = 5;

fn config(dspark: bool) -> DFlashConfig {
    DFlashConfig {
        n_layers: 2,
        hidden: H,
        ffn: 48,
        vocab: Some(V),
        n_heads: 2,
        n_kv_heads: 1,
        head_dim: 16,
        eps: 1e-6,
        rope_theta: 1e4,
        rope_scaling: None,
        context_length: 64,
        block_size: B,
        mask_token_id: V as u32 - 1,
        n_target_layers: 2,
        target_layer_ids: vec![0, 1],
        target_block_count: None,
        sliding_window: None,
        sliding_layers: vec![false; 2],
        dflash2: None,
        dspark: dspark.then_some(DSparkConfig {
            markov_rank: R,
            vocab: V,
            confidence_dim: None,
        }),
    }
}

fn weights(rng: &mut Rng) -> WeightStore {
    let c = config(true);
    let (q, kv) = (c.n_heads * c.head_dim, c.n_kv_heads * c.head_dim);
    let mut shapes: Vec<(String, Vec<usize>)> = vec![
        (names::FC.into(), vec![H, 2 * H]),
        (names::HIDDEN_NORM.into(), vec![H]),
        (names::OUTPUT_NORM.into(), vec![H]),
        (names::TOKEN_EMBD.into(), vec![V, H]),
        (names::OUTPUT.into(), vec![V, H]),
        (names::MARKOV_W1.into(), vec![V, R]),
        (names::MARKOV_W2.into(), vec![V, R]),
    ];
    for i in 0..c.n_layers {
        for (s, shape) in names::LAYER.iter().zip([
            vec![H],
            vec![H],
            vec![q, H],
            vec![kv, H],
            vec![kv, H],
            vec![H, q],
            vec![c.head_dim],
            vec![c.head_dim],
            vec![c.ffn, H],
            vec![c.ffn, H],
            vec![H, c.ffn],
        ]) {
            shapes.push((names::blk(i, s), shape));
        }
    }
    let mut w = WeightStore::default();
    for (name, shape) in shapes {
        let n: usize = shape.iter().product();
        let v: Vec<f32> = if shape.len() == 1 {
            (0..n).map(|_| 1.0 + 0.2 * rng.normal()).collect()
        } else if name.starts_with("dflash.dspark") {
            rng.vec_normal(n, 0.5)
        } else {
            rng.vec_normal(n, 0.8 / (shape[1] as f32).sqrt())
        };
        w.insert(name, HostTensor::from_f32(&shape, &v));
    }
    w
}

/// Runs one draft (4 context rows, seed token) and returns the named outputs.
fn run(d: &DFlash, w: &WeightStore, feat: &[f32], seed: i32) -> Vec<(String, HostTensor)> {
    let cap = 16;
    let c = &d.cfg;
    let mut be = backend::create("cpu").unwrap();
    let wid = be.upload_weights(w).unwrap();
    let decls: Vec<StateDecl> = (0..c.n_layers)
        .flat_map(|i| {
            [
                StateDecl::new(names::k_cache(i), &[cap, c.n_kv_heads, c.head_dim]),
                StateDecl::new(names::v_cache(i), &[cap, c.n_kv_heads, c.head_dim]),
            ]
        })
        .collect();
    let s = be.alloc_states(&decls).unwrap();
    let tc = feat.len() / c.feature_width();
    let g = d.draft_graph(w, tc, cap).unwrap();
    let e = be.compile(&g).unwrap();
    let mut ids = vec![c.mask_token_id as i32; B];
    ids[0] = seed;
    be.run(
        e,
        wid,
        s,
        &[
            ("feat", HostData::F32(feat.to_vec())),
            ("cpos", HostData::I32((0..tc as i32).collect())),
            ("cq", HostData::F32(vec![0.0; tc * c.n_heads * c.head_dim])),
            ("ids", HostData::I32(ids)),
            ("pos", HostData::I32((tc as i32..(tc + B) as i32).collect())),
        ],
    )
    .unwrap()
}

fn get<'a>(outs: &'a [(String, HostTensor)], name: &str) -> &'a HostTensor {
    &outs.iter().find(|(n, _)| n == name).unwrap().1
}

#[test]
fn markov_chain_graph_matches_the_formula() {
    let mut rng = Rng::new(42);
    let w = weights(&mut rng);
    let feat = rng.vec_normal(4 * 2 * H, 1.0);
    let seed = 17;
    let plain = DFlash {
        cfg: config(false),
        weights: w.clone(),
    };
    let dspark = DFlash {
        cfg: config(true),
        weights: w.clone(),
    };
    let u = get(&run(&plain, &w, &feat, seed), "draft_logits")
        .to_f32()
        .unwrap();
    let outs = run(&dspark, &w, &feat, seed);
    assert_eq!(
        get(&outs, "draft_logits").to_f32().unwrap(),
        u,
        "backbone logits"
    );

    let w1 = w.get(names::MARKOV_W1).unwrap().to_f32().unwrap();
    let w2 = w.get(names::MARKOV_W2).unwrap().to_f32().unwrap();
    let mut prev = seed as usize;
    let mut changed = 0;
    for i in 0..B - 1 {
        let e = &w1[prev * R..(prev + 1) * R];
        let want: Vec<f32> = (0..V)
            .map(|v| {
                let bias: f64 = (0..R).map(|k| w2[v * R + k] as f64 * e[k] as f64).sum();
                (u[i * V + v] as f64 + bias) as f32
            })
            .collect();
        let got = get(&outs, &format!("markov_logits.{i}")).to_f32().unwrap();
        let err = got
            .iter()
            .zip(&want)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max);
        assert!(err < 1e-5, "position {i}: max abs err {err}");
        let x = (0..V)
            .max_by(|&a, &b| want[a].total_cmp(&want[b]).then(b.cmp(&a)))
            .unwrap();
        let got_x = get(&outs, &format!("markov_token.{i}")).to_i32()[0] as usize;
        assert_eq!(got_x, x, "position {i}");
        let raw_x = (0..V)
            .max_by(|&a, &b| u[i * V + a].total_cmp(&u[i * V + b]).then(b.cmp(&a)))
            .unwrap();
        changed += usize::from(raw_x != x);
        prev = x;
    }
    assert!(changed > 0, "the Markov bias never changed a proposal");
}

/// The confidence head's logit, computed in the graph (`confidence_logit`, without the bias):
/// `z_i = w_h · h_i + w_r · W1[x_{i−1}]`. The Markov part is checked exactly against the host
/// formula; the hidden part through an lm_head whose first H rows are the identity, so that
/// `draft_logits[i][..H]` is the normed state `h_i / rms(h_i)`: the ratio of two heads' logits
/// must equal the ratio of their dot products with it (row alignment and direction of `h_i`).
#[test]
fn confidence_logit_graph_matches_the_formula() {
    let mut rng = Rng::new(5);
    let mut w = weights(&mut rng);
    let mut out_w = rng.vec_normal(V * H, 0.3);
    for r in 0..H {
        for c in 0..H {
            out_w[r * H + c] = f32::from(r == c);
        }
    }
    w.insert(names::OUTPUT, HostTensor::from_f32(&[V, H], &out_w));
    w.insert(names::OUTPUT_NORM, HostTensor::from_f32(&[H], &[1.0; H]));
    let mut cfg = config(true);
    cfg.dspark.as_mut().unwrap().confidence_dim = Some(H + R);
    let feat = rng.vec_normal(4 * 2 * H, 1.0);
    let seed = 9;
    let logit = |head: &[f32], w: &WeightStore| -> (Vec<f32>, Vec<(String, HostTensor)>) {
        let mut w = w.clone();
        w.insert(names::CONFIDENCE_W, HostTensor::from_f32(&[1, H + R], head));
        w.insert(names::CONFIDENCE_B, HostTensor::from_f32(&[1], &[0.0]));
        let d = DFlash {
            cfg: cfg.clone(),
            weights: w.clone(),
        };
        d.add_derived_weights(&mut w).unwrap();
        let outs = run(&d, &w, &feat, seed);
        let z = get(&outs, "confidence_logit").to_f32().unwrap();
        assert_eq!(z.len(), B - 1);
        (z, outs)
    };
    // Markov part only.
    let wr = rng.vec_normal(R, 1.0);
    let head: Vec<f32> = [vec![0.0; H], wr.clone()].concat();
    let (z, outs) = logit(&head, &w);
    let w1 = w.get(names::MARKOV_W1).unwrap().to_f32().unwrap();
    let mut prev = seed as usize;
    for (i, zi) in z.iter().enumerate() {
        let want: f32 = (0..R).map(|k| wr[k] * w1[prev * R + k]).sum();
        assert!((zi - want).abs() < 1e-5, "position {i}: {zi} vs {want}");
        prev = get(&outs, &format!("markov_token.{i}")).to_i32()[0] as usize;
    }
    // Hidden part only, two heads.
    let (a, b) = (rng.vec_normal(H, 1.0), rng.vec_normal(H, 1.0));
    let (za, outs) = logit(&[a.clone(), vec![0.0; R]].concat(), &w);
    let (zb, _) = logit(&[b.clone(), vec![0.0; R]].concat(), &w);
    let n = get(&outs, "draft_logits").to_f32().unwrap();
    for i in 0..B - 1 {
        let row = &n[i * V..i * V + H];
        let (da, db): (f32, f32) = (
            row.iter().zip(&a).map(|(x, y)| x * y).sum(),
            row.iter().zip(&b).map(|(x, y)| x * y).sum(),
        );
        // z = rms_i · (w · n_i): the same positive factor for both heads.
        let (ra, rb) = (za[i] / da, zb[i] / db);
        assert!(
            ra > 0.0 && (ra - rb).abs() < 1e-4 * ra,
            "position {i}: {ra} vs {rb}"
        );
    }
    // Both parts add up.
    let (zab, _) = logit(&[a, wr].concat(), &w);
    for i in 0..B - 1 {
        assert!((zab[i] - (za[i] + z[i])).abs() < 1e-4 * (1.0 + zab[i].abs()));
    }
}
