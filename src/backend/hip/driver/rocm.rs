//! AMD: the HIP runtime (`libamdhip64.so`), loaded at run time.
//!
//! Only version-stable entry points are used: device properties come from
//! `hipDeviceGetAttribute` + `hipDeviceGetName`, never from the `hipDeviceProp_t` struct whose
//! layout changed in ROCm 6. Attribute ids are those of the ROCm >= 5 enum.

use super::{Api, DevPtr, Driver, Handle, load_library, symbol};
use std::ffi::{CStr, CString, c_char, c_void};

type Err = i32;
type Ptr = *mut c_void;

const HIP_MEMCPY_H2D: i32 = 1;
const HIP_MEMCPY_D2H: i32 = 2;
const HIP_MEMCPY_D2D: i32 = 3;
const ATTR_MULTIPROCESSOR_COUNT: i32 = 63;
const ATTR_WARP_SIZE: i32 = 87;
/// `hipStreamCaptureModeThreadLocal`.
const CAPTURE_MODE_THREAD_LOCAL: i32 = 1;

/// The graph entry points, resolved separately: a runtime without them still runs, launching
/// directly.
#[allow(non_snake_case)]
struct GraphFns {
    hipStreamBeginCapture: unsafe extern "C" fn(Ptr, i32) -> Err,
    hipStreamEndCapture: unsafe extern "C" fn(Ptr, *mut Ptr) -> Err,
    hipGraphInstantiate: unsafe extern "C" fn(*mut Ptr, Ptr, *mut Ptr, *mut c_char, usize) -> Err,
    hipGraphLaunch: unsafe extern "C" fn(Ptr, Ptr) -> Err,
    hipGraphExecDestroy: unsafe extern "C" fn(Ptr) -> Err,
    hipGraphDestroy: unsafe extern "C" fn(Ptr) -> Err,
}

impl GraphFns {
    /// # Safety
    /// As [`symbol`]: the signatures are hip_runtime_api.h's declarations of these symbols.
    unsafe fn load(lib: &libloading::Library) -> Result<GraphFns, String> {
        // SAFETY: forwarded to the caller.
        unsafe {
            Ok(GraphFns {
                hipStreamBeginCapture: symbol(lib, "hipStreamBeginCapture")?,
                hipStreamEndCapture: symbol(lib, "hipStreamEndCapture")?,
                hipGraphInstantiate: symbol(lib, "hipGraphInstantiate")?,
                hipGraphLaunch: symbol(lib, "hipGraphLaunch")?,
                hipGraphExecDestroy: symbol(lib, "hipGraphExecDestroy")?,
                hipGraphDestroy: symbol(lib, "hipGraphDestroy")?,
            })
        }
    }
}

#[allow(non_snake_case)]
struct Fns {
    hipInit: unsafe extern "C" fn(u32) -> Err,
    hipGetDeviceCount: unsafe extern "C" fn(*mut i32) -> Err,
    hipSetDevice: unsafe extern "C" fn(i32) -> Err,
    hipDeviceGetAttribute: unsafe extern "C" fn(*mut i32, i32, i32) -> Err,
    hipDeviceGetName: unsafe extern "C" fn(*mut c_char, i32, i32) -> Err,
    hipMalloc: unsafe extern "C" fn(*mut Ptr, usize) -> Err,
    hipFree: unsafe extern "C" fn(Ptr) -> Err,
    hipMemsetAsync: unsafe extern "C" fn(Ptr, i32, usize, Ptr) -> Err,
    hipMemcpyAsync: unsafe extern "C" fn(Ptr, *const c_void, usize, i32, Ptr) -> Err,
    hipStreamCreate: unsafe extern "C" fn(*mut Ptr) -> Err,
    hipStreamSynchronize: unsafe extern "C" fn(Ptr) -> Err,
    hipStreamDestroy: unsafe extern "C" fn(Ptr) -> Err,
    hipModuleLoadData: unsafe extern "C" fn(*mut Ptr, *const c_void) -> Err,
    hipModuleGetFunction: unsafe extern "C" fn(*mut Ptr, Ptr, *const c_char) -> Err,
    hipModuleUnload: unsafe extern "C" fn(Ptr) -> Err,
    #[allow(clippy::type_complexity)]
    hipModuleLaunchKernel: unsafe extern "C" fn(
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
    ) -> Err,
    hipEventCreate: unsafe extern "C" fn(*mut Ptr) -> Err,
    hipEventRecord: unsafe extern "C" fn(Ptr, Ptr) -> Err,
    hipEventSynchronize: unsafe extern "C" fn(Ptr) -> Err,
    hipEventElapsedTime: unsafe extern "C" fn(*mut f32, Ptr, Ptr) -> Err,
    hipEventDestroy: unsafe extern "C" fn(Ptr) -> Err,
    hipGetErrorString: unsafe extern "C" fn(Err) -> *const c_char,
}

