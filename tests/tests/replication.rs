//! Failover of a 3-broker cluster as real processes: an acknowledged
//! append survives kill -9 of the partition leader (C1), a partition
//! without a majority of live replicas refuses appends (C2), readers see
//! only committed records (C4), an idempotent retry across a failover
//! returns the original offset (C5), a frozen and resumed leader is fenced
//! and its uncommitted tail never shows (C11), and the controller's
//! metadata and a group's committed offsets survive the death of the
//! broker holding them.
//!
//! Every cluster fences a silent broker after 1 s
//! (`--broker-session-timeout-ms 1000`). Topics have one partition and
//! replication factor 3, so the leader is one broker, read from metadata;
//! broker `n` is node id `n` (see [`start_cluster`]). The tests run one at
//! a time: three brokers per test, several tests at once, would starve one
//! another's heartbeats on a small machine and fail for the wrong reason.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use corelog_client::group::{GroupConfig, GroupConsumer, TopicPartition};
use corelog_client::{
    Admin, ClientError, Consumer, ConsumerConfig, Producer, ProducerRecord, StartFrom,
};
use corelog_tests::cluster_client::{
    Leader, PartitionLog, SteadyProducer, WireCluster, client_config, client_runtime,
    connect_producer, error_code, producer_config, serial, try_ask,
};
use corelog_tests::wire_client::{decode_produce, produce_request};
use corelog_tests::{Broker, Client, batch, start_cluster};
use corelog_wire::batch::ProducerIdentity;
use corelog_wire::error::ErrorCode;
use corelog_wire::frame::ApiKey;
use corelog_wire::message;
use corelog_wire::message::find_coordinator::FindCoordinatorRequest;
use corelog_wire::message::init_producer_id::InitProducerIdRequest;

/// Flags of every broker: fence a silent broker after 1 s (default 2 s),
/// so that failovers take about a second.
const CLUSTER_ARGS: &[&str] = &["--broker-session-timeout-ms", "1000"];

/// Longest wait for any one condition (a leader, a metadata change, an
/// acknowledgement).
const DEADLINE: Duration = Duration::from_secs(20);

/// Longest acceptable time from kill -9 of a leader to the first
/// acknowledged append on its successor.
const FAILOVER_MAX: Duration = Duration::from_secs(10);

/// The topic of each test: 1 partition, replication factor 3.
const TOPIC: &str = "events";

/// The value at `offset` in a log read with [`Cluster::read_committed`].
fn value_at(log: &[(u64, String)], offset: u64) -> Option<&str> {
    log.iter()
        .find(|(at, _)| *at == offset)
        .map(|(_, value)| value.as_str())
}

/// How many times `value` appears in a log.
fn occurrences(log: &[(u64, String)], value: &str) -> usize {
    log.iter().filter(|(_, found)| found == value).count()
}

/// Three brokers, each a controller voter, and which of them the test
/// froze (SIGSTOP): a frozen broker is never asked anything, since it
/// would not answer.
struct Cluster {
    brokers: Vec<Broker>,
    paused: BTreeSet<u32>,
}

impl Cluster {
    /// Starts three brokers and waits until each sees all three and a
    /// controller leader.
    fn start() -> Cluster {
        let cluster = Cluster {
            brokers: start_cluster(3, CLUSTER_ARGS),
            paused: BTreeSet::new(),
        };
        for id in cluster.ids() {
            cluster.wait_metadata(id, "three registered brokers and a controller", |found| {
                found.brokers.len() == 3 && found.controller_id.is_some()
            });
        }
        cluster
    }

    /// Running and not frozen.
    fn is_up(&self, id: u32) -> bool {
        self.broker(id).is_running() && !self.paused.contains(&id)
    }

    fn up(&self) -> Vec<u32> {
        self.answering()
    }

    /// kill -9 of broker `id`.
    fn kill(&mut self, id: u32) {
        self.paused.remove(&id);
        self.brokers[id as usize - 1].kill();
    }

    /// SIGSTOP of broker `id`.
    fn pause(&mut self, id: u32) {
        self.broker(id).pause();
        self.paused.insert(id);
    }

    /// SIGCONT of broker `id`.
    fn resume(&mut self, id: u32) {
        self.broker(id).resume();
        self.paused.remove(&id);
    }

