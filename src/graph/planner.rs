//! Buffer planner: assigns node outputs to reusable buffer slots by liveness.
//!
//! Outputs of a node never share a slot with that node's inputs, so kernels need not handle
//! aliasing. `Reshape` outputs are views of their source's slot. Graph outputs live to the end.

use super::{Graph, Op, TensorId};

#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// For each tensor: the slot holding its data (node outputs and their views only).
    pub slot_of: Vec<Option<usize>>,
    /// Size in bytes of each slot.
    pub slot_bytes: Vec<usize>,
}

/// Per tensor: the last node index at which its storage (as a root) is read; `usize::MAX` for
/// graph outputs (never freed).
pub fn last_uses(g: &Graph) -> Vec<usize> {
    let mut last_use = vec![0usize; g.tensors.len()];
    for (i, node) in g.nodes.iter().enumerate() {
        for id in &node.inputs {
            let r = g.storage_root(*id).index();
            last_use[r] = last_use[r].max(i);
        }
    }
    for (_, id) in &g.outputs {
        last_use[g.storage_root(*id).index()] = usize::MAX;
    }
    last_use
}

impl Plan {
    pub fn total_bytes(&self) -> usize {
        self.slot_bytes.iter().sum()
    }

    pub fn new(g: &Graph) -> Plan {
        Self::with_uses(g, &[])
    }

    /// Like [`Plan::new`], with extra reads: `(tensor, node)` keeps `tensor` live through node
    /// `node`. Backends that run a later node's work early (fused dispatches) use it so the
    /// early writes cannot land in a slot that is still in use.
    pub fn with_uses(g: &Graph, extra: &[(TensorId, usize)]) -> Plan {
        let n = g.tensors.len();
        let mut last_use = last_uses(g);
        for (id, node) in extra {
            let r = g.storage_root(*id).index();
            if last_use[r] != usize::MAX {
                last_use[r] = last_use[r].max(*node);
            }
        }

        let mut slot_of = vec![None; n];
        let mut slot_bytes: Vec<usize> = Vec::new();
        let mut free: Vec<usize> = Vec::new();
        let mut live: Vec<TensorId> = Vec::new();

        for (i, node) in g.nodes.iter().enumerate() {
            for out in &node.outputs {
                if matches!(node.op, Op::Reshape { .. }) {
                    slot_of[out.index()] = slot_of[g.storage_root(*out).index()];
                    continue;
                }
                let need = g.tensor(*out).bytes().max(4);
                // Best fit among free slots; else grow the largest free slot; else a new slot.
                let pick = free
                    .iter()
                    .enumerate()
                    .filter(|(_, s)| slot_bytes[**s] >= need)
                    .min_by_key(|(_, s)| slot_bytes[**s])
                    .map(|(k, _)| k)
                    .or_else(|| (0..free.len()).max_by_key(|k| slot_bytes[free[*k]]));
                let slot = match pick {
                    Some(k) => free.swap_remove(k),
                    None => {
                        slot_bytes.push(0);
                        slot_bytes.len() - 1
                    }
                };
                slot_bytes[slot] = slot_bytes[slot].max(need);
                slot_of[out.index()] = Some(slot);
                live.push(*out);
            }
            // Free whatever was last read by this node (after its outputs were placed).
            live.retain(|id| {
                let dead = last_use[id.index()] <= i;
                if dead && let Some(s) = slot_of[id.index()] {
                    free.push(s);
                }
                !dead
            });
        }
        Plan {
            slot_of,
            slot_bytes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::GraphBuilder;
    use crate::tensor::DType;

    #[test]
    fn reuses_dead_buffers_and_never_aliases_inputs() {
        let mut b = GraphBuilder::new();
        let x = b.input("x", DType::F32, &[4, 8]).unwrap();
        let w = b.weight("w", DType::F32, &[8]).unwrap();
        let a = b.rms_norm(x, w, 1e-6).unwrap();
        let c = b.rms_norm(a, w, 1e-6).unwrap();
        let d = b.rms_norm(c, w, 1e-6).unwrap();
        let e = b.rms_norm(d, w, 1e-6).unwrap();
        b.output("e", e).unwrap();
        let g = b.build();
        let p = Plan::new(&g);
        let s = |id: TensorId| p.slot_of[id.index()].unwrap();
        assert_ne!(s(a), s(c));
        assert_ne!(s(c), s(d));
        assert_eq!(s(a), s(d), "a is dead once c exists");
        assert_eq!(p.slot_bytes.len(), 2);
        assert!(p.slot_of[x.index()].is_none());
    }
}
