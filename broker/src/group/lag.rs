//! Consumer lag (DESIGN §8, seed §12): how far a group is behind, in
//! records, bytes and time, and how long before retention deletes what it
//! has not read yet.
//!
//! Bytes are estimated from the partition's average record size (its size
//! over its offset span): exact byte positions of arbitrary offsets would
//! need an index lookup per query. Age is exact: the timestamp of the first
//! unconsumed record, read from the log, on whichever broker leads the
//! partition (a coordinator asks the leader). What cannot be found out
//! (the leader is down) stays unknown: `-1`, and absent from `/metrics`.

use corelog_wire::batch::{self, BatchLimits};
use corelog_wire::message::describe_groups::PartitionLag;
use corelog_wire::types::{Offset, TimestampMs};

use super::host::GroupHost;
use crate::partition::ReplicaSummary;

/// How long before retention may delete the oldest record a group has not
/// consumed, `age_ms` old, with `unconsumed_bytes` from it to the end:
/// the sooner of `retention.ms` minus its age, and the time the
/// partition takes to grow by the `retention.bytes` headroom left at the
/// rate the unconsumed bytes came in (`unconsumed_bytes` over `age_ms`).
/// `None` when neither bound is set.
fn retention_left_ms(
    retention_ms: Option<i64>,
    retention_bytes: Option<u64>,
    age_ms: i64,
    unconsumed_bytes: u64,
) -> Option<i64> {
    let by_time = retention_ms.map(|retention| retention.saturating_sub(age_ms).max(0));
    let by_size = retention_bytes.map(|retention| {
        let headroom = retention.saturating_sub(unconsumed_bytes);
        if headroom == 0 {
            0
        } else if unconsumed_bytes == 0 || age_ms <= 0 {
            // No measurable rate: the size bound gives no deadline yet.
            i64::MAX
        } else {
            let left = u128::from(headroom) * u128::from(age_ms.unsigned_abs())
                / u128::from(unconsumed_bytes);
            i64::try_from(left).unwrap_or(i64::MAX)
        }
    });
    match (by_time, by_size) {
        (Some(time), Some(size)) => Some(time.min(size)),
        (time, size) => time.or(size).filter(|left| *left != i64::MAX),
    }
}

/// Bytes asked for per read of the log while looking for the oldest
/// unconsumed record: a marker is one small batch, so the first read
/// nearly always reaches data.
const AGE_READ_BYTES: usize = 64 * 1024;

/// Reads while looking for the oldest unconsumed record past markers.
const AGE_READS_MAX: usize = 4;

/// Lag of one partition for a group whose next offset is `committed`
/// (`None`: nothing committed; measured from the log start), and whether
/// it could be measured at all (`false`: the leader could not be asked,
/// and the figures are placeholders).
///
/// Records are offsets below the high watermark minus the epoch-start
/// markers among them (control records a consumer skips): a group that
/// read everything has no lag after a leader change.
pub async fn partition_lag(
    host: &dyn GroupHost,
    topic: &str,
    partition: u32,
    committed: Option<(u64, Option<String>)>,
    now: TimestampMs,
) -> (PartitionLag, bool) {
    let mut lag = PartitionLag {
        topic: topic.to_owned(),
        partition,
        committed_offset: committed.as_ref().map_or(-1, |(offset, _)| *offset as i64),
        metadata: committed
            .as_ref()
            .and_then(|(_, metadata)| metadata.clone()),
        log_start_offset: 0,
        high_watermark: 0,
        lag_records: 0,
        lag_bytes: 0,
        oldest_unconsumed_age_ms: -1,
        retention_left_ms: -1,
    };
    let Ok(ReplicaSummary {
        log: summary,
        epoch_starts,
    }) = host.summary(topic, partition).await
    else {
        // The leader cannot be asked: everything stays unknown.
        return (lag, false);
    };
    lag.log_start_offset = summary.log_start.0;
    lag.high_watermark = summary.high_watermark.0;
    let position = committed
        .map_or(summary.log_start.0, |(offset, _)| offset)
        .max(summary.log_start.0);
    let unread = Offset(position)..summary.high_watermark;
    let mut markers = 0u64;
    for start in epoch_starts.iter().filter(|start| unread.contains(start)) {
        markers += marker_records_at(host, topic, partition, *start).await;
    }
    lag.lag_records = summary
        .high_watermark
        .0
        .saturating_sub(position)
        .saturating_sub(markers);
    let span = summary.log_end.0.saturating_sub(summary.log_start.0).max(1);
    lag.lag_bytes = lag.lag_records.saturating_mul(summary.size_bytes / span);
    if lag.lag_records == 0 {
        return (lag, true);
    }
    if let Some(timestamp) = oldest_unconsumed_timestamp(host, topic, partition, unread).await {
        let age = now.0.saturating_sub(timestamp.0).max(0);
        lag.oldest_unconsumed_age_ms = age;
        let config = host
            .snapshot()
            .topics
            .get(topic)
            .map(|view| view.record.config);
        if let Some(left) = config.and_then(|config| {
            retention_left_ms(
                config.retention_ms,
                config.retention_bytes,
                age,
                lag.lag_bytes,
            )
        }) {
            lag.retention_left_ms = left;
        }
    }
    (lag, true)
}

