//! The driver compiler's statistics of the backend's pipelines (`deltaspec bench kernels`),
//! through `VK_KHR_pipeline_executable_properties`: register counts and code sizes say whether
//! a kernel is held back by occupancy or spills, which timings alone do not.
//!
//! Statistics are returned only for pipelines created with `CAPTURE_STATISTICS`, and wgpu
//! creates its own without it, so each shader is compiled again here: the same WGSL (the
//! pipeline's key regenerates it), translated to SPIR-V by naga with the options wgpu-hal uses
//! for our pipelines (no runtime checks unless `DELTASPEC_WGPU_CHECKS=1`, workgroup memory
//! zeroed only where the file reads before it writes), on a second Vulkan device of the same
//! physical device with the extension enabled. The driver compiles the same SPIR-V the same
//! way, so its numbers are those of the pipelines that run.

use super::shaders::{self, ShaderKey};
use super::{BackendError, dev_err};
use crate::backend::KernelStats;
use ash::vk;
use std::ffi::CString;

/// A Vulkan device with pipeline statistics enabled, on the physical device wgpu uses.
struct StatsDevice {
    device: ash::Device,
    exec: ash::khr::pipeline_executable_properties::Device,
    /// The device's API version (the SPIR-V version naga may write follows it).
    api: u32,
    zero_init_native: bool,
}

impl Drop for StatsDevice {
    fn drop(&mut self) {
        // SAFETY: every object created on this device was destroyed by `compile` before it
        // returned; nothing else holds the handle.
        unsafe { self.device.destroy_device(None) };
    }
}

impl StatsDevice {
    fn open(gpu: &wgpu::Device) -> Result<StatsDevice, BackendError> {
        // SAFETY: the hal device is only read (its instance and physical device handles), and
        // the guard lives until both are copied out; the ash instance stays valid as long as
        // wgpu's instance, which the backend keeps for its whole life.
        let (instance, pd) = unsafe {
            let hal = gpu
                .as_hal::<wgpu::hal::api::Vulkan>()
                .ok_or_else(|| dev_err("kernel statistics need the Vulkan backend of wgpu"))?;
            (
                hal.shared_instance().raw_instance().clone(),
                hal.raw_physical_device(),
            )
        };
        let ext = ash::khr::pipeline_executable_properties::NAME;
        // SAFETY: `pd` is a physical device of `instance` (both from wgpu's live device).
        let exts = unsafe { instance.enumerate_device_extension_properties(pd) }
            .map_err(|e| dev_err(format!("listing device extensions: {e}")))?;
        if !exts.iter().any(|e| e.extension_name_as_c_str() == Ok(ext)) {
            return Err(BackendError::Unsupported {
                backend: super::NAME.into(),
                op: "kernel_stats".into(),
                msg: format!("the driver lacks {}", ext.to_string_lossy()),
            });
        }
        // SAFETY: as above.
        let props = unsafe { instance.get_physical_device_properties(pd) };
        let api = props.api_version;
        // Every feature the device has is enabled (as wgpu enables what the shaders may use:
        // int8 dot products, subgroups, 16-bit storage), plus executable statistics.
        let mut f = Features::default();
        let core = {
            let mut f2 = f.chain(api);
            // SAFETY: the pNext chain holds only structures of versions the device reports.
            unsafe { instance.get_physical_device_features2(pd, &mut f2) };
            f2.features
        };
        f.core = core;
        let zero_init_native =
            api >= vk::API_VERSION_1_3 && f.v13.shader_zero_initialize_workgroup_memory == vk::TRUE;
        f.pe.pipeline_executable_info = vk::TRUE;
        // SAFETY: as above.
        let families = unsafe { instance.get_physical_device_queue_family_properties(pd) };
        let family = families
            .iter()
            .position(|f| f.queue_flags.contains(vk::QueueFlags::COMPUTE))
            .ok_or_else(|| dev_err("no compute queue family"))? as u32;
        let prio = [1.0f32];
        let queues = [vk::DeviceQueueCreateInfo::default()
            .queue_family_index(family)
            .queue_priorities(&prio)];
        let names = [ext.as_ptr()];
        let info = vk::DeviceCreateInfo::default()
            .queue_create_infos(&queues)
            .enabled_extension_names(&names);
        let mut f2 = f.chain(api);
        let info = info.push_next(&mut f2);
        // SAFETY: the create info and everything it points to live through the call; the
        // features requested are those the device reported.
        let device = unsafe { instance.create_device(pd, &info, None) }
            .map_err(|e| dev_err(format!("creating the statistics device: {e}")))?;
        let exec = ash::khr::pipeline_executable_properties::Device::new(&instance, &device);
        Ok(StatsDevice {
            device,
            exec,
            api,
            zero_init_native,
        })
    }

