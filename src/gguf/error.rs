//! Errors of the GGUF reader and writer.
//!
//! A GGUF file is untrusted input (downloaded, possibly truncated or corrupt), so every parse error says
//! what was being read and at which byte offset; the loader can then print something actionable instead
//! of "invalid file".

use std::path::PathBuf;
use thiserror::Error;

/// Everything that can go wrong reading or writing a GGUF file.
#[derive(Debug, Error)]
pub enum GgufError {
    /// Opening, mapping, creating or writing the file at `path` failed.
    #[error("gguf: {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// Writing to a stream (no path known) failed.
    #[error("gguf: write failed: {source}")]
    Write {
        #[source]
        source: std::io::Error,
    },

    /// The input ends before `what`, which starts at byte `offset`.
    #[error("gguf: truncated at byte {offset}: reading {what}")]
    Truncated { offset: u64, what: String },

    /// The first four bytes are not `GGUF`.
    #[error("gguf: bad magic {found:02x?} (expected \"GGUF\")")]
    BadMagic { found: [u8; 4] },

    /// Only versions 2 and 3 (identical apart from the version number) are supported.
    #[error("gguf: unsupported version {version}{}", big_endian_hint(*version))]
    UnsupportedVersion { version: u32 },

    /// A count or length read at byte `offset` cannot possibly fit in the rest of the input (or exceeds a
    /// structural limit such as the number of dimensions). Checked before allocating anything.
    #[error("gguf: {what} = {count} at byte {offset} is too large")]
    TooLarge {
        what: String,
        count: u64,
        offset: u64,
    },

    /// A metadata value type id (read at byte `offset`) that GGUF does not define.
    #[error("gguf: unknown value type {id} at byte {offset}")]
    UnknownValueType { id: u32, offset: u64 },

    /// A tensor's ggml type id that this build does not know.
    #[error("gguf: tensor `{name}` has unknown ggml type {id}")]
    UnknownTensorType { name: String, id: u32 },

    /// A tensor's data range (absolute byte offsets) extends past the end of the file.
    #[error("gguf: tensor `{name}` data [{start}, {end}) lies outside the file ({file_len} bytes)")]
    TensorOutOfBounds {
        name: String,
        start: u64,
        end: u64,
        file_len: u64,
    },

    /// A tensor's offset (relative to the data section) is not a multiple of the file's alignment.
    #[error("gguf: tensor `{name}` offset {offset} is not a multiple of the alignment {alignment}")]
    Misaligned {
        name: String,
        offset: u64,
        alignment: u64,
    },

    /// A tensor's dimensions are unusable: the element count overflows, the row length is not a whole
    /// number of quant blocks, or too many dimensions were given to the writer.
    #[error("gguf: tensor `{name}` has bad shape {ne:?}: {reason}")]
    BadShape {
        name: String,
        ne: Vec<u64>,
        reason: String,
    },

    /// A string is not valid UTF-8; `offset` is that of the first invalid byte.
    #[error("gguf: invalid UTF-8 at byte {offset}")]
    BadUtf8 { offset: u64 },

    /// `general.alignment` is zero, not a power of two, or not an unsigned integer.
    #[error("gguf: bad alignment {value} (must be a power of two)")]
    BadAlignment { value: String },

    /// The same metadata key appears twice (the second one at byte `offset`).
    #[error("gguf: duplicate metadata key `{key}` at byte {offset}")]
    DuplicateKey { key: String, offset: u64 },

    /// The same tensor name appears twice.
    #[error("gguf: duplicate tensor `{name}`")]
    DuplicateTensor { name: String },

    /// A required metadata key is absent.
    #[error("gguf: missing metadata key `{key}`")]
    MissingKey { key: String },

    /// A metadata key holds a value of the wrong type.
    #[error("gguf: metadata key `{key}`: expected {want}, found {got}")]
    WrongType {
        key: String,
        want: &'static str,
        got: String,
    },

    /// The writer was given an array whose elements do not all have the declared element type.
    #[error("gguf: metadata key `{key}`: array declared as {declared} holds a {found}")]
    MixedArray {
        key: String,
        declared: String,
        found: String,
    },

    /// A split model's shards (llama.cpp's `gguf-split`) do not fit together.
    #[error("gguf: {}: {msg}", path.display())]
    Split { path: PathBuf, msg: String },

    /// `GgufWriter::add_tensor` got a buffer whose length does not match the shape and type, or a
    /// generator wrote a different number of bytes than declared.
    #[error("gguf: tensor `{name}`: expected {expected} bytes of data, got {got}")]
    SizeMismatch {
        name: String,
        expected: u64,
        got: u64,
    },
}

/// Version 3 read with the wrong byte order is 0x0300_0000: say so, since big-endian GGUFs exist.
fn big_endian_hint(version: u32) -> &'static str {
    if matches!(version.swap_bytes(), 2 | 3) {
        " (a big-endian file? only little-endian is supported)"
    } else {
        " (only versions 2 and 3 are supported)"
    }
}

impl GgufError {
    /// Adds where in the file structure a low-level read failed (e.g. "value of key `x`") to the `what`
    /// of `Truncated` / `TooLarge` errors. Built lazily so the success path allocates nothing.
    pub(crate) fn context(mut self, ctx: impl FnOnce() -> String) -> Self {
        if let GgufError::Truncated { what, .. } | GgufError::TooLarge { what, .. } = &mut self {
            what.push_str(" (");
            what.push_str(&ctx());
            what.push(')');
        }
        self
    }
}
