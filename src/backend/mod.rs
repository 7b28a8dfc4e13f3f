//! Backends lower and run a [`Graph`]. Every backend implements the same op set; the CPU backend
//! is the reference the GPU backends are tested against.
//!
//! Resources live inside the backend and are named by handles: a weight set is uploaded once
//! and shared by all graphs of a model; a state set holds one sequence's persistent buffers
//! (KV cache, conv and recurrent state); a compiled graph is planned once and run many times.

pub mod cpu;
pub mod hip;
pub mod host;
pub mod profile;
pub mod wgpu;

pub use host::{HostData, HostTensor, TensorBytes, WeightStore};

use crate::graph::Graph;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum BackendError {
    #[error("unknown backend '{0}' (available: {1})")]
    Unknown(String, String),
    #[error("backend {backend} is unavailable: {reason}")]
    Unavailable { backend: String, reason: String },
    #[error("{backend}: weight '{name}' is missing from the uploaded weight set")]
    MissingWeight { backend: String, name: String },
    #[error("{backend}: weight '{name}' is {got}, the graph expects {want}")]
    WeightMismatch {
        backend: String,
        name: String,
        got: String,
        want: String,
    },
    #[error("{backend}: state '{name}' is missing from the state set")]
    MissingState { backend: String, name: String },
    #[error("{backend}: input '{name}': {msg}")]
    BadInput {
        backend: String,
        name: String,
        msg: String,
    },
    #[error("{backend}: invalid handle {what}")]
    BadHandle { backend: String, what: String },
    #[error("{backend}: op {op} is not supported: {msg}")]
    Unsupported {
        backend: String,
        op: String,
        msg: String,
    },
    #[error("{backend}: {msg}")]
    Device { backend: String, msg: String },
    #[error(transparent)]
    Quant(#[from] crate::tensor::quant::QuantError),
    #[error(transparent)]
    Graph(#[from] crate::graph::GraphError),
}

/// Declares one persistent per-sequence f32 buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StateDecl {
    pub name: String,
    pub shape: Vec<usize>,
}

impl StateDecl {
    pub fn new(name: impl Into<String>, shape: &[usize]) -> Self {
        StateDecl {
            name: name.into(),
            shape: shape.to_vec(),
        }
    }
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }
}

/// One copy of `len` f32 values inside a state set: `src[src_off ..]` to `dst[dst_off ..]`
/// (`src` and `dst` may name the same state; the two ranges must not overlap).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StateCopy {
    pub src: String,
    pub src_off: usize,
    pub dst: String,
    pub dst_off: usize,
    pub len: usize,
}

impl StateCopy {
    /// Checks the copy against the sizes of its two states.
    pub fn check(&self, src_len: usize, dst_len: usize) -> Result<(), String> {
        let fits = |off: usize, n: usize| off.checked_add(self.len).is_some_and(|e| e <= n);
        if !fits(self.src_off, src_len) || !fits(self.dst_off, dst_len) {
            return Err(format!(
                "copy of {} values from {}[{}..] ({src_len}) to {}[{}..] ({dst_len}) is out of range",
                self.len, self.src, self.src_off, self.dst, self.dst_off
            ));
        }
        if self.src == self.dst
            && self.src_off < self.dst_off + self.len
            && self.dst_off < self.src_off + self.len
        {
            return Err(format!(
                "copy within {} overlaps ({}.. and {}.., {} values)",
                self.src, self.src_off, self.dst_off, self.len
            ));
        }
        Ok(())
    }
}

/// How a pipelined run ([`Backend::submit`]) links to the run submitted before it: every
/// pipelined run keeps its output `output` on the device, and one submitted with
/// `from_previous` reads it as its input `input` (greedy decode: the previous step's argmax as
/// this step's token) instead of the host value passed for that input.
#[derive(Clone, Copy, Debug)]
pub struct Feed<'a> {
    pub output: &'a str,
    pub input: &'a str,
    pub from_previous: bool,
}

/// Graphs compiled so far in this process, by every backend.
static GRAPH_BUILDS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// How many graphs this process has compiled ([`Backend::compile`]). A step during which it
/// moved paid for a build (lowering, pipelines: up to a second on wgpu), so its time says
/// nothing about the steady state; the adaptive policy leaves such samples out.
pub fn graph_builds() -> usize {
    GRAPH_BUILDS.load(std::sync::atomic::Ordering::Relaxed)
}

