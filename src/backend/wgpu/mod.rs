//! The wgpu (Vulkan) backend: WGSL kernels for every graph op, the fallback every user can run.
//!
//! - Weights are uploaded as raw bytes (`array<u32>` storage) and decoded in the kernels; a
//!   tensor larger than the device's largest storage binding is split by rows into parts.
//! - States are device buffers. A compiled graph owns one pooled buffer per planner slot, a
//!   buffer per input, scratch for multi-pass ops, and one uniform buffer holding every
//!   dispatch's params. Bind groups are built once per (weights, states) pair and cached.
//! - A run writes the inputs, records the whole graph into one compute pass, copies the graph
//!   outputs into a staging buffer, submits once and reads back only the outputs.

mod decoders;
mod device;
pub(crate) mod fuse;
pub mod lower;
mod matmul;
mod probe;
mod relayout;
mod run;
pub mod shaders;
mod stats;
mod timing;

use super::{
    Backend, BackendError, ExecId, Feed, HostData, HostTensor, StateDecl, StatesId, WeightStore,
    WeightsId,
};
use crate::graph::Graph;
use crate::tensor::DType;
use device::Gpu;
use lower::{Lowered, Res};
use shaders::{PARAMS, ShaderKey};
use std::collections::HashMap;
use std::sync::Arc;

pub(crate) const NAME: &str = "wgpu";

fn dev_err(msg: impl Into<String>) -> BackendError {
    BackendError::Device {
        backend: NAME.into(),
        msg: msg.into(),
    }
}

fn bad_handle(what: String) -> BackendError {
    BackendError::BadHandle {
        backend: NAME.into(),
        what,
    }
}

/// Construction options (tests use them to exercise rare paths on small data).
#[derive(Clone, Debug, Default)]
pub struct WgpuOptions {
    /// Caps the bytes of one weight binding below the device limit (forces weight splits).
    pub max_weight_binding: Option<u64>,
    /// Fills every intermediate buffer with NaN before each run, so unwritten values show.
    pub poison: bool,
    /// Uses the workgroup-memory reductions even where the adapter has subgroups.
    pub no_subgroups: bool,
    /// One dispatch per node, no fused groups (also `DELTASPEC_WGPU_NO_FUSION=1`).
    pub no_fusion: bool,
    /// Int8 activations for matmuls of at most 64 rows over Q8_0/Q4_K/Q5_K/Q6_K/IQ4_XS weights
    /// (integer dot products, as llama.cpp and the hip backend do); off: f32 activations, which
    /// agree with the CPU reference to rounding. `None`: on unless `DELTASPEC_WGPU_MATMUL=f32`.
    pub int8_matmul: Option<bool>,
    /// With int8 activations: norms whose output an int8 GEMV reads write the quantized
    /// activations themselves (no quantize dispatch). `None`: on unless
    /// `DELTASPEC_WGPU_NORM_Q8=0`.
    pub norm_q8: Option<bool>,
    /// Weight types re-laid at upload into a layout their kernels read with 16-byte loads
    /// ([`relayout::LAYOUTS`]: IQ4_XS in block pairs, Q8_0 in groups of 8). `None`: the types
    /// named by `DELTASPEC_WGPU_RELAYOUT` (comma-separated, `all` or `none`); unset: Q8_0 only.
    /// H100, 27B Q8_0 step (docs/perf.md, session 26), 2 interleaved rounds: re-laid 13.525 /
    /// 13.499 ms against 13.825 / 13.835 (0.70 × the copy roofline against 0.68 ×). On the H200
    /// the IQ4_XS pairs were even with the ggml layout (8-layer step 2.05 against 2.04 ms;
    /// session 18), so IQ4_XS stays in the ggml layout.
    pub relayout: Option<Vec<DType>>,
    /// Widest matmul input (rows) on the int8 path; wider inputs take the f32 tiled kernel.
    /// `None`: `DELTASPEC_WGPU_INT8_MAX_N`, else [`shaders::INT8_MAX_N`] (every width). A wide
    /// input runs as several GEMV dispatches over one quantization, and each row equals its
    /// decode bit for bit.
    pub int8_max_n: Option<usize>,
    /// How int8 IQ4_XS items look their grid up. `None`: `DELTASPEC_WGPU_IQ4_LOOKUP`
    /// (table | alu | mix; default table: on the H200's 8-layer IQ4_XS step alu took 2.7-4.3
    /// ms and mix 2.4-2.5 ms against 2.0 ms for the table; session 18).
    pub iq4_lookup: Option<shaders::Iq4Lookup>,
    /// Inputs of 65+ rows on the cooperative-matrix kernel (f16 operands, f32 sums) where the
    /// adapter has one. `None` or `Some(true)`: wherever the device offers it (the device is
    /// opened without the feature under `DELTASPEC_WGPU_COOP=0`); `Some(false)`: the f32 tiled
    /// kernel, which agrees with the CPU reference to rounding (strict comparisons).
    pub coop: Option<bool>,
}

