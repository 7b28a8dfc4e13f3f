//! Parsing a GGUF file: header, metadata and tensor descriptors. Tensor data is never copied; it is
//! sliced out of the mmap (or owned buffer) on demand.

use super::cursor::Cursor;
use super::info::{MAX_DIMS, TensorInfo, data_size};
use super::{ALIGNMENT_KEY, DEFAULT_ALIGNMENT, GgufError, MAGIC, Value, ValueType};
use crate::backend::TensorBytes;
use crate::tensor::DType;
use std::collections::HashMap;
use std::fmt;
use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

/// Deepest array-in-array nesting accepted. Real files use none; the limit stops a crafted file from
/// overflowing the stack through recursion.
const MAX_ARRAY_DEPTH: usize = 8;

/// Smallest possible encodings, used to bound header counts before allocating.
const MIN_KV_SIZE: usize = 8 + 4 + 1; // empty key, type, one-byte value
const MIN_TENSOR_INFO_SIZE: usize = 8 + 4 + 4 + 8; // empty name, n_dims = 0, type, offset

/// Where the file's bytes live. Both are shared so that tensors can outlive borrows of the file.
#[derive(Clone)]
enum Backing {
    Mapped(Arc<memmap2::Mmap>),
    Owned(Arc<Vec<u8>>),
}

impl Backing {
    fn bytes(&self) -> &[u8] {
        match self {
            Backing::Mapped(m) => m,
            Backing::Owned(v) => v,
        }
    }
}

/// A parsed GGUF file (version 2 or 3) with its bytes.
///
/// Parsing validates everything a later access relies on (every tensor lies inside the file, is
/// aligned and has a consistent size), so the accessors cannot fail on a file that opened.
#[derive(Clone)]
pub struct GgufFile {
    pub version: u32,
    pub alignment: u64,
    /// Metadata in file order.
    pub metadata: Vec<(String, Value)>,
    pub tensors: Vec<TensorInfo>,
    data_start: usize,
    backing: Backing,
    key_index: HashMap<String, usize>,
    tensor_index: HashMap<String, usize>,
}

impl fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GgufFile")
            .field("version", &self.version)
            .field("alignment", &self.alignment)
            .field("metadata_keys", &self.metadata.len())
            .field("tensors", &self.tensors.len())
            .field("data_start", &self.data_start)
            .field("file_len", &self.file_len())
            .finish()
    }
}

impl GgufFile {
    /// Maps the file at `path` read-only and parses its header.
    pub fn open(path: &Path) -> Result<GgufFile, GgufError> {
        let io = |source| GgufError::Io {
            path: path.to_owned(),
            source,
        };
        let file = std::fs::File::open(path).map_err(io)?;
        // SAFETY: the map is read-only and private to this process. Memory safety would only be at risk
        // if another process truncated or rewrote the file while it is mapped; model files are not
        // modified in place, and that is the accepted contract of every mmap-based model loader.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io)?;
        Self::parse(Backing::Mapped(Arc::new(map)))
    }

