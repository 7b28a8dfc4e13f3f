//! Writing GGUF v3 files: used for synthetic test models (some multi-GB, hence streamed tensors) and
//! for converted checkpoints.

use super::info::data_size;
use super::{ALIGNMENT_KEY, DEFAULT_ALIGNMENT, GgufError, MAGIC, Value};
use crate::tensor::DType;
use std::collections::HashSet;
use std::io::{self, Write};
use std::path::Path;

/// Produces a tensor's bytes at write time, so huge synthetic tensors need not be held in memory.
pub type TensorGenerator = Box<dyn FnMut(&mut dyn Write) -> io::Result<()> + Send>;

enum TensorSource {
    Bytes(Vec<u8>),
    Generated(TensorGenerator),
}

struct PendingTensor {
    name: String,
    ne: Vec<u64>,
    dtype: DType,
    size: usize,
    source: TensorSource,
}

/// Builds a GGUF v3 file: metadata in insertion order, tensors in insertion order, each tensor's data
/// aligned to the file's alignment (the layout gguf-py and llama.cpp produce).
pub struct GgufWriter {
    alignment: u64,
    metadata: Vec<(String, Value)>,
    tensors: Vec<PendingTensor>,
    names: HashSet<String>,
}

impl Default for GgufWriter {
    fn default() -> Self {
        Self::new()
    }
}

impl GgufWriter {
    pub fn new() -> Self {
        GgufWriter {
            alignment: DEFAULT_ALIGNMENT,
            metadata: Vec::new(),
            tensors: Vec::new(),
            names: HashSet::new(),
        }
    }

    /// Sets the data alignment (a power of two; checked when writing). A value other than the default
    /// 32 is recorded as `general.alignment` (u32), since readers assume 32 without it.
    pub fn set_alignment(&mut self, a: u64) {
        self.alignment = a;
        if a == DEFAULT_ALIGNMENT {
            self.metadata.retain(|(k, _)| k != ALIGNMENT_KEY);
        } else {
            let v = u32::try_from(a).map_or(Value::U64(a), Value::U32);
            self.set_kv(ALIGNMENT_KEY, v);
        }
    }

    /// Adds a metadata entry, replacing (in place) an existing one with the same key. Setting
    /// `general.alignment` to an integer also sets the alignment the data is written with.
    pub fn add_kv(&mut self, key: &str, v: Value) {
        if key == ALIGNMENT_KEY
            && let Some(a) = v.as_u64()
        {
            self.alignment = a;
        }
        self.set_kv(key, v);
    }

    fn set_kv(&mut self, key: &str, v: Value) {
        match self.metadata.iter_mut().find(|(k, _)| k == key) {
            Some(slot) => slot.1 = v,
            None => self.metadata.push((key.to_owned(), v)),
        }
    }

    /// Adds a tensor with its data. `ne` is in ggml order (`ne[0]` contiguous); `data` must be exactly
    /// the size the shape and type imply.
    pub fn add_tensor(
        &mut self,
        name: &str,
        ne: &[u64],
        dtype: DType,
        data: Vec<u8>,
    ) -> Result<(), GgufError> {
        let size = self.check_new_tensor(name, ne, dtype)?;
        if data.len() != size {
            return Err(GgufError::SizeMismatch {
                name: name.to_owned(),
                expected: size as u64,
                got: data.len() as u64,
            });
        }
        self.push_tensor(name, ne, dtype, size, TensorSource::Bytes(data));
        Ok(())
    }

    /// Adds a tensor whose data `generator` streams when the file is written. Writing fails with
    /// `SizeMismatch` if it produces a different number of bytes than the shape implies.
    pub fn add_tensor_generated(
        &mut self,
        name: &str,
        ne: &[u64],
        dtype: DType,
        generator: TensorGenerator,
    ) -> Result<(), GgufError> {
        let size = self.check_new_tensor(name, ne, dtype)?;
        self.push_tensor(name, ne, dtype, size, TensorSource::Generated(generator));
        Ok(())
    }

    fn check_new_tensor(&self, name: &str, ne: &[u64], dtype: DType) -> Result<usize, GgufError> {
        if self.names.contains(name) {
            return Err(GgufError::DuplicateTensor {
                name: name.to_owned(),
            });
        }
        data_size(name, ne, dtype)
    }

    fn push_tensor(
        &mut self,
        name: &str,
        ne: &[u64],
        dtype: DType,
        size: usize,
        source: TensorSource,
    ) {
        self.names.insert(name.to_owned());
        self.tensors.push(PendingTensor {
            name: name.to_owned(),
            ne: ne.to_vec(),
            dtype,
            size,
            source,
        });
    }

    /// Serializes header, metadata and tensor infos, and returns them with the data offset of each
    /// tensor (relative to the data section) and the total data section size.
    fn header(&self) -> Result<(Vec<u8>, Vec<u64>, u64), GgufError> {
        let align = self.alignment;
        if !align.is_power_of_two() {
            return Err(GgufError::BadAlignment {
                value: align.to_string(),
            });
        }
        let mut h = Vec::new();
        h.extend_from_slice(&MAGIC);
        put_u32(&mut h, 3);
        put_u64(&mut h, self.tensors.len() as u64);
        put_u64(&mut h, self.metadata.len() as u64);
        for (key, v) in &self.metadata {
            check_value(key, v)?;
            put_str(&mut h, key);
            put_u32(&mut h, v.value_type().id());
            put_value(&mut h, v);
        }
        let overflow = || GgufError::TooLarge {
            what: "total tensor data size".to_owned(),
            count: u64::MAX,
            offset: 0,
        };
        let mut offsets = Vec::with_capacity(self.tensors.len());
        let mut end = 0u64;
        for t in &self.tensors {
            let offset = end.checked_next_multiple_of(align).ok_or_else(overflow)?;
            end = offset.checked_add(t.size as u64).ok_or_else(overflow)?;
            offsets.push(offset);
            put_str(&mut h, &t.name);
            put_u32(&mut h, t.ne.len() as u32);
            for &n in &t.ne {
                put_u64(&mut h, n);
            }
            put_u32(&mut h, t.dtype.ggml_id());
            put_u64(&mut h, offset);
        }
        let padded = (h.len() as u64)
            .checked_next_multiple_of(align)
            .ok_or_else(overflow)?;
        h.resize(usize::try_from(padded).map_err(|_| overflow())?, 0);
        Ok((h, offsets, end))
    }

