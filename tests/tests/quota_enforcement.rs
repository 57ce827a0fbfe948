//! Quotas that hold (issue 35, item 5): a principal's produce, fetch and
//! request-time quotas are accounted over all its connections on the
//! broker, and every connection of a principal in debt waits, so neither
//! reconnecting nor pipelining gets a tenant past its quota (before, a
//! 64 KiB/s quota let a tenant write 91.6 MiB/s: a new connection's first
//! request was always served, and pipelined requests were read before the
//! throttle of the first was known).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use bytes::Bytes;
use corelog_tests::edge::{Tenants, host, metric};
use corelog_tests::wire_client::{
    Client, decode_fetch, decode_produce, fetch_request, produce_request,
};
use corelog_wire::batch::{BatchBuilder, Compression, NewRecord};
use corelog_wire::error::ErrorCode;
use corelog_wire::frame::ApiKey;
use corelog_wire::message;
use corelog_wire::types::TimestampMs;

const QUOTA: u64 = 64 << 10;
const REQUEST_BYTES: usize = 32 << 10;

/// A batch of one record whose value is `bytes` long.
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

/// A broker where `tenant-a` has `quota` (`quota set user:tenant-a …`
/// arguments) and `admin` none.
fn tenants_with(quota: &[&str]) -> Tenants {
    tenants_on(quota, &[])
}

/// As [`tenants_with`], the broker started with `extra` flags.
fn tenants_on(quota: &[&str], extra: &[&str]) -> Tenants {
    let tenants = Tenants::start(&["admin", "tenant-a"], &["tenant-a.data"], extra);
    let set = [&["quota", "set", "user:tenant-a"][..], quota].concat();
    let _said = tenants.ok("admin", &set, None);
    tenants
}

/// Asserts that by each acknowledgement, at most a second of burst plus
/// the quota's rate since `start`, plus the one request that went into
/// debt, was acknowledged.
fn assert_held_to_quota(start: Instant, acks: &[(Instant, usize)]) {
    let mut total = 0usize;
    for (at, bytes) in acks {
        total += bytes;
        let elapsed = at.saturating_duration_since(start).as_secs_f64();
        let allowed = QUOTA as f64 * (elapsed + 1.0) + REQUEST_BYTES as f64 * 1.1;
        assert!(
            total as f64 <= allowed,
            "{total} bytes acknowledged {elapsed:.2} s in, against a quota of {QUOTA} B/s (at most {allowed:.0})"
        );
    }
    let elapsed = acks.last().map_or(0.0, |(at, _)| {
        at.saturating_duration_since(start).as_secs_f64()
    });
    eprintln!(
        "{total} bytes in {elapsed:.2} s: {:.0} B/s against a quota of {QUOTA} B/s",
        total as f64 / elapsed.max(0.001)
    );
}

/// A new connection for every request: each one's first request used to
/// be served whatever the principal owed.
#[test]
fn reconnecting_does_not_get_a_tenant_past_its_produce_quota() {
    let tenants = tenants_with(&["--produce-rate", "64KiB"]);
    let batch = batch_of(REQUEST_BYTES - 100);
    let start = Instant::now();
    let mut acks = Vec::new();
    while start.elapsed() < Duration::from_secs(5) {
        let mut client = tenants.client_as(host(1), "tenant-a");
        let (code, _) = client.produce("tenant-a.data", 0, &batch);
        assert_eq!(code, ErrorCode::None);
        acks.push((Instant::now(), batch.len()));
    }
    assert_held_to_quota(start, &acks);
}

/// The same over two shards: the kernel spreads the new connections over
/// both, and each shard used to keep its own bucket (and its own half of
/// the quota) for the principal.
#[test]
fn reconnecting_over_two_shards_does_not_get_a_tenant_past_its_produce_quota() {
    let tenants = tenants_on(&["--produce-rate", "64KiB"], &["--shards", "2"]);
    let batch = batch_of(REQUEST_BYTES - 100);
    let start = Instant::now();
    let mut acks = Vec::new();
    while start.elapsed() < Duration::from_secs(5) {
        let mut client = tenants.client_as(host(1), "tenant-a");
        let (code, _) = client.produce("tenant-a.data", 0, &batch);
        assert_eq!(code, ErrorCode::None);
        acks.push((Instant::now(), batch.len()));
    }
    assert_held_to_quota(start, &acks);
}

