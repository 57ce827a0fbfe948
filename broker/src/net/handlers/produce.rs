//! Produce: one batch per partition, each appended on its owning shard and
//! answered once durable (C1): on a single node after the fsync that covers
//! it; for a replicated partition under the request's `acks` — `quorum`
//! (default) once durable on a majority, `leader` once durable on the
//! leader — within the request's timeout.

use std::ops::Range;
use std::rc::Rc;
use std::time::{Duration, Instant};

use corelog_controller::acls::Operation;
use corelog_wire::batch::{BatchHeader, BatchLimits};
use corelog_wire::error::ErrorCode;
use corelog_wire::message::decode_request;
use corelog_wire::message::produce::{
    Acks, ArchivedAcks, ProducePartitionResponse, ProduceRequest, ProduceResponse,
    ProduceTopicResponse, partition_records,
};
use futures::future::{Either, join_all, ready};

use super::Caller;
use crate::api::Reply;
use crate::api::{refused, unencodable};
use crate::net::access::Access;
use crate::net::request_body::RequestBody;
use crate::net::throttle::millis;
use crate::partition::PartitionError;
use crate::runtime::shard::Shard;

/// One partition's part of a produce: where its batch lies in the body.
/// The partitions of one topic share its name.
struct Target {
    topic: Rc<str>,
    partition: u32,
}

/// How long a replicated produce waits for its acknowledgement when the
/// request names no timeout.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// Refuses a batch whose idempotent producer id was given to another
/// principal ([`corelog_wire::producer_id`]): appended, it would move that
/// producer's sequence, so that its own next batch is refused. A batch
/// whose header does not parse is left to the partition's checks, which
/// refuse it. `owned` is the id last found to be the caller's: a
/// request's batches come from one producer, and the check is an HMAC.
fn check_producer_id(
    shard: &Shard,
    access: &Access,
    batch: &[u8],
    owned: &mut Option<i64>,
) -> Result<(), PartitionError> {
    // The header's own bounds only: the topic's are checked later, and a
    // stricter bound here must not let a batch past this check.
    let limits = BatchLimits {
        batch_bytes_max: usize::MAX,
        decompressed_bytes_max: usize::MAX,
    };
    let Ok(header) = BatchHeader::parse(batch, &limits) else {
        return Ok(());
    };
    let producer_id = header.producer.producer_id;
    if !header.producer.is_idempotent() || *owned == Some(producer_id) {
        return Ok(());
    }
    if shard.producer_ids.owns(access.principal(), producer_id) {
        *owned = Some(producer_id);
        return Ok(());
    }
    Err(PartitionError::new(
        ErrorCode::ProducerIdNotOwned,
        format!(
            "producer id {producer_id} was not given to this login; initialise a producer id of your own"
        ),
    ))
}

pub(super) async fn produce(
    shard: &Rc<Shard>,
    body: RequestBody,
    received: Instant,
    caller: &Caller,
) -> Result<Reply, ErrorCode> {
    let access = &caller.access;
    // Metered on arrival: the connection took the request's bytes from
    // its principal's bucket as it read the frame, before reading the next
    // (see `net::connection`); the throttle that earned goes into this
    // response.
    let throttle = caller.throttle.given();
    let (acks, timeout, targets, ranges) = {
        let (request, raw) = decode_request::<ProduceRequest>(&body).map_err(refused)?;
        let acks = match request.acks {
            ArchivedAcks::Leader => Acks::Leader,
            ArchivedAcks::Quorum => Acks::Quorum,
        };
        let timeout = match request.timeout_ms.to_native() {
            0 => DEFAULT_TIMEOUT,
            millis => Duration::from_millis(u64::from(millis)),
        };
        let entries = partition_records(request, raw).map_err(refused)?;
        let mut targets: Vec<Target> = Vec::with_capacity(entries.len());
        let mut ranges: Vec<Range<usize>> = Vec::with_capacity(entries.len());
        for entry in &entries {
            let topic = match targets.last() {
                Some(last) if *last.topic == *entry.topic => Rc::clone(&last.topic),
                _ => Rc::from(entry.topic),
            };
            targets.push(Target {
                topic,
                partition: entry.partition.partition.to_native(),
            });
            ranges.push(body.range_of(entry.records));
        }
        (acks, timeout, targets, ranges)
    };
    // Each batch is cut out of the request body, not copied: the leader
    // stamps its offset and epoch in place and the log keeps it.
    let batches = body.split_into(&ranges);
    // Started in request order, synchronously up to offset assignment (or
    // queueing to the owner), so that pipelined produces keep their order.
    let mut pending = Vec::with_capacity(targets.len());
    let mut owned_producer_id = None;
    for (target, batch) in targets.iter().zip(batches) {
        let located = if let Err(error) = access.topic(Operation::Produce, &target.topic) {
            Err(error)
        } else if let Err(error) = check_producer_id(shard, access, &batch, &mut owned_producer_id)
        {
            Err(error)
        } else if target.topic.starts_with("__") && !access.is_broker() {
            Err(PartitionError::new(
                ErrorCode::InternalTopic,
                format!(
                    "{} is an internal topic, written by the broker only",
                    target.topic
                ),
            ))
        } else {
            shard.locate(&target.topic, target.partition)
        };
        let future = match located {
            // Boxed: join_all moves each future it holds when it finishes
            // (memcpy of those was 8% of a shard's CPU with one-record
            // batches).
            Ok((id, owner)) => Either::Left(Box::pin(
                shard.produce(id, owner, batch, received, acks, timeout),
            )),
            Err(error) => Either::Right(ready(Err(error))),
        };
        pending.push(future);
    }
    let results = join_all(pending).await;
    let mut topics: Vec<ProduceTopicResponse> = Vec::new();
    for (target, result) in targets.iter().zip(results) {
        let partition = target.partition;
        let response = match result {
            Ok(produced) => ProducePartitionResponse {
                partition,
                error_code: ErrorCode::None.code(),
                error_message: None,
                base_offset: produced.base_offset.0 as i64,
                log_append_time_ms: produced.log_append_time.0,
                log_start_offset: produced.log_start.0 as i64,
            },
            Err(error) => {
                shard.metrics.error(error.code);
                ProducePartitionResponse {
                    partition,
                    error_code: error.code.code(),
                    error_message: Some(error.message),
                    base_offset: -1,
                    log_append_time_ms: -1,
                    log_start_offset: -1,
                }
            }
        };
        match topics.last_mut() {
            Some(last) if *last.name == *target.topic => last.partitions.push(response),
            _ => topics.push(ProduceTopicResponse {
                name: target.topic.to_string(),
                partitions: vec![response],
            }),
        }
    }
    Reply::message(
        &ProduceResponse {
            topics,
            throttle_ms: millis(throttle),
        },
        Vec::new(),
    )
    .map_err(unencodable)
}
