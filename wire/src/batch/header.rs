//! The fixed 61-byte header of a RecordBatch v2 and in-place edits of it.
//!
//! ```text
//! offset  size  field
//!  0       8    base_offset            assigned by the leader, not covered by the CRC;
//!                                      0 ..= i64::MAX - last_offset_delta - 1
//!  8       4    batch_length           bytes after this field
//! 12       4    partition_leader_epoch assigned by the leader, not covered by the CRC
//! 16       1    magic                  always 2
//! 17       4    crc                    CRC32C of bytes 21..end
//! 21       2    attributes             compression (bits 0-2), timestamp type (3),
//!                                      transactional (4), control (5)
//! 23       4    last_offset_delta
//! 27       8    base_timestamp
//! 35       8    max_timestamp
//! 43       8    producer_id            -1 when the producer is not idempotent
//! 51       2    producer_epoch
//! 53       4    base_sequence
//! 57       4    record_count
//! 61       ..   records (compressed as a whole when compression is set)
//! ```
//!
//! All integers are big-endian. Because the CRC starts at `attributes`, the
//! leader can stamp `base_offset` and `partition_leader_epoch` without
//! recomputing it.

use super::{BatchError, BatchLimits, Compression};
use crate::types::{LeaderEpoch, Offset, TimestampMs};

/// Bytes of the batch header, records excluded.
pub const HEADER_BYTES: usize = 61;
/// Bytes before `batch_length`'s coverage starts: `base_offset` + `batch_length`.
pub const LOG_OVERHEAD_BYTES: usize = 12;
/// The only record-batch format version this crate reads and writes.
pub const MAGIC: u8 = 2;
/// `producer_id` of a batch from a producer without idempotence.
pub const NO_PRODUCER_ID: i64 = -1;
/// `partition_leader_epoch` before a leader stamped the batch.
pub const NO_LEADER_EPOCH: i32 = -1;

pub(super) const BASE_OFFSET_AT: usize = 0;
pub(super) const BATCH_LENGTH_AT: usize = 8;
pub(super) const LEADER_EPOCH_AT: usize = 12;
pub(super) const MAGIC_AT: usize = 16;
pub(super) const CRC_AT: usize = 17;
pub(super) const ATTRIBUTES_AT: usize = 21;
pub(super) const LAST_OFFSET_DELTA_AT: usize = 23;
pub(super) const BASE_TIMESTAMP_AT: usize = 27;
pub(super) const MAX_TIMESTAMP_AT: usize = 35;
pub(super) const PRODUCER_ID_AT: usize = 43;
pub(super) const PRODUCER_EPOCH_AT: usize = 51;
pub(super) const BASE_SEQUENCE_AT: usize = 53;
pub(super) const RECORD_COUNT_AT: usize = 57;

const _: () = assert!(RECORD_COUNT_AT + 4 == HEADER_BYTES);
const _: () = assert!(CRC_AT + 4 == ATTRIBUTES_AT);

const COMPRESSION_MASK: u16 = 0x07;
const TIMESTAMP_TYPE_BIT: u16 = 1 << 3;
const TRANSACTIONAL_BIT: u16 = 1 << 4;
const CONTROL_BIT: u16 = 1 << 5;

/// The idempotent-producer identity of a batch (C5).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ProducerIdentity {
    /// Assigned by `InitProducerId`; [`NO_PRODUCER_ID`] when absent.
    pub producer_id: i64,
    /// Bumped when a producer with the same id restarts; older epochs are fenced.
    pub producer_epoch: i16,
    /// Sequence number of the first record; the batch covers
    /// `base_sequence ..= base_sequence + last_offset_delta`.
    pub base_sequence: i32,
}

impl ProducerIdentity {
    /// The identity of a batch sent without idempotence.
    pub const NONE: ProducerIdentity = ProducerIdentity {
        producer_id: NO_PRODUCER_ID,
        producer_epoch: -1,
        base_sequence: -1,
    };

    /// Whether the batch carries an idempotent-producer identity.
    #[must_use]
    pub fn is_idempotent(&self) -> bool {
        self.producer_id >= 0
    }
}

