//! The trust boundary (issue 16). Here, item 4 with security off: the
//! inter-broker APIs (controller Raft, registration, metadata, replication)
//! are served only on a connection that proved the cluster's shared secret
//! (`--cluster-secret-file`, the `CORELOG-CLUSTER` exchange of
//! `Authenticate`); an ordinary client on the network is refused with
//! `CLUSTER_AUTHORIZATION_FAILED`, counted in `/metrics`, and keeps its
//! connection for client APIs. A wrong secret or a replayed proof is cut
//! off; a cluster broker without a secret does not start.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use corelog_tests::cli::{corelog, text};
use corelog_tests::cluster_client::serial;
use corelog_tests::process::{free_port, test_cluster_secret_file};
use corelog_tests::wire_client::{Body, Client};
use corelog_tests::{Broker, start_cluster};
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

#[test]
fn inter_broker_apis_are_refused_to_a_connection_without_the_cluster_secret() {
    let _serial = serial();
    let brokers = start_cluster(3, &[]);
    wait_for_three_brokers(&brokers[0]);
    let mut client = brokers[0].client();

    // A forged registration: without the gate, broker 99 would join.
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
    // Every inter-broker API, whatever it carries: Raft messages,
    // replication pushes, election queries, metadata.
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
    // The connection still serves client APIs.
    let body = client.call(&MetadataRequest { topics: None }, &[]).unwrap();
    assert!(message::decode_response::<MetadataResponse>(&body.bytes).is_ok());

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
