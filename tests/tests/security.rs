//! The trust boundary (issue 16). Here, item 4 with security off: the
//! inter-broker APIs (controller Raft, registration, metadata, replication)
//! are served only on a connection that proved the cluster's shared secret
//! (`--cluster-secret-file`, the `CORELOG-CLUSTER` exchange of
//! `Authenticate`); an ordinary client on the network is refused with
//! `CLUSTER_AUTHORIZATION_FAILED`, counted in `/metrics`, and keeps its
//! connection for client APIs. A wrong secret or a replayed proof is cut
//! off; a cluster broker without a secret does not start.
//!
//! Item 1, TLS: a TLS listener serves TLS clients and tells plaintext ones
//! so; a TLS client of a plaintext broker is told why it failed; every
//! kind of untrusted certificate is named; SIGHUP swaps the certificate
//! without dropping open connections; client certificates when required;
//! a cluster whose brokers verify each other.
//!
//! Item 3, ACLs: default deny with `--authorization on`, each topic and
//! group operation against its rule, a prefix that stops at the
//! neighbouring tenant, a deny over an allow, guessed topic names that
//! reveal nothing, the audit's principal, cluster-admin for users and
//! ACLs, and a change that reaches an open connection within a second.
//!
//! Item 5, quotas: a noisy neighbour held to its produce quota while the
//! tenant beside it is not throttled; connection limits per principal and
//! per address.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

use corelog_tests::cli::{self, corelog, text};
use corelog_tests::cluster_client::serial;
use corelog_tests::process::{as_strs, free_port, test_cluster_secret_file};
use corelog_tests::tls::{Issued, TestCa, Validity, broker_tls_args, secured_broker_args};
use corelog_tests::wire_client::{Body, Client};
use corelog_tests::{Broker, binary, start_cluster};
use corelog_wire::error::ErrorCode;
use corelog_wire::frame::ApiKey;
use corelog_wire::message;
use corelog_wire::message::authenticate::{AuthenticateRequest, AuthenticateResponse};
use corelog_wire::message::broker_register::BrokerRegisterRequest;
use corelog_wire::message::metadata::{MetadataRequest, MetadataResponse};
use corelog_wire::sasl::cluster::{self, ClientExchange, ClusterSecret, NONCE_BYTES};

/// The top-level error code of a response body (`NONE` for an answer).
fn top_level_code(body: &Body) -> u16 {
    u16::from_be_bytes([body.bytes[0], body.bytes[1]])
}

fn cluster_info(broker: &Broker) -> String {
    text(&corelog(&broker.addr.to_string(), &["cluster", "info"], None).stdout)
}

/// Waits until the cluster's three brokers are registered and alive.
fn wait_for_three_brokers(broker: &Broker) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let info = cluster_info(broker);
        if info.lines().filter(|line| line.contains("alive")).count() == 3 {
            return;
        }
        assert!(Instant::now() < deadline, "brokers never came up:\n{info}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// One `Authenticate` step: the response, or the top-level error.
fn authenticate(client: &mut Client, payload: Vec<u8>) -> AuthenticateResponse {
    let request = AuthenticateRequest {
        mechanism: cluster::MECHANISM.to_owned(),
        payload,
    };
    let body = client.call(&request, &[]).unwrap();
    let (archived, _) = message::decode_response::<AuthenticateResponse>(&body.bytes).unwrap();
    rkyv::deserialize::<AuthenticateResponse, rkyv::rancor::Error>(archived).unwrap()
}

fn test_secret() -> ClusterSecret {
    ClusterSecret::new(&std::fs::read(test_cluster_secret_file()).unwrap()).unwrap()
}

/// Sends a forged registration, then every inter-broker API with a body of
/// zeros (Raft messages, replication pushes, election queries, metadata,
/// whatever they would carry), on `client`: each is refused with
/// `CLUSTER_AUTHORIZATION_FAILED`, and the connection still serves client
/// APIs.
fn every_inter_broker_api_is_refused(client: &mut Client) {
    // Without the gate, broker 99 would join.
    let register = BrokerRegisterRequest {
        node_id: 99,
        host: "127.0.0.1".to_owned(),
        port: 1,
        rack: None,
        shards: 1,
        incarnation: 1,
    };
    let body = client.call(&register, &[]).unwrap();
    assert_eq!(
        top_level_code(&body),
        ErrorCode::ClusterAuthorizationFailed.code()
    );
    for api in ApiKey::ALL.iter().filter(|api| api.is_inter_broker()) {
        let sent = client.send_frame(*api, &[0u8; 64]).unwrap();
        let (correlation_id, body) = client.read_response().unwrap();
        assert_eq!(correlation_id, sent);
        assert_eq!(
            top_level_code(&body),
            ErrorCode::ClusterAuthorizationFailed.code(),
            "{api} was not refused"
        );
    }
    let body = client.call(&MetadataRequest { topics: None }, &[]).unwrap();
    assert!(message::decode_response::<MetadataResponse>(&body.bytes).is_ok());
}

#[test]
fn inter_broker_apis_are_refused_to_a_connection_without_the_cluster_secret() {
    let _serial = serial();
    let brokers = start_cluster(3, &[]);
    wait_for_three_brokers(&brokers[0]);
    let mut client = brokers[0].client();

    every_inter_broker_api_is_refused(&mut client);

    let metrics = brokers[0].metrics();
    for api in [
        "BrokerRegister",
        "ControllerRaft",
        "ReplicaPush",
        "ReplicaStream",
    ] {
        assert!(
            metrics.lines().any(|line| {
                line.starts_with("corelog_inter_broker_refused_total")
                    && line.contains(&format!("api=\"{api}\""))
                    && !line.ends_with(" 0")
            }),
            "no refusal of {api} counted:\n{metrics}"
        );
    }
    let info = cluster_info(&brokers[0]);
    assert!(
        !info.lines().any(|line| line.starts_with("99 ")),
        "the forged broker joined:\n{info}"
    );
    // The brokers themselves still replicate and elect: they prove the
    // secret on their own connections.
    assert_eq!(
        info.lines().filter(|line| line.contains("alive")).count(),
        3,
        "{info}"
    );
}

#[test]
fn the_cluster_secret_opens_inter_broker_apis_and_a_wrong_or_replayed_proof_is_cut_off() {
    let _serial = serial();
    let brokers = start_cluster(3, &[]);
    wait_for_three_brokers(&brokers[0]);

    // The right secret: both sides prove it, then inter-broker requests
    // reach their handlers (an empty ReplicaQuery body is a malformed
    // request, no longer a refusal).
    let mut client = brokers[0].client();
    let honest = ClientExchange::new(test_secret(), 2, [7; NONCE_BYTES]);
    let server_first = authenticate(&mut client, honest.first());
    assert_eq!(server_first.error_code, ErrorCode::None.code());
    assert!(!server_first.complete);
    let recorded_final = honest.answer(&server_first.payload).unwrap();
    let done = authenticate(&mut client, recorded_final.clone());
    assert!(done.complete, "{done:?}");
    let sent = client.send_frame(ApiKey::ReplicaQuery, &[]).unwrap();
    let (correlation_id, body) = client.read_response().unwrap();
    assert_eq!(correlation_id, sent);
    assert_eq!(top_level_code(&body), ErrorCode::InvalidRequest.code());

    // A guessed secret: the broker's proof does not check out, and a
    // made-up proof is refused and the connection closed.
    let mut client = brokers[0].client();
    let guess = ClientExchange::new(
        ClusterSecret::new(b"a-guess-at-the-secret").unwrap(),
        2,
        [7; NONCE_BYTES],
    );
    let server_first = authenticate(&mut client, guess.first());
    assert!(guess.answer(&server_first.payload).is_err());
    let refused = authenticate(&mut client, vec![0; 32]);
    assert_eq!(refused.error_code, ErrorCode::AuthenticationFailed.code());
    assert!(!refused.complete);
    assert!(
        client.read_response().is_err(),
        "the connection stays open after a failed proof"
    );

    // A replay of the honest exchange on a new connection: the broker drew
    // a new nonce, so the recorded proof is worthless.
    let mut client = brokers[0].client();
    let _ = authenticate(&mut client, honest.first());
    let replayed = authenticate(&mut client, recorded_final);
    assert_eq!(replayed.error_code, ErrorCode::AuthenticationFailed.code());
    let metrics = brokers[0].metrics();
    assert!(
        metrics
            .lines()
            .any(|line| line.starts_with("corelog_authentications_total")
                && line.contains("reason=\"failed\"")
                && line.ends_with(" 2")),
        "{metrics}"
    );
}

#[test]
fn a_cluster_broker_without_a_cluster_secret_does_not_start() {
    let temp = tempfile::tempdir().unwrap();
    let log = temp.path().join("broker.log");
    let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let voters = format!(
        "1@{addr},2@127.0.0.1:{},3@127.0.0.1:{}",
        free_port(),
        free_port()
    );
    let mut broker = Broker::unstarted(
        addr,
        &temp.path().join("data"),
        &["--node-id", "1", "--controller-voters", &voters],
    );
    let status = broker
        .try_spawn_logged(&log)
        .expect_err("a cluster broker without a secret is refused");
    assert_eq!(status.code(), Some(2));
    let said = std::fs::read_to_string(&log).unwrap();
    assert!(said.contains("--cluster-secret-file"), "{said}");
    assert!(
        !temp.path().join("data").exists(),
        "it touched its data directory"
    );
}

// ---- Item 1: TLS -------------------------------------------------------

/// `corelog` against `broker` with `tls` flags before `args`.
fn corelog_tls(broker: &Broker, tls: &[&str], args: &[&str], stdin: Option<&str>) -> Output {
    let all: Vec<&str> = tls.iter().chain(args).copied().collect();
    corelog(&broker.addr.to_string(), &all, stdin)
}

fn path(file: &Path) -> String {
    file.display().to_string()
}

/// Creates `topic` over the connection `tls` opens.
fn create_topic(broker: &Broker, tls: &[&str], topic: &str) {
    let created = corelog_tls(
        broker,
        tls,
        &["topic", "create", topic, "--partitions", "1"],
        None,
    );
    assert!(created.status.success(), "{}", text(&created.stderr));
}

/// Produces one record and reads it back over the connection `tls` opens.
fn round_trip(broker: &Broker, tls: &[&str], topic: &str, value: &str) {
    let produced = corelog_tls(broker, tls, &["produce", "--topic", topic], Some(value));
    assert!(produced.status.success(), "{}", text(&produced.stderr));
    let consumed = corelog_tls(broker, tls, &["consume", "--topic", topic], None);
    assert!(consumed.status.success(), "{}", text(&consumed.stderr));
    assert!(
        text(&consumed.stdout).contains(value),
        "{}",
        text(&consumed.stdout)
    );
}

/// A failure within the connect timeout (10 s), with what stderr says.
fn fails_fast(broker: &Broker, tls: &[&str]) -> String {
    let started = Instant::now();
    let output = corelog_tls(broker, tls, &["topic", "list"], None);
    assert!(!output.status.success(), "{}", text(&output.stdout));
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "took {:?}",
        started.elapsed()
    );
    text(&output.stderr)
}