/// `DELTASPEC_WGPU_RELAYOUT`: type names with a layout (`IQ4_XS,Q8_0`, any case), `all`, or
/// empty / `none`.
pub fn parse_relayout(v: &str) -> Result<Vec<DType>, String> {
    let mut out = Vec::new();
    for name in v.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        if name.eq_ignore_ascii_case("none") {
            continue;
        }
        if name.eq_ignore_ascii_case("all") {
            out.extend(relayout::LAYOUTS.iter().map(|l| l.dtype));
            continue;
        }
        let l = relayout::LAYOUTS
            .iter()
            .find(|l| l.dtype.name().eq_ignore_ascii_case(name))
            .ok_or_else(|| {
                let known: Vec<&str> = relayout::LAYOUTS.iter().map(|l| l.dtype.name()).collect();
                format!(
                    "DELTASPEC_WGPU_RELAYOUT: no layout for '{name}' (known: {}, all, none)",
                    known.join(", ")
                )
            })?;
        out.push(l.dtype);
    }
    out.sort_by_key(|t| t.name());
    out.dedup();
    Ok(out)
}

impl WgpuOptions {
    /// The re-laid types (the option, else the environment).
    pub fn relaid(&self) -> Result<Vec<DType>, String> {
        if let Some(v) = &self.relayout {
            return Ok(v.clone());
        }
        match std::env::var("DELTASPEC_WGPU_RELAYOUT") {
            Ok(v) => parse_relayout(&v),
            Err(_) => Ok(vec![DType::Q8_0]),
        }
    }

    /// The IQ4_XS grid lookup (the option, else the environment).
    pub fn iq4_lookup(&self) -> Result<shaders::Iq4Lookup, String> {
        match self.iq4_lookup {
            Some(l) => Ok(l),
            None => shaders::Iq4Lookup::parse(
                &std::env::var("DELTASPEC_WGPU_IQ4_LOOKUP").unwrap_or_default(),
            ),
        }
    }

    /// The widest int8 matmul input (the option, else the environment, else the default).
    pub fn int8_max_n(&self) -> usize {
        self.int8_max_n.unwrap_or_else(|| {
            std::env::var("DELTASPEC_WGPU_INT8_MAX_N")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(shaders::INT8_MAX_N)
        })
    }

    /// Whether matmuls use int8 activations (the option, else the environment).
    pub fn int8(&self) -> bool {
        self.int8_matmul.unwrap_or_else(|| {
            !matches!(
                std::env::var("DELTASPEC_WGPU_MATMUL").as_deref(),
                Ok("f32") | Ok("exact")
            )
        })
    }
}

struct Pipe {
    pipeline: wgpu::ComputePipeline,
    layout: wgpu::BindGroupLayout,
    /// Number of storage bindings after the params uniform.
    storage: usize,
}

/// A prepared bulk copy ([`WgpuBackend::bulk_copy`]).
struct BulkCopy {
    pipeline: wgpu::ComputePipeline,
    group: wgpu::BindGroup,
    workgroups: u32,
}

struct WeightPart {
    buf: wgpu::Buffer,
}

struct GpuWeight {
    dtype: DType,
    shape: Vec<usize>,
    parts: Vec<WeightPart>,
}

struct StateSet {
    decls: Vec<StateDecl>,
    bufs: Vec<wgpu::Buffer>,
}

impl StateSet {
    fn index(&self, name: &str) -> Option<usize> {
        self.decls.iter().position(|d| d.name == name)
    }
}

struct Dispatch {
    label: String,
    pipe: Arc<Pipe>,
    params_offset: u64,
    binds: Vec<Res>,
    groups: [u32; 3],
}

struct Exec {
    graph: Arc<Graph>,
    low: Lowered,
    dispatches: Vec<Dispatch>,
    slots: Vec<wgpu::Buffer>,
    inputs: Vec<wgpu::Buffer>,
    scratch: Vec<wgpu::Buffer>,
    aux: Vec<wgpu::Buffer>,
    params: wgpu::Buffer,
    /// Output byte offsets in `staging`, and its size.
    out_offsets: Vec<u64>,
    staging: wgpu::Buffer,
    poison: Vec<u8>,
    bind_cache: HashMap<(u32, u32), Vec<wgpu::BindGroup>>,
    /// Per-dispatch timestamps (profiling on adapters that have them).
    timer: Option<timing::Timer>,
}

pub struct WgpuBackend {
    gpu: Gpu,
    opts: WgpuOptions,
    /// The largest storage binding (slots, states).
    max_binding: u64,
    /// The weight kernels' backend-wide choices (fixed at construction: uploaded weights and
    /// compiled kernels must agree).
    wk: shaders::WeightKernels,
    /// The largest weight part.
    max_weight_binding: u64,
    pipes: HashMap<ShaderKey, Arc<Pipe>>,
    weights: Vec<HashMap<String, GpuWeight>>,
    states: Vec<Option<StateSet>>,
    execs: Vec<Exec>,
    /// Pipelined runs in flight, oldest first ([`Backend::submit`]).
    pending: std::collections::VecDeque<run::Pending>,
    /// Staging buffers of collected pipelined runs, per exec, for reuse.
    spare: HashMap<usize, Vec<wgpu::Buffer>>,
    /// The output the last pipelined run kept for the next one ([`Feed`]); none before the
    /// first pipelined run and after a failed one.
    feed: Option<wgpu::Buffer>,
}

/// A graph run submits its first C dispatches as soon as they are encoded, then chunks of 2C,
/// 4C, … (the host's encoding, a few µs per dispatch inside wgpu, overlaps the GPU's work
/// instead of preceding all of it). `DELTASPEC_WGPU_SUBMIT_CHUNK=C` sets C, 0 one submission.
/// Default 16: H200, 8-layer 27B IQ4_XS decode, interleaved runs in one call (session 9):
/// 2.05-2.12 ms a step against 2.12-2.24 with one submission (27B, session 8: 17.8 against 19.2).
fn submit_chunk() -> Option<usize> {
    static V: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    *V.get_or_init(|| {
        let c: usize = std::env::var("DELTASPEC_WGPU_SUBMIT_CHUNK")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(16);
        (c > 0).then_some(c)
    })
}

