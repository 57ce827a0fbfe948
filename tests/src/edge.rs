//! The broker's edge as an attacker meets it (issue 35): connections from
//! chosen loopback source addresses (all of 127.0.0.0/8 reaches a broker
//! on 127.0.0.1, so one test can play several hosts), raw SCRAM steps,
//! a broker's descriptor limit and its log, and a broker with tenants
//! that requires authentication.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

use corelog_wire::message;
use corelog_wire::message::authenticate::{AuthenticateRequest, AuthenticateResponse};
use corelog_wire::sasl::scram::{ScramClient, ScramMechanism};

use crate::Broker;
use crate::cli::{corelog, text};
use crate::wire_client::Client;

/// The loopback address `127.0.0.N`, a "host" of its own.
#[must_use]
pub fn host(n: u8) -> Ipv4Addr {
    Ipv4Addr::new(127, 0, 0, n)
}

/// A TCP connection to `to` from `source` (any port).
///
/// # Errors
/// The socket's error.
pub fn connect_from(source: Ipv4Addr, to: SocketAddr) -> std::io::Result<TcpStream> {
    use socket2::{Domain, Protocol, SockAddr, Socket, Type};
    let socket = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP))?;
    socket.bind(&SockAddr::from(SocketAddr::new(IpAddr::V4(source), 0)))?;
    socket.connect_timeout(&SockAddr::from(to), Duration::from_secs(2))?;
    let stream: TcpStream = socket.into();
    stream.set_nodelay(true)?;
    Ok(stream)
}

/// A protocol client connected from `source`, with the handshake done.
///
/// # Errors
/// The connection's or the handshake's error, as text.
pub fn client_from(source: Ipv4Addr, to: SocketAddr) -> Result<Client, String> {
    let stream = connect_from(source, to).map_err(|error| error.to_string())?;
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .map_err(|error| error.to_string())?;
    let mut client = Client::from_stream(stream);
    client.handshake()?;
    Ok(client)
}

/// One SCRAM-SHA-256 `Authenticate` step on `client`.
///
/// # Errors
/// The connection's error (a broker that closed it).
pub fn scram_step(client: &mut Client, payload: Vec<u8>) -> std::io::Result<AuthenticateResponse> {
    let request = AuthenticateRequest {
        mechanism: ScramMechanism::Sha256.name().to_owned(),
        payload,
    };
    let body = client.call(&request, &[])?;
    let (archived, _) = message::decode_response::<AuthenticateResponse>(&body.bytes)
        .map_err(|error| std::io::Error::other(error.to_string()))?;
    rkyv::deserialize::<AuthenticateResponse, rkyv::rancor::Error>(archived)
        .map_err(|error| std::io::Error::other(error.to_string()))
}

/// The server-first message the broker answers `user`'s client-first
/// with, as text (`r=…,s=…,i=…`).
#[must_use]
pub fn server_first(client: &mut Client, user: &str) -> String {
    let scram = ScramClient::new(ScramMechanism::Sha256, user, "any", "edge-nonce").unwrap();
    let answer = scram_step(client, scram.first()).unwrap();
    assert_eq!(answer.error_code, 0, "{answer:?}");
    String::from_utf8(answer.payload).unwrap()
}

/// Logs `client` in as `user` with `password`: `Ok` once the broker
/// accepts, else its last answer (the error code and message).
///
/// # Errors
/// The refusing answer.
pub fn scram_login(
    client: &mut Client,
    user: &str,
    password: &str,
) -> Result<(), AuthenticateResponse> {
    let mut scram = ScramClient::new(ScramMechanism::Sha256, user, password, "edge-nonce").unwrap();
    let first = scram_step(client, scram.first()).unwrap();
    if first.error_code != 0 {
        return Err(first);
    }
    let last = scram_step(client, scram.answer(&first.payload).unwrap()).unwrap();
    if last.error_code != 0 || !last.complete {
        return Err(last);
    }
    scram.verify(&last.payload).unwrap();
    Ok(())
}

/// Whether the broker closed `stream` within `within` (end of stream or a
/// reset); whatever else it sent first is read and dropped.
#[must_use]
pub fn closed_within(stream: &mut TcpStream, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    let mut scratch = [0u8; 1024];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        stream.set_read_timeout(Some(left)).unwrap();
        match stream.read(&mut scratch) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(error)
                if matches!(
                    error.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return false;
            }
            Err(_) => return true,
        }
    }
}

/// Descriptors `pid` has open.
#[must_use]
pub fn open_descriptors(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, Iterator::count)
}

/// Lowers the descriptor limit of running process `pid` (soft and hard) to
/// `limit`, as a host with a small `LimitNOFILE` would have it.
pub fn limit_descriptors(pid: u32, limit: u64) {
    let pid = rustix::process::Pid::from_raw(i32::try_from(pid).unwrap()).unwrap();
    rustix::process::prlimit(
        Some(pid),
        rustix::process::Resource::Nofile,
        rustix::process::Rlimit {
            current: Some(limit),
            maximum: Some(limit),
        },
    )
    .unwrap();
}

