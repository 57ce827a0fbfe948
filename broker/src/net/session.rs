//! What a connection has proved about whom it speaks for.
//!
//! Two ways, both through `Authenticate` right after `ApiVersions`:
//!
//! - A broker of this cluster proves the shared secret by the
//!   `CORELOG-CLUSTER` exchange ([`corelog_wire::sasl::cluster`]). Only such
//!   a connection may speak the inter-broker APIs (controller Raft,
//!   registration, metadata, replication): otherwise anyone who reaches a
//!   broker's port could vote in its controller or push records into its
//!   followers. A broker without a secret (a single node) refuses them from
//!   the network altogether: it serves its own calls in-process.
//! - A user proves its password by SCRAM-SHA-256 or SCRAM-SHA-512
//!   ([`corelog_wire::sasl::scram`]) against the salted keys in cluster
//!   metadata. An unknown user gets a decoy credential, so that the exchange
//!   looks the same until its proof fails with the same message as a wrong
//!   password.
//!
//! Pure: the connection loop hands in the request, the users and a fresh
//! nonce, and sends what comes back (after the delay a failure earns, see
//! [`super::login_ledger`]).

use corelog_controller::users::UserRecord;
use corelog_wire::error::ErrorCode;
use corelog_wire::message::authenticate::{ArchivedAuthenticateRequest, AuthenticateResponse};
use corelog_wire::sasl::cluster::{self, ClusterSecret, NONCE_BYTES, ServerExchange};
use corelog_wire::sasl::scram::{ClientFirst, ScramMechanism, ScramServer, StoredCredential};

/// Whom a connection speaks for, once proved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Principal {
    /// A broker of this cluster, by node id.
    Broker(u32),
    /// A user, with the metadata version of the credential it proved: a
    /// later change of password (or deletion) ends the connection.
    User {
        /// Its name.
        name: String,
        /// [`UserRecord::changed_at`] of the credential it proved.
        changed_at: u64,
    },
    /// The name a verified client certificate carries (mTLS, by the
    /// listener's `--tls-principal-from` rule).
    Certificate(String),
}

impl Principal {
    /// The name ACLs and quotas know this principal by; `None` for a
    /// broker, which neither applies to.
    #[must_use]
    pub fn name(&self) -> Option<&str> {
        match self {
            Principal::User { name, .. } | Principal::Certificate(name) => Some(name),
            Principal::Broker(_) => None,
        }
    }
}

/// One connection's authentication state.
#[derive(Debug, Default)]
pub struct Session {
    /// Whom this connection proved to be.
    principal: Option<Principal>,
    /// An exchange waiting for its client-final message.
    exchange: Option<Exchange>,
    /// Whether a refused inter-broker request was logged already (once per
    /// connection, so that a hostile client cannot flood the log).
    refusal_logged: bool,
}

#[derive(Debug)]
enum Exchange {
    Cluster(ServerExchange),
    Scram {
        mechanism: ScramMechanism,
        server: ScramServer,
        user: String,
        /// `None` for a decoy: no proof can succeed.
        changed_at: Option<u64>,
    },
}

/// What an `Authenticate` step is checked against.
#[derive(Clone, Copy)]
pub struct Credentials<'a> {
    /// The cluster's shared secret, if this broker has one.
    pub cluster_secret: Option<&'a ClusterSecret>,
    /// Looks a user up in the current metadata.
    pub user: &'a dyn Fn(&str) -> Option<UserRecord>,
    /// Whether this broker has loaded the cluster's users at all: a member
    /// that has just started knows none until the controller answers, and
    /// must not tell a user with the right password that it is wrong.
    pub users_loaded: bool,
    /// Key of the decoy credentials of unknown users: the same on every
    /// broker of a cluster (derived from its secret) and across restarts
    /// (see [`crate::decoy_key`]), so that no broker answers differently
    /// for a user that does not exist.
    pub decoy_key: &'a [u8],
    /// PBKDF2 iterations of a decoy: those real users have (see
    /// `usual_iterations` in the connection), so that the count does not
    /// tell an unknown user from a real one.
    pub decoy_iterations: u32,
}

impl std::fmt::Debug for Credentials<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("cluster_secret", &self.cluster_secret)
            .finish_non_exhaustive()
    }
}

