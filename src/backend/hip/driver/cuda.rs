//! NVIDIA: the CUDA driver API (`libcuda.so.1`), loaded at run time. Kernels are PTX text,
//! JIT-compiled by the driver in `cuModuleLoadDataEx` (whose error log is returned on failure).

use super::{Api, DevPtr, Driver, Handle, load_library, symbol};
use std::ffi::{CStr, CString, c_char, c_void};

type Res = i32;
type Ptr = *mut c_void;

const ATTR_WARP_SIZE: i32 = 10;
const ATTR_MULTIPROCESSOR_COUNT: i32 = 16;
const ATTR_CC_MAJOR: i32 = 75;
const ATTR_CC_MINOR: i32 = 76;
const JIT_ERROR_LOG_BUFFER: i32 = 5;
const JIT_ERROR_LOG_BUFFER_SIZE_BYTES: i32 = 6;
const STREAM_NON_BLOCKING: u32 = 1;
/// `CU_STREAM_CAPTURE_MODE_THREAD_LOCAL`: only this thread's unsafe calls break the capture.
const CAPTURE_MODE_THREAD_LOCAL: i32 = 1;

/// `CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION`: the launch may overlap the previous
/// kernel in the stream once that kernel's blocks have all triggered (`griddepcontrol`).
const LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION: u32 = 6;

/// cuda.h's `CUlaunchAttribute`: the id, padding to 8 bytes, and a 64-byte value union (whose
/// pointer members make it 8-byte aligned); `programmaticStreamSerializationAllowed` is its
/// first `int`.
#[repr(C, align(8))]
struct LaunchAttribute {
    id: u32,
    _pad: u32,
    value: [u8; 64],
}

/// cuda.h's `CUlaunchConfig`.
#[repr(C)]
struct LaunchConfig {
    grid: [u32; 3],
    block: [u32; 3],
    shared_bytes: u32,
    stream: Ptr,
    attrs: *mut LaunchAttribute,
    num_attrs: u32,
}

/// `cuLaunchKernelEx` (CUDA >= 11.8), resolved separately like the graph entry points.
type LaunchKernelEx =
    unsafe extern "C" fn(*const LaunchConfig, Ptr, *mut *mut c_void, *mut *mut c_void) -> Res;

/// `cuFuncGetAttribute(int* value, CUfunction_attribute attrib, CUfunction f)`.
type FuncGetAttribute = unsafe extern "C" fn(*mut i32, i32, Ptr) -> Res;

/// The graph entry points (CUDA >= 11.4), resolved separately: a driver without them still runs,
/// launching directly.
#[allow(non_snake_case)]
struct GraphFns {
    cuStreamBeginCapture_v2: unsafe extern "C" fn(Ptr, i32) -> Res,
    cuStreamEndCapture: unsafe extern "C" fn(Ptr, *mut Ptr) -> Res,
    cuGraphInstantiateWithFlags: unsafe extern "C" fn(*mut Ptr, Ptr, u64) -> Res,
    cuGraphLaunch: unsafe extern "C" fn(Ptr, Ptr) -> Res,
    cuGraphExecDestroy: unsafe extern "C" fn(Ptr) -> Res,
    cuGraphDestroy: unsafe extern "C" fn(Ptr) -> Res,
}

impl GraphFns {
    /// # Safety
    /// As [`symbol`]: the signatures are cuda.h's declarations of these symbols.
    unsafe fn load(lib: &libloading::Library) -> Result<GraphFns, String> {
        // SAFETY: forwarded to the caller.
        unsafe {
            Ok(GraphFns {
                cuStreamBeginCapture_v2: symbol(lib, "cuStreamBeginCapture_v2")?,
                cuStreamEndCapture: symbol(lib, "cuStreamEndCapture")?,
                cuGraphInstantiateWithFlags: symbol(lib, "cuGraphInstantiateWithFlags")?,
                cuGraphLaunch: symbol(lib, "cuGraphLaunch")?,
                cuGraphExecDestroy: symbol(lib, "cuGraphExecDestroy")?,
                cuGraphDestroy: symbol(lib, "cuGraphDestroy")?,
            })
        }
    }
}

