//! Which segment retention deletes next: a pure decision over segment
//! summaries, so the policy is testable without files.
//!
//! Only closed segments are candidates, oldest first, and only a prefix of
//! the log is ever deleted, so the log stays contiguous from its start.
//! Nothing is deleted to make room for writes: a full disk refuses appends
//! instead (C7).

use corelog_wire::types::TimestampMs;

use super::deletion_ledger::DeletionCause;
use super::index::SegmentSummary;

/// How long and how much a partition keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetentionPolicy {
    /// Delete a closed segment once its newest record is older than this.
    /// `None` keeps data forever by time.
    pub retention_ms: Option<i64>,
    /// Delete the oldest closed segments while the log would still hold at
    /// least this many bytes without them. `None` sets no size bound.
    pub retention_bytes: Option<u64>,
}

/// Seven days, the seed's replay window.
pub const DEFAULT_RETENTION_MS: i64 = 7 * 24 * 60 * 60 * 1000;

impl Default for RetentionPolicy {
    fn default() -> Self {
        RetentionPolicy {
            retention_ms: Some(DEFAULT_RETENTION_MS),
            retention_bytes: None,
        }
    }
}

/// Whether the oldest closed segment is due for deletion, and why.
///
/// `closed` lists the closed segments oldest first (the active segment is
/// never a candidate); `total_bytes` counts every segment, active included.
#[must_use]
pub fn next_deletion(
    closed: &[SegmentSummary],
    total_bytes: u64,
    policy: &RetentionPolicy,
    now: TimestampMs,
) -> Option<DeletionCause> {
    let oldest = closed.first()?;
    if let Some(retention_ms) = policy.retention_ms
        && oldest.max_timestamp.0 < now.0.saturating_sub(retention_ms)
    {
        return Some(DeletionCause::RetentionTime);
    }
    if let Some(retention_bytes) = policy.retention_bytes
        && total_bytes.saturating_sub(oldest.size_bytes) >= retention_bytes
    {
        return Some(DeletionCause::RetentionSize);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use corelog_wire::types::Offset;

    fn segment(base: u64, size_bytes: u64, max_timestamp: i64) -> SegmentSummary {
        SegmentSummary {
            base_offset: Offset(base),
            size_bytes,
            next_offset: Offset(base + 10),
            max_timestamp: TimestampMs(max_timestamp),
            record_count: 10,
        }
    }

    #[test]
    fn time_retention_deletes_only_segments_wholly_older_than_the_window() {
        let policy = RetentionPolicy {
            retention_ms: Some(1_000),
            retention_bytes: None,
        };
        let closed = [segment(0, 100, 5_000), segment(10, 100, 9_000)];
        assert_eq!(
            next_deletion(&closed, 300, &policy, TimestampMs(6_000)),
            None
        );
        assert_eq!(
            next_deletion(&closed, 300, &policy, TimestampMs(6_001)),
            Some(DeletionCause::RetentionTime)
        );
    }

    #[test]
    fn size_retention_keeps_at_least_the_bound() {
        let policy = RetentionPolicy {
            retention_ms: None,
            retention_bytes: Some(250),
        };
        let closed = [segment(0, 100, 0), segment(10, 100, 0)];
        // 300 bytes in all: deleting the first leaves 200 < 250, so keep it.
        assert_eq!(next_deletion(&closed, 300, &policy, TimestampMs(0)), None);
        assert_eq!(
            next_deletion(&closed, 350, &policy, TimestampMs(0)),
            Some(DeletionCause::RetentionSize)
        );
    }

    #[test]
    fn the_active_segment_alone_is_never_deleted() {
        let policy = RetentionPolicy {
            retention_ms: Some(0),
            retention_bytes: Some(0),
        };
        assert_eq!(
            next_deletion(&[], 1 << 30, &policy, TimestampMs(i64::MAX)),
            None
        );
    }
}