    /// Parses a file held in memory.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<GgufFile, GgufError> {
        Self::parse(Backing::Owned(Arc::new(bytes)))
    }

    fn parse(backing: Backing) -> Result<GgufFile, GgufError> {
        let buf = backing.bytes();
        let mut cur = Cursor::new(buf);

        let magic: [u8; 4] = cur.array("magic")?;
        if magic != MAGIC {
            return Err(GgufError::BadMagic { found: magic });
        }
        let version = cur.u32("version")?;
        if !matches!(version, 2 | 3) {
            return Err(GgufError::UnsupportedVersion { version });
        }
        let tensor_count = cur.count(MIN_TENSOR_INFO_SIZE, "tensor count")?;
        let kv_count = cur.count(MIN_KV_SIZE, "metadata count")?;

        let mut metadata = Vec::with_capacity(kv_count);
        let mut key_index = HashMap::with_capacity(kv_count);
        for i in 0..kv_count {
            let at = cur.offset();
            let key = cur
                .string("metadata key")
                .map_err(|e| e.context(|| format!("metadata entry {i}")))?;
            let value = read_typed_value(&mut cur, 0)
                .map_err(|e| e.context(|| format!("value of key `{key}`")))?;
            if key_index.insert(key.clone(), metadata.len()).is_some() {
                return Err(GgufError::DuplicateKey { key, offset: at });
            }
            metadata.push((key, value));
        }

        let alignment = match key_index.get(ALIGNMENT_KEY) {
            None => DEFAULT_ALIGNMENT,
            Some(&i) => {
                let v = &metadata[i].1;
                match v.as_u64() {
                    Some(a) if a.is_power_of_two() => a,
                    _ => {
                        return Err(GgufError::BadAlignment {
                            value: format!("{v:?}"),
                        });
                    }
                }
            }
        };

        let mut tensors = Vec::with_capacity(tensor_count);
        let mut tensor_index = HashMap::with_capacity(tensor_count);
        for i in 0..tensor_count {
            let t = read_tensor_info(&mut cur, alignment)
                .map_err(|e| e.context(|| format!("tensor info {i}")))?;
            if tensor_index.insert(t.name.clone(), tensors.len()).is_some() {
                return Err(GgufError::DuplicateTensor { name: t.name });
            }
            tensors.push(t);
        }

        // The data section starts at the next multiple of the alignment. A file without tensors may
        // omit that padding.
        let file_len = buf.len();
        let data_start = usize::try_from(alignment)
            .ok()
            .and_then(|a| cur.pos().checked_next_multiple_of(a))
            .filter(|&s| s <= file_len);
        let data_start = match data_start {
            Some(s) => s,
            None if tensors.is_empty() => file_len,
            None => return Err(cur.truncated("padding before the tensor data")),
        };

        for t in &tensors {
            let end = (data_start as u64)
                .checked_add(t.offset)
                .and_then(|s| s.checked_add(t.size as u64).map(|e| (s, e)));
            match end {
                Some((_, end)) if end <= file_len as u64 => {}
                _ => {
                    return Err(GgufError::TensorOutOfBounds {
                        name: t.name.clone(),
                        start: (data_start as u64).saturating_add(t.offset),
                        end: end.map_or(u64::MAX, |(_, e)| e),
                        file_len: file_len as u64,
                    });
                }
            }
        }

        Ok(GgufFile {
            version,
            alignment,
            metadata,
            tensors,
            data_start,
            backing,
            key_index,
            tensor_index,
        })
    }

    /// Byte offset of the data section (where tensor offsets count from).
    pub fn data_offset(&self) -> usize {
        self.data_start
    }

    /// Length of the whole file in bytes.
    pub fn file_len(&self) -> usize {
        self.backing.bytes().len()
    }

    /// The tensor named `name`, if any.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensor_index.get(name).map(|&i| &self.tensors[i])
    }

    /// Absolute byte range of a tensor's data.
    ///
    /// # Panics
    /// If `t` does not lie inside this file (it was not taken from this `GgufFile`).
    pub fn tensor_range(&self, t: &TensorInfo) -> Range<usize> {
        let start = usize::try_from(t.offset)
            .ok()
            .and_then(|o| self.data_start.checked_add(o));
        let range = start.and_then(|s| Some(s..s.checked_add(t.size)?));
        match range {
            Some(r) if r.end <= self.file_len() => r,
            _ => panic!("tensor `{}` is not part of this GGUF file", t.name),
        }
    }

    /// A tensor's data as a byte slice of the file.
    ///
    /// # Panics
    /// If `t` does not lie inside this file (it was not taken from this `GgufFile`).
    pub fn tensor_bytes(&self, t: &TensorInfo) -> &[u8] {
        &self.backing.bytes()[self.tensor_range(t)]
    }

    /// A tensor's data as shareable bytes: a zero-copy range of the mmap for opened files. For files
    /// parsed with [`GgufFile::from_bytes`] the tensor's bytes are copied (those are small test files).
    ///
    /// # Panics
    /// If `t` does not lie inside this file (it was not taken from this `GgufFile`).
    pub fn tensor_data(&self, t: &TensorInfo) -> TensorBytes {
        let range = self.tensor_range(t);
        match &self.backing {
            Backing::Mapped(m) => TensorBytes::Mapped(Arc::clone(m), range),
            Backing::Owned(v) => TensorBytes::Owned(Arc::new(v[range].to_vec())),
        }
    }

    /// The value of metadata key `key`, if present.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.key_index.get(key).map(|&i| &self.metadata[i].1)
    }

    /// The value of a required key.
    pub fn require(&self, key: &str) -> Result<&Value, GgufError> {
        self.get(key).ok_or_else(|| GgufError::MissingKey {
            key: key.to_owned(),
        })
    }

    fn typed<'a, T>(
        &'a self,
        key: &str,
        want: &'static str,
        f: impl FnOnce(&'a Value) -> Option<T>,
    ) -> Result<T, GgufError> {
        let v = self.require(key)?;
        f(v).ok_or_else(|| wrong_type(key, want, v.type_description()))
    }

    /// A non-negative integer of any integer type.
    pub fn get_u64(&self, key: &str) -> Result<u64, GgufError> {
        self.typed(key, "a non-negative integer", Value::as_u64)
    }

    /// An integer of any integer type that fits in i64.
    pub fn get_i64(&self, key: &str) -> Result<i64, GgufError> {
        self.typed(key, "an integer", Value::as_i64)
    }

    /// A number of any numeric type, as f32.
    pub fn get_f32(&self, key: &str) -> Result<f32, GgufError> {
        self.typed(key, "a number", |v| v.as_f64().map(|x| x as f32))
    }

    pub fn get_str(&self, key: &str) -> Result<&str, GgufError> {
        self.typed(key, "a string", Value::as_str)
    }

    pub fn get_bool(&self, key: &str) -> Result<bool, GgufError> {
        self.typed(key, "a bool", Value::as_bool)
    }

    pub fn get_array(&self, key: &str) -> Result<&[Value], GgufError> {
        self.typed(key, "an array", Value::as_array)
    }

    /// An array whose every element converts with `f`; the error names the first one that does not.
    fn typed_array<'a, T>(
        &'a self,
        key: &str,
        want: &'static str,
        f: impl Fn(&'a Value) -> Option<T>,
    ) -> Result<Vec<T>, GgufError> {
        let items = self.typed(key, want, Value::as_array)?;
        items
            .iter()
            .enumerate()
            .map(|(i, v)| {
                f(v).ok_or_else(|| {
                    wrong_type(
                        key,
                        want,
                        format!("element {i} of type {}", v.type_description()),
                    )
                })
            })
            .collect()
    }

    pub fn get_u64_array(&self, key: &str) -> Result<Vec<u64>, GgufError> {
        self.typed_array(key, "an array of non-negative integers", Value::as_u64)
    }

    pub fn get_i64_array(&self, key: &str) -> Result<Vec<i64>, GgufError> {
        self.typed_array(key, "an array of integers", Value::as_i64)
    }

    pub fn get_f32_array(&self, key: &str) -> Result<Vec<f32>, GgufError> {
        self.typed_array(key, "an array of numbers", |v| v.as_f64().map(|x| x as f32))
    }

    pub fn get_str_array(&self, key: &str) -> Result<Vec<&str>, GgufError> {
        self.typed_array(key, "an array of strings", Value::as_str)
    }

    pub fn get_bool_array(&self, key: &str) -> Result<Vec<bool>, GgufError> {
        self.typed_array(key, "an array of bools", Value::as_bool)
    }

    /// `general.architecture`, which selects the key prefix of the model's hyper-parameters.
    pub fn architecture(&self) -> Result<&str, GgufError> {
        self.get_str("general.architecture")
    }
}

