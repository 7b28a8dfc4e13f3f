//! **Test drafters.** They never run a model: [`InjectedDrafter`] replays a known continuation
//! (the target's own greedy output), corrupted where the test says, so a test controls exactly
//! how many drafts are accepted; [`RandomDrafter`] proposes garbage. Use them for correctness
//! tests only; their names say "test".

use super::{Draft, DraftEnv, Drafter, Features, SpecError};
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

    fn propose(
        &mut self,
        _env: &mut DraftEnv<'_>,
        root: u32,
        max: usize,
    ) -> Result<Draft, SpecError> {
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
                for i in 0..tokens.len() {
                    if self.rng.uniform() < p {
                        tokens[i] = self.wrong(tokens[i]);
                    }
                }
            }
        }
        Ok(Draft::greedy(tokens))
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

    fn propose(
        &mut self,
        _env: &mut DraftEnv<'_>,
        _root: u32,
        max: usize,
    ) -> Result<Draft, SpecError> {
        let n = max.min(self.max);
        let tokens = (0..n).map(|_| self.rng.below(self.vocab) as u32).collect();
        Ok(Draft::greedy(tokens))
    }
}
