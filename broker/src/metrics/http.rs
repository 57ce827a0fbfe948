//! The `/metrics` endpoint: a minimal HTTP/1.1 responder on a glommio
//! listener. It reads one request head (bounded), answers and closes; that
//! is all a Prometheus scraper needs.
//!
//! It runs on shard 0, beside that shard's partitions, and anyone who
//! reaches the port can open connections to it, so it is bounded like the
//! client port: at most [`CONNECTIONS_MAX`] connections (and
//! [`CONNECTIONS_PER_ADDRESS_MAX`] from one address; a scraper needs one),
//! each answered `408` and closed unless its request head arrives within
//! [`READ_TIMEOUT`]; bytes that cannot start an HTTP request are answered
//! `400` at once; a connection over a bound is closed at once. A failed accept pauses the
//! loop ([`AcceptBackoff`]); nothing here logs more than a line per ten
//! seconds. With `--metrics-token-file` a scrape must present the token
//! (`Authorization: Bearer …`); with `--metrics-tenant-series off` the
//! series labelled with a topic, a group or a quota entity (names chosen by
//! tenants) are left out.

use std::cell::RefCell;
use std::collections::HashMap;
use std::net::IpAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{AsyncReadExt, AsyncWriteExt};
use glommio::net::{TcpListener, TcpStream};

use super::BrokerMetrics;
use crate::config::{BrokerConfig, MetricsToken, Toggle};
use crate::net::accept_backoff::{AcceptBackoff, is_out_of_descriptors};

/// Largest request head read; a scrape request is a few hundred bytes.
const REQUEST_HEAD_BYTES_MAX: usize = 8 << 10;
/// Longest request method taken (`OPTIONS` is 7).
const METHOD_BYTES_MAX: usize = 16;
/// Connections served at once.
pub const CONNECTIONS_MAX: usize = 64;
/// Connections from one source address served at once.
pub const CONNECTIONS_PER_ADDRESS_MAX: u32 = 8;
/// How long a connection has to send its request head (and to take the
/// answer).
pub const READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Label names whose values tenants choose: series carrying one are left
/// out with `--metrics-tenant-series off`.
const TENANT_LABELS: [&str; 3] = ["topic", "group", "entity"];

/// Who may read `/metrics` and what it shows.
#[derive(Clone, Debug)]
pub struct Settings {
    /// The bearer token a scrape must present, if any.
    pub token: Option<MetricsToken>,
    /// Whether series labelled with tenants' names are shown.
    pub tenant_series: bool,
}

impl Settings {
    /// The settings of `config`.
    #[must_use]
    pub fn of(config: &BrokerConfig) -> Settings {
        Settings {
            token: config.metrics_token.clone(),
            tenant_series: config.metrics_tenant_series == Toggle::On,
        }
    }
}

/// Open connections, in all and by source address.
#[derive(Debug, Default)]
struct Open {
    total: usize,
    by_address: HashMap<IpAddr, u32>,
}

/// Serves `/metrics` on `listener` until the task is dropped.
pub async fn serve(listener: TcpListener, metrics: Arc<BrokerMetrics>, settings: Settings) {
    let metrics = Rc::new(metrics);
    let settings = Rc::new(settings);
    let open = Rc::new(RefCell::new(Open::default()));
    let mut backoff = AcceptBackoff::default();
    loop {
        let stream = match listener.accept().await {
            Ok(stream) => stream,
            Err(error) => {
                let error = std::io::Error::from(error);
                let after = backoff.failed(Instant::now());
                if let Some(held_back) = after.log {
                    tracing::warn!(
                        %error,
                        out_of_descriptors = is_out_of_descriptors(&error),
                        held_back,
                        "metrics listener accept failed; pausing it (logged at most every 10 s)"
                    );
                }
                glommio::timer::sleep(after.pause).await;
                continue;
            }
        };
        backoff.accepted();
        let address = stream.peer_addr().ok().map(|peer| peer.ip());
        if !admit(&mut open.borrow_mut(), address) {
            // Closed unanswered: a scraper has its own connection.
            continue;
        }
        let (metrics, settings, open) = (metrics.clone(), settings.clone(), open.clone());
        glommio::spawn_local(async move {
            if let Err(error) = answer(stream, &metrics, &settings).await {
                tracing::debug!(%error, "metrics request failed");
            }
            release(&mut open.borrow_mut(), address);
        })
        .detach();
    }
}

/// Counts a new connection from `address`, unless a bound is reached.
fn admit(open: &mut Open, address: Option<IpAddr>) -> bool {
    if open.total >= CONNECTIONS_MAX {
        return false;
    }
    if let Some(address) = address {
        let from = open.by_address.entry(address).or_insert(0);
        if *from >= CONNECTIONS_PER_ADDRESS_MAX {
            return false;
        }
        *from += 1;
    }
    open.total += 1;
    true
}

