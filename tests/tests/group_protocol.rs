//! The group coordinator through the raw protocol, against a real broker:
//! generations, ownership and high-watermark checks on commits, audited
//! resets, deletion, and commits surviving kill -9.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use corelog_tests::wire_client::ask;
use corelog_tests::{Broker, Client, batch};
use corelog_wire::batch::ProducerIdentity;
use corelog_wire::error::ErrorCode;
use corelog_wire::message::TopicPartitions;
use corelog_wire::message::delete_groups::DeleteGroupsRequest;
use corelog_wire::message::describe_groups::DescribeGroupsRequest;
use corelog_wire::message::heartbeat::HeartbeatRequest;
use corelog_wire::message::join_group::{JoinGroupRequest, JoinGroupResponse};
use corelog_wire::message::leave_group::LeaveGroupRequest;
use corelog_wire::message::list_groups::ListGroupsRequest;
use corelog_wire::message::offset_commit::{
    OffsetCommitPartition, OffsetCommitRequest, OffsetCommitResponse, OffsetCommitTopic,
};
use corelog_wire::message::offset_fetch::OffsetFetchRequest;
use corelog_wire::message::reset_offsets::{ResetOffsetsRequest, ResetTarget};

fn code(value: u16) -> ErrorCode {
    ErrorCode::from_code(value).unwrap()
}

fn join(
    client: &mut Client,
    group: &str,
    member_id: Option<&str>,
    topic: &str,
) -> JoinGroupResponse {
    ask(
        client,
        &JoinGroupRequest {
            group: group.to_owned(),
            member_id: member_id.map(str::to_owned),
            instance_id: None,
            client_id: "tests".to_owned(),
            topics: vec![topic.to_owned()],
            session_timeout_ms: 10_000,
            rebalance_timeout_ms: 3_000,
            owned: Vec::new(),
        },
    )
}

fn commit(
    client: &mut Client,
    group: &str,
    member: &str,
    generation: i32,
    topic: &str,
    partition: u32,
    next_offset: u64,
) -> OffsetCommitResponse {
    ask(
        client,
        &OffsetCommitRequest {
            group: group.to_owned(),
            generation,
            member_id: member.to_owned(),
            topics: vec![OffsetCommitTopic {
                name: topic.to_owned(),
                partitions: vec![OffsetCommitPartition {
                    partition,
                    next_offset,
                    metadata: Some("test".to_owned()),
                }],
            }],
        },
    )
}

fn partition_code(response: &OffsetCommitResponse) -> ErrorCode {
    assert_eq!(
        code(response.error_code),
        ErrorCode::None,
        "{:?}",
        response.error_message
    );
    code(response.topics[0].partitions[0].error_code)
}

fn committed(client: &mut Client, group: &str, topic: &str, partition: u32) -> i64 {
    let response = ask(
        client,
        &OffsetFetchRequest {
            group: group.to_owned(),
            topics: Some(vec![TopicPartitions {
                topic: topic.to_owned(),
                partitions: vec![partition],
            }]),
        },
    );
    response.topics[0].partitions[0].next_offset
}

fn produce(client: &mut Client, topic: &str, partition: u32, records: usize) {
    let (error, _) = client.produce(
        topic,
        partition,
        &batch("v", "k", records, ProducerIdentity::NONE),
    );
    assert_eq!(error, ErrorCode::None);
}

#[test]
fn commits_are_judged_by_generation_ownership_and_high_watermark() {
    let broker = Broker::start(&["--shards", "2"]);
    let mut client = broker.client();
    client.create_topic("orders", 2, &[]);
    produce(&mut client, "orders", 0, 10);
    produce(&mut client, "orders", 1, 10);

    let first = join(&mut client, "search", None, "orders");
    assert_eq!(
        code(first.error_code),
        ErrorCode::None,
        "{:?}",
        first.error_message
    );
    assert_eq!(first.generation, 1);
    assert_eq!(first.assignment[0].partitions, vec![0, 1]);
    let member = first.member_id.clone();
    assert_eq!(
        partition_code(&commit(&mut client, "search", &member, 1, "orders", 0, 7)),
        ErrorCode::None
    );
    assert_eq!(committed(&mut client, "search", "orders", 0), 7);
    assert_eq!(
        partition_code(&commit(&mut client, "search", &member, 1, "orders", 0, 11)),
        ErrorCode::OffsetBeyondHighWatermark,
        "a commit past the committed end is refused"
    );
    assert_eq!(committed(&mut client, "search", "orders", 0), 7);

    // A second member joins: generation 1 -> 2 (-> 3 after the follow-up round).
    let mut other = broker.client();
    let second_member = std::thread::spawn(move || join(&mut other, "search", None, "orders"));
    std::thread::sleep(std::time::Duration::from_millis(300));
    let heartbeat = ask(
        &mut client,
        &HeartbeatRequest {
            group: "search".to_owned(),
            member_id: member.clone(),
            generation: 1,
        },
    );
    assert_eq!(code(heartbeat.error_code), ErrorCode::RebalanceInProgress);
    let rejoined = join(&mut client, "search", Some(&member), "orders");
    let second = second_member.join().unwrap();
    assert_eq!(rejoined.generation, 2);
    assert_eq!(second.generation, 2);
    // The stale generation is refused; the current one is accepted.
    let stale = commit(&mut client, "search", &member, 1, "orders", 0, 8);
    assert_eq!(code(stale.error_code), ErrorCode::IllegalGeneration);
    assert_eq!(
        committed(&mut client, "search", "orders", 0),
        7,
        "the stale commit changed nothing"
    );
    // A partition the member does not own in generation 2 is refused.
    let owned: Vec<u32> = rejoined
        .assignment
        .iter()
        .flat_map(|entry| entry.partitions.clone())
        .collect();
    let not_owned = (0..2).find(|partition| !owned.contains(partition)).unwrap();
    assert_eq!(
        partition_code(&commit(
            &mut client,
            "search",
            &member,
            2,
            "orders",
            not_owned,
            1
        )),
        ErrorCode::NotOwner
    );
}

