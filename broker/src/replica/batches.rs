//! Record batches as replication sees them on the leader: split from
//! stored bytes into [`Batch`]es (place, epoch, bytes) for its pushes, and
//! the epoch-start marker. A received push's batches are cut apart and
//! checked by `corelog_replication::wire` (`Push::from_wire`).

use bytes::{Bytes, BytesMut};
use corelog_replication::Batch;
use corelog_wire::batch::{self, BatchBuilder, BatchLimits, Compression, NewRecord};
use corelog_wire::types::{LeaderEpoch, Offset, TimestampMs};

use corelog_storage::{PlacedBatch, StorageError, ValidBatch};

/// Key of the epoch-start marker's one record (its value is the epoch, as a
/// big-endian u32). Consumers skip control batches.
const MARKER_KEY: &[u8] = b"corelog.leader-epoch-start";

/// Splits whole stored batches into [`Batch`]es, each with its place and
/// epoch from its header and its bytes sliced (not copied) from `chunks`,
/// checking each batch's CRC: for bytes read from disk.
///
/// # Errors
/// [`StorageError::Corrupt`] for bytes that are not valid batches or a batch
/// without a leader epoch: every batch of a replicated log is stamped.
pub fn split(chunks: &[Bytes], limits: &BatchLimits) -> Result<Vec<Batch>, StorageError> {
    split_with(chunks, limits, batch::batches)
}

/// [`split`] without the CRC check, for this replica's own batches from
/// its tail cache (validated when they were appended).
///
/// # Errors
/// As [`split`], but for the CRC.
pub fn split_trusted(chunks: &[Bytes], limits: &BatchLimits) -> Result<Vec<Batch>, StorageError> {
    split_with(chunks, limits, batch::batches_trusted)
}

fn split_with<'a>(
    chunks: &'a [Bytes],
    limits: &BatchLimits,
    iterate: fn(&'a [u8], &BatchLimits) -> batch::Batches<'a>,
) -> Result<Vec<Batch>, StorageError> {
    let corrupt = |reason: String| StorageError::Corrupt {
        path: std::path::PathBuf::from("<read>"),
        position: 0,
        reason,
    };
    let mut out = Vec::new();
    for chunk in chunks {
        for found in iterate(chunk, limits) {
            let found = found.map_err(|error| corrupt(error.to_string()))?;
            let epoch = found.header.leader_epoch().ok_or_else(|| {
                corrupt(format!(
                    "batch at offset {} has no leader epoch",
                    found.header.base_offset
                ))
            })?;
            out.push(Batch {
                base: found.header.base_offset,
                last: found.header.last_offset(),
                epoch,
                bytes: chunk.slice_ref(found.bytes),
            });
        }
    }
    Ok(out)
}

/// The batches of a read from `start` that a push may carry: the
/// contiguous run beginning exactly at `start`. A read returns the batch
/// containing `start` first; if that batch begins before `start` (a probe
/// point inside one of this log's batches, which only a follower with a
/// different, divergent batch there can cause) the push carries nothing and
/// the follower's mismatch answer moves the point back.
#[must_use]
pub fn from_start(batches: Vec<Batch>, start: Offset) -> Vec<Batch> {
    match batches.first() {
        Some(first) if first.base == start => {}
        _ => return Vec::new(),
    }
    let mut expected = start;
    let mut out = Vec::with_capacity(batches.len());
    for batch in batches {
        if batch.base != expected {
            break;
        }
        expected = batch.end();
        out.push(batch);
    }
    out
}

/// A pushed batch as the log takes it: its own bytes, not copied, and
/// its CRC not computed again (`Push::from_wire` checked it).
///
/// # Errors
/// [`StorageError::InvalidBatch`] if the bytes are not one batch.
pub fn placed(batch: &Batch, limits: &BatchLimits) -> Result<PlacedBatch, StorageError> {
    PlacedBatch::of_checked_push(batch.bytes.clone(), limits)
}

/// The epoch-start marker of `epoch`: a control batch of one record,
/// stamped with the epoch, ready for the log to place.
///
/// # Errors
/// [`StorageError::InvalidBatch`] if the batch does not fit `limits` (a
/// configuration whose batch limit is below a hundred bytes).
pub fn marker(
    epoch: LeaderEpoch,
    now: TimestampMs,
    limits: &BatchLimits,
) -> Result<ValidBatch, StorageError> {
    let mut builder = BatchBuilder::new(Compression::None).control(true);
    builder.push(&NewRecord {
        key: Some(Bytes::from_static(MARKER_KEY)),
        value: Some(Bytes::copy_from_slice(&epoch.0.to_be_bytes())),
        timestamp: now,
        ..NewRecord::default()
    })?;
    let bytes = builder.build()?;
    let mut marker = ValidBatch::check(BytesMut::from(&bytes[..]), limits)?;
    marker.set_leader_epoch(epoch);
    Ok(marker)
}
