//! Shard ports across restarts (issue 35, item 18). Under `--shard-ports
//! auto` (the default) the kernel picked each shard's own port at every
//! start, so what a client had learnt with `DescribeShards` named ports
//! nothing listened on after a restart (reported: about one `consume` in
//! five right after kill -9 and restart failed with "cannot connect to
//! 127.0.0.1:<port>: Connection refused ... is corelogd running?"). A
//! broker now keeps its auto ports in its data directory and takes them
//! again at the next start; a shard port that refuses sends the client to
//! the shared port (also `client/tests/consumer.rs` and `producer.rs`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use corelog_tests::Broker;
use corelog_tests::cli::{corelog, succeeded, text};
use corelog_tests::wire_client::{Client, ask, batch};
use corelog_wire::batch::ProducerIdentity;
use corelog_wire::error::ErrorCode;
use corelog_wire::message::describe_shards::DescribeShardsRequest;

use std::time::{Duration, Instant};

const TOPIC: &str = "restarted";

/// Each shard's own port, by shard, as the broker lists them.
fn shard_ports(broker: &Broker) -> Vec<u16> {
    let answer = ask(
        &mut broker.client(),
        &DescribeShardsRequest { shards: None },
    );
    let mut ports: Vec<(u16, u16)> = answer
        .shards
        .iter()
        .map(|endpoint| (endpoint.shard, endpoint.port))
        .collect();
    ports.sort_unstable();
    ports.into_iter().map(|(_, port)| port).collect()
}

/// A produce on shard `shard`'s own port, answered.
fn produce_on_shard_port(broker: &Broker, port: u16, round: usize) {
    let mut shard = Client::connect(std::net::SocketAddr::new(broker.addr.ip(), port)).unwrap();
    shard.handshake().unwrap();
    let prefix = format!("r{round}p{port}");
    let (code, _) = shard.produce(TOPIC, 0, &batch(&prefix, "k", 1, ProducerIdentity::NONE));
    assert_eq!(
        code,
        ErrorCode::None,
        "round {round}: produce on port {port}"
    );
}

/// Binds `addr` once the listener of the process killed there is gone
/// (the kernel tears its io_uring down after the process exits).
fn bind_once_free(addr: std::net::SocketAddr) -> std::net::TcpListener {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match std::net::TcpListener::bind(addr) {
            Ok(listener) => return listener,
            Err(error) if Instant::now() < deadline => {
                assert_eq!(error.kind(), std::io::ErrorKind::AddrInUse, "{error}");
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(error) => panic!("{addr} is still in use after the kill: {error}"),
        }
    }
}

#[test]
fn auto_shard_ports_are_the_same_after_kill_9_and_restart() {
    let mut broker = Broker::start(&["--shards", "2"]);
    assert_eq!(broker.client().create_topic(TOPIC, 4, &[]), ErrorCode::None);
    let before = shard_ports(&broker);
    assert_eq!(before.len(), 2, "{before:?}");
    assert!(before.iter().all(|port| *port != 0), "{before:?}");
    for round in 0..3 {
        // Connections the kill cuts leave the ports with sockets closing
        // in the kernel: the next start takes the ports back all the same.
        for port in &before {
            produce_on_shard_port(&broker, *port, round);
        }
        broker.kill();
        broker.spawn();
        assert_eq!(
            shard_ports(&broker),
            before,
            "restart {round}: the shards' own ports moved"
        );
    }
    for port in before {
        produce_on_shard_port(&broker, port, 3);
    }
}

/// A port the last start had that another program took while the broker
/// was down: that shard takes a new port (the others keep theirs), the
/// broker lists the new one, and a client reads everything without being
/// sent to the other program.
#[test]
fn a_shard_port_taken_while_the_broker_was_down_is_replaced() {
    let mut broker = Broker::start(&["--shards", "2"]);
    let mut client = broker.client();
    assert_eq!(client.create_topic(TOPIC, 4, &[]), ErrorCode::None);
    // Through the shared port only, so that no connection of the shard
    // ports is still closing when the other program binds one of them.
    for partition in 0..4 {
        let (code, _) = client.produce(
            TOPIC,
            partition,
            &batch(&format!("p{partition}"), "k", 5, ProducerIdentity::NONE),
        );
        assert_eq!(code, ErrorCode::None, "produce to partition {partition}");
    }
    drop(client);
    let before = shard_ports(&broker);
    assert_eq!(before.len(), 2, "{before:?}");
    broker.kill();
    let squatter = bind_once_free(std::net::SocketAddr::new(broker.addr.ip(), before[1]));
    broker.spawn();
    let after = shard_ports(&broker);
    assert_eq!(after[0], before[0], "shard 0's port was free: it keeps it");
    assert_ne!(after[1], before[1], "shard 1's port is taken: {after:?}");
    assert_ne!(
        after[1], 0,
        "shard 1 listens on a port of its own: {after:?}"
    );
    let output = corelog(
        &broker.addr.to_string(),
        &[
            "consume",
            "--topic",
            TOPIC,
            "--from-beginning",
            "--max",
            "20",
        ],
        None,
    );
    succeeded(&output);
    assert_eq!(text(&output.stdout).lines().count(), 20);
    drop(squatter);
}

/// The reproduction: a fresh `corelog consume` right after every
/// kill -9 and restart of a two-shard broker reads everything.
#[test]
fn a_consume_right_after_each_kill_9_and_restart_reads_everything() {
    let mut broker = Broker::start(&["--shards", "2"]);
    let bootstrap = broker.addr.to_string();
    succeeded(&corelog(
        &bootstrap,
        &["topic", "create", TOPIC, "--partitions", "4"],
        None,
    ));
    let lines: String = (0..40)
        .map(|index| format!("k{index}\tv{index}\n"))
        .collect();
    succeeded(&corelog(
        &bootstrap,
        &["produce", "--topic", TOPIC, "--key-separator", "\t"],
        Some(&lines),
    ));
    let mut failures = Vec::new();
    let rounds = 10;
    for round in 0..rounds {
        broker.kill();
        broker.spawn();
        let group = format!("g{round}");
        let mut args = vec![
            "consume",
            "--topic",
            TOPIC,
            "--from-beginning",
            "--max",
            "40",
        ];
        if round % 2 == 1 {
            args.extend(["--group", group.as_str()]);
        }
        let output = corelog(&bootstrap, &args, None);
        let read = text(&output.stdout).lines().count();
        if !output.status.success() || read != 40 {
            failures.push(format!(
                "round {round}: exit {:?}, {read} records; stderr: {}",
                output.status.code(),
                text(&output.stderr).trim()
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {rounds} consumes right after a restart failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
