//! Stable numeric error codes, the errors a user can see.
//!
//! Every code travels on the wire as a `u16` (the response body's top-level
//! error code, and the per-topic and per-partition `error_code` fields of the
//! messages). The numbers are part of the protocol: a code is never
//! renumbered, and a code that is retired is listed in [`RETIRED`] and never
//! handed out again, so an old client never misreads a new error. The unit
//! test at the bottom of this file pins the whole table; changing a number, a
//! name or a retriable flag makes it fail on purpose.
//!
//! Numbers are grouped by tens: `0..10` request and record format, `10..20`
//! topic administration, `20..30` partition leadership and replication,
//! `30..40` idempotent producers, `40..50` storage, `50..60` resource bounds,
//! `60..72` consumer groups, their administration and the audit log,
//! `72..80` broker membership and the controller (answered only to brokers,
//! on the inter-broker APIs; a client never sees them).
//!
//! Each code has a [`message`](ErrorCode::message) that tells the user what to
//! do, and says whether retrying the same request can succeed
//! ([`is_retriable`](ErrorCode::is_retriable)).

use std::fmt;

/// Codes that were used once and are retired. A number listed here must never
/// be assigned to a new [`ErrorCode`]: clients built against the old meaning
/// may still be running.
pub const RETIRED: &[u16] = &[];

macro_rules! error_codes {
    ($(
        $variant:ident = $code:literal, $name:literal, retriable: $retriable:literal,
        $message:literal;
    )*) => {
        /// An error a user can see, with its stable wire number.
        ///
        /// The doc line of each variant is also its
        /// [`message`](ErrorCode::message): what the user should do.
        #[repr(u16)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum ErrorCode {
            $(
                #[doc = $message]
                $variant = $code,
            )*
        }

        impl ErrorCode {
            /// Every assigned code, in ascending numeric order.
            pub const ALL: &'static [ErrorCode] = &[$(ErrorCode::$variant,)*];

            /// The code for a wire number, or `None` for a number this build
            /// does not know (a newer peer, or garbage). Never panics.
            #[must_use]
            pub const fn from_code(code: u16) -> Option<ErrorCode> {
                match code {
                    $($code => Some(ErrorCode::$variant),)*
                    _ => None,
                }
            }

            /// The stable name, in `SCREAMING_SNAKE_CASE`, for logs, metrics
            /// labels and the CLI.
            #[must_use]
            pub const fn name(self) -> &'static str {
                match self {
                    $(ErrorCode::$variant => $name,)*
                }
            }

            /// Whether the same request may succeed if sent again later
            /// (possibly after refreshing metadata or backing off).
            #[must_use]
            pub const fn is_retriable(self) -> bool {
                match self {
                    $(ErrorCode::$variant => $retriable,)*
                }
            }

            /// A sentence that tells the user what happened and what to do.
            #[must_use]
            pub const fn message(self) -> &'static str {
                match self {
                    $(ErrorCode::$variant => $message,)*
                }
            }
        }
    };
}