#[test]
fn resets_need_a_reason_and_an_empty_group_and_are_audited() {
    let broker = Broker::start(&[]);
    let mut client = broker.client();
    client.create_topic("orders", 1, &[]);
    produce(&mut client, "orders", 0, 20);
    let reset = |client: &mut Client, reason: &str, dry_run: bool| {
        ask(
            client,
            &ResetOffsetsRequest {
                group: "analytics".to_owned(),
                topic: "orders".to_owned(),
                partitions: None,
                to: ResetTarget::Offset(5),
                reason: reason.to_owned(),
                principal: "operator".to_owned(),
                dry_run,
            },
        )
    };
    assert_eq!(
        code(reset(&mut client, "", false).error_code),
        ErrorCode::AuditReasonRequired
    );
    let dry = reset(&mut client, "replay after the bug fix", true);
    assert_eq!(
        (code(dry.error_code), dry.audit_offset),
        (ErrorCode::None, -1)
    );
    assert_eq!(
        committed(&mut client, "analytics", "orders", 0),
        -1,
        "a dry run changes nothing"
    );
    let done = reset(&mut client, "replay after the bug fix", false);
    assert_eq!(
        code(done.error_code),
        ErrorCode::None,
        "{:?}",
        done.error_message
    );
    assert!(done.audit_offset >= 0);
    assert_eq!(committed(&mut client, "analytics", "orders", 0), 5);
    let audit = client.fetch("__audit", 0, 0, 0);
    assert_eq!(audit.code, ErrorCode::None);
    assert!(!audit.records.is_empty(), "the reset left an audit record");

    // With a member, resets and deletes are refused.
    let joined = join(&mut client, "analytics", None, "orders");
    assert_eq!(
        code(reset(&mut client, "again", false).error_code),
        ErrorCode::GroupNotEmpty
    );
    let deleted = ask(
        &mut client,
        &DeleteGroupsRequest {
            groups: vec!["analytics".to_owned()],
        },
    );
    assert_eq!(
        code(deleted.results[0].error_code),
        ErrorCode::GroupNotEmpty
    );
    let left = ask(
        &mut client,
        &LeaveGroupRequest {
            group: "analytics".to_owned(),
            member_id: joined.member_id,
        },
    );
    assert_eq!(code(left.error_code), ErrorCode::None);
    let deleted = ask(
        &mut client,
        &DeleteGroupsRequest {
            groups: vec!["analytics".to_owned()],
        },
    );
    assert_eq!(code(deleted.results[0].error_code), ErrorCode::None);
    assert_eq!(committed(&mut client, "analytics", "orders", 0), -1);
    // Deleting a group never touches topic data.
    assert_eq!(crate_values(&mut client).len(), 20);
}

fn crate_values(client: &mut Client) -> Vec<String> {
    corelog_tests::values(&client.fetch("orders", 0, 0, 0).records)
}

#[test]
fn acknowledged_commits_survive_kill_9_of_the_coordinator() {
    let mut broker = Broker::start(&["--shards", "2"]);
    let mut client = broker.client();
    client.create_topic("orders", 4, &[]);
    for partition in 0..4 {
        produce(&mut client, "orders", partition, 50);
    }
    let mut expected = Vec::new();
    for (index, group) in ["g1", "g2", "g3", "g4", "g5"].iter().enumerate() {
        for partition in 0..4 {
            let offset = (index as u64 * 7 + u64::from(partition)) % 50;
            assert_eq!(
                partition_code(&commit(
                    &mut client,
                    group,
                    "",
                    -1,
                    "orders",
                    partition,
                    offset
                )),
                ErrorCode::None
            );
            expected.push((group.to_string(), partition, offset as i64));
        }
    }
    broker.kill();
    broker.spawn();
    let mut client = broker.client();
    for (group, partition, offset) in expected {
        assert_eq!(
            committed(&mut client, &group, "orders", partition),
            offset,
            "{group}/{partition}"
        );
    }
    let listed = ask(&mut client, &ListGroupsRequest { states: Vec::new() });
    assert_eq!(listed.groups.len(), 5);
    let described = ask(
        &mut client,
        &DescribeGroupsRequest {
            groups: vec!["g2".to_owned()],
        },
    );
    // The restarted node led a new epoch of a non-empty log: its
    // epoch-start marker (a control record) sits at the end, and lag
    // counts records only.
    let lag = &described.groups[0].partitions[0];
    assert_eq!(
        lag.lag_records,
        lag.high_watermark - lag.committed_offset as u64 - 1,
        "{lag:?}"
    );
    assert!(lag.oldest_unconsumed_age_ms >= 0);
}
