//! The little codec shared by the persisted forms of [`crate::EpochHistory`]
//! and [`crate::ReplicaMeta`]: little-endian fixed-width fields followed by
//! a CRC32C of everything before it.
//!
//! The reader checks the checksum and the length before it interprets a
//! byte, so damaged input is refused as a whole and never drives an
//! allocation.

use crate::error::DecodeError;

/// Bytes of the trailing checksum.
const CRC_BYTES: usize = 4;

/// Appends fields to a buffer.
#[derive(Debug)]
pub(crate) struct Writer {
    bytes: Vec<u8>,
}

impl Writer {
    pub(crate) fn with_capacity(capacity: usize) -> Self {
        Self {
            bytes: Vec::with_capacity(capacity),
        }
    }

    pub(crate) fn u8(&mut self, value: u8) {
        self.bytes.push(value);
    }

    pub(crate) fn u32(&mut self, value: u32) {
        self.bytes.extend_from_slice(&value.to_le_bytes());
    }

    pub(crate) fn u64(&mut self, value: u64) {
        self.bytes.extend_from_slice(&value.to_le_bytes());
    }

    /// The bytes with the CRC32C of all of them appended.
    pub(crate) fn finish_with_crc(mut self) -> Vec<u8> {
        let crc = crc32c::crc32c(&self.bytes);
        self.bytes.extend_from_slice(&crc.to_le_bytes());
        self.bytes
    }
}

/// Reads fields from checksummed bytes.
#[derive(Debug)]
pub(crate) struct Reader<'a> {
    /// The contents without the checksum.
    body: &'a [u8],
    position: usize,
    total_len: usize,
}

impl<'a> Reader<'a> {
    /// Checks the length (at least `fixed_bytes` of fields plus the
    /// checksum) and the checksum.
    pub(crate) fn with_crc(bytes: &'a [u8], fixed_bytes: usize) -> Result<Self, DecodeError> {
        if bytes.len() < fixed_bytes + CRC_BYTES {
            return Err(DecodeError::Truncated { len: bytes.len() });
        }
        let (body, crc_bytes) = bytes.split_at(bytes.len() - CRC_BYTES);
        let mut stored = [0u8; CRC_BYTES];
        stored.copy_from_slice(crc_bytes);
        let stored = u32::from_le_bytes(stored);
        let computed = crc32c::crc32c(body);
        if stored != computed {
            return Err(DecodeError::Checksum { stored, computed });
        }
        Ok(Self {
            body,
            position: 0,
            total_len: bytes.len(),
        })
    }

    fn take<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let end = self.position + N;
        let slice = self
            .body
            .get(self.position..end)
            .ok_or(DecodeError::Truncated {
                len: self.total_len,
            })?;
        self.position = end;
        let mut out = [0u8; N];
        out.copy_from_slice(slice);
        Ok(out)
    }

    pub(crate) fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take::<1>()?[0])
    }

    pub(crate) fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(self.take()?))
    }

    pub(crate) fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_le_bytes(self.take()?))
    }

    pub(crate) fn magic(&mut self, expected: u32) -> Result<(), DecodeError> {
        let found = self.u32()?;
        if found == expected {
            Ok(())
        } else {
            Err(DecodeError::BadMagic { found })
        }
    }

    pub(crate) fn version(&mut self, expected: u8) -> Result<(), DecodeError> {
        let version = self.u8()?;
        if version == expected {
            Ok(())
        } else {
            Err(DecodeError::UnknownVersion { version })
        }
    }

    pub(crate) fn flag(&mut self) -> Result<bool, DecodeError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            byte => Err(DecodeError::BadFlag { byte }),
        }
    }

    /// Checks that exactly `count` items of `item_bytes` remain, before
    /// anything is read or allocated for them.
    pub(crate) fn expect_remaining(
        &self,
        count: u32,
        item_bytes: usize,
    ) -> Result<(), DecodeError> {
        let remaining = self.body.len() - self.position;
        let needed = usize::try_from(count)
            .ok()
            .and_then(|count| count.checked_mul(item_bytes));
        if needed == Some(remaining) {
            Ok(())
        } else {
            Err(DecodeError::BadLength {
                count,
                len: self.total_len,
            })
        }
    }

    /// Checks that every byte was read.
    pub(crate) fn finish(self) -> Result<(), DecodeError> {
        if self.position == self.body.len() {
            Ok(())
        } else {
            Err(DecodeError::Truncated {
                len: self.total_len,
            })
        }
    }
}