#[allow(non_snake_case)]
struct Fns {
    cuInit: unsafe extern "C" fn(u32) -> Res,
    cuDeviceGetCount: unsafe extern "C" fn(*mut i32) -> Res,
    cuDeviceGet: unsafe extern "C" fn(*mut i32, i32) -> Res,
    cuDeviceGetName: unsafe extern "C" fn(*mut c_char, i32, i32) -> Res,
    cuDeviceGetAttribute: unsafe extern "C" fn(*mut i32, i32, i32) -> Res,
    cuDevicePrimaryCtxRetain: unsafe extern "C" fn(*mut Ptr, i32) -> Res,
    cuDevicePrimaryCtxRelease_v2: unsafe extern "C" fn(i32) -> Res,
    cuCtxSetCurrent: unsafe extern "C" fn(Ptr) -> Res,
    cuMemAlloc_v2: unsafe extern "C" fn(*mut u64, usize) -> Res,
    cuMemFree_v2: unsafe extern "C" fn(u64) -> Res,
    cuMemsetD8Async: unsafe extern "C" fn(u64, u8, usize, Ptr) -> Res,
    cuMemcpyHtoDAsync_v2: unsafe extern "C" fn(u64, *const c_void, usize, Ptr) -> Res,
    cuMemcpyDtoHAsync_v2: unsafe extern "C" fn(*mut c_void, u64, usize, Ptr) -> Res,
    cuMemcpyDtoDAsync_v2: unsafe extern "C" fn(u64, u64, usize, Ptr) -> Res,
    cuStreamCreate: unsafe extern "C" fn(*mut Ptr, u32) -> Res,
    cuStreamSynchronize: unsafe extern "C" fn(Ptr) -> Res,
    cuStreamDestroy_v2: unsafe extern "C" fn(Ptr) -> Res,
    cuModuleLoadDataEx:
        unsafe extern "C" fn(*mut Ptr, *const c_void, u32, *mut i32, *mut *mut c_void) -> Res,
    cuModuleGetFunction: unsafe extern "C" fn(*mut Ptr, Ptr, *const c_char) -> Res,
    cuModuleUnload: unsafe extern "C" fn(Ptr) -> Res,
    #[allow(clippy::type_complexity)]
    cuLaunchKernel: unsafe extern "C" fn(
        Ptr,
        u32,
        u32,
        u32,
        u32,
        u32,
        u32,
        u32,
        Ptr,
        *mut *mut c_void,
        *mut *mut c_void,
    ) -> Res,
    cuEventCreate: unsafe extern "C" fn(*mut Ptr, u32) -> Res,
    cuEventRecord: unsafe extern "C" fn(Ptr, Ptr) -> Res,
    cuEventSynchronize: unsafe extern "C" fn(Ptr) -> Res,
    cuEventElapsedTime: unsafe extern "C" fn(*mut f32, Ptr, Ptr) -> Res,
    cuEventDestroy_v2: unsafe extern "C" fn(Ptr) -> Res,
    cuGetErrorString: unsafe extern "C" fn(Res, *mut *const c_char) -> Res,
}

pub struct Cuda {
    f: Fns,
    g: Option<GraphFns>,
    launch_ex: Option<LaunchKernelEx>,
    /// `cuFuncGetAttribute`, resolved separately (the CPU emulator has it too, but a stand-in
    /// without it still runs).
    func_attr: Option<FuncGetAttribute>,
    /// Launch with programmatic stream serialization (see `enable_programmatic_launch`).
    pdl: std::cell::Cell<bool>,
    dev: i32,
    ctx: Ptr,
    stream: Ptr,
    modules: std::cell::RefCell<Vec<Ptr>>,
    name: String,
    cc: (i32, i32),
    warp: u32,
    sms: u32,
    // Declared last: dropped after every use of the function pointers above.
    _lib: libloading::Library,
}

