//! Capture and replay of repeated runs as driver graphs (CUDA graphs / HIP graphs).
//!
//! A decode step of a large model is ~900 kernel launches; issuing them one by one costs CPU time
//! per launch and leaves the GPU idle between them. A run of the same compiled graph with the
//! same weights, states and launch shapes ([`Key`]) issues exactly the same launches with the
//! same arguments: every value that changes between such runs (token ids, positions, the context
//! length derived from them) is read by the kernels from device memory, uploaded before the
//! launches. So the second such run is captured into an executable graph and every later one
//! replays it with one driver call.
//!
//! The captured graph holds device addresses: the run's arena and input buffers (never
//! reallocated while the exec lives), the weights, the state buffers (a freed state set drops
//! its graphs) and the grow-only scratch buffers (growing one drops every graph).

use super::driver::{Driver, Handle};
use std::collections::HashMap;

/// What fixes the launches of a run.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct Key {
    pub exec: usize,
    pub weights: u32,
    pub states: u32,
    /// Launch shapes that depend on the run's values ([`super::attention::launch_key`]).
    pub shapes: Vec<u32>,
}

enum Entry {
    /// Ran once directly (the warm-up: kernels loaded, scratch buffers grown).
    Seen,
    Captured(Handle),
}

/// What the caller does with one run.
pub(super) enum Plan {
    /// Launch node by node (graphs off, or the first run of this key).
    Direct,
    /// Launch node by node inside a capture, then replay the captured graph.
    Capture,
    /// Replay this executable graph.
    Replay(Handle),
}

/// Counters for tests and diagnostics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GraphStats {
    /// Graphs captured and instantiated.
    pub captures: u64,
    /// Runs served by replaying a captured graph (the capturing run included).
    pub replays: u64,
    /// Captured graphs destroyed because a buffer they use went away or moved.
    pub invalidated: u64,
    /// Captured graphs alive now.
    pub live: usize,
}

/// Most captured graphs kept at once; the least recently used goes first. Decode re-captures as
/// the context grows past an attention split boundary (every 256 positions up to 16k), so old
/// keys of one session stop being used.
const MAX_LIVE: usize = 32;

pub(super) struct GraphCache {
    pub enabled: bool,
    entries: HashMap<Key, (Entry, u64)>,
    tick: u64,
    stats: GraphStats,
}

impl GraphCache {
    pub fn new(enabled: bool) -> GraphCache {
        GraphCache {
            enabled,
            entries: HashMap::new(),
            tick: 0,
            stats: GraphStats::default(),
        }
    }

    pub fn stats(&self) -> GraphStats {
        GraphStats {
            live: self.live(),
            ..self.stats
        }
    }

    fn live(&self) -> usize {
        self.entries
            .values()
            .filter(|(e, _)| matches!(e, Entry::Captured(_)))
            .count()
    }

    /// Decides how to issue the run of `key`, and remembers that it ran.
    pub fn plan(&mut self, key: Key) -> Plan {
        self.tick += 1;
        let tick = self.tick;
        match self.entries.get_mut(&key) {
            Some((Entry::Captured(h), used)) => {
                *used = tick;
                self.stats.replays += 1;
                Plan::Replay(*h)
            }
            Some((Entry::Seen, used)) => {
                *used = tick;
                Plan::Capture
            }
            None => {
                self.entries.insert(key, (Entry::Seen, tick));
                Plan::Direct
            }
        }
    }

    /// Stores the graph captured for `key`, evicting the least recently used beyond
    /// [`MAX_LIVE`] (after a sync: a replay of it may still be queued).
    pub fn store(&mut self, drv: &dyn Driver, key: Key, exec: Handle) -> Result<(), String> {
        self.stats.captures += 1;
        self.stats.replays += 1;
        self.entries.insert(key, (Entry::Captured(exec), self.tick));
        while self.live() > MAX_LIVE {
            let oldest = self
                .entries
                .iter()
                .filter(|(_, (e, _))| matches!(e, Entry::Captured(_)))
                .min_by_key(|(_, (_, used))| *used)
                .map(|(k, _)| k.clone());
            let Some(k) = oldest else { break };
            if let Some((Entry::Captured(h), _)) = self.entries.remove(&k) {
                drv.sync()?;
                drv.graph_destroy(h)?;
            }
        }
        Ok(())
    }

    /// Stops using graphs (a capture failed: the driver's graph support is not usable here).
    pub fn disable(&mut self, drv: &dyn Driver, why: &str) {
        if self.enabled {
            eprintln!("warning: hip graph capture failed, launching directly from now on: {why}");
        }
        self.enabled = false;
        self.drop_where(drv, |_| true);
    }

    /// Destroys every graph (and forgets every warm-up) whose key matches `pred`. The caller has
    /// synced the stream: no replay of them is queued.
    pub fn drop_where(&mut self, drv: &dyn Driver, pred: impl Fn(&Key) -> bool) {
        let keys: Vec<Key> = self.entries.keys().filter(|k| pred(k)).cloned().collect();
        for k in keys {
            if let Some((Entry::Captured(h), _)) = self.entries.remove(&k) {
                self.stats.invalidated += 1;
                // Destroying can only fail for a handle the driver does not know, which would
                // be a bug here; there is nothing useful to do about it.
                let _ = drv.graph_destroy(h);
            }
        }
    }
}