/// The answer to one `Authenticate` step.
#[derive(Debug)]
pub struct Step {
    /// The response to send.
    pub response: AuthenticateResponse,
    /// Close the connection after sending it: the exchange failed.
    pub close: bool,
    /// How the exchange ended, for `/metrics`; `None` while it goes on.
    pub outcome: Option<&'static str>,
}

impl Step {
    fn going_on(payload: Vec<u8>) -> Step {
        Step {
            response: AuthenticateResponse {
                error_code: ErrorCode::None.code(),
                error_message: None,
                payload,
                complete: false,
            },
            close: false,
            outcome: None,
        }
    }

    fn done(payload: Vec<u8>, outcome: &'static str) -> Step {
        Step {
            response: AuthenticateResponse {
                error_code: ErrorCode::None.code(),
                error_message: None,
                payload,
                complete: true,
            },
            close: false,
            outcome: Some(outcome),
        }
    }

    fn failed(code: ErrorCode, message: String, outcome: &'static str) -> Step {
        Step {
            response: AuthenticateResponse {
                error_code: code.code(),
                error_message: Some(message),
                payload: Vec::new(),
                complete: false,
            },
            close: true,
            outcome: Some(outcome),
        }
    }

    /// A login refused for a reason other than its proof (a connection
    /// quota): the connection is closed, without a failure's delay.
    #[must_use]
    pub fn refused(code: ErrorCode, message: String) -> Step {
        Step::failed(code, message, "connection_quota")
    }

    /// A login refused because its user name is locked out for another
    /// `seconds` (see [`super::login_ledger`]).
    #[must_use]
    pub fn locked_out(seconds: u64) -> Step {
        Step::failed(
            ErrorCode::LoginLockedOut,
            format!(
                "too many failed logins for this user name: locked out for {seconds} s more, \
                 except from client addresses that logged in as it before"
            ),
            "locked_out",
        )
    }

    /// Whether a wrong credential ended the exchange (what earns a delay).
    #[must_use]
    pub fn is_failed_proof(&self) -> bool {
        self.outcome == Some("failed")
    }
}

impl Session {
    /// A session that a verified client certificate already identified as
    /// `name`: it needs no exchange.
    #[must_use]
    pub fn certified(name: String) -> Session {
        Session {
            principal: Some(Principal::Certificate(name)),
            ..Session::default()
        }
    }

    /// Whom this connection proved to be, if anyone.
    #[must_use]
    pub fn principal(&self) -> Option<&Principal> {
        self.principal.as_ref()
    }

    /// The broker this connection proved to be, if any.
    #[must_use]
    pub fn broker(&self) -> Option<u32> {
        match self.principal {
            Some(Principal::Broker(node)) => Some(node),
            _ => None,
        }
    }

    /// Whether an inter-broker request may be served on this connection.
    #[must_use]
    pub fn may_speak_inter_broker(&self) -> bool {
        self.broker().is_some()
    }

    /// The user name of a SCRAM exchange waiting for its proof.
    #[must_use]
    pub fn pending_user(&self) -> Option<&str> {
        match &self.exchange {
            Some(Exchange::Scram { user, .. }) => Some(user),
            _ => None,
        }
    }

    /// Drops an exchange under way (its user name is locked out).
    pub fn drop_exchange(&mut self) {
        self.exchange = None;
    }

    /// Notes a refused inter-broker request: whether to log it (the first
    /// on this connection).
    pub fn note_refusal(&mut self) -> bool {
        !std::mem::replace(&mut self.refusal_logged, true)
    }