/// `DELTASPEC_WGPU_HOST_TIME=1`: every graph run prints the host time spent encoding and
/// submitting its dispatches, and the whole run's, to stderr.
fn host_timing() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("DELTASPEC_WGPU_HOST_TIME").is_ok_and(|v| v == "1"))
}

fn storage_usage() -> wgpu::BufferUsages {
    wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST
}

impl WgpuBackend {
    /// Opens the preferred adapter (see [`device`]); `Unavailable` when there is none.
    pub fn new() -> Result<Self, BackendError> {
        Self::with_options(WgpuOptions::default())
    }

    pub fn with_options(opts: WgpuOptions) -> Result<Self, BackendError> {
        let gpu = device::open().map_err(|reason| BackendError::Unavailable {
            backend: NAME.into(),
            reason,
        })?;
        let dev_max = gpu
            .limits
            .max_storage_buffer_binding_size
            .min(gpu.limits.max_buffer_size);
        let unavailable = |reason| BackendError::Unavailable {
            backend: NAME.into(),
            reason,
        };
        let wk = shaders::WeightKernels {
            relaid: opts.relaid().map_err(unavailable)?,
            iq4_lookup: opts.iq4_lookup().map_err(unavailable)?,
        };
        let max_weight_binding = opts
            .max_weight_binding
            .map_or(dev_max, |m| m.min(dev_max))
            .max(256);
        Ok(WgpuBackend {
            gpu,
            wk,
            opts,
            max_binding: dev_max,
            max_weight_binding,
            pipes: HashMap::new(),
            weights: Vec::new(),
            states: Vec::new(),
            execs: Vec::new(),
            pending: Default::default(),
            spare: HashMap::new(),
            feed: None,
        })
    }

    /// Turns int8 activations on or off for graphs compiled from now on (tests).
    pub fn set_int8_matmul(&mut self, on: bool) {
        self.opts.int8_matmul = Some(on);
    }

    /// Whether graphs compiled now use int8 activations (see [`WgpuOptions::int8_matmul`]).
    pub fn int8_matmul(&self) -> bool {
        self.opts.int8()
    }

    /// Whether kernels use subgroup operations on this device.
    pub fn subgroups(&self) -> bool {
        self.gpu.subgroups
    }

    /// Whether the device has f16 shader arithmetic (requested when present).
    pub fn has_f16(&self) -> bool {
        self.gpu.f16
    }

    /// Whether prompt-wide matmuls run on cooperative matrices (`shaders/matmul_coop.wgsl`).
    pub fn has_coop(&self) -> bool {
        self.gpu.coop && self.opts.coop != Some(false)
    }

    /// The adapter's name, backend and type.
    pub fn adapter(&self) -> String {
        let i = &self.gpu.info;
        format!("{} ({:?}, {:?})", i.name, i.backend, i.device_type)
    }

    /// Number of dispatches a compiled graph records per run.
    pub fn dispatch_count(&self, exe: ExecId) -> Option<usize> {
        self.execs.get(exe.0 as usize).map(|e| e.dispatches.len())
    }

    /// What each dispatch of a compiled graph computes (its profile label), in order.
    pub fn dispatch_labels(&self, exe: ExecId) -> Option<Vec<String>> {
        self.execs
            .get(exe.0 as usize)
            .map(|e| e.dispatches.iter().map(|d| d.label.clone()).collect())
    }

    /// A vec4 copy between two fresh buffers of `bytes` (`copy.wgsl` BULK, about four rounds
    /// of UNROLL vec4s per thread): the bandwidth probe, and the L2-evicting copy of the
    /// dispatch probes.
    fn bulk_copy(&mut self, label: &str, bytes: u64) -> Result<BulkCopy, BackendError> {
        let n = bytes.min(self.max_binding) / 16 * 16;
        let src = self.buffer(label, n, storage_usage());
        let dst = self.buffer(label, n, storage_usage());
        let pipe = self.pipe(&ShaderKey::new("copy").flag("BULK"))?;
        let vec4s = u32::try_from(n / 16).map_err(|_| dev_err("copy buffer too large"))?;
        let workgroups = vec4s.div_ceil(256 * 16).clamp(1, 65535);
        let mut params = [0u32; PARAMS];
        params[0] = vec4s;
        params[1] = workgroups * 256;
        let ubuf = self.buffer_init(
            label,
            bytemuck::cast_slice(&params),
            wgpu::BufferUsages::UNIFORM,
        )?;
        let entries: Vec<wgpu::BindGroupEntry> = [&ubuf, &src, &dst]
            .iter()
            .enumerate()
            .map(|(i, b)| wgpu::BindGroupEntry {
                binding: i as u32,
                resource: b.as_entire_binding(),
            })
            .collect();
        let group = self
            .gpu
            .device
            .create_bind_group(&wgpu::BindGroupDescriptor {
                label: Some(label),
                layout: &pipe.layout,
                entries: &entries,
            });
        Ok(BulkCopy {
            pipeline: pipe.pipeline.clone(),
            group,
            workgroups,
        })
    }

