//! Weight layouts the WGSL kernels read faster than ggml's, made at upload. Each has a section
//! of `shaders/dequant.wgsl` that replaces the type's ggml layout section ("<type> ggml"), and
//! its buffers are bound as `array<vec4<u32>>`, so 16-byte loads are plain loads.

use crate::tensor::DType;

/// A re-layout of one weight type.
pub struct Layout {
    pub dtype: DType,
    /// The shader flag that selects `section` for the type's buffers.
    pub flag: &'static str,
    /// The dequant.wgsl section with the layout's address helpers.
    pub section: &'static str,
    /// Re-lays a buffer of whole blocks (`None`: not whole blocks).
    pub relay: fn(&[u8]) -> Option<Vec<u8>>,
    /// Bytes a buffer may grow by (a part of a split weight must leave room for them).
    pub growth: usize,
}

/// Every layout (`DELTASPEC_WGPU_RELAYOUT` names them by type).
pub const LAYOUTS: &[Layout] = &[
    Layout {
        dtype: DType::Iq4Xs,
        flag: "IQ4P",
        section: "IQ4_XS pairs",
        relay: iq4_xs_pairs,
        growth: HDR,
    },
    Layout {
        dtype: DType::Q8_0,
        flag: "Q8G",
        section: "Q8_0 groups",
        relay: q8_0_groups,
        growth: Q8_GROUP_D - 2,
    },
];

/// The layout of `t`, if it has one.
pub fn layout_of(t: DType) -> Option<&'static Layout> {
    LAYOUTS.iter().find(|l| l.dtype == t)
}

/// Bytes of one IQ4_XS block: f16 d, u16 scales_h, 4 bytes scales_l, 128 qs bytes.
const BLOCK: usize = 136;
/// Bytes of a block's header (d, scales_h, scales_l).
const HDR: usize = 8;
/// Bytes of one Q8_0 block (f16 d, 32 qs bytes) and blocks per group.
const Q8_BLOCK: usize = 34;
const Q8_GROUP: usize = 8;
/// Bytes of a group's scales (8 f16, zero-padded in a short last group).
const Q8_GROUP_D: usize = 2 * Q8_GROUP;

/// Q8_0 blocks in groups of 8: [d0 … d7][qs0] … [qs7] (272 bytes, as many as the 8 blocks), so
/// every qs run starts 16-byte aligned and the group's scales are one 16-byte load. A short
/// last group of r blocks keeps 16 scale bytes (r < 8: 16 − 2r bytes more than ggml's).
/// `None` unless `bytes` are whole blocks.
pub fn q8_0_groups(bytes: &[u8]) -> Option<Vec<u8>> {
    if !bytes.len().is_multiple_of(Q8_BLOCK) {
        return None;
    }
    let mut out = Vec::with_capacity(bytes.len() + Q8_GROUP_D);
    for group in bytes.chunks(Q8_GROUP * Q8_BLOCK) {
        let mut d = [0u8; Q8_GROUP_D];
        for (j, blk) in group.chunks(Q8_BLOCK).enumerate() {
            d[2 * j..2 * j + 2].copy_from_slice(&blk[..2]);
        }
        out.extend_from_slice(&d);
        for blk in group.chunks(Q8_BLOCK) {
            out.extend_from_slice(&blk[2..]);
        }
    }
    Some(out)
}