    /// One `Authenticate` step against `credentials`, with a fresh random
    /// `nonce` for a first step.
    pub fn authenticate(
        &mut self,
        credentials: &Credentials<'_>,
        request: &ArchivedAuthenticateRequest,
        nonce: [u8; NONCE_BYTES],
    ) -> Step {
        let mechanism = request.mechanism.as_str();
        let payload: &[u8] = request.payload.as_slice();
        // A certificate's principal may still log in as a user (SASL over
        // mTLS: the login decides); one exchange per connection otherwise.
        if matches!(
            self.principal,
            Some(Principal::Broker(_) | Principal::User { .. })
        ) {
            return Step::failed(
                ErrorCode::AuthenticationFailed,
                "this connection has already authenticated".to_owned(),
                "failed",
            );
        }
        match self.exchange.take() {
            None => self.start(credentials, mechanism, payload, nonce),
            Some(Exchange::Cluster(exchange)) => {
                let Some(secret) = credentials.cluster_secret else {
                    return no_secret();
                };
                if mechanism != cluster::MECHANISM {
                    return mechanism_changed();
                }
                match exchange.finish(secret, payload) {
                    Ok(node_id) => {
                        self.principal = Some(Principal::Broker(node_id));
                        Step::done(Vec::new(), "broker")
                    }
                    Err(error) => {
                        Step::failed(ErrorCode::AuthenticationFailed, error.to_string(), "failed")
                    }
                }
            }
            Some(Exchange::Scram {
                mechanism: started,
                server,
                user,
                changed_at,
            }) => {
                if mechanism != started.name() {
                    return mechanism_changed();
                }
                match (server.finish(payload), changed_at) {
                    (Ok(server_final), Some(changed_at)) => {
                        self.principal = Some(Principal::User {
                            name: user,
                            changed_at,
                        });
                        Step::done(server_final, "user")
                    }
                    // A decoy's proof cannot match; should it, by a fluke of
                    // the keys, the user still does not exist.
                    (Ok(_), None) => failed_proof(),
                    (Err(error), _) => Step::failed(
                        ErrorCode::AuthenticationFailed,
                        error.client_message(),
                        "failed",
                    ),
                }
            }
        }
    }

    fn start(
        &mut self,
        credentials: &Credentials<'_>,
        mechanism: &str,
        payload: &[u8],
        nonce: [u8; NONCE_BYTES],
    ) -> Step {
        if mechanism == cluster::MECHANISM {
            let Some(secret) = credentials.cluster_secret else {
                return no_secret();
            };
            return match ServerExchange::start(secret, payload, nonce) {
                Ok((exchange, server_first)) => {
                    self.exchange = Some(Exchange::Cluster(exchange));
                    Step::going_on(server_first)
                }
                Err(error) => {
                    Step::failed(ErrorCode::AuthenticationFailed, error.to_string(), "failed")
                }
            };
        }
        let Some(scram) = ScramMechanism::from_name(mechanism) else {
            return Step::failed(
                ErrorCode::UnsupportedSaslMechanism,
                format!(
                    "mechanism {mechanism:?} is not offered; this broker offers {}, {} and {}",
                    ScramMechanism::Sha256.name(),
                    ScramMechanism::Sha512.name(),
                    cluster::MECHANISM
                ),
                "unsupported_mechanism",
            );
        };
        let client_first = match ClientFirst::parse(payload) {
            Ok(client_first) => client_first,
            Err(error) => {
                return Step::failed(ErrorCode::AuthenticationFailed, error.to_string(), "failed");
            }
        };
        if !credentials.users_loaded {
            return Step::failed(
                ErrorCode::BrokerNotReady,
                "this broker has not loaded the cluster's users yet; retry".to_owned(),
                "not_ready",
            );
        }
        let record = (credentials.user)(&client_first.username);
        let (credential, changed_at) = match record
            .as_ref()
            .and_then(|user| user.credential(scram).map(|found| (found, user.changed_at)))
        {
            Some((credential, changed_at)) => (credential.clone(), Some(changed_at)),
            None => (
                StoredCredential::decoy(
                    scram,
                    &client_first.username,
                    credentials.decoy_key,
                    credentials.decoy_iterations,
                ),
                None,
            ),
        };
        // 32 random bytes as hex: printable, no ','.
        let server_nonce: String = nonce.iter().map(|byte| format!("{byte:02x}")).collect();
        match ScramServer::start(&client_first, credential, &server_nonce) {
            Ok((server, server_first)) => {
                self.exchange = Some(Exchange::Scram {
                    mechanism: scram,
                    server,
                    user: client_first.username,
                    changed_at,
                });
                Step::going_on(server_first)
            }
            Err(error) => {
                Step::failed(ErrorCode::AuthenticationFailed, error.to_string(), "failed")
            }
        }
    }
}

fn no_secret() -> Step {
    Step::failed(
        ErrorCode::AuthenticationFailed,
        "this broker has no cluster secret: start every broker of the cluster with the same --cluster-secret-file".to_owned(),
        "no_secret",
    )
}