    fn take_errors(&self) -> Result<(), BackendError> {
        let mut errs = self
            .gpu
            .errors
            .lock()
            .map_err(|_| dev_err("error sink poisoned"))?;
        if errs.is_empty() {
            return Ok(());
        }
        let msg = errs.join("; ");
        errs.clear();
        Err(dev_err(msg))
    }

    fn buffer(&self, label: &str, size: u64, usage: wgpu::BufferUsages) -> wgpu::Buffer {
        self.gpu.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size: size.max(4).next_multiple_of(4),
            usage,
            mapped_at_creation: false,
        })
    }

    /// A buffer holding `data` (padded to whole words), written through a mapping.
    fn buffer_init(
        &self,
        label: &str,
        data: &[u8],
        usage: wgpu::BufferUsages,
    ) -> Result<wgpu::Buffer, BackendError> {
        let size = (data.len() as u64).max(4).next_multiple_of(4);
        let buf = self.gpu.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size,
            usage,
            mapped_at_creation: true,
        });
        {
            let mut view = buf
                .slice(..)
                .get_mapped_range_mut()
                .map_err(|e| dev_err(format!("mapping {label}: {e}")))?;
            view.slice(..data.len()).copy_from_slice(data);
        }
        buf.unmap();
        Ok(buf)
    }

    fn pipe(&mut self, key: &ShaderKey) -> Result<Arc<Pipe>, BackendError> {
        if let Some(p) = self.pipes.get(key) {
            return Ok(p.clone());
        }
        let src = shaders::source(key).map_err(|m| dev_err(format!("shader {}: {m}", key.file)))?;
        let module = shaders::validate(&src, self.gpu.subgroups)
            .map_err(|m| dev_err(format!("shader {} {:?}: {m}", key.file, key)))?;
        // The bind-group layout is read off the module: binding 0 the params uniform, then
        // every storage buffer with its access mode.
        let mut entries = Vec::new();
        for (_, gv) in module.global_variables.iter() {
            let Some(rb) = &gv.binding else { continue };
            let ty = match gv.space {
                naga::AddressSpace::Uniform => wgpu::BufferBindingType::Uniform,
                naga::AddressSpace::Storage { access } => wgpu::BufferBindingType::Storage {
                    read_only: !access.contains(naga::StorageAccess::STORE),
                },
                _ => {
                    return Err(dev_err(format!(
                        "shader {}: unexpected resource {:?}",
                        key.file, gv.name
                    )));
                }
            };
            entries.push(wgpu::BindGroupLayoutEntry {
                binding: rb.binding,
                visibility: wgpu::ShaderStages::COMPUTE,
                ty: wgpu::BindingType::Buffer {
                    ty,
                    has_dynamic_offset: false,
                    min_binding_size: None,
                },
                count: None,
            });
        }
        entries.sort_by_key(|e| e.binding);
        if entries
            .iter()
            .enumerate()
            .any(|(i, e)| e.binding != i as u32)
        {
            return Err(dev_err(format!(
                "shader {}: bindings are not dense",
                key.file
            )));
        }
        let dev = &self.gpu.device;
        let scope = dev.push_error_scope(wgpu::ErrorFilter::Validation);
        let layout = dev.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
            label: Some(key.file),
            entries: &entries,
        });
        let pl = dev.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: Some(key.file),
            bind_group_layouts: &[Some(&layout)],
            immediate_size: 0,
        });
        let desc = wgpu::ShaderModuleDescriptor {
            label: Some(key.file),
            source: wgpu::ShaderSource::Wgsl(src.into()),
        };
        let sm = if shaders::runtime_checks() {
            dev.create_shader_module(desc)
        } else {
            // SAFETY: the shaders are ours (shaders/*.wgsl, generated variants), not user input.
            // Every loop is bounded by a uniform size; every local array index is a constant
            // after unrolling or bounded by the array's length in the shader's own logic; buffer
            // indices are bounded by the sizes the lowering binds (checked against the graph's
            // shapes before any dispatch), and the Vulkan device keeps robust buffer access on
            // where the adapter has it. Naga's injected clamps and loop counters cost ALU in the
            // GEMV inner loops; `DELTASPEC_WGPU_CHECKS=1` restores them.
            unsafe {
                dev.create_shader_module_trusted(desc, wgpu::ShaderRuntimeChecks::unchecked())
            }
        };
        let pipeline = dev.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(key.file),
            layout: Some(&pl),
            module: &sm,
            entry_point: Some(key.entry),
            compilation_options: wgpu::PipelineCompilationOptions {
                zero_initialize_workgroup_memory: !shaders::WRITES_BEFORE_READS.contains(&key.file),
                ..Default::default()
            },
            cache: None,
        });
        if let Some(e) = pollster::block_on(scope.pop()) {
            return Err(dev_err(format!("pipeline {} {:?}: {e}", key.file, key)));
        }
        let p = Arc::new(Pipe {
            pipeline,
            layout,
            storage: entries.len() - 1,
        });
        self.pipes.insert(key.clone(), p.clone());
        Ok(p)
    }

    /// Copies `(buffer, bytes)` regions into one staging buffer and reads them back.
    fn read_back(&self, regions: &[(&wgpu::Buffer, u64)]) -> Result<Vec<Vec<u8>>, BackendError> {
        let total: u64 = regions.iter().map(|(_, n)| n.next_multiple_of(4)).sum();
        let staging = self.buffer(
            "readback",
            total,
            wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        );
        let mut enc = self.gpu.device.create_command_encoder(&Default::default());
        let mut off = 0;
        for (b, n) in regions {
            let n4 = n.next_multiple_of(4);
            if n4 > 0 {
                enc.copy_buffer_to_buffer(b, 0, &staging, off, n4);
            }
            off += n4;
        }
        self.gpu.queue.submit([enc.finish()]);
        let bytes = self.map_read(&staging, total, None)?;
        let mut out = Vec::new();
        let mut off = 0usize;
        for (_, n) in regions {
            out.push(bytes[off..off + *n as usize].to_vec());
            off += n.next_multiple_of(4) as usize;
        }
        Ok(out)
    }

    /// Maps `staging` once submission `index` (default: the latest) has completed and copies
    /// out its first `total` bytes.
    fn map_read(
        &self,
        staging: &wgpu::Buffer,
        total: u64,
        index: Option<wgpu::SubmissionIndex>,
    ) -> Result<Vec<u8>, BackendError> {
        let (tx, rx) = std::sync::mpsc::channel();
        staging.map_async(wgpu::MapMode::Read, .., move |r| {
            let _ = tx.send(r);
        });
        self.gpu
            .device
            .poll(wgpu::PollType::Wait {
                submission_index: index,
                timeout: None,
            })
            .map_err(|e| dev_err(format!("poll: {e}")))?;
        rx.recv()
            .map_err(|_| dev_err("map callback dropped"))?
            .map_err(|e| dev_err(format!("map: {e}")))?;
        let data = {
            let view = staging
                .get_mapped_range(..total.max(4))
                .map_err(|e| dev_err(format!("mapped range: {e}")))?;
            view.to_vec()
        };
        staging.unmap();
        self.take_errors()?;
        Ok(data)
    }

    fn state_set(&self, id: StatesId) -> Result<&StateSet, BackendError> {
        self.states
            .get(id.0 as usize)
            .and_then(|s| s.as_ref())
            .ok_or_else(|| bad_handle(format!("states {}", id.0)))
    }

    fn missing_state(name: &str) -> BackendError {
        BackendError::MissingState {
            backend: NAME.into(),
            name: name.into(),
        }
    }

    /// Checks a run's weights and states against the graph and builds its bind groups.
    fn bind_groups(
        &self,
        e: &Exec,
        weights: WeightsId,
        states: StatesId,
    ) -> Result<Vec<wgpu::BindGroup>, BackendError> {
        let wset = self
            .weights
            .get(weights.0 as usize)
            .ok_or_else(|| bad_handle(format!("weights {}", weights.0)))?;
        let sset = self.state_set(states)?;
        let mut wbufs: Vec<&GpuWeight> = Vec::new();
        for w in &e.low.weights {
            let g = wset
                .get(&w.name)
                .ok_or_else(|| BackendError::MissingWeight {
                    backend: NAME.into(),
                    name: w.name.clone(),
                })?;
            if g.dtype != w.dtype || g.shape != w.shape {
                return Err(BackendError::WeightMismatch {
                    backend: NAME.into(),
                    name: w.name.clone(),
                    got: format!("{} {:?}", g.dtype, g.shape),
                    want: format!("{} {:?}", w.dtype, w.shape),
                });
            }
            wbufs.push(g);
        }
        let mut sbufs: Vec<&wgpu::Buffer> = Vec::new();
        for id in &e.low.states {
            let t = e.graph.tensor(*id);
            let i = sset
                .index(&t.name)
                .ok_or_else(|| Self::missing_state(&t.name))?;
            if sset.decls[i].numel() != t.numel() {
                return Err(dev_err(format!(
                    "state {} holds {} values, the graph expects {:?}",
                    t.name,
                    sset.decls[i].numel(),
                    t.shape
                )));
            }
            let b = &sset.bufs[i];
            if b.size() > self.max_binding {
                return Err(dev_err(format!(
                    "state {} ({} bytes) exceeds the largest storage binding ({})",
                    t.name,
                    b.size(),
                    self.max_binding
                )));
            }
            sbufs.push(b);
        }
        let resolve = |r: &Res| -> &wgpu::Buffer {
            match *r {
                Res::Slot(i) => &e.slots[i],
                Res::Input(i) => &e.inputs[i],
                Res::State(i) => sbufs[i],
                Res::Weight { w, part } => &wbufs[w].parts[part].buf,
                Res::Scratch(i) => &e.scratch[i],
                Res::Aux(i) => &e.aux[i],
            }
        };
        let mut groups = Vec::with_capacity(e.dispatches.len());
        for d in &e.dispatches {
            let mut entries = vec![wgpu::BindGroupEntry {
                binding: 0,
                resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                    buffer: &e.params,
                    offset: d.params_offset,
                    size: wgpu::BufferSize::new((PARAMS * 4) as u64),
                }),
            }];
            for (i, r) in d.binds.iter().enumerate() {
                entries.push(wgpu::BindGroupEntry {
                    binding: i as u32 + 1,
                    resource: resolve(r).as_entire_binding(),
                });
            }
            groups.push(
                self.gpu
                    .device
                    .create_bind_group(&wgpu::BindGroupDescriptor {
                        label: None,
                        layout: &d.pipe.layout,
                        entries: &entries,
                    }),
            );
        }
        self.take_errors()?;
        Ok(groups)
    }
}

