//! Consumer lag (DESIGN §8, seed §12): how far a group is behind, in
//! records, bytes and time, and how long before retention deletes what it
//! has not read yet.
//!
//! Bytes are estimated from the partition's average record size (its size
//! over its offset span): exact byte positions of arbitrary offsets would
//! need an index lookup per query. Age is exact: the timestamp of the first
//! unconsumed record, read from the log.

use corelog_wire::batch::{self, BatchLimits};
use corelog_wire::message::describe_groups::PartitionLag;
use corelog_wire::types::{Offset, TimestampMs};

use super::host::GroupHost;
use crate::partition::OffsetQuery;

/// Lag of one partition for a group whose next offset is `committed`
/// (`None`: nothing committed; measured from the log start).
pub async fn partition_lag(
    host: &dyn GroupHost,
    topic: &str,
    partition: u32,
    committed: Option<(u64, Option<String>)>,
    now: TimestampMs,
) -> PartitionLag {
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
    let summary = match host.local_summary(topic, partition).await {
        Ok(summary) => summary,
        // Led by another broker: its bounds from the leader; bytes and age
        // would need reads there, left unknown.
        Err(_) => return remote_lag(host, lag, committed).await,
    };
    lag.log_start_offset = summary.log_start.0;
    lag.high_watermark = summary.high_watermark.0;
    let position = committed
        .map_or(summary.log_start.0, |(offset, _)| offset)
        .max(summary.log_start.0);
    lag.lag_records = summary.high_watermark.0.saturating_sub(position);
    let span = summary.log_end.0.saturating_sub(summary.log_start.0).max(1);
    lag.lag_bytes = lag.lag_records.saturating_mul(summary.size_bytes / span);
    if lag.lag_records == 0 {
        return lag;
    }
    if let Ok(read) = host.local_read(topic, partition, Offset(position), 1).await {
        let limits = BatchLimits::default();
        let first = read.chunks.first().and_then(|chunk| {
            let found = batch::batches(chunk, &limits).next()?.ok()?;
            let bytes = chunk.slice_ref(found.bytes);
            batch::decode_records(&bytes, &limits)
                .ok()?
                .into_iter()
                .find(|record| record.offset.0 >= position)
                .map(|record| record.timestamp)
        });
        if let Some(timestamp) = first {
            let age = now.0.saturating_sub(timestamp.0).max(0);
            lag.oldest_unconsumed_age_ms = age;
            let retention = host
                .snapshot()
                .topics
                .get(topic)
                .and_then(|view| view.record.config.retention_ms);
            if let Some(retention) = retention {
                lag.retention_left_ms = retention.saturating_sub(age).max(0);
            }
        }
    }
    lag
}

/// Lag in records of a partition another broker leads.
async fn remote_lag(
    host: &dyn GroupHost,
    mut lag: PartitionLag,
    committed: Option<(u64, Option<String>)>,
) -> PartitionLag {
    let bound = |query| host.offset(&lag.topic, lag.partition, query);
    let (Ok(Some((log_start, _))), Ok(Some((high_watermark, _)))) = (
        bound(OffsetQuery::Earliest).await,
        bound(OffsetQuery::Latest).await,
    ) else {
        return lag;
    };
    lag.log_start_offset = log_start.0;
    lag.high_watermark = high_watermark.0;
    let position = committed
        .map_or(log_start.0, |(offset, _)| offset)
        .max(log_start.0);
    lag.lag_records = high_watermark.0.saturating_sub(position);
    lag
}
