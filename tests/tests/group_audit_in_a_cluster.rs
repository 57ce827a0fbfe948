//! Audited group changes in a cluster: the coordinator of a group appends
//! its audit record to `__audit/0` wherever that partition is led. Before,
//! it appended only to a local leader, so in a cluster of three a reset
//! (and, since issue 35's item 11, a commit outside a generation) failed
//! with NOT_LEADER whenever the group's coordinator did not also lead
//! `__audit/0`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use corelog_tests::cli::{corelog, text};
use corelog_tests::cluster_client::serial;
use corelog_tests::wire_client::ask;
use corelog_tests::{Broker, Client, start_cluster};
use corelog_wire::message::find_coordinator::FindCoordinatorRequest;
use corelog_wire::message::metadata::MetadataRequest;

const PATIENCE: Duration = Duration::from_secs(60);

fn client(broker: &Broker) -> Option<Client> {
    let mut client = Client::connect(broker.addr).ok()?;
    client.handshake().ok()?;
    Some(client)
}

/// The leader of `__audit/0` and the coordinator of `group`, once known.
fn leaders(broker: &Broker, group: &str) -> Option<(u32, u32)> {
    let mut client = client(broker)?;
    let metadata = ask(
        &mut client,
        &MetadataRequest {
            topics: Some(vec!["__audit".to_owned()]),
        },
    );
    let audit = metadata.topics.first()?.partitions.first()?.leader?;
    let found = ask(
        &mut client,
        &FindCoordinatorRequest {
            group: group.to_owned(),
        },
    );
    (found.error_code == 0).then_some((audit, found.node_id))
}

#[test]
fn a_reset_is_audited_whichever_broker_leads_the_audit_topic() {
    let _serial = serial();
    let brokers = start_cluster(3, &[]);
    let bootstrap = brokers[0].addr.to_string();
    let deadline = Instant::now() + PATIENCE;
    loop {
        let created = corelog(
            &bootstrap,
            &["topic", "create", "orders", "--partitions", "1"],
            None,
        );
        if created.status.success() {
            break;
        }
        assert!(Instant::now() < deadline, "{}", text(&created.stderr));
        std::thread::sleep(Duration::from_millis(200));
    }
    // A group coordinated by a broker that does not lead `__audit/0`.
    let group = (0..200)
        .map(|index| format!("replayer-{index}"))
        .find(|group| {
            let deadline = Instant::now() + PATIENCE;
            loop {
                if let Some((audit, coordinator)) = leaders(&brokers[0], group) {
                    return audit != coordinator;
                }
                assert!(Instant::now() < deadline, "no coordinator for {group}");
                std::thread::sleep(Duration::from_millis(200));
            }
        })
        .expect("some group is coordinated away from the audit topic's leader");

    let reset = corelog(
        &bootstrap,
        &[
            "group",
            "reset-offsets",
            &group,
            "--topic",
            "orders",
            "--to-earliest",
            "--reason",
            "replay",
        ],
        None,
    );
    assert!(reset.status.success(), "{}", text(&reset.stderr));
    let audit = corelog(
        &bootstrap,
        &["--json", "group", "audit", "--group", &group],
        None,
    );
    assert!(audit.status.success(), "{}", text(&audit.stderr));
    let entries: serde_json::Value = serde_json::from_slice(&audit.stdout).unwrap();
    assert_eq!(entries.as_array().map(Vec::len), Some(1), "{entries}");
    assert_eq!(entries[0]["reason"], "replay", "{entries}");
}