    /// Compiles one shader with statistics captured and reads them.
    fn compile(&self, key: &ShaderKey, subgroups: bool) -> Result<KernelStats, BackendError> {
        let (words, module) = spirv(
            key,
            &SpvTarget {
                subgroups,
                api: self.api,
                zero_init_native: self.zero_init_native,
                checks: shaders::runtime_checks(),
            },
        )?;
        let threads = module
            .entry_points
            .iter()
            .find(|e| e.name == key.entry)
            .map(|e| e.workgroup_size.iter().product());
        // The set layout the module declares (as the backend builds it for wgpu).
        let mut bindings = Vec::new();
        for (_, gv) in module.global_variables.iter() {
            let Some(rb) = &gv.binding else { continue };
            let ty = match gv.space {
                naga::AddressSpace::Uniform => vk::DescriptorType::UNIFORM_BUFFER,
                _ => vk::DescriptorType::STORAGE_BUFFER,
            };
            bindings.push(
                vk::DescriptorSetLayoutBinding::default()
                    .binding(rb.binding)
                    .descriptor_type(ty)
                    .descriptor_count(1)
                    .stage_flags(vk::ShaderStageFlags::COMPUTE),
            );
        }
        let entry = CString::new(key.entry).map_err(|e| dev_err(e.to_string()))?;
        let d = &self.device;
        let err = |what: &str, e: vk::Result| dev_err(format!("{} {key:?}: {what}: {e}", key.file));
        // SAFETY: each object is created from live handles of this device and destroyed below,
        // after the last use, on every path (the closure runs before any destroy).
        unsafe {
            let sm = d
                .create_shader_module(&vk::ShaderModuleCreateInfo::default().code(&words), None)
                .map_err(|e| err("shader module", e))?;
            let sl = match d.create_descriptor_set_layout(
                &vk::DescriptorSetLayoutCreateInfo::default().bindings(&bindings),
                None,
            ) {
                Ok(l) => l,
                Err(e) => {
                    d.destroy_shader_module(sm, None);
                    return Err(err("set layout", e));
                }
            };
            let sls = [sl];
            let result = (|| {
                let pl = d
                    .create_pipeline_layout(
                        &vk::PipelineLayoutCreateInfo::default().set_layouts(&sls),
                        None,
                    )
                    .map_err(|e| err("pipeline layout", e))?;
                let info = vk::ComputePipelineCreateInfo::default()
                    .flags(vk::PipelineCreateFlags::CAPTURE_STATISTICS_KHR)
                    .stage(
                        vk::PipelineShaderStageCreateInfo::default()
                            .stage(vk::ShaderStageFlags::COMPUTE)
                            .module(sm)
                            .name(&entry),
                    )
                    .layout(pl);
                let made = d.create_compute_pipelines(vk::PipelineCache::null(), &[info], None);
                let pipeline = match made {
                    Ok(p) => p[0],
                    Err((_, e)) => {
                        d.destroy_pipeline_layout(pl, None);
                        return Err(err("pipeline", e));
                    }
                };
                let stats = self.read(pipeline);
                d.destroy_pipeline(pipeline, None);
                d.destroy_pipeline_layout(pl, None);
                stats.map_err(|e| err("statistics", e))
            })();
            d.destroy_descriptor_set_layout(sl, None);
            d.destroy_shader_module(sm, None);
            Ok(KernelStats {
                kernel: label(key),
                threads,
                stats: result?,
            })
        }
    }

