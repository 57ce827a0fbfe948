//! Seed inputs for the handler target, written when `CORELOG_HANDLER_SEEDS`
//! names a directory (see README.md): one input per checked-in wire seed
//! (`wire/fuzz/seeds/<api>/request-*`, one valid body per API), and a few
//! whole sessions — create a topic, produce a valid batch, read it back,
//! join a group and commit — so that the fuzzer starts from requests that
//! reach storage and the group coordinator instead of discovering topic
//! names and CRCs itself.

use std::path::Path;

use bytes::Bytes;
use corelog_wire::batch::{BatchBuilder, Compression, NewRecord};
use corelog_wire::frame::ApiKey;
use corelog_wire::message::{ConfigEntry, TopicPartitions};
use corelog_wire::message::{Request, encode_request};
use corelog_wire::message::{
    create_topics, delete_topics, describe_groups, describe_topics, fetch, find_coordinator,
    heartbeat, init_producer_id, join_group, list_groups, list_offsets, offset_commit,
    offset_fetch, produce,
};
use corelog_wire::types::TimestampMs;

/// Options byte of a framed item: fix up batch CRCs (harmless elsewhere).
const FIX_CRCS: u8 = 2;

/// Where the wire targets' seeds live, relative to this crate.
const WIRE_SEEDS: &str = "../../wire/fuzz/seeds";

/// Writes every seed into `dir`.
pub fn write(dir: &Path) {
    std::fs::create_dir_all(dir).expect("seed directory");
    for (index, api_key) in ApiKey::ALL.iter().enumerate() {
        let name = snake_case(api_key.name());
        let Ok(entries) = std::fs::read_dir(Path::new(WIRE_SEEDS).join(&name)) else {
            continue;
        };
        for entry in entries.flatten() {
            let file = entry.file_name().to_string_lossy().into_owned();
            if !file.starts_with("request-") {
                continue;
            }
            let seed = std::fs::read(entry.path()).expect("read a wire seed");
            // The wire seed's first byte is its target's control byte.
            let Some(body) = seed.get(1..) else { continue };
            let mut input = vec![0];
            push_item(&mut input, index, 0, body);
            std::fs::write(dir.join(format!("{name}-{file}")), input).expect("write a seed");
        }
    }
    for (name, session) in [
        ("session-topic", topic_session()),
        ("session-group", group_session()),
    ] {
        std::fs::write(dir.join(name), session).expect("write a seed");
    }
}

fn snake_case(camel: &str) -> String {
    let mut snake = String::new();
    for (at, letter) in camel.chars().enumerate() {
        if letter.is_ascii_uppercase() && at > 0 {
            snake.push('_');
        }
        snake.push(letter.to_ascii_lowercase());
    }
    snake
}

/// Appends one framed item.
fn push_item(input: &mut Vec<u8>, api_index: usize, options: u8, body: &[u8]) {
    let len = u16::try_from(body.len()).expect("seed bodies are small");
    input.push(api_index as u8);
    input.push(options);
    input.extend_from_slice(&len.to_be_bytes());
    input.extend_from_slice(body);
}

fn push_request<T: Request>(input: &mut Vec<u8>, api_key: ApiKey, request: &T, raw: &[u8]) {
    let index = ApiKey::ALL
        .iter()
        .position(|known| *known == api_key)
        .expect("a known API");
    let body = encode_request(request, raw).expect("seed request encodes");
    push_item(input, index, FIX_CRCS, &body);
}

const TOPIC: &str = "t";
const GROUP: &str = "g";

fn batch() -> Bytes {
    let mut builder = BatchBuilder::new(Compression::None);
    for value in ["a", "b"] {
        builder
            .push(&NewRecord {
                key: Some(Bytes::from_static(b"k")),
                value: Some(Bytes::copy_from_slice(value.as_bytes())),
                headers: Vec::new(),
                timestamp: TimestampMs(1_700_000_000_000),
                schema: None,
            })
            .expect("record fits");
    }
    builder.build().expect("batch builds")
}

