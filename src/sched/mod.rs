//! Scheduling decisions for speculative decoding.
//!
//! - [`policy`]: the single-request adaptive policy (speculation.md §4): speculate while the
//!   EMA of accepted drafts per step pays for the spec step's extra cost, otherwise run bursts
//!   of plain steps and probe again.
//! - [`evidence`]: the spread of a round's accepted drafts, in which the policy's burst rule
//!   measures its evidence.
//! - [`width`]: how many drafts a chain round verifies (expected tokens per second from live
//!   estimates of per-draft survival and verify time per row count).

pub mod evidence;
pub mod policy;
pub mod width;

pub use policy::{AdaptivePolicy, Decision, PolicyConfig, PolicyEvent, Ratio, Reason};