/// Counts one graph build (every backend's [`Backend::compile`] calls it).
pub(crate) fn note_graph_build() {
    GRAPH_BUILDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct WeightsId(pub u32);
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct StatesId(pub u32);
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ExecId(pub u32);

/// Whether speculative steps on `be` run at fixed widths
/// ([`Backend::prefers_fixed_step_widths`]); `DELTASPEC_VERIFY_PAD=1` or `0` forces it on or off.
pub fn fixed_step_widths(be: &dyn Backend) -> bool {
    match std::env::var("DELTASPEC_VERIFY_PAD").as_deref() {
        Ok("1") => true,
        Ok("0") => false,
        _ => be.prefers_fixed_step_widths(),
    }
}

/// A graph lowering and its device resources.
pub trait Backend {
    /// Short name, e.g. `cpu`, `wgpu (NVIDIA H200)`.
    fn name(&self) -> String;

    /// Makes a weight set resident. Graphs bind weights by name at run time.
    fn upload_weights(&mut self, weights: &WeightStore) -> Result<WeightsId, BackendError>;

    /// Allocates one sequence's states, zero-filled.
    fn alloc_states(&mut self, decls: &[StateDecl]) -> Result<StatesId, BackendError>;
    fn free_states(&mut self, states: StatesId) -> Result<(), BackendError>;
    fn read_state(&mut self, states: StatesId, name: &str) -> Result<Vec<f32>, BackendError>;
    fn write_state(
        &mut self,
        states: StatesId,
        name: &str,
        data: &[f32],
    ) -> Result<(), BackendError>;
    /// Copies every state of `src` into `dst` (same declarations): snapshots and forks.
    fn copy_states(&mut self, src: StatesId, dst: StatesId) -> Result<(), BackendError>;

    /// Applies `copies` in order inside one state set: a speculative commit (a verified row's
    /// conv and recurrent state into the live state, accepted KV rows moved together). The
    /// default goes through host memory; device backends override it with device copies.
    fn copy_state_ranges(
        &mut self,
        states: StatesId,
        copies: &[StateCopy],
    ) -> Result<(), BackendError> {
        let mut host: Vec<(String, Vec<f32>)> = Vec::new();
        for c in copies {
            for name in [&c.src, &c.dst] {
                if !host.iter().any(|(n, _)| n == name) {
                    let v = self.read_state(states, name)?;
                    host.push((name.clone(), v));
                }
            }
            let get = |n: &str| host.iter().position(|(x, _)| x == n).expect("read above");
            let (si, di) = (get(&c.src), get(&c.dst));
            c.check(host[si].1.len(), host[di].1.len())
                .map_err(|msg| BackendError::Device {
                    backend: self.name(),
                    msg,
                })?;
            let vals = host[si].1[c.src_off..c.src_off + c.len].to_vec();
            host[di].1[c.dst_off..c.dst_off + c.len].copy_from_slice(&vals);
        }
        for (name, data) in &host {
            if copies.iter().any(|c| &c.dst == name) {
                self.write_state(states, name, data)?;
            }
        }
        Ok(())
    }

    /// Whether speculative steps should run at fixed widths, padding the rows with copies of
    /// their last row: a verify ([`crate::model::Session::forward_tree`]) at its reserved width,
    /// a DFlash drafter's context append at the block size. One compiled graph instead of one
    /// per width. True where compiling a graph costs far more than the padded rows (wgpu:
    /// pipelines, bind groups and buffers per graph, up to a second each on the H200 when a
    /// new width shows up mid-generation). See [`fixed_step_widths`] for the override.
    fn prefers_fixed_step_widths(&self) -> bool {
        false
    }

    /// Input-row counts at which a step's cost jumps: the row tiles of the backend's matmul
    /// kernels, ascending (a step of `t + 1` rows runs the next tile, at about its cost). Empty
    /// where the cost grows smoothly with the rows or is not known. The DDTree round trims its
    /// node budget to these ([`crate::spec::tree::tile_budget`]).
    fn step_row_tiles(&self) -> Vec<usize> {
        Vec::new()
    }

    /// Validates and plans a graph for repeated runs.
    fn compile(&mut self, graph: &Graph) -> Result<ExecId, BackendError>;

    /// Runs a compiled graph. `inputs` must name every graph input; returns the graph's
    /// outputs in declaration order.
    fn run(
        &mut self,
        exe: ExecId,
        weights: WeightsId,
        states: StatesId,
        inputs: &[(&str, HostData)],
    ) -> Result<Vec<(String, HostTensor)>, BackendError>;

    /// Whether [`Backend::submit`] and [`Backend::collect`] are available: runs queued on the
    /// device while the host still waits for earlier ones, so the device never idles between
    /// steps (wgpu: the host's encoding and the readback otherwise leave gaps long enough for
    /// the driver to lower the clock).
    fn pipelines(&self) -> bool {
        false
    }

    /// Queues a run of `exe` (inputs as [`Backend::run`], linked to the previous pipelined run
    /// by `feed`) without waiting for it; [`Backend::collect`] returns the outputs of queued
    /// runs in the order they were submitted. A plain [`Backend::run`] must not be issued while
    /// runs are queued.
    fn submit(
        &mut self,
        exe: ExecId,
        weights: WeightsId,
        states: StatesId,
        inputs: &[(&str, HostData)],
        feed: Feed,
    ) -> Result<(), BackendError> {
        let _ = (exe, weights, states, inputs, feed);
        Err(BackendError::Unsupported {
            backend: self.name(),
            op: "submit".into(),
            msg: "this backend runs graphs one at a time".into(),
        })
    }

    /// Waits for the oldest queued run and returns its outputs (see [`Backend::submit`]).
    fn collect(&mut self) -> Result<Vec<(String, HostTensor)>, BackendError> {
        Err(BackendError::Unsupported {
            backend: self.name(),
            op: "collect".into(),
            msg: "no run is queued".into(),
        })
    }

    /// Measures device-memory copy bandwidth in bytes/s (read + write counted) over a buffer
    /// of `bytes`: the roofline the decode benchmark compares against.
    fn copy_bandwidth(&mut self, bytes: usize) -> Result<f64, BackendError> {
        let _ = bytes;
        Err(BackendError::Unsupported {
            backend: self.name(),
            op: "copy_bandwidth".into(),
            msg: "not measured on this backend".into(),
        })
    }

    /// Seconds per dispatch of the backend's dispatch-cost probes (chains of `count`
    /// near-empty launches, by what varies between them), for `deltaspec bench dispatch`.
    fn dispatch_costs(&mut self, count: usize) -> Result<Vec<(String, f64)>, BackendError> {
        let _ = count;
        Err(BackendError::Unsupported {
            backend: self.name(),
            op: "dispatch_costs".into(),
            msg: "no dispatch probe on this backend".into(),
        })
    }

    /// The driver compiler's statistics (registers, code size, ...) of every kernel the backend
    /// has compiled so far, for `deltaspec bench kernels`.
    fn kernel_stats(&mut self) -> Result<Vec<KernelStats>, BackendError> {
        Err(BackendError::Unsupported {
            backend: self.name(),
            op: "kernel_stats".into(),
            msg: "no compiler statistics on this backend".into(),
        })
    }
}

/// What the driver's compiler reports of one kernel, under the driver's own names (NVIDIA:
/// "Register Count", "Binary Size"; Mesa: instruction and register counts per stage).
#[derive(Clone, Debug, PartialEq)]
pub struct KernelStats {
    /// The kernel and its specialisation (for wgpu the shader key).
    pub kernel: String,
    /// Threads per workgroup / block, where known.
    pub threads: Option<u32>,
    /// (statistic, value); booleans are 0 / 1.
    pub stats: Vec<(String, f64)>,
}

/// The profiling key of a node: its op, and for weight ops the weight's type and shape.
pub fn profile_key(g: &Graph, node: &crate::graph::Node) -> String {
    use crate::graph::{Op, TensorKind};
    match node.op {
        Op::MatMul | Op::Embed => {
            let w = g.tensor(node.inputs[if node.op == Op::MatMul { 1 } else { 0 }]);
            let rows = g
                .tensor(node.inputs[if node.op == Op::MatMul { 0 } else { 1 }])
                .shape[0];
            let kind = if w.kind == TensorKind::Weight {
                w.dtype.name()
            } else {
                "act"
            };
            format!("{} {kind} {:?} n={rows}", node.op.name(), w.shape)
        }
        _ => node.op.name().to_string(),
    }
}

/// Names accepted by [`create`].
pub const BACKENDS: &[&str] = &["cpu", "wgpu", "wgpu:f32", "hip", "hip:rocm", "hip:cuda"];

/// Creates a backend by name (`cpu`, …).
pub fn create(name: &str) -> Result<Box<dyn Backend>, BackendError> {
    match name {
        "cpu" => Ok(Box::new(cpu::CpuBackend::new())),
        "hip" | "hip:rocm" | "hip:cuda" => {
            let which = match name {
                "hip:rocm" => hip::Which::Rocm,
                "hip:cuda" => hip::Which::Cuda,
                _ => hip::Which::Any,
            };
            hip::HipBackend::open(which)
                .map(|b| Box::new(b) as Box<dyn Backend>)
                .map_err(|reason| BackendError::Unavailable {
                    backend: name.to_string(),
                    reason,
                })
        }
        "wgpu" => Ok(Box::new(wgpu::WgpuBackend::new()?)),
        // f32 activations whatever DELTASPEC_WGPU_MATMUL says (strict comparisons).
        "wgpu:f32" => Ok(Box::new(wgpu::WgpuBackend::with_options(
            wgpu::WgpuOptions {
                int8_matmul: Some(false),
                ..Default::default()
            },
        )?)),
        other => Err(BackendError::Unknown(
            other.to_string(),
            BACKENDS.join(", "),
        )),
    }
}
