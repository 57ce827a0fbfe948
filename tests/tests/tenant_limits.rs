//! Per-principal limits on topics, partitions and consumer groups (issue
//! 35, item 2): one tenant could create topics and groups without bound
//! and so fill the cluster's metadata and every broker's `/metrics` (3,000
//! groups grew `/metrics` from 44 KB to 7.2 MB in 0.7 s). A principal now
//! owns at most its limit of topics and partitions (counted by the
//! controller before it commits a topic) and creates at most its limit of
//! groups on a coordinator; an administrator changes the limits with a
//! quota entry, and super users are exempt.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use corelog_tests::tenants::Tenants;

fn create(tenants: &Tenants, user: &str, topic: &str, partitions: u32) -> Result<(), String> {
    let output = tenants.run(
        user,
        &[
            "topic",
            "create",
            topic,
            "--partitions",
            &partitions.to_string(),
        ],
        None,
    );
    if output.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&output.stderr).into_owned())
    }
}

#[track_caller]
fn refused_by_limit(result: Result<(), String>, limit: &str) {
    let error = result.expect_err("the creation was served");
    assert!(error.contains("PRINCIPAL_LIMIT_REACHED"), "{error}");
    assert!(error.contains(&format!("may own {limit}")), "{error}");
}

#[test]
fn a_tenant_stops_at_its_topic_and_partition_limits() {
    let mut tenants = Tenants::start(&["alice", "bob"], &[], &[]);
    tenants.grant_prefix("alice", "alice.", &["create", "delete", "describe"]);
    tenants.grant_prefix("bob", "bob.", &["create", "describe"]);
    let set = tenants.ok(
        "admin",
        &[
            "quota",
            "set",
            "user:alice",
            "--topics",
            "2",
            "--partitions",
            "5",
        ],
        None,
    );
    assert!(set.contains("set the quota of user:alice"), "{set}");
    let described = tenants.ok("admin", &["quota", "describe", "user:alice"], None);
    assert!(described.contains("TOPICS"), "{described}");

    create(&tenants, "alice", "alice.a", 2).unwrap();
    refused_by_limit(create(&tenants, "alice", "alice.b", 4), "5 partitions");
    create(&tenants, "alice", "alice.b", 3).unwrap();
    refused_by_limit(create(&tenants, "alice", "alice.c", 1), "2 topics");
    // Another tenant has its own budget, and a super user has none.
    create(&tenants, "bob", "bob.a", 8).unwrap();
    create(&tenants, "admin", "alice.by-admin", 8).unwrap();

    // The owners are part of the metadata: a restarted broker replays them.
    tenants.broker.terminate();
    tenants.broker.spawn();
    refused_by_limit(create(&tenants, "alice", "alice.c", 1), "2 topics");
    // A deleted topic gives its share back.
    let _served = tenants.ok("alice", &["topic", "delete", "alice.a"], None);
    create(&tenants, "alice", "alice.c", 2).unwrap();
    // Removing the quota brings the defaults back (1,000 topics).
    let _served = tenants.ok("admin", &["quota", "remove", "user:alice"], None);
    create(&tenants, "alice", "alice.d", 1).unwrap();
}

#[test]
fn the_default_entry_limits_every_principal_without_its_own() {
    let tenants = Tenants::start(&["alice", "bob"], &[], &[]);
    tenants.grant_prefix("alice", "alice.", &["create"]);
    tenants.grant_prefix("bob", "bob.", &["create"]);
    let _served = tenants.ok("admin", &["quota", "set", "user:*", "--topics", "1"], None);
    let _served = tenants.ok(
        "admin",
        &["quota", "set", "user:bob", "--topics", "3"],
        None,
    );
    create(&tenants, "alice", "alice.a", 1).unwrap();
    refused_by_limit(create(&tenants, "alice", "alice.b", 1), "1 topics");
    for topic in ["bob.a", "bob.b", "bob.c"] {
        create(&tenants, "bob", topic, 1).unwrap();
    }
    refused_by_limit(create(&tenants, "bob", "bob.d", 1), "3 topics");
}
