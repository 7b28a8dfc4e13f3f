//! Distributions and goodness of fit for the sampling tests.

use deltaspec::backend;
use deltaspec::model::qwen35::{GraphOptions, LogitRows};
use deltaspec::model::{Qwen35, Session};
use deltaspec::spec::Sampling;
use std::collections::HashMap;

/// The target's next-token distribution under `sampling` after `tokens` (CPU reference).
pub fn next_dist(m: &Qwen35, tokens: &[u32], sampling: &Sampling) -> Vec<f32> {
    let mut be = backend::create("cpu").unwrap();
    let mut s = Session::new(m, be.as_mut(), tokens.len()).unwrap();
    let opts = GraphOptions {
        logits: LogitRows::Last,
        argmax: false,
        capture: Vec::new(),
        read_logits: true,
    };
    sampling.probs(&s.forward(tokens, &opts).unwrap().logits)
}

/// After the root (the greedy token after `prompt`): the distribution of the next token x1
/// and the exact joint of (x1, x2), p(x1) · p(x2 | x1).
pub fn pair_dist(
    m: &Qwen35,
    prompt: &[u32],
    sampling: &Sampling,
) -> (Vec<f32>, HashMap<(u32, u32), f64>) {
    let mut gbe = backend::create("cpu").unwrap();
    let mut g = Session::new(m, gbe.as_mut(), prompt.len() + 1).unwrap();
    let root = g.generate_greedy(prompt, 1, 512, None, |_| {}).unwrap()[0];
    let mut ctx = prompt.to_vec();
    ctx.push(root);
    let p1 = next_dist(m, &ctx, sampling);
    let mut exp = HashMap::new();
    for (x1, &a) in p1.iter().enumerate() {
        if a > 0.0 {
            let mut c2 = ctx.clone();
            c2.push(x1 as u32);
            for (x2, &b) in next_dist(m, &c2, sampling).iter().enumerate() {
                if b > 0.0 {
                    exp.insert((x1 as u32, x2 as u32), f64::from(a) * f64::from(b));
                }
            }
        }
    }
    (p1, exp)
}

/// Pearson's statistic with bins of expected count ≥ 5 (the rest pooled), and its critical
/// value at p = 5e-4 (Wilson–Hilferty).
pub fn chi_square<K: std::hash::Hash + Eq + Copy + std::fmt::Debug>(
    observed: &HashMap<K, usize>,
    expected: &HashMap<K, f64>,
    n: usize,
) -> (f64, f64, usize) {
    for k in observed.keys() {
        assert!(
            expected.get(k).copied().unwrap_or(0.0) > 0.0,
            "{k:?} drawn but has probability 0"
        );
    }
    let (mut stat, mut bins) = (0.0, 0);
    let (mut pool_e, mut pool_o) = (0.0, 0usize);
    for (k, &p) in expected {
        let e = p * n as f64;
        let o = observed.get(k).copied().unwrap_or(0);
        if e >= 5.0 {
            stat += (o as f64 - e).powi(2) / e;
            bins += 1;
        } else {
            pool_e += e;
            pool_o += o;
        }
    }
    if pool_e > 0.0 {
        stat += (pool_o as f64 - pool_e).powi(2) / pool_e;
        bins += 1;
    }
    let df = (bins - 1) as f64;
    let z = 3.29;
    let crit = df * (1.0 - 2.0 / (9.0 * df) + z * (2.0 / (9.0 * df)).sqrt()).powi(3);
    (stat, crit, bins)
}

pub type Views = Vec<(
    &'static str,
    HashMap<(u32, u32), usize>,
    HashMap<(u32, u32), f64>,
)>;

/// The joint of (x1, x2) and its two marginals (keyed with the other token set to 0).
pub fn views(obs: &HashMap<(u32, u32), usize>, exp: &HashMap<(u32, u32), f64>) -> Views {
    let marg_o = |f: fn(&(u32, u32)) -> (u32, u32)| {
        let mut m = HashMap::new();
        for (k, &v) in obs {
            *m.entry(f(k)).or_insert(0) += v;
        }
        m
    };
    let marg_e = |f: fn(&(u32, u32)) -> (u32, u32)| {
        let mut m = HashMap::new();
        for (k, &v) in exp {
            *m.entry(f(k)).or_insert(0.0) += v;
        }
        m
    };
    let first: fn(&(u32, u32)) -> (u32, u32) = |k| (k.0, 0);
    let second: fn(&(u32, u32)) -> (u32, u32) = |k| (0, k.1);
    vec![
        ("joint (x1, x2)", obs.clone(), exp.clone()),
        ("x1", marg_o(first), marg_e(first)),
        ("x2", marg_o(second), marg_e(second)),
    ]
}
