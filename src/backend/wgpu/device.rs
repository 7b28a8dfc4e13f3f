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
        experimental_features: wgpu::ExperimentalFeatures::disabled(),
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
        timestamps,
        errors,
    })
}