impl Cuda {
    pub fn open() -> Result<Cuda, String> {
        // DELTASPEC_CUDA_LIB overrides the library (tests: the CPU emulator in tools/device/emu).
        let lib = match std::env::var("DELTASPEC_CUDA_LIB") {
            Ok(path) if !path.is_empty() => load_library(&[path.as_str()])?,
            _ => load_library(&["libcuda.so.1", "libcuda.so"])?,
        };
        // SAFETY: each signature is the CUDA driver API's C declaration of that symbol
        // (cuda.h; the `_v2` names are the 64-bit entry points cuda.h maps the plain names to).
        // The pointers are stored next to `lib`, which outlives them.
        let f = unsafe {
            Fns {
                cuInit: symbol(&lib, "cuInit")?,
                cuDeviceGetCount: symbol(&lib, "cuDeviceGetCount")?,
                cuDeviceGet: symbol(&lib, "cuDeviceGet")?,
                cuDeviceGetName: symbol(&lib, "cuDeviceGetName")?,
                cuDeviceGetAttribute: symbol(&lib, "cuDeviceGetAttribute")?,
                cuDevicePrimaryCtxRetain: symbol(&lib, "cuDevicePrimaryCtxRetain")?,
                cuDevicePrimaryCtxRelease_v2: symbol(&lib, "cuDevicePrimaryCtxRelease_v2")?,
                cuCtxSetCurrent: symbol(&lib, "cuCtxSetCurrent")?,
                cuMemAlloc_v2: symbol(&lib, "cuMemAlloc_v2")?,
                cuMemFree_v2: symbol(&lib, "cuMemFree_v2")?,
                cuMemsetD8Async: symbol(&lib, "cuMemsetD8Async")?,
                cuMemcpyHtoDAsync_v2: symbol(&lib, "cuMemcpyHtoDAsync_v2")?,
                cuMemcpyDtoHAsync_v2: symbol(&lib, "cuMemcpyDtoHAsync_v2")?,
                cuMemcpyDtoDAsync_v2: symbol(&lib, "cuMemcpyDtoDAsync_v2")?,
                cuStreamCreate: symbol(&lib, "cuStreamCreate")?,
                cuStreamSynchronize: symbol(&lib, "cuStreamSynchronize")?,
                cuStreamDestroy_v2: symbol(&lib, "cuStreamDestroy_v2")?,
                cuModuleLoadDataEx: symbol(&lib, "cuModuleLoadDataEx")?,
                cuModuleGetFunction: symbol(&lib, "cuModuleGetFunction")?,
                cuModuleUnload: symbol(&lib, "cuModuleUnload")?,
                cuLaunchKernel: symbol(&lib, "cuLaunchKernel")?,
                cuEventCreate: symbol(&lib, "cuEventCreate")?,
                cuEventRecord: symbol(&lib, "cuEventRecord")?,
                cuEventSynchronize: symbol(&lib, "cuEventSynchronize")?,
                cuEventElapsedTime: symbol(&lib, "cuEventElapsedTime")?,
                cuEventDestroy_v2: symbol(&lib, "cuEventDestroy_v2")?,
                cuGetErrorString: symbol(&lib, "cuGetErrorString")?,
            }
        };
        // SAFETY: as above (cuda.h's declarations); stored next to `lib`.
        let g = unsafe { GraphFns::load(&lib) }.ok();
        // SAFETY: cuda.h's declaration of cuLaunchKernelEx (LaunchConfig mirrors CUlaunchConfig).
        let launch_ex = unsafe { symbol::<LaunchKernelEx>(&lib, "cuLaunchKernelEx") }.ok();
        // SAFETY: cuda.h's declaration of cuFuncGetAttribute; stored next to `lib`.
        let func_attr = unsafe { symbol::<FuncGetAttribute>(&lib, "cuFuncGetAttribute") }.ok();
        let mut d = Cuda {
            f,
            g,
            launch_ex,
            func_attr,
            pdl: std::cell::Cell::new(false),
            dev: 0,
            ctx: std::ptr::null_mut(),
            stream: std::ptr::null_mut(),
            modules: Default::default(),
            name: String::new(),
            cc: (0, 0),
            warp: 0,
            sms: 0,
            _lib: lib,
        };
        // SAFETY: plain API calls with valid out-pointers to locals.
        unsafe {
            d.check((d.f.cuInit)(0), "cuInit")?;
            let mut n = 0i32;
            d.check((d.f.cuDeviceGetCount)(&mut n), "cuDeviceGetCount")?;
            if n < 1 {
                return Err("no CUDA device".into());
            }
            let mut dev = 0i32;
            d.check((d.f.cuDeviceGet)(&mut dev, 0), "cuDeviceGet")?;
            d.dev = dev;
            let mut buf = [0 as c_char; 256];
            d.check(
                (d.f.cuDeviceGetName)(buf.as_mut_ptr(), buf.len() as i32, dev),
                "cuDeviceGetName",
            )?;
            d.name = CStr::from_ptr(buf.as_ptr()).to_string_lossy().into_owned();
            d.cc = (d.attr(ATTR_CC_MAJOR)?, d.attr(ATTR_CC_MINOR)?);
            d.warp = d.attr(ATTR_WARP_SIZE)? as u32;
            d.sms = d.attr(ATTR_MULTIPROCESSOR_COUNT)?.max(1) as u32;
            let mut ctx = std::ptr::null_mut();
            d.check(
                (d.f.cuDevicePrimaryCtxRetain)(&mut ctx, dev),
                "cuDevicePrimaryCtxRetain",
            )?;
            d.ctx = ctx;
            d.check((d.f.cuCtxSetCurrent)(ctx), "cuCtxSetCurrent")?;
            let mut s = std::ptr::null_mut();
            d.check(
                (d.f.cuStreamCreate)(&mut s, STREAM_NON_BLOCKING),
                "cuStreamCreate",
            )?;
            d.stream = s;
        }
        Ok(d)
    }