/// Create, produce, fetch, list offsets, describe, delete.
fn topic_session() -> Vec<u8> {
    let mut input = vec![0];
    let create = create_topics::CreateTopicsRequest {
        topics: vec![create_topics::CreatableTopic {
            name: TOPIC.to_owned(),
            partitions: 2,
            replication_factor: 1,
            configs: vec![ConfigEntry {
                key: "retention.ms".to_owned(),
                value: "60000".to_owned(),
            }],
        }],
        timeout_ms: 1_000,
        validate_only: false,
    };
    push_request(&mut input, ApiKey::CreateTopics, &create, &[]);
    let records = batch();
    let produce = produce::ProduceRequest {
        acks: produce::Acks::Quorum,
        timeout_ms: 1_000,
        topics: vec![produce::ProduceTopic {
            name: TOPIC.to_owned(),
            partitions: vec![produce::ProducePartition {
                partition: 0,
                records_len: records.len() as u32,
            }],
        }],
    };
    push_request(&mut input, ApiKey::Produce, &produce, &records);
    let fetch = fetch::FetchRequest {
        max_wait_ms: 10,
        min_bytes: 1,
        max_bytes: 1 << 20,
        topics: vec![fetch::FetchTopic {
            name: TOPIC.to_owned(),
            partitions: vec![fetch::FetchPartition {
                partition: 0,
                fetch_offset: 0,
                partition_max_bytes: 1 << 20,
                current_leader_epoch: None,
            }],
        }],
    };
    push_request(&mut input, ApiKey::Fetch, &fetch, &[]);
    let list = list_offsets::ListOffsetsRequest {
        topics: vec![list_offsets::ListOffsetsTopic {
            name: TOPIC.to_owned(),
            partitions: vec![
                list_offsets::ListOffsetsPartition {
                    partition: 0,
                    spec: list_offsets::OffsetSpec::Latest,
                },
                list_offsets::ListOffsetsPartition {
                    partition: 1,
                    spec: list_offsets::OffsetSpec::Timestamp(1_700_000_000_000),
                },
            ],
        }],
    };
    push_request(&mut input, ApiKey::ListOffsets, &list, &[]);
    let producer = init_producer_id::InitProducerIdRequest {
        transactional_id: None,
        producer_id: -1,
        producer_epoch: -1,
    };
    push_request(&mut input, ApiKey::InitProducerId, &producer, &[]);
    let describe = describe_topics::DescribeTopicsRequest {
        names: vec![TOPIC.to_owned()],
    };
    push_request(&mut input, ApiKey::DescribeTopics, &describe, &[]);
    let delete = delete_topics::DeleteTopicsRequest {
        names: vec![TOPIC.to_owned()],
        timeout_ms: 1_000,
    };
    push_request(&mut input, ApiKey::DeleteTopics, &delete, &[]);
    input
}

/// Create, find the coordinator, join, heartbeat, commit, fetch offsets,
/// list and describe groups.
fn group_session() -> Vec<u8> {
    let mut input = vec![0];
    let create = create_topics::CreateTopicsRequest {
        topics: vec![create_topics::CreatableTopic {
            name: TOPIC.to_owned(),
            partitions: 1,
            replication_factor: 1,
            configs: Vec::new(),
        }],
        timeout_ms: 1_000,
        validate_only: false,
    };
    push_request(&mut input, ApiKey::CreateTopics, &create, &[]);
    let find = find_coordinator::FindCoordinatorRequest {
        group: GROUP.to_owned(),
    };
    push_request(&mut input, ApiKey::FindCoordinator, &find, &[]);
    let join = join_group::JoinGroupRequest {
        group: GROUP.to_owned(),
        member_id: None,
        instance_id: None,
        client_id: "seed".to_owned(),
        topics: vec![TOPIC.to_owned()],
        session_timeout_ms: 6_000,
        rebalance_timeout_ms: 1_000,
        owned: Vec::new(),
    };
    push_request(&mut input, ApiKey::JoinGroup, &join, &[]);
    let heartbeat = heartbeat::HeartbeatRequest {
        group: GROUP.to_owned(),
        member_id: "m".to_owned(),
        generation: 1,
    };
    push_request(&mut input, ApiKey::Heartbeat, &heartbeat, &[]);
    let commit = offset_commit::OffsetCommitRequest {
        group: GROUP.to_owned(),
        generation: -1,
        member_id: String::new(),
        topics: vec![offset_commit::OffsetCommitTopic {
            name: TOPIC.to_owned(),
            partitions: vec![offset_commit::OffsetCommitPartition {
                partition: 0,
                next_offset: 0,
                metadata: None,
            }],
        }],
    };
    push_request(&mut input, ApiKey::OffsetCommit, &commit, &[]);
    let fetch = offset_fetch::OffsetFetchRequest {
        group: GROUP.to_owned(),
        topics: Some(vec![TopicPartitions {
            topic: TOPIC.to_owned(),
            partitions: vec![0],
        }]),
    };
    push_request(&mut input, ApiKey::OffsetFetch, &fetch, &[]);
    let list = list_groups::ListGroupsRequest { states: Vec::new() };
    push_request(&mut input, ApiKey::ListGroups, &list, &[]);
    let describe = describe_groups::DescribeGroupsRequest {
        groups: vec![GROUP.to_owned()],
    };
    push_request(&mut input, ApiKey::DescribeGroups, &describe, &[]);
    input
}