/// Records of the control batch (an epoch-start marker) that starts at
/// `start`, or 0 when the batch there is data or cannot be read (then it
/// counts as records: lag is never understated).
async fn marker_records_at(
    host: &dyn GroupHost,
    topic: &str,
    partition: u32,
    start: Offset,
) -> u64 {
    let Ok(chunks) = host.read(topic, partition, start, 1).await else {
        return 0;
    };
    let limits = BatchLimits::default();
    let first = chunks.first().and_then(|chunk| {
        batch::batches(chunk, &limits)
            .next()?
            .ok()
            .map(|found| found.header)
    });
    match first {
        Some(header) if header.is_control() && header.base_offset == start => {
            u64::from(header.record_count)
        }
        _ => 0,
    }
}

/// Timestamp of the first data record in `unread` (markers skipped), or
/// `None` when the log cannot be read.
async fn oldest_unconsumed_timestamp(
    host: &dyn GroupHost,
    topic: &str,
    partition: u32,
    unread: std::ops::Range<Offset>,
) -> Option<TimestampMs> {
    let limits = BatchLimits::default();
    let mut cursor = unread.start;
    for _ in 0..AGE_READS_MAX {
        if cursor >= unread.end {
            return None;
        }
        let chunks = host
            .read(topic, partition, cursor, AGE_READ_BYTES)
            .await
            .ok()?;
        let mut advanced = false;
        for chunk in &chunks {
            for found in batch::batches(chunk, &limits) {
                let found = found.ok()?;
                let after = Offset(found.header.last_offset().0.saturating_add(1));
                if found.header.is_control() {
                    advanced |= after > cursor;
                    cursor = cursor.max(after);
                    continue;
                }
                let bytes = chunk.slice_ref(found.bytes);
                let first = batch::decode_records(&bytes, &limits)
                    .ok()?
                    .into_iter()
                    .find(|record| record.offset >= unread.start);
                if let Some(record) = first {
                    return Some(record.timestamp);
                }
                advanced |= after > cursor;
                cursor = cursor.max(after);
            }
        }
        if !advanced {
            return None;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::retention_left_ms;

    #[test]
    fn retention_left_is_the_sooner_of_the_time_and_the_size_bound() {
        // Time only: what is left of retention.ms.
        assert_eq!(
            retention_left_ms(Some(60_000), None, 10_000, 500),
            Some(50_000)
        );
        assert_eq!(retention_left_ms(Some(60_000), None, 90_000, 500), Some(0));
        // Size only: 1,000 bytes came in over 10 s, 4,000 bytes of headroom
        // fill in 40 s.
        assert_eq!(
            retention_left_ms(None, Some(5_000), 10_000, 1_000),
            Some(40_000)
        );
        // Both: the sooner.
        assert_eq!(
            retention_left_ms(Some(20_000), Some(5_000), 10_000, 1_000),
            Some(10_000)
        );
        assert_eq!(
            retention_left_ms(Some(90_000), Some(5_000), 10_000, 1_000),
            Some(40_000)
        );
        // Already past the size bound.
        assert_eq!(retention_left_ms(None, Some(500), 10_000, 1_000), Some(0));
        // Unbounded, or no rate to extrapolate.
        assert_eq!(retention_left_ms(None, None, 10_000, 1_000), None);
        assert_eq!(retention_left_ms(None, Some(5_000), 0, 0), None);
    }
}
