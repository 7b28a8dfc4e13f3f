//! The tensor-graph IR: declarations, nodes, the builder, shape checks and the buffer planner.
//!
//! A [`Graph`] is a straight-line program. Its tensors are inputs (given per run), weights
//! (bound by name to a weight set uploaded once), states (bound by name to a per-sequence state
//! set, updated in place) and node outputs (intermediates, placed by the [`planner`]).

pub mod builder;
pub mod op;
pub mod planner;
pub mod rope;
pub mod shape;

pub use builder::GraphBuilder;
pub use op::{AttnParams, GdnParams, HeadMap, Op};
pub use planner::Plan;
pub use rope::{RopeParams, Yarn};

use crate::tensor::DType;
use thiserror::Error;

#[derive(Debug, Error, PartialEq)]
pub enum GraphError {
    #[error("graph: op {op}: {msg}")]
    Shape { op: &'static str, msg: String },
    #[error("graph: {0}")]
    Invalid(String),
}

/// Index of a tensor in [`Graph::tensors`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TensorId(pub u32);

impl TensorId {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum TensorKind {
    /// Provided by the caller on every run (token ids, positions, features).
    Input,
    /// A model weight, bound by name.
    Weight,
    /// A persistent per-sequence buffer (f32), bound by name, updated in place by ops.
    State,
    /// Output `slot` of node `node`.
    Node { node: usize, slot: usize },
}

#[derive(Clone, Debug, PartialEq)]
pub struct TensorDecl {
    pub name: String,
    pub shape: Vec<usize>,
    /// F32 or I32 for everything but weights, which may be any (quantized) type.
    pub dtype: DType,
    pub kind: TensorKind,
}

impl TensorDecl {
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }
    /// Size in bytes of the tensor's data.
    pub fn bytes(&self) -> usize {
        self.dtype.bytes_for(self.numel()).unwrap_or(0)
    }
    /// Length of the last dimension (1 for a scalar).
    pub fn last_dim(&self) -> usize {
        self.shape.last().copied().unwrap_or(1)
    }
    /// Number of rows: product of all but the last dimension.
    pub fn rows(&self) -> usize {
        let n = self.shape.len();
        if n == 0 {
            1
        } else {
            self.shape[..n - 1].iter().product()
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    pub op: Op,
    pub inputs: Vec<TensorId>,
    pub outputs: Vec<TensorId>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Graph {
    pub tensors: Vec<TensorDecl>,
    pub nodes: Vec<Node>,
    /// Named outputs the caller reads back after a run.
    pub outputs: Vec<(String, TensorId)>,
    /// Every row must equal, bit for bit, what a 1-row graph computes for it: verify steps,
    /// whose argmaxes are compared with plain decode's. Backends then keep decode's kernels
    /// at any width (no prompt-only kernel such as wgpu's cooperative-matrix matmul).
    pub rows_match_decode: bool,
}

impl Graph {
    pub fn tensor(&self, id: TensorId) -> &TensorDecl {
        &self.tensors[id.index()]
    }

    pub fn ids_of_kind(&self, pred: impl Fn(&TensorKind) -> bool) -> Vec<TensorId> {
        (0..self.tensors.len() as u32)
            .map(TensorId)
            .filter(|id| pred(&self.tensor(*id).kind))
            .collect()
    }

    pub fn inputs(&self) -> Vec<TensorId> {
        self.ids_of_kind(|k| *k == TensorKind::Input)
    }
    pub fn weights(&self) -> Vec<TensorId> {
        self.ids_of_kind(|k| *k == TensorKind::Weight)
    }
    pub fn states(&self) -> Vec<TensorId> {
        self.ids_of_kind(|k| *k == TensorKind::State)
    }

    /// Whether no node reads `id` and it is no graph output (an attention node's output when
    /// the node runs only for its cache writes).
    pub fn unread(&self, id: TensorId) -> bool {
        !self.outputs.iter().any(|(_, o)| *o == id)
            && !self.nodes.iter().any(|n| n.inputs.contains(&id))
    }

    pub fn output(&self, name: &str) -> Option<TensorId> {
        self.outputs
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, id)| *id)
    }

    /// The tensor whose storage `id` uses: follows `Reshape` views to their source.
    pub fn storage_root(&self, mut id: TensorId) -> TensorId {
        loop {
            match self.tensor(id).kind {
                TensorKind::Node { node, .. }
                    if matches!(self.nodes[node].op, Op::Reshape { .. }) =>
                {
                    id = self.nodes[node].inputs[0];
                }
                _ => return id,
            }
        }
    }

    /// Re-checks every node's shapes (graphs built by [`GraphBuilder`] already pass).
    pub fn validate(&self) -> Result<(), GraphError> {
        for (i, node) in self.nodes.iter().enumerate() {
            let ins: Vec<&TensorDecl> = node.inputs.iter().map(|id| self.tensor(*id)).collect();
            let outs = shape::infer(&node.op, &ins)?;
            if outs.len() != node.outputs.len() {
                return Err(GraphError::Invalid(format!(
                    "node {i} ({}) has the wrong output count",
                    node.op.name()
                )));
            }
            for (o, (s, d)) in node.outputs.iter().zip(outs) {
                let t = self.tensor(*o);
                if t.shape != s || t.dtype != d {
                    return Err(GraphError::Invalid(format!(
                        "node {i} ({}) output {} is declared {:?} {} but infers {:?} {}",
                        node.op.name(),
                        t.name,
                        t.shape,
                        t.dtype,
                        s,
                        d
                    )));
                }
            }
        }
        Ok(())
    }
}
