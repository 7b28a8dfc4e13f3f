//! A bounds-checked little-endian reader over the file bytes.
//!
//! Every read names what it reads so that a short input reports `Truncated { offset, what }` instead of
//! panicking, and lengths/counts are checked against the bytes that remain before anything is allocated.

use super::GgufError;

pub(crate) struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Cursor { buf, pos: 0 }
    }

    pub fn pos(&self) -> usize {
        self.pos
    }

    /// The current position as a file offset for error messages.
    pub fn offset(&self) -> u64 {
        self.pos as u64
    }

    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    pub fn truncated(&self, what: &str) -> GgufError {
        GgufError::Truncated {
            offset: self.offset(),
            what: what.to_owned(),
        }
    }

    pub fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], GgufError> {
        if n > self.remaining() {
            return Err(self.truncated(what));
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    pub fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N], GgufError> {
        let s = self.take(N, what)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    pub fn u8(&mut self, what: &str) -> Result<u8, GgufError> {
        Ok(self.array::<1>(what)?[0])
    }

    pub fn u16(&mut self, what: &str) -> Result<u16, GgufError> {
        self.array(what).map(u16::from_le_bytes)
    }

    pub fn u32(&mut self, what: &str) -> Result<u32, GgufError> {
        self.array(what).map(u32::from_le_bytes)
    }

    pub fn u64(&mut self, what: &str) -> Result<u64, GgufError> {
        self.array(what).map(u64::from_le_bytes)
    }

    /// Reads a count (u64) and checks that `count` items of at least `min_item_size` bytes each can fit
    /// in the remaining input; returns it as usize. This is what bounds every pre-allocation.
    pub fn count(&mut self, min_item_size: usize, what: &str) -> Result<usize, GgufError> {
        let at = self.offset();
        let count = self.u64(what)?;
        let fits = usize::try_from(count)
            .ok()
            .and_then(|c| c.checked_mul(min_item_size))
            .is_some_and(|bytes| bytes <= self.remaining());
        if !fits {
            return Err(GgufError::TooLarge {
                what: what.to_owned(),
                count,
                offset: at,
            });
        }
        // `fits` implies the conversion succeeded.
        Ok(count as usize)
    }

    /// A GGUF string: u64 byte length then UTF-8 bytes (no terminator).
    pub fn string(&mut self, what: &str) -> Result<String, GgufError> {
        let len = self.count(1, what)?;
        let start = self.offset();
        let bytes = self.take(len, what)?;
        std::str::from_utf8(bytes)
            .map(str::to_owned)
            .map_err(|e| GgufError::BadUtf8 {
                offset: start + e.valid_up_to() as u64,
            })
    }
}
