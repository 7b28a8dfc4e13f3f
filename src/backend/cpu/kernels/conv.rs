//! `ConvStep`: the causal depthwise short convolution of the delta-net block, continuing from
//! a state that holds the previous `K − 1` input rows.

use super::math::silu;

/// `x [T, C]`, `w [C, K]`, `state [K−1, C]` (oldest row first) -> `y [T, C]`:
/// `y[t, c] = silu(Σ_{j<K} w[c, j] · xin[t + j, c])` where `xin` is the state rows followed by
/// the new rows. Afterwards the state holds the last `K − 1` rows of `xin`.
///
/// With a zero state this is HF's zero-padded causal `conv1d` + SiLU over a fresh sequence, and
/// splitting a sequence over several calls gives the same outputs as one call.
pub(super) fn conv_step(
    x: &[f32],
    w: &[f32],
    channels: usize,
    width: usize,
    state: &mut [f32],
    y: &mut [f32],
) {
    if channels == 0 {
        return;
    }
    let steps = x.len() / channels;
    // The whole input window, materialised: with T < K−1 the new state still includes old rows,
    // so updating the state in place while reading it would be wrong.
    let xin: Vec<f32> = state.iter().chain(x).copied().collect();
    for (t, out) in y.chunks_exact_mut(channels).enumerate() {
        for (c, o) in out.iter_mut().enumerate() {
            let taps = &w[c * width..(c + 1) * width];
            let mut acc = 0.0f32;
            for (j, wj) in taps.iter().enumerate() {
                acc += wj * xin[(t + j) * channels + c];
            }
            *o = silu(acc);
        }
    }
    state.copy_from_slice(&xin[steps * channels..]);
}

/// [`conv_step`] over a tree of rows (`Op::ConvTree`): row t's window is its parent's conv
/// state (`tokens[parent[t]]`, or `state` for `parent[t] < 0`) followed by `x[t]`, and its
/// own conv state (the window's last K − 1 rows) goes to `tokens[t]`. For a chain
/// (`parent[t] = t − 1`) the outputs and the last row's state equal [`conv_step`]'s.
/// `parent` was checked (`parent[t] < t`).
#[allow(clippy::too_many_arguments)]
pub(super) fn conv_tree(
    x: &[f32],
    w: &[f32],
    channels: usize,
    width: usize,
    parent: &[i32],
    state: &[f32],
    tokens: &mut [f32],
    y: &mut [f32],
) {
    let hist = (width - 1) * channels;
    let mut win = vec![0.0f32; width * channels];
    for (t, (xr, out)) in x
        .chunks_exact(channels)
        .zip(y.chunks_exact_mut(channels))
        .enumerate()
    {
        let prev = match usize::try_from(parent[t]) {
            Ok(p) => &tokens[p * hist..(p + 1) * hist],
            Err(_) => state,
        };
        win[..hist].copy_from_slice(prev);
        win[hist..].copy_from_slice(xr);
        for (c, o) in out.iter_mut().enumerate() {
            let taps = &w[c * width..(c + 1) * width];
            let mut acc = 0.0f32;
            for (j, wj) in taps.iter().enumerate() {
                acc += wj * win[j * channels + c];
            }
            *o = silu(acc);
        }
        tokens[t * hist..(t + 1) * hist].copy_from_slice(&win[channels..]);
    }
}
