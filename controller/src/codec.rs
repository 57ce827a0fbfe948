//! The little-endian binary primitives every controller format is built
//! from, and the one error type for bytes that do not decode.
//!
//! Hand-written rather than serde: the formats are small, must stay stable
//! across versions (a snapshot written today is read by the next release),
//! and decoding untrusted bytes must never panic or allocate more than the
//! input could describe. Every length is checked against the bytes left
//! before anything is allocated.

/// Why bytes did not decode. Positions are byte offsets in the input.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The input ends before a value that starts at `at`.
    #[error("truncated at byte {at}: {what} needs {needed} more byte(s)")]
    Truncated {
        /// Where the value starts.
        at: usize,
        /// What was being read.
        what: &'static str,
        /// Bytes missing.
        needed: usize,
    },
    /// The stored checksum does not match the bytes.
    #[error("checksum mismatch in {what}: stored {stored:#010x}, computed {computed:#010x}")]
    Checksum {
        /// What was checked.
        what: &'static str,
        /// CRC32C in the input.
        stored: u32,
        /// CRC32C of the bytes.
        computed: u32,
    },
    /// The magic bytes are not those of the expected format.
    #[error("not a {what}: bad magic")]
    BadMagic {
        /// The expected format.
        what: &'static str,
    },
    /// A format version this build does not read (written by a newer one).
    #[error(
        "{what} format version {version} is not supported (this build reads up to {supported})"
    )]
    UnsupportedVersion {
        /// The format.
        what: &'static str,
        /// Version in the input.
        version: u8,
        /// Newest version this build reads.
        supported: u8,
    },
    /// A value is outside what the format allows.
    #[error("invalid {what} at byte {at}: {reason}")]
    Invalid {
        /// The field.
        what: &'static str,
        /// Where it starts.
        at: usize,
        /// What is wrong.
        reason: String,
    },
    /// Bytes left over after the last field.
    #[error("{count} unexpected trailing byte(s) at {at}")]
    TrailingBytes {
        /// Where they start.
        at: usize,
        /// How many.
        count: usize,
    },
}

/// Appends primitives to a buffer.
#[derive(Debug, Default)]
pub(crate) struct Writer {
    pub(crate) bytes: Vec<u8>,
}

impl Writer {
    pub(crate) fn u8(&mut self, value: u8) {
        self.bytes.push(value);
    }

    pub(crate) fn u16(&mut self, value: u16) {
        self.bytes.extend_from_slice(&value.to_le_bytes());
    }

    pub(crate) fn u32(&mut self, value: u32) {
        self.bytes.extend_from_slice(&value.to_le_bytes());
    }

    pub(crate) fn u64(&mut self, value: u64) {
        self.bytes.extend_from_slice(&value.to_le_bytes());
    }

    pub(crate) fn i64(&mut self, value: i64) {
        self.bytes.extend_from_slice(&value.to_le_bytes());
    }

    pub(crate) fn bool(&mut self, value: bool) {
        self.u8(u8::from(value));
    }

    /// A length-prefixed byte string.
    ///
    /// # Panics
    /// If longer than `u32::MAX`: callers bound every string far below.
    pub(crate) fn bytes(&mut self, value: &[u8]) {
        self.len(value.len());
        self.bytes.extend_from_slice(value);
    }

    pub(crate) fn str(&mut self, value: &str) {
        self.bytes(value.as_bytes());
    }

    pub(crate) fn opt_str(&mut self, value: Option<&str>) {
        match value {
            None => self.u8(0),
            Some(value) => {
                self.u8(1);
                self.str(value);
            }
        }
    }

    /// A collection length.
    ///
    /// # Panics
    /// Above `u32::MAX`, which the state's own limits rule out.
    pub(crate) fn len(&mut self, len: usize) {
        let len = u32::try_from(len).expect("controller collections are bounded below u32::MAX");
        self.u32(len);
    }
}