/// Twelve produces sent at once on one connection: they used to be read
/// (and served) before the first one's throttle was known.
#[test]
fn pipelining_does_not_get_a_tenant_past_its_produce_quota() {
    let tenants = tenants_with(&["--produce-rate", "64KiB"]);
    let batch = batch_of(REQUEST_BYTES - 100);
    let mut client = tenants.client_as(host(1), "tenant-a");
    let body =
        message::encode_request(&produce_request("tenant-a.data", 0, batch.len()), &batch).unwrap();
    let start = Instant::now();
    for _ in 0..12 {
        client.send_frame(ApiKey::Produce, &body).unwrap();
    }
    let mut acks = Vec::new();
    for _ in 0..12 {
        let (_, response) = client.read_response().unwrap();
        assert_eq!(decode_produce(&response).0, ErrorCode::None);
        acks.push((Instant::now(), batch.len()));
    }
    assert_held_to_quota(start, &acks);
}

/// A fetch quota throttles: the response over it says `throttle_ms`, and
/// the principal's next fetch, even on a new connection, waits its debt
/// out.
#[test]
fn a_fetch_quota_holds_every_connection_of_its_principal() {
    let tenants = tenants_with(&["--fetch-rate", "64KiB"]);
    let mut admin = tenants.client_as(host(1), "admin");
    let batch = batch_of(REQUEST_BYTES - 100);
    for _ in 0..10 {
        assert_eq!(admin.produce("tenant-a.data", 0, &batch).0, ErrorCode::None);
    }
    let mut first = tenants.client_as(host(1), "tenant-a");
    let body = first
        .call(&fetch_request("tenant-a.data", 0, 0, 0), &[])
        .unwrap();
    let fetched = decode_fetch(&body);
    let answered = Instant::now();
    assert_eq!(fetched.code, ErrorCode::None);
    assert!(
        fetched.records.len() > 200 << 10,
        "{}",
        fetched.records.len()
    );
    let (response, _) =
        message::decode_response::<message::fetch::FetchResponse>(&body.bytes).unwrap();
    let throttle = Duration::from_millis(u64::from(response.throttle_ms.to_native()));
    assert!(
        !throttle.is_zero(),
        "no throttle for {} bytes",
        fetched.records.len()
    );

    let mut second = tenants.client_as(host(1), "tenant-a");
    let again = decode_fetch(
        &second
            .call(&fetch_request("tenant-a.data", 0, 0, 0), &[])
            .unwrap(),
    );
    assert_eq!(again.code, ErrorCode::None);
    let waited = answered.elapsed();
    assert!(
        waited >= throttle.mul_f64(0.8),
        "a new connection's fetch was answered {waited:?} after a throttle of {throttle:?}"
    );
    assert!(
        metric(
            &tenants.broker,
            "corelog_throttled_requests_total",
            "entity=\"user:tenant-a\",kind=\"fetch\""
        ) > 0
    );
}

/// A request-time quota throttles a principal whose requests take more
/// than its share of the broker's handling time.
#[test]
fn a_request_time_quota_throttles_its_principal() {
    let tenants = tenants_with(&["--request-percent", "1"]);
    let mut client: Client = tenants.client_as(host(1), "tenant-a");
    let batch = batch_of(64);
    let deadline = Instant::now() + Duration::from_secs(30);
    let throttled = || {
        metric(
            &tenants.broker,
            "corelog_throttled_requests_total",
            "entity=\"user:tenant-a\",kind=\"request_time\"",
        )
    };
    while throttled() == 0 {
        assert!(
            Instant::now() < deadline,
            "never throttled for request time"
        );
        for _ in 0..200 {
            assert_eq!(
                client.produce("tenant-a.data", 0, &batch).0,
                ErrorCode::None
            );
        }
    }
}
