//! **Test drafters.** They never run a model: [`InjectedDrafter`] replays a known continuation
//! (the target's own greedy output), corrupted where the test says, so a test controls exactly
//! how many drafts are accepted; [`RandomDrafter`] proposes garbage. Use them for correctness
//! tests only; their names say "test".

use super::{Draft, DraftEnv, DraftRequest, Drafter, Features, SpecError};
use crate::util::rng::Rng;

/// Where an [`InjectedDrafter`] corrupts its proposals.
#[derive(Clone, Debug, PartialEq)]
pub enum Corrupt {
    /// Propose the continuation as is.
    None,
    /// Replace the draft at 0-based index `k` of every proposal, so exactly `k` drafts are
    /// accepted whenever more than `k` are proposed.
    At(usize),
    /// Replace each draft independently with probability `p` (seeded).
    Random { p: f32, seed: u64 },
}

/// **Test drafter**: proposes `continuation` (the tokens that follow the prompt: normally the
/// target's own greedy output, whose first token is the first root) from the current root on,
/// corrupted by [`Corrupt`]. It tracks its place by counting committed rows.
pub struct InjectedDrafter {
    prompt_len: usize,
    continuation: Vec<u32>,
    vocab: usize,
    corrupt: Corrupt,
    rng: Rng,
    max: usize,
    layers: Vec<usize>,
    committed: usize,
    /// Every `(tokens, features)` handed to [`Drafter::commit`], when recording.
    pub log: Option<Vec<(Vec<u32>, Features)>>,
}

impl InjectedDrafter {
    pub fn new(
        prompt_len: usize,
        continuation: Vec<u32>,
        vocab: usize,
        max: usize,
        corrupt: Corrupt,
    ) -> InjectedDrafter {
        let seed = match corrupt {
            Corrupt::Random { seed, .. } => seed,
            _ => 0,
        };
        InjectedDrafter {
            prompt_len,
            continuation,
            vocab,
            corrupt,
            rng: Rng::new(seed),
            max,
            layers: Vec::new(),
            committed: 0,
            log: None,
        }
    }

    /// Asks the loop to capture these target layers (to test feature plumbing).
    pub fn with_layers(mut self, layers: Vec<usize>) -> Self {
        self.layers = layers;
        self
    }

    /// Records every commit in [`InjectedDrafter::log`].
    pub fn recording(mut self) -> Self {
        self.log = Some(Vec::new());
        self
    }

    fn wrong(&self, t: u32) -> u32 {
        ((t as usize + 1) % self.vocab) as u32
    }
}

impl Drafter for InjectedDrafter {
    fn name(&self) -> String {
        format!("injected (test only, corrupt {:?})", self.corrupt)
    }

    fn feature_layers(&self) -> Vec<usize> {
        self.layers.clone()
    }

    fn max_draft(&self) -> usize {
        self.max
    }

    fn reset(&mut self, _env: &mut DraftEnv<'_>) -> Result<(), SpecError> {
        self.committed = 0;
        if let Some(l) = &mut self.log {
            l.clear();
        }
        Ok(())
    }

    fn commit(
        &mut self,
        _env: &mut DraftEnv<'_>,
        tokens: &[u32],
        features: &Features,
    ) -> Result<(), SpecError> {
        if features.start != self.committed || features.rows != tokens.len() {
            return Err(SpecError::Drafter {
                name: self.name(),
                msg: format!(
                    "commit of {} rows at {} (features: {} rows at {}), expected position {}",
                    tokens.len(),
                    features.start,
                    features.rows,
                    features.start,
                    self.committed
                ),
            });
        }
        self.committed += tokens.len();
        if let Some(l) = &mut self.log {
            l.push((tokens.to_vec(), features.clone()));
        }
        Ok(())
    }

    fn propose(&mut self, _env: &mut DraftEnv<'_>, req: &DraftRequest) -> Result<Draft, SpecError> {
        let (root, max) = (req.root, req.max);
        // The root is continuation[j], with j = rows committed after the prompt.
        let j = self.committed.saturating_sub(self.prompt_len);
        if self.continuation.get(j) != Some(&root) {
            // Off the known path (can only happen with a wrong continuation): propose nothing.
            return Ok(Draft::default());
        }
        let end = (j + 1 + max.min(self.max)).min(self.continuation.len());
        let mut tokens = self.continuation[j + 1..end].to_vec();
        match self.corrupt {
            Corrupt::None => {}
            Corrupt::At(k) => {
                if k < tokens.len() {
                    tokens[k] = self.wrong(tokens[k]);
                }
            }
            Corrupt::Random { p, .. } => {
                let vocab = self.vocab;
                for t in tokens.iter_mut() {
                    if self.rng.uniform() < p {
                        *t = ((*t as usize + 1) % vocab) as u32;
                    }
                }
            }
        }
        Ok(Draft::greedy(tokens))
    }

