//! Committed offsets belong to a topic, not to its name (issue 35, item
//! 17). Before, a topic deleted and created again under the same name
//! inherited its predecessor's group offsets: a group that had committed
//! 2 on the old `t` printed only the third record of the new `t`.
//!
//! Offsets are kept by topic id: the new topic starts each group afresh,
//! `group describe` shows the old topic's offsets as those of a deleted
//! topic, and `group delete-offsets` removes them (audited).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use corelog_tests::Broker;
use corelog_tests::cli::{corelog, failed, succeeded, text};
use corelog_tests::tenants::Tenants;

const PATIENCE: Duration = Duration::from_secs(60);

fn run(broker: &Broker, args: &[&str], stdin: Option<&str>) -> std::process::Output {
    corelog(&broker.addr.to_string(), args, stdin)
}

/// The JSON of `group describe group`.
fn described(broker: &Broker, group: &str) -> serde_json::Value {
    let output = run(broker, &["--json", "group", "describe", group], None);
    serde_json::from_str(&succeeded(&output)).unwrap()
}

/// `(topic, partition, committed, deleted)` of each partition a
/// description lists.
fn offsets(description: &serde_json::Value) -> Vec<(String, u64, Option<u64>, bool)> {
    description["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|entry| {
            (
                entry["partition"]["topic"].as_str().unwrap().to_owned(),
                entry["partition"]["partition"].as_u64().unwrap(),
                entry["committed_offset"].as_u64(),
                entry["topic_deleted"].as_bool().unwrap_or(false),
            )
        })
        .collect()
}