    /// Writes the whole file to `w`.
    pub fn write_to(mut self, w: &mut dyn Write) -> Result<(), GgufError> {
        let write_err = |source| GgufError::Write { source };
        let (header, offsets, _) = self.header()?;
        w.write_all(&header).map_err(write_err)?;
        let mut pos = 0u64;
        for (t, &offset) in self.tensors.iter_mut().zip(&offsets) {
            write_zeros(w, offset - pos).map_err(write_err)?;
            match &mut t.source {
                TensorSource::Bytes(b) => w.write_all(b).map_err(write_err)?,
                TensorSource::Generated(generator) => {
                    let mut limited = Limited {
                        inner: w,
                        limit: t.size as u64,
                        written: 0,
                        attempted: 0,
                    };
                    let result = generator(&mut limited);
                    let (written, attempted) = (limited.written, limited.attempted);
                    // Too many bytes is reported as such even though the generator saw an error; a
                    // genuine write error wins over "too few bytes", which it probably caused.
                    if attempted > t.size as u64 {
                        return Err(size_mismatch(t, attempted));
                    }
                    result.map_err(write_err)?;
                    if written != t.size as u64 {
                        return Err(size_mismatch(t, written));
                    }
                }
            }
            pos = offset + t.size as u64;
        }
        w.flush().map_err(write_err)
    }

    /// Writes the file at `path` (created or truncated) through a buffer.
    pub fn write_file(self, path: &Path) -> Result<(), GgufError> {
        let io = |source| GgufError::Io {
            path: path.to_owned(),
            source,
        };
        let file = std::fs::File::create(path).map_err(io)?;
        let mut w = io::BufWriter::with_capacity(1 << 20, file);
        // `write_to` flushes the buffer; no fsync: synthetic models are rewritten freely.
        self.write_to(&mut w).map_err(|e| match e {
            GgufError::Write { source } => io(source),
            e => e,
        })
    }

    /// The whole file as bytes.
    pub fn to_bytes(self) -> Result<Vec<u8>, GgufError> {
        let (header, _, data_len) = self.header()?;
        let total = (header.len() as u64).saturating_add(data_len);
        let mut out = Vec::with_capacity(usize::try_from(total).unwrap_or(0));
        self.write_to(&mut out)?;
        Ok(out)
    }
}

fn size_mismatch(t: &PendingTensor, got: u64) -> GgufError {
    GgufError::SizeMismatch {
        name: t.name.clone(),
        expected: t.size as u64,
        got,
    }
}

/// Forwards at most `limit` bytes and counts what the generator tried to write, so a generator that
/// writes too much is stopped (instead of corrupting the following tensors) and reported.
struct Limited<'a> {
    inner: &'a mut dyn Write,
    limit: u64,
    written: u64,
    attempted: u64,
}

impl Write for Limited<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if buf.len() as u64 > self.limit - self.written {
            self.attempted = self.written.saturating_add(buf.len() as u64);
            return Err(io::Error::other(
                "tensor generator wrote more than the declared size",
            ));
        }
        let n = self.inner.write(buf)?;
        self.written += n as u64;
        self.attempted = self.written;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

fn write_zeros(w: &mut dyn Write, n: u64) -> io::Result<()> {
    const ZEROS: [u8; 256] = [0; 256];
    let mut n = n;
    while n > 0 {
        let k = n.min(ZEROS.len() as u64) as usize;
        w.write_all(&ZEROS[..k])?;
        n -= k as u64;
    }
    Ok(())
}

/// Rejects arrays whose elements disagree with the declared element type: the file format stores one
/// type per array, so such a value cannot be written faithfully.
fn check_value(key: &str, v: &Value) -> Result<(), GgufError> {
    if let Value::Array(ty, items) = v {
        for item in items {
            if item.value_type() != *ty {
                return Err(GgufError::MixedArray {
                    key: key.to_owned(),
                    declared: ty.name().to_owned(),
                    found: item.type_description(),
                });
            }
            check_value(key, item)?;
        }
    }
    Ok(())
}

fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    put_u64(out, s.len() as u64);
    out.extend_from_slice(s.as_bytes());
}

/// The value's payload (without its type tag).
fn put_value(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::U8(x) => out.push(*x),
        Value::I8(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::U16(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I16(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::U32(x) => put_u32(out, *x),
        Value::I32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::F32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::Bool(x) => out.push(u8::from(*x)),
        Value::String(s) => put_str(out, s),
        Value::Array(ty, items) => {
            put_u32(out, ty.id());
            put_u64(out, items.len() as u64);
            for item in items {
                put_value(out, item);
            }
        }
        Value::U64(x) => put_u64(out, *x),
        Value::I64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::F64(x) => out.extend_from_slice(&x.to_le_bytes()),
    }
}
