//! How the matrices of the int8 GEMV types lie in device memory: in panels of [`GROUP`] rows,
//! stored round by round (`WlPanel` in `hip/quant.h` has the kernels' side and the why). A round
//! is [`ROUND`] values of a row, RB = its device bytes (whole blocks); a row of K values has
//! nr = ceil(K / ROUND) rounds, the last one padded; round `c` of row `j` sits at
//! `(j / G) · G · nr · RB + c · G · RB + (j % G) · RB`. Tensors of more dimensions are matrices of
//! their last dimension's rows. Every other type stays row-major.

use super::kernels::{self, QGEMV_TYPES};
use crate::tensor::DType;

/// Values of a row per round: the 32 items of 32 values one warp's lanes take at once.
pub const ROUND: usize = 1024;

/// Rows per panel: `DS_WL_G`, which build.rs passes to every kernel and writes into the kernel
/// table (1: row-major, rows padded to whole rounds; `DELTASPEC_HIP_DEFINES=DS_WL_G=1` builds
/// that for comparisons).
pub const GROUP: usize = kernels::WL_GROUP;

/// Device bytes of one round of a row of `dtype`, where `dtype` is stored in panels (`None`:
/// row-major).
pub fn round_bytes(dtype: DType) -> Option<usize> {
    let suffix = kernels::weight_kernel(dtype, ROUND)?;
    if !QGEMV_TYPES.contains(&suffix) {
        return None;
    }
    let (qk, qb, _) = kernels::geometry(suffix);
    Some(ROUND / qk * qb)
}

/// Device bytes of `rows` rows of `k` values of `dtype` in panels, or `None` where `dtype` is
/// row-major or `k` is not whole blocks.
pub fn panel_bytes(dtype: DType, rows: usize, k: usize) -> Option<usize> {
    let rb = round_bytes(dtype)?;
    kernels::dev_bytes_for(dtype, k)?;
    Some(rows.div_ceil(GROUP) * GROUP * k.div_ceil(ROUND) * rb)
}

/// The device copy in panels of the row-major device bytes `dev` of a tensor of `dtype` holding
/// `numel` values in rows of `k`, or `None` where `dtype` stays row-major (or the bytes do not fit
/// the shape: they stay as they are, for the weight check to report).
pub fn panels_of(dtype: DType, k: usize, numel: usize, dev: &[u8]) -> Option<Vec<u8>> {
    let rb = round_bytes(dtype)?;
    let row_bytes = kernels::dev_bytes_for(dtype, k).filter(|&r| r > 0)?;
    let rows = dev.len() / row_bytes;
    (rows * row_bytes == dev.len() && rows * k == numel)
        .then(|| to_panels(dev, rows, row_bytes, rb, GROUP))
}

/// The panel copy of the row-major device bytes `dev` of `rows` rows of `row_bytes` bytes, rounds
/// of `rb` bytes, `g` rows per panel (padding zero).
pub fn to_panels(dev: &[u8], rows: usize, row_bytes: usize, rb: usize, g: usize) -> Vec<u8> {
    debug_assert_eq!(dev.len(), rows * row_bytes);
    let nr = row_bytes.div_ceil(rb);
    let mut out = vec![0u8; rows.div_ceil(g) * g * nr * rb];
    for (j, row) in dev.chunks_exact(row_bytes.max(1)).enumerate() {
        let base = (j / g) * g * nr * rb + (j % g) * rb;
        for (c, piece) in row.chunks(rb).enumerate() {
            let at = base + c * g * rb;
            out[at..at + piece.len()].copy_from_slice(piece);
        }
    }
    out
}

/// Rows a packed matrix reserves in a shared panel are a multiple of this: the kernels read whole
/// tiles of rows past a matrix's last one (8-row staged runs, 16-row matrix-core tiles) and
/// discard them, so those reads stay inside the shared panel.
pub const PACK_ROWS: usize = 32;

/// A matrix of fewer rows than a panel, to be packed: its round bytes (the type's), rounds and rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PackItem {
    pub rb: usize,
    pub nr: usize,
    pub rows: usize,
}

