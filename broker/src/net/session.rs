//! What a connection has proved about whom it speaks for.
//!
//! Today one thing: that it is a broker of this cluster, by the
//! `CORELOG-CLUSTER` exchange over the shared secret
//! ([`corelog_wire::sasl::cluster`]). Only such a connection may speak the
//! inter-broker APIs (controller Raft, registration, metadata, replication):
//! otherwise anyone who reaches a broker's port could vote in its controller
//! or push records into its followers. A broker without a secret (a single
//! node) refuses them from the network altogether: it serves its own calls
//! in-process.
//!
//! Pure: the connection loop hands in the request and a fresh nonce and
//! sends what comes back.

use corelog_wire::error::ErrorCode;
use corelog_wire::message::authenticate::{ArchivedAuthenticateRequest, AuthenticateResponse};
use corelog_wire::sasl::cluster::{self, ClusterSecret, NONCE_BYTES, ServerExchange};

/// One connection's authentication state.
#[derive(Debug, Default)]
pub struct Session {
    /// The broker this connection proved to be.
    broker: Option<u32>,
    /// An exchange waiting for its client-final message.
    exchange: Option<ServerExchange>,
    /// Whether a refused inter-broker request was logged already (once per
    /// connection, so that a hostile client cannot flood the log).
    refusal_logged: bool,
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
}

impl Session {
    /// The broker this connection proved to be, if any.
    #[must_use]
    pub fn broker(&self) -> Option<u32> {
        self.broker
    }

    /// Whether an inter-broker request may be served on this connection.
    #[must_use]
    pub fn may_speak_inter_broker(&self) -> bool {
        self.broker.is_some()
    }

    /// Notes a refused inter-broker request: whether to log it (the first
    /// on this connection).
    pub fn note_refusal(&mut self) -> bool {
        !std::mem::replace(&mut self.refusal_logged, true)
    }

    /// One `Authenticate` step against this broker's `secret`, with a fresh
    /// random `nonce` for a first step.
    pub fn authenticate(
        &mut self,
        secret: Option<&ClusterSecret>,
        request: &ArchivedAuthenticateRequest,
        nonce: [u8; NONCE_BYTES],
    ) -> Step {
        if request.mechanism.as_str() != cluster::MECHANISM {
            return Step::failed(
                ErrorCode::UnsupportedSaslMechanism,
                format!(
                    "mechanism {:?} is not offered; this broker offers {}",
                    request.mechanism.as_str(),
                    cluster::MECHANISM
                ),
                "unsupported_mechanism",
            );
        }
        let Some(secret) = secret else {
            return Step::failed(
                ErrorCode::AuthenticationFailed,
                "this broker has no cluster secret: start every broker of the cluster with the same --cluster-secret-file".to_owned(),
                "no_secret",
            );
        };
        let payload: &[u8] = request.payload.as_slice();
        match self.exchange.take() {
            None if self.broker.is_none() => match ServerExchange::start(secret, payload, nonce) {
                Ok((exchange, server_first)) => {
                    self.exchange = Some(exchange);
                    Step::going_on(server_first)
                }
                Err(error) => {
                    Step::failed(ErrorCode::AuthenticationFailed, error.to_string(), "failed")
                }
            },
            None => Step::failed(
                ErrorCode::AuthenticationFailed,
                "this connection has already authenticated".to_owned(),
                "failed",
            ),
            Some(exchange) => match exchange.finish(secret, payload) {
                Ok(node_id) => {
                    self.broker = Some(node_id);
                    Step {
                        response: AuthenticateResponse {
                            error_code: ErrorCode::None.code(),
                            error_message: None,
                            payload: Vec::new(),
                            complete: true,
                        },
                        close: false,
                        outcome: Some("broker"),
                    }
                }
                Err(error) => {
                    Step::failed(ErrorCode::AuthenticationFailed, error.to_string(), "failed")
                }
            },
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use corelog_wire::message::authenticate::AuthenticateRequest;
    use corelog_wire::sasl::cluster::ClientExchange;
    use rkyv::rancor;

    use super::*;

    fn step(
        session: &mut Session,
        secret: Option<&ClusterSecret>,
        mechanism: &str,
        payload: Vec<u8>,
    ) -> Step {
        let request = AuthenticateRequest {
            mechanism: mechanism.to_owned(),
            payload,
        };
        let bytes = rkyv::to_bytes::<rancor::Error>(&request).unwrap();
        let archived = rkyv::access::<ArchivedAuthenticateRequest, rancor::Error>(&bytes).unwrap();
        session.authenticate(secret, archived, [9; NONCE_BYTES])
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
