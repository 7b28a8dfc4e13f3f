//! Running a compiled graph: input checks and writes, the dispatches (submitted in growing
//! chunks), the output copies and their readback; and the pipelined form of the same
//! ([`WgpuBackend::submit_run`], [`WgpuBackend::collect_run`]), where the host queues the
//! next step before it reads this one's outputs.

use super::{NAME, WgpuBackend, bad_handle, dev_err, host_timing, submit_chunk, timing};
use crate::backend::wgpu::lower::Res;
use crate::backend::{BackendError, ExecId, Feed, HostData, HostTensor, StatesId, WeightsId};

/// A queued pipelined run: its outputs land in `staging` when submission `index` completes.
pub(super) struct Pending {
    exe: usize,
    staging: wgpu::Buffer,
    total: u64,
    index: wgpu::SubmissionIndex,
}

/// What [`WgpuBackend::launch`] links a run to.
struct Link<'a> {
    /// Copy the first `.2` bytes of this buffer over input `.1` before the first dispatch.
    feed_in: Option<(&'a wgpu::Buffer, usize, u64)>,
    /// Copy output `.0` (its bytes: `.1`) into the feed buffer after the last dispatch.
    keep: Option<(usize, u64)>,
}

impl WgpuBackend {
    /// Checks `inputs` against the graph, builds (or reuses) the bind groups and writes the
    /// inputs; returns the exec's index.
    fn prepare(
        &mut self,
        exe: ExecId,
        weights: WeightsId,
        states: StatesId,
        inputs: &[(&str, HostData)],
    ) -> Result<usize, BackendError> {
        let ei = exe.0 as usize;
        let e = self
            .execs
            .get(ei)
            .ok_or_else(|| bad_handle(format!("exec {}", exe.0)))?;
        // Inputs: presence, type and size, then the data checks (ids and positions).
        let mut data: Vec<&HostData> = Vec::with_capacity(e.low.inputs.len());
        for id in &e.low.inputs {
            let t = e.graph.tensor(*id);
            let bad = |msg: String| BackendError::BadInput {
                backend: NAME.into(),
                name: t.name.clone(),
                msg,
            };
            let (_, d) = inputs
                .iter()
                .find(|(n, _)| *n == t.name)
                .ok_or_else(|| bad("not provided".into()))?;
            if d.dtype() != t.dtype || d.len() != t.numel() {
                return Err(bad(format!(
                    "expected {} × {:?}, got {} × {}",
                    t.dtype,
                    t.shape,
                    d.dtype(),
                    d.len()
                )));
            }
            data.push(d);
        }
        for c in &e.low.checks {
            if let HostData::I32(v) = data[c.input]
                && let Some((i, x)) = v
                    .iter()
                    .enumerate()
                    .find(|(_, x)| usize::try_from(**x).ok().is_none_or(|x| x >= c.bound))
            {
                return Err(BackendError::BadInput {
                    backend: NAME.into(),
                    name: e.graph.tensor(e.low.inputs[c.input]).name.clone(),
                    msg: format!("{} {x} at {i} is outside 0..{}", c.what, c.bound),
                });
            }
        }
        let key = (weights.0, states.0);
        if !e.bind_cache.contains_key(&key) {
            let groups = self.bind_groups(e, weights, states)?;
            self.execs[ei].bind_cache.insert(key, groups);
        }
        let e = &self.execs[ei];
        // The states must still exist (a freed set drops its cached groups, but be explicit).
        self.state_set(states)?;
        let q = &self.gpu.queue;
        // Queue writes land before the next submission's commands, after every earlier
        // submission's: a queued run still reading these buffers sees its own values.
        for (buf, d) in e.inputs.iter().zip(&data) {
            let bytes: &[u8] = match d {
                HostData::F32(v) => bytemuck::cast_slice(v),
                HostData::I32(v) => bytemuck::cast_slice(v),
            };
            if !bytes.is_empty() {
                q.write_buffer(buf, 0, bytes);
            }
        }
        if !e.poison.is_empty() {
            for s in &e.slots {
                q.write_buffer(s, 0, &e.poison[..s.size() as usize]);
            }
        }
        Ok(ei)
    }

    /// The buffer output `o` of exec `ei` lives in after a run on `states`.
    fn output_src(
        &self,
        ei: usize,
        states: StatesId,
        o: usize,
    ) -> Result<&wgpu::Buffer, BackendError> {
        let e = &self.execs[ei];
        Ok(match e.low.outputs[o].1 {
            Res::Slot(i) => &e.slots[i],
            Res::Input(i) => &e.inputs[i],
            Res::State(i) => {
                let sset = self.state_set(states)?;
                let name = &e.graph.tensor(e.low.states[i]).name;
                &sset.bufs[sset.index(name).ok_or_else(|| Self::missing_state(name))?]
            }
            _ => return Err(dev_err("an output lives in a weight or scratch buffer")),
        })
    }

