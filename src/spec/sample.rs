//! Temperature / top-p sampling, plain sampled decoding, and the accept rule of lossless
//! speculative sampling (rejection sampling against the drafter's distribution; Leviathan et
//! al. 2023, Chen et al. 2023).
//!
//! For draft `d_{i+1}` drawn from the drafter's `q_i`, with the target's `p_i` (the same
//! temperature / top-p transform as plain sampling): accept with probability
//! `min(1, p_i(d)/q_i(d))`; at the first rejection emit a token drawn from
//! `norm(max(0, p_i − q_i))` and stop; if every draft is accepted, emit a bonus drawn from
//! `p_n`. Each emitted token is then distributed exactly as plain sampling from `p`. A drafter
//! that gives no distribution proposes deterministically: `q_i` is one-hot at its draft.

use super::SpecError;
use crate::model::qwen35::{GraphOptions, LogitRows};
use crate::model::{ModelError, Session};
use crate::util::rng::Rng;

/// How tokens are drawn from the target's logits.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sampling {
    /// 0 = greedy (argmax).
    pub temperature: f32,
    /// Nucleus: keep the most probable tokens whose mass reaches `top_p` (1 = all).
    pub top_p: f32,
}

impl Default for Sampling {
    fn default() -> Self {
        Sampling::greedy()
    }
}

impl Sampling {
    pub fn greedy() -> Sampling {
        Sampling {
            temperature: 0.0,
            top_p: 1.0,
        }
    }

    pub fn is_greedy(&self) -> bool {
        self.temperature <= 0.0
    }

    /// The distribution of one logits row: softmax(logits / T) restricted to the nucleus and
    /// renormalised; one-hot at the argmax (first maximum) when greedy.
    pub fn probs(&self, logits: &[f32]) -> Vec<f32> {
        let n = logits.len();
        let mut out = vec![0.0f32; n];
        if n == 0 {
            return out;
        }
        if self.is_greedy() {
            let mut best = 0;
            for (i, &x) in logits.iter().enumerate() {
                if x > logits[best] {
                    best = i;
                }
            }
            out[best] = 1.0;
            return out;
        }
        let t = self.temperature as f64;
        let m = logits.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b)) as f64;
        let e: Vec<f64> = logits.iter().map(|&x| ((x as f64 - m) / t).exp()).collect();
        let z: f64 = e.iter().sum();
        let mut keep = vec![true; n];
        if self.top_p < 1.0 {
            let mut order: Vec<usize> = (0..n).collect();
            // Descending probability, ties by index: deterministic.
            order.sort_by(|&a, &b| e[b].total_cmp(&e[a]).then(a.cmp(&b)));
            keep = vec![false; n];
            let mut cum = 0.0;
            for &i in &order {
                keep[i] = true;
                cum += e[i] / z;
                if cum >= self.top_p as f64 {
                    break;
                }
            }
        }
        let zk: f64 = (0..n).filter(|&i| keep[i]).map(|i| e[i]).sum();
        for i in 0..n {
            if keep[i] {
                out[i] = (e[i] / zk) as f32;
            }
        }
        out
    }
}

/// Draws an index from a (possibly unnormalised) non-negative distribution.
pub fn draw(probs: &[f32], rng: &mut Rng) -> u32 {
    let total: f64 = probs.iter().map(|&p| p as f64).sum();
    let u = rng.uniform() as f64 * total;
    let mut cum = 0.0;
    let mut last = 0;
    for (i, &p) in probs.iter().enumerate() {
        if p > 0.0 {
            cum += p as f64;
            last = i;
            if u < cum {
                return i as u32;
            }
        }
    }
    last as u32
}

