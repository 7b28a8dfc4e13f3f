//! Row access to weights of any dequantizable type.

use super::NAME;
use crate::backend::{BackendError, HostTensor};
use crate::tensor::DType;
use crate::tensor::quant;

/// A weight operand: an uploaded tensor (any type) or a plain f32 tensor in a weight position.
pub(super) enum Weight<'a> {
    F32(&'a [f32]),
    /// An uploaded tensor whose byte length was checked against its shape.
    Host(&'a HostTensor),
}

fn corrupt(msg: String) -> BackendError {
    BackendError::Device {
        backend: NAME.into(),
        msg,
    }
}

impl<'a> Weight<'a> {
    /// Wraps an uploaded tensor after checking that it holds whole rows of `shape`. The graph
    /// checked dtype and shape but not the byte length, which a malformed file can get wrong.
    pub(super) fn host(t: &'a HostTensor, shape: &[usize]) -> Result<Self, BackendError> {
        let row = shape.last().copied().unwrap_or(1);
        let rows: usize = shape.iter().product::<usize>() / row.max(1);
        let want = t
            .dtype
            .bytes_for(row)
            .and_then(|b| b.checked_mul(rows))
            .ok_or_else(|| {
                corrupt(format!(
                    "weight rows of {row} {} values are not whole blocks",
                    t.dtype
                ))
            })?;
        if t.bytes().len() != want {
            return Err(corrupt(format!(
                "weight of {} {:?} holds {} bytes, expected {want}",
                t.dtype,
                shape,
                t.bytes().len()
            )));
        }
        Ok(Weight::Host(t))
    }

    /// Row `r` of a weight whose rows have `len` values: borrowed when the data already is
    /// aligned f32, otherwise decoded into `scratch` (which must hold `len` values).
    pub(super) fn row<'s>(
        &'s self,
        r: usize,
        len: usize,
        scratch: &'s mut [f32],
    ) -> Result<&'s [f32], BackendError> {
        match self {
            Weight::F32(v) => Ok(&v[r * len..(r + 1) * len]),
            Weight::Host(t) => {
                let row_bytes = t.dtype.bytes_for(len).ok_or_else(|| {
                    corrupt(format!(
                        "a row of {len} {} values is not whole blocks",
                        t.dtype
                    ))
                })?;
                let bytes = &t.bytes()[r * row_bytes..(r + 1) * row_bytes];
                if t.dtype == DType::F32 {
                    // mmapped tensors need not be 4-byte aligned: borrow when they are, copy if not.
                    if let Ok(v) = bytemuck::try_cast_slice::<u8, f32>(bytes) {
                        return Ok(v);
                    }
                    for (d, b) in scratch.iter_mut().zip(bytes.chunks_exact(4)) {
                        *d = bytemuck::pod_read_unaligned(b);
                    }
                } else {
                    quant::dequantize_into(t.dtype, bytes, &mut scratch[..len])?;
                }
                Ok(&scratch[..len])
            }
        }
    }

    /// All `n` values (a small weight such as a norm vector or conv kernel), dequantized.
    pub(super) fn to_vec(&self, n: usize) -> Result<Vec<f32>, BackendError> {
        let mut scratch = vec![0.0; n];
        let v = self.row(0, n, &mut scratch)?.to_vec();
        Ok(v)
    }
}