    /// Starts a killed broker again on its ports and data directory.
    fn restart(&mut self, id: u32) {
        self.brokers[id as usize - 1].spawn();
    }

    /// Addresses of the live brokers, for the client library.
    fn bootstrap(&self) -> Vec<String> {
        self.up()
            .into_iter()
            .map(|id| self.broker(id).addr.to_string())
            .collect()
    }

    /// A connection to broker `id` whose reads give up after 3 s.
    fn client(&self, id: u32) -> Option<Client> {
        self.client_with_timeout(id, Duration::from_secs(3))
    }

    /// The controller leader, by the metadata of a live broker.
    fn controller(&self) -> u32 {
        let id = self.up()[0];
        self.wait_metadata(id, "a controller leader", |found| {
            found.controller_id.is_some()
        })
        .controller_id
        .unwrap()
    }

    /// Creates `name` with 1 partition and replication factor 3, waits
    /// until every live broker sees one replica on each broker, and
    /// returns its first leader.
    fn create_topic(&self, name: &str) -> Leader {
        self.create_replicated_topic(name);
        for id in self.up() {
            let found = self.wait_metadata(id, "the topic with three replicas", |found| {
                found.topics.iter().any(|topic| {
                    topic.name == name
                        && topic.partitions.len() == 1
                        && topic.partitions[0].replicas.len() == 3
                })
            });
            let topic = found
                .topics
                .iter()
                .find(|topic| topic.name == name)
                .unwrap();
            let replicas: BTreeSet<u32> = topic.partitions[0].replicas.iter().copied().collect();
            assert_eq!(
                replicas,
                BTreeSet::from([1, 2, 3]),
                "replication factor 3 places one replica on each broker"
            );
        }
        self.wait_for_leader(name, 0, None)
    }