#[test]
fn tls_clients_are_served_and_a_plaintext_client_is_told_tls_is_required() {
    let ca = TestCa::new("corelog test CA");
    let broker_cert = ca.issue("broker", &["127.0.0.1", "localhost"], Validity::Now);
    let broker = Broker::start(&as_strs(&broker_tls_args(&broker_cert)));
    let ca_file = path(&ca.ca_file());
    create_topic(&broker, &["--tls-ca", &ca_file], "secured");
    round_trip(&broker, &["--tls-ca", &ca_file], "secured", "over tls");

    let said = fails_fast(&broker, &[]);
    assert!(
        said.contains("TLS_REQUIRED") && said.contains("--tls-ca"),
        "{said}"
    );
    let metrics = broker.metrics();
    assert!(
        metrics
            .contains("corelog_connections_closed_total{shard=\"0\",reason=\"plaintext_on_tls\"}"),
        "{metrics}"
    );
}

#[test]
fn a_tls_client_of_a_plaintext_broker_is_told_it_answered_in_plaintext() {
    let ca = TestCa::new("corelog test CA");
    let broker = Broker::start(&[]);
    let said = fails_fast(&broker, &["--tls-ca", &path(&ca.ca_file())]);
    assert!(
        said.contains("answered in plaintext") && said.contains("does not speak TLS"),
        "{said}"
    );
}

/// Every way a broker's certificate can fail the client's checks is named
/// as such; the broker's certificate is swapped with SIGHUP between them,
/// while a consumer that opened its connection before keeps reading.
#[test]
fn untrusted_broker_certificates_are_refused_with_the_reason_and_sighup_reloads() {
    let ca = TestCa::new("corelog test CA");
    let other_ca = TestCa::new("another CA");
    let good = ca.issue("good", &["127.0.0.1"], Validity::Now);
    let rotating = RotatingBroker::start(&ca, &good);
    let (broker, log) = (&rotating.broker, &rotating.log);
    let install = |issued: &Issued| rotating.install(issued);
    let ca_file = path(&ca.ca_file());
    let tls = ["--tls-ca", ca_file.as_str()];
    create_topic(broker, &tls, "rotated");
    round_trip(broker, &tls, "rotated", "before any reload");
    // A consumer that connects now, and is seen reading before any reload.
    let (mut follower, printed) = reading_follower(broker, &tls, "rotated");

    let cases = [
        (
            ca.issue("expired", &["127.0.0.1"], Validity::Expired),
            "has expired",
        ),
        (
            ca.issue("early", &["127.0.0.1"], Validity::NotYetValid),
            "not valid yet",
        ),
        (
            ca.issue("elsewhere", &["other.example"], Validity::Now),
            "does not name the host",
        ),
        (
            other_ca.issue("foreign", &["127.0.0.1"], Validity::Now),
            "not signed by the CA",
        ),
    ];
    for (reloads, (issued, expected)) in (1..).zip(&cases) {
        install(issued);
        reload(broker, log, reloads);
        let said = fails_fast(broker, &tls);
        assert!(said.contains(expected), "{expected:?}: {said}");
    }
    // The broker said so when it loaded the expired one.
    let logged = std::fs::read_to_string(log).unwrap();
    assert!(logged.contains("it has EXPIRED"), "{logged}");
    install(&good);
    reload(broker, log, cases.len() + 1);
    round_trip(broker, &tls, "rotated", "after the reloads");

    // The consumer connected before every reload and still reads.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let line = printed
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .expect("the follower prints the record produced after the reloads");
        if line.contains("after the reloads") {
            break;
        }
    }
    follower.kill().unwrap();
    follower.wait().unwrap();
}

/// A `consume --follow` of `topic` with `flags`, returned once it is seen
/// reading (it printed one of the records produced meanwhile), with the
/// lines it prints from then on.
fn reading_follower(
    broker: &Broker,
    flags: &[&str],
    topic: &str,
) -> (std::process::Child, std::sync::mpsc::Receiver<String>) {
    let args = [flags, &["consume", "--topic", topic, "--follow"]].concat();
    let mut follower = cli::spawn(&broker.addr.to_string(), &args);
    let printed = lines_of(follower.stdout.take().unwrap());
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut reading = false;
    while !reading && Instant::now() < deadline {
        let produced = corelog_tls(broker, flags, &["produce", "--topic", topic], Some("ping"));
        assert!(produced.status.success(), "{}", text(&produced.stderr));
        reading = printed.recv_timeout(Duration::from_millis(500)).is_ok();
    }
    if !reading {
        let _killed = follower.kill();
        let _reaped = follower.wait();
        panic!("the follower printed nothing");
    }
    (follower, printed)
}

/// The lines a child prints, as they come.
fn lines_of(stdout: std::process::ChildStdout) -> std::sync::mpsc::Receiver<String> {
    let (lines, printed) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        // Read to the end even once nobody listens: a closed pipe would
        // end the child (a consumer exits 0 on EPIPE, as `head` wants), so
        // a follower that printed one line more than awaited would close
        // its connections while the test still counts them.
        for line in std::io::BufRead::lines(std::io::BufReader::new(stdout)) {
            let Ok(line) = line else { return };
            let _unheard = lines.send(line);
        }
    });
    printed
}

/// A TLS broker whose certificate files (`serving`) a test replaces, with
/// its output in `log`.
struct RotatingBroker {
    broker: Broker,
    log: std::path::PathBuf,
    serving: Issued,
    _temp: tempfile::TempDir,
}

impl RotatingBroker {
    /// Starts one serving `first`, its files next to `ca`'s.
    fn start(ca: &TestCa, first: &Issued) -> RotatingBroker {
        let serving = Issued {
            cert: ca.dir().join("serving.pem"),
            key: ca.dir().join("serving.key"),
        };
        let temp = tempfile::tempdir().unwrap();
        let rotating = RotatingBroker {
            broker: Broker::unstarted(
                SocketAddr::from(([127, 0, 0, 1], free_port())),
                &temp.path().join("data"),
                &as_strs(&broker_tls_args(&serving)),
            ),
            log: temp.path().join("broker.log"),
            serving,
            _temp: temp,
        };
        rotating.install(first);
        let mut rotating = rotating;
        rotating.broker.try_spawn_logged(&rotating.log).unwrap();
        rotating
    }