/// Widest verify [`WgpuBackend::step_row_tiles`] lists passes for.
const MAX_TILED_VERIFY: usize = 64;

impl Backend for WgpuBackend {
    fn prefers_fixed_step_widths(&self) -> bool {
        true
    }

    fn step_row_tiles(&self) -> Vec<usize> {
        // Verify and tree graphs match decode row for row, so their matmuls never take the
        // cooperative kernel: the GEMV buckets, then (int8) one more widest-bucket pass per
        // 8 rows up to the widest verify a tree reasonably asks for, or (f32) the tiled
        // kernel's tiles.
        let buckets = shaders::GEMV_BUCKETS.iter().map(|&b| b as usize);
        let widest = *shaders::GEMV_BUCKETS.last().expect("buckets") as usize;
        if self.opts.int8() {
            let passes = (2..=MAX_TILED_VERIFY / widest).map(|p| p * widest);
            buckets
                .chain(passes)
                .filter(|&n| n <= self.opts.int8_max_n())
                .collect()
        } else {
            buckets
                .chain(shaders::TILE_N.iter().map(|&t| t as usize))
                .collect()
        }
    }

    fn name(&self) -> String {
        // The matmul activations too: benchmark reports must say which path they measured.
        let mm = if self.opts.int8() { "int8" } else { "f32" };
        let laid: Vec<&str> = self.wk.relaid.iter().map(|t| t.name()).collect();
        let mut extra = String::new();
        if !laid.is_empty() {
            extra += &format!(", re-laid {}", laid.join("+"));
        }
        if self.has_coop() {
            extra += ", f16 matrix cores for prompts";
        }
        if self.wk.iq4_lookup != shaders::Iq4Lookup::Table {
            extra += &format!(", IQ4_XS {} lookup", self.wk.iq4_lookup.name());
        }
        format!("wgpu ({}, {mm} activations{extra})", self.gpu.info.name)
    }

