//! Authenticate: one step of a SASL-style exchange (RFC 4422's shape: a
//! mechanism, then opaque challenge and response payloads) that proves
//! whom a connection speaks for. It comes right after `ApiVersions`; a
//! connection may send it until the exchange completes.
//!
//! Mechanisms: `CORELOG-CLUSTER` ([`crate::sasl::cluster`]), by which a
//! broker proves that it holds the cluster's shared secret before it may
//! speak the inter-broker APIs.

use rkyv::{Archive, Deserialize, Serialize};

use super::{api, no_raw_section};
use crate::frame::ApiKey;

/// One client step.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct AuthenticateRequest {
    /// The mechanism, the same on every step of one exchange.
    pub mechanism: String,
    /// The mechanism's client message for this step.
    pub payload: Vec<u8>,
}

/// One server step.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct AuthenticateResponse {
    /// `NONE` (0) while the exchange goes on or once it succeeded;
    /// `AUTHENTICATION_FAILED` or `UNSUPPORTED_SASL_MECHANISM` otherwise.
    pub error_code: u16,
    /// Detail for people.
    pub error_message: Option<String>,
    /// The mechanism's server message for this step.
    pub payload: Vec<u8>,
    /// The exchange succeeded: the connection now speaks for its principal.
    pub complete: bool,
}

api!(ApiKey::Authenticate, AuthenticateRequest => AuthenticateResponse);
no_raw_section!(
    AuthenticateRequest,
    ArchivedAuthenticateRequest,
    AuthenticateResponse,
    ArchivedAuthenticateResponse,
);

#[cfg(test)]
pub(crate) mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::message::test_support::{
        arbitrary_bodies_never_panic, few, name, noise, optional_name, round_trip_request,
        round_trip_response,
    };

    pub(crate) fn request() -> impl Strategy<Value = AuthenticateRequest> {
        (name(), few(any::<u8>()))
            .prop_map(|(mechanism, payload)| AuthenticateRequest { mechanism, payload })
    }

    pub(crate) fn response() -> impl Strategy<Value = AuthenticateResponse> {
        (
            any::<u16>(),
            optional_name(),
            few(any::<u8>()),
            any::<bool>(),
        )
            .prop_map(|(error_code, error_message, payload, complete)| {
                AuthenticateResponse {
                    error_code,
                    error_message,
                    payload,
                    complete,
                }
            })
    }

    proptest! {
        #[test]
        fn request_round_trips(msg in request()) {
            round_trip_request(&msg, &[])?;
        }

        #[test]
        fn response_round_trips(msg in response()) {
            round_trip_response(&msg, &[])?;
        }

        #[test]
        fn arbitrary_bytes_never_panic(q in request(), s in response(), noise in noise()) {
            arbitrary_bodies_never_panic((&q, &[]), (&s, &[]), &noise);
        }
    }
}