    /// Puts `issued` where the broker reads its certificate (it takes it
    /// at the next SIGHUP).
    fn install(&self, issued: &Issued) {
        std::fs::copy(&issued.cert, &self.serving.cert).unwrap();
        std::fs::copy(&issued.key, &self.serving.key).unwrap();
    }
}

/// Certificate rotation under load: `corelog verify` produces and
/// consumes over TLS while the certificate is replaced three times; nothing
/// acknowledged is lost and no handshake fails.
#[test]
fn rotating_the_certificate_under_load_loses_nothing_and_fails_no_handshake() {
    let ca = TestCa::new("corelog test CA");
    let rotating = RotatingBroker::start(&ca, &ca.issue("first", &["127.0.0.1"], Validity::Now));
    let ca_file = path(&ca.ca_file());
    let verify = cli::spawn(
        &rotating.broker.addr.to_string(),
        &[
            "--tls-ca",
            &ca_file,
            "--json",
            "verify",
            "--topic",
            "rotating",
            "--duration",
            "6s",
            "--rate",
            "1000",
        ],
    );
    for generation in 1..=3 {
        std::thread::sleep(Duration::from_millis(1200));
        rotating.install(&ca.issue(
            &format!("rotated-{generation}"),
            &["127.0.0.1"],
            Validity::Now,
        ));
        reload(&rotating.broker, &rotating.log, generation);
    }
    let verified = verify.wait_with_output().unwrap();
    assert!(verified.status.success(), "{}", text(&verified.stderr));
    let report: serde_json::Value = serde_json::from_slice(&verified.stdout).unwrap();
    assert_eq!(report["clean"], true, "{report}");
    assert!(
        report["stats"]["acknowledged"].as_u64().unwrap() >= 3000,
        "{report}"
    );
    assert_eq!(
        counter(
            &rotating.broker,
            "corelog_connections_closed_total",
            "tls_handshake_failed"
        ),
        0
    );
}

/// Sends SIGHUP and waits for the broker to log its `count`th reload.
fn reload(broker: &Broker, log: &Path, count: usize) {
    broker.signal(rustix::process::Signal::HUP);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let said = std::fs::read_to_string(log).unwrap();
        if said.matches("reloaded the TLS certificate").count() >= count {
            return;
        }
        assert!(Instant::now() < deadline, "no reload logged:\n{said}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn with_client_auth_required_only_a_client_certificate_of_the_ca_is_served() {
    let ca = TestCa::new("corelog test CA");
    let other_ca = TestCa::new("another CA");
    let broker_cert = ca.issue("broker", &["127.0.0.1"], Validity::Now);
    let client = ca.issue("client", &["reader.example"], Validity::Now);
    let stranger = other_ca.issue("stranger", &["reader.example"], Validity::Now);
    let mut args = broker_tls_args(&broker_cert);
    args.extend([
        "--tls-client-ca".to_owned(),
        path(&ca.ca_file()),
        "--tls-client-auth".to_owned(),
        "required".to_owned(),
    ]);
    let broker = Broker::start(&as_strs(&args));
    let ca_file = path(&ca.ca_file());

    let said = fails_fast(&broker, &["--tls-ca", &ca_file]);
    assert!(said.contains("client certificates"), "{said}");
    let (cert, key) = (path(&stranger.cert), path(&stranger.key));
    let said = fails_fast(
        &broker,
        &["--tls-ca", &ca_file, "--tls-cert", &cert, "--tls-key", &key],
    );
    assert!(said.contains("refused the TLS handshake"), "{said}");
    let (cert, key) = (path(&client.cert), path(&client.key));
    let tls = ["--tls-ca", &ca_file, "--tls-cert", &cert, "--tls-key", &key];
    create_topic(&broker, &tls, "mutual");
    round_trip(&broker, &tls, "mutual", "with a client certificate");
}

/// Brokers of a TLS cluster verify each other against the cluster's CA:
/// registration, Raft and replication all run over TLS.
#[test]
fn a_tls_cluster_replicates_over_tls() {
    let _serial = serial();
    let ca = TestCa::new("corelog test CA");
    let broker_cert = ca.issue("broker", &["127.0.0.1"], Validity::Now);
    let mut args = broker_tls_args(&broker_cert);
    args.extend(["--tls-client-ca".to_owned(), path(&ca.ca_file())]);
    let brokers = start_cluster(3, &as_strs(&args));
    let ca_file = path(&ca.ca_file());
    let tls = ["--tls-ca", ca_file.as_str()];
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let created = corelog_tls(
            &brokers[0],
            &tls,
            &[
                "topic",
                "create",
                "replicated",
                "--partitions",
                "1",
                "--replication-factor",
                "3",
            ],
            None,
        );
        if created.status.success() {
            break;
        }
        assert!(Instant::now() < deadline, "{}", text(&created.stderr));
        std::thread::sleep(Duration::from_millis(200));
    }
    round_trip(&brokers[1], &tls, "replicated", "on three brokers");
    // Every replica caught up over TLS: the leader reports all three in sync.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let described = corelog_tls(
            &brokers[2],
            &tls,
            &["--json", "topic", "describe", "replicated"],
            None,
        );
        let topics: serde_json::Value =
            serde_json::from_slice(&described.stdout).unwrap_or(serde_json::Value::Null);
        let in_sync = topics[0]["partition_details"][0]["in_sync"]
            .as_array()
            .map_or(0, Vec::len);
        if in_sync == 3 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{} {}",
            text(&described.stdout),
            text(&described.stderr)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A base port for `scripts/cluster.sh` whose brokers' ports (base + 1..3)
/// and metrics ports (base + 101..103) are all free.
fn free_base_port() -> u16 {
    let free = |port: u16| std::net::TcpListener::bind(("127.0.0.1", port)).is_ok();
    (0..200)
        .map(|_| free_port().saturating_sub(200))
        .find(|base| {
            *base > 1024 && (1..=3).all(|i| free(base + i)) && (101..=103).all(|i| free(base + i))
        })
        .expect("a free range of ports")
}

/// `scripts/cluster.sh up 3 --tls` makes a CA and certificates with
/// `scripts/dev-certs.sh` and starts a cluster that only TLS clients
/// reach; `status` and `down` follow it.
#[test]
fn cluster_sh_up_tls_starts_a_cluster_only_tls_clients_reach() {
    let _serial = serial();
    let temp = tempfile::tempdir().unwrap();
    let cluster_dir = temp.path().join("cluster");
    let base = free_base_port();
    let script = |args: &[&str]| {
        std::process::Command::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../scripts/cluster.sh"
        ))
        .args(args)
        .env("BASE_PORT", base.to_string())
        .env("CLUSTER_DIR", &cluster_dir)
        .env("CORELOGD", binary("corelogd"))
        .env("CORELOG", binary("corelog"))
        .env_remove("CORELOG_TLS_CA")
        .output()
        .unwrap()
    };
    let up = script(&["up", "3", "--tls"]);
    let said = format!("{}{}", text(&up.stdout), text(&up.stderr));
    if !up.status.success() {
        script(&["down"]);
        panic!("{said}");
    }
    assert!(said.contains("with --tls-ca"), "{said}");
    let ca_file = path(&cluster_dir.join("tls/ca.pem"));
    let bootstrap = format!("127.0.0.1:{}", base + 1);
    let plain = corelog(&bootstrap, &["topic", "list"], None);
    let tls_list = corelog(&bootstrap, &["--tls-ca", &ca_file, "topic", "list"], None);
    let status = script(&["status"]);
    let down = script(&["down"]);
    assert!(!plain.status.success());
    assert!(
        text(&plain.stderr).contains("TLS_REQUIRED"),
        "{}",
        text(&plain.stderr)
    );
    assert!(tls_list.status.success(), "{}", text(&tls_list.stderr));
    assert!(
        text(&status.stdout)
            .lines()
            .filter(|line| line.contains("  alive  "))
            .count()
            == 3,
        "{}",
        text(&status.stdout)
    );
    assert!(down.status.success(), "{}", text(&down.stderr));
}

// ---- Item 2: users and SCRAM ------------------------------------------

/// A file holding `password`, for `--sasl-password-file`.
fn password_file(dir: &Path, user: &str, password: &str) -> String {
    let file = dir.join(format!("{user}.password"));
    std::fs::write(&file, format!("{password}\n")).unwrap();
    path(&file)
}