    fn upload_weights(&mut self, weights: &WeightStore) -> Result<WeightsId, BackendError> {
        let mut set = HashMap::new();
        for (name, t) in &weights.tensors {
            let (rb, parts) = lower::split_rows(t.dtype, &t.shape, self.max_weight_binding)
                .map_err(|m| dev_err(format!("weight {name}: {m}")))?;
            let rows: usize = parts.iter().map(|p| p.1).sum();
            let bytes = t.bytes();
            if bytes.len() != rb * rows {
                return Err(dev_err(format!(
                    "weight {name} of {} {:?} holds {} bytes, expected {}",
                    t.dtype,
                    t.shape,
                    bytes.len(),
                    rb * rows
                )));
            }
            let mut gparts = Vec::new();
            for (first, n) in parts {
                let data = &bytes[first * rb..(first + n) * rb];
                // Parts are whole rows, so whole blocks; split_rows left room for a layout's
                // growth.
                let laid = match relayout::layout_of(t.dtype) {
                    Some(l) if self.wk.relaid.contains(&t.dtype) => {
                        Some((l.relay)(data).ok_or_else(|| {
                            dev_err(format!("weight {name}: partial {} blocks", t.dtype))
                        })?)
                    }
                    _ => None,
                };
                gparts.push(WeightPart {
                    buf: self.buffer_init(
                        name,
                        laid.as_deref().unwrap_or(data),
                        storage_usage(),
                    )?,
                });
            }
            set.insert(
                name.clone(),
                GpuWeight {
                    dtype: t.dtype,
                    shape: t.shape.clone(),
                    parts: gparts,
                },
            );
        }
        self.take_errors()?;
        self.weights.push(set);
        Ok(WeightsId(self.weights.len() as u32 - 1))
    }

    fn alloc_states(&mut self, decls: &[StateDecl]) -> Result<StatesId, BackendError> {
        let mut bufs = Vec::with_capacity(decls.len());
        for (i, d) in decls.iter().enumerate() {
            if decls[..i].iter().any(|o| o.name == d.name) {
                return Err(dev_err(format!("state {} declared twice", d.name)));
            }
            // New buffers are zero-initialised by wgpu.
            bufs.push(self.buffer(&d.name, (d.numel() * 4) as u64, storage_usage()));
        }
        self.take_errors()?;
        self.states.push(Some(StateSet {
            decls: decls.to_vec(),
            bufs,
        }));
        Ok(StatesId(self.states.len() as u32 - 1))
    }

    fn free_states(&mut self, states: StatesId) -> Result<(), BackendError> {
        let slot = self
            .states
            .get_mut(states.0 as usize)
            .ok_or_else(|| bad_handle(format!("states {}", states.0)))?;
        *slot = None;
        for e in &mut self.execs {
            e.bind_cache.retain(|k, _| k.1 != states.0);
        }
        Ok(())
    }

    fn read_state(&mut self, states: StatesId, name: &str) -> Result<Vec<f32>, BackendError> {
        let set = self.state_set(states)?;
        let i = set.index(name).ok_or_else(|| Self::missing_state(name))?;
        let n = set.decls[i].numel();
        let bytes = self.read_back(&[(&set.bufs[i], (n * 4) as u64)])?;
        Ok(bytemuck::pod_collect_to_vec(&bytes[0]))
    }

