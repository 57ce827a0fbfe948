//! Group ids are checked by one rule on every group API (issue 35, item
//! 13): 1 to 255 bytes without control characters. Before, only JoinGroup
//! checked the length, and OffsetCommit stored a 5,009-byte id.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use corelog_tests::wire_client::ask;
use corelog_tests::{Broker, Client, batch};
use corelog_wire::batch::ProducerIdentity;
use corelog_wire::error::ErrorCode;
use corelog_wire::message::TopicPartitions;
use corelog_wire::message::delete_groups::DeleteGroupsRequest;
use corelog_wire::message::describe_groups::DescribeGroupsRequest;
use corelog_wire::message::find_coordinator::FindCoordinatorRequest;
use corelog_wire::message::heartbeat::HeartbeatRequest;
use corelog_wire::message::join_group::JoinGroupRequest;
use corelog_wire::message::leave_group::LeaveGroupRequest;
use corelog_wire::message::list_groups::ListGroupsRequest;
use corelog_wire::message::offset_commit::{
    OffsetCommitPartition, OffsetCommitRequest, OffsetCommitTopic,
};
use corelog_wire::message::offset_fetch::OffsetFetchRequest;
use corelog_wire::message::reset_offsets::{ResetOffsetsRequest, ResetTarget};
use corelog_wire::message::write_audit::{AuditAction, WriteAuditRequest};

/// The error code every group API answers for `group`, by API name.
fn answers(client: &mut Client, group: &str) -> Vec<(&'static str, u16)> {
    let group = group.to_owned();
    let find = ask(
        client,
        &FindCoordinatorRequest {
            group: group.clone(),
        },
    );
    let join = ask(
        client,
        &JoinGroupRequest {
            group: group.clone(),
            member_id: None,
            instance_id: None,
            client_id: "tests".to_owned(),
            topics: vec!["orders".to_owned()],
            session_timeout_ms: 10_000,
            rebalance_timeout_ms: 3_000,
            owned: Vec::new(),
        },
    );
    let heartbeat = ask(
        client,
        &HeartbeatRequest {
            group: group.clone(),
            member_id: "m".to_owned(),
            generation: 1,
        },
    );
    let leave = ask(
        client,
        &LeaveGroupRequest {
            group: group.clone(),
            member_id: "m".to_owned(),
        },
    );
    let commit = ask(
        client,
        &OffsetCommitRequest {
            group: group.clone(),
            generation: -1,
            member_id: String::new(),
            topics: vec![OffsetCommitTopic {
                name: "orders".to_owned(),
                partitions: vec![OffsetCommitPartition {
                    partition: 0,
                    next_offset: 1,
                    metadata: None,
                }],
            }],
        },
    );
    let fetch = ask(
        client,
        &OffsetFetchRequest {
            group: group.clone(),
            topics: Some(vec![TopicPartitions {
                topic: "orders".to_owned(),
                partitions: vec![0],
            }]),
        },
    );
    let describe = ask(
        client,
        &DescribeGroupsRequest {
            groups: vec![group.clone()],
        },
    );
    let delete = ask(
        client,
        &DeleteGroupsRequest {
            groups: vec![group.clone()],
        },
    );
    let reset = ask(
        client,
        &ResetOffsetsRequest {
            group: group.clone(),
            topic: "orders".to_owned(),
            partitions: None,
            to: ResetTarget::Earliest,
            reason: "test".to_owned(),
            principal: "tests".to_owned(),
            dry_run: false,
        },
    );
    let audit = ask(
        client,
        &WriteAuditRequest {
            group,
            topic: "orders".to_owned(),
            partition: 0,
            offset: 0,
            action: AuditAction::Skip,
            reason: "test".to_owned(),
            principal: "tests".to_owned(),
            dead_letter_topic: None,
            dead_letter_offset: -1,
        },
    );
    vec![
        ("FindCoordinator", find.error_code),
        ("JoinGroup", join.error_code),
        ("Heartbeat", heartbeat.error_code),
        ("LeaveGroup", leave.error_code),
        ("OffsetCommit", commit.error_code),
        ("OffsetFetch", fetch.error_code),
        ("DescribeGroups", describe.groups[0].error_code),
        ("DeleteGroups", delete.results[0].error_code),
        ("ResetOffsets", reset.error_code),
        ("WriteAudit", audit.error_code),
    ]
}

#[test]
fn every_group_api_refuses_an_overlong_id_or_one_with_control_characters() {
    let broker = Broker::start(&[]);
    let mut client = broker.client();
    client.create_topic("orders", 1, &[]);
    let (error, _) = client.produce("orders", 0, &batch("v", "k", 2, ProducerIdentity::NONE));
    assert_eq!(error, ErrorCode::None);

    let long = "g".repeat(5_009);
    let mut served = Vec::new();
    for group in [
        long.as_str(),
        "",
        "evil\x1b[2Jgroup",
        "tab\tbed",
        "line\nbreak",
    ] {
        for (api, code) in answers(&mut client, group) {
            if code != ErrorCode::InvalidGroupId.code() {
                let shown: String = group.chars().take(12).collect();
                served.push(format!(
                    "{api} answered {:?} for {shown:?}",
                    ErrorCode::from_code(code)
                ));
            }
        }
    }
    assert!(served.is_empty(), "{served:#?}");
    // Nothing was stored under any of them.
    let listed = ask(&mut client, &ListGroupsRequest { states: Vec::new() });
    assert!(listed.groups.is_empty(), "{:?}", listed.groups);

    // The longest id allowed, 255 bytes, passes the rule everywhere.
    let longest = "g".repeat(255);
    for (api, code) in answers(&mut client, &longest) {
        assert_ne!(code, ErrorCode::InvalidGroupId.code(), "{api}");
    }
}