fn release(open: &mut Open, address: Option<IpAddr>) {
    open.total = open.total.saturating_sub(1);
    if let Some(address) = address
        && let Some(from) = open.by_address.get_mut(&address)
    {
        *from = from.saturating_sub(1);
        if *from == 0 {
            open.by_address.remove(&address);
        }
    }
}

async fn answer(
    mut stream: TcpStream,
    metrics: &BrokerMetrics,
    settings: &Settings,
) -> std::io::Result<()> {
    stream.set_read_timeout(Some(READ_TIMEOUT))?;
    stream.set_write_timeout(Some(READ_TIMEOUT))?;
    let deadline = Instant::now() + READ_TIMEOUT;
    let mut head = Vec::with_capacity(1024);
    let mut buffer = [0u8; 1024];
    let response = loop {
        if head.windows(4).any(|window| window == b"\r\n\r\n") {
            break respond(&head, metrics, settings);
        }
        // Whoever connected gets an answer it can read, not a silent close:
        // a corelog client pointed here by mistake then says "this speaks
        // HTTP" at once instead of waiting out its own timeout.
        if !could_start_a_request(&head) {
            break plain("400 Bad Request", &[], "not an HTTP request\n");
        }
        // The read timeout bounds each read; the deadline, the whole head
        // (a client that trickles a byte at a time does not hold it).
        if Instant::now() >= deadline {
            break plain("408 Request Timeout", &[], "no request head in time\n");
        }
        let read = match stream.read(&mut buffer).await {
            Ok(0) => return Ok(()),
            Ok(read) => read,
            Err(error) if error.kind() == std::io::ErrorKind::TimedOut => {
                break plain("408 Request Timeout", &[], "no request head in time\n");
            }
            Err(error) => return Err(error),
        };
        if head.len() + read > REQUEST_HEAD_BYTES_MAX {
            break plain(
                "431 Request Header Fields Too Large",
                &[],
                "request head too large\n",
            );
        }
        head.extend_from_slice(&buffer[..read]);
    };
    stream.write_all(response.as_bytes()).await?;
    stream.flush().await?;
    stream.close().await
}