/// A parsed batch header. Obtained from [`BatchHeader::parse`], which checks
/// structure and bounds, or [`super::validate`], which also checks the CRC.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchHeader {
    /// Offset of the first record.
    pub base_offset: Offset,
    /// Bytes after the `batch_length` field.
    pub batch_length: u32,
    /// Raw `partition_leader_epoch`; see [`BatchHeader::leader_epoch`].
    pub partition_leader_epoch: i32,
    /// Stored CRC32C of bytes 21..end.
    pub crc: u32,
    /// Raw attribute bits.
    pub attributes: u16,
    /// Offset of the last record minus `base_offset`.
    pub last_offset_delta: u32,
    /// Timestamp that record timestamp deltas are relative to.
    pub base_timestamp: TimestampMs,
    /// Largest record timestamp in the batch.
    pub max_timestamp: TimestampMs,
    /// Idempotent-producer identity.
    pub producer: ProducerIdentity,
    /// Records in the batch.
    pub record_count: u32,
}

impl BatchHeader {
    /// Parses and bounds-checks the header at the start of `bytes` without
    /// checking the CRC. `bytes` may hold less than the whole batch; the
    /// returned [`BatchHeader::total_bytes`] says how much to read.
    ///
    /// # Errors
    /// [`BatchError::Truncated`] with fewer than [`HEADER_BYTES`];
    /// [`BatchError::UnsupportedMagic`], [`BatchError::BadLength`],
    /// [`BatchError::TooLarge`], [`BatchError::BadBaseOffset`] or another
    /// variant when a field is out of bounds.
    pub fn parse(bytes: &[u8], limits: &BatchLimits) -> Result<BatchHeader, BatchError> {
        if bytes.len() < HEADER_BYTES {
            return Err(BatchError::Truncated {
                needed: HEADER_BYTES,
                available: bytes.len(),
            });
        }
        let magic = bytes[MAGIC_AT];
        if magic != MAGIC {
            return Err(BatchError::UnsupportedMagic(magic));
        }
        let batch_length = read_i32(bytes, BATCH_LENGTH_AT);
        let minimum = (HEADER_BYTES - LOG_OVERHEAD_BYTES) as i32;
        let batch_length = u32::try_from(batch_length)
            .ok()
            .filter(|length| *length as i32 >= minimum)
            .ok_or(BatchError::BadLength(batch_length))?;
        let total_bytes = LOG_OVERHEAD_BYTES as u64 + u64::from(batch_length);
        if total_bytes > limits.batch_bytes_max as u64 {
            return Err(BatchError::TooLarge {
                bytes: total_bytes,
                max: limits.batch_bytes_max,
            });
        }
        let record_count = read_i32(bytes, RECORD_COUNT_AT);
        let record_count =
            u32::try_from(record_count).map_err(|_| BatchError::BadRecordCount(record_count))?;
        let last_offset_delta = read_i32(bytes, LAST_OFFSET_DELTA_AT);
        let last_offset_delta = u32::try_from(last_offset_delta)
            .map_err(|_| BatchError::BadOffsetDelta(last_offset_delta))?;
        // Compaction may remove records, so the delta can exceed the count,
        // but a batch never spans fewer offsets than it has records.
        if record_count > 0 && last_offset_delta < record_count - 1 {
            return Err(BatchError::BadOffsetDelta(last_offset_delta as i32));
        }
        let base_offset = checked_base_offset(read_i64(bytes, BASE_OFFSET_AT), last_offset_delta)?;
        let header = BatchHeader {
            base_offset,
            batch_length,
            partition_leader_epoch: read_i32(bytes, LEADER_EPOCH_AT),
            crc: read_u32(bytes, CRC_AT),
            attributes: read_u16(bytes, ATTRIBUTES_AT),
            last_offset_delta,
            base_timestamp: TimestampMs(read_i64(bytes, BASE_TIMESTAMP_AT)),
            max_timestamp: TimestampMs(read_i64(bytes, MAX_TIMESTAMP_AT)),
            producer: ProducerIdentity {
                producer_id: read_i64(bytes, PRODUCER_ID_AT),
                producer_epoch: read_i16(bytes, PRODUCER_EPOCH_AT),
                base_sequence: read_i32(bytes, BASE_SEQUENCE_AT),
            },
            record_count,
        };
        header.compression()?;
        Ok(header)
    }

    /// Bytes of the whole batch, header included.
    #[must_use]
    pub fn total_bytes(&self) -> usize {
        LOG_OVERHEAD_BYTES + self.batch_length as usize
    }

    /// Offset of the last record.
    #[must_use]
    pub fn last_offset(&self) -> Offset {
        self.base_offset.plus(u64::from(self.last_offset_delta))
    }

