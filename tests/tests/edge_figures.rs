//! Figures of the attacks on the broker's edge (issue 35, items 3, 4 and
//! 5), for the closing note: measurements, not tests, so ignored by
//! default. Run one against a build from before the fixes and one after:
//!
//! ```text
//! CORELOG_TEST_BROKER=/path/to/old/corelogd cargo test -p corelog-tests \
//!     --test edge_figures -- --ignored --nocapture --test-threads 1
//! cargo test -p corelog-tests --test edge_figures -- --ignored --nocapture --test-threads 1
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use corelog_tests::Broker;
use corelog_tests::cli::corelog;
use corelog_tests::edge::{
    Tenants, client_from, connect_from, cpu_time, host, limit_descriptors, metric, open_descriptors,
};
use corelog_tests::process::free_port;
use corelog_tests::wire_client::{decode_produce, produce_request};
use corelog_wire::batch::{BatchBuilder, Compression, NewRecord};
use corelog_wire::frame::ApiKey;
use corelog_wire::message;
use corelog_wire::types::TimestampMs;

/// Item 3: 10,050 idle connections from one address against the default
/// limits; whether a client of another address is then served.
#[test]
#[ignore = "a measurement for the closing note"]
fn figure_connections_from_one_address() {
    let broker = Broker::start(&[]);
    let started = Instant::now();
    let held: Vec<_> = (0..10_050)
        .filter_map(|_| connect_from(host(2), broker.addr).ok())
        .collect();
    let opened_in = started.elapsed();
    std::thread::sleep(Duration::from_secs(2));
    let counted = metric(&broker, "corelog_connections", "shard=");
    let other = client_from(host(3), broker.addr);
    eprintln!(
        "FIGURE item 3: {} connections from 127.0.0.2 opened in {opened_in:?}; the broker holds {counted}; a client of 127.0.0.3: {}",
        held.len(),
        match &other {
            Ok(_) => "served".to_owned(),
            Err(error) => format!("refused ({error})"),
        }
    );
}

fn log_bytes(log: &std::path::Path) -> u64 {
    std::fs::metadata(log).map_or(0, |metadata| metadata.len())
}

/// Item 4: ~2,000 idle metrics connections with a descriptor budget of
/// what the broker uses plus 300: log bytes and lines, CPU, and how long a
/// produce takes, over 5 s.
#[test]
#[ignore = "a measurement for the closing note"]
fn figure_idle_metrics_connections() {
    let temp = tempfile::tempdir().unwrap();
    let log = temp.path().join("broker.log");
    let mut broker = Broker::unstarted(
        SocketAddr::from(([127, 0, 0, 1], free_port())),
        &temp.path().join("data"),
        &[],
    )
    .with_output_log(log.clone());
    broker.spawn();
    let addr = broker.addr.to_string();
    assert!(
        corelog(
            &addr,
            &["topic", "create", "orders", "--partitions", "1"],
            None
        )
        .status
        .success()
    );
    let pid = broker.pid().unwrap();
    limit_descriptors(pid, open_descriptors(pid) as u64 + 300);
    let (cpu_before, log_before) = (cpu_time(pid), log_bytes(&log));
    let started = Instant::now();
    // At most 3 s of connecting: a spinning broker accepts slowly.
    let held: Vec<_> = (0..2_000)
        .take_while(|_| started.elapsed() < Duration::from_secs(3))
        .filter_map(|_| connect_from(host(2), broker.metrics_addr).ok())
        .collect();
    let produce_started = Instant::now();
    let produced = corelog(&addr, &["produce", "--topic", "orders"], Some("x"));
    let produce_took = produce_started.elapsed();
    let window = Duration::from_secs(5).saturating_sub(started.elapsed());
    std::thread::sleep(window);
    let elapsed = started.elapsed();
    let logged = log_bytes(&log).saturating_sub(log_before);
    let cpu = cpu_time(pid).saturating_sub(cpu_before);
    // Stop it before its log fills the disk.
    broker.kill();
    let lines = if logged < 64 << 20 {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .count()
            .to_string()
    } else {
        "too many to count".to_owned()
    };
    eprintln!(
        "FIGURE item 4: {} idle metrics connections; in {elapsed:?}: {logged} bytes of log ({lines} lines), {cpu:?} of CPU ({:.0}%); a produce took {produce_took:?} and {}",
        held.len(),
        cpu.as_secs_f64() / elapsed.as_secs_f64() * 100.0,
        if produced.status.success() {
            "succeeded"
        } else {
            "failed"
        }
    );
}

fn batch_of(bytes: usize) -> Vec<u8> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let mut builder = BatchBuilder::new(Compression::None);
    builder
        .push(&NewRecord {
            value: Some(Bytes::from(vec![b'q'; bytes])),
            timestamp: TimestampMs(now),
            ..NewRecord::default()
        })
        .unwrap();
    builder.build().unwrap().to_vec()
}

/// Item 5: what a tenant with a 64 KiB/s produce quota gets by
/// reconnecting for every 64 KiB request, and by pipelining 16 of them on
/// one connection at a time, for 10 s each.
#[test]
#[ignore = "a measurement for the closing note"]
fn figure_produce_quota_by_reconnecting_and_pipelining() {
    const QUOTA: f64 = 65_536.0;
    let tenants = Tenants::start(&["admin", "tenant-a"], &["tenant-a.data"], &[]);
    let _set = tenants.ok(
        "admin",
        &["quota", "set", "user:tenant-a", "--produce-rate", "64KiB"],
        None,
    );
    let batch = batch_of((64 << 10) - 100);
    let started = Instant::now();
    let mut acked = 0usize;
    while started.elapsed() < Duration::from_secs(10) {
        let mut client = tenants.client_as(host(1), "tenant-a");
        let (code, _) = client.produce("tenant-a.data", 0, &batch);
        if code.is_none() {
            acked += batch.len();
        }
    }
    let rate = acked as f64 / started.elapsed().as_secs_f64();
    eprintln!(
        "FIGURE item 5, reconnecting: {rate:.0} B/s against a quota of {QUOTA} ({:.1}x)",
        rate / QUOTA
    );

    let body =
        message::encode_request(&produce_request("tenant-a.data", 0, batch.len()), &batch).unwrap();
    let mut client = tenants.client_as(host(1), "tenant-a");
    let started = Instant::now();
    let mut acked = 0usize;
    while started.elapsed() < Duration::from_secs(10) {
        for _ in 0..16 {
            client.send_frame(ApiKey::Produce, &body).unwrap();
        }
        for _ in 0..16 {
            let (_, response) = client.read_response().unwrap();
            if decode_produce(&response).0.is_none() {
                acked += batch.len();
            }
        }
    }
    let rate = acked as f64 / started.elapsed().as_secs_f64();
    eprintln!(
        "FIGURE item 5, pipelining: {rate:.0} B/s against a quota of {QUOTA} ({:.1}x)",
        rate / QUOTA
    );
}