fn mechanism_changed() -> Step {
    Step::failed(
        ErrorCode::AuthenticationFailed,
        "the mechanism changed in the middle of an exchange".to_owned(),
        "failed",
    )
}

fn failed_proof() -> Step {
    Step::failed(
        ErrorCode::AuthenticationFailed,
        "authentication failed: wrong user name or password".to_owned(),
        "failed",
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use corelog_wire::message::authenticate::AuthenticateRequest;
    use corelog_wire::sasl::cluster::ClientExchange;
    use corelog_wire::sasl::scram::{ITERATIONS_DEFAULT, ITERATIONS_MIN, ScramClient};
    use rkyv::rancor;

    use super::*;

    fn step(
        session: &mut Session,
        secret: Option<&ClusterSecret>,
        mechanism: &str,
        payload: Vec<u8>,
    ) -> Step {
        step_with_users(session, secret, &|_| None, mechanism, payload)
    }

    fn step_with_users(
        session: &mut Session,
        secret: Option<&ClusterSecret>,
        user: &dyn Fn(&str) -> Option<UserRecord>,
        mechanism: &str,
        payload: Vec<u8>,
    ) -> Step {
        let request = AuthenticateRequest {
            mechanism: mechanism.to_owned(),
            payload,
        };
        let bytes = rkyv::to_bytes::<rancor::Error>(&request).unwrap();
        let archived = rkyv::access::<ArchivedAuthenticateRequest, rancor::Error>(&bytes).unwrap();
        let credentials = Credentials {
            cluster_secret: secret,
            user,
            users_loaded: true,
            decoy_key: b"decoy key of the test cluster",
            decoy_iterations: ITERATIONS_DEFAULT,
        };
        session.authenticate(&credentials, archived, [9; NONCE_BYTES])
    }

    /// The users of these tests: alice (password "wonderland"), changed at
    /// metadata version 7.
    fn alice(name: &str) -> Option<UserRecord> {
        (name == "alice").then(|| UserRecord {
            name: "alice".to_owned(),
            credentials: vec![
                StoredCredential::derive(
                    ScramMechanism::Sha256,
                    "wonderland",
                    b"salt of alice 16",
                    ITERATIONS_MIN,
                )
                .unwrap(),
            ],
            changed_at: 7,
        })
    }

    const SHA256: &str = "SCRAM-SHA-256";

    /// Runs a SCRAM exchange as `user` with `password` on a new session;
    /// the session, the server-first and the last step.
    fn scram_login(user: &str, password: &str) -> (Session, Vec<u8>, Step, Vec<u8>) {
        let mut session = Session::default();
        let mut client =
            ScramClient::new(ScramMechanism::Sha256, user, password, "client-nonce-1").unwrap();
        let first = step_with_users(&mut session, None, &alice, SHA256, client.first());
        assert!(!first.close, "{first:?}");
        let client_final = client.answer(&first.response.payload).unwrap();
        let last = step_with_users(&mut session, None, &alice, SHA256, client_final.clone());
        (session, first.response.payload, last, client_final)
    }

    #[test]
    fn a_user_with_the_right_password_is_its_principal() {
        let (session, _, last, _) = scram_login("alice", "wonderland");
        assert!(
            last.response.complete && last.outcome == Some("user"),
            "{last:?}"
        );
        assert_eq!(
            session.principal(),
            Some(&Principal::User {
                name: "alice".to_owned(),
                changed_at: 7
            })
        );
        assert!(!session.may_speak_inter_broker(), "a user is not a broker");
    }

    #[test]
    fn a_wrong_password_and_an_unknown_user_fail_alike() {
        let (session, _, wrong, _) = scram_login("alice", "looking-glass");
        let (_, unknown_first, unknown, _) = scram_login("mallory", "anything");
        for failed in [&wrong, &unknown] {
            assert!(failed.close && failed.is_failed_proof(), "{failed:?}");
            assert_eq!(
                failed.response.error_code,
                ErrorCode::AuthenticationFailed.code()
            );
        }
        assert_eq!(wrong.response.error_message, unknown.response.error_message);
        assert!(session.principal().is_none());
        // The decoy's server-first has a real one's shape: nonce, salt,
        // the iterations it is given (those of the real users).
        let text = String::from_utf8(unknown_first).unwrap();
        assert!(
            text.starts_with("r=client-nonce-1") && text.ends_with(",i=8192"),
            "{text}"
        );
    }

    #[test]
    fn a_replayed_client_final_fails_on_another_exchange() {
        let (_, _, ok, recorded) = scram_login("alice", "wonderland");
        assert!(ok.response.complete);
        // Another exchange: the same client-first, another server nonce.
        let client =
            ScramClient::new(ScramMechanism::Sha256, "alice", "x", "client-nonce-1").unwrap();
        let mut session = Session::default();
        let credentials = Credentials {
            cluster_secret: None,
            user: &alice,
            users_loaded: true,
            decoy_key: b"k",
            decoy_iterations: ITERATIONS_DEFAULT,
        };
        let request = |payload: Vec<u8>| {
            rkyv::to_bytes::<rancor::Error>(&AuthenticateRequest {
                mechanism: SHA256.to_owned(),
                payload,
            })
            .unwrap()
        };
        let first = request(client.first());
        let first = rkyv::access::<ArchivedAuthenticateRequest, rancor::Error>(&first).unwrap();
        let started = session.authenticate(&credentials, first, [3; NONCE_BYTES]);
        assert!(!started.close, "{started:?}");
        let replay = request(recorded);
        let replay = rkyv::access::<ArchivedAuthenticateRequest, rancor::Error>(&replay).unwrap();
        let replayed = session.authenticate(&credentials, replay, [4; NONCE_BYTES]);
        assert!(
            replayed.close && !replayed.response.complete,
            "{replayed:?}"
        );
        assert!(session.principal().is_none());
    }

    /// A member that has not heard from the controller yet knows no user:
    /// it answers a login "not ready" (retriable, no failure delay) rather
    /// than "wrong password", and still lets brokers prove the secret (so
    /// that it can catch up at all).
    #[test]
    fn a_broker_that_has_not_loaded_its_users_answers_not_ready_and_still_admits_brokers() {
        let request = |mechanism: &str, payload: Vec<u8>| {
            rkyv::to_bytes::<rancor::Error>(&AuthenticateRequest {
                mechanism: mechanism.to_owned(),
                payload,
            })
            .unwrap()
        };
        let shared = secret("the cluster's shared secret");
        let credentials = Credentials {
            cluster_secret: Some(&shared),
            user: &alice,
            users_loaded: false,
            decoy_key: b"k",
            decoy_iterations: ITERATIONS_DEFAULT,
        };
        let client =
            ScramClient::new(ScramMechanism::Sha256, "alice", "wonderland", "nonce").unwrap();
        let first = request(SHA256, client.first());
        let first = rkyv::access::<ArchivedAuthenticateRequest, rancor::Error>(&first).unwrap();
        let mut session = Session::default();
        let login = session.authenticate(&credentials, first, [3; NONCE_BYTES]);
        assert_eq!(
            login.response.error_code,
            ErrorCode::BrokerNotReady.code(),
            "{login:?}"
        );
        assert!(ErrorCode::BrokerNotReady.is_retriable());
        assert!(login.close && !login.is_failed_proof(), "{login:?}");
        assert_eq!(login.outcome, Some("not_ready"));
        assert!(session.principal().is_none());

        let broker = ClientExchange::new(shared.clone(), 3, [1; NONCE_BYTES]);
        let first = request(cluster::MECHANISM, broker.first());
        let first = rkyv::access::<ArchivedAuthenticateRequest, rancor::Error>(&first).unwrap();
        let mut session = Session::default();
        let server_first = session.authenticate(&credentials, first, [5; NONCE_BYTES]);
        let answer = broker.answer(&server_first.response.payload).unwrap();
        let last = request(cluster::MECHANISM, answer);
        let last = rkyv::access::<ArchivedAuthenticateRequest, rancor::Error>(&last).unwrap();
        let done = session.authenticate(&credentials, last, [6; NONCE_BYTES]);
        assert!(done.response.complete, "{done:?}");
        assert_eq!(session.broker(), Some(3));
    }

    #[test]
    fn malformed_truncated_and_over_long_exchanges_fail_and_close() {
        let mut session = Session::default();
        let truncated = step_with_users(&mut session, None, &alice, SHA256, b"n,,n=ali".to_vec());
        assert!(
            truncated.close && session.principal().is_none(),
            "{truncated:?}"
        );

        // Written by hand: the client refuses to send such a name.
        let long_first = format!("n,,n={},r=nonce", "a".repeat(300)).into_bytes();
        let mut session = Session::default();
        let long = step_with_users(&mut session, None, &alice, SHA256, long_first);
        assert!(long.close, "{long:?}");

        // A client-final cut short.
        let mut session = Session::default();
        let mut client =
            ScramClient::new(ScramMechanism::Sha256, "alice", "wonderland", "nonce").unwrap();
        let first = step_with_users(&mut session, None, &alice, SHA256, client.first());
        let mut client_final = client.answer(&first.response.payload).unwrap();
        client_final.truncate(client_final.len() / 2);
        let cut = step_with_users(&mut session, None, &alice, SHA256, client_final);
        assert!(cut.close && session.principal().is_none(), "{cut:?}");

        // A mechanism switched in the middle.
        let mut session = Session::default();
        let client =
            ScramClient::new(ScramMechanism::Sha256, "alice", "wonderland", "nonce").unwrap();
        step_with_users(&mut session, None, &alice, SHA256, client.first());
        let switched = step_with_users(&mut session, None, &alice, "SCRAM-SHA-512", Vec::new());
        assert!(switched.close, "{switched:?}");
    }

    fn secret(text: &str) -> ClusterSecret {
        ClusterSecret::new(text.as_bytes()).unwrap()
    }

    #[test]
    fn a_broker_that_proves_the_secret_may_speak_inter_broker_apis() {
        let shared = secret("the-cluster-secret-0123456789");
        let mut session = Session::default();
        assert!(!session.may_speak_inter_broker());
        let client = ClientExchange::new(shared.clone(), 3, [1; NONCE_BYTES]);
        let first = step(
            &mut session,
            Some(&shared),
            cluster::MECHANISM,
            client.first(),
        );
        assert!(!first.close && first.outcome.is_none(), "{first:?}");
        assert!(!session.may_speak_inter_broker());
        let proof = client.answer(&first.response.payload).unwrap();
        let last = step(&mut session, Some(&shared), cluster::MECHANISM, proof);
        assert!(
            last.response.complete && last.outcome == Some("broker"),
            "{last:?}"
        );
        assert_eq!(session.broker(), Some(3));
        assert!(session.may_speak_inter_broker());
        // A second exchange on the same connection is refused.
        let again = step(
            &mut session,
            Some(&shared),
            cluster::MECHANISM,
            client.first(),
        );
        assert!(again.close, "{again:?}");
    }

    #[test]
    fn a_wrong_secret_an_unknown_mechanism_or_no_secret_fails_and_closes() {
        let shared = secret("the-cluster-secret-0123456789");
        let guess = ClientExchange::new(secret("a-guessed-secret-000"), 3, [1; NONCE_BYTES]);
        let mut session = Session::default();
        let first = step(
            &mut session,
            Some(&shared),
            cluster::MECHANISM,
            guess.first(),
        );
        // The guesser cannot check the server's proof; it sends junk.
        let last = step(&mut session, Some(&shared), cluster::MECHANISM, vec![0; 32]);
        assert!(!first.close);
        assert!(last.close && !last.response.complete, "{last:?}");
        assert_eq!(
            last.response.error_code,
            ErrorCode::AuthenticationFailed.code()
        );
        assert!(!session.may_speak_inter_broker());

        let mut session = Session::default();
        let plain = step(&mut session, Some(&shared), "PLAIN", Vec::new());
        assert_eq!(
            plain.response.error_code,
            ErrorCode::UnsupportedSaslMechanism.code()
        );
        assert!(plain.close);

        let mut session = Session::default();
        let unsecured = step(&mut session, None, cluster::MECHANISM, guess.first());
        assert_eq!(unsecured.outcome, Some("no_secret"));
        assert!(unsecured.close && !session.may_speak_inter_broker());
    }

    #[test]
    fn a_refusal_is_logged_once_per_connection() {
        let mut session = Session::default();
        assert!(session.note_refusal());
        assert!(!session.note_refusal());
    }
}
