//! `ArgMax` and `TopK` over the last dimension.
//!
//! Both use one order: larger values first, NaN above every number (as `torch.topk` and
//! `torch.argmax` treat it), `-0.0 == +0.0`, and equal values in index order, so that
//! `ArgMax` always agrees with `TopK { k: 1 }`.

use std::cmp::Ordering;

/// `a` before `b` in the selection order (a strict total order on `(value, index)`).
fn rank(a: (usize, f32), b: (usize, f32)) -> Ordering {
    let by_value = match (a.1.is_nan(), b.1.is_nan()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Less,
        (false, true) => Ordering::Greater,
        // Neither is NaN, so the comparison is total; descending order.
        (false, false) => b.1.partial_cmp(&a.1).unwrap_or(Ordering::Equal),
    };
    by_value.then(a.0.cmp(&b.0))
}

/// `out[r]` = index of the first maximum of row `r` (rows of `width` values).
pub(super) fn argmax(x: &[f32], width: usize, out: &mut [i32]) {
    for (row, o) in x.chunks_exact(width).zip(out) {
        let best = row
            .iter()
            .copied()
            .enumerate()
            .min_by(|a, b| rank(*a, *b))
            .map_or(0, |(i, _)| i);
        *o = best as i32;
    }
}

/// The `k` first entries of each row in selection order: values and their indices.
pub(super) fn top_k(x: &[f32], width: usize, k: usize, values: &mut [f32], indices: &mut [i32]) {
    let rows = x
        .chunks_exact(width)
        .zip(values.chunks_exact_mut(k))
        .zip(indices.chunks_exact_mut(k));
    let mut order: Vec<(usize, f32)> = Vec::with_capacity(width);
    for ((row, vals), idxs) in rows {
        order.clear();
        order.extend(row.iter().copied().enumerate());
        // Partition the k best to the front, then sort only those: the order is total, so the
        // result is the same as a full sort.
        if k < order.len() {
            order.select_nth_unstable_by(k - 1, |a, b| rank(*a, *b));
        }
        let best = &mut order[..k];
        best.sort_unstable_by(|a, b| rank(*a, *b));
        for ((v, i), (idx, val)) in vals.iter_mut().zip(idxs.iter_mut()).zip(best.iter()) {
            *v = *val;
            *i = *idx as i32;
        }
    }
}
