//! What an operator sees of groups (issue 35, items 22 and 24).
//!
//! Item 22: a deleted group's lag series stayed on `/metrics` until the
//! broker restarted, and after a coordinator moved, the old and the new
//! coordinator both exported the group's series (the old one frozen), so
//! the lag alert fired after the group caught up and dashboards showed it
//! twice. Item 24: `corelog group list` showed only the groups coordinated
//! by the broker it asked.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use corelog_client::group::{MemberGeneration, OffsetToCommit};
use corelog_client::{Admin, ClientConfig, Offset, TopicPartition};
use corelog_tests::cli::{corelog, text};
use corelog_tests::cluster_client::{client_runtime, serial};
use corelog_tests::wire_client::ask;
use corelog_tests::{Broker, batch, start_cluster};
use corelog_wire::batch::ProducerIdentity;
use corelog_wire::error::ErrorCode;
use corelog_wire::message::find_coordinator::FindCoordinatorRequest;

const PATIENCE: Duration = Duration::from_secs(60);

/// Lines of `broker`'s `/metrics` that are series of `group`.
fn group_series(broker: &Broker, group: &str) -> Vec<String> {
    let label = format!("group=\"{group}\"");
    broker
        .metrics()
        .lines()
        .filter(|line| !line.starts_with('#') && line.contains(&label))
        .map(str::to_owned)
        .collect()
}

/// Waits until `done` holds, up to [`PATIENCE`]; panics with `what`.
fn wait_until(what: &str, mut done: impl FnMut() -> Result<(), String>) {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let last = match done() {
            Ok(()) => return,
            Err(last) => last,
        };
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}: {last}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Commits `next_offset` on `topic/0` for `group`, as a manual offset
/// (the group has no members), retrying while coordinators load.
fn commit(
    runtime: &tokio::runtime::Runtime,
    bootstrap: &str,
    group: &str,
    topic: &str,
    next_offset: u64,
) {
    let offsets = [OffsetToCommit {
        partition: TopicPartition::new(topic, 0),
        next_offset: Offset(next_offset),
        metadata: None,
    }];
    wait_until(&format!("a commit of {group}"), || {
        runtime.block_on(async {
            let admin = Admin::connect(ClientConfig::new(bootstrap))
                .await
                .map_err(|error| error.to_string())?;
            let results = admin
                .commit_offsets(group, &MemberGeneration::none(), &offsets)
                .await
                .map_err(|error| error.to_string())?;
            match &results[0].1 {
                Ok(_) => Ok(()),
                Err(error) => Err(error.to_string()),
            }
        })
    });
}

/// Creates `topic` (one partition) and appends `records` records to it.
fn topic_with_records(bootstrap: &str, topic: &str, records: usize) {
    wait_until(&format!("topic {topic}"), || {
        let created = corelog(
            bootstrap,
            &["topic", "create", topic, "--partitions", "1"],
            None,
        );
        if created.status.success() || text(&created.stderr).contains("TOPIC_ALREADY_EXISTS") {
            Ok(())
        } else {
            Err(text(&created.stderr))
        }
    });
    let values: Vec<String> = (0..records).map(|index| format!("v{index}")).collect();
    wait_until(&format!("records in {topic}"), || {
        let produced = corelog(
            bootstrap,
            &["produce", "--topic", topic],
            Some(&values.join("\n")),
        );
        if produced.status.success() {
            Ok(())
        } else {
            Err(text(&produced.stderr))
        }
    });
}

