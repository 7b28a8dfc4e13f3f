//! Adapter selection and device creation.

use std::sync::{Arc, Mutex};

/// An open device and what the kernels may use on it.
pub struct Gpu {
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    pub info: wgpu::AdapterInfo,
    pub limits: wgpu::Limits,
    pub subgroups: bool,
    pub f16: bool,
    /// 16 × 16 × 16 f16 cooperative matrices with f32 accumulators on subgroups of exactly 32
    /// lanes (`shaders/matmul_coop.wgsl`; `DELTASPEC_WGPU_COOP=0` turns them off).
    pub coop: bool,
    /// Timestamp queries inside compute passes (requested only when profiling).
    pub timestamps: bool,
    /// Errors the device reported outside an error scope (validation, out of memory).
    pub errors: Arc<Mutex<Vec<String>>>,
}

fn type_rank(t: wgpu::DeviceType) -> u32 {
    match t {
        wgpu::DeviceType::DiscreteGpu => 0,
        wgpu::DeviceType::IntegratedGpu => 1,
        wgpu::DeviceType::VirtualGpu => 2,
        wgpu::DeviceType::Cpu => 3,
        wgpu::DeviceType::Other => 4,
    }
}

fn backend_rank(b: wgpu::Backend) -> u32 {
    match b {
        wgpu::Backend::Vulkan => 0,
        _ => 1,
    }
}

/// Picks an adapter: `DELTASPEC_WGPU_ADAPTER=<name substring>` if set, else a discrete GPU
/// before an integrated, virtual or CPU one, Vulkan first among equals.
fn pick(adapters: Vec<wgpu::Adapter>) -> Result<wgpu::Adapter, String> {
    let names: Vec<String> = adapters
        .iter()
        .map(|a| {
            let i = a.get_info();
            format!("{} ({:?}, {:?})", i.name, i.backend, i.device_type)
        })
        .collect();
    if let Ok(want) = std::env::var("DELTASPEC_WGPU_ADAPTER") {
        let want_l = want.to_lowercase();
        return adapters
            .into_iter()
            .find(|a| a.get_info().name.to_lowercase().contains(&want_l))
            .ok_or_else(|| {
                format!(
                    "DELTASPEC_WGPU_ADAPTER={want} matches none of the adapters [{}]",
                    names.join(", ")
                )
            });
    }
    adapters
        .into_iter()
        .min_by_key(|a| {
            let i = a.get_info();
            (type_rank(i.device_type), backend_rank(i.backend))
        })
        .ok_or_else(|| "no wgpu adapter found (is a Vulkan driver installed?)".to_string())
}

/// Opens the chosen adapter with subgroups and f16 when it has them, and its own limits.
pub fn open() -> Result<Gpu, String> {
    let instance =
        wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
    let adapters = pollster::block_on(instance.enumerate_adapters(wgpu::Backends::all()));
    let adapter = pick(adapters)?;
    let info = adapter.get_info();
    let have = adapter.features();
    let mut features = wgpu::Features::empty();
    let subgroups = have.contains(wgpu::Features::SUBGROUP)
        && std::env::var("DELTASPEC_WGPU_NO_SUBGROUPS").is_err();
    if subgroups {
        features |= wgpu::Features::SUBGROUP;
    }
    let f16 = have.contains(wgpu::Features::SHADER_F16);
    if f16 {
        features |= wgpu::Features::SHADER_F16;
    }
    let coop = f16 && subgroups && coop_usable(&adapter, &info);
    if coop {
        features |= wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX;
    }
    let ts = wgpu::Features::TIMESTAMP_QUERY | wgpu::Features::TIMESTAMP_QUERY_INSIDE_PASSES;
    let timestamps = crate::backend::profile::enabled() && have.contains(ts);
    if timestamps {
        features |= ts;
    }
    let limits = adapter.limits();
    let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
        label: Some("deltaspec"),
        required_features: features,
        required_limits: limits.clone(),
        experimental_features: if coop {
            // SAFETY: wgpu marks cooperative matrices experimental (its implementation may
            // still have bugs). We use them in one kernel, only in the one configuration the
            // driver reported (`coop_usable`), on workgroup memory the kernel sizes itself;
            // the kernel is checked against the CPU reference on every device that has it
            // (`coop_*` in tests/wgpu_gemv.rs), and `DELTASPEC_WGPU_COOP=0` keeps the feature off.
            unsafe { wgpu::ExperimentalFeatures::enabled() }
        } else {
            wgpu::ExperimentalFeatures::disabled()
        },
        memory_hints: wgpu::MemoryHints::Performance,
        trace: wgpu::Trace::Off,
    }))
    .map_err(|e| format!("{}: request_device failed: {e}", info.name))?;
    let errors = Arc::new(Mutex::new(Vec::new()));
    let sink = errors.clone();
    device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
        if let Ok(mut v) = sink.lock() {
            v.push(e.to_string());
        }
    }));
    Ok(Gpu {
        device,
        queue,
        info,
        limits,
        subgroups,
        f16,
        coop,
        timestamps,
        errors,
    })
}

/// Whether the adapter offers what `shaders/matmul_coop.wgsl` needs: the experimental
/// feature, a subgroup-scoped 16 × 16 × 16 f16 × f16 + f32 configuration, and subgroups of
/// exactly 32 lanes (the kernel splits its tile over four of them).
fn coop_usable(adapter: &wgpu::Adapter, info: &wgpu::AdapterInfo) -> bool {
    if std::env::var("DELTASPEC_WGPU_COOP").is_ok_and(|v| v == "0")
        || !adapter
            .features()
            .contains(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX)
        || info.subgroup_min_size != 32
        || info.subgroup_max_size != 32
    {
        return false;
    }
    adapter.cooperative_matrix_properties().iter().any(|p| {
        use wgpu::CooperativeScalarType as T;
        [p.m_size, p.n_size, p.k_size] == [16, 16, 16] && p.ab_type == T::F16 && p.cr_type == T::F32
    })
}