    /// Every statistic of every executable of a pipeline; several executables (not the case
    /// for compute on the drivers we know) are told apart by a name prefix.
    ///
    /// # Safety
    /// `pipeline` must be a live pipeline of this device created with `CAPTURE_STATISTICS`.
    unsafe fn read(&self, pipeline: vk::Pipeline) -> Result<Vec<(String, f64)>, vk::Result> {
        // SAFETY: the caller's contract.
        let execs = unsafe {
            self.exec.get_pipeline_executable_properties(
                &vk::PipelineInfoKHR::default().pipeline(pipeline),
            )?
        };
        let many = execs.len() > 1;
        let mut out = Vec::new();
        for (i, e) in execs.iter().enumerate() {
            let prefix = if many {
                format!(
                    "{}: ",
                    e.name_as_c_str().unwrap_or_default().to_string_lossy()
                )
            } else {
                String::new()
            };
            out.push((format!("{prefix}subgroup size"), e.subgroup_size as f64));
            let info = vk::PipelineExecutableInfoKHR::default()
                .pipeline(pipeline)
                .executable_index(i as u32);
            // SAFETY: the caller's contract; `i` is below the executable count just read.
            let stats = unsafe { self.exec.get_pipeline_executable_statistics(&info)? };
            for s in &stats {
                let name = s.name_as_c_str().unwrap_or_default().to_string_lossy();
                // SAFETY: `format` says which member of the union the driver wrote.
                let v = unsafe {
                    match s.format {
                        vk::PipelineExecutableStatisticFormatKHR::BOOL32 => s.value.b32 as f64,
                        vk::PipelineExecutableStatisticFormatKHR::INT64 => s.value.i64 as f64,
                        vk::PipelineExecutableStatisticFormatKHR::UINT64 => s.value.u64 as f64,
                        vk::PipelineExecutableStatisticFormatKHR::FLOAT64 => s.value.f64,
                        _ => continue,
                    }
                };
                out.push((format!("{prefix}{name}"), v));
            }
        }
        Ok(out)
    }
}

/// The feature structures read from the device and enabled on the statistics device.
#[derive(Default)]
struct Features {
    core: vk::PhysicalDeviceFeatures,
    v11: vk::PhysicalDeviceVulkan11Features<'static>,
    v12: vk::PhysicalDeviceVulkan12Features<'static>,
    v13: vk::PhysicalDeviceVulkan13Features<'static>,
    pe: vk::PhysicalDevicePipelineExecutablePropertiesFeaturesKHR<'static>,
}

impl Features {
    /// A fresh pNext chain over these structures (their links from an earlier chain are
    /// cleared first: `push_next` follows them and would loop), with the versions `api` has.
    fn chain(&mut self, api: u32) -> vk::PhysicalDeviceFeatures2<'_> {
        self.v11.p_next = std::ptr::null_mut();
        self.v12.p_next = std::ptr::null_mut();
        self.v13.p_next = std::ptr::null_mut();
        self.pe.p_next = std::ptr::null_mut();
        let mut f2 = vk::PhysicalDeviceFeatures2::default()
            .features(self.core)
            .push_next(&mut self.pe);
        if api >= vk::API_VERSION_1_2 {
            f2 = f2.push_next(&mut self.v11).push_next(&mut self.v12);
        }
        if api >= vk::API_VERSION_1_3 {
            f2 = f2.push_next(&mut self.v13);
        }
        f2
    }
}

/// What the SPIR-V of a pipeline depends on besides its key.
struct SpvTarget {
    subgroups: bool,
    /// The device's Vulkan version (the SPIR-V version naga may write follows it).
    api: u32,
    /// The device zeroes workgroup memory itself (Vulkan 1.3's feature).
    zero_init_native: bool,
    /// naga's runtime checks (`DELTASPEC_WGPU_CHECKS`).
    checks: bool,
}

