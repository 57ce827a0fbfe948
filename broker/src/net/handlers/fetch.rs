//! Fetch with long polling (C4): committed batches only, at most
//! `max_bytes` in all and `partition_max_bytes` per partition (at least one
//! batch, so a reader always progresses), waiting up to `max_wait_ms` until
//! `min_bytes` are available.
//!
//! Waiting is race-free across shards: before each read pass the handler
//! listens on every requested partition's data signal (notified by the
//! owning shard whenever its committed end moves), so a commit between the
//! read and the wait still wakes it.

use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use corelog_controller::acls::Operation;
use corelog_wire::batch::{self, BatchLimits};
use corelog_wire::error::ErrorCode;
use corelog_wire::message::decode_request;
use corelog_wire::message::fetch::{
    DeletedRange, DeletionCause as WireCause, FetchPartitionResponse, FetchRequest, FetchResponse,
    FetchTopicResponse, Gap,
};
use corelog_wire::types::{LeaderEpoch, Offset};
use futures::future::{Either, join_all, select, select_all};

use super::Caller;
use crate::api::Reply;
use crate::api::{refused, unencodable};
use crate::metadata::ShardId;
use crate::net::quota::Kind;
use crate::net::throttle::{Throttle, millis};
use crate::partition::{GapInfo, PartitionError};
use crate::runtime::shard::Shard;
use corelog_storage::{DeletionCause, ReadOutcome};
use corelog_wire::types::PartitionId;

/// One requested partition, resolved.
struct Wanted {
    topic: String,
    partition: u32,
    offset: Offset,
    max_bytes: usize,
    target: Result<(PartitionId, ShardId), PartitionError>,
}

pub(super) async fn fetch(
    shard: &Rc<Shard>,
    body: &[u8],
    caller: &Caller,
) -> Result<Reply, ErrorCode> {
    let access = &caller.access;
    let (request, _) = decode_request::<FetchRequest>(body).map_err(refused)?;
    let max_wait = Duration::from_millis(u64::from(
        request
            .max_wait_ms
            .to_native()
            .min(shard.config.fetch_max_wait_ms),
    ));
    let max_bytes = request
        .max_bytes
        .to_native()
        .min(shard.config.fetch_max_bytes) as usize;
    let min_bytes = request.min_bytes.to_native() as usize;
    let deadline = Instant::now() + max_wait;
    let wanted: Vec<Wanted> = request
        .topics
        .iter()
        .flat_map(|topic| {
            topic.partitions.iter().map(move |entry| {
                let partition = entry.partition.to_native();
                Wanted {
                    topic: topic.name.to_string(),
                    partition,
                    offset: Offset(entry.fetch_offset.to_native()),
                    max_bytes: (entry.partition_max_bytes.to_native() as usize).min(max_bytes),
                    target: access.topic(Operation::Fetch, &topic.name).and_then(|()| {
                        let epoch = entry
                            .current_leader_epoch
                            .as_ref()
                            .map(|epoch| LeaderEpoch(epoch.to_native()));
                        shard.locate_at_epoch(&topic.name, partition, epoch)
                    }),
                }
            })
        })
        .collect();
    loop {
        let listeners: Vec<_> = {
            let snapshot = shard.snapshot();
            wanted
                .iter()
                .filter_map(|entry| snapshot.partition(&entry.topic, entry.partition))
                .map(|(_, view)| view.data_signal.listen())
                .collect()
        };
        let results = read_all(shard, &wanted).await;
        let fetched: usize = results
            .iter()
            .filter_map(|result| result.as_ref().ok())
            .map(ReadOutcome::byte_len)
            .sum();
        let any_error = results.iter().any(Result::is_err);
        let now = Instant::now();
        if fetched >= min_bytes.max(1) || any_error || now >= deadline || listeners.is_empty() {
            return respond(shard, &wanted, results, max_bytes, &caller.throttle);
        }
        let timeout = Box::pin(glommio::timer::sleep(deadline - now));
        match select(select_all(listeners), timeout).await {
            Either::Left(_) | Either::Right(_) => {}
        }
    }
}

