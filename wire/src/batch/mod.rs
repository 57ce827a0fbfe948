//! Record batches in the Kafka RecordBatch v2 layout: the unit the producer
//! sends, the broker stores and replicates, and the consumer receives.
//!
//! A batch is validated once on the way in ([`validate`] for the header and
//! CRC, [`validate_records`] for every record) and from then on travels as
//! opaque bytes: the leader stamps its offset and epoch in place
//! ([`set_base_offset`], [`set_leader_epoch`]) without touching the CRC.
//! See [`header`] for the byte layout and [`record`] for records.

mod builder;
mod compression;
pub mod header;
pub mod record;
mod varint;

#[cfg(test)]
mod tests;

use bytes::Bytes;

pub use builder::BatchBuilder;
pub use compression::Compression;
pub use header::{
    BatchHeader, HEADER_BYTES, LOG_OVERHEAD_BYTES, NO_PRODUCER_ID, ProducerIdentity, compute_crc,
    set_base_offset, set_leader_epoch,
};
pub use record::{Header, NewRecord, Record, SCHEMA_HEADER, SchemaVersion};

/// Size bounds applied to every batch before anything is allocated for it (C9).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchLimits {
    /// Largest batch on the wire or on disk, header included.
    pub batch_bytes_max: usize,
    /// Largest records section after decompression.
    pub decompressed_bytes_max: usize,
}

impl Default for BatchLimits {
    /// 4 MiB batches (room for the 1 MiB batches the benchmarks use, with
    /// headroom) and 16 MiB decompressed: a 4× ratio bound on compression.
    fn default() -> Self {
        BatchLimits {
            batch_bytes_max: 4 << 20,
            decompressed_bytes_max: 16 << 20,
        }
    }
}

/// Why a batch was refused. Every variant is a property of the bytes, so a
/// refused batch from the network means a faulty client, and one from disk
/// means corruption.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BatchError {
    /// Fewer bytes than the header or the declared length requires.
    #[error("batch truncated: need {needed} bytes, have {available}")]
    Truncated {
        /// Bytes the header says the batch has.
        needed: usize,
        /// Bytes present.
        available: usize,
    },
    /// More bytes than one batch declares, where exactly one was expected.
    #[error("{extra} bytes after the batch")]
    TrailingBytes {
        /// Bytes past the end of the batch.
        extra: usize,
    },
    /// Magic byte other than 2.
    #[error("unsupported batch magic {0}; only RecordBatch v2 (magic 2) is accepted")]
    UnsupportedMagic(u8),
    /// `batch_length` too small to hold a header.
    #[error("batch length {0} is smaller than a batch header")]
    BadLength(i32),
    /// Batch larger than [`BatchLimits::batch_bytes_max`].
    #[error("batch of {bytes} bytes exceeds the {max}-byte limit; send smaller batches")]
    TooLarge {
        /// Declared size.
        bytes: u64,
        /// The limit.
        max: usize,
    },
    /// Negative record count.
    #[error("record count {0} is invalid")]
    BadRecordCount(i32),
    /// `last_offset_delta` negative or inconsistent with the record count.
    #[error("last offset delta {0} is inconsistent with the record count")]
    BadOffsetDelta(i32),
    /// `base_offset` negative, or so large that the batch's offsets would
    /// pass `i64::MAX`. Not covered by the CRC, so checked by value.
    #[error(
        "base offset {0} is negative or leaves no room for the batch's offsets; the batch is corrupt"
    )]
    BadBaseOffset(i64),
    /// Stored CRC does not match the bytes.
    #[error("batch CRC mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    CrcMismatch {
        /// CRC in the header.
        stored: u32,
        /// CRC of the bytes.
        computed: u32,
    },
    /// Compression codec this broker does not accept (gzip, snappy, unknown).
    #[error("compression codec {0} is not supported; use none, lz4 or zstd")]
    UnsupportedCompression(u8),
    /// The records section does not decompress.
    #[error("records do not decompress: {0}")]
    Compression(String),
    /// The records section inflates past [`BatchLimits::decompressed_bytes_max`].
    #[error("records decompress to more than {max} bytes; send smaller batches")]
    DecompressedTooLarge {
        /// The limit.
        max: usize,
    },
    /// A record inside the batch is malformed.
    #[error("malformed record: {0}")]
    MalformedRecord(&'static str),
    /// A record uses a header name the protocol reserves.
    #[error("header name {0:?} is reserved; set the record's schema field instead")]
    ReservedHeader(&'static str),
    /// A batch with no records was built.
    #[error("a batch needs at least one record")]
    Empty,
}

/// Checks that `bytes` is exactly one well-formed batch with a correct CRC.
///
/// # Errors
/// Any [`BatchError`] describing the first problem found.
pub fn validate(bytes: &[u8], limits: &BatchLimits) -> Result<BatchHeader, BatchError> {
    let header = BatchHeader::parse(bytes, limits)?;
    let total = header.total_bytes();
    if bytes.len() < total {
        return Err(BatchError::Truncated {
            needed: total,
            available: bytes.len(),
        });
    }
    if bytes.len() > total {
        return Err(BatchError::TrailingBytes {
            extra: bytes.len() - total,
        });
    }
    check_crc(bytes, &header)?;
    Ok(header)
}

fn check_crc(batch: &[u8], header: &BatchHeader) -> Result<(), BatchError> {
    let computed = compute_crc(batch);
    if computed != header.crc {
        return Err(BatchError::CrcMismatch {
            stored: header.crc,
            computed,
        });
    }
    Ok(())
}

/// Checks every record of a batch already accepted by [`validate`]:
/// decompresses within the bound and walks each record's fields. A broker
/// runs this on produce so that nothing malformed is ever stored.
///
/// # Errors
/// Any [`BatchError`] describing the first problem found.
pub fn validate_records(
    batch: &[u8],
    header: &BatchHeader,
    limits: &BatchLimits,
) -> Result<(), BatchError> {
    let section = records_section(batch, header, limits)?;
    record::walk_records(
        &section,
        header.record_count,
        header.last_offset_delta,
        |span| record::check_headers(&section, &span),
    )
}

fn records_section<'a>(
    batch: &'a [u8],
    header: &BatchHeader,
    limits: &BatchLimits,
) -> Result<std::borrow::Cow<'a, [u8]>, BatchError> {
    let raw = &batch[HEADER_BYTES..header.total_bytes()];
    match header.compression()? {
        Compression::None => Ok(std::borrow::Cow::Borrowed(raw)),
        codec => codec
            .decompress(raw, limits.decompressed_bytes_max)
            .map(std::borrow::Cow::Owned),
    }
}

