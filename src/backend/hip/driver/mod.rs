//! The GPU driver layer: a small trait over the two vendor driver APIs, each loaded at run time
//! with `libloading` (no link-time dependency: the binary starts on machines without either).
//!
//! Every call returns `Result` with the driver's own error string. A missing library or symbol is
//! reported by [`open`] as an "unavailable" reason, never a panic.

pub mod cuda;
pub mod rocm;

use std::ffi::c_void;

/// A device address.
pub type DevPtr = u64;

/// An opaque driver handle (module, function, event): the driver's pointer value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Handle(pub usize);

/// Which vendor API a driver speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Api {
    /// AMD HIP runtime (`libamdhip64`), code objects for gfx targets.
    Rocm,
    /// NVIDIA driver API (`libcuda`), PTX.
    Cuda,
}

impl Api {
    pub fn name(self) -> &'static str {
        match self {
            Api::Rocm => "rocm",
            Api::Cuda => "cuda",
        }
    }
}

/// Function attributes both APIs number alike (`CUfunction_attribute`, `hipFunction_attribute`),
/// with the names `deltaspec bench kernels` prints.
pub const FUNC_ATTRS: &[(&str, i32)] = &[
    ("registers", 4),
    ("local bytes", 3),
    ("static shared bytes", 1),
    ("max threads per block", 0),
];

/// The driver's "not supported" code for an attribute (CUDA_ERROR_NOT_SUPPORTED,
/// hipErrorNotSupported): the attribute is left out rather than failing the query.
pub(crate) const ATTR_NOT_SUPPORTED: i32 = 801;

/// The operations the backend needs. All work is issued on the driver's one created stream (never
/// the legacy default stream, which cannot be captured), in order.
pub trait Driver {
    fn api(&self) -> Api;
    /// The device's marketing name.
    fn device_name(&self) -> String;
    /// Compute capability as an embedded-target name (`sm_90`), or `None` where the driver
    /// cannot tell (AMD: the loader tries each embedded code object instead).
    fn target(&self) -> Option<String>;
    fn warp_size(&self) -> u32;
    fn multiprocessors(&self) -> u32;

    fn alloc(&self, bytes: usize) -> Result<DevPtr, String>;
    fn free(&self, ptr: DevPtr) -> Result<(), String>;
    /// Fills `bytes` bytes at `ptr` with `value` (queued on the stream).
    fn memset(&self, ptr: DevPtr, value: u8, bytes: usize) -> Result<(), String>;
    /// Host to device; returns once `src` may be reused.
    fn htod(&self, dst: DevPtr, src: &[u8]) -> Result<(), String>;
    /// Device to host; waits for all queued work, then copies.
    fn dtoh(&self, dst: &mut [u8], src: DevPtr) -> Result<(), String>;
    /// Device to device (queued on the stream).
    fn dtod(&self, dst: DevPtr, src: DevPtr, bytes: usize) -> Result<(), String>;

    /// Loads a code object (AMD) or NUL-terminated PTX text (NVIDIA).
    fn load_module(&self, image: &[u8]) -> Result<Handle, String>;
    fn function(&self, module: Handle, name: &str) -> Result<Handle, String>;
    /// Queues a kernel launch.
    ///
    /// # Safety
    /// `args` must hold one pointer per kernel parameter, each pointing at a value of exactly
    /// that parameter's type, and every device pointer among them must address memory the kernel
    /// may access for the given grid; otherwise the kernel reads or writes arbitrary device memory.
    unsafe fn launch(
        &self,
        function: Handle,
        grid: [u32; 3],
        block: [u32; 3],
        shared_bytes: u32,
        args: &mut [*mut c_void],
    ) -> Result<(), String>;
    /// Waits for all queued work.
    fn sync(&self) -> Result<(), String>;

    fn event_create(&self) -> Result<Handle, String>;
    fn event_record(&self, event: Handle) -> Result<(), String>;
    /// Milliseconds between two recorded events (waits for `end`).
    fn event_elapsed_ms(&self, start: Handle, end: Handle) -> Result<f32, String>;
    fn event_destroy(&self, event: Handle) -> Result<(), String>;

