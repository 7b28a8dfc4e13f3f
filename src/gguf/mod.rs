//! GGUF (versions 2 and 3) reader over mmap, and writer.
//!
//! Layout (little endian): magic `GGUF`, u32 version, u64 tensor count, u64 metadata count, metadata
//! entries (string key, u32 value type, value), tensor infos (string name, u32 n_dims, n_dims × u64 `ne`,
//! u32 ggml type, u64 offset), zero padding to the alignment, then the data section. Tensor offsets are
//! relative to the data section and multiples of the alignment (`general.alignment`, default 32).
//!
//! Files are untrusted input: the reader checks every count, length, type id, shape and data range, and
//! reports what is wrong and at which byte offset ([`GgufError`]) instead of panicking or allocating
//! according to a corrupt count.

mod cursor;
mod error;
mod info;
mod reader;
pub mod split;
mod value;
mod writer;

pub use error::GgufError;
pub use info::{MAX_DIMS, TensorInfo};
pub use reader::GgufFile;
pub use value::{Value, ValueType};
pub use writer::{GgufWriter, TensorGenerator};

/// The first four bytes of every GGUF file.
pub const MAGIC: [u8; 4] = *b"GGUF";

/// Data alignment when the file has no `general.alignment`.
pub const DEFAULT_ALIGNMENT: u64 = 32;

/// The metadata key that overrides [`DEFAULT_ALIGNMENT`].
pub const ALIGNMENT_KEY: &str = "general.alignment";
