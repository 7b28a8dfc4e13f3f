//! Weight layouts the WGSL kernels read faster than ggml's, made at upload (see
//! `shaders::VEC4_LAYOUTS` and the matching sections of `shaders/dequant.wgsl`).

/// Bytes of one IQ4_XS block: f16 d, u16 scales_h, 4 bytes scales_l, 128 qs bytes.
const BLOCK: usize = 136;
/// Bytes of a block's header (d, scales_h, scales_l).
const HDR: usize = 8;

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

    #[test]
    fn refuses_partial_blocks() {
        assert!(iq4_xs_pairs(&[0; BLOCK + 1]).is_none());
        assert_eq!(iq4_xs_pairs(&[]), Some(Vec::new()));
    }
}
