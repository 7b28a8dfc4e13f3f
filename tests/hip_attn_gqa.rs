//! The grouped-query causal attention kernel (`attn_gqa_hd*` in `hip/attention.hip`): one block
//! per kv head and key split for all of the kv head's query heads, so each K/V row is read once
//! for them. Decode steps, verify blocks and tree rows share the per-head kernel's key order, so
//! the grouped kernel must give exactly its bits, and the CPU reference's values within
//! tolerance. Needs a GPU (or the CPU emulator of the CUDA driver, `tools/device/build_emu.sh`);
//! skipped without one unless `DELTASPEC_REQUIRE_GPU=1`.

mod common;

use common::{f32s, rel_err};
use deltaspec::backend::{self, Backend, HostData, StateDecl, StatesId, WeightStore, WeightsId};
use deltaspec::graph::{AttnParams, Graph, GraphBuilder};
use deltaspec::util::rng::Rng;

/// Cache rows: three key splits of 256 on the decode grid.
const CAP: usize = 700;

/// One causal attention over the caches; `tree`: with a `[t, t]` mask over the new rows.
fn graph(p: AttnParams, t: usize, tree: bool) -> Graph {
    let (nh, nkv, hd) = (p.n_heads, p.n_kv_heads, p.head_dim);
    let mut b = GraphBuilder::new();
    let q = b
        .input("q", deltaspec::tensor::DType::F32, &[t, nh, hd])
        .unwrap();
    let k = b
        .input("k", deltaspec::tensor::DType::F32, &[t, nkv, hd])
        .unwrap();
    let v = b
        .input("v", deltaspec::tensor::DType::F32, &[t, nkv, hd])
        .unwrap();
    let pos = b.input("pos", deltaspec::tensor::DType::I32, &[t]).unwrap();
    let kc = b.state("kc", &[CAP, nkv, hd]).unwrap();
    let vc = b.state("vc", &[CAP, nkv, hd]).unwrap();
    let o = if tree {
        let mask = b
            .input("mask", deltaspec::tensor::DType::I32, &[t, t])
            .unwrap();
        b.attention_tree(p, q, k, v, pos, mask, kc, vc).unwrap()
    } else {
        b.attention(p, q, k, v, pos, kc, vc).unwrap()
    };
    b.output("o", o).unwrap();
    b.build()
}

struct Side {
    be: Box<dyn Backend>,
    w: WeightsId,
    s: StatesId,
}

impl Side {
    fn new(mut be: Box<dyn Backend>, decls: &[StateDecl], kc: &[f32], vc: &[f32]) -> Side {
        let w = be.upload_weights(&WeightStore::default()).unwrap();
        let s = be.alloc_states(decls).unwrap();
        be.write_state(s, "kc", kc).unwrap();
        be.write_state(s, "vc", vc).unwrap();
        Side { be, w, s }
    }

    fn run(&mut self, g: &Graph, inputs: &[(&str, HostData)]) -> Vec<f32> {
        let e = self.be.compile(g).unwrap();
        let out = self.be.run(e, self.w, self.s, inputs).unwrap();
        f32s(&out[0].1)
    }
}

#[test]
fn grouped_query_attention_gives_the_per_head_kernels_bits() {
    // (query heads, kv heads, head dim): groups of 6 (the 27B's), 4, 2, 8 and 3, head dims of
    // every register width (HDL 8, 4, 2, 1) and odd ones.
    for (nh, nkv, hd) in [
        (6, 1, 256),
        (8, 2, 128),
        (4, 2, 40),
        (16, 2, 64),
        (9, 3, 17),
    ] {
        let Some(mut off) = common::open_hip("attn_gqa") else {
            return;
        };
        let Some(mut on) = common::open_hip("attn_gqa") else {
            return;
        };
        off.set_attn_gqa(None);
        on.set_attn_gqa(Some(1));
        let p = AttnParams {
            n_heads: nh,
            n_kv_heads: nkv,
            head_dim: hd,
            scale: 1.0 / (hd as f32).sqrt(),
        };
        let decls = [
            StateDecl::new("kc", &[CAP, nkv, hd]),
            StateDecl::new("vc", &[CAP, nkv, hd]),
        ];
        let mut rng = Rng::new((nh * 1000 + nkv * 100 + hd) as u64);
        let kc = rng.vec_normal(CAP * nkv * hd, 1.0);
        let vc = rng.vec_normal(CAP * nkv * hd, 1.0);
        let mut sides: Vec<Side> = [
            Box::new(off) as Box<dyn Backend>,
            Box::new(on),
            backend::create("cpu").unwrap(),
        ]
        .into_iter()
        .map(|be| Side::new(be, &decls, &kc, &vc))
        .collect();
        // (positions, tree mask): decode in the first, second and last split, a verify block
        // across a split boundary, and a tree of a root and two siblings.
        let cases: [(Vec<i32>, Option<Vec<i32>>); 5] = [
            (vec![5], None),
            (vec![300], None),
            (vec![699], None),
            ((510..514).collect(), None),
            (vec![600, 601, 602], Some(vec![1, 0, 0, 1, 1, 0, 1, 0, 1])),
        ];
        for (pos, mask) in cases {
            let t = pos.len();
            let what = format!(
                "nh={nh} nkv={nkv} hd={hd} pos={pos:?} tree={}",
                mask.is_some()
            );
            let mut inputs = vec![
                ("q", HostData::F32(rng.vec_normal(t * nh * hd, 1.0))),
                ("k", HostData::F32(rng.vec_normal(t * nkv * hd, 1.0))),
                ("v", HostData::F32(rng.vec_normal(t * nkv * hd, 1.0))),
                ("pos", HostData::I32(pos.clone())),
            ];
            if let Some(m) = &mask {
                inputs.push(("mask", HostData::I32(m.clone())));
            }
            let g = graph(p, t, mask.is_some());
            let outs: Vec<Vec<f32>> = sides.iter_mut().map(|s| s.run(&g, &inputs)).collect();
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(
                bits(&outs[1]),
                bits(&outs[0]),
                "{what}: grouped != per head"
            );
            let e = rel_err(&outs[1], &outs[2]);
            assert!(
                e < 1e-5,
                "{what}: against the CPU reference, relative error {e}"
            );
        }
    }
}
