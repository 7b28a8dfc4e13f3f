//! deltaspec: a GPU inference engine for the Qwen3.5/3.8 hybrid family (Gated DeltaNet + gated
//! attention) and its speculative-decoding drafters.
//!
//! Layers, bottom up:
//! - [`gguf`]: GGUF v3 reader (mmap) and writer.
//! - [`tensor`]: element types, quant block formats and the CPU dequantizers (the reference).
//! - [`graph`]: the op IR, its builder, shape checks and the buffer planner.
//! - [`backend`]: lowerings of a graph; the CPU backend is the oracle for the GPU ones.
//! - [`model`]: graph builders for the target model (and, later, the drafters).
//! - [`state`]: per-sequence KV cache, DeltaNet recurrent and conv state.
//! - [`spec`]: speculative decoding (drafter interface, chain rounds, exact rollback).
//! - [`sched`]: the adaptive speculation policy.
//! - [`tokenizer`]: BPE tokenizers from GGUF metadata or `tokenizer.json`.
//! - [`cli`]: the `deltaspec` command.

pub mod backend;
pub mod cli;
pub mod error;
pub mod gguf;
pub mod graph;
pub mod model;
pub mod sched;
pub mod spec;
pub mod state;
pub mod tensor;
pub mod tokenizer;
pub mod util;

pub use error::{Error, Result};