/// Decodes every record of one batch (validated or not: the CRC and every
/// field are checked here).
///
/// # Errors
/// Any [`BatchError`] describing the first problem found.
pub fn decode_records(batch: &Bytes, limits: &BatchLimits) -> Result<Vec<Record>, BatchError> {
    decode_batch(batch, limits).map(|decoded| decoded.records)
}

/// One batch decoded by [`decode_batch`].
#[derive(Clone, Debug)]
pub struct DecodedBatch {
    /// The batch's header (CRC-checked).
    pub header: BatchHeader,
    /// Its records, in offset order.
    pub records: Vec<Record>,
    /// Bytes decompression produced, which the records hold on to: 0 for
    /// an uncompressed batch, whose records are slices of `batch`. What a
    /// reader counts against a decompression budget.
    pub inflated_bytes: usize,
}

/// [`decode_records`], with the header and how many bytes decompression
/// produced.
///
/// # Errors
/// Any [`BatchError`] describing the first problem found.
pub fn decode_batch(batch: &Bytes, limits: &BatchLimits) -> Result<DecodedBatch, BatchError> {
    let header = validate(batch, limits)?;
    let (section, inflated_bytes) = match records_section(batch, &header, limits)? {
        std::borrow::Cow::Borrowed(_) => (batch.slice(HEADER_BYTES..header.total_bytes()), 0),
        std::borrow::Cow::Owned(plain) => {
            let inflated_bytes = plain.len();
            (Bytes::from(plain), inflated_bytes)
        }
    };
    // Every record takes at least 7 bytes, so this bounds the allocation by the input.
    let capacity = (header.record_count as usize).min(section.len() / 7);
    let mut records = Vec::with_capacity(capacity);
    record::walk_records(
        &section,
        header.record_count,
        header.last_offset_delta,
        |span| {
            records.push(record::record_from_span(
                &section,
                span,
                header.base_offset,
                header.base_timestamp,
            )?);
            Ok(())
        },
    )?;
    Ok(DecodedBatch {
        header,
        records,
        inflated_bytes,
    })
}

/// Iterates over consecutive batches in a buffer, such as a segment file or
/// a fetch response, yielding each batch's position, header and bytes.
/// Checks the structure of each, and its CRC unless made by
/// [`batches_trusted`]. Stops after the first error, which it yields.
#[derive(Debug)]
pub struct Batches<'a> {
    bytes: &'a [u8],
    position: usize,
    limits: BatchLimits,
    verify_crc: bool,
    failed: bool,
}

/// Iterates over the batches in `bytes`; see [`Batches`].
#[must_use]
pub fn batches<'a>(bytes: &'a [u8], limits: &BatchLimits) -> Batches<'a> {
    Batches {
        bytes,
        position: 0,
        limits: *limits,
        verify_crc: true,
        failed: false,
    }
}

/// Iterates over the batches in `bytes` like [`batches`], checking each
/// header and length but not the CRC: a pass over every byte, for bytes
/// whose CRC is checked anyway, once, elsewhere (a process's own batches,
/// validated when they arrived and kept in memory since; a push whose
/// batches are validated whole right after they are cut apart).
#[must_use]
pub fn batches_trusted<'a>(bytes: &'a [u8], limits: &BatchLimits) -> Batches<'a> {
    Batches {
        verify_crc: false,
        ..batches(bytes, limits)
    }
}

impl<'a> Batches<'a> {
    /// Byte position of the next batch: after iteration ends cleanly, the
    /// length of the valid prefix.
    #[must_use]
    pub fn position(&self) -> usize {
        self.position
    }
}

/// One batch found by [`Batches`].
#[derive(Clone, Copy, Debug)]
pub struct BatchAt<'a> {
    /// Byte position of the batch in the buffer.
    pub position: usize,
    /// Its parsed header (CRC-checked unless iterated by
    /// [`batches_trusted`]).
    pub header: BatchHeader,
    /// The whole batch.
    pub bytes: &'a [u8],
}

impl<'a> Iterator for Batches<'a> {
    type Item = Result<BatchAt<'a>, BatchError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.position >= self.bytes.len() {
            return None;
        }
        let rest = &self.bytes[self.position..];
        let result = BatchHeader::parse(rest, &self.limits).and_then(|header| {
            let total = header.total_bytes();
            if rest.len() < total {
                return Err(BatchError::Truncated {
                    needed: total,
                    available: rest.len(),
                });
            }
            let bytes = &rest[..total];
            if self.verify_crc {
                check_crc(bytes, &header)?;
            }
            Ok(BatchAt {
                position: self.position,
                header,
                bytes,
            })
        });
        match &result {
            Ok(found) => self.position += found.bytes.len(),
            Err(_) => self.failed = true,
        }
        Some(result)
    }
}