/// Where packed matrices go: `arenas[a]` = (round bytes, rounds) of shared panel a, and
/// `slots[i]` = (arena, first row) of item i, or `None` for an item left in its own panel (or
/// none given).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct PackPlan {
    pub arenas: Vec<(usize, usize)>,
    pub slots: Vec<Option<(usize, usize)>>,
}

impl PackPlan {
    /// Device bytes of arena `a`: one panel of `g` rows over its rounds.
    pub fn arena_bytes(&self, a: usize, g: usize) -> usize {
        let (rb, nr) = self.arenas[a];
        g * nr * rb
    }
}

/// Packs matrices of fewer rows than a panel of `g` rows into shared panels. A panel-stored matrix
/// pads its rows to whole panels; where a panel is much larger than a matrix (`DS_WL_G` = 1024
/// against the 48-row DeltaNet β/α projections of the 27B: 255 MB of padding) that wastes device
/// memory. A panel's rows are independent columns of its rounds, so several matrices of one type
/// can share one: a matrix at first row `o` is addressed from the panel's start + `o` · RB with
/// the kernels' usual offsets (round c of its row j at c · g · RB + j · RB), as long as
/// `o` + its rows ≤ g. Items of equal round bytes share (first fit, largest first); an arena
/// has the most rounds of its members. Items of `g - PACK_ROWS` rows or more keep their own panel.
pub fn plan_pack(items: &[Option<PackItem>], g: usize) -> PackPlan {
    let mut plan = PackPlan {
        arenas: Vec::new(),
        slots: vec![None; items.len()],
    };
    let mut used: Vec<usize> = Vec::new(); // rows taken in each arena
    let mut order: Vec<(usize, PackItem)> = items
        .iter()
        .enumerate()
        .filter_map(|(i, it)| it.map(|it| (i, it)))
        .collect();
    order.sort_by_key(|&(_, it)| std::cmp::Reverse(it.rows));
    for (i, it) in order {
        let need = it.rows.next_multiple_of(PACK_ROWS);
        if it.rows == 0 || need >= g {
            continue;
        }
        let fit =
            (0..plan.arenas.len()).find(|&a| plan.arenas[a].0 == it.rb && used[a] + need <= g);
        let a = fit.unwrap_or_else(|| {
            plan.arenas.push((it.rb, 0));
            used.push(0);
            plan.arenas.len() - 1
        });
        plan.slots[i] = Some((a, used[a]));
        used[a] += need;
        plan.arenas[a].1 = plan.arenas[a].1.max(it.nr);
    }
    plan
}

/// The packing item of a host tensor stored in panels with fewer rows than a panel, else `None`.
pub fn pack_item(t: &crate::backend::HostTensor) -> Option<PackItem> {
    let rb = round_bytes(t.dtype)?;
    let k = t.shape.last().copied().filter(|&k| k > 0)?;
    let row_bytes = kernels::dev_bytes_for(t.dtype, k).filter(|&r| r > 0)?;
    let rows = t.numel() / k;
    (rows * k == t.numel() && rows < GROUP).then_some(PackItem {
        rb,
        nr: row_bytes.div_ceil(rb),
        rows,
    })
}