    fn write_state(
        &mut self,
        states: StatesId,
        name: &str,
        data: &[f32],
    ) -> Result<(), BackendError> {
        let set = self.state_set(states)?;
        let i = set.index(name).ok_or_else(|| Self::missing_state(name))?;
        if set.decls[i].numel() != data.len() {
            return Err(BackendError::BadInput {
                backend: NAME.into(),
                name: name.into(),
                msg: format!(
                    "state holds {} values, got {}",
                    set.decls[i].numel(),
                    data.len()
                ),
            });
        }
        if !data.is_empty() {
            self.gpu
                .queue
                .write_buffer(&set.bufs[i], 0, bytemuck::cast_slice(data));
        }
        self.gpu.queue.submit([]);
        self.take_errors()
    }

    fn copy_states(&mut self, src: StatesId, dst: StatesId) -> Result<(), BackendError> {
        let s = self.state_set(src)?;
        let d = self.state_set(dst)?;
        if s.decls != d.decls {
            return Err(dev_err(
                "copy_states between state sets of different layouts",
            ));
        }
        let mut enc = self.gpu.device.create_command_encoder(&Default::default());
        for (a, b) in s.bufs.iter().zip(&d.bufs) {
            enc.copy_buffer_to_buffer(a, 0, b, 0, a.size());
        }
        self.gpu.queue.submit([enc.finish()]);
        self.take_errors()
    }

    fn copy_state_ranges(
        &mut self,
        states: StatesId,
        copies: &[super::StateCopy],
    ) -> Result<(), BackendError> {
        let set = self.state_set(states)?;
        let mut enc = self.gpu.device.create_command_encoder(&Default::default());
        // wgpu copies never read and write one buffer: those go through a bounce buffer.
        let bounce_len = copies
            .iter()
            .filter(|c| c.src == c.dst)
            .map(|c| c.len)
            .max()
            .unwrap_or(0);
        let bounce = (bounce_len > 0)
            .then(|| self.buffer("state bounce", (bounce_len * 4) as u64, storage_usage()));
        for c in copies {
            let si = set
                .index(&c.src)
                .ok_or_else(|| Self::missing_state(&c.src))?;
            let di = set
                .index(&c.dst)
                .ok_or_else(|| Self::missing_state(&c.dst))?;
            c.check(set.decls[si].numel(), set.decls[di].numel())
                .map_err(dev_err)?;
            if c.len == 0 {
                continue;
            }
            let (so, dso, n) = (
                (c.src_off * 4) as u64,
                (c.dst_off * 4) as u64,
                (c.len * 4) as u64,
            );
            match &bounce {
                Some(b) if si == di => {
                    enc.copy_buffer_to_buffer(&set.bufs[si], so, b, 0, n);
                    enc.copy_buffer_to_buffer(b, 0, &set.bufs[di], dso, n);
                }
                _ => enc.copy_buffer_to_buffer(&set.bufs[si], so, &set.bufs[di], dso, n),
            }
        }
        self.gpu.queue.submit([enc.finish()]);
        self.take_errors()
    }

