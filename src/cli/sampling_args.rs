//! Sampling options shared by `generate` and `bench spec`.

use crate::spec::Sampling;
use anyhow::bail;

#[derive(clap::Args, Debug, Clone)]
pub struct SamplingArgs {
    /// Sampling temperature (0 = greedy). With --spec, speculative sampling (lossless).
    #[arg(long, default_value_t = 0.0)]
    pub temperature: f32,
    /// Nucleus sampling: keep the most probable tokens whose mass reaches top-p.
    #[arg(long, default_value_t = 1.0)]
    pub top_p: f32,
}

impl SamplingArgs {
    /// The checked sampling settings.
    pub fn sampling(&self) -> anyhow::Result<Sampling> {
        if !(self.temperature >= 0.0 && self.temperature.is_finite()) {
            bail!("--temperature must be a finite number ≥ 0");
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            bail!("--top-p must be in (0, 1]");
        }
        Ok(Sampling {
            temperature: self.temperature,
            top_p: self.top_p,
        })
    }
}