/// IQ4_XS blocks in pairs: [hdr0 hdr1][qs0][qs1] (272 bytes), so every qs run starts 16-byte
/// aligned and both headers are one 16-byte load. An odd last block stands alone as
/// [hdr 0u64][qs] (144 bytes: 8 more than ggml's). `None` unless `bytes` are whole blocks.
pub fn iq4_xs_pairs(bytes: &[u8]) -> Option<Vec<u8>> {
    if !bytes.len().is_multiple_of(BLOCK) {
        return None;
    }
    let mut out = Vec::with_capacity(bytes.len() + HDR);
    for pair in bytes.chunks(2 * BLOCK) {
        let (a, b) = pair.split_at(BLOCK);
        out.extend_from_slice(&a[..HDR]);
        if b.is_empty() {
            out.extend_from_slice(&[0; HDR]);
            out.extend_from_slice(&a[HDR..]);
        } else {
            out.extend_from_slice(&b[..HDR]);
            out.extend_from_slice(&a[HDR..]);
            out.extend_from_slice(&b[HDR..]);
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Block g's header and qs as the "IQ4_XS pairs" section of dequant.wgsl addresses them
    /// (in 16-byte units: header vec4 (g >> 1)·17, qs vec4 (g >> 1)·17 + 1 + 8·(g & 1) + ib).
    fn read(laid: &[u8], g: usize) -> (Vec<u8>, Vec<u8>) {
        let v = |i: usize| &laid[16 * i..16 * i + 16];
        let h = v((g >> 1) * 17);
        let hdr = if g & 1 == 1 { &h[8..] } else { &h[..8] };
        let qs: Vec<u8> = (0..8)
            .flat_map(|ib| v((g >> 1) * 17 + 1 + 8 * (g & 1) + ib).to_vec())
            .collect();
        (hdr.to_vec(), qs)
    }

    #[test]
    fn pairs_address_like_the_shader() {
        for blocks in [1usize, 2, 5, 8] {
            let src: Vec<u8> = (0..blocks * BLOCK)
                .map(|i| (i * 7 + i / 255) as u8)
                .collect();
            let laid = iq4_xs_pairs(&src).expect("whole blocks");
            assert_eq!(
                laid.len(),
                blocks * BLOCK + if blocks % 2 == 1 { HDR } else { 0 }
            );
            for g in 0..blocks {
                let blk = &src[g * BLOCK..(g + 1) * BLOCK];
                let (hdr, qs) = read(&laid, g);
                assert_eq!(hdr, &blk[..HDR], "header of block {g} of {blocks}");
                assert_eq!(qs, &blk[HDR..], "qs of block {g} of {blocks}");
            }
        }
    }

    /// Block g's scale bytes and qs as the "Q8_0 groups" section addresses them (16-byte
    /// units: scales (g >> 3)·17, half g & 1 of component (g & 7) >> 1; qs (g >> 3)·17 + 1 +
    /// 2·(g & 7) and the next).
    fn read_q8(laid: &[u8], g: usize) -> (Vec<u8>, Vec<u8>) {
        let v = |i: usize| &laid[16 * i..16 * i + 16];
        let j = g & 7;
        let d = v((g >> 3) * 17)[2 * j..2 * j + 2].to_vec();
        let q0 = (g >> 3) * 17 + 1 + 2 * j;
        (d, [v(q0), v(q0 + 1)].concat())
    }

    #[test]
    fn q8_groups_address_like_the_shader() {
        for blocks in [1usize, 7, 8, 9, 21] {
            let src: Vec<u8> = (0..blocks * Q8_BLOCK)
                .map(|i| (i * 5 + i / 251) as u8)
                .collect();
            let laid = q8_0_groups(&src).expect("whole blocks");
            let r = blocks % Q8_GROUP;
            let grow = if r == 0 { 0 } else { Q8_GROUP_D - 2 * r };
            assert_eq!(laid.len(), blocks * Q8_BLOCK + grow);
            assert!(grow <= layout_of(DType::Q8_0).unwrap().growth);
            for g in 0..blocks {
                let blk = &src[g * Q8_BLOCK..(g + 1) * Q8_BLOCK];
                let (d, qs) = read_q8(&laid, g);
                assert_eq!(d, &blk[..2], "scale of block {g} of {blocks}");
                assert_eq!(qs, &blk[2..], "qs of block {g} of {blocks}");
            }
        }
    }

    #[test]
    fn refuses_partial_blocks() {
        for l in LAYOUTS {
            let blk = l.dtype.bytes_for(l.dtype.block_elems()).unwrap();
            assert!((l.relay)(&vec![0; blk + 1]).is_none(), "{}", l.dtype);
            assert_eq!((l.relay)(&[]), Some(Vec::new()), "{}", l.dtype);
        }
    }
}
