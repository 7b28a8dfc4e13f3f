//! Host-side tensors: weight data (borrowed from an mmap or owned) and run inputs/outputs.

use crate::tensor::DType;
use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::Arc;

/// Bytes of a tensor: a range of a shared mmap (no copy) or an owned buffer.
#[derive(Clone, Debug)]
pub enum TensorBytes {
    Mapped(Arc<memmap2::Mmap>, Range<usize>),
    Owned(Arc<Vec<u8>>),
}

impl TensorBytes {
    pub fn as_slice(&self) -> &[u8] {
        match self {
            TensorBytes::Mapped(m, r) => &m[r.clone()],
            TensorBytes::Owned(v) => v,
        }
    }
}

/// A tensor in host memory: row-major shape, any dtype.
#[derive(Clone, Debug)]
pub struct HostTensor {
    pub dtype: DType,
    pub shape: Vec<usize>,
    pub data: TensorBytes,
}

impl HostTensor {
    pub fn from_f32(shape: &[usize], v: &[f32]) -> Self {
        HostTensor {
            dtype: DType::F32,
            shape: shape.to_vec(),
            data: TensorBytes::Owned(Arc::new(bytemuck::cast_slice(v).to_vec())),
        }
    }
    pub fn from_i32(shape: &[usize], v: &[i32]) -> Self {
        HostTensor {
            dtype: DType::I32,
            shape: shape.to_vec(),
            data: TensorBytes::Owned(Arc::new(bytemuck::cast_slice(v).to_vec())),
        }
    }
    pub fn from_bytes(dtype: DType, shape: &[usize], bytes: Vec<u8>) -> Self {
        HostTensor {
            dtype,
            shape: shape.to_vec(),
            data: TensorBytes::Owned(Arc::new(bytes)),
        }
    }
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }
    pub fn bytes(&self) -> &[u8] {
        self.data.as_slice()
    }
    /// The values as f32 (F32 tensors copy; I32 convert; other dtypes dequantize).
    pub fn to_f32(&self) -> Result<Vec<f32>, crate::tensor::quant::QuantError> {
        match self.dtype {
            DType::I32 => Ok(self.to_i32().into_iter().map(|v| v as f32).collect()),
            d => crate::tensor::quant::dequantize(d, self.bytes(), self.numel()),
        }
    }
    /// The values of an I32 tensor (empty for other types).
    pub fn to_i32(&self) -> Vec<i32> {
        if self.dtype != DType::I32 {
            return Vec::new();
        }
        self.bytes()
            .chunks_exact(4)
            .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect()
    }
}

/// Input data for one graph run.
#[derive(Clone, Debug, PartialEq)]
pub enum HostData {
    F32(Vec<f32>),
    I32(Vec<i32>),
}

impl HostData {
    pub fn len(&self) -> usize {
        match self {
            HostData::F32(v) => v.len(),
            HostData::I32(v) => v.len(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn dtype(&self) -> DType {
        match self {
            HostData::F32(_) => DType::F32,
            HostData::I32(_) => DType::I32,
        }
    }
}

/// A model's weights by name, as the backends receive them.
#[derive(Clone, Debug, Default)]
pub struct WeightStore {
    pub tensors: BTreeMap<String, HostTensor>,
}

impl WeightStore {
    pub fn insert(&mut self, name: impl Into<String>, t: HostTensor) {
        self.tensors.insert(name.into(), t);
    }
    pub fn get(&self, name: &str) -> Option<&HostTensor> {
        self.tensors.get(name)
    }
    /// Total bytes of all weights (what a decode step streams, at most).
    pub fn total_bytes(&self) -> usize {
        self.tensors.values().map(|t| t.bytes().len()).sum()
    }
}