    /// Encodes and submits one run of the prepared exec `ei` (see [`WgpuBackend::prepare`]):
    /// the dispatches in chunks, each submitted as soon as it is encoded so the GPU runs one
    /// chunk while the host encodes the next ([`submit_chunk`]), then the output copies into
    /// `staging`. Returns the staged byte count and the last submission's index.
    fn launch(
        &self,
        ei: usize,
        weights: WeightsId,
        states: StatesId,
        staging: &wgpu::Buffer,
        link: Link,
    ) -> Result<(u64, wgpu::SubmissionIndex), BackendError> {
        let e = &self.execs[ei];
        let q = &self.gpu.queue;
        let groups = &e.bind_cache[&(weights.0, states.0)];
        let host = host_timing().then(std::time::Instant::now);
        let mut encode = std::time::Duration::ZERO;
        let mut enc = self.gpu.device.create_command_encoder(&Default::default());
        if let Some((src, input, n)) = link.feed_in {
            enc.copy_buffer_to_buffer(src, 0, &e.inputs[input], 0, n);
        }
        let n_disp = e.dispatches.len();
        let mut chunk = submit_chunk().unwrap_or(n_disp).max(1);
        let mut start = 0;
        loop {
            let end = (start + chunk).min(n_disp);
            {
                let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                    label: Some("graph"),
                    timestamp_writes: None,
                });
                if start == 0
                    && let Some(t) = &e.timer
                {
                    t.mark(&mut pass, 0);
                }
                let run = e.dispatches[start..end].iter().zip(&groups[start..end]);
                let reps = if e.timer.is_some() {
                    timing::repeats()
                } else {
                    1
                };
                for (i, (d, bg)) in (start..end).zip(run) {
                    pass.set_pipeline(&d.pipe.pipeline);
                    pass.set_bind_group(0, bg, &[]);
                    for _ in 0..reps {
                        pass.dispatch_workgroups(d.groups[0], d.groups[1], d.groups[2]);
                    }
                    if let Some(t) = &e.timer {
                        t.mark(&mut pass, i + 1);
                    }
                }
            }
            if end >= n_disp {
                break;
            }
            let t = std::time::Instant::now();
            q.submit([enc.finish()]);
            encode += t.elapsed();
            enc = self.gpu.device.create_command_encoder(&Default::default());
            start = end;
            // Later chunks grow: the GPU is busy with the earlier ones.
            chunk *= 2;
        }
        if let Some(t) = &e.timer {
            t.resolve(&mut enc);
        }
        let mut total = 0u64;
        for (o, off) in e.out_offsets.iter().enumerate() {
            let n = (e.graph.tensor(e.low.outputs[o].2).numel() as u64 * 4).next_multiple_of(4);
            total = off + n;
            if n > 0 {
                enc.copy_buffer_to_buffer(self.output_src(ei, states, o)?, 0, staging, *off, n);
            }
        }
        if let Some((o, n)) = link.keep {
            let feed = self
                .feed
                .as_ref()
                .ok_or_else(|| dev_err("no feed buffer"))?;
            enc.copy_buffer_to_buffer(self.output_src(ei, states, o)?, 0, feed, 0, n);
        }
        let index = q.submit([enc.finish()]);
        if let Some(t0) = host {
            eprintln!(
                "wgpu host: {n_disp} dispatches, encoded and submitted in {:.0} us (of which \
                 intermediate submits {:.0} us)",
                t0.elapsed().as_secs_f64() * 1e6,
                encode.as_secs_f64() * 1e6,
            );
        }
        Ok((total, index))
    }

    /// Splits staged output bytes into the exec's outputs.
    fn outputs(&self, ei: usize, bytes: &[u8]) -> Vec<(String, HostTensor)> {
        let e = &self.execs[ei];
        let mut out = Vec::with_capacity(e.low.outputs.len());
        for ((name, _, id), off) in e.low.outputs.iter().zip(&e.out_offsets) {
            let t = e.graph.tensor(*id);
            let off = *off as usize;
            let b = bytes[off..off + t.numel() * 4].to_vec();
            out.push((name.clone(), HostTensor::from_bytes(t.dtype, &t.shape, b)));
        }
        out
    }

    /// [`crate::backend::Backend::run`].
    pub(super) fn run_now(
        &mut self,
        exe: ExecId,
        weights: WeightsId,
        states: StatesId,
        inputs: &[(&str, HostData)],
    ) -> Result<Vec<(String, HostTensor)>, BackendError> {
        if !self.pending.is_empty() {
            return Err(dev_err("a run was issued while pipelined runs are queued"));
        }
        let ei = self.prepare(exe, weights, states, inputs)?;
        let staging = self.execs[ei].staging.clone();
        let link = Link {
            feed_in: None,
            keep: None,
        };
        let (total, _) = self.launch(ei, weights, states, &staging, link)?;
        let bytes = if total > 0 {
            self.map_read(&staging, total, None)?
        } else {
            self.gpu
                .device
                .poll(wgpu::PollType::wait_indefinitely())
                .map_err(|err| dev_err(format!("poll: {err}")))?;
            self.take_errors()?;
            Vec::new()
        };
        let e = &self.execs[ei];
        if let Some(t) = &e.timer {
            let labels: Vec<String> = e.dispatches.iter().map(|d| d.label.clone()).collect();
            t.record(
                &self.gpu.device,
                self.gpu.queue.get_timestamp_period(),
                &labels,
            )?;
        }
        Ok(self.outputs(ei, &bytes))
    }

    /// [`crate::backend::Backend::submit`]: the run is queued behind the earlier ones; its
    /// outputs go to a staging buffer of its own (a pool per exec), so a queued run never
    /// writes a buffer the host is reading.
    pub(super) fn submit_run(
        &mut self,
        exe: ExecId,
        weights: WeightsId,
        states: StatesId,
        inputs: &[(&str, HostData)],
        feed: Feed,
    ) -> Result<(), BackendError> {
        let ei = self.prepare(exe, weights, states, inputs)?;
        let e = &self.execs[ei];
        let bad = |msg: String| BackendError::BadInput {
            backend: NAME.into(),
            name: feed.input.into(),
            msg,
        };
        let out = e
            .low
            .outputs
            .iter()
            .position(|(n, _, _)| n == feed.output)
            .ok_or_else(|| bad(format!("the graph has no output '{}' to feed", feed.output)))?;
        let input = e
            .low
            .inputs
            .iter()
            .position(|id| e.graph.tensor(*id).name == feed.input)
            .ok_or_else(|| bad("the graph has no such input".into()))?;
        let (ot, it) = (
            e.graph.tensor(e.low.outputs[out].2),
            e.graph.tensor(e.low.inputs[input]),
        );
        if ot.dtype != it.dtype || ot.numel() != it.numel() {
            return Err(bad(format!(
                "output '{}' ({} × {}) cannot feed it ({} × {})",
                feed.output,
                ot.dtype,
                ot.numel(),
                it.dtype,
                it.numel()
            )));
        }
        let bytes = it.numel() as u64 * 4;
        if feed.from_previous && self.feed.is_none() {
            return Err(bad("no earlier pipelined run to feed from".into()));
        }
        if self.feed.as_ref().is_none_or(|f| f.size() < bytes) {
            if feed.from_previous {
                return Err(bad("the previous run kept a smaller output".into()));
            }
            self.feed = Some(self.buffer("feed", bytes.max(256), super::storage_usage()));
        }
        let staging = match self.spare.get_mut(&ei).and_then(Vec::pop) {
            Some(b) => b,
            None => self.buffer(
                "outputs (pipelined)",
                e.staging.size(),
                wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            ),
        };
        let feed_buf = self.feed.clone();
        let link = Link {
            feed_in: feed
                .from_previous
                .then_some(())
                .and(feed_buf.as_ref())
                .map(|b| (b, input, bytes)),
            keep: Some((out, bytes)),
        };
        let (total, index) = self.launch(ei, weights, states, &staging, link)?;
        self.pending.push_back(Pending {
            exe: ei,
            staging,
            total,
            index,
        });
        Ok(())
    }

    /// Forgets the queued runs and the kept feed output (after a failed submission or
    /// readback the queue is unusable).
    pub(super) fn reset_queue(&mut self) {
        self.pending.clear();
        self.feed = None;
    }

    /// [`crate::backend::Backend::collect`].
    pub(super) fn collect_run(&mut self) -> Result<Vec<(String, HostTensor)>, BackendError> {
        let p = self
            .pending
            .pop_front()
            .ok_or_else(|| dev_err("collect: no pipelined run is queued"))?;
        let bytes = match self.map_read(&p.staging, p.total, Some(p.index)) {
            Ok(b) => b,
            Err(err) => {
                self.reset_queue();
                return Err(err);
            }
        };
        self.spare.entry(p.exe).or_default().push(p.staging);
        Ok(self.outputs(p.exe, &bytes))
    }
}