/// Reads primitives from untrusted bytes; every read is bounds-checked.
#[derive(Debug)]
pub(crate) struct Reader<'a> {
    bytes: &'a [u8],
    position: usize,
    /// Added to positions in errors, so that they point into the enclosing
    /// file rather than into this slice.
    base: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(bytes: &'a [u8], base: usize) -> Self {
        Reader {
            bytes,
            position: 0,
            base,
        }
    }

    pub(crate) fn position(&self) -> usize {
        self.base + self.position
    }

    pub(crate) fn remaining(&self) -> usize {
        self.bytes.len() - self.position
    }

    pub(crate) fn take(
        &mut self,
        count: usize,
        what: &'static str,
    ) -> Result<&'a [u8], DecodeError> {
        if self.remaining() < count {
            return Err(DecodeError::Truncated {
                at: self.position(),
                what,
                needed: count - self.remaining(),
            });
        }
        let slice = &self.bytes[self.position..self.position + count];
        self.position += count;
        Ok(slice)
    }

    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], DecodeError> {
        let mut array = [0; N];
        array.copy_from_slice(self.take(N, what)?);
        Ok(array)
    }

    pub(crate) fn u8(&mut self, what: &'static str) -> Result<u8, DecodeError> {
        Ok(self.array::<1>(what)?[0])
    }

    pub(crate) fn u16(&mut self, what: &'static str) -> Result<u16, DecodeError> {
        Ok(u16::from_le_bytes(self.array(what)?))
    }

    pub(crate) fn u32(&mut self, what: &'static str) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    pub(crate) fn u64(&mut self, what: &'static str) -> Result<u64, DecodeError> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    pub(crate) fn i64(&mut self, what: &'static str) -> Result<i64, DecodeError> {
        Ok(i64::from_le_bytes(self.array(what)?))
    }

    pub(crate) fn bool(&mut self, what: &'static str) -> Result<bool, DecodeError> {
        let at = self.position();
        match self.u8(what)? {
            0 => Ok(false),
            1 => Ok(true),
            other => Err(self.invalid_at(what, at, format!("boolean byte {other}"))),
        }
    }

    /// A length-prefixed byte string of at most `max` bytes.
    pub(crate) fn bytes(
        &mut self,
        what: &'static str,
        max: usize,
    ) -> Result<&'a [u8], DecodeError> {
        let at = self.position();
        let len = self.u32(what)? as usize;
        if len > max {
            return Err(self.invalid_at(what, at, format!("length {len} over the limit {max}")));
        }
        self.take(len, what)
    }

    pub(crate) fn str(&mut self, what: &'static str, max: usize) -> Result<String, DecodeError> {
        let at = self.position();
        let bytes = self.bytes(what, max)?;
        String::from_utf8(bytes.to_vec())
            .map_err(|_| self.invalid_at(what, at, "not UTF-8".to_owned()))
    }

    pub(crate) fn opt_str(
        &mut self,
        what: &'static str,
        max: usize,
    ) -> Result<Option<String>, DecodeError> {
        if self.bool(what)? {
            Ok(Some(self.str(what, max)?))
        } else {
            Ok(None)
        }
    }

    /// A collection length, refused when even `min_item_bytes` per item
    /// would not fit in what is left: this is what keeps a forged count
    /// from allocating gigabytes.
    pub(crate) fn len(
        &mut self,
        what: &'static str,
        max: usize,
        min_item_bytes: usize,
    ) -> Result<usize, DecodeError> {
        let at = self.position();
        let len = self.u32(what)? as usize;
        if len > max {
            return Err(self.invalid_at(what, at, format!("count {len} over the limit {max}")));
        }
        if len.saturating_mul(min_item_bytes) > self.remaining() {
            return Err(DecodeError::Truncated {
                at,
                what,
                needed: len.saturating_mul(min_item_bytes) - self.remaining(),
            });
        }
        Ok(len)
    }

    pub(crate) fn invalid_at(&self, what: &'static str, at: usize, reason: String) -> DecodeError {
        DecodeError::Invalid { what, at, reason }
    }

    /// Fails unless every byte was read.
    pub(crate) fn finish(&self) -> Result<(), DecodeError> {
        match self.remaining() {
            0 => Ok(()),
            count => Err(DecodeError::TrailingBytes {
                at: self.position(),
                count,
            }),
        }
    }
}

/// Frames `body` as `magic · version u8 · crc32c(body) u32 · len u32 · body`.
pub(crate) fn seal(magic: [u8; 4], version: u8, body: &[u8]) -> Vec<u8> {
    let mut writer = Writer {
        bytes: Vec::with_capacity(body.len() + SEAL_HEADER_BYTES),
    };
    writer.bytes.extend_from_slice(&magic);
    writer.u8(version);
    writer.u32(crc32c::crc32c(body));
    writer.len(body.len());
    writer.bytes.extend_from_slice(body);
    writer.bytes
}

/// Bytes in front of a sealed body.
pub(crate) const SEAL_HEADER_BYTES: usize = 4 + 1 + 4 + 4;

/// Checks a [`seal`]ed frame and returns its version and body. The whole
/// input must be the frame: a sealed file has nothing after its body.
pub(crate) fn unseal<'a>(
    bytes: &'a [u8],
    magic: [u8; 4],
    supported: u8,
    what: &'static str,
) -> Result<(u8, &'a [u8]), DecodeError> {
    let mut reader = Reader::new(bytes, 0);
    if reader.take(4, what)? != magic {
        return Err(DecodeError::BadMagic { what });
    }
    let version = reader.u8(what)?;
    if version == 0 || version > supported {
        return Err(DecodeError::UnsupportedVersion {
            what,
            version,
            supported,
        });
    }
    let stored = reader.u32(what)?;
    let len = reader.u32(what)? as usize;
    let body = reader.take(len, what)?;
    reader.finish()?;
    let computed = crc32c::crc32c(body);
    if computed != stored {
        return Err(DecodeError::Checksum {
            what,
            stored,
            computed,
        });
    }
    Ok((version, body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealed_frames_round_trip_and_detect_damage() {
        let sealed = seal(*b"TEST", 1, b"hello");
        assert_eq!(unseal(&sealed, *b"TEST", 1, "test"), Ok((1, &b"hello"[..])));
        for index in 0..sealed.len() {
            let mut damaged = sealed.clone();
            damaged[index] ^= 0x01;
            assert!(unseal(&damaged, *b"TEST", 1, "test").is_err(), "{index}");
        }
        for len in 0..sealed.len() {
            assert!(unseal(&sealed[..len], *b"TEST", 1, "test").is_err());
        }
    }

    #[test]
    fn forged_counts_do_not_allocate() {
        let mut writer = Writer::default();
        writer.u32(u32::MAX);
        let mut reader = Reader::new(&writer.bytes, 0);
        assert!(matches!(
            reader.len("items", usize::MAX, 8),
            Err(DecodeError::Truncated { .. })
        ));
    }
}
