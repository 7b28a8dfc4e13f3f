//! CPU kernels, one per op. (Being written.)

use crate::backend::{BackendError, HostTensor};
use crate::graph::{Op, TensorDecl};

/// A node input as the kernels see it. State inputs are passed separately, mutable,
/// in the order they appear among the inputs; their position here holds `Arg::State`.
pub enum Arg<'a> {
    F32(&'a [f32]),
    I32(&'a [i32]),
    Weight(&'a HostTensor),
    State,
}

/// Runs one node. `outs[i]` has exactly `out_decls[i].numel()` values (I32 outputs are
/// written through `bytemuck::cast_slice_mut`). Shapes were checked by the graph.
pub fn run_node(
    op: &Op,
    args: &[Arg],
    in_decls: &[&TensorDecl],
    states: &mut [&mut [f32]],
    outs: &mut [&mut [f32]],
    out_decls: &[&TensorDecl],
) -> Result<(), BackendError> {
    let _ = (args, in_decls, states, outs, out_decls);
    Err(BackendError::Unsupported {
        backend: "cpu".into(),
        op: op.name().into(),
        msg: "kernel being written".into(),
    })
}