error_codes! {
    None = 0, "NONE", retriable: false,
        "No error: the request succeeded.";
    UnknownServerError = 1, "UNKNOWN_SERVER_ERROR", retriable: false,
        "The broker failed in an unexpected way; report it with the broker logs.";
    CorruptMessage = 2, "CORRUPT_MESSAGE", retriable: false,
        "A record batch failed its CRC or structure check; rebuild the batch and check the client for memory or encoding bugs.";
    InvalidRequest = 3, "INVALID_REQUEST", retriable: false,
        "The request was malformed; this is a client bug, upgrade or report the client.";
    UnsupportedVersion = 4, "UNSUPPORTED_VERSION", retriable: false,
        "The broker does not support this API version; use a version listed by ApiVersions.";
    FrameTooLarge = 5, "FRAME_TOO_LARGE", retriable: false,
        "The frame is larger than the broker's max_frame_bytes; send smaller requests or raise the limit.";
    MessageTooLarge = 6, "MESSAGE_TOO_LARGE", retriable: false,
        "The record batch is larger than the topic's maximum batch size; send smaller batches or raise the limit.";
    DecompressedTooLarge = 7, "DECOMPRESSED_TOO_LARGE", retriable: false,
        "The batch decompresses to more than the allowed bound; send smaller batches.";
    InvalidRecord = 8, "INVALID_RECORD", retriable: false,
        "A record in the batch is invalid (for example a bad timestamp or header); fix the record.";

    UnknownTopicOrPartition = 10, "UNKNOWN_TOPIC_OR_PARTITION", retriable: true,
        "The topic or partition does not exist on this broker; refresh metadata, and create the topic if it is missing.";
    TopicAlreadyExists = 11, "TOPIC_ALREADY_EXISTS", retriable: false,
        "A topic with this name already exists; choose another name or use the existing topic.";
    InvalidTopicName = 12, "INVALID_TOPIC_NAME", retriable: false,
        "The topic name is not allowed; use letters, digits, '.', '_' and '-' within the length limit.";
    InvalidPartitions = 13, "INVALID_PARTITIONS", retriable: false,
        "The partition count is invalid; use a positive count within the broker's limit.";
    InvalidReplicationFactor = 14, "INVALID_REPLICATION_FACTOR", retriable: false,
        "The replication factor is invalid or larger than the number of brokers; lower it or add brokers.";
    InvalidConfig = 15, "INVALID_CONFIG", retriable: false,
        "A topic configuration key or value is invalid; fix the configuration.";
    TopicDeletionInProgress = 16, "TOPIC_DELETION_IN_PROGRESS", retriable: true,
        "The topic was deleted and this broker is still removing its files; it disappears from listings once they are gone.";

    OffsetOutOfRange = 20, "OFFSET_OUT_OF_RANGE", retriable: false,
        "The requested offset is outside the log; resume from the returned log start offset or high watermark.";
    NotLeader = 21, "NOT_LEADER", retriable: true,
        "This broker is not the partition's leader; refresh metadata and retry on the leader.";
    FencedLeaderEpoch = 22, "FENCED_LEADER_EPOCH", retriable: true,
        "The leader epoch in the request is stale; refresh metadata and retry.";
    NotEnoughReplicas = 23, "NOT_ENOUGH_REPLICAS", retriable: true,
        "Too few replicas are in sync to meet the write quorum; retry later, nothing was acknowledged.";
    RequestTimedOut = 24, "REQUEST_TIMED_OUT", retriable: true,
        "The request did not complete in time; retry (an idempotent producer keeps its sequence).";
    LeaderNotAvailable = 25, "LEADER_NOT_AVAILABLE", retriable: true,
        "The partition has no leader right now (election in progress); retry after a short backoff.";
    UnknownLeaderEpoch = 26, "UNKNOWN_LEADER_EPOCH", retriable: true,
        "The leader epoch in the request is newer than this broker knows (its metadata is behind the controller's); retry after a short backoff.";

    DuplicateSequenceConflict = 30, "DUPLICATE_SEQUENCE_CONFLICT", retriable: false,
        "A different payload was sent under an already used producer sequence; this is a producer bug, do not resend.";
    OutOfOrderSequence = 31, "OUT_OF_ORDER_SEQUENCE", retriable: false,
        "The producer sequence skipped ahead (a gap); restart the producer session.";
    InvalidProducerEpoch = 32, "INVALID_PRODUCER_EPOCH", retriable: false,
        "The producer was fenced by a newer instance with the same id; stop this producer.";
    UnknownProducerId = 33, "UNKNOWN_PRODUCER_ID", retriable: true,
        "The broker has no state for this producer id (expired or not yet replicated); initialise the producer again and retry.";
    ProducerIdNotOwned = 34, "PRODUCER_ID_NOT_OWNED", retriable: false,
        "This producer id was given to another principal (or before the cluster bound ids to principals); initialise a new producer id, and do not share ids between logins.";

    DiskFull = 40, "DISK_FULL", retriable: true,
        "The broker's disk reached its reserve and refuses appends; retry later or free space (retention, more disks).";
    StorageError = 41, "STORAGE_ERROR", retriable: true,
        "The replica was fenced after an I/O failure; refresh metadata and retry on another replica.";
    CorruptSegment = 42, "CORRUPT_SEGMENT", retriable: false,
        "Stored data failed its checksum and is not served; read from another replica, and alert an operator: nothing repairs it automatically (a broker that finds damage when opening a replica exits with code 4 and says what to do).";

    TooManyRequests = 50, "TOO_MANY_REQUESTS", retriable: true,
        "Too many requests are in flight on this connection; wait for responses before sending more.";
    QueueFull = 51, "QUEUE_FULL", retriable: true,
        "The broker's request queue is full; back off and retry.";
    TooManyConnections = 52, "TOO_MANY_CONNECTIONS", retriable: true,
        "The broker has reached its connection limit; close idle connections and retry later.";
    OutOfFileDescriptors = 53, "OUT_OF_FILE_DESCRIPTORS", retriable: true,
        "The broker ran out of file descriptors for a moment; nothing it acknowledged is lost. Retry (as after a timeout, the records may be stored already: an idempotent producer's retry is not duplicated), and tell an operator to raise the broker's descriptor limit (LimitNOFILE=) or lower its connection limit.";
    PartitionLimitReached = 54, "PARTITION_LIMIT_REACHED", retriable: false,
        "The brokers would hold more partition replicas than they are configured for; delete unused topics, create fewer partitions, add brokers, or raise --max-partitions-per-shard.";
    PrincipalLimitReached = 55, "PRINCIPAL_LIMIT_REACHED", retriable: false,
        "This principal owns as many topics or partitions as its limit allows (the message names which); delete topics it no longer needs, or ask an administrator to raise the limit (`corelog quota set user:NAME --topics N --partitions N`).";

    IllegalGeneration = 60, "ILLEGAL_GENERATION", retriable: false,
        "The group generation is stale; rejoin the group before committing.";
    NotOwner = 61, "NOT_OWNER", retriable: false,
        "This member does not own the partition in the current generation; rejoin the group.";
    OffsetBeyondHighWatermark = 62, "OFFSET_BEYOND_HIGH_WATERMARK", retriable: false,
        "The committed offset is beyond the partition's high watermark; commit only offsets of records you read.";
    UnknownMemberId = 63, "UNKNOWN_MEMBER_ID", retriable: false,
        "The coordinator does not know this member (session expired); rejoin the group.";
    RebalanceInProgress = 64, "REBALANCE_IN_PROGRESS", retriable: true,
        "The group is rebalancing; rejoin and retry with the new generation.";
    GroupNotEmpty = 65, "GROUP_NOT_EMPTY", retriable: false,
        "The group still has active members; stop them before deleting or resetting the group.";
    CoordinatorNotAvailable = 66, "COORDINATOR_NOT_AVAILABLE", retriable: true,
        "The group coordinator is not available yet; retry after a short backoff.";
    NotCoordinator = 67, "NOT_COORDINATOR", retriable: true,
        "This broker is not the group's coordinator; find the coordinator again and retry there.";
    UnknownGroup = 68, "UNKNOWN_GROUP", retriable: false,
        "The group does not exist; check the group name.";
    AuditReasonRequired = 69, "AUDIT_REASON_REQUIRED", retriable: false,
        "A reason is required for an audited change (offset reset, record skip); pass --reason.";
    InvalidGroupId = 70, "INVALID_GROUP_ID", retriable: false,
        "The group id is empty, too long or contains characters that are not allowed; choose another group id.";
    InternalTopic = 71, "INTERNAL_TOPIC", retriable: false,
        "Internal topics (names starting with __) are written by the broker only; produce to a topic of your own.";

    NotController = 72, "NOT_CONTROLLER", retriable: true,
        "This node is not the controller leader; send controller requests to the controller leader named in the hint.";
    BrokerFenced = 73, "BROKER_FENCED", retriable: true,
        "The broker missed its heartbeats and was fenced; it re-registers.";
    StaleBrokerIncarnation = 74, "STALE_BROKER_INCARNATION", retriable: false,
        "A newer incarnation of this broker registered; this process must stop.";
    ReplicaNotInSync = 75, "REPLICA_NOT_IN_SYNC", retriable: true,
        "The replica asked to lead is not in sync with the leader; try again once it has caught up (see `corelog cluster health`).";
    BrokerInMaintenance = 76, "BROKER_IN_MAINTENANCE", retriable: false,
        "The broker is in maintenance and takes no leadership; disable its maintenance first, or pick another broker.";
    ReassignmentInProgress = 77, "REASSIGNMENT_IN_PROGRESS", retriable: false,
        "The partition is being reassigned already; wait for the move to finish or cancel it (`corelog partition reassign --cancel`).";
    NoReassignmentInProgress = 78, "NO_REASSIGNMENT_IN_PROGRESS", retriable: false,
        "The partition is not being reassigned; there is nothing to cancel.";

    // Authentication and authorization.
    UnsupportedSaslMechanism = 80, "UNSUPPORTED_SASL_MECHANISM", retriable: false,
        "The broker does not offer this authentication mechanism; configure one it lists in the error message.";
    AuthenticationFailed = 81, "AUTHENTICATION_FAILED", retriable: false,
        "The credentials were not accepted; check them (for brokers: every broker of a cluster needs the same --cluster-secret-file).";
    ClusterAuthorizationFailed = 82, "CLUSTER_AUTHORIZATION_FAILED", retriable: false,
        "This API is spoken only between the brokers of a cluster, on a connection that proved the cluster secret; clients never send it.";
    TlsRequired = 83, "TLS_REQUIRED", retriable: false,
        "This broker's listener speaks TLS only; connect with TLS (the CLI's --tls-ca FILE, naming the CA that signed the broker's certificate).";
    AuthenticationRequired = 84, "AUTHENTICATION_REQUIRED", retriable: false,
        "This broker serves only authenticated connections: log in with --sasl-user and --sasl-password-file.";
    UserNotFound = 85, "USER_NOT_FOUND", retriable: false,
        "No user has this name; list them with `corelog user list`.";
    TopicAuthorizationFailed = 86, "TOPIC_AUTHORIZATION_FAILED", retriable: false,
        "This principal may not do that to this topic, or the topic does not exist (the two look alike on purpose); ask an administrator for an ACL (`corelog acl add`).";
    GroupAuthorizationFailed = 87, "GROUP_AUTHORIZATION_FAILED", retriable: false,
        "This principal may not do that to this consumer group; ask an administrator for an ACL (`corelog acl add`).";
    ClusterAdminRequired = 88, "CLUSTER_ADMIN_REQUIRED", retriable: false,
        "Managing users, ACLs and quotas needs cluster-admin: log in as a super user (--super-users) or one granted `corelog acl add --operation cluster-admin --cluster`.";
    AclNotFound = 89, "ACL_NOT_FOUND", retriable: false,
        "No such ACL stands; list them with `corelog acl list` and remove one exactly as it is listed.";
    QuotaNotFound = 90, "QUOTA_NOT_FOUND", retriable: false,
        "This entity has no quota of its own; list them with `corelog quota describe`.";
    TooManyConnectionsForPrincipal = 91, "TOO_MANY_CONNECTIONS_FOR_PRINCIPAL", retriable: false,
        "This principal (or source address) has as many connections open as its quota allows; close some, or ask for a higher connection quota.";
    BrokerNotReady = 92, "BROKER_NOT_READY", retriable: true,
        "This broker has just started and has not loaded the cluster's users and ACLs from the controller yet; retry in a moment, or through another broker.";
    LoginLockedOut = 93, "LOGIN_LOCKED_OUT", retriable: false,
        "Too many failed logins for this user name: it is locked out for a while, except from client addresses that logged in as it before; wait (the message says how long), or log in from such a client, or ask an administrator to check who is guessing.";
    GroupLimitReached = 95, "GROUP_LIMIT_REACHED", retriable: false,
        "This principal created as many consumer groups on this group's coordinator as its limit allows; delete groups it no longer uses (`corelog group delete`), or ask an administrator to raise the limit (`corelog quota set user:NAME --groups N`).";
    GroupSubscribedToTopic = 96, "GROUP_SUBSCRIBED_TO_TOPIC", retriable: false,
        "Members of the group consume this topic, so its offsets are theirs: stop them (the group must not subscribe to the topic), or delete only a deleted topic's offsets (--deleted-only).";
}

