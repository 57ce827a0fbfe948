//! What one tenant's group APIs tell it about another tenant's topics, and
//! who may move a group's offsets (issue 35, items 7 and 11).
//!
//! Item 7: from a group of her own, a tenant learned which of another
//! tenant's topics exist, their partition counts, high watermarks, sizes
//! and record ages. Every group API answer that names a topic now checks
//! `describe` on it and answers exactly as for a topic that does not
//! exist otherwise.
//!
//! Item 11: an OffsetCommit outside a generation (generation -1, no member
//! id) moved an idle group's offsets anywhere with `group-read` alone and
//! left no audit record. It is a privileged reset: it needs `group-admin`
//! and is audited.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use corelog_tests::batch;
use corelog_tests::tenants::Tenants;
use corelog_tests::wire_client::{Client, ask};
use corelog_wire::batch::ProducerIdentity;
use corelog_wire::error::ErrorCode;
use corelog_wire::message::TopicPartitions;
use corelog_wire::message::describe_groups::{DescribeGroupsRequest, GroupDescription};
use corelog_wire::message::join_group::{JoinGroupRequest, JoinGroupResponse};
use corelog_wire::message::offset_commit::{
    OffsetCommitPartition, OffsetCommitRequest, OffsetCommitResponse, OffsetCommitTopic,
};
use corelog_wire::message::offset_fetch::{OffsetFetchRequest, OffsetFetchResponse};
use corelog_wire::message::reset_offsets::{
    ResetOffsetsRequest, ResetOffsetsResponse, ResetTarget,
};

fn join(client: &mut Client, group: &str, topic: &str) -> JoinGroupResponse {
    ask(
        client,
        &JoinGroupRequest {
            group: group.to_owned(),
            member_id: None,
            instance_id: None,
            client_id: "tests".to_owned(),
            topics: vec![topic.to_owned()],
            session_timeout_ms: 30_000,
            rebalance_timeout_ms: 3_000,
            owned: Vec::new(),
        },
    )
}

/// A commit of `next_offset` on partitions `partitions` of `topic` outside
/// a generation.
fn manual_commit(
    client: &mut Client,
    group: &str,
    topic: &str,
    partitions: &[u32],
    next_offset: u64,
) -> OffsetCommitResponse {
    ask(
        client,
        &OffsetCommitRequest {
            group: group.to_owned(),
            generation: -1,
            member_id: String::new(),
            topics: vec![OffsetCommitTopic {
                name: topic.to_owned(),
                partitions: partitions
                    .iter()
                    .map(|&partition| OffsetCommitPartition {
                        partition,
                        next_offset,
                        metadata: None,
                    })
                    .collect(),
            }],
        },
    )
}

fn fetch(client: &mut Client, group: &str, topic: &str) -> OffsetFetchResponse {
    ask(
        client,
        &OffsetFetchRequest {
            group: group.to_owned(),
            topics: Some(vec![TopicPartitions {
                topic: topic.to_owned(),
                partitions: vec![0, 7],
            }]),
        },
    )
}

fn reset(client: &mut Client, group: &str, topic: &str) -> ResetOffsetsResponse {
    ask(
        client,
        &ResetOffsetsRequest {
            group: group.to_owned(),
            topic: topic.to_owned(),
            partitions: None,
            to: ResetTarget::Latest,
            reason: "look around".to_owned(),
            principal: "bob".to_owned(),
            dry_run: true,
        },
    )
}

fn describe(client: &mut Client, group: &str) -> GroupDescription {
    ask(
        client,
        &DescribeGroupsRequest {
            groups: vec![group.to_owned()],
        },
    )
    .groups
    .remove(0)
}

/// Everything `bob`'s group APIs answer when they name `topic`, as text
/// with the topic's name replaced by `TOPIC`: what he learns about it.
fn what_bob_learns(client: &mut Client, topic: &str) -> String {
    let answers = format!(
        "join: {:?}\ncommit: {:?}\nfetch: {:?}\nreset: {:?}",
        // Its own group: a member that joined would make the others'
        // answers about the group, not the topic.
        join(client, "tenant-b.joiner", topic),
        manual_commit(client, "tenant-b.spy", topic, &[0, 7], 1_000),
        fetch(client, "tenant-b.spy", topic),
        reset(client, "tenant-b.spy", topic),
    );
    answers.replace(topic, "TOPIC")
}

