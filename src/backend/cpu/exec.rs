//! Interprets a planned graph: binds inputs, weights, states and slots, then runs each node.

use super::NAME;
use super::kernels::{self, Arg};
use crate::backend::{BackendError, HostData, HostTensor, WeightStore};
use crate::graph::{Graph, Op, Plan, TensorDecl, TensorId, TensorKind};
use crate::tensor::DType;
use std::collections::HashMap;

fn bad_input(name: &str, msg: String) -> BackendError {
    BackendError::BadInput {
        backend: NAME.into(),
        name: name.into(),
        msg,
    }
}

/// Checks the caller's inputs against the graph's declarations.
fn bind_inputs<'a>(
    g: &Graph,
    inputs: &'a [(&str, HostData)],
) -> Result<HashMap<TensorId, &'a HostData>, BackendError> {
    let mut bound = HashMap::new();
    for id in g.inputs() {
        let t = g.tensor(id);
        let (_, data) = inputs
            .iter()
            .find(|(n, _)| *n == t.name)
            .ok_or_else(|| bad_input(&t.name, "not provided".into()))?;
        if data.dtype() != t.dtype || data.len() != t.numel() {
            return Err(bad_input(
                &t.name,
                format!(
                    "expected {} × {:?}, got {} × {}",
                    t.dtype,
                    t.shape,
                    data.dtype(),
                    data.len()
                ),
            ));
        }
        bound.insert(id, data);
    }
    Ok(bound)
}

/// Checks every weight the graph uses against the uploaded set.
fn check_weights(g: &Graph, w: &WeightStore) -> Result<(), BackendError> {
    for id in g.weights() {
        let t = g.tensor(id);
        let h = w.get(&t.name).ok_or_else(|| BackendError::MissingWeight {
            backend: NAME.into(),
            name: t.name.clone(),
        })?;
        if h.dtype != t.dtype || h.shape != t.shape {
            return Err(BackendError::WeightMismatch {
                backend: NAME.into(),
                name: t.name.clone(),
                got: format!("{} {:?}", h.dtype, h.shape),
                want: format!("{} {:?}", t.dtype, t.shape),
            });
        }
    }
    Ok(())
}

fn check_states(g: &Graph, states: &HashMap<String, Vec<f32>>) -> Result<(), BackendError> {
    for id in g.states() {
        let t = g.tensor(id);
        let s = states
            .get(&t.name)
            .ok_or_else(|| BackendError::MissingState {
                backend: NAME.into(),
                name: t.name.clone(),
            })?;
        if s.len() != t.numel() {
            return Err(BackendError::Device {
                backend: NAME.into(),
                msg: format!(
                    "state {} holds {} values, the graph expects {:?}",
                    t.name,
                    s.len(),
                    t.shape
                ),
            });
        }
    }
    Ok(())
}

pub(super) fn run(
    g: &Graph,
    plan: &Plan,
    weights: &WeightStore,
    states: &mut HashMap<String, Vec<f32>>,
    inputs: &[(&str, HostData)],
) -> Result<Vec<(String, HostTensor)>, BackendError> {
    let bound = bind_inputs(g, inputs)?;
    check_weights(g, weights)?;
    check_states(g, states)?;
    let mut slots: Vec<Vec<f32>> = plan.slot_bytes.iter().map(|b| vec![0.0; b / 4]).collect();

    for node in &g.nodes {
        if matches!(node.op, Op::Reshape { .. }) {
            continue; // a view: its storage is its source's
        }
        let out_decls: Vec<&TensorDecl> = node.outputs.iter().map(|o| g.tensor(*o)).collect();
        let out_slots: Vec<usize> = node
            .outputs
            .iter()
            .map(|o| plan.slot_of[o.index()].expect("planner places every node output"))
            .collect();
        let mut taken: Vec<Vec<f32>> = out_slots
            .iter()
            .map(|s| std::mem::take(&mut slots[*s]))
            .collect();

        let in_decls: Vec<&TensorDecl> = node.inputs.iter().map(|i| g.tensor(*i)).collect();
        let state_names: Vec<&str> = in_decls
            .iter()
            .filter(|d| d.kind == TensorKind::State)
            .map(|d| d.name.as_str())
            .collect();
        let args: Vec<Arg> = node
            .inputs
            .iter()
            .map(|id| {
                let root = g.storage_root(*id);
                let d = g.tensor(root);
                let n = g.tensor(*id).numel();
                match d.kind {
                    TensorKind::Input => match bound[&root] {
                        HostData::F32(v) => Arg::F32(v),
                        HostData::I32(v) => Arg::I32(v),
                    },
                    TensorKind::Weight => Arg::Weight(weights.get(&d.name).expect("checked above")),
                    TensorKind::State => Arg::State,
                    TensorKind::Node { .. } => {
                        let s = &slots[plan.slot_of[root.index()].expect("placed")][..n];
                        if d.dtype == DType::I32 {
                            Arg::I32(bytemuck::cast_slice(s))
                        } else {
                            Arg::F32(s)
                        }
                    }
                }
            })
            .collect();

        let result = {
            let mut outs: Vec<&mut [f32]> = taken
                .iter_mut()
                .zip(&out_decls)
                .map(|(v, d)| &mut v[..d.numel()])
                .collect();
            let mut st: Vec<&mut [f32]> = match state_names.as_slice() {
                [] => Vec::new(),
                [a] => vec![states.get_mut(*a).expect("checked").as_mut_slice()],
                [a, b] => {
                    let [x, y] = states.get_disjoint_mut([*a, *b]);
                    vec![
                        x.expect("checked").as_mut_slice(),
                        y.expect("checked").as_mut_slice(),
                    ]
                }
                _ => {
                    return Err(BackendError::Unsupported {
                        backend: NAME.into(),
                        op: node.op.name().into(),
                        msg: "more than two state inputs".into(),
                    });
                }
            };
            kernels::run_node(&node.op, &args, &in_decls, &mut st, &mut outs, &out_decls)
        };
        for (s, v) in out_slots.iter().zip(taken) {
            slots[*s] = v;
        }
        result?;
    }

    Ok(g.outputs
        .iter()
        .map(|(name, id)| {
            let t = g.tensor(*id);
            let root = g.storage_root(*id);
            let data: Vec<u8> = match g.tensor(root).kind {
                TensorKind::Node { .. } => bytemuck::cast_slice(
                    &slots[plan.slot_of[root.index()].expect("placed")][..t.numel()],
                )
                .to_vec(),
                TensorKind::Input => match bound[&root] {
                    HostData::F32(v) => bytemuck::cast_slice(v).to_vec(),
                    HostData::I32(v) => bytemuck::cast_slice(v).to_vec(),
                },
                TensorKind::State => bytemuck::cast_slice(&states[&t.name]).to_vec(),
                TensorKind::Weight => weights
                    .get(&t.name)
                    .map(|w| w.bytes().to_vec())
                    .unwrap_or_default(),
            };
            (
                name.clone(),
                HostTensor::from_bytes(t.dtype, &t.shape, data),
            )
        })
        .collect())
}
