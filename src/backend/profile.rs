//! Opt-in per-op timing (`DELTASPEC_PROFILE=1`): backends synchronise around each node and
//! record its wall time under a key such as `matmul IQ4_XS 17408x5120`; `report()` prints where
//! a step's time goes. Off by default: the synchronisation itself slows a run down.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

static TABLE: Mutex<Option<HashMap<String, (u64, f64)>>> = Mutex::new(None);

/// Whether profiling was asked for.
pub fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("DELTASPEC_PROFILE").is_ok_and(|v| v != "0" && !v.is_empty()))
}

/// `DELTASPEC_PROFILE=sync`: time each node by host syncs around it (launch cost included)
/// instead of device events between queued launches (the GPU's own time per node).
pub fn sync_mode() -> bool {
    static SYNC: OnceLock<bool> = OnceLock::new();
    *SYNC.get_or_init(|| std::env::var("DELTASPEC_PROFILE").is_ok_and(|v| v == "sync"))
}

/// Adds one timed call of `key`.
pub fn record(key: String, secs: f64) {
    let mut t = TABLE.lock().unwrap_or_else(|e| e.into_inner());
    let e = t
        .get_or_insert_with(HashMap::new)
        .entry(key)
        .or_insert((0, 0.0));
    e.0 += 1;
    e.1 += secs;
}

/// Forgets everything recorded (e.g. after a warm-up).
pub fn reset() {
    *TABLE.lock().unwrap_or_else(|e| e.into_inner()) = None;
}

/// The recorded keys by total time, descending: (key, calls, seconds).
pub fn snapshot() -> Vec<(String, u64, f64)> {
    let t = TABLE.lock().unwrap_or_else(|e| e.into_inner());
    let mut v: Vec<_> = t
        .as_ref()
        .map(|m| m.iter().map(|(k, (n, s))| (k.clone(), *n, *s)).collect())
        .unwrap_or_default();
    v.sort_by(|a, b| b.2.total_cmp(&a.2));
    v
}

/// Prints the table to stderr, `per` dividing totals (e.g. the number of steps).
pub fn report(per: f64) {
    let rows = snapshot();
    if rows.is_empty() {
        return;
    }
    let total: f64 = rows.iter().map(|r| r.2).sum();
    eprintln!(
        "{:<44} {:>8} {:>11} {:>7}",
        "op", "calls", "ms/step", "share"
    );
    for (k, n, s) in rows.iter().take(40) {
        eprintln!(
            "{k:<44} {n:>8} {:>11.3} {:>6.1}%",
            1e3 * s / per,
            100.0 * s / total
        );
    }
    eprintln!(
        "{:<44} {:>8} {:>11.3}",
        "total (timed nodes)",
        "",
        1e3 * total / per
    );
}
