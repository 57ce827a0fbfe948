//! The metrics port (issue 35, items 4 and 8): idle connections are
//! capped and timed out, so that they neither use the broker's descriptors
//! up nor make its accept loop spin and flood the log; `/metrics` can ask
//! for a bearer token and leave the series that name tenants' topics,
//! groups and users out.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use corelog_tests::Broker;
use corelog_tests::cli::{corelog, text};
use corelog_tests::edge::{
    closed_within, connect_from, cpu_time, host, http_get, limit_descriptors, lines_containing,
    open_descriptors,
};
use corelog_tests::process::free_port;

/// The length of the broker's log.
fn log_bytes(log: &std::path::Path) -> u64 {
    std::fs::metadata(log).map_or(0, |metadata| metadata.len())
}

/// ~2,000 idle connections to the metrics port of a broker with a small
/// descriptor budget: before, they used every descriptor and the accept
/// loop spun, logging a warning per turn (millions of lines) while
/// produces went unanswered. Now the port holds a bounded number and
/// closes idle ones; the log stays short, scrapes from another address
/// and produces are served, and an idle connection is closed.
#[test]
fn idle_metrics_connections_neither_use_the_descriptors_up_nor_flood_the_log() {
    let temp = tempfile::tempdir().unwrap();
    let log = temp.path().join("broker.log");
    let mut broker = Broker::unstarted(
        SocketAddr::from(([127, 0, 0, 1], free_port())),
        &temp.path().join("data"),
        &[],
    )
    .with_output_log(log.clone());
    broker.spawn();
    let created = corelog(
        &broker.addr.to_string(),
        &["topic", "create", "orders", "--partitions", "1"],
        None,
    );
    assert!(created.status.success(), "{}", text(&created.stderr));
    let pid = broker.pid().unwrap();
    limit_descriptors(pid, open_descriptors(pid) as u64 + 300);
    let cpu_before = cpu_time(pid);

    let log_before = log_bytes(&log);
    let mut held: Vec<_> = (0..2000)
        .filter_map(|_| connect_from(host(2), broker.metrics_addr).ok())
        .collect();
    let opened = Instant::now();
    std::thread::sleep(Duration::from_secs(2));
    // Measured, not read: before the fix this log grew by gigabytes.
    let logged = log_bytes(&log).saturating_sub(log_before);
    let cpu = cpu_time(pid).saturating_sub(cpu_before);
    eprintln!(
        "{} idle metrics connections: {logged} bytes logged and {cpu:?} of CPU in {:?}",
        held.len(),
        opened.elapsed()
    );
    assert!(logged <= 16 << 10, "{logged} bytes logged in 2 s");
    assert!(
        lines_containing(&log, "metrics") <= 10,
        "{} lines about the metrics port",
        lines_containing(&log, "metrics")
    );

    let produced = corelog(
        &broker.addr.to_string(),
        &["produce", "--topic", "orders"],
        Some("beside the flood"),
    );
    assert!(produced.status.success(), "{}", text(&produced.stderr));
    let (status, body) = http_get(broker.metrics_addr, "/metrics", &[]).unwrap();
    assert!(status.contains("200"), "{status}");
    assert!(body.contains("corelog_connections"), "{body}");

    let first = held.first_mut().unwrap();
    assert!(
        closed_within(first, Duration::from_secs(15)),
        "an idle metrics connection is still open {:?} after it opened",
        opened.elapsed()
    );
}

/// With `--metrics-token-file`, a scrape needs `Authorization: Bearer
/// TOKEN`: none or another token is answered 401, without a byte of the
/// metrics.
#[test]
fn metrics_need_the_bearer_token_when_one_is_set() {
    let temp = tempfile::tempdir().unwrap();
    let token_file = temp.path().join("metrics.token");
    std::fs::write(&token_file, "s3cret-scraper-token-0123456789\n").unwrap();
    let broker = Broker::start(&["--metrics-token-file", &token_file.display().to_string()]);
    for headers in [
        &[][..],
        &["Authorization: Bearer wrong-token-0123456789"][..],
        &["Authorization: Basic czNjcmV0"][..],
    ] {
        let (status, body) = http_get(broker.metrics_addr, "/metrics", headers).unwrap();
        assert!(status.contains("401"), "{headers:?}: {status}");
        assert!(!body.contains("corelog_"), "{headers:?}: {body}");
    }
    let (status, body) = http_get(
        broker.metrics_addr,
        "/metrics",
        &["Authorization: Bearer s3cret-scraper-token-0123456789"],
    )
    .unwrap();
    assert!(status.contains("200"), "{status}");
    assert!(body.contains("corelog_connections"), "{body}");
}

/// With `--metrics-tenant-series off`, no series names a topic, a group
/// or a user; by default they do.
#[test]
fn tenant_named_series_are_left_out_when_asked() {
    let names = |extra: &[&str]| {
        let broker = Broker::start(extra);
        let addr = broker.addr.to_string();
        let created = corelog(
            &addr,
            &["topic", "create", "tenant-a.orders", "--partitions", "1"],
            None,
        );
        assert!(created.status.success(), "{}", text(&created.stderr));
        let produced = corelog(
            &addr,
            &["produce", "--topic", "tenant-a.orders"],
            Some("one"),
        );
        assert!(produced.status.success(), "{}", text(&produced.stderr));
        let consumed = corelog(
            &addr,
            &[
                "consume",
                "--topic",
                "tenant-a.orders",
                "--group",
                "tenant-a.workers",
            ],
            None,
        );
        assert!(consumed.status.success(), "{}", text(&consumed.stderr));
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let (_, body) = http_get(broker.metrics_addr, "/metrics", &[]).unwrap();
            let named: Vec<String> = body
                .lines()
                .filter(|line| !line.starts_with('#') && line.contains("tenant-a"))
                .map(str::to_owned)
                .collect();
            if !named.is_empty() || Instant::now() > deadline {
                return (named, body);
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    };
    let (named, body) = names(&[]);
    assert!(
        !named.is_empty(),
        "no series names the tenant by default:\n{body}"
    );
    let (named, body) = names(&["--metrics-tenant-series", "off"]);
    assert!(named.is_empty(), "{named:?}");
    assert!(body.contains("corelog_connections"), "{body}");
}
