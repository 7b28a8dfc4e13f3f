//! Dispatch-cost probe (`deltaspec bench dispatch`): chains of near-empty dispatches
//! (`shaders/probe.wgsl`) in one compute pass, timed from submit to completion, so what a
//! decode step pays per dispatch besides its work can be split into its parts: the barrier
//! between dependent dispatches, pipeline switches, wide bind groups, and launching many
//! small workgroups.

use super::{BackendError, WgpuBackend, dev_err, storage_usage};
use crate::backend::wgpu::shaders::{PARAMS, ShaderKey};

/// One probe: `groups` workgroups of `wg` threads per dispatch.
struct Case {
    name: &'static str,
    wg: u32,
    groups: u32,
    /// Alternate between two pipelines (same work, different workgroup size).
    two_pipes: bool,
    /// Eight extra read-only bindings.
    extra: bool,
    /// Each dispatch reads the previous one's output (a barrier between them); otherwise
    /// every dispatch writes its own buffer.
    chain: bool,
    /// The second pipeline of `two_pipes` uses 16 KiB of workgroup memory.
    smem: bool,
    /// Both pipelines run 1024 fmas of straight-line code.
    big: bool,
    /// A copy of this many MiB (larger than the L2) runs before every probe dispatch, as the
    /// weight streaming of a decode step does; its own time (a chain of copies alone) is
    /// subtracted.
    evict_mib: u32,
}

/// One workgroup of 64 threads, chained: the probe every other case varies one thing of.
const ONE: Case = Case {
    name: "1 workgroup, chained",
    wg: 64,
    groups: 1,
    two_pipes: false,
    extra: false,
    chain: true,
    smem: false,
    big: false,
    evict_mib: 0,
};

const CASES: &[Case] = &[
    ONE,
    Case {
        name: "1 workgroup, independent outputs",
        chain: false,
        ..ONE
    },
    Case {
        name: "1 workgroup, chained, 2 pipelines alternating",
        two_pipes: true,
        ..ONE
    },
    Case {
        name: "1 workgroup, chained, 10 bindings",
        extra: true,
        ..ONE
    },
    Case {
        name: "132 x 256 threads, chained",
        wg: 256,
        groups: 132,
        ..ONE
    },
    Case {
        name: "1280 x 64 threads, chained",
        groups: 1280,
        ..ONE
    },
    Case {
        name: "1088 x 256 threads, chained",
        wg: 256,
        groups: 1088,
        ..ONE
    },
    Case {
        name: "8704 x 32 threads, chained",
        wg: 32,
        groups: 8704,
        ..ONE
    },
    Case {
        name: "1 workgroup, chained, 2 pipelines, one with 16 KiB shared",
        two_pipes: true,
        smem: true,
        ..ONE
    },
    Case {
        name: "1 workgroup, chained, after a 256 MiB copy each",
        evict_mib: 256,
        ..ONE
    },
    Case {
        name: "1 workgroup, chained, 2 pipelines, after a 256 MiB copy each",
        two_pipes: true,
        evict_mib: 256,
        ..ONE
    },
    Case {
        name: "1 workgroup, 16 KiB of code, chained",
        big: true,
        ..ONE
    },
    Case {
        name: "1 workgroup, 16 KiB of code, chained, 2 pipelines",
        two_pipes: true,
        big: true,
        ..ONE
    },
    Case {
        name: "1 workgroup, 16 KiB of code, chained, after a 256 MiB copy each",
        big: true,
        evict_mib: 256,
        ..ONE
    },
    Case {
        name: "1 workgroup, 16 KiB of code, independent outputs",
        chain: false,
        big: true,
        ..ONE
    },
];

impl WgpuBackend {
    /// Seconds per dispatch of each probe over chains of `count` dispatches (best of five
    /// submissions after a warm-up), then the round trip of a one-dispatch submission.
    pub(super) fn probe_dispatches(
        &mut self,
        count: usize,
    ) -> Result<Vec<(String, f64)>, BackendError> {
        let count = count.max(2);
        let mut out = Vec::new();
        for c in CASES {
            let t = self.probe_case(c, count)?;
            out.push((c.name.to_string(), t / count as f64));
        }
        let t1 = self.probe_case(&CASES[0], 1)?;
        out.push(("submit and wait, 1 dispatch".to_string(), t1));
        self.take_errors()?;
        Ok(out)
    }