/// Deletes `topic` and creates it again once the broker lets it.
fn recreate(broker: &Broker, topic: &str) {
    succeeded(&run(broker, &["topic", "delete", topic], None));
    let deadline = Instant::now() + PATIENCE;
    loop {
        let created = run(
            broker,
            &["topic", "create", topic, "--partitions", "1"],
            None,
        );
        if created.status.success() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "cannot create {topic} again: {}",
            text(&created.stderr)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn a_recreated_topic_does_not_inherit_the_deleted_topics_group_offsets() {
    let mut broker = Broker::start(&[]);
    succeeded(&run(
        &broker,
        &["topic", "create", "t", "--partitions", "1"],
        None,
    ));
    succeeded(&run(
        &broker,
        &["produce", "--topic", "t"],
        Some("old-1\nold-2\nold-3\n"),
    ));
    let read = succeeded(&run(
        &broker,
        &["consume", "--topic", "t", "--group", "g", "--max", "2"],
        None,
    ));
    assert!(read.contains("old-2") && !read.contains("old-3"), "{read}");

    recreate(&broker, "t");
    succeeded(&run(
        &broker,
        &["produce", "--topic", "t"],
        Some("new-1\nnew-2\nnew-3\n"),
    ));
    let read = succeeded(&run(
        &broker,
        &["consume", "--topic", "t", "--group", "g"],
        None,
    ));
    for value in ["new-1", "new-2", "new-3"] {
        assert!(
            read.contains(value),
            "the group skipped {value} of the new t:\n{read}"
        );
    }

    // The old topic's offset is shown as such, beside the new one's.
    let both = offsets(&described(&broker, "g"));
    assert_eq!(
        both,
        [
            ("t".to_owned(), 0, Some(2), true),
            ("t".to_owned(), 0, Some(3), false)
        ],
        "{both:?}"
    );
    let text_output = succeeded(&run(&broker, &["group", "describe", "g"], None));
    assert!(text_output.contains("t (deleted)"), "{text_output}");

    // A restart replays __groups into the same offsets.
    broker.kill();
    broker.spawn();
    assert_eq!(offsets(&described(&broker, "g")), both);

    // delete-offsets needs a reason (a usage error without one), then
    // removes the deleted topic's offsets and leaves the live one's.
    let refused = run(
        &broker,
        &[
            "group",
            "delete-offsets",
            "g",
            "--topic",
            "t",
            "--deleted-only",
            "--reason",
            " ",
        ],
        None,
    );
    assert!(!refused.status.success());
    let refused = text(&refused.stderr);
    assert!(refused.contains("reason"), "{refused}");
    succeeded(&run(
        &broker,
        &[
            "group",
            "delete-offsets",
            "g",
            "--topic",
            "t",
            "--deleted-only",
            "--reason",
            "t was re-created",
        ],
        None,
    ));
    assert_eq!(
        offsets(&described(&broker, "g")),
        [("t".to_owned(), 0, Some(3), false)]
    );
    let audit = succeeded(&run(
        &broker,
        &["--json", "group", "audit", "--group", "g"],
        None,
    ));
    assert!(audit.contains("t was re-created"), "{audit}");
    broker.kill();
    broker.spawn();
    assert_eq!(
        offsets(&described(&broker, "g")),
        [("t".to_owned(), 0, Some(3), false)],
        "the deletion is durable"
    );
}

/// The live topic's offsets of a group that consumes it are its members'
/// business: delete-offsets refuses them while a member subscribes to
/// the topic, and removes them once the group is idle.
#[test]
fn delete_offsets_of_a_topic_the_group_consumes_waits_for_its_members() {
    let broker = Broker::start(&[]);
    succeeded(&run(
        &broker,
        &["topic", "create", "t", "--partitions", "1"],
        None,
    ));
    succeeded(&run(&broker, &["produce", "--topic", "t"], Some("a\nb\n")));
    let member = corelog_tests::cli::Running(corelog_tests::cli::spawn(
        &broker.addr.to_string(),
        &["consume", "--topic", "t", "--group", "busy", "--follow"],
    ));
    let delete = [
        "group",
        "delete-offsets",
        "busy",
        "--topic",
        "t",
        "--reason",
        "reprocess",
    ];
    // The group exists once the member joined; it committed once it read
    // both records.
    let deadline = Instant::now() + PATIENCE;
    loop {
        let output = run(&broker, &["--json", "group", "describe", "busy"], None);
        let description: serde_json::Value =
            serde_json::from_str(&text(&output.stdout)).unwrap_or_default();
        if output.status.success()
            && description["members"]
                .as_array()
                .is_some_and(|members| !members.is_empty())
            && offsets(&description).iter().any(|entry| entry.2 == Some(2))
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{description} {}",
            text(&output.stderr)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let refused = failed(&run(&broker, &delete, None));
    assert!(refused.contains("GROUP_SUBSCRIBED_TO_TOPIC"), "{refused}");
    let _stopped = member.stop();
    let deadline = Instant::now() + PATIENCE;
    loop {
        let output = run(&broker, &delete, None);
        if output.status.success() {
            break;
        }
        assert!(Instant::now() < deadline, "{}", text(&output.stderr));
        std::thread::sleep(Duration::from_millis(500));
    }
    assert!(offsets(&described(&broker, "busy")).is_empty());
}

/// Deleting offsets moves a group as a reset does: a tenant with only
/// group-read on the group is refused, and with group-admin the deletion is
/// audited under her login.
#[test]
fn delete_offsets_needs_group_admin_and_is_audited_under_the_login() {
    let tenants = Tenants::start(&["alice"], &[("tenant-a.orders", 1)], &[]);
    let _produced = tenants.ok(
        "admin",
        &["produce", "--topic", "tenant-a.orders"],
        Some("a\nb\n"),
    );
    let _consumed = tenants.ok(
        "admin",
        &[
            "consume",
            "--topic",
            "tenant-a.orders",
            "--group",
            "tenant-a.g",
            "--max",
            "1",
        ],
        None,
    );
    tenants.grant_prefix("alice", "tenant-a.", &["describe", "fetch", "group-read"]);
    let delete = [
        "group",
        "delete-offsets",
        "tenant-a.g",
        "--topic",
        "tenant-a.orders",
        "--reason",
        "reprocess",
    ];
    let refused = tenants.refused("alice", &delete, None);
    assert!(refused.contains("GROUP_AUTHORIZATION_FAILED"), "{refused}");
    let kept = tenants.ok(
        "admin",
        &["--json", "group", "describe", "tenant-a.g"],
        None,
    );
    let kept: serde_json::Value = serde_json::from_str(&kept).unwrap();
    assert_eq!(
        offsets(&kept),
        [("tenant-a.orders".to_owned(), 0, Some(1), false)]
    );

    tenants.grant(&[
        "--allow",
        "alice",
        "--operation",
        "group-admin",
        "--group",
        "tenant-a.g",
    ]);
    let deleted = tenants.ok("alice", &[&["--json"][..], &delete[..]].concat(), None);
    let deleted: serde_json::Value = serde_json::from_str(&deleted).unwrap();
    assert_eq!(deleted["deleted"][0]["committed_offset"], 1, "{deleted}");
    let gone = tenants.ok(
        "admin",
        &["--json", "group", "describe", "tenant-a.g"],
        None,
    );
    let gone: serde_json::Value = serde_json::from_str(&gone).unwrap();
    assert!(offsets(&gone).is_empty(), "{gone}");
    let audit = tenants.ok(
        "admin",
        &["--json", "group", "audit", "--group", "tenant-a.g"],
        None,
    );
    let entries: serde_json::Value = serde_json::from_str(&audit).unwrap();
    let entry = entries
        .as_array()
        .unwrap()
        .iter()
        .find(|entry| entry["reason"].as_str().unwrap().contains("reprocess"))
        .unwrap_or_else(|| panic!("no audit record of the deletion: {audit}"));
    assert_eq!(entry["principal"], "alice", "{audit}");
    assert_eq!(entry["before"], serde_json::json!([[0, 1]]), "{audit}");
    assert_eq!(entry["after"], serde_json::json!([[0, -1]]), "{audit}");
}
