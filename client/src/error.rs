//! The one error type of the client: [`ClientError`].
//!
//! Every variant says what happened and, where a person can act on it, what
//! to do. Errors the broker reported carry their stable
//! [`ErrorCode`], so a program can branch on
//! the code ([`ClientError::code`]) and ask whether trying again can help
//! ([`ClientError::is_retriable`]).
//!
//! The type is `Clone` because one failure of a batch is handed to the
//! delivery handle of every record in it.

use std::sync::Arc;
use std::time::Duration;

use corelog_wire::batch::BatchError;
use corelog_wire::error::ErrorCode;
use corelog_wire::frame::ApiKey;

use crate::gap::GapInfo;

/// Why a client operation failed.
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The TCP connection could not be opened.
    #[error("cannot connect to {addr}: {source}{}", connect_advice(.source))]
    Connect {
        /// The address tried.
        addr: String,
        /// What the operating system said.
        #[source]
        source: Arc<std::io::Error>,
    },
    /// The host name of an address did not resolve to any IP address.
    #[error("cannot connect to {addr}: the name did not resolve: {detail}: check the host name")]
    Resolve {
        /// The address given.
        addr: String,
        /// What the resolver said.
        detail: String,
    },
    /// The TCP connection did not open in time.
    #[error(
        "cannot connect to {addr}: no answer within {timeout:?}: check the address and that corelogd is running"
    )]
    ConnectTimeout {
        /// The address tried.
        addr: String,
        /// How long the client waited.
        timeout: Duration,
    },
    /// A TCP connection opened, but nothing answered the corelog handshake
    /// in time: a server of another protocol waiting for its own request
    /// (an HTTP server such as a broker's metrics port does), or a broker
    /// that is stopped or overloaded.
    #[error(
        "{addr} accepted a connection but did not answer the corelog handshake within {timeout:?}: this is not a corelog broker, or one too busy or stopped to answer; check the address and port"
    )]
    HandshakeTimeout {
        /// The address tried.
        addr: String,
        /// How long the client waited, connecting included.
        timeout: Duration,
    },
    /// What answered the handshake was not a corelog frame: another
    /// protocol's server listens at the address.
    #[error(
        "{addr} answered the corelog handshake with {answer}: this is not a corelog broker, or not one this client's version can talk to; check the address and port (a broker's metrics port, for one, speaks HTTP)"
    )]
    NotABroker {
        /// The address tried.
        addr: String,
        /// What came back, as text if it is printable, else as hex.
        answer: String,
    },
    /// TLS could not be set up with the broker: its certificate is not
    /// trusted, it refused this client's, or one side speaks TLS and the
    /// other does not.
    #[error("cannot connect to {addr} with TLS: {detail}")]
    Tls {
        /// The address tried.
        addr: String,
        /// Why, and what to do.
        detail: String,
    },
    /// The login could not be completed: the broker did not prove that it
    /// holds the user's credential (it may not be the cluster's), or the
    /// exchange broke off.
    #[error("cannot log in to {addr} as {user}: {detail}")]
    Authentication {
        /// The broker.
        addr: String,
        /// The user.
        user: String,
        /// What went wrong.
        detail: String,
    },
    /// An open connection broke. Requests in flight on it may or may not
    /// have been processed; the producer resends them with the same
    /// sequence, so retries never duplicate.
    #[error("connection to {addr} was lost: {reason}")]
    ConnectionLost {
        /// The broker's address.
        addr: String,
        /// What broke it.
        reason: String,
    },
    /// A request got no response in time. The connection is closed, because
    /// what happened to the request can no longer be known.
    #[error(
        "{api} request to {addr} got no response within {timeout:?}; the connection was closed"
    )]
    RequestTimeout {
        /// The broker's address.
        addr: String,
        /// The API of the request.
        api: ApiKey,
        /// How long the client waited.
        timeout: Duration,
    },
    /// The broker refused a request, or one topic or partition of it.
    #[error("{context}: {code}{}", detail_suffix(.detail))]
    Broker {
        /// The stable error code; its message says what to do.
        code: ErrorCode,
        /// What was being done, for example `produce to orders/3`.
        context: String,
        /// Detail the broker added, beyond the code's own message.
        detail: Option<String>,
    },
    /// The broker answered with an error number this client does not know.
    #[error("{context}: unknown error code {code}: upgrade the client")]
    UnknownErrorCode {
        /// The wire number.
        code: u16,
        /// What was being done.
        context: String,
    },
    /// The broker does not speak an API version this client needs.
    #[error(
        "the broker at {addr} (version {broker_version:?}) does not support {api} version 0: use matching corelogd and corelog versions"
    )]
    UnsupportedApi {
        /// The broker's address.
        addr: String,
        /// The API missing.
        api: ApiKey,
        /// The broker's software version, from ApiVersions.
        broker_version: String,
    },
    /// A response could not be decoded, or did not answer the request.
    #[error("malformed response from {addr}: {detail}: this is a broker or client bug, report it")]
    Protocol {
        /// The broker's address.
        addr: String,
        /// What was wrong.
        detail: String,
    },
    /// A fetched record batch failed its CRC or structure check. Its
    /// records are not returned, and the position does not move past them.
    #[error(
        "a record batch fetched from {topic}/{partition} is corrupt: {source}: the records were not delivered; alert an operator"
    )]
    CorruptBatch {
        /// Topic.
        topic: String,
        /// Partition.
        partition: u32,
        /// What the check found.
        #[source]
        source: BatchError,
    },
    /// The consumer's position is outside the partition's log, and the
    /// consumer's policy is to report it (see
    /// [`OffsetOutOfRangePolicy`](crate::OffsetOutOfRangePolicy)).
    #[error("{topic}/{partition}: {gap}")]
    OffsetOutOfRange {
        /// Topic.
        topic: String,
        /// Partition.
        partition: u32,
        /// What the broker said about the gap.
        gap: Box<GapInfo>,
    },
    /// An idempotent producer got no producer id within its delivery
    /// timeout: the controller, which hands them out, had no leader (an
    /// election that did not end, or a lost quorum), or no broker answered.
    #[error(
        "no producer id after {attempts} attempts in {:.1} s, so nothing can be sent (an idempotent producer needs one from the cluster's controller): {source}; \
         the controller needs a majority of its voters running (see `corelog cluster health`); retry later, or raise delivery_timeout to wait longer",
        waited.as_secs_f64()
    )]
    ProducerIdUnavailable {
        /// How long it was tried.
        waited: std::time::Duration,
        /// Requests made.
        attempts: u32,
        /// The last failure.
        source: Box<ClientError>,
    },
    /// `try_send` found the producer's buffer full.
    #[error(
        "the producer buffer of {buffer_bytes} bytes is full: use send (which waits), slow down, or raise buffer_bytes"
    )]
    BufferFull {
        /// The configured buffer size.
        buffer_bytes: usize,
    },
    /// A record is larger than one batch may be.
    #[error(
        "a record of {bytes} bytes is over the limit of {max} bytes: split it, or raise record_bytes_max (the broker limits batches too)"
    )]
    RecordTooLarge {
        /// The record's encoded size estimate.
        bytes: usize,
        /// The limit.
        max: usize,
    },
    /// A record was not acknowledged within the delivery timeout.
    #[error(
        "delivery to {topic}/{partition} timed out after {timeout:?}{}: the records may or may not have been appended",
        last_error_suffix(.last_error)
    )]
    DeliveryTimeout {
        /// Topic.
        topic: String,
        /// Partition.
        partition: u32,
        /// The configured delivery timeout.
        timeout: Duration,
        /// The error of the last attempt, if there was one.
        last_error: Option<String>,
    },
    /// Records waited in the producer's buffer for the whole delivery
    /// timeout without being sent: the brokers pushed back (the cluster is
    /// past its capacity, or this producer offers more than it can take).
    /// They were not appended.
    #[error(
        "records for {topic}/{partition} waited {timeout:?} in the producer's buffer without being sent: the brokers are pushing back (over capacity, or this producer sends faster than the cluster takes); they were not appended: send them again, slow down, or add capacity"
    )]
    BufferTimeout {
        /// Topic.
        topic: String,
        /// Partition.
        partition: u32,
        /// The configured delivery timeout.
        timeout: Duration,
    },
    /// A batch was given up because the partition's sequence could no
    /// longer be trusted (an earlier batch failed, or the broker reported a
    /// gap). The records were not acknowledged; they may or may not be in
    /// the log.
    #[error(
        "records for {topic}/{partition} were given up: {reason}: they were not acknowledged and may or may not be in the log; read the partition before sending them again if duplicates matter"
    )]
    Aborted {
        /// Topic.
        topic: String,
        /// Partition.
        partition: u32,
        /// Why.
        reason: String,
    },
    /// The producer was closed, or fenced by a newer instance.
    #[error("the producer is closed{}", detail_suffix(.reason))]
    ProducerClosed {
        /// Why, when it was not an orderly close.
        reason: Option<String>,
    },
    /// `try_send` to a topic whose metadata the producer does not have yet.
    #[error(
        "metadata for topic {topic} is not known yet: use send (which waits for it) or Producer::prepare_topic"
    )]
    MetadataNotReady {
        /// Topic.
        topic: String,
    },
    /// A partition index beyond the topic's partition count.
    #[error(
        "topic {topic} has {partition_count} partitions, so partition {partition} does not exist"
    )]
    UnknownPartition {
        /// Topic.
        topic: String,
        /// The partition asked for.
        partition: u32,
        /// How many the topic has.
        partition_count: u32,
    },
    /// A group member stopped consuming a partition at a record its handler
    /// kept failing on, as its poison policy says (C8). The group's offset
    /// stays at the record; fix the handler and restart, or move the group
    /// past it with `corelog group reset-offsets --reason`.
    #[error(
        "{topic}/{partition}: stopped at offset {offset} after its handler kept failing: {error}: fix the handler and restart, or skip the record with `corelog group reset-offsets --reason`"
    )]
    PoisonStopped {
        /// Topic.
        topic: String,
        /// Partition.
        partition: u32,
        /// The record the partition stopped at.
        offset: u64,
        /// The handler's last error, and what else went wrong.
        error: String,
    },
    /// A configuration value is invalid.
    #[error("invalid configuration: {0}")]
    InvalidConfig(String),
    /// An argument is invalid (for example a topic name).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
}