    fn check(&self, r: Res, what: &str) -> Result<(), String> {
        if r == 0 {
            return Ok(());
        }
        let mut p: *const c_char = std::ptr::null();
        // SAFETY: cuGetErrorString stores a pointer to a static string (or leaves it null).
        let msg = unsafe {
            (self.f.cuGetErrorString)(r, &mut p);
            if p.is_null() {
                "unknown error".into()
            } else {
                CStr::from_ptr(p).to_string_lossy().into_owned()
            }
        };
        Err(format!("{what}: {msg} (CUresult {r})"))
    }

    fn attr(&self, a: i32) -> Result<i32, String> {
        let mut v = 0i32;
        // SAFETY: valid out-pointer; self.dev is a device from cuDeviceGet.
        self.check(
            unsafe { (self.f.cuDeviceGetAttribute)(&mut v, a, self.dev) },
            "cuDeviceGetAttribute",
        )?;
        Ok(v)
    }

    /// Makes our context current on the calling thread (the driver API binds per thread).
    fn bind(&self) -> Result<(), String> {
        // SAFETY: our retained primary context.
        self.check(
            unsafe { (self.f.cuCtxSetCurrent)(self.ctx) },
            "cuCtxSetCurrent",
        )
    }
}

impl Driver for Cuda {
    fn api(&self) -> Api {
        Api::Cuda
    }
    fn device_name(&self) -> String {
        self.name.clone()
    }
    fn target(&self) -> Option<String> {
        Some(format!("sm_{}{}", self.cc.0, self.cc.1))
    }
    fn warp_size(&self) -> u32 {
        self.warp
    }
    fn multiprocessors(&self) -> u32 {
        self.sms
    }