/// Copies a matrix's panel bytes (`to_panels` with `g` rows, one panel: `rows` < g) into an
/// arena of `g` rows at first row `o`: each round's `rows` · `rb` bytes.
pub fn place_in_arena(arena: &mut [u8], panel: &[u8], rows: usize, rb: usize, g: usize, o: usize) {
    let nr = panel.len() / (g * rb);
    for c in 0..nr {
        let from = c * g * rb;
        let at = c * g * rb + o * rb;
        arena[at..at + rows * rb].copy_from_slice(&panel[from..from + rows * rb]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_are_whole_blocks_of_1024_values() {
        assert_eq!(round_bytes(DType::Iq4Xs), Some(4 * 136));
        assert_eq!(round_bytes(DType::Q6K), Some(4 * kernels::Q6K_DEV_BLOCK));
        assert_eq!(round_bytes(DType::Q8_0), Some(32 * 34));
        assert_eq!(round_bytes(DType::Q4_0), None);
        assert_eq!(round_bytes(DType::F16), None);
        let g = GROUP;
        assert_eq!(panel_bytes(DType::Iq4Xs, 1, 256), Some(g * 544));
        assert_eq!(
            panel_bytes(DType::Iq4Xs, g + 1, 2048),
            Some(2 * g * 2 * 544)
        );
        assert_eq!(panel_bytes(DType::Iq4Xs, 3, 100), None);
    }

    #[test]
    fn round_c_of_row_j_lands_in_its_panel() {
        // 5 rows of 10 bytes, rounds of 4 (4 + 4 + 2, padded), panels of 2 rows (the last half
        // empty).
        let (rows, rb, g) = (5, 4, 2);
        let dev: Vec<u8> = (1..=50).collect();
        let p = to_panels(&dev, rows, 10, rb, g);
        assert_eq!(p.len(), 3 * 2 * 3 * 4);
        for j in 0..rows {
            for b in 0..10 {
                let (c, o) = (b / rb, b % rb);
                let at = (j / g) * g * 3 * rb + c * g * rb + (j % g) * rb + o;
                assert_eq!(p[at], dev[j * 10 + b], "row {j} byte {b}");
            }
        }
        let nonzero = p.iter().filter(|&&v| v != 0).count();
        assert_eq!(nonzero, 50, "padding stays zero");
    }
    #[test]
    fn small_matrices_share_panels_by_type() {
        let g = 1024;
        let it = |rb, nr, rows| PackItem { rb, nr, rows };
        let items = [
            Some(it(544, 5, 48)),   // β
            Some(it(544, 5, 48)),   // α
            Some(it(544, 5, 5120)), // a full matrix: its own panels
            Some(it(840, 5, 48)),   // another type: its own arena
            Some(it(544, 2, 1000)), // 1024 rows reserved: its own panel
            Some(it(544, 3, 960)),  // opens arena 0, which one 48-row matrix (64 rows) then fills
        ];
        let p = plan_pack(&items, g);
        // Largest first: 960 opens arena 0, the 48s follow in it (960 + 64 = 1024 fits one).
        assert_eq!(p.slots[5], Some((0, 0)));
        assert_eq!(p.slots[0], Some((0, 960)));
        assert_eq!(p.slots[1], Some((1, 0)));
        assert_eq!(p.slots[2], None);
        assert_eq!(p.slots[4], None);
        assert_eq!(p.slots[3], Some((2, 0)));
        assert_eq!(p.arenas, vec![(544, 5), (544, 5), (840, 5)]);
        assert_eq!(p.arena_bytes(0, g), g * 5 * 544);
        // 96 β/α-like matrices of 48 rows need 96 · 64 / 1024 = 6 panels, not 96.
        let many = vec![Some(it(544, 5, 48)); 96];
        assert_eq!(plan_pack(&many, g).arenas.len(), 6);
    }

    #[test]
    fn a_packed_matrix_reads_as_its_own_panel_from_its_first_row() {
        let (g, rb, rows, row_bytes) = (8, 4, 3, 10); // 3 rounds, the last padded
        let dev: Vec<u8> = (1..=30).collect();
        let panel = to_panels(&dev, rows, row_bytes, rb, g);
        let mut arena = vec![0u8; g * 3 * rb];
        place_in_arena(&mut arena, &panel, rows, rb, g, 4);
        for j in 0..rows {
            for b in 0..row_bytes {
                let (c, o) = (b / rb, b % rb);
                // From the matrix's pointer (arena + 4 · rb), the kernels' offset of byte b of row j.
                let at = 4 * rb + c * g * rb + j * rb + o;
                assert_eq!(arena[at], dev[j * row_bytes + b], "row {j} byte {b}");
            }
        }
        assert_eq!(arena.iter().filter(|&&v| v != 0).count(), 30);
    }
}