/// The login flags of `user` with the password in `file`.
fn login<'a>(user: &'a str, file: &'a str) -> [&'a str; 4] {
    ["--sasl-user", user, "--sasl-password-file", file]
}

/// A counter of the broker's `/metrics`, summed over its label sets that
/// contain `labels`; 0 when absent.
fn counter(broker: &Broker, name: &str, labels: &str) -> u64 {
    broker
        .metrics()
        .lines()
        .filter(|line| line.starts_with(name) && line.contains(labels))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// Users are made with `user create` while authentication is off, then a
/// broker that requires it serves only their logins: nothing before a
/// login, a wrong password and an unknown user alike refused (each later
/// than the one before), every API before the exchange closed with
/// AUTHENTICATION_REQUIRED, a deleted user's and a re-keyed user's open
/// connections closed at once.
#[test]
fn a_broker_requiring_authentication_serves_only_its_users_logins() {
    let temp = tempfile::tempdir().unwrap();
    let mut broker = Broker::start(&[]);
    let addr = broker.addr.to_string();
    for (user, password) in [("alice", "wonderland"), ("bob", "builder")] {
        let created = corelog(
            &addr,
            &["user", "create", user, "--password-stdin"],
            Some(password),
        );
        assert!(created.status.success(), "{}", text(&created.stderr));
        assert!(
            text(&created.stdout).contains("created user"),
            "{}",
            text(&created.stdout)
        );
    }
    let listed = text(&corelog(&addr, &["user", "list"], None).stdout);
    assert!(
        listed.contains("alice") && listed.contains("SCRAM-SHA-256 (8192), SCRAM-SHA-512 (8192)"),
        "{listed}"
    );
    assert!(!listed.contains("wonderland"));

    broker.terminate();
    broker
        .extra_args
        .extend(["--authentication".to_owned(), "required".to_owned()]);
    broker.spawn();
    let alice_file = password_file(temp.path(), "alice", "wonderland");
    let alice = login("alice", &alice_file);
    let wrong_file = password_file(temp.path(), "wrong", "looking-glass");

    // Nothing before a login.
    let anonymous = corelog(&addr, &["topic", "list"], None);
    assert!(!anonymous.status.success());
    assert!(
        text(&anonymous.stderr).contains("AUTHENTICATION_REQUIRED"),
        "{}",
        text(&anonymous.stderr)
    );

    // A wrong password and an unknown user: the same refusal, each answered
    // later than the one before from this address.
    let mut said = Vec::new();
    let mut took = Vec::new();
    for user in ["alice", "mallory", "alice"] {
        let started = Instant::now();
        let refused = corelog(
            &addr,
            &[&login(user, &wrong_file)[..], &["topic", "list"]].concat(),
            None,
        );
        took.push(started.elapsed());
        assert!(!refused.status.success());
        let stderr = text(&refused.stderr);
        assert!(stderr.contains("AUTHENTICATION_FAILED"), "{stderr}");
        said.push(stderr.replace("mallory", "alice"));
    }
    assert_eq!(
        said[0], said[1],
        "an unknown user is told what a wrong password is"
    );
    assert!(took[1] >= Duration::from_millis(400), "{took:?}");
    assert!(took[2] >= Duration::from_millis(800), "{took:?}");

    // The right password is served.
    let tls_free: Vec<&str> = alice.to_vec();
    create_topic(&broker, &tls_free, "guarded");
    round_trip(&broker, &tls_free, "guarded", "for alice");

    // A deleted user's open connection is closed at once, in-flight fetch
    // or not.
    let before = counter(
        &broker,
        "corelog_connections_closed_total",
        "credential_revoked",
    );
    let (follower, _printed) = reading_follower(&broker, &alice, "guarded");
    let bob_file = password_file(temp.path(), "bob", "builder");
    let deleted = corelog(
        &addr,
        &[&login("bob", &bob_file)[..], &["user", "delete", "alice"]].concat(),
        None,
    );
    assert!(deleted.status.success(), "{}", text(&deleted.stderr));
    let closed_by = Instant::now() + Duration::from_secs(1);
    while counter(
        &broker,
        "corelog_connections_closed_total",
        "credential_revoked",
    ) <= before
    {
        assert!(
            Instant::now() < closed_by,
            "alice's connection still open a second after"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let exited = follower.wait_with_output().unwrap();
    assert!(!exited.status.success(), "the follower cannot log in again");
    let gone = corelog(&addr, &[&alice[..], &["topic", "list"]].concat(), None);
    assert!(
        text(&gone.stderr).contains("AUTHENTICATION_FAILED"),
        "{}",
        text(&gone.stderr)
    );

    // A new password closes the old one's connections too.
    let before = counter(
        &broker,
        "corelog_connections_closed_total",
        "credential_revoked",
    );
    let (mut bobs, _bob_printed) = reading_follower(&broker, &login("bob", &bob_file), "guarded");
    let changed = corelog(
        &addr,
        &[
            &login("bob", &bob_file)[..],
            &["user", "create", "bob", "--password-stdin"],
        ]
        .concat(),
        Some("rebuilt"),
    );
    assert!(
        text(&changed.stdout).contains("changed the password"),
        "{}",
        text(&changed.stdout)
    );
    let closed_by = Instant::now() + Duration::from_secs(1);
    while counter(
        &broker,
        "corelog_connections_closed_total",
        "credential_revoked",
    ) <= before
    {
        assert!(
            Instant::now() < closed_by,
            "bob's old connection still open a second after"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    bobs.kill().unwrap();
    bobs.wait().unwrap();
}

/// With authentication required, every API but ApiVersions and
/// Authenticate, sent before a login, is answered AUTHENTICATION_REQUIRED
/// and its connection closed.
#[test]
fn every_api_before_authentication_is_refused_and_the_connection_closed() {
    let broker = Broker::start(&["--authentication", "required"]);
    for api_key in ApiKey::ALL.iter().copied() {
        if matches!(api_key, ApiKey::ApiVersions | ApiKey::Authenticate) {
            continue;
        }
        let mut client = Client::connect(broker.addr).unwrap();
        client.handshake().unwrap();
        client.send_frame(api_key, &[0; 16]).unwrap();
        let (_, body) = client.read_response().unwrap();
        assert_eq!(
            top_level_code(&body),
            ErrorCode::AuthenticationRequired.code(),
            "{api_key:?}"
        );
        assert!(
            client.read_response().is_err(),
            "{api_key:?}: the connection stays open"
        );
    }
}

/// A TLS broker that requires authentication and asks for client
/// certificates of `ca` (`client_auth`: `optional` or `required`).
fn certifying_broker(ca: &TestCa, client_auth: &str) -> Broker {
    let broker_cert = ca.issue("broker", &["127.0.0.1"], Validity::Now);
    let mut args = broker_tls_args(&broker_cert);
    args.extend(
        [
            "--tls-client-ca",
            &path(&ca.ca_file()),
            "--tls-client-auth",
            client_auth,
            "--authentication",
            "required",
        ]
        .map(str::to_owned),
    );
    Broker::start(&as_strs(&args))
}

/// With client certificates required, a verified certificate is a login:
/// its name (CN by default) is the principal, and a broker that requires
/// authentication serves it without SCRAM.
#[test]
fn a_verified_client_certificate_is_a_login() {
    let ca = TestCa::new("corelog test CA");
    let client = ca.issue("client", &["reader.example"], Validity::Now);
    let broker = certifying_broker(&ca, "optional");
    let ca_file = path(&ca.ca_file());
    let (cert, key) = (path(&client.cert), path(&client.key));
    let certified = ["--tls-ca", &ca_file, "--tls-cert", &cert, "--tls-key", &key];
    create_topic(&broker, &certified, "certified");
    round_trip(&broker, &certified, "certified", "by certificate");
    // TLS without a certificate is not a login.
    let said = fails_fast(&broker, &["--tls-ca", &ca_file]);
    assert!(said.contains("AUTHENTICATION_REQUIRED"), "{said}");
}

/// A cluster member that has just restarted knows no user and no ACL
/// until the controller answers it. While the controller has no leader
/// (the other members are down), it answers a login with the right
/// password, and a certificate's requests, `BROKER_NOT_READY` (retriable)
/// rather than "wrong password" or "not authorized"; once a quorum is back
/// it serves both.
#[test]
fn a_restarted_member_answers_not_ready_until_it_has_loaded_the_clusters_users() {
    let _serial = serial();
    let temp = tempfile::tempdir().unwrap();
    let ca = TestCa::new("corelog test CA");
    let broker_cert = ca.issue("broker", &["127.0.0.1"], Validity::Now);
    let admin_cert = ca.issue("admin", &["admin"], Validity::Now);
    let carol_cert = ca.issue("carol", &["carol"], Validity::Now);
    let ca_file = path(&ca.ca_file());
    let args = secured_broker_args(&broker_cert, &ca, "admin");
    let mut brokers = start_cluster(3, &as_strs(&args));
    let (cert, key) = (path(&admin_cert.cert), path(&admin_cert.key));
    let admin = ["--tls-ca", &ca_file, "--tls-cert", &cert, "--tls-key", &key];
    let (cert, key) = (path(&carol_cert.cert), path(&carol_cert.key));
    let carol = ["--tls-ca", &ca_file, "--tls-cert", &cert, "--tls-key", &key];
    let alice_file = password_file(temp.path(), "alice", "wonderland");
    let alice = [
        &["--tls-ca", ca_file.as_str()][..],
        &login("alice", &alice_file),
    ]
    .concat();
    let until_ok = |broker: &Broker, tls: &[&str], args: &[&str], stdin: Option<&str>| {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let output = corelog_tls(broker, tls, args, stdin);
            if output.status.success() {
                return;
            }
            assert!(Instant::now() < deadline, "{}", text(&output.stderr));
            std::thread::sleep(Duration::from_millis(200));
        }
    };
    until_ok(
        &brokers[0],
        &admin,
        &["user", "create", "alice", "--password-stdin"],
        Some("wonderland"),
    );
    // Every member knows alice before the restart.
    until_ok(&brokers[2], &alice, &["topic", "list"], None);
    until_ok(
        &brokers[0],
        &admin,
        &[
            "topic",
            "create",
            "kept",
            "--partitions",
            "1",
            "--replication-factor",
            "3",
        ],
        None,
    );
    for rule in [
        ["alice", "--operation", "fetch", "--topic", "kept"],
        ["alice", "--operation", "group-read", "--group", "watchers"],
        ["carol", "--operation", "describe", "--topic", "kept"],
    ] {
        until_ok(
            &brokers[0],
            &admin,
            &[&["acl", "add", "--allow"][..], &rule].concat(),
            None,
        );
    }
    // A group member of alice's reads through member 2 and keeps going
    // across the restart.
    let follow = [
        &alice[..],
        &[
            "consume",
            "--topic",
            "kept",
            "--group",
            "watchers",
            "--from-beginning",
            "--follow",
        ],
    ]
    .concat();
    let mut follower = cli::Running(cli::spawn(&brokers[2].addr.to_string(), &follow));
    let printed = lines_of(follower.0.stdout.take().unwrap());
    until_ok(
        &brokers[0],
        &admin,
        &["produce", "--topic", "kept"],
        Some("before"),
    );
    let seen = printed.recv_timeout(Duration::from_secs(30));
    assert_eq!(seen.as_deref(), Ok("before"));

    for broker in &mut brokers {
        broker.terminate();
    }
    brokers[2].spawn();
    let login = corelog_tls(&brokers[2], &alice, &["topic", "list"], None);
    let said = text(&login.stderr);
    assert!(!login.status.success());
    assert!(
        said.contains("BROKER_NOT_READY") && !said.contains("AUTHENTICATION_FAILED"),
        "{said}"
    );
    // A certificate needs no users, but its ACLs are not known yet either
    // (a super user's requests need none, and are served).
    let certified = corelog_tls(&brokers[2], &carol, &["topic", "list"], None);
    assert!(!certified.status.success(), "{}", text(&certified.stdout));
    assert!(
        text(&certified.stderr).contains("BROKER_NOT_READY"),
        "{}",
        text(&certified.stderr)
    );
    assert_eq!(
        counter(&brokers[2], "corelog_authentications_total", "failed"),
        0,
        "a login the broker could not check is no failed login"
    );

    // The follower keeps trying member 2 meanwhile.
    std::thread::sleep(Duration::from_secs(2));

    brokers[0].spawn();
    until_ok(&brokers[2], &alice, &["topic", "list"], None);
    until_ok(&brokers[2], &carol, &["topic", "describe", "kept"], None);
    until_ok(
        &brokers[0],
        &admin,
        &["produce", "--topic", "kept"],
        Some("after"),
    );
    // ("before" may come again: the group may not have committed it. The
    // member may have to wait out its session and rejoin: a minute.)
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut seen = Vec::new();
    while !seen.iter().any(|line| line == "after") {
        let left = deadline.saturating_duration_since(Instant::now());
        match printed.recv_timeout(left) {
            Ok(line) => seen.push(line),
            Err(_) => break,
        }
    }
    let (exited, stderr) = follower.stop();
    assert!(
        seen.iter().any(|line| line == "after"),
        "the follower printed {seen:?}, exit {exited:?}: {stderr}"
    );
}

/// `--client-config FILE` carries the connection settings (paths relative
/// to the file), and a flag wins over the file.
#[test]
fn a_client_config_file_carries_the_connection_settings() {
    let ca = TestCa::new("corelog test CA");
    let other_ca = TestCa::new("another CA");
    let _files_in_the_ca_dir = ca.issue("client", &["reader.example"], Validity::Now);
    let broker = certifying_broker(&ca, "required");
    let config = ca.dir().join("client.toml");
    std::fs::write(
        &config,
        format!(
            "bootstrap = \"{}\"\ntls_ca = \"ca.pem\"\ntls_cert = \"client.pem\"\ntls_key = \"client.key\"\n",
            broker.addr
        ),
    )
    .unwrap();
    let run = |extra: &[&str]| {
        std::process::Command::new(binary("corelog"))
            .args(["--client-config", &path(&config)])
            .args(extra)
            .args(["topic", "list"])
            .env_remove("CORELOG_BOOTSTRAP")
            .output()
            .unwrap()
    };
    let listed = run(&[]);
    assert!(listed.status.success(), "{}", text(&listed.stderr));
    let overridden = run(&["--tls-ca", &path(&other_ca.ca_file())]);
    assert!(!overridden.status.success());
    assert!(
        text(&overridden.stderr).contains("not signed by the CA"),
        "{}",
        text(&overridden.stderr)
    );
}

// ---- Item 3: ACLs -------------------------------------------------------

/// A broker with users `admin` (a super user), `alice` and `bob`, topics
/// `tenant-a.orders`, `tenant-ab.orders` and `secret` made while security
/// was off, then restarted with authentication required and authorization
/// on: the documented way to bring up a secured broker.
struct SecuredBroker {
    broker: Broker,
    _temp: tempfile::TempDir,
    files: std::collections::BTreeMap<&'static str, String>,
}

impl SecuredBroker {
    fn start() -> SecuredBroker {
        let temp = tempfile::tempdir().unwrap();
        let mut broker = Broker::start(&[]);
        let addr = broker.addr.to_string();
        let mut files = std::collections::BTreeMap::new();
        for user in ["admin", "alice", "bob"] {
            let password = format!("{user}-password");
            let created = corelog(
                &addr,
                &["user", "create", user, "--password-stdin"],
                Some(&password),
            );
            assert!(created.status.success(), "{}", text(&created.stderr));
            files.insert(user, password_file(temp.path(), user, &password));
        }
        for topic in ["tenant-a.orders", "tenant-ab.orders", "secret"] {
            create_topic(&broker, &[], topic);
        }
        broker.terminate();
        broker.extra_args.extend(
            [
                "--authentication",
                "required",
                "--authorization",
                "on",
                "--super-users",
                "admin",
            ]
            .map(str::to_owned),
        );
        broker.spawn();
        SecuredBroker {
            broker,
            _temp: temp,
            files,
        }
    }

    /// `corelog` logged in as `user`.
    fn run(&self, user: &str, args: &[&str], stdin: Option<&str>) -> Output {
        let file = &self.files[user];
        corelog_tls(&self.broker, &login(user, file), args, stdin)
    }

    /// As `run`, asserting success; its stdout.
    fn ok(&self, user: &str, args: &[&str], stdin: Option<&str>) -> String {
        let output = self.run(user, args, stdin);
        assert!(
            output.status.success(),
            "{user} {args:?}: {}",
            text(&output.stderr)
        );
        text(&output.stdout)
    }

    /// As `run`, asserting failure; its stderr.
    fn refused(&self, user: &str, args: &[&str], stdin: Option<&str>) -> String {
        let output = self.run(user, args, stdin);
        assert!(
            !output.status.success(),
            "{user} {args:?} was served: {}",
            text(&output.stdout)
        );
        text(&output.stderr)
    }

    /// `admin` adds a rule: `acl add` followed by `args`.
    fn grant(&self, args: &[&str]) {
        let said = self.ok("admin", &[&["acl", "add"], args].concat(), None);
        assert!(said.contains("added"), "{said}");
    }
}

/// With authorization on, nothing is served without an ACL; a prefix ACL
/// covers its tenant's topics and never the neighbouring `tenant-ab.`; a
/// deny wins over an allow.
#[test]
fn acls_decide_each_topic_operation_and_a_prefix_stops_at_the_neighbouring_tenant() {
    let secured = SecuredBroker::start();
    let alice = |args: &[&str], stdin| secured.refused("alice", args, stdin);
    let unauthorized = "TOPIC_AUTHORIZATION_FAILED";
    for (args, stdin) in [
        (&["produce", "--topic", "tenant-a.orders"][..], Some("x")),
        (&["consume", "--topic", "tenant-a.orders"][..], None),
        (&["topic", "describe", "tenant-a.orders"][..], None),
        (
            &["topic", "create", "tenant-a.new", "--partitions", "1"][..],
            None,
        ),
        (&["topic", "delete", "tenant-a.orders"][..], None),
    ] {
        let said = alice(args, stdin);
        assert!(said.contains(unauthorized), "{args:?}: {said}");
    }
    let listed = secured.ok("alice", &["topic", "list"], None);
    assert!(!listed.contains("tenant-a.orders"), "{listed}");

    for operation in ["produce", "fetch", "create", "delete"] {
        secured.grant(&[
            "--allow",
            "alice",
            "--operation",
            operation,
            "--topic",
            "tenant-a.",
            "--prefix",
        ]);
    }
    secured.ok(
        "alice",
        &["produce", "--topic", "tenant-a.orders"],
        Some("mine"),
    );
    let consumed = secured.ok("alice", &["consume", "--topic", "tenant-a.orders"], None);
    assert!(consumed.contains("mine"), "{consumed}");
    for (args, stdin) in [
        (&["produce", "--topic", "tenant-ab.orders"][..], Some("x")),
        (&["consume", "--topic", "tenant-ab.orders"][..], None),
        (&["topic", "describe", "tenant-ab.orders"][..], None),
        (&["topic", "delete", "tenant-ab.orders"][..], None),
    ] {
        let said = alice(args, stdin);
        assert!(said.contains(unauthorized), "{args:?}: {said}");
    }
    let listed = secured.ok("alice", &["topic", "list"], None);
    assert!(listed.contains("tenant-a.orders"), "{listed}");
    for hidden in ["tenant-ab.orders", "secret", "__groups", "__audit"] {
        assert!(!listed.contains(hidden), "{hidden} listed:\n{listed}");
    }
    secured.ok(
        "alice",
        &["topic", "create", "tenant-a.new", "--partitions", "1"],
        None,
    );
    secured.ok("alice", &["topic", "delete", "tenant-a.new"], None);

    secured.grant(&[
        "--deny",
        "alice",
        "--operation",
        "produce",
        "--topic",
        "tenant-a.orders",
    ]);
    let said = alice(&["produce", "--topic", "tenant-a.orders"], Some("denied"));
    assert!(said.contains(unauthorized), "{said}");
    let consumed = secured.ok("alice", &["consume", "--topic", "tenant-a.orders"], None);
    assert!(
        consumed.contains("mine") && !consumed.contains("denied"),
        "{consumed}"
    );
}

/// A principal that may not describe a topic is told exactly what it
/// would be told of a topic that does not exist, whatever it tries.
#[test]
fn guessing_a_topic_name_reveals_nothing() {
    let secured = SecuredBroker::start();
    secured.grant(&[
        "--allow",
        "bob",
        "--operation",
        "fetch",
        "--topic",
        "bob.",
        "--prefix",
    ]);
    for (args, stdin) in [
        (&["topic", "describe", "NAME"][..], None),
        (&["produce", "--topic", "NAME"][..], Some("x")),
        (&["consume", "--topic", "NAME"][..], None),
        (&["topic", "delete", "NAME"][..], None),
    ] {
        let said = |name: &str| {
            let args: Vec<&str> = args
                .iter()
                .map(|arg| if *arg == "NAME" { name } else { arg })
                .collect();
            secured.refused("bob", &args, stdin).replace(name, "NAME")
        };
        let existing = said("secret");
        assert!(
            existing.contains("TOPIC_AUTHORIZATION_FAILED"),
            "{existing}"
        );
        assert_eq!(existing, said("no-such-topic"), "{args:?}");
    }
    let listed = secured.ok("bob", &["topic", "list"], None);
    assert!(!listed.contains("secret"), "{listed}");
}

/// Joining and committing need `group-read`; resets need `group-admin`;
/// the audit record names the principal that logged in, not the one the
/// client declared.
#[test]
fn group_operations_need_their_acl_and_the_audit_names_the_login() {
    let secured = SecuredBroker::start();
    secured.ok(
        "admin",
        &["produce", "--topic", "tenant-a.orders"],
        Some("one"),
    );
    secured.grant(&[
        "--allow",
        "alice",
        "--operation",
        "fetch",
        "--topic",
        "tenant-a.",
        "--prefix",
    ]);
    let group_args = |group: &'static str| {
        [
            "consume",
            "--topic",
            "tenant-a.orders",
            "--group",
            group,
            "--max",
            "1",
        ]
    };
    let said = secured.refused("alice", &group_args("tenant-a.readers"), None);
    assert!(said.contains("GROUP_AUTHORIZATION_FAILED"), "{said}");
    secured.grant(&[
        "--allow",
        "alice",
        "--operation",
        "group-read",
        "--group",
        "tenant-a.",
        "--prefix",
    ]);
    let consumed = secured.ok("alice", &group_args("tenant-a.readers"), None);
    assert!(consumed.contains("one"), "{consumed}");
    secured.ok(
        "admin",
        &[
            "consume",
            "--topic",
            "tenant-a.orders",
            "--group",
            "payroll",
            "--max",
            "1",
        ],
        None,
    );
    let groups = secured.ok("alice", &["group", "list"], None);
    assert!(groups.contains("tenant-a.readers"), "{groups}");
    assert!(!groups.contains("payroll"), "{groups}");

    let reset = [
        "group",
        "reset-offsets",
        "tenant-a.readers",
        "--topic",
        "tenant-a.orders",
        "--to-earliest",
        "--reason",
        "replay",
        "--principal",
        "mallory",
    ];
    let said = secured.refused("alice", &reset, None);
    assert!(said.contains("GROUP_AUTHORIZATION_FAILED"), "{said}");
    secured.grant(&[
        "--allow",
        "alice",
        "--operation",
        "group-admin",
        "--group",
        "tenant-a.readers",
    ]);
    secured.ok("alice", &reset, None);
    let audit = secured.ok(
        "admin",
        &["--json", "group", "audit", "--group", "tenant-a.readers"],
        None,
    );
    let entries: serde_json::Value = serde_json::from_str(&audit).unwrap();
    let principals: Vec<&str> = entries
        .as_array()
        .unwrap()
        .iter()
        .map(|entry| entry["principal"].as_str().unwrap())
        .collect();
    assert_eq!(principals, ["alice"], "{audit}");
}

/// Users and ACLs are managed with `cluster-admin` only; an ACL change
/// reaches a consumer that is already connected within a second; a rule is
/// removed exactly as listed.
#[test]
fn acl_changes_need_cluster_admin_and_reach_open_connections_within_a_second() {
    let secured = SecuredBroker::start();
    for args in [
        &["user", "list"][..],
        &["acl", "list"][..],
        &[
            "acl",
            "add",
            "--allow",
            "alice",
            "--operation",
            "cluster-admin",
            "--cluster",
        ][..],
    ] {
        let said = secured.refused("alice", args, None);
        assert!(said.contains("CLUSTER_ADMIN_REQUIRED"), "{args:?}: {said}");
    }
    let rule = [
        "--allow",
        "alice",
        "--operation",
        "fetch",
        "--topic",
        "tenant-a.orders",
    ];
    secured.grant(&rule);
    secured.grant(&[
        "--allow",
        "alice",
        "--operation",
        "produce",
        "--topic",
        "tenant-a.orders",
    ]);
    let listed = secured.ok("admin", &["acl", "list", "--principal", "alice"], None);
    assert!(
        listed.contains("allow       alice      fetch      topic     literal  tenant-a.orders")
            || listed.lines().any(|line| {
                let words: Vec<&str> = line.split_whitespace().collect();
                words
                    == [
                        "allow",
                        "alice",
                        "fetch",
                        "topic",
                        "literal",
                        "tenant-a.orders",
                    ]
            }),
        "{listed}"
    );

    let alice = login("alice", &secured.files["alice"]);
    let (mut follower, _printed) = reading_follower(&secured.broker, &alice, "tenant-a.orders");
    secured.grant(&[&["--deny"], &rule[1..]].concat());
    let denied_at = Instant::now();
    // The consumer's long poll (500 ms) that began before the deny may
    // still finish; the next fetch is refused.
    let stopped_by = denied_at + Duration::from_secs(1);
    let status = loop {
        if let Some(status) = follower.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > stopped_by {
            follower.kill().unwrap();
            panic!("the consumer still reads a second after the deny");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(!status.success());
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut follower.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(stderr.contains("TOPIC_AUTHORIZATION_FAILED"), "{stderr}");

    let removed = secured.ok("admin", &[&["acl", "remove"], &rule[..]].concat(), None);
    assert!(removed.contains("removed"), "{removed}");
    let said = secured.refused("admin", &[&["acl", "remove"], &rule[..]].concat(), None);
    assert!(said.contains("ACL_NOT_FOUND"), "{said}");
}

/// Item 4 from a client principal: a user who logged in, a super user at
/// that, still may not speak the inter-broker APIs: a forged
/// registration, Raft message or replication push is refused with
/// `CLUSTER_AUTHORIZATION_FAILED`, and the connection keeps serving it.
#[test]
fn a_logged_in_super_user_cannot_forge_inter_broker_requests() {
    let _serial = serial();
    let brokers = start_cluster(3, &["--super-users", "admin"]);
    wait_for_three_brokers(&brokers[0]);
    let addr = brokers[0].addr.to_string();
    let created = corelog(
        &addr,
        &["user", "create", "admin", "--password-stdin"],
        Some("admin-password"),
    );
    assert!(created.status.success(), "{}", text(&created.stderr));

    let mut client = brokers[0].client();
    scram_login(&mut client, "admin", "admin-password");

    every_inter_broker_api_is_refused(&mut client);
    let info = cluster_info(&brokers[0]);
    // (A row of broker 99, not a port with "99" in it.)
    assert!(
        !info.lines().any(|line| line.starts_with("99 ")),
        "the forged broker registered:\n{info}"
    );
}

// ---- Item 5: quotas -----------------------------------------------------

/// A producer of `user` on `broker`, with a small buffer so that what it
/// holds back drains in a second or two.
async fn tenant_producer(broker: &Broker, user: &str) -> corelog_client::Producer {
    let mut config = corelog_client::ProducerConfig::new(broker.addr.to_string());
    config.client.sasl = Some(
        corelog_client::SaslCredentials::scram(
            corelog_client::ScramMechanism::Sha256,
            user,
            &format!("{user}-password"),
        )
        .unwrap(),
    );
    config.buffer_bytes = 1 << 20;
    config.batch_bytes = 64 << 10;
    config.linger = Duration::from_millis(5);
    corelog_client::Producer::connect(config).await.unwrap()
}

/// Sends 1 KiB records at `rate` per second for `duration`; the ack
/// times, in send order.
async fn produce_for(
    producer: &corelog_client::Producer,
    topic: &str,
    rate: u64,
    duration: Duration,
) -> Vec<(Instant, Instant)> {
    let (acks, mut acked) = tokio::sync::mpsc::channel(1 << 16);
    let collector = tokio::spawn(async move {
        let mut times = Vec::new();
        while let Some((sent_at, delivery)) = acked.recv().await {
            let delivery: corelog_client::producer::DeliveryFuture = delivery;
            if delivery.await.is_ok() {
                times.push((sent_at, Instant::now()));
            }
        }
        times
    });
    let start = Instant::now();
    let tick = Duration::from_millis(10);
    let per_tick = (rate / 100).max(1);
    let mut next = start;
    while start.elapsed() < duration {
        for _ in 0..per_tick {
            let record = corelog_client::ProducerRecord::new(topic, vec![b'x'; 1024]);
            let delivery = producer.send(record).await.unwrap();
            acks.send((Instant::now(), delivery)).await.unwrap();
        }
        next += tick;
        tokio::time::sleep_until(next.into()).await;
    }
    drop(acks);
    collector.await.unwrap()
}

/// p99 of send-to-ack latency.
fn p99(times: &[(Instant, Instant)]) -> Duration {
    let mut latencies: Vec<Duration> = times.iter().map(|(sent, acked)| *acked - *sent).collect();
    latencies.sort();
    latencies[(latencies.len() * 99 / 100).min(latencies.len() - 1)]
}

/// The noisy neighbour: tenant A producing at ten times its quota is held
/// within ±15% of it and told to back off (throttle_ms, counted by its
/// client and in /metrics); tenant B beside it, without a quota of its
/// own, is never throttled and gets all it sends. (Its p99 latency,
/// loaded against unloaded, is a benchmark figure: see the README.)
#[test]
fn a_tenant_over_its_produce_quota_is_held_to_it_and_its_neighbour_is_not_throttled() {
    const QUOTA: u64 = 512 << 10;
    let temp = tempfile::tempdir().unwrap();
    let mut broker = Broker::start(&[]);
    let addr = broker.addr.to_string();
    for user in ["admin", "tenant-a", "tenant-b"] {
        let created = corelog(
            &addr,
            &["user", "create", user, "--password-stdin"],
            Some(&format!("{user}-password")),
        );
        assert!(created.status.success(), "{}", text(&created.stderr));
    }
    for topic in ["noisy", "quiet"] {
        let created = corelog(
            &addr,
            &["topic", "create", topic, "--partitions", "4"],
            None,
        );
        assert!(created.status.success(), "{}", text(&created.stderr));
    }
    broker.terminate();
    broker
        .extra_args
        .extend(["--authentication", "required"].map(str::to_owned));
    broker.spawn();
    let admin_file = password_file(temp.path(), "admin", "admin-password");
    let set = corelog(
        &addr,
        &[
            &login("admin", &admin_file)[..],
            &["quota", "set", "user:tenant-a", "--produce-rate", "512KiB"],
        ]
        .concat(),
        None,
    );
    assert!(set.status.success(), "{}", text(&set.stderr));
    let described = corelog(
        &addr,
        &[&login("admin", &admin_file)[..], &["quota", "describe"]].concat(),
        None,
    );
    assert!(
        text(&described.stdout).contains("user:tenant-a  524288"),
        "{}",
        text(&described.stdout)
    );

    let runtime = corelog_tests::cluster_client::client_runtime();
    let (a_acks, b_acks, a_stats, b_stats) = runtime.block_on(async {
        let a = tenant_producer(&broker, "tenant-a").await;
        let b = tenant_producer(&broker, "tenant-b").await;
        let ten_times = 10 * QUOTA / 1024;
        let noisy = produce_for(&a, "noisy", ten_times, Duration::from_secs(16));
        let quiet = produce_for(&b, "quiet", 100, Duration::from_secs(16));
        let (a_acks, b_acks) = tokio::join!(noisy, quiet);
        let stats = (a.throttle_stats(), b.throttle_stats());
        a.close().await.unwrap();
        b.close().await.unwrap();
        (a_acks, b_acks, stats.0, stats.1)
    });
    // A's rate once its first second of burst is spent: its acks come in
    // rounds, as each throttle ends, so count whole rounds, from the start
    // of its first round 3 s after it started to the start of its last
    // before 15 s.
    let start = a_acks[0].0;
    let mut rounds: Vec<(Instant, usize)> = Vec::new();
    for (_, acked) in &a_acks {
        if !(start + Duration::from_secs(3)..start + Duration::from_secs(15)).contains(acked) {
            continue;
        }
        match rounds.last_mut() {
            Some((began, count)) if *acked - *began < Duration::from_millis(500) => *count += 1,
            _ => rounds.push((*acked, 1)),
        }
    }
    assert!(
        rounds.len() >= 3,
        "tenant A was not throttled in rounds: {rounds:?}"
    );
    let (first, _) = rounds[0];
    let (last, _) = rounds[rounds.len() - 1];
    let records: usize = rounds[..rounds.len() - 1]
        .iter()
        .map(|(_, count)| count)
        .sum();
    let rate = records as f64 * 1024.0 / (last - first).as_secs_f64();
    let quota = QUOTA as f64;
    eprintln!(
        "tenant A: {rate:.0} B/s against a quota of {quota:.0} ({:+.1}%), {a_stats:?}; tenant B: {} acks, p99 {:?}, {b_stats:?}",
        (rate / quota - 1.0) * 100.0,
        b_acks.len(),
        p99(&b_acks)
    );
    assert!(
        (0.85 * quota..=1.15 * quota).contains(&rate),
        "tenant A got {rate:.0} B/s against a quota of {quota}"
    );
    assert!(a_stats.throttled_responses > 0, "{a_stats:?}");
    assert_eq!(b_stats.throttled_responses, 0, "{b_stats:?}");
    assert!(
        b_acks.len() >= 1550,
        "tenant B got {} of 1600",
        b_acks.len()
    );
    assert!(
        counter(
            &broker,
            "corelog_throttled_requests_total",
            "entity=\"user:tenant-a\",kind=\"produce\""
        ) > 0
    );
    assert_eq!(
        counter(&broker, "corelog_throttled_requests_total", "tenant-b"),
        0
    );
}

/// A follower reading `topic` as `user`, once it printed a record that
/// `admin` produced (so its connection is open).
fn follower_of(broker: &Broker, user: &[&str], admin: &[&str], topic: &str) -> std::process::Child {
    let mut follower = cli::spawn(
        &broker.addr.to_string(),
        &[user, &["consume", "--topic", topic, "--follow"]].concat(),
    );
    let printed = lines_of(follower.stdout.take().unwrap());
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let produced = corelog_tls(broker, admin, &["produce", "--topic", topic], Some("ping"));
        assert!(produced.status.success(), "{}", text(&produced.stderr));
        if printed.recv_timeout(Duration::from_millis(500)).is_ok() {
            return follower;
        }
        if Instant::now() > deadline || follower.try_wait().unwrap().is_some() {
            let _killed = follower.kill();
            let exited = follower.wait_with_output().unwrap();
            panic!("the follower printed nothing: {}", text(&exited.stderr));
        }
    }
}

/// Connection quotas: a principal at its limit cannot log in another
/// connection, nor an address open one, each told why; closing one makes
/// room again.
#[test]
fn connection_quotas_refuse_the_connection_over_the_limit() {
    let secured = SecuredBroker::start();
    let admin = login("admin", &secured.files["admin"]);
    let alice = login("alice", &secured.files["alice"]);
    secured.ok(
        "admin",
        &["quota", "set", "user:alice", "--connections", "1"],
        None,
    );
    secured.grant(&["--allow", "alice", "--operation", "fetch", "--topic", "*"]);
    let mut follower = follower_of(&secured.broker, &alice, &admin, "secret");
    let said = secured.refused("alice", &["topic", "list"], None);
    assert!(
        said.contains("TOO_MANY_CONNECTIONS_FOR_PRINCIPAL"),
        "{said}"
    );
    follower.kill().unwrap();
    follower.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while !secured
        .run("alice", &["topic", "list"], None)
        .status
        .success()
    {
        assert!(
            Instant::now() < deadline,
            "alice's closed connection still counts"
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    // Two connections from this address, then a limit of two: the next
    // one is refused at once.
    secured.ok("admin", &["quota", "remove", "user:alice"], None);
    let mut first = follower_of(&secured.broker, &alice, &admin, "secret");
    let mut second = follower_of(&secured.broker, &admin, &admin, "secret");
    secured.ok(
        "admin",
        &["quota", "set", "ip:127.0.0.1", "--connections", "2"],
        None,
    );
    let said = secured.refused("admin", &["topic", "list"], None);
    assert!(
        said.contains("TOO_MANY_CONNECTIONS_FOR_PRINCIPAL"),
        "{said}"
    );
    for follower in [&mut first, &mut second] {
        follower.kill().unwrap();
        follower.wait().unwrap();
    }
    assert!(
        counter(
            &secured.broker,
            "corelog_connections_closed_total",
            "connection_quota"
        ) >= 2
    );
}

/// A certificate chain: the broker serves its certificate with the
/// intermediate CA that signed it, and a client that trusts only the root
/// verifies it; a client certificate from the intermediate is a login.
#[test]
fn a_certificate_chain_through_an_intermediate_ca_is_served_and_verified() {
    let root = TestCa::new("corelog test root");
    let intermediate = root.intermediate("corelog test intermediate");
    let broker_cert = intermediate.issue("broker", &["127.0.0.1"], Validity::Now);
    let client = intermediate.issue("client", &["chained-reader"], Validity::Now);
    let mut args = broker_tls_args(&broker_cert);
    args.extend(
        [
            "--tls-client-ca",
            &path(&root.ca_file()),
            "--tls-client-auth",
            "required",
            "--authentication",
            "required",
        ]
        .map(str::to_owned),
    );
    let broker = Broker::start(&as_strs(&args));
    let ca_file = path(&root.ca_file());
    let (cert, key) = (path(&client.cert), path(&client.key));
    let chained = ["--tls-ca", &ca_file, "--tls-cert", &cert, "--tls-key", &key];
    create_topic(&broker, &chained, "chained");
    round_trip(&broker, &chained, "chained", "through an intermediate");
    // The leaf alone does not chain to the root.
    let leaf_only = root.dir().join("leaf-only.pem");
    let leaf = std::fs::read_to_string(&client.cert).unwrap();
    let end = leaf.find("-----END CERTIFICATE-----").unwrap() + "-----END CERTIFICATE-----\n".len();
    std::fs::write(&leaf_only, &leaf[..end]).unwrap();
    let leaf_only = path(&leaf_only);
    let said = fails_fast(
        &broker,
        &[
            "--tls-ca",
            &ca_file,
            "--tls-cert",
            &leaf_only,
            "--tls-key",
            &key,
        ],
    );
    assert!(said.contains("refused the TLS handshake"), "{said}");
}

/// Logs `client` in as `user` with SCRAM-SHA-256 (on the raw wire).
fn scram_login(client: &mut Client, user: &str, password: &str) {
    use corelog_wire::sasl::scram::{ScramClient, ScramMechanism};

    let mut scram =
        ScramClient::new(ScramMechanism::Sha256, user, password, "raw-client-nonce").unwrap();
    let mut step = |payload: Vec<u8>| {
        let request = AuthenticateRequest {
            mechanism: ScramMechanism::Sha256.name().to_owned(),
            payload,
        };
        let body = client.call(&request, &[]).unwrap();
        let (archived, _) = message::decode_response::<AuthenticateResponse>(&body.bytes).unwrap();
        rkyv::deserialize::<AuthenticateResponse, rkyv::rancor::Error>(archived).unwrap()
    };
    let server_first = step(scram.first());
    assert_eq!(server_first.error_code, 0, "{server_first:?}");
    let server_final = step(scram.answer(&server_first.payload).unwrap());
    assert!(server_final.complete, "{server_final:?}");
    scram.verify(&server_final.payload).unwrap();
}

/// A poison skip's audit record (WriteAudit) needs `group-admin`:
/// `group-read` is refused with GROUP_AUTHORIZATION_FAILED, and nothing is
/// written; with `group-admin` it is, naming the login, not the declared
/// principal.
#[test]
fn writing_a_poison_skips_audit_record_needs_group_admin() {
    use corelog_wire::message::write_audit::{AuditAction, WriteAuditRequest, WriteAuditResponse};

    let secured = SecuredBroker::start();
    secured.grant(&[
        "--allow",
        "alice",
        "--operation",
        "group-read",
        "--group",
        "tenant-a.",
        "--prefix",
    ]);
    let skip = WriteAuditRequest {
        group: "tenant-a.workers".to_owned(),
        topic: "tenant-a.orders".to_owned(),
        partition: 0,
        offset: 1,
        action: AuditAction::Skip,
        reason: "cannot parse it".to_owned(),
        principal: "mallory".to_owned(),
        dead_letter_topic: None,
        dead_letter_offset: -1,
    };
    let write = || {
        let mut client = secured.broker.client();
        scram_login(&mut client, "alice", "alice-password");
        let body = client.call(&skip, &[]).unwrap();
        let (archived, _) = message::decode_response::<WriteAuditResponse>(&body.bytes).unwrap();
        archived.error_code.to_native()
    };
    assert_eq!(write(), ErrorCode::GroupAuthorizationFailed.code());
    let audit = |group: &str| {
        let listed = secured.ok(
            "admin",
            &["--json", "group", "audit", "--group", group],
            None,
        );
        serde_json::from_str::<serde_json::Value>(&listed).unwrap()
    };
    assert_eq!(audit("tenant-a.workers").as_array().map(Vec::len), Some(0));
    secured.grant(&[
        "--allow",
        "alice",
        "--operation",
        "group-admin",
        "--group",
        "tenant-a.workers",
    ]);
    assert_eq!(write(), ErrorCode::None.code());
    let entries = audit("tenant-a.workers");
    assert_eq!(entries[0]["kind"], "skip", "{entries}");
    assert_eq!(entries[0]["principal"], "alice", "{entries}");
}
