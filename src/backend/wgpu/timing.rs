//! Per-dispatch timings (`DELTASPEC_PROFILE=1` on adapters with timestamp queries inside
//! passes): a timestamp before the first dispatch and after each one, resolved and read back
//! after the run, recorded per dispatch label in [`crate::backend::profile`]. Each interval
//! includes the barrier before the next dispatch, which is what a dispatch costs in a step.

use super::{BackendError, dev_err};
use crate::backend::profile;

/// `DELTASPEC_WGPU_PROFILE_REPEAT=k` (with `DELTASPEC_PROFILE=1`): every dispatch runs k times
/// back to back and its time is the mean, so it runs with its code and data hot, without the
/// previous kernel's caches around it. Set against the plain profile, it tells a kernel's own
/// cost from what its place in the step adds. A diagnostic: dispatches that update state or
/// accumulate run k times, so the step's outputs are garbage.
pub fn repeats() -> u32 {
    static K: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *K.get_or_init(|| {
        std::env::var("DELTASPEC_WGPU_PROFILE_REPEAT")
            .ok()
            .and_then(|v| v.parse().ok())
            .filter(|k| (1..=64).contains(k))
            .unwrap_or(1)
    })
}

pub struct Timer {
    set: wgpu::QuerySet,
    resolve: wgpu::Buffer,
    staging: wgpu::Buffer,
    /// Timestamps written: dispatches timed + 1.
    n: u32,
}

impl Timer {
    /// A timer for the first dispatches of a run (as many as one query set holds).
    pub fn new(dev: &wgpu::Device, dispatches: usize) -> Timer {
        let n = (dispatches as u32 + 1).min(wgpu::QUERY_SET_MAX_QUERIES);
        let set = dev.create_query_set(&wgpu::QuerySetDescriptor {
            label: Some("dispatch timestamps"),
            ty: wgpu::QueryType::Timestamp,
            count: n,
        });
        let bytes = u64::from(n) * 8;
        let resolve = dev.create_buffer(&wgpu::BufferDescriptor {
            label: Some("timestamps"),
            size: bytes,
            usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        });
        let staging = dev.create_buffer(&wgpu::BufferDescriptor {
            label: Some("timestamps readback"),
            size: bytes,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        Timer {
            set,
            resolve,
            staging,
            n,
        }
    }

    /// Writes timestamp `i` (0: before the first dispatch; i: after dispatch i − 1).
    pub fn mark(&self, pass: &mut wgpu::ComputePass<'_>, i: usize) {
        if (i as u32) < self.n {
            pass.write_timestamp(&self.set, i as u32);
        }
    }

    /// Records the resolve and the copy to the readback buffer.
    pub fn resolve(&self, enc: &mut wgpu::CommandEncoder) {
        enc.resolve_query_set(&self.set, 0..self.n, &self.resolve, 0);
        enc.copy_buffer_to_buffer(&self.resolve, 0, &self.staging, 0, u64::from(self.n) * 8);
    }

    /// After the submission completed: adds each dispatch's time under its label.
    pub fn record(
        &self,
        dev: &wgpu::Device,
        period_ns: f32,
        labels: &[String],
    ) -> Result<(), BackendError> {
        let (tx, rx) = std::sync::mpsc::channel();
        self.staging.map_async(wgpu::MapMode::Read, .., move |r| {
            let _ = tx.send(r);
        });
        dev.poll(wgpu::PollType::wait_indefinitely())
            .map_err(|e| dev_err(format!("poll: {e}")))?;
        rx.recv()
            .map_err(|_| dev_err("timestamp map callback dropped"))?
            .map_err(|e| dev_err(format!("timestamp map: {e}")))?;
        let ticks: Vec<u64> = {
            let view = self
                .staging
                .get_mapped_range(..)
                .map_err(|e| dev_err(format!("timestamp range: {e}")))?;
            bytemuck::pod_collect_to_vec(&view[..])
        };
        self.staging.unmap();
        for (w, label) in ticks.windows(2).zip(labels) {
            let dt = w[1].saturating_sub(w[0]) as f64 * f64::from(period_ns) * 1e-9
                / f64::from(repeats());
            profile::record(format!("wgpu {label}"), dt);
        }
        Ok(())
    }
}
