//! Zig-zag variable-length integers as Kafka records use them (protobuf
//! encoding of signed values): 1–5 bytes for a 32-bit value, 1–10 for 64-bit.

use super::BatchError;

/// Longest encoding of a 64-bit varint.
pub const VARLONG_BYTES_MAX: usize = 10;

/// Appends `value` zig-zag encoded, in one copy from the stack: the
/// producer writes several of these per record.
pub fn put_varlong(out: &mut Vec<u8>, value: i64) {
    let mut zigzag = zigzag(value);
    let mut encoded = [0u8; VARLONG_BYTES_MAX];
    let mut length = 0;
    while zigzag >= 0x80 {
        encoded[length] = (zigzag as u8) | 0x80;
        zigzag >>= 7;
        length += 1;
    }
    encoded[length] = zigzag as u8;
    out.extend_from_slice(&encoded[..=length]);
}

/// Appends `value` zig-zag encoded.
pub fn put_varint(out: &mut Vec<u8>, value: i32) {
    put_varlong(out, i64::from(value));
}

/// Bytes `put_varlong(value)` appends.
#[must_use]
pub fn varlong_len(value: i64) -> usize {
    let bits = 64 - zigzag(value).leading_zeros() as usize;
    bits.div_ceil(7).max(1)
}

/// Bytes `put_varint(value)` appends.
#[must_use]
pub fn varint_len(value: i32) -> usize {
    varlong_len(i64::from(value))
}

fn zigzag(value: i64) -> u64 {
    ((value << 1) ^ (value >> 63)) as u64
}

/// A cursor over untrusted bytes: every read is bounds-checked and returns a
/// typed error instead of panicking.
#[derive(Debug)]
pub struct Cursor<'a> {
    bytes: &'a [u8],
    position: usize,
}

impl<'a> Cursor<'a> {
    /// A cursor at the start of `bytes`.
    #[must_use]
    pub fn new(bytes: &'a [u8]) -> Self {
        Cursor { bytes, position: 0 }
    }

    /// Bytes read so far.
    #[must_use]
    pub fn position(&self) -> usize {
        self.position
    }

    /// Bytes left to read.
    #[must_use]
    pub fn remaining(&self) -> usize {
        self.bytes.len() - self.position
    }

    /// Reads a zig-zag varlong.
    ///
    /// # Errors
    /// [`BatchError::MalformedRecord`] on truncation or an over-long encoding.
    pub fn varlong(&mut self) -> Result<i64, BatchError> {
        let mut zigzag: u64 = 0;
        for index in 0..VARLONG_BYTES_MAX {
            let byte = self.u8()?;
            let bits = u64::from(byte & 0x7f);
            if index == VARLONG_BYTES_MAX - 1 && bits > 1 {
                return Err(BatchError::MalformedRecord("varlong overflows 64 bits"));
            }
            zigzag |= bits << (7 * index);
            if byte & 0x80 == 0 {
                return Ok(((zigzag >> 1) as i64) ^ -((zigzag & 1) as i64));
            }
        }
        Err(BatchError::MalformedRecord("varlong longer than 10 bytes"))
    }

    /// Reads a zig-zag varint that must fit 32 bits.
    ///
    /// # Errors
    /// [`BatchError::MalformedRecord`] on truncation or a value out of range.
    pub fn varint(&mut self) -> Result<i32, BatchError> {
        let value = self.varlong()?;
        i32::try_from(value).map_err(|_| BatchError::MalformedRecord("varint out of 32-bit range"))
    }

    /// Reads one byte.
    ///
    /// # Errors
    /// [`BatchError::MalformedRecord`] at the end of input.
    pub fn u8(&mut self) -> Result<u8, BatchError> {
        let byte = *self
            .bytes
            .get(self.position)
            .ok_or(BatchError::MalformedRecord("record truncated"))?;
        self.position += 1;
        Ok(byte)
    }

    /// Reads `count` bytes as a slice of the input.
    ///
    /// # Errors
    /// [`BatchError::MalformedRecord`] when fewer than `count` bytes remain.
    pub fn take(&mut self, count: usize) -> Result<&'a [u8], BatchError> {
        if count > self.remaining() {
            return Err(BatchError::MalformedRecord("field longer than the record"));
        }
        let slice = &self.bytes[self.position..self.position + count];
        self.position += count;
        Ok(slice)
    }

    /// Reads a varint length followed by that many bytes; `-1` is null.
    ///
    /// # Errors
    /// [`BatchError::MalformedRecord`] on a negative length other than `-1`
    /// or a length past the end of the record.
    pub fn nullable_bytes(&mut self) -> Result<Option<(usize, usize)>, BatchError> {
        let length = self.varint()?;
        if length == -1 {
            return Ok(None);
        }
        let length =
            usize::try_from(length).map_err(|_| BatchError::MalformedRecord("negative length"))?;
        let start = self.position;
        self.take(length)?;
        Ok(Some((start, length)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn varlong_round_trips(value in any::<i64>()) {
            let mut out = Vec::new();
            put_varlong(&mut out, value);
            prop_assert_eq!(out.len(), varlong_len(value));
            let mut cursor = Cursor::new(&out);
            prop_assert_eq!(cursor.varlong().unwrap(), value);
            prop_assert_eq!(cursor.remaining(), 0);
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..16)) {
            let mut cursor = Cursor::new(&bytes);
            let _ = cursor.varlong();
            let mut cursor = Cursor::new(&bytes);
            let _ = cursor.nullable_bytes();
        }
    }

    #[test]
    fn known_encodings_match_kafka() {
        let cases: &[(i64, &[u8])] = &[
            (0, &[0]),
            (-1, &[1]),
            (1, &[2]),
            (63, &[126]),
            (64, &[128, 1]),
        ];
        for (value, expected) in cases {
            let mut out = Vec::new();
            put_varlong(&mut out, *value);
            assert_eq!(&out, expected, "{value}");
        }
    }

    #[test]
    fn overlong_encoding_is_an_error() {
        let bytes = [0xffu8; 11];
        assert!(Cursor::new(&bytes).varlong().is_err());
    }
}
