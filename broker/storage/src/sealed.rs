//! The sealed form of a partition directory's small files (the checkpoint,
//! the deletion ledger, the producer-state snapshot):
//!
//! ```text
//! magic [u8; 4] · version u16 · fields (big-endian) · crc u32
//! ```
//!
//! with the CRC32C of every byte before it. Each file is written whole and
//! atomically; a file that fails its seal is damaged as a whole, never half
//! read. The reader checks the length, the seal, the magic and the version
//! before it hands out a field, and every field read past the end is
//! `None`, so damaged bytes never drive an allocation or a panic.

/// Bytes of the magic, the version and the trailing CRC.
const FRAME_BYTES: usize = 4 + 2 + 4;

/// Builds a sealed file.
#[derive(Debug)]
pub struct SealedWriter {
    bytes: Vec<u8>,
}

impl SealedWriter {
    /// A file of format `magic`, `version`, with room for `fields_bytes`.
    #[must_use]
    pub fn new(magic: [u8; 4], version: u16, fields_bytes: usize) -> SealedWriter {
        let mut bytes = Vec::with_capacity(FRAME_BYTES + fields_bytes);
        bytes.extend_from_slice(&magic);
        bytes.extend_from_slice(&version.to_be_bytes());
        SealedWriter { bytes }
    }

    /// Appends a byte.
    pub fn u8(&mut self, value: u8) {
        self.bytes.push(value);
    }

    /// Appends `count` zero bytes (reserved space).
    pub fn zeros(&mut self, count: usize) {
        self.bytes.resize(self.bytes.len() + count, 0);
    }

    /// Appends a big-endian `u16`.
    pub fn u16(&mut self, value: u16) {
        self.bytes.extend_from_slice(&value.to_be_bytes());
    }

    /// Appends a big-endian `u32`.
    pub fn u32(&mut self, value: u32) {
        self.bytes.extend_from_slice(&value.to_be_bytes());
    }

    /// Appends a big-endian `u64`.
    pub fn u64(&mut self, value: u64) {
        self.bytes.extend_from_slice(&value.to_be_bytes());
    }

    /// Appends a big-endian `i16`.
    pub fn i16(&mut self, value: i16) {
        self.bytes.extend_from_slice(&value.to_be_bytes());
    }

    /// Appends a big-endian `i32`.
    pub fn i32(&mut self, value: i32) {
        self.bytes.extend_from_slice(&value.to_be_bytes());
    }

    /// Appends a big-endian `i64`.
    pub fn i64(&mut self, value: i64) {
        self.bytes.extend_from_slice(&value.to_be_bytes());
    }

    /// The file: everything appended, then its CRC32C.
    #[must_use]
    pub fn seal(mut self) -> Vec<u8> {
        let crc = crc32c::crc32c(&self.bytes);
        self.bytes.extend_from_slice(&crc.to_be_bytes());
        self.bytes
    }
}

/// Reads the fields of a sealed file that passed its checks.
#[derive(Debug)]
pub struct SealedReader<'a> {
    /// The fields: after the version, before the CRC.
    fields: &'a [u8],
    at: usize,
}

impl<'a> SealedReader<'a> {
    /// The fields of `bytes` if it is a whole, undamaged file of format
    /// `magic`, `version`; `None` otherwise.
    #[must_use]
    pub fn open(bytes: &'a [u8], magic: [u8; 4], version: u16) -> Option<SealedReader<'a>> {
        if bytes.len() < FRAME_BYTES {
            return None;
        }
        let (body, crc) = bytes.split_at(bytes.len() - 4);
        if crc32c::crc32c(body) != u32::from_be_bytes(crc.try_into().ok()?) {
            return None;
        }
        if body[..4] != magic || body[4..6] != version.to_be_bytes() {
            return None;
        }
        Some(SealedReader {
            fields: &body[6..],
            at: 0,
        })
    }

    /// Field bytes not read yet.
    #[must_use]
    pub fn remaining(&self) -> usize {
        self.fields.len() - self.at
    }

    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let field = self.fields.get(self.at..self.at + N)?.try_into().ok()?;
        self.at += N;
        Some(field)
    }

    /// Skips `count` reserved bytes.
    pub fn skip(&mut self, count: usize) -> Option<()> {
        if self.remaining() < count {
            return None;
        }
        self.at += count;
        Some(())
    }

    /// Reads a byte.
    pub fn u8(&mut self) -> Option<u8> {
        self.take::<1>().map(|[byte]| byte)
    }

    /// Reads a big-endian `u16`.
    pub fn u16(&mut self) -> Option<u16> {
        self.take().map(u16::from_be_bytes)
    }

    /// Reads a big-endian `u32`.
    pub fn u32(&mut self) -> Option<u32> {
        self.take().map(u32::from_be_bytes)
    }

    /// Reads a big-endian `u64`.
    pub fn u64(&mut self) -> Option<u64> {
        self.take().map(u64::from_be_bytes)
    }

    /// Reads a big-endian `i16`.
    pub fn i16(&mut self) -> Option<i16> {
        self.take().map(i16::from_be_bytes)
    }

    /// Reads a big-endian `i32`.
    pub fn i32(&mut self) -> Option<i32> {
        self.take().map(i32::from_be_bytes)
    }

    /// Reads a big-endian `i64`.
    pub fn i64(&mut self) -> Option<i64> {
        self.take().map(i64::from_be_bytes)
    }

    /// `Some` when every field was read: trailing bytes are damage.
    #[must_use]
    pub fn finish(self) -> Option<()> {
        (self.remaining() == 0).then_some(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<u8> {
        let mut writer = SealedWriter::new(*b"TEST", 3, 16);
        writer.u8(7);
        writer.zeros(1);
        writer.u16(0x1234);
        writer.i64(-5);
        writer.seal()
    }

    #[test]
    fn fields_read_back_in_order_and_the_layout_is_big_endian() {
        let bytes = sample();
        assert_eq!(&bytes[..8], b"TEST\x00\x03\x07\x00");
        assert_eq!(&bytes[8..10], &[0x12, 0x34]);
        let mut reader = SealedReader::open(&bytes, *b"TEST", 3).unwrap();
        assert_eq!(reader.u8(), Some(7));
        assert_eq!(reader.skip(1), Some(()));
        assert_eq!(reader.u16(), Some(0x1234));
        assert_eq!(reader.i64(), Some(-5));
        assert_eq!(reader.u8(), None, "nothing past the end");
        assert_eq!(reader.finish(), Some(()));
    }

    #[test]
    fn any_damage_another_format_or_a_cut_is_refused() {
        let bytes = sample();
        for index in 0..bytes.len() {
            let mut damaged = bytes.clone();
            damaged[index] ^= 0x10;
            assert!(
                SealedReader::open(&damaged, *b"TEST", 3).is_none(),
                "{index}"
            );
        }
        for len in 0..bytes.len() {
            assert!(SealedReader::open(&bytes[..len], *b"TEST", 3).is_none());
        }
        assert!(SealedReader::open(&bytes, *b"TSET", 3).is_none());
        assert!(SealedReader::open(&bytes, *b"TEST", 4).is_none());
    }
}