/// Bob, with rights only on `tenant-b.` topics and groups, names alice's
/// topic in every group API of his own group: he is told exactly what he
/// is told of a topic that does not exist. And describing a group of his
/// that another tenant's member (or an old commit) put alice's topic in
/// shows nothing of it.
#[test]
fn group_apis_tell_a_tenant_nothing_of_another_tenants_topics() {
    let tenants = Tenants::start(
        &["alice", "bob"],
        &[("tenant-a.orders", 3), ("tenant-b.events", 1)],
        &[],
    );
    let mut admin = tenants.client_as("admin");
    for partition in 0..3 {
        let records = batch("v", "k", 5 + partition as usize, ProducerIdentity::NONE);
        let (error, _) = admin.produce("tenant-a.orders", partition, &records);
        assert_eq!(error, ErrorCode::None);
    }
    tenants.grant_prefix("alice", "tenant-a.", &["fetch", "group-admin"]);
    tenants.grant_prefix("bob", "tenant-b.", &["fetch", "group-admin"]);

    let mut bob = tenants.client_as("bob");
    let existing = what_bob_learns(&mut bob, "tenant-a.orders");
    let missing = what_bob_learns(&mut bob, "tenant-a.nothing");
    assert_eq!(
        existing, missing,
        "alice's topic shows through:\n{existing}"
    );
    assert!(
        existing.contains(&format!(
            "error_code: {}",
            ErrorCode::TopicAuthorizationFailed.code()
        )),
        "{existing}"
    );
    // Nothing was stored for bob's group on alice's topic.
    let stored = ask(
        &mut admin,
        &OffsetFetchRequest {
            group: "tenant-b.spy".to_owned(),
            topics: None,
        },
    );
    assert!(stored.topics.is_empty(), "{:?}", stored.topics);

    // A group bob may describe, holding alice's topic: a member of it
    // (another principal's) is assigned her partitions, and offsets on
    // them were committed.
    let joined = join(&mut admin, "tenant-b.shared", "tenant-a.orders");
    assert_eq!(joined.error_code, 0, "{:?}", joined.error_message);
    let described = describe(&mut admin, "tenant-b.shared");
    assert!(
        described
            .members
            .iter()
            .any(|member| !member.assignment.is_empty()),
        "the admin's member holds alice's partitions: {described:?}"
    );
    let seen = describe(&mut bob, "tenant-b.shared");
    assert_eq!(seen.error_code, 0, "{:?}", seen.error_message);
    assert_eq!(seen.members.len(), 1, "{seen:?}");
    let text = format!("{seen:?}");
    assert!(!text.contains("tenant-a.orders"), "bob sees: {text}");
    assert!(seen.partitions.is_empty(), "bob sees lag: {seen:?}");
}

/// A commit outside a generation moves an idle group like a reset: with
/// `group-read` alone it is refused and changes nothing; with
/// `group-admin` it is served and leaves an audit record naming the
/// login, with the offsets before and after.
#[test]
fn a_commit_outside_a_generation_needs_group_admin_and_is_audited() {
    let tenants = Tenants::start(&["alice"], &[("tenant-a.orders", 1)], &[]);
    let mut admin = tenants.client_as("admin");
    let (error, _) = admin.produce(
        "tenant-a.orders",
        0,
        &batch("v", "k", 5, ProducerIdentity::NONE),
    );
    assert_eq!(error, ErrorCode::None);
    tenants.grant_prefix("alice", "tenant-a.", &["fetch", "group-read"]);

    let mut alice = tenants.client_as("alice");
    let refused = manual_commit(&mut alice, "tenant-a.idle", "tenant-a.orders", &[0], 3);
    assert_eq!(
        ErrorCode::from_code(refused.error_code),
        Some(ErrorCode::GroupAuthorizationFailed),
        "{refused:?}"
    );
    let committed = fetch(&mut admin, "tenant-a.idle", "tenant-a.orders");
    assert_eq!(committed.topics[0].partitions[0].next_offset, -1);

    tenants.grant(&[
        "--allow",
        "alice",
        "--operation",
        "group-admin",
        "--group",
        "tenant-a.idle",
    ]);
    let served = manual_commit(&mut alice, "tenant-a.idle", "tenant-a.orders", &[0], 3);
    assert_eq!(served.error_code, 0, "{served:?}");
    assert_eq!(served.topics[0].partitions[0].error_code, 0, "{served:?}");
    let committed = fetch(&mut admin, "tenant-a.idle", "tenant-a.orders");
    assert_eq!(committed.topics[0].partitions[0].next_offset, 3);

    let audit = tenants.ok(
        "admin",
        &["--json", "group", "audit", "--group", "tenant-a.idle"],
        None,
    );
    let entries: serde_json::Value = serde_json::from_str(&audit).unwrap();
    let entries = entries.as_array().unwrap();
    assert_eq!(entries.len(), 1, "{audit}");
    assert_eq!(entries[0]["kind"], "offset-reset", "{audit}");
    assert_eq!(entries[0]["principal"], "alice", "{audit}");
    assert_eq!(entries[0]["topic"], "tenant-a.orders", "{audit}");
    assert_eq!(
        entries[0]["before"],
        serde_json::json!([[0, -1]]),
        "{audit}"
    );
    assert_eq!(entries[0]["after"], serde_json::json!([[0, 3]]), "{audit}");
}