/// The speculative-sampling accept rule over one verify. `drafts` are `d_1 … d_n`, `q` the
/// drafter's rows `[n, vocab]` (None: deterministic drafts), `p` the target's distributions
/// for rows `0 … n` (`[n + 1, vocab]`). Returns `(a, next)`: drafts accepted and the token
/// emitted after them (the residual sample or the bonus).
pub fn accept_sampled(
    drafts: &[u32],
    q: Option<&[f32]>,
    p: &[f32],
    vocab: usize,
    rng: &mut Rng,
) -> Result<(usize, u32), SpecError> {
    let n = drafts.len();
    if p.len() != (n + 1) * vocab || q.is_some_and(|q| q.len() != n * vocab) {
        return Err(SpecError::Invalid(format!(
            "accept_sampled: {n} drafts, p holds {} values, q {:?}, vocab {vocab}",
            p.len(),
            q.map(|q| q.len())
        )));
    }
    for (i, &d) in drafts.iter().enumerate() {
        let pi = &p[i * vocab..(i + 1) * vocab];
        let d = d as usize;
        let qd = q.map_or(1.0, |q| q[i * vocab + d]);
        if qd <= 0.0 {
            return Err(SpecError::Invalid(format!(
                "the drafter proposed token {d} at position {i} with probability 0"
            )));
        }
        let ratio = pi[d] / qd;
        if ratio >= 1.0 || rng.uniform() < ratio {
            continue;
        }
        let residual: Vec<f32> = match q {
            Some(q) => pi
                .iter()
                .zip(&q[i * vocab..(i + 1) * vocab])
                .map(|(&a, &b)| (a - b).max(0.0))
                .collect(),
            None => {
                let mut r = pi.to_vec();
                r[d] = 0.0;
                r
            }
        };
        let next = if residual.iter().any(|&x| x > 0.0) {
            draw(&residual, rng)
        } else {
            draw(pi, rng)
        };
        return Ok((i, next));
    }
    Ok((n, draw(&p[n * vocab..], rng)))
}

/// Plain sampled decoding: prefills `prompt` in chunks of at most `chunk` tokens, then draws
/// one token per step from the target's distribution under `sampling`, with `rng`. Stops
/// after `n` tokens or at `stop`.
#[allow(clippy::too_many_arguments)]
pub fn generate_sampled(
    s: &mut Session<'_>,
    prompt: &[u32],
    n: usize,
    chunk: usize,
    stop: Option<u32>,
    sampling: &Sampling,
    rng: &mut Rng,
    mut on_token: impl FnMut(u32),
) -> Result<Vec<u32>, ModelError> {
    let opts = GraphOptions {
        logits: LogitRows::Last,
        argmax: false,
        capture: Vec::new(),
        read_logits: true,
    };
    let mut out = Vec::with_capacity(n);
    if prompt.is_empty() || n == 0 {
        return Ok(out);
    }
    let mut logits = Vec::new();
    for piece in prompt.chunks(chunk.max(1)) {
        logits = s.forward(piece, &opts)?.logits;
    }
    loop {
        let tok = draw(&sampling.probs(&logits), rng);
        out.push(tok);
        on_token(tok);
        if out.len() >= n || Some(tok) == stop {
            return Ok(out);
        }
        logits = s.forward(&[tok], &opts)?.logits;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probs_temperature_and_top_p() {
        let l = [2.0f32, 1.0, 0.0, -1.0];
        let g = Sampling::greedy().probs(&l);
        assert_eq!(g, vec![1.0, 0.0, 0.0, 0.0]);
        let p = Sampling {
            temperature: 1.0,
            top_p: 1.0,
        }
        .probs(&l);
        let z: f32 = l.iter().map(|x| x.exp()).sum();
        for (a, x) in p.iter().zip(&l) {
            assert!((a - x.exp() / z).abs() < 1e-6);
        }
        // softmax = [.644, .237, .087, .032]: top-p 0.8 keeps the first two.
        let p = Sampling {
            temperature: 1.0,
            top_p: 0.8,
        }
        .probs(&l);
        assert!(p[2] == 0.0 && p[3] == 0.0);
        assert!((p[0] + p[1] - 1.0).abs() < 1e-6);
        assert!((p[0] / p[1] - 1f32.exp()).abs() < 1e-4);
    }

    #[test]
    fn accept_rule_full_accept_and_residual() {
        let mut rng = Rng::new(1);
        // p == q one-hot at the drafts: always accepted, bonus from the last row.
        let v = 3;
        let p = [0.0, 1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0];
        assert_eq!(
            accept_sampled(&[1, 2], None, &p, v, &mut rng).unwrap(),
            (2, 0)
        );
        // p(d) = 0: always rejected; the residual is p without d.
        let p = [0.5, 0.0, 0.5, 1.0, 0.0, 0.0];
        for _ in 0..20 {
            let (a, t) = accept_sampled(&[1], None, &p, v, &mut rng).unwrap();
            assert_eq!(a, 0);
            assert!(t == 0 || t == 2);
        }
    }
}