fn wrong_type(key: &str, want: &'static str, got: String) -> GgufError {
    GgufError::WrongType {
        key: key.to_owned(),
        want,
        got,
    }
}

/// A u32 type tag followed by a value of that type.
fn read_typed_value(cur: &mut Cursor<'_>, depth: usize) -> Result<Value, GgufError> {
    let ty = read_value_type(cur)?;
    read_value(cur, ty, depth)
}

fn read_value_type(cur: &mut Cursor<'_>) -> Result<ValueType, GgufError> {
    let offset = cur.offset();
    let id = cur.u32("value type")?;
    ValueType::from_id(id).ok_or(GgufError::UnknownValueType { id, offset })
}

fn read_value(cur: &mut Cursor<'_>, ty: ValueType, depth: usize) -> Result<Value, GgufError> {
    Ok(match ty {
        ValueType::U8 => Value::U8(cur.u8("u8 value")?),
        ValueType::I8 => Value::I8(cur.u8("i8 value")? as i8),
        ValueType::U16 => Value::U16(cur.u16("u16 value")?),
        ValueType::I16 => Value::I16(cur.u16("i16 value")? as i16),
        ValueType::U32 => Value::U32(cur.u32("u32 value")?),
        ValueType::I32 => Value::I32(cur.u32("i32 value")? as i32),
        ValueType::F32 => Value::F32(f32::from_bits(cur.u32("f32 value")?)),
        ValueType::U64 => Value::U64(cur.u64("u64 value")?),
        ValueType::I64 => Value::I64(cur.u64("i64 value")? as i64),
        ValueType::F64 => Value::F64(f64::from_bits(cur.u64("f64 value")?)),
        // gguf-py and llama.cpp write 0/1; treat any non-zero byte as true rather than rejecting.
        ValueType::Bool => Value::Bool(cur.u8("bool value")? != 0),
        ValueType::String => Value::String(cur.string("string value")?),
        ValueType::Array => {
            if depth >= MAX_ARRAY_DEPTH {
                return Err(GgufError::TooLarge {
                    what: "array nesting depth".to_owned(),
                    count: depth as u64 + 1,
                    offset: cur.offset(),
                });
            }
            let elem = read_value_type(cur)?;
            let n = cur.count(elem.min_encoded_size(), "array length")?;
            // `count` bounded n by the remaining bytes; cap the up-front reservation anyway since a
            // Value is larger than its smallest encoding.
            let mut items = Vec::with_capacity(n.min(1 << 16));
            for _ in 0..n {
                items.push(read_value(cur, elem, depth + 1)?);
            }
            Value::Array(elem, items)
        }
    })
}

