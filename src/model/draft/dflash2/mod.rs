//! DFlash2 (drafters.md §4): the DFlash backbone with per-layer grouped dynamic causal convs
//! around attention and MLP, and a candidate selector (top-k of the lm_head, a low-rank
//! predecessor · hidden · successor score, greedy path walk) instead of a plain argmax.
//!
//! A DFlash2 drafter is a [`DFlash`](super::DFlash) whose config carries
//! [`DFlash2Config`](super::DFlash2Config) (GGUF keys `{A}.dflash.dflash2.*`). Its graph
//! ([`graph::draft_graph`]) drafts for several sequences in one launch; [`BatchSession`] holds
//! the per-sequence context caches on a backend.

pub mod graph;
mod session;

pub use graph::{BatchShape, DraftExtras, Selected, draft_graph, selector, state_decls};
pub use session::{BatchParts, BatchSession, SeqDraft, SeqOutput, WalkParts};