/// What to do about a refused or failed TCP connect. Only a refusal means
/// that nothing listens at the address, so only a refusal suggests starting
/// a broker.
fn connect_advice(source: &std::io::Error) -> &'static str {
    match source.kind() {
        std::io::ErrorKind::ConnectionRefused => {
            ": nothing listens there: is corelogd running? start it with `make run`"
        }
        _ => ": check the address and the network between here and the broker",
    }
}

fn detail_suffix(detail: &Option<String>) -> String {
    match detail {
        Some(detail) if !detail.is_empty() => format!(" ({detail})"),
        _ => String::new(),
    }
}

fn last_error_suffix(last_error: &Option<String>) -> String {
    match last_error {
        Some(error) => format!(" (last error: {error})"),
        None => String::new(),
    }
}

impl ClientError {
    /// The broker's error code, for errors that have one.
    #[must_use]
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            ClientError::Broker { code, .. } => Some(*code),
            ClientError::OffsetOutOfRange { .. } => Some(ErrorCode::OffsetOutOfRange),
            ClientError::CorruptBatch { .. } => Some(ErrorCode::CorruptMessage),
            _ => None,
        }
    }

    /// Whether the same operation may succeed if tried again later.
    #[must_use]
    pub fn is_retriable(&self) -> bool {
        match self {
            ClientError::Broker { code, .. } => code.is_retriable(),
            ClientError::Connect { .. }
            | ClientError::Resolve { .. }
            | ClientError::ConnectTimeout { .. }
            | ClientError::HandshakeTimeout { .. }
            | ClientError::ConnectionLost { .. }
            | ClientError::RequestTimeout { .. }
            | ClientError::BufferFull { .. }
            | ClientError::MetadataNotReady { .. } => true,
            _ => false,
        }
    }

    /// Whether this error means the client could not reach a broker at
    /// all: nothing listens, the name does not resolve, or what listens is
    /// not a corelog broker.
    #[must_use]
    pub fn is_connect_failure(&self) -> bool {
        matches!(
            self,
            ClientError::Connect { .. }
                | ClientError::Resolve { .. }
                | ClientError::ConnectTimeout { .. }
                | ClientError::HandshakeTimeout { .. }
                | ClientError::NotABroker { .. }
                | ClientError::Tls { .. }
        )
    }

    /// A broker error for `code` while doing `context`, or `None` for
    /// `NONE`; unknown numbers become [`ClientError::UnknownErrorCode`].
    pub(crate) fn from_wire(
        code: u16,
        context: impl FnOnce() -> String,
        detail: Option<String>,
    ) -> Option<ClientError> {
        match ErrorCode::from_code(code) {
            Some(ErrorCode::None) => None,
            Some(code) => Some(ClientError::Broker {
                code,
                context: context(),
                detail,
            }),
            None => Some(ClientError::UnknownErrorCode {
                code,
                context: context(),
            }),
        }
    }

    /// The wire error code as a typed code, treating unknown numbers as a
    /// non-retriable unknown server error.
    pub(crate) fn wire_code(code: u16) -> ErrorCode {
        ErrorCode::from_code(code).unwrap_or(ErrorCode::UnknownServerError)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broker_error_shows_context_name_number_and_what_to_do() {
        let error = ClientError::from_wire(21, || "produce to t/0".to_owned(), None).unwrap();
        let text = error.to_string();
        assert!(
            text.starts_with("produce to t/0: NOT_LEADER (21): "),
            "{text}"
        );
        assert!(text.contains("refresh metadata"), "{text}");
        assert_eq!(error.code(), Some(ErrorCode::NotLeader));
        assert!(error.is_retriable());
        assert!(ClientError::from_wire(0, String::new, None).is_none());
        let unknown = ClientError::from_wire(999, || "x".to_owned(), None).unwrap();
        assert!(matches!(
            unknown,
            ClientError::UnknownErrorCode { code: 999, .. }
        ));
        assert!(!unknown.is_retriable());
    }

    #[test]
    fn connect_error_says_how_to_start_the_broker() {
        let error = ClientError::Connect {
            addr: "127.0.0.1:7100".to_owned(),
            source: Arc::new(std::io::Error::from(std::io::ErrorKind::ConnectionRefused)),
        };
        let text = error.to_string();
        assert!(text.contains("cannot connect to 127.0.0.1:7100"), "{text}");
        assert!(text.contains("make run"), "{text}");
        assert!(error.is_connect_failure());
    }

    #[test]
    fn only_a_refused_connection_is_told_to_start_a_broker() {
        for kind in [
            std::io::ErrorKind::HostUnreachable,
            std::io::ErrorKind::NetworkUnreachable,
            std::io::ErrorKind::PermissionDenied,
        ] {
            let error = ClientError::Connect {
                addr: "10.0.0.9:7100".to_owned(),
                source: Arc::new(std::io::Error::from(kind)),
            };
            let text = error.to_string();
            assert!(!text.contains("make run"), "{text}");
            assert!(text.contains("check the address"), "{text}");
        }
        let error = ClientError::Resolve {
            addr: "nosuchhost.invalid:7100".to_owned(),
            detail: "failed to lookup address information".to_owned(),
        };
        let text = error.to_string();
        assert!(text.contains("did not resolve"), "{text}");
        assert!(!text.contains("make run"), "{text}");
        assert!(error.is_connect_failure() && error.is_retriable());
    }
}
