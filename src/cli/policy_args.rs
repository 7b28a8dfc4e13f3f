//! Adaptive-policy options shared by `generate` and `bench spec` (`--spec adaptive`).

use crate::sched::PolicyConfig;

#[derive(clap::Args, Debug, Clone)]
pub struct PolicyArgs {
    /// Adaptive policy: a plain burst starts once the acceptance EMA is below break-even by
    /// this many standard errors (divided by r − 1 where that exceeds 1; 0: as soon as it is
    /// below, the seed's rule).
    #[arg(long, default_value_t = 1.0)]
    pub burst_confidence: f64,
    /// Adaptive policy: the most evidence a burst may need, as the largest long-run margin
    /// below break-even in a fraction of break-even (so a drafter that never lands a draft
    /// still stops).
    #[arg(long, default_value_t = 0.5)]
    pub burst_cap: f64,
    /// Adaptive policy: EMA alpha of the long-run acceptance (0: off). While it is at or above
    /// break-even, a short dip below starts no burst unless acceptance collapses.
    #[arg(long, default_value_t = 0.05)]
    pub long_alpha: f64,
    /// Adaptive policy: choose each chain round's number of drafts from the live per-draft
    /// survival and verify time per row count (`on`), or always verify the full block (`off`).
    /// Backends whose verifies run padded to a fixed width (wgpu) always verify the full block.
    #[arg(long, default_value = "on", value_parser = ["on", "off"])]
    pub adapt_width: String,
}

impl PolicyArgs {
    /// `cfg` with these options applied, once they are checked.
    pub fn apply(&self, cfg: PolicyConfig) -> anyhow::Result<PolicyConfig> {
        PolicyConfig::check_burst_evidence(self.burst_confidence, self.burst_cap, self.long_alpha)
            .map_err(anyhow::Error::msg)?;
        Ok(PolicyConfig {
            confidence: self.burst_confidence,
            burst_cap: self.burst_cap,
            long_alpha: self.long_alpha,
            adapt_width: self.adapt_width == "on",
            ..cfg
        })
    }
}
