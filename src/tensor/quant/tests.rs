//! Round-trip accuracy, argument checking and robustness of the quantizers.
//! (Bit-exactness against gguf-py lives in `tests/quant_vs_gguf_py.rs`.)

use super::*;

/// A small deterministic normal generator (xorshift64* + Box-Muller): no rand dependency.
struct Normal(u64);

impl Normal {
    fn uniform(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        ((self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }

    fn sample(&mut self) -> f32 {
        let (u, v) = (self.uniform(), self.uniform());
        ((-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()) as f32
    }

    /// `rows` rows of `cols` values, each row with its own magnitude (like weight rows).
    fn matrix(&mut self, rows: usize, cols: usize) -> Vec<f32> {
        (0..rows)
            .flat_map(|r| {
                let scale = 0.01 * (1.0 + r as f32);
                (0..cols).map(|_| self.sample() * scale).collect::<Vec<_>>()
            })
            .collect()
    }
}

const BLOCK_TYPES: [DType; 10] = [
    DType::Q4_0,
    DType::Q4_1,
    DType::Q5_0,
    DType::Q5_1,
    DType::Q8_0,
    DType::Q4K,
    DType::Q5K,
    DType::Q6K,
    DType::Iq4Nl,
    DType::Iq4Xs,
];

fn rel_rms(a: &[f32], b: &[f32]) -> f32 {
    let err: f64 = a.iter().zip(b).map(|(x, y)| f64::from(x - y).powi(2)).sum();
    let sig: f64 = a.iter().map(|x| f64::from(*x).powi(2)).sum();
    (err / sig).sqrt() as f32
}

fn round_trip(dtype: DType, x: &[f32]) -> Vec<f32> {
    let q = quantize(dtype, x).unwrap();
    assert_eq!(q.len(), dtype.bytes_for(x.len()).unwrap(), "{dtype}");
    dequantize(dtype, &q, x.len()).unwrap()
}

/// Relative RMS error bounds on Gaussian rows, a little above what the quantizers reach
/// (Q8_0 0.006, Q6_K 0.018, Q5_K 0.036, Q5_1 0.039, Q5_0 0.044, Q4_K 0.072, IQ4_XS 0.076,
/// IQ4_NL 0.079, Q4_1 0.081, Q4_0 0.081). The legacy quantizers are bit-identical to
/// ggml's reference ones, so theirs are llama.cpp's own errors.
fn bound(dtype: DType) -> f32 {
    match dtype {
        DType::Q8_0 => 0.008,
        DType::Q6K => 0.022,
        DType::Q5_0 | DType::Q5_1 | DType::Q5K => 0.05,
        _ => 0.09,
    }
}

#[test]
fn round_trip_error_is_bounded() {
    let mut rng = Normal(0x5eed);
    for dtype in BLOCK_TYPES {
        // An odd number of rows, each a few blocks long.
        let cols = dtype.block_elems() * 3;
        let x = rng.matrix(7, cols);
        let y = round_trip(dtype, &x);
        let err = rel_rms(&x, &y);
        eprintln!("{dtype}: relative RMS error {err:.4}");
        assert!(err < bound(dtype), "{dtype}: relative RMS error {err}");
        assert!(y.iter().all(|v| v.is_finite()), "{dtype}");
    }
}

#[test]
fn float_types_round_trip() {
    let mut rng = Normal(7);
    let x = rng.matrix(5, 33);
    assert_eq!(round_trip(DType::F32, &x), x);
    for (dtype, tol) in [(DType::F16, 1.0 / 2048.0), (DType::BF16, 1.0 / 256.0)] {
        let y = round_trip(dtype, &x);
        for (a, b) in x.iter().zip(&y) {
            assert!((a - b).abs() <= a.abs() * tol, "{dtype}: {a} -> {b}");
        }
    }
    // Round to nearest even, and NaN stays NaN (quiet) in BF16.
    let q = quantize(
        DType::BF16,
        &[1.0 + 1.0 / 256.0, 1.0 + 3.0 / 256.0, f32::NAN],
    )
    .unwrap();
    assert_eq!(q, [0x80, 0x3f, 0x82, 0x3f, 0xc0, 0x7f]);
}

#[test]
fn q8_0_matches_the_reference_formula() {
    let mut x: Vec<f32> = (0..32).map(|i| (i as f32 - 15.5) * 0.37).collect();
    x[3] = 0.0;
    let q = quantize(DType::Q8_0, &x).unwrap();
    let amax = x.iter().fold(0.0f32, |a, v| a.max(v.abs()));
    let d = amax / 127.0;
    assert_eq!(q[..2], half::f16::from_f32(d).to_le_bytes());
    for (j, &v) in x.iter().enumerate() {
        assert_eq!(q[2 + j] as i8, (v * (1.0 / d)).round() as i8, "element {j}");
    }
    // The extreme value always maps to ±127.
    assert_eq!(q[2] as i8, -127);
    assert_eq!(q[33] as i8, 127);
}

#[test]
fn zero_and_constant_blocks() {
    for dtype in BLOCK_TYPES {
        let n = dtype.block_elems() * 2;
        assert_eq!(round_trip(dtype, &vec![0.0; n]), vec![0.0; n], "{dtype}");
        let y = round_trip(dtype, &vec![0.5; n]);
        assert!(rel_rms(&vec![0.5; n], &y) < 0.05, "{dtype}: {:?}", &y[..4]);
    }
}

#[test]
fn extreme_inputs_give_finite_scales() {
    let mut rng = Normal(99);
    for dtype in BLOCK_TYPES {
        let n = dtype.block_elems();
        let base: Vec<f32> = (0..n).map(|_| rng.sample()).collect();
        let scaled = |s: f32| base.iter().map(|v| v * s).collect::<Vec<f32>>();
        let mut cases: Vec<Vec<f32>> = [1e-30f32, 1e-20, 1e-10, 1e-5, 1e3, 1e4]
            .into_iter()
            .map(scaled)
            .collect();
        // One spike among zeros, and one among tiny values.
        let mut spike = vec![0.0; n];
        spike[n / 2] = -3.0;
        cases.push(spike.clone());
        spike.iter_mut().step_by(3).for_each(|v| *v = 1e-12);
        cases.push(spike);
        for x in cases {
            let y = round_trip(dtype, &x);
            assert!(y.iter().all(|v| v.is_finite()), "{dtype}: {:?}", &x[..2]);
        }
        // Beyond what an f16 scale can express: refused, or finite if it still fits.
        for s in [1e5f32, 1e7, 1e12, 1e30] {
            match quantize(dtype, &scaled(s)) {
                Ok(q) => {
                    let y = dequantize(dtype, &q, n).unwrap();
                    assert!(y.iter().all(|v| v.is_finite()), "{dtype} at {s:e}");
                }
                Err(e) => assert!(matches!(e, QuantError::ScaleOverflow { .. }), "{e}"),
            }
        }
    }
}

#[test]
fn length_errors_name_type_and_problem() {
    let err = dequantize(DType::Q4K, &[0; 144], 255).unwrap_err();
    assert!(matches!(
        err,
        QuantError::NotBlockMultiple {
            dtype: DType::Q4K,
            n: 255,
            block: 256
        }
    ));
    assert!(err.to_string().contains("Q4_K"), "{err}");
    let err = dequantize(DType::Q8_0, &[0; 33], 32).unwrap_err();
    assert_eq!(
        err,
        QuantError::WrongByteLength {
            dtype: DType::Q8_0,
            n: 32,
            expected: 34,
            actual: 33
        }
    );
    let mut dst = [0.0f32; 32];
    assert!(
        dequantize_into(DType::Q4_0, &[0; 36], &mut dst).is_err(),
        "too long"
    );
    assert!(dequantize_into(DType::Q4_0, &[0; 18], &mut dst).is_ok());
    assert!(matches!(
        quantize(DType::Iq4Xs, &[0.0; 100]),
        Err(QuantError::NotBlockMultiple {
            dtype: DType::Iq4Xs,
            ..
        })
    ));
    assert!(dequantize(DType::F16, &[0; 3], 1).is_err());
}

#[test]
fn unsupported_and_non_finite_inputs_are_errors() {
    assert!(matches!(
        dequantize(DType::Q2K, &[0; 84], 256),
        Err(QuantError::UnsupportedDequantize { dtype: DType::Q2K })
    ));
    assert!(matches!(
        quantize(DType::Q3K, &[0.0; 256]),
        Err(QuantError::UnsupportedQuantize { dtype: DType::Q3K })
    ));
    let mut x = vec![1.0f32; 64];
    x[40] = f32::NAN;
    assert!(matches!(
        quantize(DType::Q8_0, &x),
        Err(QuantError::NonFinite { index: 40, .. })
    ));
    // A scale beyond f16 is refused instead of stored as infinity.
    let err = quantize(DType::Q8_0, &[1e9; 32]).unwrap_err();
    assert!(
        matches!(err, QuantError::ScaleOverflow { block: 0, .. }),
        "{err}"
    );
    // Plain float types convert anything, like numpy.
    assert!(quantize(DType::F16, &[f32::INFINITY, 1e9]).is_ok());
}

#[test]
fn every_dequantizable_type_is_supported() {
    for id in 0..40 {
        if let Some(dtype) = DType::from_ggml_id(id) {
            let n = dtype.block_elems();
            let bytes = vec![0u8; dtype.block_bytes()];
            assert_eq!(
                dequantize(dtype, &bytes, n).is_ok(),
                dtype.is_dequantizable(),
                "{dtype}"
            );
            if is_quantizable(dtype) {
                assert!(dtype.is_dequantizable(), "{dtype}");
            }
        }
    }
}

#[test]
fn parallel_dequantize_matches_row_path() {
    let mut rng = Normal(3);
    for dtype in [DType::Q4K, DType::Q8_0, DType::BF16] {
        // Not a multiple of the parallel chunk, so the last task is short.
        let n = PAR_ELEMS * 2 + dtype.block_elems() * 5;
        let x: Vec<f32> = (0..n).map(|_| rng.sample()).collect();
        let q = quantize(dtype, &x).unwrap();
        let whole = dequantize(dtype, &q, n).unwrap();
        let mut rows = vec![0.0; n];
        dequantize_into(dtype, &q, &mut rows).unwrap();
        assert!(
            whole
                .iter()
                .zip(&rows)
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "{dtype}"
        );
    }
}