/// CPU time (user + system) process `pid` used so far.
#[must_use]
pub fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The fields after the command name (which may hold spaces).
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks: u64 = [11, 12]
        .iter()
        .filter_map(|index| fields.get(*index)?.parse::<u64>().ok())
        .sum();
    // USER_HZ is 100 on Linux.
    Duration::from_millis(ticks * 10)
}

/// Lines of `log` that contain `needle`.
#[must_use]
pub fn lines_containing(log: &Path, needle: &str) -> usize {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|line| line.contains(needle))
        .count()
}

/// A counter or gauge of the broker's `/metrics` named exactly `name`,
/// summed over its label sets that contain `labels`; 0 when absent.
#[must_use]
pub fn metric(broker: &Broker, name: &str, labels: &str) -> u64 {
    let (labelled, bare) = (format!("{name}{{"), format!("{name} "));
    broker
        .metrics()
        .lines()
        .filter(|line| line.starts_with(&labelled) || line.starts_with(&bare))
        .filter(|line| line.contains(labels))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// One HTTP request to the metrics port: the status line and the body.
///
/// # Errors
/// The connection's error.
pub fn http_get(
    addr: SocketAddr,
    path: &str,
    headers: &[&str],
) -> std::io::Result<(String, String)> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut request = format!("GET {path} HTTP/1.1\r\nHost: broker\r\n");
    for header in headers {
        request.push_str(header);
        request.push_str("\r\n");
    }
    request.push_str("\r\n");
    stream.write_all(request.as_bytes())?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer)?;
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    let status = head.lines().next().unwrap_or_default().to_owned();
    Ok((status, body.to_owned()))
}

/// A broker whose users (each with the password `NAME-password`) were
/// made while security was off, restarted with authentication required
/// and `extra` flags: the documented way to bring up a secured broker.
#[derive(Debug)]
pub struct Tenants {
    /// The broker.
    pub broker: Broker,
    /// Where its output goes.
    pub log: PathBuf,
    temp: tempfile::TempDir,
}

impl Tenants {
    /// Starts one with `users` and, before security is on, `topics` (one
    /// partition each); `extra` flags from the first start on.
    #[must_use]
    pub fn start(users: &[&str], topics: &[&str], extra: &[&str]) -> Tenants {
        let temp = tempfile::tempdir().unwrap();
        let log = temp.path().join("broker.log");
        let mut broker = Broker::unstarted(
            SocketAddr::from(([127, 0, 0, 1], crate::free_port())),
            &temp.path().join("data"),
            extra,
        )
        .with_output_log(log.clone());
        broker.spawn();
        let addr = broker.addr.to_string();
        for user in users {
            let created = corelog(
                &addr,
                &["user", "create", user, "--password-stdin"],
                Some(&format!("{user}-password")),
            );
            assert!(created.status.success(), "{}", text(&created.stderr));
        }
        for topic in topics {
            let created = corelog(
                &addr,
                &["topic", "create", topic, "--partitions", "1"],
                None,
            );
            assert!(created.status.success(), "{}", text(&created.stderr));
        }
        broker.terminate();
        broker
            .extra_args
            .extend(["--authentication", "required"].map(str::to_owned));
        broker.spawn();
        Tenants { broker, log, temp }
    }

    /// The CLI's login flags for `user`.
    #[must_use]
    pub fn login(&self, user: &str) -> Vec<String> {
        let file = self.temp.path().join(format!("{user}.password"));
        std::fs::write(&file, format!("{user}-password\n")).unwrap();
        vec![
            "--sasl-user".to_owned(),
            user.to_owned(),
            "--sasl-password-file".to_owned(),
            file.display().to_string(),
        ]
    }

    /// `corelog` logged in as `user`.
    #[must_use]
    pub fn run(&self, user: &str, args: &[&str], stdin: Option<&str>) -> Output {
        let login = self.login(user);
        let all: Vec<&str> = login
            .iter()
            .map(String::as_str)
            .chain(args.iter().copied())
            .collect();
        corelog(&self.broker.addr.to_string(), &all, stdin)
    }

    /// As [`Tenants::run`], asserting success; its stdout.
    #[must_use]
    pub fn ok(&self, user: &str, args: &[&str], stdin: Option<&str>) -> String {
        let output = self.run(user, args, stdin);
        assert!(
            output.status.success(),
            "{user} {args:?}: {}",
            text(&output.stderr)
        );
        text(&output.stdout)
    }

    /// A protocol client from `source`, logged in as `user`.
    #[must_use]
    pub fn client_as(&self, source: Ipv4Addr, user: &str) -> Client {
        let mut client = client_from(source, self.broker.addr).unwrap();
        scram_login(&mut client, user, &format!("{user}-password")).unwrap();
        client
    }
}
