//! Connections at the broker's edge (issue 35, item 3): one source address
//! cannot take every connection from the others (a per-address limit is
//! on by default), a connection that does not log in is closed at the
//! login deadline, a refused TLS client is refused over TLS, and a broker
//! out of descriptors backs off instead of spinning and flooding its log.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use corelog_tests::Broker;
use corelog_tests::cli::{corelog, text};
use corelog_tests::edge::{
    Tenants, client_from, closed_within, connect_from, cpu_time, host, limit_descriptors,
    lines_containing, metric, open_descriptors,
};
use corelog_tests::process::{as_strs, free_port};
use corelog_tests::tls::{TestCa, Validity, broker_tls_args};
use corelog_tests::wire_client::Client;

/// Opens `count` idle connections from `source` to `to`, keeping those
/// the kernel completes.
fn flood(source: std::net::Ipv4Addr, to: SocketAddr, count: usize) -> Vec<TcpStream> {
    (0..count)
        .filter_map(|_| connect_from(source, to).ok())
        .collect()
}

/// Waits until the broker counts at least `open` connections.
fn wait_for_connections(broker: &Broker, open: u64) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while metric(broker, "corelog_connections", "shard=") < open {
        assert!(
            Instant::now() < deadline,
            "the broker counts {} connections, not {open}",
            metric(broker, "corelog_connections", "shard=")
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// 1,200 idle connections from one address against a broker that takes
/// 1,200 in all: before the per-address limit every other client was
/// answered TOO_MANY_CONNECTIONS; with it (1,000 by default) the flood
/// is refused past its share and a client from another address is served.
#[test]
fn one_address_cannot_take_every_connection_from_the_others() {
    let broker = Broker::start(&["--max-connections", "1200"]);
    let attacker = host(2);
    let held = flood(attacker, broker.addr, 1200);
    assert!(held.len() > 1000, "only {} connections opened", held.len());
    wait_for_connections(&broker, 1000);

    let mut served = client_from(host(1), broker.addr)
        .expect("a client of another address is served beside the flood");
    let listed = served.call(
        &corelog_wire::message::metadata::MetadataRequest { topics: None },
        &[],
    );
    assert!(listed.is_ok(), "{listed:?}");
    let refused = metric(
        &broker,
        "corelog_connections_closed_total",
        "reason=\"connection_quota\"",
    );
    assert!(refused >= 150, "{refused} connections refused to the flood");
    drop(held);
}

/// A connection that has not logged in by the login deadline (10 s by
/// default) is closed, with or without its handshake; a logged-in one is
/// not.
#[test]
fn a_connection_that_does_not_log_in_is_closed_at_the_login_deadline() {
    let tenants = Tenants::start(&["alice"], &[], &[]);
    let addr = tenants.broker.addr;
    let mut silent = connect_from(host(1), addr).unwrap();
    let mut shaken = client_from(host(1), addr).unwrap();
    let mut logged_in = tenants.client_as(host(1), "alice");
    let opened = Instant::now();

    assert!(
        closed_within(&mut silent, Duration::from_secs(20)),
        "a silent connection is still open {:?} after it opened",
        opened.elapsed()
    );
    assert!(
        closed_within(&mut shaken.stream, Duration::from_secs(5)),
        "a connection that only did its handshake is still open {:?} after it opened",
        opened.elapsed()
    );
    let listed = logged_in.call(
        &corelog_wire::message::metadata::MetadataRequest { topics: None },
        &[],
    );
    assert!(
        listed.is_ok(),
        "the logged-in connection was closed: {listed:?}"
    );
    assert!(
        metric(
            &tenants.broker,
            "corelog_connections_closed_total",
            "reason=\"login_timeout\""
        ) >= 2
    );
}

/// A TLS client refused for the connection limit is told so over TLS: the
/// CLI reports TOO_MANY_CONNECTIONS instead of "the broker answered in
/// plaintext" (which advised dropping --tls-ca).
#[test]
fn a_refused_tls_client_is_refused_over_tls() {
    let ca = TestCa::new("corelog test CA");
    let broker_cert = ca.issue("broker", &["127.0.0.1"], Validity::Now);
    let mut args = broker_tls_args(&broker_cert);
    args.extend(["--max-connections".to_owned(), "1".to_owned()]);
    let broker = Broker::start(&as_strs(&args));
    let _held = Client::connect(broker.addr).unwrap();
    wait_for_connections(&broker, 1);

    let ca_file = ca.ca_file().display().to_string();
    let refused = corelog(
        &broker.addr.to_string(),
        &["--tls-ca", &ca_file, "topic", "list"],
        None,
    );
    assert!(!refused.status.success());
    let said = text(&refused.stderr);
    assert!(
        said.contains("TOO_MANY_CONNECTIONS") && !said.contains("plaintext"),
        "{said}"
    );
}

/// A broker whose descriptors run out while connections keep coming backs
/// off: it logs a bounded number of lines (before: one per failed accept,
/// every 10 ms), and serves again once descriptors are free.
#[test]
fn a_broker_out_of_descriptors_backs_off_and_logs_a_bounded_number_of_lines() {
    let temp = tempfile::tempdir().unwrap();
    let log = temp.path().join("broker.log");
    let mut broker = Broker::unstarted(
        SocketAddr::from(([127, 0, 0, 1], free_port())),
        &temp.path().join("data"),
        &[],
    )
    .with_output_log(log.clone());
    broker.spawn();
    let pid = broker.pid().unwrap();
    limit_descriptors(pid, open_descriptors(pid) as u64 + 40);
    let cpu_before = cpu_time(pid);
    let held = flood(host(2), broker.addr, 300);
    let window = Duration::from_secs(4);
    std::thread::sleep(window);
    let lines = lines_containing(&log, "accept");
    let cpu = cpu_time(pid).saturating_sub(cpu_before);
    eprintln!(
        "{} connections held; in {window:?}: {lines} accept lines logged, {cpu:?} of CPU",
        held.len()
    );
    assert!(
        lines <= 10,
        "{lines} lines about failed accepts in {window:?}"
    );

    drop(held);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let listed = corelog(&broker.addr.to_string(), &["topic", "list"], None);
        if listed.status.success() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not served once descriptors were free: {}",
            text(&listed.stderr)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}