    /// Tree speculation: at each depth the proposed (possibly corrupted) token first, then,
    /// where it was corrupted, the true continuation token, then a wrong one; so a tree can
    /// recover past a corrupted chain token through a side branch.
    fn propose_topk(
        &mut self,
        env: &mut DraftEnv<'_>,
        req: &DraftRequest,
        k: usize,
    ) -> Result<Vec<Vec<(u32, f32)>>, SpecError> {
        let j = self.committed.saturating_sub(self.prompt_len);
        let chain = self.propose(env, req)?.tokens;
        Ok(chain
            .iter()
            .enumerate()
            .map(|(i, &t)| {
                let mut c = vec![(t, -0.1)];
                let truth = self.continuation[j + 1 + i];
                if truth != t {
                    c.push((truth, -1.0));
                }
                let other = self.wrong(self.wrong(truth));
                if other != t {
                    c.push((other, -2.0));
                }
                c.truncate(k.max(1));
                c
            })
            .collect())
    }
}

/// **Test drafter**: proposes `max` uniformly random tokens every round.
pub struct RandomDrafter {
    rng: Rng,
    vocab: usize,
    max: usize,
}

impl RandomDrafter {
    pub fn new(seed: u64, vocab: usize, max: usize) -> RandomDrafter {
        RandomDrafter {
            rng: Rng::new(seed),
            vocab,
            max,
        }
    }
}

impl Drafter for RandomDrafter {
    fn name(&self) -> String {
        "random (test only)".into()
    }

    fn feature_layers(&self) -> Vec<usize> {
        Vec::new()
    }

    fn max_draft(&self) -> usize {
        self.max
    }

    fn reset(&mut self, _env: &mut DraftEnv<'_>) -> Result<(), SpecError> {
        Ok(())
    }

    fn commit(
        &mut self,
        _env: &mut DraftEnv<'_>,
        _tokens: &[u32],
        _features: &Features,
    ) -> Result<(), SpecError> {
        Ok(())
    }

    fn propose(&mut self, _env: &mut DraftEnv<'_>, req: &DraftRequest) -> Result<Draft, SpecError> {
        let n = req.max.min(self.max);
        let tokens = (0..n).map(|_| self.rng.below(self.vocab) as u32).collect();
        Ok(Draft::greedy(tokens))
    }
}

/// **Test drafter** for speculative sampling: draws each proposal from
/// `q = weight · onehot(continuation token) + (1 − weight) · uniform` and reports `q`
/// (or, with `lie`, reports the uniform distribution instead: a broken drafter whose output
/// must fail a distribution test). Greedy requests get the continuation without
/// distributions.
pub struct MixtureDrafter {
    prompt_len: usize,
    continuation: Vec<u32>,
    vocab: usize,
    weight: f32,
    lie: bool,
    rng: Rng,
    max: usize,
    committed: usize,
}

impl MixtureDrafter {
    pub fn new(
        prompt_len: usize,
        continuation: Vec<u32>,
        vocab: usize,
        weight: f32,
        max: usize,
        seed: u64,
    ) -> MixtureDrafter {
        MixtureDrafter {
            prompt_len,
            continuation,
            vocab,
            weight,
            lie: false,
            rng: Rng::new(seed),
            max,
            committed: 0,
        }
    }

    /// Reports a uniform `q` whatever it sampled from (negative control).
    pub fn lying(mut self) -> Self {
        self.lie = true;
        self
    }

    /// Forgets commits past `committed` rows (the test restored the target to that point).
    pub fn rewind(&mut self, committed: usize) {
        self.committed = committed;
    }
}

impl Drafter for MixtureDrafter {
    fn name(&self) -> String {
        format!("mixture (test only, weight {})", self.weight)
    }

    fn feature_layers(&self) -> Vec<usize> {
        Vec::new()
    }

    fn max_draft(&self) -> usize {
        self.max
    }

    fn reset(&mut self, _env: &mut DraftEnv<'_>) -> Result<(), SpecError> {
        self.committed = 0;
        Ok(())
    }

    fn commit(
        &mut self,
        _env: &mut DraftEnv<'_>,
        tokens: &[u32],
        _features: &Features,
    ) -> Result<(), SpecError> {
        self.committed += tokens.len();
        Ok(())
    }

    fn propose(&mut self, _env: &mut DraftEnv<'_>, req: &DraftRequest) -> Result<Draft, SpecError> {
        let j = self.committed.saturating_sub(self.prompt_len);
        let on_path = self.continuation.get(j) == Some(&req.root);
        let n = req.max.min(self.max);
        let v = self.vocab;
        let mut tokens = Vec::with_capacity(n);
        let mut probs = Vec::with_capacity(n * v);
        for i in 0..n {
            let c = if on_path {
                self.continuation.get(j + 1 + i).copied()
            } else {
                None
            };
            if req.sampling.is_greedy() {
                match c {
                    Some(c) => tokens.push(c),
                    None => break,
                }
                continue;
            }
            let w = if c.is_some() { self.weight } else { 0.0 };
            let mut q = vec![(1.0 - w) / v as f32; v];
            if let Some(c) = c {
                q[c as usize] += w;
            }
            let t = super::sample::draw(&q, &mut self.rng);
            tokens.push(t);
            if self.lie {
                probs.extend(std::iter::repeat_n(1.0 / v as f32, v));
            } else {
                probs.extend_from_slice(&q);
            }
        }
        let probs = (!req.sampling.is_greedy()).then_some(probs);
        Ok(Draft { tokens, probs })
    }
}
