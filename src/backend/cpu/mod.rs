//! The CPU reference backend: plain f32 math, threaded with rayon where rows are independent.
//!
//! It is the oracle for the GPU backends, so kernels favour clarity and exactness over speed:
//! weights are dequantized row by row with the reference dequantizers, reductions run in f32
//! in index order, the gated delta net uses the recurrent form token by token.

mod exec;
pub mod kernels;

use super::{
    Backend, BackendError, ExecId, HostData, HostTensor, StateDecl, StatesId, WeightStore,
    WeightsId,
};
use crate::graph::{Graph, Plan};
use std::collections::HashMap;
use std::sync::Arc;

const NAME: &str = "cpu";

fn bad_handle(what: String) -> BackendError {
    BackendError::BadHandle {
        backend: NAME.into(),
        what,
    }
}

struct StateSet {
    decls: Vec<StateDecl>,
    data: HashMap<String, Vec<f32>>,
}

struct Compiled {
    graph: Arc<Graph>,
    plan: Plan,
}

#[derive(Default)]
pub struct CpuBackend {
    weights: Vec<Option<Arc<WeightStore>>>,
    states: Vec<Option<StateSet>>,
    execs: Vec<Compiled>,
}

impl CpuBackend {
    pub fn new() -> Self {
        Self::default()
    }

    fn state_set(&mut self, id: StatesId) -> Result<&mut StateSet, BackendError> {
        self.states
            .get_mut(id.0 as usize)
            .and_then(|s| s.as_mut())
            .ok_or_else(|| bad_handle(format!("states {}", id.0)))
    }
}

impl Backend for CpuBackend {
    fn name(&self) -> String {
        NAME.into()
    }

    fn upload_weights(&mut self, weights: &WeightStore) -> Result<WeightsId, BackendError> {
        // Host tensors are shared (mmap-backed or Arc'd), so this clones handles, not data.
        self.weights.push(Some(Arc::new(weights.clone())));
        Ok(WeightsId(self.weights.len() as u32 - 1))
    }

    fn alloc_states(&mut self, decls: &[StateDecl]) -> Result<StatesId, BackendError> {
        let mut data = HashMap::new();
        for d in decls {
            if data
                .insert(d.name.clone(), vec![0.0f32; d.numel()])
                .is_some()
            {
                return Err(BackendError::Device {
                    backend: NAME.into(),
                    msg: format!("state {} declared twice", d.name),
                });
            }
        }
        self.states.push(Some(StateSet {
            decls: decls.to_vec(),
            data,
        }));
        Ok(StatesId(self.states.len() as u32 - 1))
    }

    fn free_states(&mut self, states: StatesId) -> Result<(), BackendError> {
        let slot = self
            .states
            .get_mut(states.0 as usize)
            .ok_or_else(|| bad_handle(format!("states {}", states.0)))?;
        *slot = None;
        Ok(())
    }

    fn read_state(&mut self, states: StatesId, name: &str) -> Result<Vec<f32>, BackendError> {
        let set = self.state_set(states)?;
        set.data
            .get(name)
            .cloned()
            .ok_or_else(|| BackendError::MissingState {
                backend: NAME.into(),
                name: name.into(),
            })
    }

    fn write_state(
        &mut self,
        states: StatesId,
        name: &str,
        data: &[f32],
    ) -> Result<(), BackendError> {
        let set = self.state_set(states)?;
        let dst = set
            .data
            .get_mut(name)
            .ok_or_else(|| BackendError::MissingState {
                backend: NAME.into(),
                name: name.into(),
            })?;
        if dst.len() != data.len() {
            return Err(BackendError::BadInput {
                backend: NAME.into(),
                name: name.into(),
                msg: format!("state holds {} values, got {}", dst.len(), data.len()),
            });
        }
        dst.copy_from_slice(data);
        Ok(())
    }

    fn copy_states(&mut self, src: StatesId, dst: StatesId) -> Result<(), BackendError> {
        let src_set = self.state_set(src)?;
        let (decls, data) = (src_set.decls.clone(), src_set.data.clone());
        let dst_set = self.state_set(dst)?;
        if dst_set.decls != decls {
            return Err(BackendError::Device {
                backend: NAME.into(),
                msg: "copy_states between state sets of different layouts".into(),
            });
        }
        dst_set.data = data;
        Ok(())
    }

    fn copy_state_ranges(
        &mut self,
        states: StatesId,
        copies: &[super::StateCopy],
    ) -> Result<(), BackendError> {
        let set = self.state_set(states)?;
        for c in copies {
            let len_of = |n: &str| {
                set.data
                    .get(n)
                    .map(|v| v.len())
                    .ok_or_else(|| BackendError::MissingState {
                        backend: NAME.into(),
                        name: n.into(),
                    })
            };
            c.check(len_of(&c.src)?, len_of(&c.dst)?)
                .map_err(|msg| BackendError::Device {
                    backend: NAME.into(),
                    msg,
                })?;
            if c.src == c.dst {
                let v = set.data.get_mut(&c.src).expect("checked");
                v.copy_within(c.src_off..c.src_off + c.len, c.dst_off);
            } else {
                let [a, b] = set.data.get_disjoint_mut([c.src.as_str(), c.dst.as_str()]);
                let (a, b) = (a.expect("checked"), b.expect("checked"));
                b[c.dst_off..c.dst_off + c.len].copy_from_slice(&a[c.src_off..c.src_off + c.len]);
            }
        }
        Ok(())
    }

    fn compile(&mut self, graph: &Graph) -> Result<ExecId, BackendError> {
        crate::backend::note_graph_build();
        graph.validate()?;
        self.execs.push(Compiled {
            graph: Arc::new(graph.clone()),
            plan: Plan::new(graph),
        });
        Ok(ExecId(self.execs.len() as u32 - 1))
    }

    fn run(
        &mut self,
        exe: ExecId,
        weights: WeightsId,
        states: StatesId,
        inputs: &[(&str, HostData)],
    ) -> Result<Vec<(String, HostTensor)>, BackendError> {
        let compiled = self
            .execs
            .get(exe.0 as usize)
            .ok_or_else(|| bad_handle(format!("exec {}", exe.0)))?;
        let (graph, plan) = (compiled.graph.clone(), compiled.plan.clone());
        let w = self
            .weights
            .get(weights.0 as usize)
            .and_then(|w| w.clone())
            .ok_or_else(|| bad_handle(format!("weights {}", weights.0)))?;
        let set = self.state_set(states)?;
        exec::run(&graph, &plan, &w, &mut set.data, inputs)
    }

    fn copy_bandwidth(&mut self, bytes: usize) -> Result<f64, BackendError> {
        // Parallel copy over the rayon pool, best of a few repeats (the first touches pages).
        use rayon::prelude::*;
        let n = (bytes / 4).max(1 << 20);
        let src = vec![1.0f32; n];
        let mut dst = vec![0.0f32; n];
        let mut best = f64::MAX;
        for _ in 0..5 {
            let t = std::time::Instant::now();
            dst.par_chunks_mut(1 << 16)
                .zip(src.par_chunks(1 << 16))
                .for_each(|(d, s)| d.copy_from_slice(s));
            best = best.min(t.elapsed().as_secs_f64());
        }
        std::hint::black_box(&dst);
        Ok(2.0 * (n * 4) as f64 / best)
    }
}