    /// The compiled function's resources ([`FUNC_ATTRS`] the driver reports: registers per
    /// thread, local (spill) bytes per thread, ...), from the code the driver loaded, which on
    /// NVIDIA is its own compilation of our PTX.
    fn function_attributes(&self, function: Handle) -> Result<Vec<(&'static str, i32)>, String> {
        let _ = function;
        Err("this driver reports no function attributes".into())
    }

    /// Lets every later launch start while the previous kernel in the stream still runs
    /// (NVIDIA's programmatic dependent launch), where the driver and GPU support it; returns
    /// whether it is on. Only for kernels that begin with `grid_begin` (hip/common.h) in the
    /// loaded code: every embedded kernel does, and for sm_90 and later it is not a no-op.
    fn enable_programmatic_launch(&self) -> bool {
        false
    }

    /// Whether the driver can capture the stream's work into a replayable graph (the symbols
    /// resolved at load time). Drivers without it keep launching directly.
    fn graphs_supported(&self) -> bool {
        false
    }
    /// Starts capturing the stream: launches, memsets and device copies queued until
    /// [`Driver::capture_end`] are recorded, not run. Host copies, syncs and event waits are not
    /// allowed meanwhile (the driver reports an error).
    fn capture_begin(&self) -> Result<(), String> {
        Err("graph capture is not supported by this driver".into())
    }
    /// Ends the capture and instantiates it: the returned executable graph replays the recorded
    /// work with the recorded arguments. Must follow every successful `capture_begin`, also
    /// when queuing failed in between (the partial graph is then discarded by the caller).
    fn capture_end(&self) -> Result<Handle, String> {
        Err("graph capture is not supported by this driver".into())
    }
    /// Queues one replay of an executable graph on the stream.
    fn graph_launch(&self, exec: Handle) -> Result<(), String> {
        let _ = exec;
        Err("graph capture is not supported by this driver".into())
    }
    /// Frees an executable graph (no replay of it may still be queued: sync first).
    fn graph_destroy(&self, exec: Handle) -> Result<(), String> {
        let _ = exec;
        Err("graph capture is not supported by this driver".into())
    }
}

/// [`Driver::function_attributes`] over one API's `FuncGetAttribute(int*, attr, func)`: codes
/// other than success and "not supported" are errors, named by `check`.
pub(crate) fn query_attributes(
    get: impl Fn(&mut i32, i32) -> i32,
    check: impl Fn(i32) -> Result<(), String>,
) -> Result<Vec<(&'static str, i32)>, String> {
    let mut out = Vec::new();
    for &(name, attr) in FUNC_ATTRS {
        let mut v = 0;
        match get(&mut v, attr) {
            0 => out.push((name, v)),
            ATTR_NOT_SUPPORTED => {}
            e => check(e)?,
        }
    }
    Ok(out)
}

/// Opens the first device of one API, or says why it is unavailable.
pub fn open(api: Api) -> Result<Box<dyn Driver>, String> {
    match api {
        Api::Rocm => rocm::Rocm::open().map(|d| Box::new(d) as Box<dyn Driver>),
        Api::Cuda => cuda::Cuda::open().map(|d| Box::new(d) as Box<dyn Driver>),
    }
}

/// Loads the first library of `names` that opens, or lists why each failed.
pub(crate) fn load_library(names: &[&str]) -> Result<libloading::Library, String> {
    let mut why = Vec::new();
    for n in names {
        // SAFETY: loading a vendor driver library runs its initialisers. These are the
        // system's own GPU runtime libraries, loaded by name exactly as a program linked
        // against them would load them; nothing else in the process is affected.
        match unsafe { libloading::Library::new(*n) } {
            Ok(l) => return Ok(l),
            Err(e) => {
                use std::error::Error as _;
                let detail = e
                    .source()
                    .map(|s| s.to_string())
                    .unwrap_or_else(|| e.to_string());
                why.push(detail);
            }
        }
    }
    Err(why.join("; "))
}

/// Copies a function pointer of type `T` out of `lib`.
///
/// # Safety
/// `T` must be the exact C signature of the symbol `name`, and the returned pointer must not be
/// called after `lib` is dropped (the drivers keep the library alongside the pointers).
pub(crate) unsafe fn symbol<T: Copy>(lib: &libloading::Library, name: &str) -> Result<T, String> {
    // SAFETY: forwarded to the caller (the signature matches the symbol).
    unsafe { lib.get::<T>(name) }
        .map(|s| *s)
        .map_err(|e| format!("missing symbol {name}: {e}"))
}
