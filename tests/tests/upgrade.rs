//! Upgrading a data directory that a standalone broker wrote (before single
//! nodes became one-voter clusters): `tests/fixtures/standalone-v1.tar.gz`,
//! made by `scripts/make-standalone-fixture.sh` with the binaries of
//! 0c5fd8a, opens under today's broker with every record, offset, producer
//! state, group offset and audit record intact; the migration is logged,
//! happens once, and survives a kill -9 at each of its steps.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use corelog_broker::migration::CRASH_AT_ENV;
use corelog_client::admin::ResetTarget;
use corelog_client::{Admin, ClientConfig, Consumer, ConsumerConfig, StartFrom};
use corelog_tests::{Broker, free_port};
use corelog_wire::batch::{self, BatchLimits};
use corelog_wire::error::ErrorCode;
use serde_json::Value;

/// Topics the fixture holds, with their partition counts.
const TOPICS: [(&str, u32); 3] = [("orders", 3), ("orders.dlq", 1), ("ledger", 1)];
/// Records the fixture's `ledger` topic holds.
const LEDGER_RECORDS: u64 = 2_600;

/// The fixture, unpacked into a fresh temporary directory.
struct Fixture {
    dir: tempfile::TempDir,
    manifest: Value,
}

impl Fixture {
    fn unpack() -> Fixture {
        let archive = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/standalone-v1.tar.gz");
        let dir = tempfile::tempdir().unwrap();
        let status = Command::new("tar")
            .arg("-xzf")
            .arg(&archive)
            .arg("-C")
            .arg(dir.path())
            .status()
            .expect("tar runs");
        assert!(status.success(), "unpacking {}", archive.display());
        let manifest = std::fs::read(dir.path().join("manifest.json")).unwrap();
        Fixture {
            manifest: serde_json::from_slice(&manifest).unwrap(),
            dir,
        }
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn log(&self) -> PathBuf {
        self.dir.path().join("broker.log")
    }

    /// A broker on the fixture, not started. Producer state is kept far
    /// longer than the fixture's age (its producers last appended when it
    /// was made).
    fn broker(&self, shards: &str) -> Broker {
        let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
        Broker::unstarted(
            addr,
            &self.data(),
            &[
                "--shards",
                shards,
                "--producer-state-retention-ms",
                "3153600000000",
            ],
        )
        .with_output_log(self.log())
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(self.log()).unwrap_or_default()
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Every record of a topic: (partition, offset) → (key, value, schema).
type Records = BTreeMap<(u32, u64), (String, String, Option<u32>)>;

async fn read_all(bootstrap: &str, topic: &str, expected: usize) -> Records {
    let mut consumer = Consumer::connect(ConsumerConfig::new(bootstrap))
        .await
        .unwrap();
    consumer
        .assign_topic(topic, StartFrom::Earliest)
        .await
        .unwrap();
    let mut records = Records::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while (records.len() < expected || !consumer.caught_up()) && Instant::now() < deadline {
        for record in consumer.poll().await.unwrap().records {
            let text = |bytes: Option<bytes::Bytes>| {
                String::from_utf8(bytes.unwrap_or_default().to_vec()).unwrap()
            };
            records.insert(
                (record.partition, record.offset.0),
                (
                    text(record.key),
                    text(record.value),
                    record.schema.map(|schema| schema.0),
                ),
            );
        }
    }
    records
}

/// The committed offsets of `group` the manifest recorded:
/// (topic, partition) → next offset.
fn manifest_offsets(manifest: &Value, group: &str) -> BTreeMap<(String, u32), u64> {
    manifest["groups"][group]["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|entry| {
            (
                (
                    entry["partition"]["topic"].as_str().unwrap().to_owned(),
                    u32::try_from(entry["partition"]["partition"].as_u64().unwrap()).unwrap(),
                ),
                entry["committed_offset"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// The values of the records of `topic`/`partition` from `offset` (control
/// batches left out).
fn fetch_from(bootstrap: &str, topic: &str, partition: u32, offset: u64) -> Vec<String> {
    let mut client = corelog_tests::Client::connect(bootstrap.parse().unwrap()).unwrap();
    client.handshake().unwrap();
    let fetched = client.fetch(topic, partition, offset, 0);
    assert_eq!(fetched.code, ErrorCode::None, "{topic}/{partition}");
    corelog_tests::values(&fetched.records)
}

/// Checks that the broker at `bootstrap` serves everything the fixture
/// held, unchanged, and nothing more.
async fn check_everything_survived(bootstrap: &str, manifest: &Value) {
    let admin = Admin::connect(ClientConfig::new(bootstrap)).await.unwrap();
    // Topics, with their partition counts and settings.
    for (name, partitions) in TOPICS {
        let described = admin.describe_topic(name).await.unwrap();
        assert_eq!(described.partitions, partitions, "{name}");
        let expected = manifest["topics"]
            .as_array()
            .unwrap()
            .iter()
            .find(|topic| topic["name"] == name)
            .unwrap();
        for (key, value) in expected["configs"].as_object().unwrap() {
            assert_eq!(
                described.configs.get(key).map(String::as_str),
                value.as_str(),
                "{name} {key}"
            );
        }
        // Every record is still there, at its offset; past the standalone
        // end are only the epoch-start markers of the leaderships since.
        for (state, before) in described
            .partition_states
            .iter()
            .zip(expected["partition_states"].as_array().unwrap())
        {
            let end = before["high_watermark"].as_u64().unwrap();
            assert_eq!(state.log_start_offset, 0, "{name}/{}", state.partition);
            assert!(state.high_watermark > end, "{name}/{}", state.partition);
            let after = fetch_from(bootstrap, name, state.partition, end);
            assert!(
                after.is_empty(),
                "{name}/{}: records past the standalone end: {after:?}",
                state.partition
            );
        }
    }
    // Every order event, at its partition and offset.
    let orders = manifest["orders"].as_array().unwrap();
    let read = read_all(bootstrap, "orders", orders.len()).await;
    assert_eq!(read.len(), orders.len(), "every order event reads back");
    for record in orders {
        let at = (
            u32::try_from(record["partition"].as_u64().unwrap()).unwrap(),
            record["offset"].as_u64().unwrap(),
        );
        let (key, value, _) = &read[&at];
        assert_eq!(key, record["key"].as_str().unwrap(), "{at:?}");
        assert_eq!(value, record["value"].as_str().unwrap(), "{at:?}");
    }
    // The ledger: 2,600 records at offsets 0..2600, schema 2, two segments.
    let ledger = read_all(bootstrap, "ledger", LEDGER_RECORDS as usize).await;
    assert_eq!(ledger.len() as u64, LEDGER_RECORDS);
    for (index, ((partition, offset), (key, value, schema))) in ledger.iter().enumerate() {
        assert_eq!((*partition, *offset), (0, index as u64));
        assert_eq!(key, &format!("acct-{}", index % 17));
        assert!(
            value.starts_with(&format!("ledger entry {index:06} ")),
            "{value}"
        );
        assert_eq!(*schema, Some(2));
    }
    // Group offsets: the two groups that consumed through the group
    // protocol, and the one an audited reset moved.
    for group in ["search", "analytics", "replayer"] {
        let described = admin.describe_group(group).await.unwrap();
        let committed: BTreeMap<(String, u32), u64> = described
            .partitions
            .iter()
            .filter_map(|lag| {
                Some((
                    (lag.partition.topic.to_string(), lag.partition.partition),
                    lag.committed_offset?,
                ))
            })
            .collect();
        assert_eq!(committed, manifest_offsets(manifest, group), "{group}");
    }
    // The audit log: the quarantine and the reset, in order.
    let audit = admin.read_audit(None).await.unwrap();
    let kinds: Vec<(&str, &str)> = audit
        .iter()
        .map(|entry| (entry.kind, entry.group.as_str()))
        .collect();
    assert_eq!(
        kinds[..2],
        [("quarantine", "search"), ("offset-reset", "replayer")],
        "{audit:?}"
    );
}

/// Producer state survived: the ledger's last batch, sent again as its
/// producer would retry it, is answered with its original offset and not
/// stored twice.
fn check_producer_state(addr: SocketAddr) {
    let mut client = corelog_tests::Client::connect(addr).unwrap();
    client.handshake().unwrap();
    let limits = BatchLimits::default();
    let mut last = None;
    let mut offset = 0;
    while offset < LEDGER_RECORDS {
        let fetched = client.fetch("ledger", 0, offset, 1_000);
        assert_eq!(fetched.code, ErrorCode::None);
        for found in batch::batches(&fetched.records, &limits) {
            let found = found.unwrap();
            if found.header.base_offset.0 < LEDGER_RECORDS && !found.header.is_control() {
                last = Some((found.header, fetched.records.slice_ref(found.bytes)));
            }
        }
        offset = fetched.next_offset;
    }
    let (header, bytes) = last.expect("the ledger has batches");
    assert!(
        header.producer.is_idempotent(),
        "an idempotent producer wrote it"
    );
    let (code, base_offset) = client.produce("ledger", 0, &bytes);
    assert_eq!(code, ErrorCode::None);
    assert_eq!(
        base_offset,
        i64::try_from(header.base_offset.0).unwrap(),
        "a retry of the last batch gets its original offset"
    );
    let after = client.fetch("ledger", 0, LEDGER_RECORDS, 0);
    assert_eq!(after.code, ErrorCode::None);
    assert!(
        corelog_tests::values(&after.records).is_empty(),
        "nothing was stored twice: only leaders' markers follow the ledger"
    );
}

#[test]
fn a_standalone_data_directory_opens_with_every_record_offset_and_group_offset() {
    let fixture = Fixture::unpack();
    let mut broker = fixture.broker("2");
    broker.spawn();
    let bootstrap = broker.addr.to_string();
    let runtime = runtime();
    runtime.block_on(check_everything_survived(&bootstrap, &fixture.manifest));
    check_producer_state(broker.addr);
    let log = fixture.log_text();
    assert!(
        log.contains("migrating a standalone broker's data directory to a one-voter cluster"),
        "{log}"
    );
    assert!(log.contains("migration finished"), "{log}");
    assert!(!fixture.data().join("metadata").exists());
    assert!(fixture.data().join("metadata.migrated").exists());

    // New writes continue each log; a reset and a restart work as always.
    runtime.block_on(async {
        let admin = Admin::connect(ClientConfig::new(bootstrap.clone()))
            .await
            .unwrap();
        let producer = corelog_client::Producer::connect(corelog_client::ProducerConfig::new(
            bootstrap.clone(),
        ))
        .await
        .unwrap();
        let delivery = producer
            .send(corelog_client::ProducerRecord::new("ledger", "after the upgrade").key("acct-1"))
            .await
            .unwrap()
            .await
            .unwrap();
        assert!(delivery.offset.0 >= LEDGER_RECORDS);
        producer.close().await.unwrap();
        let reset = corelog_client::admin::ResetOffsets::new(
            "replayer",
            "ledger",
            ResetTarget::Earliest,
            "after the upgrade",
            "upgrade-test",
        );
        admin.reset_offsets(&reset).await.unwrap();
    });
    broker.terminate();
    broker.spawn();
    let log = fixture.log_text();
    assert_eq!(
        log.matches("migrating a standalone broker's data directory")
            .count(),
        1,
        "the migration runs once"
    );
    runtime.block_on(async {
        let records = read_all(&bootstrap, "ledger", LEDGER_RECORDS as usize + 1).await;
        assert_eq!(records.len() as u64, LEDGER_RECORDS + 1);
        let admin = Admin::connect(ClientConfig::new(bootstrap.clone()))
            .await
            .unwrap();
        let replayer = admin.describe_group("replayer").await.unwrap();
        assert_eq!(replayer.partitions[0].committed_offset, Some(0));
    });
}

#[test]
fn a_migration_killed_at_any_step_finishes_at_the_next_start_and_loses_nothing() {
    for step in ["replica-meta", "imported"] {
        let fixture = Fixture::unpack();
        let mut broker = fixture.broker("1");
        broker.set_env(CRASH_AT_ENV, Some(step));
        let exit = broker
            .try_spawn_logged(&fixture.log())
            .expect_err("the migration kills the broker");
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&exit),
            Some(9),
            "{step}: killed by SIGKILL: {exit}"
        );
        assert!(
            fixture.data().join("metadata").exists(),
            "{step}: the catalog stays until the migration finished"
        );
        broker.set_env(CRASH_AT_ENV, None);
        broker.spawn();
        runtime().block_on(check_everything_survived(
            &broker.addr.to_string(),
            &fixture.manifest,
        ));
        check_producer_state(broker.addr);
        let log = fixture.log_text();
        assert!(log.contains("migration finished"), "{step}: {log}");
        assert!(fixture.data().join("metadata.migrated").exists(), "{step}");
    }
}

#[test]
fn a_standalone_data_directory_is_refused_in_a_cluster_it_never_joined() {
    let fixture = Fixture::unpack();
    let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let voters = format!(
        "1@{addr},2@127.0.0.1:{},3@127.0.0.1:{}",
        free_port(),
        free_port()
    );
    let mut broker = Broker::unstarted(
        addr,
        &fixture.data(),
        &[
            "--node-id",
            "1",
            "--controller-voters",
            &voters,
            "--cluster-secret-file",
            &corelog_tests::process::test_cluster_secret_file()
                .display()
                .to_string(),
        ],
    );
    let exit = broker
        .try_spawn_logged(&fixture.log())
        .expect_err("a standalone directory does not join a cluster");
    assert_eq!(exit.code(), Some(1), "{exit}");
    let log = fixture.log_text();
    assert!(
        log.contains("holds the topic catalog of a standalone broker")
            && log.contains("without --controller-voters"),
        "{log}"
    );
    assert!(
        fixture.data().join("metadata").exists(),
        "nothing was changed"
    );
}