#[test]
fn a_deleted_groups_series_leave_metrics_at_once() {
    let broker = Broker::start(&[]);
    let bootstrap = broker.addr.to_string();
    let runtime = client_runtime();
    let mut client = broker.client();
    client.create_topic("orders", 1, &[]);
    let (error, _) = client.produce("orders", 0, &batch("v", "k", 5, ProducerIdentity::NONE));
    assert_eq!(error, ErrorCode::None);
    commit(&runtime, &bootstrap, "laggard", "orders", 1);
    wait_until("the lag series of laggard", || {
        let series = group_series(&broker, "laggard");
        if series
            .iter()
            .any(|line| line.starts_with("corelog_group_lag_records"))
        {
            Ok(())
        } else {
            Err(format!("{series:?}"))
        }
    });

    runtime.block_on(async {
        let admin = Admin::connect(ClientConfig::new(bootstrap.as_str()))
            .await
            .unwrap();
        admin.delete_group("laggard").await.unwrap();
    });
    // Well past the lag refresh (5 s) and the generation refresh (1 s).
    let deadline = Instant::now() + Duration::from_secs(12);
    loop {
        let series = group_series(&broker, "laggard");
        if series.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the deleted group's series are still exported: {series:#?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The node id coordinating `group`, as broker `asked` answers.
fn coordinator_of(brokers: &[Broker], group: &str) -> Option<u32> {
    for broker in brokers.iter().filter(|broker| broker.is_running()) {
        let Ok(mut client) = corelog_tests::Client::connect(broker.addr) else {
            continue;
        };
        if client.handshake().is_err() {
            continue;
        }
        let found = ask(
            &mut client,
            &FindCoordinatorRequest {
                group: group.to_owned(),
            },
        );
        if found.error_code == 0 {
            return Some(found.node_id);
        }
    }
    None
}

/// After the coordinator of a group moves (its broker frozen until its
/// `__groups` partition is led elsewhere, then resumed), exactly one
/// broker exports the group's series: the one coordinating it.
#[test]
fn a_moved_coordinators_series_are_exported_by_one_broker_only() {
    let _serial = serial();
    let runtime = client_runtime();
    let brokers = start_cluster(3, &[]);
    let bootstrap = brokers[0].addr.to_string();
    topic_with_records(&bootstrap, "orders", 5);
    commit(&runtime, &bootstrap, "mover", "orders", 1);
    let exporters = |brokers: &[Broker]| -> Vec<u32> {
        (1..=3)
            .filter(|id| {
                let broker = &brokers[*id as usize - 1];
                broker.is_running() && !group_series(broker, "mover").is_empty()
            })
            .collect()
    };
    let old = coordinator_of(&brokers, "mover").unwrap();
    wait_until("the coordinator's lag series", || {
        let broker = &brokers[old as usize - 1];
        let series = group_series(broker, "mover");
        if series
            .iter()
            .any(|line| line.starts_with("corelog_group_lag_records"))
        {
            Ok(())
        } else {
            Err(format!("{series:?}"))
        }
    });

    brokers[old as usize - 1].pause();
    wait_until("a new coordinator", || {
        let live: Vec<&Broker> = brokers
            .iter()
            .enumerate()
            .filter(|(index, _)| *index as u32 + 1 != old)
            .map(|(_, broker)| broker)
            .collect();
        for broker in live {
            let Ok(mut client) = corelog_tests::Client::connect(broker.addr) else {
                continue;
            };
            client
                .stream
                .set_read_timeout(Some(Duration::from_secs(3)))
                .unwrap();
            if client.handshake().is_err() {
                continue;
            }
            let found = ask(
                &mut client,
                &FindCoordinatorRequest {
                    group: "mover".to_owned(),
                },
            );
            if found.error_code == 0 && found.node_id != old {
                let new = &brokers[found.node_id as usize - 1];
                if !group_series(new, "mover").is_empty() {
                    return Ok(());
                }
            }
        }
        Err("no other broker coordinates the group yet".to_owned())
    });
    brokers[old as usize - 1].resume();

    // The resumed broker learns it no longer leads; whichever broker
    // coordinates the group from then on (leadership may return to the
    // resumed one) must be the only one exporting its series.
    wait_until("one broker exporting the moved group's series", || {
        let exporting = exporters(&brokers);
        let coordinator = coordinator_of(&brokers, "mover");
        match (exporting.as_slice(), coordinator) {
            ([only], Some(coordinator)) if *only == coordinator => Ok(()),
            _ => Err(format!(
                "brokers {exporting:?} export the series of a group coordinated by {coordinator:?}"
            )),
        }
    });
}

/// Groups coordinated by every broker of a cluster are listed by
/// `corelog group list` asked of any one of them.
#[test]
fn group_list_shows_the_groups_of_every_coordinator() {
    let _serial = serial();
    let runtime = client_runtime();
    let brokers = start_cluster(3, &[]);
    let bootstrap = brokers[0].addr.to_string();
    topic_with_records(&bootstrap, "orders", 1);
    let mut groups = Vec::new();
    let mut coordinators = BTreeSet::new();
    for index in 0..40 {
        let group = format!("listed-{index}");
        commit(&runtime, &bootstrap, &group, "orders", 1);
        coordinators.insert(coordinator_of(&brokers, &group).unwrap());
        groups.push(group);
        if groups.len() >= 6 && coordinators.len() >= 2 {
            break;
        }
    }
    assert!(
        coordinators.len() >= 2,
        "every group on one coordinator: {coordinators:?}"
    );

    for broker in &brokers {
        let listed = corelog(&broker.addr.to_string(), &["--json", "group", "list"], None);
        assert!(listed.status.success(), "{}", text(&listed.stderr));
        let listed: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
        let names: BTreeSet<&str> = listed
            .as_array()
            .unwrap()
            .iter()
            .map(|group| group["group"].as_str().unwrap())
            .collect();
        let missing: Vec<&String> = groups
            .iter()
            .filter(|group| !names.contains(group.as_str()))
            .collect();
        assert!(
            missing.is_empty(),
            "asked of {}, group list misses {missing:?} (coordinated by {:?})",
            broker.addr,
            missing
                .iter()
                .map(|group| coordinator_of(&brokers, group))
                .collect::<Vec<_>>()
        );
    }
}