impl ErrorCode {
    /// The wire number.
    #[must_use]
    pub const fn code(self) -> u16 {
        self as u16
    }

    /// Whether this is [`ErrorCode::None`], the success code.
    #[must_use]
    pub const fn is_none(self) -> bool {
        matches!(self, ErrorCode::None)
    }
}

impl fmt::Display for ErrorCode {
    /// `NAME (code): message`, for example
    /// `NOT_LEADER (21): This broker is not the partition's leader; ...`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({}): {}", self.name(), self.code(), self.message())
    }
}

impl From<ErrorCode> for u16 {
    fn from(code: ErrorCode) -> u16 {
        code.code()
    }
}

impl TryFrom<u16> for ErrorCode {
    type Error = UnknownErrorCode;

    fn try_from(code: u16) -> Result<ErrorCode, UnknownErrorCode> {
        ErrorCode::from_code(code).ok_or(UnknownErrorCode(code))
    }
}

/// A wire error number this build does not know: sent by a newer peer, or
/// garbage. Callers should treat it as a non-retriable failure and show the
/// number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown error code {0}: upgrade the client or report the broker version")]
pub struct UnknownErrorCode(pub u16);

#[cfg(test)]
mod tests {
    use super::*;

    /// The whole table, written out by hand. If this test fails you changed
    /// the wire protocol: numbers, names and retriable flags are frozen.
    /// Add new codes at the end of their group; retire a code by moving its
    /// number to `RETIRED`, never by reusing it.
    const PINNED: &[(u16, &str, bool)] = &[
        (0, "NONE", false),
        (1, "UNKNOWN_SERVER_ERROR", false),
        (2, "CORRUPT_MESSAGE", false),
        (3, "INVALID_REQUEST", false),
        (4, "UNSUPPORTED_VERSION", false),
        (5, "FRAME_TOO_LARGE", false),
        (6, "MESSAGE_TOO_LARGE", false),
        (7, "DECOMPRESSED_TOO_LARGE", false),
        (8, "INVALID_RECORD", false),
        (10, "UNKNOWN_TOPIC_OR_PARTITION", true),
        (11, "TOPIC_ALREADY_EXISTS", false),
        (12, "INVALID_TOPIC_NAME", false),
        (13, "INVALID_PARTITIONS", false),
        (14, "INVALID_REPLICATION_FACTOR", false),
        (15, "INVALID_CONFIG", false),
        (16, "TOPIC_DELETION_IN_PROGRESS", true),
        (20, "OFFSET_OUT_OF_RANGE", false),
        (21, "NOT_LEADER", true),
        (22, "FENCED_LEADER_EPOCH", true),
        (23, "NOT_ENOUGH_REPLICAS", true),
        (24, "REQUEST_TIMED_OUT", true),
        (25, "LEADER_NOT_AVAILABLE", true),
        (26, "UNKNOWN_LEADER_EPOCH", true),
        (30, "DUPLICATE_SEQUENCE_CONFLICT", false),
        (31, "OUT_OF_ORDER_SEQUENCE", false),
        (32, "INVALID_PRODUCER_EPOCH", false),
        (33, "UNKNOWN_PRODUCER_ID", true),
        (34, "PRODUCER_ID_NOT_OWNED", false),
        (40, "DISK_FULL", true),
        (41, "STORAGE_ERROR", true),
        (42, "CORRUPT_SEGMENT", false),
        (50, "TOO_MANY_REQUESTS", true),
        (51, "QUEUE_FULL", true),
        (52, "TOO_MANY_CONNECTIONS", true),
        (53, "OUT_OF_FILE_DESCRIPTORS", true),
        (54, "PARTITION_LIMIT_REACHED", false),
        (55, "PRINCIPAL_LIMIT_REACHED", false),
        (60, "ILLEGAL_GENERATION", false),
        (61, "NOT_OWNER", false),
        (62, "OFFSET_BEYOND_HIGH_WATERMARK", false),
        (63, "UNKNOWN_MEMBER_ID", false),
        (64, "REBALANCE_IN_PROGRESS", true),
        (65, "GROUP_NOT_EMPTY", false),
        (66, "COORDINATOR_NOT_AVAILABLE", true),
        (67, "NOT_COORDINATOR", true),
        (68, "UNKNOWN_GROUP", false),
        (69, "AUDIT_REASON_REQUIRED", false),
        (70, "INVALID_GROUP_ID", false),
        (71, "INTERNAL_TOPIC", false),
        (72, "NOT_CONTROLLER", true),
        (73, "BROKER_FENCED", true),
        (74, "STALE_BROKER_INCARNATION", false),
        (75, "REPLICA_NOT_IN_SYNC", true),
        (76, "BROKER_IN_MAINTENANCE", false),
        (77, "REASSIGNMENT_IN_PROGRESS", false),
        (78, "NO_REASSIGNMENT_IN_PROGRESS", false),
        (80, "UNSUPPORTED_SASL_MECHANISM", false),
        (81, "AUTHENTICATION_FAILED", false),
        (82, "CLUSTER_AUTHORIZATION_FAILED", false),
        (83, "TLS_REQUIRED", false),
        (84, "AUTHENTICATION_REQUIRED", false),
        (85, "USER_NOT_FOUND", false),
        (86, "TOPIC_AUTHORIZATION_FAILED", false),
        (87, "GROUP_AUTHORIZATION_FAILED", false),
        (88, "CLUSTER_ADMIN_REQUIRED", false),
        (89, "ACL_NOT_FOUND", false),
        (90, "QUOTA_NOT_FOUND", false),
        (91, "TOO_MANY_CONNECTIONS_FOR_PRINCIPAL", false),
        (92, "BROKER_NOT_READY", true),
        (93, "LOGIN_LOCKED_OUT", false),
        (95, "GROUP_LIMIT_REACHED", false),
        (96, "GROUP_SUBSCRIBED_TO_TOPIC", false),
    ];