pub struct Rocm {
    f: Fns,
    g: Option<GraphFns>,
    /// `hipFuncGetAttribute(int* value, hipFunction_attribute attrib, hipFunction_t f)`,
    /// resolved separately: a runtime without it still runs.
    func_attr: Option<unsafe extern "C" fn(*mut i32, i32, Ptr) -> Err>,
    stream: Ptr,
    modules: std::cell::RefCell<Vec<Ptr>>,
    name: String,
    warp: u32,
    sms: u32,
    // Declared last: dropped after every use of the function pointers above.
    _lib: libloading::Library,
}

impl Rocm {
    pub fn open() -> Result<Rocm, String> {
        let lib = load_library(&[
            "libamdhip64.so",
            "libamdhip64.so.7",
            "libamdhip64.so.6",
            "libamdhip64.so.5",
        ])?;
        // SAFETY: each signature below is the HIP runtime API's C declaration of that symbol
        // (hip_runtime_api.h, stable since ROCm 5); the pointers are stored next to `lib`, which
        // outlives them (see the field order of `Rocm`).
        let f = unsafe {
            Fns {
                hipInit: symbol(&lib, "hipInit")?,
                hipGetDeviceCount: symbol(&lib, "hipGetDeviceCount")?,
                hipSetDevice: symbol(&lib, "hipSetDevice")?,
                hipDeviceGetAttribute: symbol(&lib, "hipDeviceGetAttribute")?,
                hipDeviceGetName: symbol(&lib, "hipDeviceGetName")?,
                hipMalloc: symbol(&lib, "hipMalloc")?,
                hipFree: symbol(&lib, "hipFree")?,
                hipMemsetAsync: symbol(&lib, "hipMemsetAsync")?,
                hipMemcpyAsync: symbol(&lib, "hipMemcpyAsync")?,
                hipStreamCreate: symbol(&lib, "hipStreamCreate")?,
                hipStreamSynchronize: symbol(&lib, "hipStreamSynchronize")?,
                hipStreamDestroy: symbol(&lib, "hipStreamDestroy")?,
                hipModuleLoadData: symbol(&lib, "hipModuleLoadData")?,
                hipModuleGetFunction: symbol(&lib, "hipModuleGetFunction")?,
                hipModuleUnload: symbol(&lib, "hipModuleUnload")?,
                hipModuleLaunchKernel: symbol(&lib, "hipModuleLaunchKernel")?,
                hipEventCreate: symbol(&lib, "hipEventCreate")?,
                hipEventRecord: symbol(&lib, "hipEventRecord")?,
                hipEventSynchronize: symbol(&lib, "hipEventSynchronize")?,
                hipEventElapsedTime: symbol(&lib, "hipEventElapsedTime")?,
                hipEventDestroy: symbol(&lib, "hipEventDestroy")?,
                hipGetErrorString: symbol(&lib, "hipGetErrorString")?,
            }
        };
        // SAFETY: as above (hip_runtime_api.h's declarations); stored next to `lib`.
        let g = unsafe { GraphFns::load(&lib) }.ok();
        // SAFETY: hip_runtime_api.h's declaration of hipFuncGetAttribute; stored next to `lib`.
        let func_attr = unsafe { symbol(&lib, "hipFuncGetAttribute") }.ok();
        let mut d = Rocm {
            f,
            g,
            func_attr,
            stream: std::ptr::null_mut(),
            modules: Default::default(),
            name: String::new(),
            warp: 0,
            sms: 0,
            _lib: lib,
        };
        // SAFETY: plain API calls with valid out-pointers to locals.
        unsafe {
            d.check((d.f.hipInit)(0), "hipInit")?;
            let mut n = 0i32;
            d.check((d.f.hipGetDeviceCount)(&mut n), "hipGetDeviceCount")?;
            if n < 1 {
                return Err("no HIP device".into());
            }
            d.check((d.f.hipSetDevice)(0), "hipSetDevice")?;
            let mut buf = [0 as c_char; 256];
            d.check(
                (d.f.hipDeviceGetName)(buf.as_mut_ptr(), buf.len() as i32, 0),
                "hipDeviceGetName",
            )?;
            d.name = CStr::from_ptr(buf.as_ptr()).to_string_lossy().into_owned();
            d.warp = d.attr(ATTR_WARP_SIZE)? as u32;
            d.sms = d.attr(ATTR_MULTIPROCESSOR_COUNT)?.max(1) as u32;
            let mut s = std::ptr::null_mut();
            d.check((d.f.hipStreamCreate)(&mut s), "hipStreamCreate")?;
            d.stream = s;
        }
        Ok(d)
    }