    fn compile(&mut self, graph: &Graph) -> Result<ExecId, BackendError> {
        crate::backend::note_graph_build();
        graph.validate()?;
        let caps = lower::Caps {
            max_binding: self.max_weight_binding,
            subgroups: self.gpu.subgroups && !self.opts.no_subgroups,
            subgroup_min: self.gpu.info.subgroup_min_size,
            max_storage: self.gpu.limits.max_storage_buffers_per_shader_stage,
            fusion: !self.opts.no_fusion
                && std::env::var_os("DELTASPEC_WGPU_NO_FUSION").is_none_or(|v| v == "0"),
            int8: self.opts.int8(),
            int8_max_n: self.opts.int8_max_n(),
            coop: self.has_coop(),
            norm_q8: self.opts.norm_q8.unwrap_or_else(|| {
                std::env::var_os("DELTASPEC_WGPU_NORM_Q8").is_none_or(|v| v != "0")
            }),
            weight_kernels: self.wk.clone(),
            attn_nc_mem: if std::env::var_os("DELTASPEC_WGPU_ATTN_NC").is_none_or(|v| v != "0") {
                self.gpu.limits.max_compute_workgroup_storage_size
            } else {
                0
            },
        };
        let (fusion, plan) = lower::plan(graph, &caps);
        let low = lower::lower(graph, &plan, fusion, &caps)?;
        if crate::backend::profile::enabled() {
            let how = match (self.gpu.timestamps, timing::repeats()) {
                (false, _) => {
                    " (adapter has no timestamp queries inside passes: no per-op times)".into()
                }
                (true, 1) => " (timed by timestamp queries)".to_string(),
                (true, k) => {
                    format!(" (timed by timestamp queries, each run {k} times back to back)")
                }
            };
            eprintln!(
                "wgpu: graph of {} nodes -> {} dispatches{how}",
                graph.nodes.len(),
                low.steps.len(),
            );
        }
        for (i, b) in plan.slot_bytes.iter().enumerate() {
            if *b as u64 > self.max_binding {
                return Err(BackendError::Unsupported {
                    backend: NAME.into(),
                    op: "compile".into(),
                    msg: format!(
                        "slot {i} needs {b} bytes, above the largest storage binding ({})",
                        self.max_binding
                    ),
                });
            }
        }
        let align =
            u64::from(self.gpu.limits.min_uniform_buffer_offset_alignment).max(PARAMS as u64 * 4);
        let mut params = vec![0u8; (low.steps.len().max(1) as u64 * align) as usize];
        let mut dispatches = Vec::with_capacity(low.steps.len());
        for (i, s) in low.steps.iter().enumerate() {
            let pipe = self.pipe(&s.key)?;
            if pipe.storage != s.binds.len() {
                return Err(dev_err(format!(
                    "shader {} declares {} storage bindings, lowering gives {}",
                    s.key.file,
                    pipe.storage,
                    s.binds.len()
                )));
            }
            let off = i as u64 * align;
            params[off as usize..off as usize + PARAMS * 4]
                .copy_from_slice(bytemuck::cast_slice(&s.params));
            dispatches.push(Dispatch {
                label: if s.key.entry == "main" {
                    s.label.clone()
                } else {
                    format!("{} ({})", s.label, s.key.entry)
                },
                pipe,
                params_offset: off,
                binds: s.binds.clone(),
                groups: s.groups,
            });
        }
        let params = self.buffer_init("params", &params, wgpu::BufferUsages::UNIFORM)?;
        let slots = plan
            .slot_bytes
            .iter()
            .map(|b| self.buffer("slot", *b as u64, storage_usage()))
            .collect();
        let inputs = low
            .inputs
            .iter()
            .map(|id| {
                self.buffer(
                    "input",
                    (graph.tensor(*id).numel() * 4) as u64,
                    storage_usage(),
                )
            })
            .collect();
        let scratch = low
            .scratch
            .iter()
            .map(|b| self.buffer("scratch", *b, storage_usage()))
            .collect();
        let mut aux = Vec::new();
        for a in &low.aux {
            aux.push(self.buffer_init("aux", a, storage_usage())?);
        }
        let mut out_offsets = Vec::new();
        let mut total = 0u64;
        for (_, _, id) in &low.outputs {
            out_offsets.push(total);
            total += (graph.tensor(*id).numel() as u64 * 4).next_multiple_of(4);
        }
        let staging = self.buffer(
            "outputs",
            total,
            wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        );
        let poison = if self.opts.poison {
            vec![
                0xffu8;
                plan.slot_bytes
                    .iter()
                    .max()
                    .copied()
                    .unwrap_or(0)
                    .next_multiple_of(4)
            ]
        } else {
            Vec::new()
        };
        let timer = (crate::backend::profile::enabled() && self.gpu.timestamps)
            .then(|| timing::Timer::new(&self.gpu.device, dispatches.len()));
        self.take_errors()?;
        self.execs.push(Exec {
            graph: Arc::new(graph.clone()),
            low,
            dispatches,
            slots,
            inputs,
            scratch,
            aux,
            params,
            out_offsets,
            staging,
            poison,
            bind_cache: HashMap::new(),
            timer,
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
        self.run_now(exe, weights, states, inputs)
    }

    /// Not while profiling (per-dispatch timestamps are read back after every run), nor with
    /// `DELTASPEC_WGPU_PIPELINE=0`.
    fn pipelines(&self) -> bool {
        static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *ON.get_or_init(|| std::env::var("DELTASPEC_WGPU_PIPELINE").map_or(true, |v| v != "0"))
            && !crate::backend::profile::enabled()
    }

    fn submit(
        &mut self,
        exe: ExecId,
        weights: WeightsId,
        states: StatesId,
        inputs: &[(&str, HostData)],
        feed: Feed,
    ) -> Result<(), BackendError> {
        let r = self.submit_run(exe, weights, states, inputs, feed);
        if r.is_err() {
            self.reset_queue();
        }
        r
    }

    fn collect(&mut self) -> Result<Vec<(String, HostTensor)>, BackendError> {
        self.collect_run()
    }

    fn kernel_stats(&mut self) -> Result<Vec<crate::backend::KernelStats>, BackendError> {
        let keys: Vec<ShaderKey> = self.pipes.keys().cloned().collect();
        stats::kernel_stats(&self.gpu.device, &keys, self.gpu.subgroups)
    }

    fn dispatch_costs(&mut self, count: usize) -> Result<Vec<(String, f64)>, BackendError> {
        self.probe_dispatches(count)
    }

    /// Copy bandwidth of the WGSL vec4 copy kernel (`copy.wgsl`, BULK): best of five
    /// submissions of four back-to-back copies each, read + write bytes counted.
    fn copy_bandwidth(&mut self, bytes: usize) -> Result<f64, BackendError> {
        const REPS: u64 = 4;
        let cap = (self.gpu.limits.max_buffer_size / 2).min(self.max_binding);
        let n = (bytes as u64).clamp(1 << 20, cap.max(1 << 20)) / 16 * 16;
        let BulkCopy {
            pipeline: pipe,
            group: bg,
            workgroups: groups,
        } = self.bulk_copy("bandwidth", n)?;
        let mut best = f64::MAX;
        for _ in 0..5 {
            let mut enc = self.gpu.device.create_command_encoder(&Default::default());
            {
                let mut pass = enc.begin_compute_pass(&Default::default());
                pass.set_pipeline(&pipe);
                pass.set_bind_group(0, &bg, &[]);
                for _ in 0..REPS {
                    pass.dispatch_workgroups(groups, 1, 1);
                }
            }
            let t = std::time::Instant::now();
            self.gpu.queue.submit([enc.finish()]);
            self.gpu
                .device
                .poll(wgpu::PollType::wait_indefinitely())
                .map_err(|e| dev_err(format!("poll: {e}")))?;
            best = best.min(t.elapsed().as_secs_f64());
        }
        self.take_errors()?;
        Ok(2.0 * (n * REPS) as f64 / best)
    }
}