    /// Best wall time of a chain of `count` dispatches of `c`.
    fn probe_case(&mut self, c: &Case, count: usize) -> Result<f64, BackendError> {
        let n = c.wg * c.groups;
        let bytes = u64::from(n) * 4;
        // The pipelines' workgroup sizes: with two, the second has half the threads and twice
        // the workgroups (the same n values).
        let sizes: &[u32] = if c.two_pipes {
            &[c.wg, c.wg / 2]
        } else {
            &[c.wg]
        };
        let pipes = sizes
            .iter()
            .enumerate()
            .map(|(i, &wg)| {
                self.pipe(
                    &ShaderKey::new("probe")
                        .c("WG", wg)
                        .flag_if(c.extra, "EXTRA")
                        .flag_if(c.smem && i == 1, "SMEM")
                        .flag_if(c.big, "BIG"),
                )
            })
            .collect::<Result<Vec<_>, _>>()?;
        let param_buf = |wg: u32| {
            let mut p = [0u32; PARAMS];
            p[0] = n;
            p[1] = n / wg;
            // BIG's fma operands: v · 1 + 0 keeps every value (and nothing folds).
            p[2] = 1.0f32.to_bits();
            self.buffer_init(
                "probe-params",
                bytemuck::cast_slice(&p),
                wgpu::BufferUsages::UNIFORM,
            )
        };
        let params = sizes
            .iter()
            .map(|&wg| param_buf(wg))
            .collect::<Result<Vec<_>, _>>()?;
        let a = self.buffer("probe-a", bytes, storage_usage());
        let b = self.buffer("probe-b", bytes, storage_usage());
        // The extra bindings' buffer, read only (a and b are written in turn).
        let e = self.buffer("probe-e", 16, storage_usage());
        let outs: Vec<wgpu::Buffer> = if c.chain {
            Vec::new()
        } else {
            (0..count)
                .map(|_| self.buffer("probe-out", bytes, storage_usage()))
                .collect()
        };
        let dev = &self.gpu.device;
        // Dispatch i: pipeline i % pipes, reads a (even i) or b, writes the other (chain) or
        // its own output buffer.
        let groups: Vec<wgpu::BindGroup> = (0..count)
            .map(|i| {
                let p = i % pipes.len();
                let (x, y) = match (c.chain, i % 2) {
                    (true, 0) => (&a, &b),
                    (true, _) => (&b, &a),
                    (false, _) => (&a, &outs[i]),
                };
                let mut bufs = vec![&params[p], x];
                if c.extra {
                    bufs.extend(std::iter::repeat_n(&e, 8));
                }
                bufs.push(y);
                let entries: Vec<wgpu::BindGroupEntry> = bufs
                    .iter()
                    .enumerate()
                    .map(|(j, buf)| wgpu::BindGroupEntry {
                        binding: j as u32,
                        resource: buf.as_entire_binding(),
                    })
                    .collect();
                dev.create_bind_group(&wgpu::BindGroupDescriptor {
                    label: Some("probe"),
                    layout: &pipes[p].layout,
                    entries: &entries,
                })
            })
            .collect();
        let evict = if c.evict_mib > 0 {
            Some(self.bulk_copy("evict", u64::from(c.evict_mib) << 20)?)
        } else {
            None
        };
        let dev = &self.gpu.device;
        let time = |with_probe: bool| -> Result<f64, BackendError> {
            let mut best = f64::MAX;
            for rep in 0..6 {
                let mut enc = dev.create_command_encoder(&Default::default());
                {
                    let mut pass = enc.begin_compute_pass(&Default::default());
                    for (i, bg) in groups.iter().enumerate() {
                        if let Some(ev) = &evict {
                            pass.set_pipeline(&ev.pipeline);
                            pass.set_bind_group(0, &ev.group, &[]);
                            pass.dispatch_workgroups(ev.workgroups, 1, 1);
                        }
                        if with_probe {
                            let p = i % pipes.len();
                            pass.set_pipeline(&pipes[p].pipeline);
                            pass.set_bind_group(0, bg, &[]);
                            pass.dispatch_workgroups(n / sizes[p], 1, 1);
                        }
                    }
                }
                let cmd = enc.finish();
                let t = std::time::Instant::now();
                self.gpu.queue.submit([cmd]);
                dev.poll(wgpu::PollType::wait_indefinitely())
                    .map_err(|e| dev_err(format!("poll: {e}")))?;
                // The first submission warms the pipelines and allocations up.
                if rep > 0 {
                    best = best.min(t.elapsed().as_secs_f64());
                }
            }
            Ok(best)
        };
        let t = time(true)?;
        Ok(if evict.is_some() { t - time(false)? } else { t })
    }
}
