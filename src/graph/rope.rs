//! RoPE frequencies shared by every backend: the plain NeoX `inv_freq` and YaRN's scaled one,
//! computed on the host exactly as HF transformers does (f32 tensor math, f64 for the
//! correction range, which HF computes with Python floats). Kernels get the table and the
//! attention factor, so all backends rotate by bit-identical angles.

/// YaRN scaling of the rotary frequencies (HF `_compute_yarn_parameters`, transformers 5.23).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Yarn {
    /// Context extension factor (`factor`).
    pub factor: f32,
    /// `original_max_position_embeddings`.
    pub original_context: usize,
    /// Rotation counts bounding the ramp (HF defaults 32 and 1).
    pub beta_fast: f32,
    pub beta_slow: f32,
    /// Multiplier of cos and sin; `None` derives `0.1·ln(factor) + 1` (1 when factor ≤ 1).
    pub attention_factor: Option<f32>,
    /// Whether the correction range is rounded outward to whole dims (HF default true).
    pub truncate: bool,
}

impl Yarn {
    /// HF's `attention_factor` (`get_mscale(factor)` unless given).
    pub fn attention_factor(&self) -> f32 {
        self.attention_factor.unwrap_or_else(|| {
            if self.factor <= 1.0 {
                1.0
            } else {
                // HF computes it with Python floats.
                (0.1 * (self.factor as f64).ln() + 1.0) as f32
            }
        })
    }

    /// HF's `find_correction_range(beta_fast, beta_slow, dim, base, original_max_position)`.
    fn correction_range(&self, dim: usize, base: f32) -> (f64, f64) {
        let corr = |rot: f32| {
            let (d, b, ctx) = (dim as f64, base as f64, self.original_context as f64);
            d * (ctx / (rot as f64 * 2.0 * std::f64::consts::PI)).ln() / (2.0 * b.ln())
        };
        let (mut low, mut high) = (corr(self.beta_fast), corr(self.beta_slow));
        if self.truncate {
            low = low.floor();
            high = high.ceil();
        }
        (low.max(0.0), high.min(dim as f64 - 1.0))
    }
}

/// Rotary parameters of one rope op: `rot` rotated dims, base `theta`, optional YaRN.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RopeParams {
    pub rot: usize,
    pub theta: f32,
    pub yarn: Option<Yarn>,
}

impl RopeParams {
    pub fn plain(rot: usize, theta: f32) -> Self {
        RopeParams {
            rot,
            theta,
            yarn: None,
        }
    }

    /// `inv_freq [rot/2]`: HF's `1 / theta^(2i/rot)` in f32; with YaRN the blend
    /// `interp·(1 − e) + extrap·e` of `1/(factor·theta^(2i/rot))` and `1/theta^(2i/rot)` with
    /// `e = 1 − clamp((i − low)/(high − low), 0, 1)`.
    pub fn inv_freq(&self) -> Vec<f32> {
        let rot = self.rot;
        let pos_freqs = (0..rot / 2).map(|i| self.theta.powf((2 * i) as f32 / rot as f32));
        let Some(y) = self.yarn else {
            return pos_freqs.map(|p| 1.0 / p).collect();
        };
        let (low, mut high) = y.correction_range(rot, self.theta);
        if low == high {
            high += 0.001; // HF's guard against a zero-width ramp
        }
        // HF's `linear_ramp_factor`: (arange(dim/2) − min) / (max − min) in f32.
        let (lo, width) = (low as f32, (high - low) as f32);
        pos_freqs
            .enumerate()
            .map(|(i, p)| {
                let extrap = 1.0 / p;
                let interp = 1.0 / (y.factor * p);
                let ramp = ((i as f32 - lo) / width).clamp(0.0, 1.0);
                let e = 1.0 - ramp;
                interp * (1.0 - e) + extrap * e
            })
            .collect()
    }

    /// The factor applied to cos and sin (1 without YaRN).
    pub fn attention_factor(&self) -> f32 {
        self.yarn.map_or(1.0, |y| y.attention_factor())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn yarn(factor: f32, ctx: usize) -> Yarn {
        Yarn {
            factor,
            original_context: ctx,
            beta_fast: 32.0,
            beta_slow: 1.0,
            attention_factor: None,
            truncate: true,
        }
    }

    #[test]
    fn yarn_blends_between_extrapolation_and_interpolation() {
        let plain = RopeParams::plain(32, 1e4).inv_freq();
        let p = RopeParams {
            yarn: Some(yarn(8.0, 256)),
            ..RopeParams::plain(32, 1e4)
        };
        let f = p.inv_freq();
        // high-frequency dims (below `low`) keep the plain frequency, low-frequency dims
        // (past `high`) are divided by the factor.
        let (low, high) = yarn(8.0, 256).correction_range(32, 1e4);
        assert_eq!((low, high), (0.0, 7.0));
        assert_eq!(f[0], plain[0]);
        for i in 7..16 {
            assert!((f[i] - plain[i] / 8.0).abs() <= 1e-7 * plain[i], "dim {i}");
        }
        for i in 1..7 {
            assert!(f[i] < plain[i] && f[i] > plain[i] / 8.0, "dim {i} blends");
        }
        assert!((p.attention_factor() - (0.1 * 8f32.ln() + 1.0)).abs() < 1e-7);
        assert_eq!(RopeParams::plain(32, 1e4).attention_factor(), 1.0);
    }
}