fn read_tensor_info(cur: &mut Cursor<'_>, alignment: u64) -> Result<TensorInfo, GgufError> {
    let name = cur.string("tensor name")?;
    let ctx = |e: GgufError| e.context(|| format!("tensor `{name}`"));
    let dims_at = cur.offset();
    let n_dims = cur.u32("tensor dimension count").map_err(ctx)?;
    if n_dims as usize > MAX_DIMS {
        return Err(GgufError::TooLarge {
            what: format!("dimension count of tensor `{name}`"),
            count: n_dims.into(),
            offset: dims_at,
        });
    }
    let mut ne = Vec::with_capacity(n_dims as usize);
    for _ in 0..n_dims {
        ne.push(cur.u64("tensor dimension").map_err(ctx)?);
    }
    let id = cur.u32("tensor type").map_err(ctx)?;
    let offset = cur.u64("tensor offset").map_err(ctx)?;
    let dtype = DType::from_ggml_id(id).ok_or_else(|| GgufError::UnknownTensorType {
        name: name.clone(),
        id,
    })?;
    let size = data_size(&name, &ne, dtype)?;
    if offset % alignment != 0 {
        return Err(GgufError::Misaligned {
            name,
            offset,
            alignment,
        });
    }
    Ok(TensorInfo {
        name,
        ne,
        dtype,
        offset,
        size,
    })
}
