//! Scheduling decisions for speculative decoding.
//!
//! - [`policy`]: the single-request adaptive policy (speculation.md §4): speculate while the
//!   EMA of accepted drafts per step pays for the spec step's extra cost, otherwise run bursts
//!   of plain steps and probe again.

pub mod policy;

pub use policy::{AdaptivePolicy, Decision, PolicyConfig, PolicyEvent, Ratio, Reason};