/// The whole HTTP response to the request `head`.
fn respond(head: &[u8], metrics: &BrokerMetrics, settings: &Settings) -> String {
    let mut lines = head.split(|byte| *byte == b'\n').map(trim_line);
    let request_line = lines.next().unwrap_or_default();
    let mut parts = request_line.split(|byte| *byte == b' ');
    let (method, path) = (
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
    );
    if method != b"GET" || !(path == b"/metrics" || path.starts_with(b"/metrics?")) {
        return plain("404 Not Found", &[], "not found: metrics are at /metrics\n");
    }
    if let Some(token) = &settings.token
        && !lines.any(|line| bearer(line).is_some_and(|presented| token.matches(presented)))
    {
        return plain(
            "401 Unauthorized",
            &["WWW-Authenticate: Bearer realm=\"corelog metrics\""],
            "a bearer token is required: Authorization: Bearer TOKEN (--metrics-token-file)\n",
        );
    }
    let mut body = metrics.encode();
    if !settings.tenant_series {
        body = without_tenant_series(&body);
    }
    format!(
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

fn plain(status: &str, headers: &[&str], body: &str) -> String {
    let mut response = format!("HTTP/1.1 {status}\r\nContent-Type: text/plain\r\n");
    for header in headers {
        response.push_str(header);
        response.push_str("\r\n");
    }
    response.push_str(&format!(
        "Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    ));
    response
}

/// Whether `head`, read so far, can still be the start of an HTTP request
/// line: a method of capital letters and then a space.
fn could_start_a_request(head: &[u8]) -> bool {
    let method = head
        .iter()
        .take_while(|byte| byte.is_ascii_uppercase())
        .count();
    match head.get(method) {
        None => method <= METHOD_BYTES_MAX,
        Some(b' ') => (1..=METHOD_BYTES_MAX).contains(&method),
        Some(_) => false,
    }
}

fn trim_line(line: &[u8]) -> &[u8] {
    line.strip_suffix(b"\r").unwrap_or(line)
}

/// The token of an `Authorization: Bearer TOKEN` header line.
fn bearer(line: &[u8]) -> Option<&[u8]> {
    let colon = line.iter().position(|byte| *byte == b':')?;
    let (name, value) = line.split_at(colon);
    if !name.eq_ignore_ascii_case(b"authorization") {
        return None;
    }
    let value = value[1..].trim_ascii();
    let scheme = b"bearer ";
    (value.len() > scheme.len() && value[..scheme.len()].eq_ignore_ascii_case(scheme))
        .then(|| value[scheme.len()..].trim_ascii())
}

/// The exposition `text` without its samples that carry a tenant-named
/// label ([`TENANT_LABELS`]); `# HELP` and `# TYPE` lines stay.
fn without_tenant_series(text: &str) -> String {
    let mut kept = String::with_capacity(text.len());
    for line in text.lines() {
        if line.starts_with('#') || !names_a_tenant(line) {
            kept.push_str(line);
            kept.push('\n');
        }
    }
    kept
}

/// Whether a sample line carries one of [`TENANT_LABELS`].
fn names_a_tenant(sample: &str) -> bool {
    let Some(open) = sample.find('{') else {
        return false;
    };
    let mut rest = &sample[open + 1..];
    loop {
        let Some(equals) = rest.find('=') else {
            return false;
        };
        let name = rest[..equals].trim_start_matches(',').trim();
        if TENANT_LABELS.contains(&name) {
            return true;
        }
        // Skip the quoted value, escapes included.
        let value = &rest[equals + 1..];
        let Some(body) = value.strip_prefix('"') else {
            return false;
        };
        let mut escaped = false;
        let Some(close) = body.char_indices().find_map(|(index, character)| {
            let closes = character == '"' && !escaped;
            escaped = character == '\\' && !escaped;
            closes.then_some(index)
        }) else {
            return false;
        };
        rest = &body[close + 1..];
        if rest.starts_with('}') || rest.is_empty() {
            return false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn series_with_tenant_labels_are_left_out_and_the_rest_kept() {
        let text = "# HELP corelog_connections Open connections\n\
                    # TYPE corelog_connections gauge\n\
                    corelog_connections{shard=\"0\"} 3\n\
                    corelog_group_lag_records{shard=\"0\",group=\"tenant-a.workers\",topic=\"t\",partition=\"0\"} 5\n\
                    corelog_throttled_requests_total{shard=\"0\",entity=\"user:alice\",kind=\"produce\"} 1\n\
                    corelog_odd{shard=\"0\",reason=\"a \\\"topic=\\\" inside\"} 2\n\
                    corelog_plain 7\n";
        let kept = without_tenant_series(text);
        assert!(
            kept.contains("corelog_connections{shard=\"0\"} 3"),
            "{kept}"
        );
        assert!(kept.contains("# TYPE corelog_connections gauge"), "{kept}");
        assert!(kept.contains("corelog_plain 7"), "{kept}");
        assert!(
            kept.contains("corelog_odd"),
            "a label value is not a label: {kept}"
        );
        assert!(!kept.contains("tenant-a"), "{kept}");
        assert!(!kept.contains("user:alice"), "{kept}");
    }

    #[test]
    fn bytes_that_cannot_start_a_request_line_are_told_apart_at_once() {
        assert!(could_start_a_request(b""));
        assert!(could_start_a_request(b"GE"));
        assert!(could_start_a_request(b"GET /metrics HTTP/1.1\r\n"));
        assert!(!could_start_a_request(b"\0\0\0\x1c"));
        assert!(!could_start_a_request(b"get /"));
        assert!(!could_start_a_request(b" GET"));
        assert!(!could_start_a_request(b"GETGETGETGETGETGETGET"));
    }

    #[test]
    fn only_the_bearer_token_opens_the_metrics() {
        let settings = Settings {
            token: Some(MetricsToken::new("0123456789abcdef")),
            tenant_series: true,
        };
        let metrics = BrokerMetrics::new();
        let ask = |head: &str| respond(head.as_bytes(), &metrics, &settings);
        assert!(ask("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").starts_with("HTTP/1.1 401"));
        assert!(
            ask("GET /metrics HTTP/1.1\r\nAuthorization: Bearer 0123456789abcdeX\r\n\r\n")
                .starts_with("HTTP/1.1 401")
        );
        assert!(
            ask("GET /metrics HTTP/1.1\r\nauthorization: bearer 0123456789abcdef\r\n\r\n")
                .starts_with("HTTP/1.1 200")
        );
        assert!(ask("GET /other HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 404"));
    }

    #[test]
    fn connections_are_bounded_in_all_and_per_address() {
        let mut open = Open::default();
        let here: IpAddr = "10.0.0.1".parse().unwrap();
        let admitted = (0..20).filter(|_| admit(&mut open, Some(here))).count();
        assert_eq!(admitted, CONNECTIONS_PER_ADDRESS_MAX as usize);
        release(&mut open, Some(here));
        assert!(admit(&mut open, Some(here)));
        let others = (0..200u32)
            .filter(|n| admit(&mut open, Some(IpAddr::from((n + 1000).to_be_bytes()))))
            .count();
        assert_eq!(
            others + CONNECTIONS_PER_ADDRESS_MAX as usize,
            CONNECTIONS_MAX
        );
    }
}
