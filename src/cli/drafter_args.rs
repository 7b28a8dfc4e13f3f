//! Drafter options shared by `generate` and `bench spec`: the DSpark confidence gate, its
//! calibration, the per-round confidence print and the feature ring's storage type.

use crate::model::draft::FeatureDtype;
use crate::spec::confidence::{GateConfig, GateRule};
use crate::spec::dflash::DrafterOptions;
use anyhow::bail;

#[derive(clap::Args, Debug, Clone, Default)]
pub struct DrafterArgs {
    /// DSpark confidence gate (off by default): cut the drafted chain at the first position
    /// whose calibrated acceptance probability is below P (in (0, 1)). The calibration (Platt
    /// scaling of the head's logit, fitted online on verify results) runs either way.
    #[arg(long, value_name = "P")]
    pub dspark_threshold: Option<f32>,
    /// Gate rule: position (q_i < P cuts) or survival (Π_{j≤i} q_j < P cuts).
    #[arg(long, default_value = "position")]
    pub dspark_gate_rule: String,
    /// Every this many rounds the gate keeps the whole chain (exploration, so that deep
    /// positions keep getting labels and a closed gate can reopen; 0: never).
    #[arg(long, default_value_t = 8)]
    pub dspark_explore_every: usize,
    /// The gate never keeps fewer drafts than this (at least 1).
    #[arg(long, default_value_t = 1)]
    pub dspark_min_draft: usize,
    /// Print every round's raw and calibrated DSpark confidences to stderr.
    #[arg(long)]
    pub print_confidence: bool,
    /// Storage of the drafter's per-sequence feature ring: bf16 (default), f16 or f32.
    #[arg(long, default_value = "bf16")]
    pub feature_dtype: String,
}

impl DrafterArgs {
    pub fn options(&self) -> anyhow::Result<DrafterOptions> {
        if let Some(p) = self.dspark_threshold
            && !(p > 0.0 && p < 1.0)
        {
            bail!("--dspark-threshold must be in (0, 1)");
        }
        Ok(DrafterOptions {
            gate: GateConfig {
                threshold: self.dspark_threshold,
                rule: GateRule::parse(&self.dspark_gate_rule).map_err(anyhow::Error::msg)?,
                explore_every: self.dspark_explore_every,
                min_draft: self.dspark_min_draft.max(1),
                ..GateConfig::default()
            },
            print_confidence: self.print_confidence,
            feature_dtype: FeatureDtype::parse(&self.feature_dtype).map_err(anyhow::Error::msg)?,
        })
    }
}