async fn read_all(
    shard: &Rc<Shard>,
    wanted: &[Wanted],
) -> Vec<Result<ReadOutcome, PartitionError>> {
    join_all(wanted.iter().map(|entry| async move {
        let (id, owner) = entry.target.clone()?;
        shard.read(id, owner, entry.offset, entry.max_bytes).await
    }))
    .await
}

fn respond(
    shard: &Rc<Shard>,
    wanted: &[Wanted],
    results: Vec<Result<ReadOutcome, PartitionError>>,
    max_bytes: usize,
    throttle: &Throttle,
) -> Result<Reply, ErrorCode> {
    let mut topics: Vec<FetchTopicResponse> = Vec::new();
    let mut raw: Vec<Bytes> = Vec::new();
    let mut total = 0usize;
    for (entry, result) in wanted.iter().zip(results) {
        let response = match result {
            Ok(read) => {
                let bytes = read.byte_len();
                // Whole partitions only, in request order, within max_bytes;
                // the first non-empty one always goes, so readers progress.
                let fits = total == 0 || total + bytes <= max_bytes;
                let (records_len, next_offset) = if fits {
                    total += bytes;
                    count_out(shard, &read.chunks);
                    raw.extend(read.chunks);
                    (bytes as u32, read.next_offset.0)
                } else {
                    (0, entry.offset.0)
                };
                FetchPartitionResponse {
                    partition: entry.partition,
                    error_code: ErrorCode::None.code(),
                    error_message: None,
                    high_watermark: read.readable_end.0,
                    log_start_offset: read.log_start.0,
                    next_offset,
                    records_len,
                    gap: None,
                }
            }
            Err(error) => {
                shard.metrics.error(error.code);
                // Known with OFFSET_OUT_OF_RANGE, so the reader learns where
                // the log is; 0 with errors that say nothing about it.
                let (log_start, high_watermark) = match (&error.bounds, &error.gap) {
                    (Some(bounds), _) => (bounds.log_start.0, bounds.high_watermark.0),
                    (None, Some(gap)) => (gap.log_start.0, 0),
                    (None, None) => (0, 0),
                };
                FetchPartitionResponse {
                    partition: entry.partition,
                    error_code: error.code.code(),
                    error_message: Some(error.message.clone()),
                    high_watermark,
                    log_start_offset: log_start,
                    next_offset: entry.offset.0,
                    records_len: 0,
                    gap: error.gap.as_ref().map(wire_gap),
                }
            }
        };
        match topics.last_mut() {
            Some(last) if last.name == entry.topic => last.partitions.push(response),
            _ => topics.push(FetchTopicResponse {
                name: entry.topic.clone(),
                partitions: vec![response],
            }),
        }
    }
    // Metered by what goes out; the throttle goes into this response.
    let throttle = throttle.take(&shard.metrics, Kind::Fetch, total as f64);
    Reply::message(
        &FetchResponse {
            topics,
            throttle_ms: millis(throttle),
        },
        raw,
    )
    .map_err(unencodable)
}

fn count_out(shard: &Rc<Shard>, chunks: &[Bytes]) {
    let limits = BatchLimits::default();
    let mut records = 0u64;
    for chunk in chunks {
        for found in batch::batches(chunk, &limits).flatten() {
            records += u64::from(found.header.record_count);
        }
    }
    shard.metrics.records_out.inc_by(records);
    shard
        .metrics
        .bytes_out
        .inc_by(chunks.iter().map(|chunk| chunk.len() as u64).sum());
}

fn wire_gap(gap: &GapInfo) -> Gap {
    Gap {
        requested_offset: gap.requested.0,
        log_start_offset: gap.log_start.0,
        deleted: gap
            .deleted
            .iter()
            .map(|range| DeletedRange {
                start_offset: range.start_offset.0,
                end_offset: range.end_offset.0,
                bytes: range.bytes,
                record_count: range.record_count,
                cause: match range.cause {
                    DeletionCause::RetentionTime => WireCause::RetentionTime,
                    DeletionCause::RetentionSize => WireCause::RetentionSize,
                    DeletionCause::Compaction => WireCause::Compaction,
                    DeletionCause::Truncation => WireCause::Truncation,
                    DeletionCause::Admin => WireCause::Admin,
                },
                deleted_at_ms: range.deleted_at.0,
            })
            .collect(),
    }
}