    fn check(&self, e: Err, what: &str) -> Result<(), String> {
        if e == 0 {
            return Ok(());
        }
        // SAFETY: hipGetErrorString returns a static NUL-terminated string for any code.
        let msg = unsafe {
            let p = (self.f.hipGetErrorString)(e);
            if p.is_null() {
                "unknown error".into()
            } else {
                CStr::from_ptr(p).to_string_lossy().into_owned()
            }
        };
        Err(format!("{what}: {msg} (hipError {e})"))
    }

    fn attr(&self, a: i32) -> Result<i32, String> {
        let mut v = 0i32;
        // SAFETY: valid out-pointer; device 0 exists (checked in open).
        self.check(
            unsafe { (self.f.hipDeviceGetAttribute)(&mut v, a, 0) },
            "hipDeviceGetAttribute",
        )?;
        Ok(v)
    }

    fn copy(
        &self,
        dst: *mut c_void,
        src: *const c_void,
        bytes: usize,
        kind: i32,
    ) -> Result<(), String> {
        if bytes == 0 {
            return Ok(());
        }
        // SAFETY: the callers pass a host slice of `bytes` bytes and a device pointer they
        // allocated with at least `bytes` bytes behind it; the stream is ours.
        self.check(
            unsafe { (self.f.hipMemcpyAsync)(dst, src, bytes, kind, self.stream) },
            "hipMemcpyAsync",
        )
    }
}

impl Driver for Rocm {
    fn api(&self) -> Api {
        Api::Rocm
    }
    fn device_name(&self) -> String {
        self.name.clone()
    }
    fn target(&self) -> Option<String> {
        None
    }
    fn warp_size(&self) -> u32 {
        self.warp
    }
    fn multiprocessors(&self) -> u32 {
        self.sms
    }

    fn alloc(&self, bytes: usize) -> Result<DevPtr, String> {
        let mut p = std::ptr::null_mut();
        // SAFETY: valid out-pointer.
        self.check(
            unsafe { (self.f.hipMalloc)(&mut p, bytes.max(1)) },
            "hipMalloc",
        )?;
        Ok(p as DevPtr)
    }
    fn free(&self, ptr: DevPtr) -> Result<(), String> {
        // SAFETY: hipFree validates the pointer and reports an error for one it does not know.
        self.check(unsafe { (self.f.hipFree)(ptr as Ptr) }, "hipFree")
    }
    fn memset(&self, ptr: DevPtr, value: u8, bytes: usize) -> Result<(), String> {
        // SAFETY: the caller owns `bytes` bytes at `ptr` (a buffer it allocated).
        self.check(
            unsafe { (self.f.hipMemsetAsync)(ptr as Ptr, value as i32, bytes, self.stream) },
            "hipMemsetAsync",
        )
    }
    fn htod(&self, dst: DevPtr, src: &[u8]) -> Result<(), String> {
        self.copy(dst as Ptr, src.as_ptr().cast(), src.len(), HIP_MEMCPY_H2D)?;
        // Pageable host memory: wait so that `src` may be dropped.
        self.sync()
    }
    fn dtoh(&self, dst: &mut [u8], src: DevPtr) -> Result<(), String> {
        self.copy(
            dst.as_mut_ptr().cast(),
            src as *const c_void,
            dst.len(),
            HIP_MEMCPY_D2H,
        )?;
        self.sync()
    }
    fn dtod(&self, dst: DevPtr, src: DevPtr, bytes: usize) -> Result<(), String> {
        self.copy(dst as Ptr, src as *const c_void, bytes, HIP_MEMCPY_D2D)
    }

