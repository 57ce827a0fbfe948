//! ListOffsets: the log start, the high watermark, or the first offset at
//! or after a time.

use std::rc::Rc;

use corelog_controller::acls::Operation;
use corelog_wire::error::ErrorCode;
use corelog_wire::message::decode_request;
use corelog_wire::message::list_offsets::{
    ArchivedOffsetSpec, ListOffsetsPartitionResponse, ListOffsetsRequest, ListOffsetsResponse,
    ListOffsetsTopicResponse,
};
use corelog_wire::types::TimestampMs;

use crate::api::Reply;
use crate::api::{refused, unencodable};
use crate::net::access::Access;
use crate::partition::OffsetQuery;
use crate::runtime::shard::Shard;

pub(super) async fn list_offsets(
    shard: &Rc<Shard>,
    body: &[u8],
    access: &Access,
) -> Result<Reply, ErrorCode> {
    let (request, _) = decode_request::<ListOffsetsRequest>(body).map_err(refused)?;
    let mut topics = Vec::with_capacity(request.topics.len());
    for topic in request.topics.iter() {
        let mut partitions = Vec::with_capacity(topic.partitions.len());
        for entry in topic.partitions.iter() {
            let partition = entry.partition.to_native();
            let query = match &entry.spec {
                ArchivedOffsetSpec::Earliest => OffsetQuery::Earliest,
                ArchivedOffsetSpec::Latest => OffsetQuery::Latest,
                ArchivedOffsetSpec::Timestamp(time) => {
                    OffsetQuery::Timestamp(TimestampMs(time.to_native()))
                }
            };
            let located = access
                .topic(Operation::Describe, &topic.name)
                .and_then(|()| shard.locate(&topic.name, partition));
            let result = match located {
                Ok((id, owner)) => shard.list_offset(id, owner, query).await,
                Err(error) => Err(error),
            };
            partitions.push(match result {
                Ok(Some((offset, timestamp))) => ListOffsetsPartitionResponse {
                    partition,
                    error_code: ErrorCode::None.code(),
                    offset: offset.0 as i64,
                    timestamp: timestamp.0,
                },
                Ok(None) => ListOffsetsPartitionResponse {
                    partition,
                    error_code: ErrorCode::None.code(),
                    offset: -1,
                    timestamp: -1,
                },
                Err(error) => {
                    shard.metrics.error(error.code);
                    ListOffsetsPartitionResponse {
                        partition,
                        error_code: error.code.code(),
                        offset: -1,
                        timestamp: -1,
                    }
                }
            });
        }
        topics.push(ListOffsetsTopicResponse {
            name: topic.name.to_string(),
            partitions,
        });
    }
    Reply::message(&ListOffsetsResponse { topics }, Vec::new()).map_err(unencodable)
}