    #[test]
    fn error_code_table_is_pinned() {
        let actual: Vec<(u16, &str, bool)> = ErrorCode::ALL
            .iter()
            .map(|c| (c.code(), c.name(), c.is_retriable()))
            .collect();
        assert_eq!(actual, PINNED);
    }

    #[test]
    fn every_wire_number_decodes_to_its_own_code_or_none() {
        let mut known = 0;
        for number in 0..=u16::MAX {
            match ErrorCode::from_code(number) {
                Some(code) => {
                    assert_eq!(code.code(), number);
                    assert_eq!(ErrorCode::try_from(number), Ok(code));
                    known += 1;
                }
                None => assert_eq!(ErrorCode::try_from(number), Err(UnknownErrorCode(number))),
            }
        }
        assert_eq!(known, PINNED.len());
    }

    #[test]
    fn retired_numbers_are_never_assigned() {
        for &number in RETIRED {
            assert_eq!(
                ErrorCode::from_code(number),
                None,
                "retired code {number} reused"
            );
        }
    }

    #[test]
    fn codes_are_ascending_and_names_unique_screaming_snake() {
        for pair in ErrorCode::ALL.windows(2) {
            assert!(pair[0].code() < pair[1].code());
        }
        let mut names: Vec<&str> = ErrorCode::ALL.iter().map(|c| c.name()).collect();
        for name in &names {
            assert!(
                name.chars().all(|c| c.is_ascii_uppercase() || c == '_'),
                "{name} is not SCREAMING_SNAKE"
            );
        }
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), ErrorCode::ALL.len());
    }

    #[test]
    fn every_code_has_a_sentence_and_display_shows_name_and_number() {
        for code in ErrorCode::ALL {
            let message = code.message();
            assert!(message.ends_with('.'), "{message:?}");
            assert!(message.len() > 20, "{message:?}");
        }
        assert_eq!(
            ErrorCode::OffsetOutOfRange.to_string(),
            format!(
                "OFFSET_OUT_OF_RANGE (20): {}",
                ErrorCode::OffsetOutOfRange.message()
            )
        );
        assert!(ErrorCode::None.is_none());
        assert!(!ErrorCode::NotLeader.is_none());
    }
}
