//! What the broker says about a position outside a partition's log: the
//! range it holds and the deletions that made the gap ([`GapInfo`]).
//!
//! Its own module because two layers carry it: the consumer, in
//! [`crate::Notice::OffsetReset`] when it moves past a gap, and the error
//! type, in [`crate::ClientError::OffsetOutOfRange`] when it may not. The
//! error type depends on nothing above it, so the type lives below both.

use std::fmt;

use corelog_wire::types::{Offset, TimestampMs};
use serde::Serialize;

/// Why records were deleted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum DeletionCause {
    /// Older than the topic's retention time.
    RetentionTime,
    /// Over the topic's retention size.
    RetentionSize,
    /// Replaced by a newer record with the same key.
    Compaction,
    /// Uncommitted records removed when a replica's log was truncated.
    Truncation,
    /// Deleted by an administrator.
    Admin,
}

impl DeletionCause {
    /// The cause's name, as the CLI prints it.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            DeletionCause::RetentionTime => "retention-time",
            DeletionCause::RetentionSize => "retention-size",
            DeletionCause::Compaction => "compaction",
            DeletionCause::Truncation => "truncation",
            DeletionCause::Admin => "admin",
        }
    }
}

/// A deleted offset range.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeletedRange {
    /// First deleted offset.
    pub start_offset: Offset,
    /// One past the last deleted offset.
    pub end_offset: Offset,
    /// Bytes deleted.
    pub bytes: u64,
    /// Records deleted.
    pub record_count: u64,
    /// Why.
    pub cause: DeletionCause,
    /// When, in ms since the Unix epoch.
    pub deleted_at: TimestampMs,
}

/// What the broker said about a position outside the log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GapInfo {
    /// The offset asked for.
    pub requested_offset: Offset,
    /// The first offset still stored.
    pub log_start_offset: Offset,
    /// The partition's high watermark.
    pub high_watermark: Offset,
    /// Deletions between the two, as far as the broker remembers them.
    pub deleted: Vec<DeletedRange>,
}

impl GapInfo {
    /// Whether the offset asked for is past the end of the log (no record
    /// has it yet), rather than deleted from its start.
    #[must_use]
    pub fn is_past_end(&self) -> bool {
        self.requested_offset > self.high_watermark
    }
}

impl fmt::Display for GapInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_past_end() {
            return write!(
                f,
                "offset {} is past the end of the log: the next record will be offset {} (the log holds {}..{})",
                self.requested_offset,
                self.high_watermark,
                self.log_start_offset,
                self.high_watermark
            );
        }
        write!(
            f,
            "offset {} is out of range: the log holds {}..{}",
            self.requested_offset, self.log_start_offset, self.high_watermark
        )?;
        for range in &self.deleted {
            write!(
                f,
                "; offsets {}..{} ({} records, {} bytes) were deleted by {} at {} ms",
                range.start_offset,
                range.end_offset,
                range.record_count,
                range.bytes,
                range.cause.name(),
                range.deleted_at
            )?;
        }
        if self.requested_offset < self.log_start_offset {
            write!(
                f,
                "; resume from offset {} (the log start) to read on",
                self.log_start_offset
            )
        } else {
            write!(f, "; seek to an offset in range")
        }
    }
}