    /// Reads partition 0 of `topic` from its current leader once the high
    /// watermark is above `through`, retrying across leader changes.
    fn read_committed(&self, topic: &str, through: u64) -> (Leader, Vec<(u64, String)>) {
        let deadline = Instant::now() + DEADLINE;
        let mut last = String::new();
        while Instant::now() < deadline {
            let leader = self.wait_for_leader(topic, 0, None);
            match self.read_partition(leader.id, topic, 0, Duration::from_secs(3)) {
                Ok(PartitionLog {
                    records: log,
                    high_watermark,
                }) if high_watermark > through => {
                    let offsets: Vec<u64> = log.iter().map(|(at, _)| *at).collect();
                    assert!(
                        offsets.windows(2).all(|pair| pair[0] < pair[1]),
                        "offsets read from broker {} are unique and increasing: {offsets:?}",
                        leader.id
                    );
                    return (leader, log);
                }
                Ok(PartitionLog { high_watermark, .. }) => {
                    last = format!(
                        "broker {}: high watermark {high_watermark}, not above {through}",
                        leader.id
                    );
                }
                Err(error) => last = error,
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("{topic}/0 could not be read through offset {through} within {DEADLINE:?}: {last}");
    }

    /// A fresh producer id and epoch, over the raw protocol.
    fn init_producer_id(&self) -> (i64, i16) {
        let request = InitProducerIdRequest {
            transactional_id: None,
            producer_id: -1,
            producer_epoch: -1,
        };
        let deadline = Instant::now() + DEADLINE;
        let mut last = String::new();
        while Instant::now() < deadline {
            for id in self.up() {
                let Some(mut client) = self.client(id) else {
                    continue;
                };
                match try_ask(&mut client, &request) {
                    Ok(found) if found.producer_id >= 0 && found.producer_epoch >= 0 => {
                        return (found.producer_id, found.producer_epoch);
                    }
                    Ok(found) => last = format!("{found:?}"),
                    Err(error) => last = error,
                }
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("no producer id within {DEADLINE:?}: {last}");
    }

    /// The coordinator of `group` by FindCoordinator on a live broker,
    /// other than `not`.
    fn find_coordinator(&self, group: &str, not: Option<u32>) -> u32 {
        let request = FindCoordinatorRequest {
            group: group.to_owned(),
        };
        let deadline = Instant::now() + DEADLINE;
        let mut last = String::new();
        while Instant::now() < deadline {
            for id in self.up() {
                let Some(mut client) = self.client(id) else {
                    continue;
                };
                match try_ask(&mut client, &request) {
                    Ok(found)
                        if error_code(found.error_code) == ErrorCode::None
                            && Some(found.node_id) != not
                            && self.is_up(found.node_id) =>
                    {
                        return found.node_id;
                    }
                    Ok(found) => last = format!("broker {id}: {found:?}"),
                    Err(error) => last = format!("broker {id}: {error}"),
                }
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!(
            "no live coordinator of group {group} other than {not:?} within {DEADLINE:?}: {last}"
        );
    }
}

impl WireCluster for Cluster {
    fn broker(&self, id: u32) -> &Broker {
        &self.brokers[id as usize - 1]
    }

    fn ids(&self) -> Vec<u32> {
        (1..=self.brokers.len() as u32).collect()
    }

    fn answers(&self, id: u32) -> bool {
        self.is_up(id)
    }
}

/// Sends `value` to partition 0 of `topic` and waits for its
/// acknowledgement: its offset.
async fn produce_acked(producer: &Producer, topic: &str, value: &str) -> u64 {
    let record = ProducerRecord::new(topic, value.to_owned()).partition(0);
    let delivery = producer
        .send(record)
        .await
        .unwrap_or_else(|error| panic!("{value} was not accepted by the producer: {error}"));
    match tokio::time::timeout(Duration::from_secs(30), delivery).await {
        Ok(Ok(delivered)) => delivered.offset.0,
        Ok(Err(error)) => panic!("{value} was not acknowledged: {error}"),
        Err(_) => panic!("no outcome for {value} within 30 s"),
    }
}

/// Test 1 (C1): kill -9 of the leader after an acknowledged append; the
/// new leader serves the record at its offset. Prints the failover time.
#[test]
fn an_acknowledged_append_survives_kill_9_of_the_leader() {
    let _serial = serial();
    let rt = client_runtime();
    let mut cluster = Cluster::start();
    cluster.create_topic(TOPIC);
    let producer = rt.block_on(connect_producer(
        producer_config(cluster.bootstrap()),
        DEADLINE,
    ));
    let before = rt.block_on(produce_acked(&producer, TOPIC, "before-failover"));
    let old = cluster.wait_for_leader(TOPIC, 0, None);

    let killed_at = Instant::now();
    cluster.kill(old.id);
    let after = rt.block_on(produce_acked(&producer, TOPIC, "after-failover"));
    let failover = killed_at.elapsed();
    println!(
        "failover: kill -9 of leader {} to the first acknowledged append: {failover:?}",
        old.id
    );
    assert!(
        failover < FAILOVER_MAX,
        "the first append after kill -9 of the leader took {failover:?}, over {FAILOVER_MAX:?}"
    );

    let new = cluster.wait_for_leader(TOPIC, 0, Some(old.id));
    assert!(
        new.epoch > old.epoch,
        "the new leader {} has epoch {}, not above the old leader's {} (C11)",
        new.id,
        new.epoch,
        old.epoch
    );
    assert!(
        after > before,
        "the append after failover got offset {after}, not after the acknowledged {before}"
    );
    let (reader, log) = cluster.read_committed(TOPIC, after);
    assert_eq!(
        value_at(&log, before),
        Some("before-failover"),
        "the record acknowledged at offset {before} before kill -9 of leader {} is not there on the new leader {} (C1); log: {log:?}",
        old.id,
        reader.id
    );
    assert_eq!(
        value_at(&log, after),
        Some("after-failover"),
        "log: {log:?}"
    );
    assert_eq!(occurrences(&log, "before-failover"), 1, "log: {log:?}");
    rt.block_on(producer.close()).unwrap();
}

/// A consumer reading from the leader reads on from its successor after
/// kill -9 of the leader, which stays down: a broker it cannot connect to
/// makes it look the leader up again (it kept fetching from the dead
/// leader's address, refusing every poll, until a fix).
#[test]
fn a_consumer_reads_on_from_the_new_leader_after_kill_9_of_the_leader() {
    let _serial = serial();
    let rt = client_runtime();
    let mut cluster = Cluster::start();
    cluster.create_topic(TOPIC);
    let producer = rt.block_on(connect_producer(
        producer_config(cluster.bootstrap()),
        DEADLINE,
    ));
    rt.block_on(produce_acked(&producer, TOPIC, "before-failover"));
    let mut consumer = rt.block_on(async {
        let mut consumer = Consumer::connect(ConsumerConfig {
            client: client_config(cluster.bootstrap()),
            fetch_max_wait: Duration::from_millis(100),
            ..ConsumerConfig::default()
        })
        .await
        .unwrap();
        consumer
            .assign_topic(TOPIC, StartFrom::Earliest)
            .await
            .unwrap();
        consumer
    });
    let read_until = |consumer: &mut Consumer, value: &str| {
        rt.block_on(async {
            let deadline = Instant::now() + DEADLINE;
            let mut errors = Vec::new();
            while Instant::now() < deadline {
                match consumer.poll().await {
                    Ok(polled) => {
                        if polled
                            .records
                            .iter()
                            .any(|record| record.value.as_deref() == Some(value.as_bytes()))
                        {
                            return;
                        }
                    }
                    // Polls fail while the leader is away; a reader retries.
                    Err(error) => {
                        errors.push(error.to_string());
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
            }
            let last = errors.last().cloned().unwrap_or_default();
            panic!(
                "{value} was not read within {DEADLINE:?}; {} failed polls, the last: {last}",
                errors.len()
            );
        });
    };
    read_until(&mut consumer, "before-failover");
    let old = cluster.wait_for_leader(TOPIC, 0, None);
    cluster.kill(old.id);
    rt.block_on(produce_acked(&producer, TOPIC, "after-failover"));
    read_until(&mut consumer, "after-failover");
    rt.block_on(producer.close()).unwrap();
}

/// Test 2 (C1, C5): kill -9 of the leader while a producer appends
/// continuously; every acknowledged record is afterwards at its offset
/// with its value, once, and nothing that was never sent appears.
#[test]
fn kill_9_of_the_leader_during_appends_loses_no_acknowledged_record() {
    let _serial = serial();
    let rt = client_runtime();
    let mut cluster = Cluster::start();
    cluster.create_topic(TOPIC);
    let producer = rt.block_on(connect_producer(
        producer_config(cluster.bootstrap()),
        DEADLINE,
    ));

    let load = SteadyProducer::start(&rt, producer, TOPIC, 0, Duration::from_millis(2));
    load.wait_acked(100, "appends before the failover", DEADLINE);
    let old = cluster.wait_for_leader(TOPIC, 0, None);
    let at_kill = load.acked_count();
    let killed_at = Instant::now();
    cluster.kill(old.id);
    load.wait_more(200, "appends after kill -9 of the leader", DEADLINE);
    println!(
        "appends resumed after kill -9 of leader {}: {} more acknowledged in {:?}",
        old.id,
        load.acked_count() - at_kill,
        killed_at.elapsed()
    );
    let outcome = load.finish(&rt);
    println!(
        "{} sent, {} acknowledged, {} failed (first failures: {:?})",
        outcome.sent,
        outcome.acked.len(),
        outcome.failed.len(),
        outcome.failed.iter().take(3).collect::<Vec<_>>()
    );
    let sent: BTreeSet<String> = (0..outcome.sent)
        .map(|index| format!("r-{index}"))
        .collect();
    let by_offset = outcome.acked;
    let through = *by_offset.keys().next_back().unwrap();
    let (reader, log) = cluster.read_committed(TOPIC, through);
    let stored: BTreeMap<u64, &str> = log
        .iter()
        .map(|(at, value)| (*at, value.as_str()))
        .collect();
    for (offset, value) in &by_offset {
        assert_eq!(
            stored.get(offset).copied(),
            Some(value.as_str()),
            "acknowledged record {value} at offset {offset} is missing or different after kill -9 of leader {} (read from {}) (C1)",
            old.id,
            reader.id
        );
    }
    let mut seen = BTreeSet::new();
    for (offset, value) in &log {
        assert!(
            sent.contains(value),
            "offset {offset} holds {value:?}, which was never sent"
        );
        assert!(
            seen.insert(value.as_str()),
            "{value} is stored twice (again at offset {offset}): the idempotent producer's retries duplicated it (C5)"
        );
    }
}

/// Test 3 (C11): SIGSTOP of the leader; a new leader takes appends; the
/// resumed old leader follows it, refuses writes with NOT_LEADER, never
/// acknowledges the append it was handed while frozen, and converges
/// with the others (the partition commits through it later).
#[test]
fn a_frozen_leader_is_replaced_and_fenced_when_it_resumes() {
    let _serial = serial();
    let rt = client_runtime();
    let mut cluster = Cluster::start();
    cluster.create_topic(TOPIC);
    let producer = rt.block_on(connect_producer(
        producer_config(cluster.bootstrap()),
        DEADLINE,
    ));
    let a = rt.block_on(produce_acked(&producer, TOPIC, "a"));
    rt.block_on(producer.close()).unwrap();
    let old = cluster.wait_for_leader(TOPIC, 0, None);

    // A connection opened before the freeze: the append sent on it waits
    // in the socket and reaches the old leader only when it resumes.
    let mut stale = cluster
        .client_with_timeout(old.id, DEADLINE)
        .expect("the leader answers");
    cluster.pause(old.id);
    let paused_at = Instant::now();
    let zombie = batch("zombie", "k", 1, ProducerIdentity::NONE);
    let mut request = produce_request(TOPIC, 0, zombie.len());
    request.timeout_ms = 3_000;
    stale
        .send_frame(
            ApiKey::Produce,
            &message::encode_request(&request, &zombie).unwrap(),
        )
        .unwrap();

    let new = cluster.wait_for_leader(TOPIC, 0, Some(old.id));
    assert!(
        new.epoch > old.epoch,
        "the new leader {} has epoch {}, not above the frozen leader's {}",
        new.id,
        new.epoch,
        old.epoch
    );
    // A producer that knows only the live brokers appends on the new leader.
    let producer = rt.block_on(connect_producer(
        producer_config(cluster.bootstrap()),
        DEADLINE,
    ));
    let b = rt.block_on(produce_acked(&producer, TOPIC, "b"));
    println!(
        "SIGSTOP of leader {} to an acknowledged append on leader {}: {:?}",
        old.id,
        new.id,
        paused_at.elapsed()
    );

    cluster.resume(old.id);
    cluster.wait_metadata(
        old.id,
        "the resumed broker to learn of the new leader",
        |found| {
            found
                .topics
                .iter()
                .find(|topic| topic.name == TOPIC)
                .and_then(|topic| topic.partitions.first())
                .is_some_and(|partition| {
                    partition.leader.is_some_and(|leader| leader != old.id)
                        && partition.leader_epoch >= new.epoch
                })
        },
    );
    let (_, body) = stale
        .read_response()
        .expect("the resumed broker answers the append it received while frozen");
    let (answer, offset) = decode_produce(&body);
    assert_ne!(
        answer,
        ErrorCode::None,
        "the old leader acknowledged an append (offset {offset}) after being replaced (C11)"
    );
    let (answer, offset) = cluster
        .produce_once(
            old.id,
            TOPIC,
            &batch("misdirected", "k", 1, ProducerIdentity::NONE),
            3_000,
        )
        .expect("the resumed broker answers");
    assert_eq!(
        answer,
        ErrorCode::NotLeader,
        "the resumed old leader {} must refuse writes with NOT_LEADER (offset {offset})",
        old.id
    );

    let c = rt.block_on(produce_acked(&producer, TOPIC, "c"));
    // Kill the new leader: the partition now commits only through the
    // resumed broker and the third one, so the next acknowledged append
    // shows that the resumed broker dropped its uncommitted tail and
    // follows the committed log.
    cluster.kill(new.id);
    let d = rt.block_on(produce_acked(&producer, TOPIC, "d"));
    let (last, log) = cluster.read_committed(TOPIC, d);
    println!(
        "after kill -9 of leader {}, broker {} leads (the resumed one is {})",
        new.id, last.id, old.id
    );
    for (offset, value) in [(a, "a"), (b, "b"), (c, "c"), (d, "d")] {
        assert_eq!(
            value_at(&log, offset),
            Some(value),
            "acknowledged {value} is not at offset {offset} on leader {}; log: {log:?}",
            last.id
        );
        assert_eq!(occurrences(&log, value), 1, "log: {log:?}");
    }
    assert_eq!(
        occurrences(&log, "zombie-0"),
        0,
        "the frozen leader's uncommitted append became visible; log: {log:?}"
    );
    assert_eq!(
        occurrences(&log, "misdirected-0"),
        0,
        "a write refused with NOT_LEADER was stored; log: {log:?}"
    );
    rt.block_on(producer.close()).unwrap();
}

/// Test 4 (C2): with one of three replicas gone appends continue; with two
/// gone the leader refuses them with NOT_ENOUGH_REPLICAS in bounded time,
/// and the client does not acknowledge them; with one back they succeed.
#[test]
fn without_a_majority_appends_are_refused_until_a_replica_returns() {
    let _serial = serial();
    let rt = client_runtime();
    let mut cluster = Cluster::start();
    cluster.create_topic(TOPIC);
    let producer = rt.block_on(connect_producer(
        producer_config(cluster.bootstrap()),
        DEADLINE,
    ));
    // Gives up after 4 s: connected now, since without a quorum the
    // cluster hands out no producer ids.
    let mut impatient = producer_config(cluster.bootstrap());
    impatient.client.request_timeout = Duration::from_secs(3);
    impatient.ack_timeout = Duration::from_secs(2);
    impatient.delivery_timeout = Duration::from_secs(4);
    let impatient = rt.block_on(connect_producer(impatient, DEADLINE));
    let a = rt.block_on(produce_acked(&producer, TOPIC, "a"));
    let leader = cluster.wait_for_leader(TOPIC, 0, None);
    let followers: Vec<u32> = cluster
        .ids()
        .into_iter()
        .filter(|&id| id != leader.id)
        .collect();

    cluster.kill(followers[0]);
    let b = rt.block_on(produce_acked(&producer, TOPIC, "b"));

    cluster.kill(followers[1]);
    let started = Instant::now();
    let (answer, offset) = cluster
        .produce_once(
            leader.id,
            TOPIC,
            &batch("refused", "k", 1, ProducerIdentity::NONE),
            2_000,
        )
        .expect("the last live replica answers");
    let waited = started.elapsed();
    assert_eq!(
        answer,
        ErrorCode::NotEnoughReplicas,
        "with 1 of 3 replicas alive, an append to leader {} must be refused with NOT_ENOUGH_REPLICAS (C2); got offset {offset}",
        leader.id
    );
    assert!(
        waited < Duration::from_secs(10),
        "the refusal took {waited:?}, not bounded by the 2 s produce timeout"
    );
    let outcome = rt.block_on(async {
        impatient
            .send(ProducerRecord::new(TOPIC, "unacknowledged").partition(0))
            .await?
            .await
    });
    match outcome {
        Ok(delivered) => panic!(
            "a record was acknowledged at offset {} with 1 of 3 replicas alive (C2)",
            delivered.offset.0
        ),
        Err(error) => {
            let names_it = error.code() == Some(ErrorCode::NotEnoughReplicas)
                || matches!(
                    &error,
                    ClientError::DeliveryTimeout { last_error: Some(last), .. }
                        if last.contains("NOT_ENOUGH_REPLICAS")
                );
            assert!(
                names_it,
                "the client's error for an append without a quorum names NOT_ENOUGH_REPLICAS: {error}"
            );
        }
    }

    cluster.restart(followers[0]);
    let restarted_at = Instant::now();
    let c = rt.block_on(produce_acked(&producer, TOPIC, "c"));
    println!(
        "appends resumed {:?} after broker {} came back",
        restarted_at.elapsed(),
        followers[0]
    );
    let (reader, log) = cluster.read_committed(TOPIC, c);
    for (offset, value) in [(a, "a"), (b, "b"), (c, "c")] {
        assert_eq!(
            value_at(&log, offset),
            Some(value),
            "acknowledged {value} is not at offset {offset} on leader {}; log: {log:?}",
            reader.id
        );
    }
    rt.block_on(producer.close()).unwrap();
    drop(impatient);
}

/// Test 5: kill -9 of the controller leader; another controller is
/// elected, the topic's metadata is intact, and the partition takes and
/// serves appends. (tests/cluster.rs covers the controller alone.)
#[test]
fn kill_9_of_the_controller_leader_keeps_metadata_and_appends() {
    let _serial = serial();
    let rt = client_runtime();
    let mut cluster = Cluster::start();
    cluster.create_topic(TOPIC);
    let producer = rt.block_on(connect_producer(
        producer_config(cluster.bootstrap()),
        DEADLINE,
    ));
    let a = rt.block_on(produce_acked(&producer, TOPIC, "a"));
    let controller = cluster.controller();
    let before = cluster
        .partition_metadata(controller, TOPIC, 0)
        .expect("the controller knows the topic");

    cluster.kill(controller);
    let survivor = cluster.up()[0];
    let after = cluster.wait_metadata(survivor, "a new controller leader", |found| {
        found
            .controller_id
            .is_some_and(|leader| leader != controller)
    });
    let topic = after
        .topics
        .iter()
        .find(|topic| topic.name == TOPIC)
        .unwrap_or_else(|| panic!("{TOPIC} is gone after the controller leader died: {after:?}"));
    assert_eq!(topic.partitions.len(), 1, "{topic:?}");
    assert_eq!(
        topic.partitions[0].replicas, before.replicas,
        "the replica set changed when the controller leader died"
    );

    let b = rt.block_on(produce_acked(&producer, TOPIC, "b"));
    let (reader, log) = cluster.read_committed(TOPIC, b);
    assert_eq!(
        value_at(&log, a),
        Some("a"),
        "the record acknowledged before kill -9 of controller {controller} is not at {a} on leader {}; log: {log:?}",
        reader.id
    );
    assert_eq!(value_at(&log, b), Some("b"), "log: {log:?}");
    rt.block_on(producer.close()).unwrap();
}

/// Test 6 (C5): an idempotent batch appended at offset O, then resent
/// unchanged (same producer id, epoch and sequence) to the new leader after
/// kill -9 of the old one, is answered with O and stored once; the next
/// sequence is accepted after it.
#[test]
fn an_idempotent_retry_after_failover_returns_the_original_offset() {
    let _serial = serial();
    let mut cluster = Cluster::start();
    cluster.create_topic(TOPIC);
    let (producer_id, producer_epoch) = cluster.init_producer_id();
    let identity = |base_sequence| ProducerIdentity {
        producer_id,
        producer_epoch,
        base_sequence,
    };
    let first = batch("idem", "k", 3, identity(0));
    let (old, original) = cluster
        .produce_to_leader(TOPIC, &first, None)
        .unwrap_or_else(|refused| panic!("the first idempotent batch was refused: {refused}"));

    cluster.kill(old.id);
    let (new, again) = cluster
        .produce_to_leader(TOPIC, &first, Some(old.id))
        .unwrap_or_else(|refused| {
            panic!("the retry of sequence 0 on the new leader was refused with {refused}: producer state was lost across the failover (C5)")
        });
    assert_eq!(
        again, original,
        "the retry of producer {producer_id} sequence 0 on new leader {} got offset {again}, not the original {original} (C5)",
        new.id
    );
    let next = batch("next", "k", 2, identity(3));
    let (_, after) = cluster
        .produce_to_leader(TOPIC, &next, Some(old.id))
        .unwrap_or_else(|refused| {
            panic!("sequence 3 after the failover was refused with {refused}: the new leader lost the producer's sequence (C5)")
        });
    assert!(
        after >= original + 3,
        "sequence 3 got offset {after}, inside the first batch at {original}"
    );

    let (reader, log) = cluster.read_committed(TOPIC, after + 1);
    for index in 0..3 {
        let value = format!("idem-{index}");
        assert_eq!(
            value_at(&log, original + index),
            Some(value.as_str()),
            "log on {}: {log:?}",
            reader.id
        );
        assert_eq!(
            occurrences(&log, &value),
            1,
            "{value} is stored more than once: the retry was appended again (C5); log: {log:?}"
        );
    }
    for value in ["next-0", "next-1"] {
        assert_eq!(occurrences(&log, value), 1, "log: {log:?}");
    }
}

/// Test 7: a group's committed offset is read intact from the new
/// coordinator after kill -9 of the old coordinator's broker, and a new
/// member resumes there.
#[test]
fn committed_group_offsets_survive_kill_9_of_the_coordinator() {
    let _serial = serial();
    let rt = client_runtime();
    let mut cluster = Cluster::start();
    cluster.create_topic(TOPIC);
    let group = "failover-readers";
    let partition = TopicPartition::new(TOPIC, 0);
    let group_config = |bootstrap: Vec<String>| {
        let mut config = GroupConfig::new(bootstrap[0].clone(), group, [TOPIC]);
        config.client = client_config(bootstrap);
        config.session_timeout = Duration::from_secs(3);
        config.rebalance_timeout = Duration::from_secs(3);
        config.fetch_max_wait = Duration::from_millis(100);
        config.retry_backoff = Duration::from_millis(20);
        config
    };
    let committed = |bootstrap: Vec<String>| {
        let partition = partition.clone();
        async move {
            let admin = Admin::connect(client_config(bootstrap)).await?;
            let offsets = admin
                .fetch_offsets(group, Some(std::slice::from_ref(&partition)))
                .await?;
            Ok::<_, ClientError>(
                offsets
                    .into_iter()
                    .find(|found| found.partition == partition)
                    .and_then(|found| found.next_offset)
                    .map(|offset| offset.0),
            )
        }
    };

    let producer = rt.block_on(connect_producer(
        producer_config(cluster.bootstrap()),
        DEADLINE,
    ));
    // Offsets come from the acknowledgements: a leader may keep offsets
    // for itself (an epoch marker), so the records need not start at 0.
    let offsets: Vec<u64> = rt.block_on(async {
        let mut offsets = Vec::new();
        for index in 0..10 {
            offsets.push(produce_acked(&producer, TOPIC, &format!("g-{index}")).await);
        }
        offsets
    });
    let next_offset = offsets[9] + 1;

    // The group has a live coordinator before a member joins.
    cluster.find_coordinator(group, None);
    // A member reads the ten records and commits the offset after them.
    rt.block_on(async {
        let mut consumer = GroupConsumer::connect(group_config(cluster.bootstrap()))
            .await
            .expect("the group consumer connects");
        let deadline = Instant::now() + DEADLINE;
        let mut consumed = BTreeSet::new();
        while consumed.len() < 10 {
            assert!(
                Instant::now() < deadline,
                "the group member read {} of 10 records within {DEADLINE:?} (assignment {:?})",
                consumed.len(),
                consumer.assignment()
            );
            let polled = consumer.poll().await.expect("poll");
            for record in &polled.records {
                consumer.complete(record);
                consumed.insert(record.offset.0);
            }
        }
        let mut commit = consumer.commit().await;
        while let Err(error) = &commit {
            assert!(
                Instant::now() < deadline,
                "the member's commit was not accepted within {DEADLINE:?}: {error}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
            commit = consumer.commit().await;
        }
        let commit = commit.unwrap();
        assert!(
            commit
                .iter()
                .any(|(found, offset)| *found == partition && offset.0 == next_offset),
            "the member committed offset {next_offset}: {commit:?}"
        );
        consumer.close().await.expect("the member leaves");
    });
    assert_eq!(
        rt.block_on(committed(cluster.bootstrap()))
            .expect("the committed offsets are readable"),
        Some(next_offset)
    );

    let coordinator = cluster.find_coordinator(group, None);
    cluster.kill(coordinator);
    let successor = cluster.find_coordinator(group, Some(coordinator));
    let deadline = Instant::now() + DEADLINE;
    let after = loop {
        match rt.block_on(committed(cluster.bootstrap())) {
            Ok(found) => break found,
            Err(error) => {
                assert!(
                    Instant::now() < deadline,
                    "no committed offsets from the new coordinator within {DEADLINE:?}: {error}"
                );
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    };
    assert_eq!(
        after,
        Some(next_offset),
        "group {group}'s committed offset after kill -9 of coordinator {coordinator} (now {successor})"
    );

    // A new member resumes at the committed offset, not at the start.
    let next = rt.block_on(produce_acked(&producer, TOPIC, "g-10"));
    assert!(next >= next_offset, "{next} < {next_offset}");
    rt.block_on(async {
        let mut consumer = GroupConsumer::connect(group_config(cluster.bootstrap()))
            .await
            .expect("the group consumer connects");
        let deadline = Instant::now() + DEADLINE;
        let first = loop {
            assert!(
                Instant::now() < deadline,
                "the new member read nothing within {DEADLINE:?}"
            );
            let polled = consumer.poll().await.expect("poll");
            if let Some(record) = polled.records.into_iter().next() {
                break record;
            }
        };
        let value = first
            .value
            .as_ref()
            .map(|value| String::from_utf8_lossy(value).into_owned());
        assert_eq!(
            (first.offset.0, value.as_deref()),
            (next, Some("g-10")),
            "a member joining after the failover resumes at the committed offset {next_offset}, so its first record is g-10 (acknowledged at {next})"
        );
        consumer.close().await.expect("the member leaves");
        producer.close().await.unwrap();
    });
}