    fn load_module(&self, image: &[u8]) -> Result<Handle, String> {
        let mut m = std::ptr::null_mut();
        // SAFETY: `image` is a complete code object; HIP copies what it needs before returning.
        self.check(
            unsafe { (self.f.hipModuleLoadData)(&mut m, image.as_ptr().cast()) },
            "hipModuleLoadData",
        )?;
        self.modules.borrow_mut().push(m);
        Ok(Handle(m as usize))
    }
    fn function(&self, module: Handle, name: &str) -> Result<Handle, String> {
        let c = CString::new(name).map_err(|_| format!("bad kernel name {name:?}"))?;
        let mut f = std::ptr::null_mut();
        // SAFETY: `module` came from load_module and is still loaded; `c` is NUL-terminated.
        self.check(
            unsafe { (self.f.hipModuleGetFunction)(&mut f, module.0 as Ptr, c.as_ptr()) },
            &format!("hipModuleGetFunction({name})"),
        )?;
        Ok(Handle(f as usize))
    }
    fn function_attributes(&self, function: Handle) -> Result<Vec<(&'static str, i32)>, String> {
        let get = self
            .func_attr
            .ok_or("the HIP runtime has no hipFuncGetAttribute")?;
        super::query_attributes(
            // SAFETY: `function` came from `function` on a module still loaded; `v` is a live
            // int the call writes.
            |v, attr| unsafe { get(v, attr, function.0 as Ptr) },
            |e| self.check(e, "hipFuncGetAttribute"),
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
        // SAFETY: the caller guarantees `args` matches the kernel's parameters (see the trait).
        let e = unsafe {
            (self.f.hipModuleLaunchKernel)(
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
        self.check(e, "hipModuleLaunchKernel")
    }
    fn sync(&self) -> Result<(), String> {
        // SAFETY: our stream, created in open.
        self.check(
            unsafe { (self.f.hipStreamSynchronize)(self.stream) },
            "hipStreamSynchronize",
        )
    }

    fn event_create(&self) -> Result<Handle, String> {
        let mut e = std::ptr::null_mut();
        // SAFETY: valid out-pointer.
        self.check(unsafe { (self.f.hipEventCreate)(&mut e) }, "hipEventCreate")?;
        Ok(Handle(e as usize))
    }
    fn event_record(&self, event: Handle) -> Result<(), String> {
        // SAFETY: an event from event_create, our stream.
        self.check(
            unsafe { (self.f.hipEventRecord)(event.0 as Ptr, self.stream) },
            "hipEventRecord",
        )
    }
    fn event_elapsed_ms(&self, start: Handle, end: Handle) -> Result<f32, String> {
        let mut ms = 0f32;
        // SAFETY: events from event_create; valid out-pointer.
        unsafe {
            self.check(
                (self.f.hipEventSynchronize)(end.0 as Ptr),
                "hipEventSynchronize",
            )?;
            self.check(
                (self.f.hipEventElapsedTime)(&mut ms, start.0 as Ptr, end.0 as Ptr),
                "hipEventElapsedTime",
            )?;
        }
        Ok(ms)
    }
    fn event_destroy(&self, event: Handle) -> Result<(), String> {
        // SAFETY: an event from event_create, destroyed once by the caller.
        self.check(
            unsafe { (self.f.hipEventDestroy)(event.0 as Ptr) },
            "hipEventDestroy",
        )
    }

    fn graphs_supported(&self) -> bool {
        self.g.is_some()
    }
    fn capture_begin(&self) -> Result<(), String> {
        let g = self.g.as_ref().ok_or("no graph entry points")?;
        // SAFETY: our stream (a created one, not the null stream).
        self.check(
            unsafe { (g.hipStreamBeginCapture)(self.stream, CAPTURE_MODE_THREAD_LOCAL) },
            "hipStreamBeginCapture",
        )
    }
    fn capture_end(&self) -> Result<Handle, String> {
        let g = self.g.as_ref().ok_or("no graph entry points")?;
        let mut graph = std::ptr::null_mut();
        // SAFETY: our stream, capturing since capture_begin; valid out-pointer.
        self.check(
            unsafe { (g.hipStreamEndCapture)(self.stream, &mut graph) },
            "hipStreamEndCapture",
        )?;
        let mut exec = std::ptr::null_mut();
        // SAFETY: `graph` came from hipStreamEndCapture; valid out-pointer; null error-node and
        // log pointers with a zero log size are allowed. The executable graph keeps its own
        // copy of the nodes, so the template is destroyed right after.
        let r = unsafe {
            (g.hipGraphInstantiate)(
                &mut exec,
                graph,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                0,
            )
        };
        // SAFETY: `graph` is ours and destroyed once.
        unsafe { (g.hipGraphDestroy)(graph) };
        self.check(r, "hipGraphInstantiate")?;
        Ok(Handle(exec as usize))
    }
    fn graph_launch(&self, exec: Handle) -> Result<(), String> {
        let g = self.g.as_ref().ok_or("no graph entry points")?;
        // SAFETY: an executable graph from capture_end, not yet destroyed; our stream.
        self.check(
            unsafe { (g.hipGraphLaunch)(exec.0 as Ptr, self.stream) },
            "hipGraphLaunch",
        )
    }
    fn graph_destroy(&self, exec: Handle) -> Result<(), String> {
        let g = self.g.as_ref().ok_or("no graph entry points")?;
        // SAFETY: an executable graph from capture_end, destroyed once by the caller.
        self.check(
            unsafe { (g.hipGraphExecDestroy)(exec.0 as Ptr) },
            "hipGraphExecDestroy",
        )
    }
}

impl Drop for Rocm {
    fn drop(&mut self) {
        // SAFETY: our stream and modules, released once; errors at teardown are ignored.
        unsafe {
            if !self.stream.is_null() {
                (self.f.hipStreamSynchronize)(self.stream);
                (self.f.hipStreamDestroy)(self.stream);
            }
            for m in self.modules.borrow().iter() {
                (self.f.hipModuleUnload)(*m);
            }
        }
    }
}