/// SPIR-V of one pipeline, as wgpu-hal writes it for our pipelines (its options in
/// `Adapter::naga_options`, with the runtime checks the backend turns off and the workgroup
/// memory zeroing it skips for [`shaders::WRITES_BEFORE_READS`]).
fn spirv(key: &ShaderKey, t: &SpvTarget) -> Result<(Vec<u32>, naga::Module), BackendError> {
    use naga::back::spv;
    let src = shaders::source(key).map_err(|m| dev_err(format!("shader {}: {m}", key.file)))?;
    let (module, info) = shaders::validate_info(&src, t.subgroups)
        .map_err(|m| dev_err(format!("shader {} {key:?}: {m}", key.file)))?;
    let policy = if t.checks {
        naga::proc::BoundsCheckPolicy::Restrict
    } else {
        naga::proc::BoundsCheckPolicy::Unchecked
    };
    let zero = if shaders::WRITES_BEFORE_READS.contains(&key.file) {
        spv::ZeroInitializeWorkgroupMemoryMode::None
    } else if t.zero_init_native {
        spv::ZeroInitializeWorkgroupMemoryMode::Native
    } else {
        spv::ZeroInitializeWorkgroupMemoryMode::Polyfill
    };
    let opts = spv::Options {
        lang_version: match t.api {
            a if a >= vk::API_VERSION_1_3 => (1, 6),
            a if a >= vk::API_VERSION_1_2 => (1, 5),
            a if a >= vk::API_VERSION_1_1 => (1, 3),
            _ => (1, 0),
        },
        flags: spv::WriterFlags::empty(),
        capabilities: None,
        bounds_check_policies: naga::proc::BoundsCheckPolicies {
            index: policy,
            buffer: policy,
            image_load: policy,
            binding_array: naga::proc::BoundsCheckPolicy::Unchecked,
        },
        zero_initialize_workgroup_memory: zero,
        force_loop_bounding: t.checks,
        ..Default::default()
    };
    let pipe = spv::PipelineOptions {
        shader_stage: naga::ShaderStage::Compute,
        entry_point: key.entry.to_string(),
    };
    let words = spv::write_vec(&module, &info, &opts, Some(&pipe))
        .map_err(|e| dev_err(format!("shader {} {key:?}: SPIR-V: {e}", key.file)))?;
    Ok((words, module))
}

/// A pipeline's name in the output: file, entry point and what specialises it.
pub fn label(key: &ShaderKey) -> String {
    let mut s = format!("{}:{}", key.file, key.entry);
    for (n, v) in &key.consts {
        s.push_str(&format!(" {n}={v}"));
    }
    for f in &key.flags {
        s.push_str(&format!(" +{f}"));
    }
    for (n, t) in &key.dequant {
        s.push_str(&format!(" {n}:{}", t.name()));
    }
    s
}

/// Compiler statistics of the given pipelines, in key order.
pub fn kernel_stats(
    gpu: &wgpu::Device,
    keys: &[ShaderKey],
    subgroups: bool,
) -> Result<Vec<KernelStats>, BackendError> {
    let dev = StatsDevice::open(gpu)?;
    let mut keys = keys.to_vec();
    keys.sort();
    keys.iter().map(|k| dev.compile(k, subgroups)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every shader variant the backend can build translates to SPIR-V under each target the
    /// statistics device may have (the step wgpu-hal also takes; the driver's compile needs a
    /// GPU whose driver has the extension).
    #[test]
    fn every_variant_writes_spirv() {
        // Keys with and without subgroup operations (their flag says which); the device is
        // taken to have them.
        let subgroups = true;
        for key in shaders::all_variants(subgroups) {
            for (api, zero_init_native, checks) in [
                (vk::API_VERSION_1_3, true, false),
                (vk::API_VERSION_1_1, false, true),
            ] {
                let t = SpvTarget {
                    subgroups,
                    api,
                    zero_init_native,
                    checks,
                };
                let (words, module) = spirv(&key, &t).unwrap();
                assert_eq!(words[0], 0x0723_0203, "{}: SPIR-V magic", label(&key));
                assert!(
                    module.entry_points.iter().any(|e| e.name == key.entry),
                    "{}",
                    label(&key)
                );
            }
        }
    }

    #[test]
    fn labels_name_the_specialisation() {
        let key = ShaderKey::new("matmul").c("NB", 4).flag("sg").entry("main");
        assert_eq!(label(&key), "matmul:main NB=4 +sg");
    }
}