    fn alloc(&self, bytes: usize) -> Result<DevPtr, String> {
        self.bind()?;
        let mut p = 0u64;
        // SAFETY: valid out-pointer.
        self.check(
            unsafe { (self.f.cuMemAlloc_v2)(&mut p, bytes.max(1)) },
            "cuMemAlloc",
        )?;
        Ok(p)
    }
    fn free(&self, ptr: DevPtr) -> Result<(), String> {
        self.bind()?;
        // SAFETY: cuMemFree validates the pointer and reports an error for one it does not know.
        self.check(unsafe { (self.f.cuMemFree_v2)(ptr) }, "cuMemFree")
    }
    fn memset(&self, ptr: DevPtr, value: u8, bytes: usize) -> Result<(), String> {
        if bytes == 0 {
            return Ok(());
        }
        self.bind()?;
        // SAFETY: the caller owns `bytes` bytes at `ptr`.
        self.check(
            unsafe { (self.f.cuMemsetD8Async)(ptr, value, bytes, self.stream) },
            "cuMemsetD8Async",
        )
    }
    fn htod(&self, dst: DevPtr, src: &[u8]) -> Result<(), String> {
        if src.is_empty() {
            return Ok(());
        }
        self.bind()?;
        // SAFETY: `src` is a live host slice; the caller owns src.len() bytes at `dst`.
        self.check(
            unsafe {
                (self.f.cuMemcpyHtoDAsync_v2)(dst, src.as_ptr().cast(), src.len(), self.stream)
            },
            "cuMemcpyHtoDAsync",
        )?;
        // Wait so that `src` may be dropped.
        self.sync()
    }
    fn dtoh(&self, dst: &mut [u8], src: DevPtr) -> Result<(), String> {
        if dst.is_empty() {
            return Ok(());
        }
        self.bind()?;
        // SAFETY: `dst` is a live, exclusively borrowed host slice; we wait for the copy below
        // before returning, so the borrow covers the whole transfer.
        self.check(
            unsafe {
                (self.f.cuMemcpyDtoHAsync_v2)(dst.as_mut_ptr().cast(), src, dst.len(), self.stream)
            },
            "cuMemcpyDtoHAsync",
        )?;
        self.sync()
    }
    fn dtod(&self, dst: DevPtr, src: DevPtr, bytes: usize) -> Result<(), String> {
        if bytes == 0 {
            return Ok(());
        }
        self.bind()?;
        // SAFETY: the caller owns `bytes` bytes at both device addresses.
        self.check(
            unsafe { (self.f.cuMemcpyDtoDAsync_v2)(dst, src, bytes, self.stream) },
            "cuMemcpyDtoDAsync",
        )
    }