    /// Offset right after this batch: where the next batch starts.
    #[must_use]
    pub fn next_offset(&self) -> Offset {
        self.last_offset().plus(1)
    }

    /// Offsets this batch spans.
    #[must_use]
    pub fn offset_count(&self) -> u64 {
        u64::from(self.last_offset_delta) + 1
    }

    /// The leader epoch stamped on the batch, if a leader stamped it.
    #[must_use]
    pub fn leader_epoch(&self) -> Option<LeaderEpoch> {
        u32::try_from(self.partition_leader_epoch)
            .ok()
            .map(LeaderEpoch)
    }

    /// Codec of the records section.
    ///
    /// # Errors
    /// [`BatchError::UnsupportedCompression`] for gzip, snappy or unknown codecs.
    pub fn compression(&self) -> Result<Compression, BatchError> {
        Compression::from_attribute((self.attributes & COMPRESSION_MASK) as u8)
    }

    /// Whether the batch holds control records (transaction markers) rather than data.
    #[must_use]
    pub fn is_control(&self) -> bool {
        self.attributes & CONTROL_BIT != 0
    }

    /// Whether the batch belongs to a transaction.
    #[must_use]
    pub fn is_transactional(&self) -> bool {
        self.attributes & TRANSACTIONAL_BIT != 0
    }

    /// Whether timestamps were set by the broker on append (log append time).
    #[must_use]
    pub fn is_log_append_time(&self) -> bool {
        self.attributes & TIMESTAMP_TYPE_BIT != 0
    }
}

/// The base offset of a header, if the batch's offsets fit: offsets are
/// Kafka's signed 64-bit numbers, and the offset after the batch's last
/// must exist. The CRC does not cover `base_offset` (the leader stamps it
/// in place), so this check is all that stands between a flipped or forged
/// value and offset arithmetic that would overflow.
fn checked_base_offset(raw: i64, last_offset_delta: u32) -> Result<Offset, BatchError> {
    let next_offset_max = i64::MAX - i64::from(last_offset_delta) - 1;
    if !(0..=next_offset_max).contains(&raw) {
        return Err(BatchError::BadBaseOffset(raw));
    }
    Ok(Offset(raw as u64))
}

/// Attribute bits for a batch with these properties.
#[must_use]
pub fn attributes(compression: Compression, is_control: bool) -> u16 {
    let mut bits = u16::from(compression.attribute());
    if is_control {
        bits |= CONTROL_BIT;
    }
    bits
}

/// Stamps the offset of the batch's first record, as the leader does on
/// append. The CRC does not cover this field, so the batch stays valid.
///
/// # Panics
/// If `batch` is shorter than a header: callers stamp validated batches only.
pub fn set_base_offset(batch: &mut [u8], base_offset: Offset) {
    assert!(batch.len() >= HEADER_BYTES, "stamping a truncated batch");
    batch[BASE_OFFSET_AT..BASE_OFFSET_AT + 8].copy_from_slice(&base_offset.0.to_be_bytes());
}

/// Stamps the leader epoch, as the leader does on append. Not covered by the CRC.
///
/// # Panics
/// If `batch` is shorter than a header: callers stamp validated batches only.
pub fn set_leader_epoch(batch: &mut [u8], epoch: LeaderEpoch) {
    assert!(batch.len() >= HEADER_BYTES, "stamping a truncated batch");
    let raw = i32::try_from(epoch.0).expect("leader epoch beyond i32::MAX");
    batch[LEADER_EPOCH_AT..LEADER_EPOCH_AT + 4].copy_from_slice(&raw.to_be_bytes());
}

/// CRC32C over `attributes..end`, the range the header's `crc` field covers.
///
/// # Panics
/// If `batch` is shorter than a header.
#[must_use]
pub fn compute_crc(batch: &[u8]) -> u32 {
    crc32c::crc32c(&batch[ATTRIBUTES_AT..])
}

pub(super) fn read_u16(bytes: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([bytes[at], bytes[at + 1]])
}

pub(super) fn read_i16(bytes: &[u8], at: usize) -> i16 {
    read_u16(bytes, at) as i16
}

pub(super) fn read_u32(bytes: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}

pub(super) fn read_i32(bytes: &[u8], at: usize) -> i32 {
    read_u32(bytes, at) as i32
}

pub(super) fn read_i64(bytes: &[u8], at: usize) -> i64 {
    let mut raw = [0u8; 8];
    raw.copy_from_slice(&bytes[at..at + 8]);
    i64::from_be_bytes(raw)
}
