//! Encoding batches: what producers (and tests) use to make valid bytes.

use bytes::Bytes;

use super::header::{
    ATTRIBUTES_AT, BASE_OFFSET_AT, BASE_SEQUENCE_AT, BASE_TIMESTAMP_AT, BATCH_LENGTH_AT, CRC_AT,
    HEADER_BYTES, LAST_OFFSET_DELTA_AT, LEADER_EPOCH_AT, LOG_OVERHEAD_BYTES, MAGIC, MAGIC_AT,
    MAX_TIMESTAMP_AT, NO_LEADER_EPOCH, PRODUCER_EPOCH_AT, PRODUCER_ID_AT, ProducerIdentity,
    RECORD_COUNT_AT, attributes, compute_crc,
};
use super::record::{NewRecord, encode_record};
use super::{BatchError, Compression};
use crate::types::TimestampMs;

/// Accumulates records and encodes them as one batch with base offset 0
/// and no leader epoch; the leader stamps both on append.
///
/// Records are encoded as they are pushed, behind room left for the
/// header: an uncompressed batch is built in place, without a copy.
#[derive(Debug)]
pub struct BatchBuilder {
    compression: Compression,
    producer: ProducerIdentity,
    is_control: bool,
    /// Once a record is pushed: `HEADER_BYTES` of room for the header,
    /// then the records section. Empty (unallocated) before.
    buffer: Vec<u8>,
    /// Bytes to allocate for `buffer` on the first push.
    capacity: usize,
    record_count: u32,
    base_timestamp: Option<TimestampMs>,
    max_timestamp: TimestampMs,
}

impl BatchBuilder {
    /// An empty batch whose records will be compressed with `compression`.
    #[must_use]
    pub fn new(compression: Compression) -> Self {
        Self::with_capacity(compression, 0)
    }

    /// An empty batch with room for `bytes` of header and records before
    /// its buffer grows.
    #[must_use]
    pub fn with_capacity(compression: Compression, bytes: usize) -> Self {
        BatchBuilder {
            compression,
            producer: ProducerIdentity::NONE,
            is_control: false,
            buffer: Vec::new(),
            capacity: bytes,
            record_count: 0,
            base_timestamp: None,
            max_timestamp: TimestampMs(i64::MIN),
        }
    }

    /// Sets the idempotent-producer identity (C5).
    #[must_use]
    pub fn producer(mut self, producer: ProducerIdentity) -> Self {
        self.producer = producer;
        self
    }

    /// Marks the batch as holding control records.
    #[must_use]
    pub fn control(mut self, is_control: bool) -> Self {
        self.is_control = is_control;
        self
    }

    /// Adds a record; its offset delta is its position in the batch.
    ///
    /// # Errors
    /// [`BatchError::ReservedHeader`] if a header is named `schema`.
    pub fn push(&mut self, record: &NewRecord) -> Result<(), BatchError> {
        let base_timestamp = self.base_timestamp.unwrap_or(record.timestamp);
        let offset_delta = i32::try_from(self.record_count)
            .map_err(|_| BatchError::MalformedRecord("more than i32::MAX records"))?;
        if self.buffer.is_empty() {
            self.buffer.reserve(self.capacity.max(HEADER_BYTES));
            self.buffer.resize(HEADER_BYTES, 0);
        }
        encode_record(&mut self.buffer, record, base_timestamp, offset_delta)?;
        self.base_timestamp = Some(base_timestamp);
        self.record_count += 1;
        self.max_timestamp = self.max_timestamp.max(record.timestamp);
        Ok(())
    }

    /// Records added so far.
    #[must_use]
    pub fn record_count(&self) -> u32 {
        self.record_count
    }

    /// Bytes of the batch if built now without compression.
    #[must_use]
    pub fn uncompressed_bytes(&self) -> usize {
        self.buffer.len().max(HEADER_BYTES)
    }

    /// Encodes the batch.
    ///
    /// # Errors
    /// [`BatchError::Empty`] without records; [`BatchError::Compression`] if
    /// the codec fails.
    pub fn build(self) -> Result<Bytes, BatchError> {
        let base_timestamp = self.base_timestamp.ok_or(BatchError::Empty)?;
        assert!(self.record_count > 0, "a base timestamp without records");
        let mut batch = match self.compression {
            Compression::None => self.buffer,
            codec => {
                let section = codec.compress(&self.buffer[HEADER_BYTES..])?;
                let mut batch = Vec::with_capacity(HEADER_BYTES + section.len());
                batch.resize(HEADER_BYTES, 0);
                batch.extend_from_slice(&section);
                batch
            }
        };
        let batch_length = i32::try_from(batch.len() - LOG_OVERHEAD_BYTES)
            .map_err(|_| BatchError::MalformedRecord("batch longer than 2 GiB"))?;
        let put = |batch: &mut Vec<u8>, at: usize, bytes: &[u8]| {
            batch[at..at + bytes.len()].copy_from_slice(bytes);
        };
        put(&mut batch, BASE_OFFSET_AT, &0i64.to_be_bytes());
        put(&mut batch, BATCH_LENGTH_AT, &batch_length.to_be_bytes());
        put(&mut batch, LEADER_EPOCH_AT, &NO_LEADER_EPOCH.to_be_bytes());
        batch[MAGIC_AT] = MAGIC;
        put(
            &mut batch,
            ATTRIBUTES_AT,
            &attributes(self.compression, self.is_control).to_be_bytes(),
        );
        let last_offset_delta = (self.record_count - 1) as i32;
        put(
            &mut batch,
            LAST_OFFSET_DELTA_AT,
            &last_offset_delta.to_be_bytes(),
        );
        put(
            &mut batch,
            BASE_TIMESTAMP_AT,
            &base_timestamp.0.to_be_bytes(),
        );
        put(
            &mut batch,
            MAX_TIMESTAMP_AT,
            &self.max_timestamp.0.to_be_bytes(),
        );
        put(
            &mut batch,
            PRODUCER_ID_AT,
            &self.producer.producer_id.to_be_bytes(),
        );
        put(
            &mut batch,
            PRODUCER_EPOCH_AT,
            &self.producer.producer_epoch.to_be_bytes(),
        );
        put(
            &mut batch,
            BASE_SEQUENCE_AT,
            &self.producer.base_sequence.to_be_bytes(),
        );
        put(
            &mut batch,
            RECORD_COUNT_AT,
            &(self.record_count as i32).to_be_bytes(),
        );
        let crc = compute_crc(&batch);
        put(&mut batch, CRC_AT, &crc.to_be_bytes());
        Ok(Bytes::from(batch))
    }
}