    fn load_module(&self, image: &[u8]) -> Result<Handle, String> {
        if image.last() != Some(&0) && !image.starts_with(b"\x7fELF") {
            return Err("PTX image is not NUL-terminated".into());
        }
        self.bind()?;
        let mut log = vec![0u8; 16 << 10];
        let mut opts = [JIT_ERROR_LOG_BUFFER, JIT_ERROR_LOG_BUFFER_SIZE_BYTES];
        let mut vals: [*mut c_void; 2] = [log.as_mut_ptr().cast(), log.len() as *mut c_void];
        let mut m = std::ptr::null_mut();
        // SAFETY: `image` is NUL-terminated PTX or a whole cubin (ELF, which carries its own
        // sizes); the option arrays hold 2 entries each, the log buffer is live for the call and
        // its size is passed by value as the API requires.
        let r = unsafe {
            (self.f.cuModuleLoadDataEx)(
                &mut m,
                image.as_ptr().cast(),
                2,
                opts.as_mut_ptr(),
                vals.as_mut_ptr(),
            )
        };
        if let Err(e) = self.check(r, "cuModuleLoadDataEx") {
            let end = log.iter().position(|b| *b == 0).unwrap_or(log.len());
            return Err(format!(
                "{e}: {}",
                String::from_utf8_lossy(&log[..end]).trim()
            ));
        }
        self.modules.borrow_mut().push(m);
        Ok(Handle(m as usize))
    }
    fn function(&self, module: Handle, name: &str) -> Result<Handle, String> {
        let c = CString::new(name).map_err(|_| format!("bad kernel name {name:?}"))?;
        let mut f = std::ptr::null_mut();
        // SAFETY: `module` came from load_module and is still loaded; `c` is NUL-terminated.
        self.check(
            unsafe { (self.f.cuModuleGetFunction)(&mut f, module.0 as Ptr, c.as_ptr()) },
            &format!("cuModuleGetFunction({name})"),
        )?;
        Ok(Handle(f as usize))
    }
    fn function_attributes(&self, function: Handle) -> Result<Vec<(&'static str, i32)>, String> {
        let get = self
            .func_attr
            .ok_or("the driver has no cuFuncGetAttribute")?;
        self.bind()?;
        super::query_attributes(
            // SAFETY: `function` came from `function` on a module still loaded; `v` is a live
            // int the call writes.
            |v, attr| unsafe { get(v, attr, function.0 as Ptr) },
            |e| self.check(e, "cuFuncGetAttribute"),
        )
    }
    unsafe fn launch(
        &self,
        function: Handle,
        grid: [u32; 3],
        block: [u32; 3],
        shared_bytes: u32,
        args: &mut [*mut c_void],
    ) -> Result<(), String> {
        self.bind()?;
        if let Some(ex) = self.launch_ex.filter(|_| self.pdl.get()) {
            let mut attr = LaunchAttribute {
                id: LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
                _pad: 0,
                value: [0; 64],
            };
            attr.value[..4].copy_from_slice(&1i32.to_ne_bytes());
            let cfg = LaunchConfig {
                grid,
                block,
                shared_bytes,
                stream: self.stream,
                attrs: &mut attr,
                num_attrs: 1,
            };
            // SAFETY: as below; `cfg` and the attribute it points at live through the call.
            let r = unsafe {
                ex(
                    &cfg,
                    function.0 as Ptr,
                    args.as_mut_ptr(),
                    std::ptr::null_mut(),
                )
            };
            return self.check(r, "cuLaunchKernelEx");
        }
        // SAFETY: the caller guarantees `args` matches the kernel's parameters (see the trait).
        let r = unsafe {
            (self.f.cuLaunchKernel)(
                function.0 as Ptr,
                grid[0],
                grid[1],
                grid[2],
                block[0],
                block[1],
                block[2],
                shared_bytes,
                self.stream,
                args.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        };
        self.check(r, "cuLaunchKernel")
    }
    fn sync(&self) -> Result<(), String> {
        self.bind()?;
        // SAFETY: our stream.
        self.check(
            unsafe { (self.f.cuStreamSynchronize)(self.stream) },
            "cuStreamSynchronize",
        )
    }

    fn event_create(&self) -> Result<Handle, String> {
        self.bind()?;
        let mut e = std::ptr::null_mut();
        // SAFETY: valid out-pointer; flags 0 = default (timing enabled).
        self.check(
            unsafe { (self.f.cuEventCreate)(&mut e, 0) },
            "cuEventCreate",
        )?;
        Ok(Handle(e as usize))
    }
    fn event_record(&self, event: Handle) -> Result<(), String> {
        // SAFETY: an event from event_create, our stream.
        self.check(
            unsafe { (self.f.cuEventRecord)(event.0 as Ptr, self.stream) },
            "cuEventRecord",
        )
    }
    fn event_elapsed_ms(&self, start: Handle, end: Handle) -> Result<f32, String> {
        let mut ms = 0f32;
        // SAFETY: events from event_create; valid out-pointer.
        unsafe {
            self.check(
                (self.f.cuEventSynchronize)(end.0 as Ptr),
                "cuEventSynchronize",
            )?;
            self.check(
                (self.f.cuEventElapsedTime)(&mut ms, start.0 as Ptr, end.0 as Ptr),
                "cuEventElapsedTime",
            )?;
        }
        Ok(ms)
    }
    fn event_destroy(&self, event: Handle) -> Result<(), String> {
        // SAFETY: an event from event_create, destroyed once by the caller.
        self.check(
            unsafe { (self.f.cuEventDestroy_v2)(event.0 as Ptr) },
            "cuEventDestroy",
        )
    }

    fn enable_programmatic_launch(&self) -> bool {
        // griddepcontrol needs sm_90; the attribute needs cuLaunchKernelEx.
        self.pdl.set(self.launch_ex.is_some() && self.cc.0 >= 9);
        self.pdl.get()
    }

    fn graphs_supported(&self) -> bool {
        self.g.is_some()
    }
    fn capture_begin(&self) -> Result<(), String> {
        let g = self.g.as_ref().ok_or("no graph entry points")?;
        self.bind()?;
        // SAFETY: our stream (a created one: the legacy stream cannot be captured).
        self.check(
            unsafe { (g.cuStreamBeginCapture_v2)(self.stream, CAPTURE_MODE_THREAD_LOCAL) },
            "cuStreamBeginCapture",
        )
    }
    fn capture_end(&self) -> Result<Handle, String> {
        let g = self.g.as_ref().ok_or("no graph entry points")?;
        self.bind()?;
        let mut graph = std::ptr::null_mut();
        // SAFETY: our stream, capturing since capture_begin; valid out-pointer.
        self.check(
            unsafe { (g.cuStreamEndCapture)(self.stream, &mut graph) },
            "cuStreamEndCapture",
        )?;
        let mut exec = std::ptr::null_mut();
        // SAFETY: `graph` came from cuStreamEndCapture; valid out-pointer. The executable graph
        // keeps its own copy of the nodes, so the template is destroyed right after.
        let r = unsafe { (g.cuGraphInstantiateWithFlags)(&mut exec, graph, 0) };
        // SAFETY: `graph` is ours and destroyed once.
        unsafe { (g.cuGraphDestroy)(graph) };
        self.check(r, "cuGraphInstantiateWithFlags")?;
        Ok(Handle(exec as usize))
    }
    fn graph_launch(&self, exec: Handle) -> Result<(), String> {
        let g = self.g.as_ref().ok_or("no graph entry points")?;
        self.bind()?;
        // SAFETY: an executable graph from capture_end, not yet destroyed; our stream.
        self.check(
            unsafe { (g.cuGraphLaunch)(exec.0 as Ptr, self.stream) },
            "cuGraphLaunch",
        )
    }
    fn graph_destroy(&self, exec: Handle) -> Result<(), String> {
        let g = self.g.as_ref().ok_or("no graph entry points")?;
        self.bind()?;
        // SAFETY: an executable graph from capture_end, destroyed once by the caller.
        self.check(
            unsafe { (g.cuGraphExecDestroy)(exec.0 as Ptr) },
            "cuGraphExecDestroy",
        )
    }
}

impl Drop for Cuda {
    fn drop(&mut self) {
        // SAFETY: our stream, modules and primary-context reference, released once; errors at
        // teardown are ignored.
        unsafe {
            (self.f.cuCtxSetCurrent)(self.ctx);
            if !self.stream.is_null() {
                (self.f.cuStreamSynchronize)(self.stream);
                (self.f.cuStreamDestroy_v2)(self.stream);
            }
            for m in self.modules.borrow().iter() {
                (self.f.cuModuleUnload)(*m);
            }
            if !self.ctx.is_null() {
                (self.f.cuDevicePrimaryCtxRelease_v2)(self.dev);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{align_of, offset_of, size_of};

    /// The launch structs mirror cuda.h's layout on 64-bit hosts (the driver reads them by
    /// offset): `CUlaunchAttribute` is 72 bytes (id, pad, 64-byte value) and `CUlaunchConfig`
    /// 56 (six dims, shared bytes, then the 8-byte aligned stream and attribute pointers).
    #[test]
    fn launch_structs_match_cuda_h() {
        assert_eq!(size_of::<LaunchAttribute>(), 72);
        assert_eq!(align_of::<LaunchAttribute>(), 8);
        assert_eq!(offset_of!(LaunchAttribute, value), 8);
        assert_eq!(offset_of!(LaunchConfig, shared_bytes), 24);
        assert_eq!(offset_of!(LaunchConfig, stream), 32);
        assert_eq!(offset_of!(LaunchConfig, attrs), 40);
        assert_eq!(offset_of!(LaunchConfig, num_attrs), 48);
        assert_eq!(size_of::<LaunchConfig>(), 56);
    }
}
