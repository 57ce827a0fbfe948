//! The frame codec: how requests and responses are cut out of a byte stream
//! (DESIGN §4).
//!
//! All integers are big-endian.
//!
//! ```text
//! request:  length: u32 · api_key: u16 · api_version: u16 · correlation_id: u32 · flags: u16 · body
//! response: length: u32 · correlation_id: u32 · body
//! ```
//!
//! `length` counts the bytes after the length field itself, so a request
//! frame is `4 + length` bytes long and its body is `length - 10` bytes.
//!
//! # Bounds before allocation (C9)
//!
//! Every decoder here decides from the fixed-size header alone whether the
//! frame is acceptable: a `length` above [`FrameLimits::max_frame_bytes`] is
//! refused as soon as the four length bytes are available, before the body is
//! read and before anything is allocated. Nothing in this module allocates on
//! the decode side. A refused frame leaves the stream at an unknown position,
//! so the connection must be closed after answering (if it answers at all).
//!
//! # Reading a frame so that the body is aligned
//!
//! Message bodies are rkyv archives and must start at a 16-aligned address
//! (see [`crate::message`]). A network reader therefore reads the fixed
//! header into a small array first, decodes it with
//! [`decode_request_header`] / [`decode_response_header`], allocates an
//! aligned buffer of exactly `body_len` bytes (bounded by the limit) and reads
//! the body into it. [`decode_request_frame`] / [`decode_response_frame`]
//! serve readers that keep the whole stream in one buffer; the body range they
//! return is then usually not aligned and must be copied
//! ([`crate::message::copy_aligned`]) before the message is decoded.

use std::ops::Range;

use bytes::BufMut;

/// Bytes of the `length` field that starts every frame.
pub const LENGTH_FIELD_BYTES: usize = 4;

/// Bytes of a request frame before its body: length, api key, api version,
/// correlation id and flags.
pub const REQUEST_HEADER_BYTES: usize = 14;

/// Bytes of a response frame before its body: length and correlation id.
pub const RESPONSE_HEADER_BYTES: usize = 8;

/// The smallest legal `length` of a request frame: the header after the length
/// field, with an empty body.
const REQUEST_LENGTH_MIN: u32 = (REQUEST_HEADER_BYTES - LENGTH_FIELD_BYTES) as u32;

/// The smallest legal `length` of a response frame.
const RESPONSE_LENGTH_MIN: u32 = (RESPONSE_HEADER_BYTES - LENGTH_FIELD_BYTES) as u32;

const _: () = assert!(REQUEST_HEADER_BYTES == 4 + 2 + 2 + 4 + 2);
const _: () = assert!(RESPONSE_HEADER_BYTES == 4 + 4);

/// A numbered API. The numbers are part of the protocol and never reused.
///
/// `0..20` are the data and admin APIs (`10..20` are kept free for later ones
/// of that kind); `20..32` are the consumer-group APIs and the audit log
/// (`32..40` are kept free for later ones of that kind).
///
/// `40..` are the inter-broker and controller APIs: brokers and controller
/// voters speak them to each other, never clients
/// ([`is_inter_broker`](ApiKey::is_inter_broker)). They share the frame and
/// body format with the client APIs so that one codec, one set of fuzzers and
/// one connection handler serve both.
#[repr(u16)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ApiKey {
    /// Version negotiation; the first request on every connection.
    ApiVersions = 0,
    /// Brokers, topics, partitions, leaders and owning shards.
    Metadata = 1,
    /// Create topics.
    CreateTopics = 2,
    /// Delete topics.
    DeleteTopics = 3,
    /// Topic configuration and per-partition log positions.
    DescribeTopics = 4,
    /// Append record batches.
    Produce = 5,
    /// Read record batches.
    Fetch = 6,
    /// Look up offsets by position or timestamp.
    ListOffsets = 7,
    /// Obtain or bump an idempotent producer id and epoch.
    InitProducerId = 8,
    /// The answering broker's shards and each one's own port, for
    /// shard-aware clients.
    DescribeShards = 9,
    /// Brokers, the controller quorum, and each partition's leader,
    /// replicas and in-sync replicas.
    DescribeCluster = 10,
    /// One step of a SASL-style exchange that proves who the connection
    /// speaks for; right after `ApiVersions`. Brokers prove a shared cluster
    /// secret with it (`CORELOG-CLUSTER`).
    Authenticate = 11,
    /// The users a cluster knows and their credentials' mechanisms.
    DescribeUsers = 12,
    /// Create a user, change its password, or delete it.
    AlterUsers = 13,
    /// The access rules of the cluster.
    DescribeAcls = 14,
    /// Add or remove an access rule.
    AlterAcls = 15,
    /// The quotas of the cluster.
    DescribeQuotas = 16,
    /// Set or remove a quota.
    AlterQuotas = 17,
    /// Change the cluster's shape: move a leadership, put a broker in
    /// maintenance.
    AlterCluster = 18,
    /// Find the coordinator (broker and shard) of a consumer group.
    FindCoordinator = 20,
    /// Join a consumer group, or rejoin after a rebalance, and get an assignment.
    JoinGroup = 21,
    /// Keep a group membership alive; learn that the group is rebalancing.
    Heartbeat = 22,
    /// Leave a consumer group so that its partitions move at once.
    LeaveGroup = 23,
    /// Store a group's next offsets, fenced by generation and ownership (C6).
    OffsetCommit = 24,
    /// Read a group's committed offsets.
    OffsetFetch = 25,
    /// List the consumer groups a coordinator knows.
    ListGroups = 26,
    /// Members, assignments, committed offsets and lag of groups.
    DescribeGroups = 27,
    /// Delete groups without members (never topic data).
    DeleteGroups = 28,
    /// Move a group's offsets elsewhere: privileged and audited (C6).
    ResetOffsets = 29,
    /// Record a poison-record skip in the audit log (C8).
    WriteAudit = 30,
    /// Delete a group's committed offsets of one topic (of a deleted
    /// topic, or of one the group no longer consumes): privileged and
    /// audited, as a reset.
    DeleteOffsets = 31,
    /// One raft message between controller voters (inter-broker).
    ControllerRaft = 40,
    /// A broker announces itself to the controller leader (inter-broker).
    BrokerRegister = 41,
    /// A broker's periodic liveness signal to the controller leader
    /// (inter-broker).
    BrokerHeartbeat = 42,
    /// A broker long-polls the controller leader for newer metadata
    /// (inter-broker).
    MetadataFetch = 43,
    /// A broker forwards an administrative change to the controller leader
    /// (inter-broker).
    ControllerOperation = 44,
    /// A partition leader sends record batches to a follower (inter-broker).
    ReplicaPush = 45,
    /// The controller asks a replica for its log position before an election
    /// (inter-broker).
    ReplicaQuery = 46,
    /// A leader shard sends the pushes of many partitions to one follower
    /// broker in one frame (inter-broker).
    ReplicaStream = 47,
    /// A broker reports the in-sync replicas of the partitions it leads to
    /// the controller leader (inter-broker).
    PartitionReport = 48,
}

impl ApiKey {
    /// Every API, in ascending numeric order.
    pub const ALL: &'static [ApiKey] = &[
        ApiKey::ApiVersions,
        ApiKey::Metadata,
        ApiKey::CreateTopics,
        ApiKey::DeleteTopics,
        ApiKey::DescribeTopics,
        ApiKey::Produce,
        ApiKey::Fetch,
        ApiKey::ListOffsets,
        ApiKey::InitProducerId,
        ApiKey::DescribeShards,
        ApiKey::DescribeCluster,
        ApiKey::Authenticate,
        ApiKey::DescribeUsers,
        ApiKey::AlterUsers,
        ApiKey::DescribeAcls,
        ApiKey::AlterAcls,
        ApiKey::DescribeQuotas,
        ApiKey::AlterQuotas,
        ApiKey::AlterCluster,
        ApiKey::FindCoordinator,
        ApiKey::JoinGroup,
        ApiKey::Heartbeat,
        ApiKey::LeaveGroup,
        ApiKey::OffsetCommit,
        ApiKey::OffsetFetch,
        ApiKey::ListGroups,
        ApiKey::DescribeGroups,
        ApiKey::DeleteGroups,
        ApiKey::ResetOffsets,
        ApiKey::WriteAudit,
        ApiKey::DeleteOffsets,
        ApiKey::ControllerRaft,
        ApiKey::BrokerRegister,
        ApiKey::BrokerHeartbeat,
        ApiKey::MetadataFetch,
        ApiKey::ControllerOperation,
        ApiKey::ReplicaPush,
        ApiKey::ReplicaQuery,
        ApiKey::ReplicaStream,
        ApiKey::PartitionReport,
    ];

    /// The wire number.
    #[must_use]
    pub const fn code(self) -> u16 {
        self as u16
    }

    /// The API for a wire number, or `None` for an unknown number. Never
    /// panics.
    #[must_use]
    pub const fn from_code(code: u16) -> Option<ApiKey> {
        match code {
            0 => Some(ApiKey::ApiVersions),
            1 => Some(ApiKey::Metadata),
            2 => Some(ApiKey::CreateTopics),
            3 => Some(ApiKey::DeleteTopics),
            4 => Some(ApiKey::DescribeTopics),
            5 => Some(ApiKey::Produce),
            6 => Some(ApiKey::Fetch),
            7 => Some(ApiKey::ListOffsets),
            8 => Some(ApiKey::InitProducerId),
            9 => Some(ApiKey::DescribeShards),
            10 => Some(ApiKey::DescribeCluster),
            11 => Some(ApiKey::Authenticate),
            12 => Some(ApiKey::DescribeUsers),
            13 => Some(ApiKey::AlterUsers),
            14 => Some(ApiKey::DescribeAcls),
            15 => Some(ApiKey::AlterAcls),
            16 => Some(ApiKey::DescribeQuotas),
            17 => Some(ApiKey::AlterQuotas),
            18 => Some(ApiKey::AlterCluster),
            20 => Some(ApiKey::FindCoordinator),
            21 => Some(ApiKey::JoinGroup),
            22 => Some(ApiKey::Heartbeat),
            23 => Some(ApiKey::LeaveGroup),
            24 => Some(ApiKey::OffsetCommit),
            25 => Some(ApiKey::OffsetFetch),
            26 => Some(ApiKey::ListGroups),
            27 => Some(ApiKey::DescribeGroups),
            28 => Some(ApiKey::DeleteGroups),
            29 => Some(ApiKey::ResetOffsets),
            30 => Some(ApiKey::WriteAudit),
            31 => Some(ApiKey::DeleteOffsets),
            40 => Some(ApiKey::ControllerRaft),
            41 => Some(ApiKey::BrokerRegister),
            42 => Some(ApiKey::BrokerHeartbeat),
            43 => Some(ApiKey::MetadataFetch),
            44 => Some(ApiKey::ControllerOperation),
            45 => Some(ApiKey::ReplicaPush),
            46 => Some(ApiKey::ReplicaQuery),
            47 => Some(ApiKey::ReplicaStream),
            48 => Some(ApiKey::PartitionReport),
            _ => None,
        }
    }

    /// The name used in logs and metrics labels.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            ApiKey::ApiVersions => "ApiVersions",
            ApiKey::Metadata => "Metadata",
            ApiKey::CreateTopics => "CreateTopics",
            ApiKey::DeleteTopics => "DeleteTopics",
            ApiKey::DescribeTopics => "DescribeTopics",
            ApiKey::Produce => "Produce",
            ApiKey::Fetch => "Fetch",
            ApiKey::ListOffsets => "ListOffsets",
            ApiKey::InitProducerId => "InitProducerId",
            ApiKey::DescribeShards => "DescribeShards",
            ApiKey::FindCoordinator => "FindCoordinator",
            ApiKey::JoinGroup => "JoinGroup",
            ApiKey::Heartbeat => "Heartbeat",
            ApiKey::LeaveGroup => "LeaveGroup",
            ApiKey::OffsetCommit => "OffsetCommit",
            ApiKey::OffsetFetch => "OffsetFetch",
            ApiKey::ListGroups => "ListGroups",
            ApiKey::DescribeGroups => "DescribeGroups",
            ApiKey::DeleteGroups => "DeleteGroups",
            ApiKey::ResetOffsets => "ResetOffsets",
            ApiKey::WriteAudit => "WriteAudit",
            ApiKey::DeleteOffsets => "DeleteOffsets",
            ApiKey::ControllerRaft => "ControllerRaft",
            ApiKey::BrokerRegister => "BrokerRegister",
            ApiKey::BrokerHeartbeat => "BrokerHeartbeat",
            ApiKey::MetadataFetch => "MetadataFetch",
            ApiKey::ControllerOperation => "ControllerOperation",
            ApiKey::ReplicaPush => "ReplicaPush",
            ApiKey::ReplicaQuery => "ReplicaQuery",
            ApiKey::ReplicaStream => "ReplicaStream",
            ApiKey::DescribeCluster => "DescribeCluster",
            ApiKey::Authenticate => "Authenticate",
            ApiKey::DescribeUsers => "DescribeUsers",
            ApiKey::AlterUsers => "AlterUsers",
            ApiKey::DescribeAcls => "DescribeAcls",
            ApiKey::AlterAcls => "AlterAcls",
            ApiKey::DescribeQuotas => "DescribeQuotas",
            ApiKey::AlterQuotas => "AlterQuotas",
            ApiKey::AlterCluster => "AlterCluster",
            ApiKey::PartitionReport => "PartitionReport",
        }
    }

    /// The versions of this API that this build speaks, for the ApiVersions
    /// response and for refusing a request with `UNSUPPORTED_VERSION`.
    #[must_use]
    pub const fn supported_versions(self) -> VersionRange {
        // Every API is at version 0 until its first change; a change adds a
        // version and keeps the old one until clients have moved.
        match self {
            ApiKey::ApiVersions
            | ApiKey::Metadata
            | ApiKey::CreateTopics
            | ApiKey::DeleteTopics
            | ApiKey::DescribeTopics
            | ApiKey::Produce
            | ApiKey::Fetch
            | ApiKey::ListOffsets
            | ApiKey::InitProducerId
            | ApiKey::DescribeShards
            | ApiKey::FindCoordinator
            | ApiKey::JoinGroup
            | ApiKey::Heartbeat
            | ApiKey::LeaveGroup
            | ApiKey::OffsetCommit
            | ApiKey::OffsetFetch
            | ApiKey::ListGroups
            | ApiKey::DeleteGroups
            | ApiKey::ResetOffsets
            | ApiKey::WriteAudit
            | ApiKey::DeleteOffsets
            | ApiKey::ControllerRaft
            | ApiKey::BrokerRegister
            | ApiKey::BrokerHeartbeat
            | ApiKey::MetadataFetch
            | ApiKey::ControllerOperation
            | ApiKey::ReplicaPush
            | ApiKey::ReplicaQuery
            | ApiKey::ReplicaStream
            | ApiKey::Authenticate
            | ApiKey::DescribeUsers
            | ApiKey::AlterUsers
            | ApiKey::DescribeAcls
            | ApiKey::AlterAcls
            | ApiKey::AlterCluster => VersionRange { min: 0, max: 0 },
            // Version 1 also lists the offsets a group holds of deleted
            // topics (issue 35, item 17); version 0 omits them.
            ApiKey::DescribeGroups => VersionRange { min: 0, max: 1 },
            // Version 1: quotas with topic, partition and group limits.
            ApiKey::DescribeQuotas | ApiKey::AlterQuotas => VersionRange { min: 0, max: 1 },
            // Version 1 also shows brokers in maintenance and partitions
            // moving to other brokers (issue 38); version 2 also brokers
            // being decommissioned.
            ApiKey::DescribeCluster => VersionRange { min: 0, max: 2 },
            // Version 1 also says whether each leader committed its epoch,
            // which paces a replica move's steps (issue 38).
            ApiKey::PartitionReport => VersionRange { min: 0, max: 1 },
        }
    }

    /// Whether brokers and controller voters speak this API only to each
    /// other. Clients never send these; a broker can refuse them on a
    /// listener meant for clients.
    #[must_use]
    pub const fn is_inter_broker(self) -> bool {
        // Spelled out rather than `code() >= 40` so that adding an API forces
        // a decision here.
        match self {
            ApiKey::ControllerRaft
            | ApiKey::BrokerRegister
            | ApiKey::BrokerHeartbeat
            | ApiKey::MetadataFetch
            | ApiKey::ControllerOperation
            | ApiKey::ReplicaPush
            | ApiKey::ReplicaQuery
            | ApiKey::ReplicaStream
            | ApiKey::PartitionReport => true,
            ApiKey::ApiVersions
            | ApiKey::Metadata
            | ApiKey::CreateTopics
            | ApiKey::DeleteTopics
            | ApiKey::DescribeTopics
            | ApiKey::Produce
            | ApiKey::Fetch
            | ApiKey::ListOffsets
            | ApiKey::InitProducerId
            | ApiKey::DescribeShards
            | ApiKey::DescribeCluster
            | ApiKey::Authenticate
            | ApiKey::DescribeUsers
            | ApiKey::AlterUsers
            | ApiKey::DescribeAcls
            | ApiKey::AlterAcls
            | ApiKey::DescribeQuotas
            | ApiKey::AlterQuotas
            | ApiKey::AlterCluster
            | ApiKey::FindCoordinator
            | ApiKey::JoinGroup
            | ApiKey::Heartbeat
            | ApiKey::LeaveGroup
            | ApiKey::OffsetCommit
            | ApiKey::OffsetFetch
            | ApiKey::ListGroups
            | ApiKey::DescribeGroups
            | ApiKey::DeleteGroups
            | ApiKey::ResetOffsets
            | ApiKey::WriteAudit
            | ApiKey::DeleteOffsets => false,
        }
    }

    /// Whether this build speaks `version` of this API.
    #[must_use]
    pub const fn supports(self, version: u16) -> bool {
        let range = self.supported_versions();
        range.min <= version && version <= range.max
    }
}

impl std::fmt::Display for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}({})", self.name(), self.code())
    }
}

/// An inclusive range of API versions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct VersionRange {
    /// Oldest supported version.
    pub min: u16,
    /// Newest supported version.
    pub max: u16,
}

/// Bounds on frames read from one peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameLimits {
    /// Largest accepted `length` field: the bytes after the length field,
    /// header included. A larger frame is refused from its header alone.
    pub max_frame_bytes: u32,
}

impl FrameLimits {
    /// 16 MiB: room for a produce request of several 1 MiB batches while
    /// keeping a hostile peer from making the broker allocate much.
    pub const DEFAULT_MAX_FRAME_BYTES: u32 = 16 * 1024 * 1024;
}

impl Default for FrameLimits {
    fn default() -> FrameLimits {
        FrameLimits {
            max_frame_bytes: FrameLimits::DEFAULT_MAX_FRAME_BYTES,
        }
    }
}

/// Why a frame was refused. Every variant means the byte stream can no longer
/// be trusted; the connection should be closed (after an error response where
/// the correlation id is known).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// The frame's `length` is above the limit. Decided from the length field
    /// alone, before anything else is read.
    #[error("frame of {length} bytes is over the limit of {max} bytes")]
    TooLarge {
        /// The declared length (or, when encoding, the length that would be
        /// declared).
        length: u64,
        /// The limit it broke.
        max: u64,
    },
    /// The frame's `length` is smaller than the header that must follow it.
    #[error("frame length {length} is shorter than its header ({min} bytes)")]
    TooShort {
        /// The declared length.
        length: u32,
        /// The smallest legal length.
        min: u32,
    },
    /// A complete frame was required but the buffer ends early.
    #[error("frame truncated: needs {needed} bytes, {available} available")]
    Truncated {
        /// Bytes the frame needs, from the start of the length field.
        needed: usize,
        /// Bytes given.
        available: usize,
    },
    /// The request names an API this build does not know. The header was
    /// otherwise valid, so the caller may answer `INVALID_REQUEST` to
    /// `correlation_id` and skip `body_len` bytes.
    #[error("unknown api key {api_key} (correlation id {correlation_id})")]
    UnknownApiKey {
        /// The number received.
        api_key: u16,
        /// The request's correlation id, to address an error response.
        correlation_id: u32,
        /// Bytes of body that follow the header.
        body_len: u32,
    },
}

/// The fields of a request frame header other than its length.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RequestHeader {
    /// Which API the body belongs to.
    pub api_key: ApiKey,
    /// Version of that API the body is encoded in.
    pub api_version: u16,
    /// Chosen by the client; echoed in the response so that responses can be
    /// matched to pipelined requests.
    pub correlation_id: u32,
    /// No flag is defined yet: senders write 0. Reserved for per-request
    /// options that do not change the body's layout.
    pub flags: u16,
}

/// The fields of a response frame header other than its length.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ResponseHeader {
    /// The correlation id of the request this answers.
    pub correlation_id: u32,
}

/// A decoded request header and the length of the body that follows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestHead {
    /// The header fields.
    pub header: RequestHeader,
    /// Bytes of body after the header; at most the frame limit.
    pub body_len: usize,
}

/// A decoded response header and the length of the body that follows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResponseHead {
    /// The header fields.
    pub header: ResponseHeader,
    /// Bytes of body after the header; at most the frame limit.
    pub body_len: usize,
}

/// A complete request frame found at the start of a buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestFrame {
    /// The header fields.
    pub header: RequestHeader,
    /// Where the body lies in the buffer that was decoded. `body.end` is the
    /// frame's total size: the next frame starts there.
    pub body: Range<usize>,
}

/// A complete response frame found at the start of a buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResponseFrame {
    /// The header fields.
    pub header: ResponseHeader,
    /// Where the body lies in the buffer that was decoded. `body.end` is the
    /// frame's total size: the next frame starts there.
    pub body: Range<usize>,
}

fn be_u16(bytes: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([bytes[at], bytes[at + 1]])
}

fn be_u32(bytes: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}

/// Checks a frame's length field against the limit and the header size.
///
/// The limit is checked first, so that an oversized frame is refused even
/// when its length is also nonsense in other ways.
fn check_length(length: u32, min: u32, limits: &FrameLimits) -> Result<usize, FrameError> {
    if length > limits.max_frame_bytes {
        return Err(FrameError::TooLarge {
            length: u64::from(length),
            max: u64::from(limits.max_frame_bytes),
        });
    }
    if length < min {
        return Err(FrameError::TooShort { length, min });
    }
    // The limit is a u32, so the body length always fits a usize on the
    // 32- and 64-bit targets we support.
    Ok((length - min) as usize)
}

/// Checks only the length field of a request frame, from its first four
/// bytes: lets a reader refuse an oversized frame before reading the rest of
/// the header.
///
/// # Errors
/// [`FrameError::TooLarge`] over the limit, [`FrameError::TooShort`] below the
/// header size.
pub fn check_request_length(
    length_field: [u8; LENGTH_FIELD_BYTES],
    limits: &FrameLimits,
) -> Result<usize, FrameError> {
    check_length(u32::from_be_bytes(length_field), REQUEST_LENGTH_MIN, limits)
}

/// Checks only the length field of a response frame; see
/// [`check_request_length`].
///
/// # Errors
/// [`FrameError::TooLarge`] over the limit, [`FrameError::TooShort`] below the
/// header size.
pub fn check_response_length(
    length_field: [u8; LENGTH_FIELD_BYTES],
    limits: &FrameLimits,
) -> Result<usize, FrameError> {
    check_length(
        u32::from_be_bytes(length_field),
        RESPONSE_LENGTH_MIN,
        limits,
    )
}

/// Decodes a request frame header from its fixed-size bytes: the whole
/// decision about the frame is made here, before its body is read.
///
/// # Errors
/// [`FrameError::TooLarge`] if the length is over `limits`,
/// [`FrameError::TooShort`] if it cannot hold the header,
/// [`FrameError::UnknownApiKey`] for an API this build does not know.
pub fn decode_request_header(
    bytes: &[u8; REQUEST_HEADER_BYTES],
    limits: &FrameLimits,
) -> Result<RequestHead, FrameError> {
    let body_len = check_length(be_u32(bytes, 0), REQUEST_LENGTH_MIN, limits)?;
    let api_key = be_u16(bytes, 4);
    let api_version = be_u16(bytes, 6);
    let correlation_id = be_u32(bytes, 8);
    let flags = be_u16(bytes, 12);
    let Some(api_key) = ApiKey::from_code(api_key) else {
        return Err(FrameError::UnknownApiKey {
            api_key,
            correlation_id,
            // Bounded by the limit, which is a u32.
            body_len: body_len as u32,
        });
    };
    Ok(RequestHead {
        header: RequestHeader {
            api_key,
            api_version,
            correlation_id,
            flags,
        },
        body_len,
    })
}

/// Decodes a response frame header from its fixed-size bytes.
///
/// # Errors
/// [`FrameError::TooLarge`] if the length is over `limits`,
/// [`FrameError::TooShort`] if it cannot hold the header.
pub fn decode_response_header(
    bytes: &[u8; RESPONSE_HEADER_BYTES],
    limits: &FrameLimits,
) -> Result<ResponseHead, FrameError> {
    let body_len = check_length(be_u32(bytes, 0), RESPONSE_LENGTH_MIN, limits)?;
    Ok(ResponseHead {
        header: ResponseHeader {
            correlation_id: be_u32(bytes, 4),
        },
        body_len,
    })
}

/// Looks for one complete request frame at the start of `buf`.
///
/// Returns `Ok(None)` when more bytes are needed; use [`bytes_needed`] to
/// learn how many. The length is checked against `limits` as soon as its four
/// bytes are present, so an oversized frame is refused without waiting for
/// (or buffering) its body.
///
/// # Errors
/// As [`decode_request_header`].
pub fn decode_request_frame(
    buf: &[u8],
    limits: &FrameLimits,
) -> Result<Option<RequestFrame>, FrameError> {
    let Some(length_field) = buf.first_chunk::<LENGTH_FIELD_BYTES>() else {
        return Ok(None);
    };
    check_request_length(*length_field, limits)?;
    let Some(header) = buf.first_chunk::<REQUEST_HEADER_BYTES>() else {
        return Ok(None);
    };
    let head = decode_request_header(header, limits)?;
    let end = REQUEST_HEADER_BYTES + head.body_len;
    if buf.len() < end {
        return Ok(None);
    }
    Ok(Some(RequestFrame {
        header: head.header,
        body: REQUEST_HEADER_BYTES..end,
    }))
}

/// Looks for one complete response frame at the start of `buf`; see
/// [`decode_request_frame`].
///
/// # Errors
/// As [`decode_response_header`].
pub fn decode_response_frame(
    buf: &[u8],
    limits: &FrameLimits,
) -> Result<Option<ResponseFrame>, FrameError> {
    let Some(header) = buf.first_chunk::<RESPONSE_HEADER_BYTES>() else {
        if let Some(length_field) = buf.first_chunk::<LENGTH_FIELD_BYTES>() {
            check_response_length(*length_field, limits)?;
        }
        return Ok(None);
    };
    let head = decode_response_header(header, limits)?;
    let end = RESPONSE_HEADER_BYTES + head.body_len;
    if buf.len() < end {
        return Ok(None);
    }
    Ok(Some(ResponseFrame {
        header: head.header,
        body: RESPONSE_HEADER_BYTES..end,
    }))
}

/// Like [`decode_request_frame`], for a buffer that must hold exactly one
/// complete frame (a datagram, a fuzz input, a test vector).
///
/// # Errors
/// As [`decode_request_header`], plus [`FrameError::Truncated`] if the buffer
/// ends before the frame does. Trailing bytes after the frame are left to the
/// caller (`body.end` tells where the frame ends).
pub fn decode_complete_request_frame(
    buf: &[u8],
    limits: &FrameLimits,
) -> Result<RequestFrame, FrameError> {
    decode_request_frame(buf, limits)?.ok_or(FrameError::Truncated {
        needed: bytes_needed(buf, REQUEST_HEADER_BYTES),
        available: buf.len(),
    })
}

/// Like [`decode_response_frame`], for a buffer that must hold one complete
/// frame.
///
/// # Errors
/// As [`decode_response_header`], plus [`FrameError::Truncated`] if the buffer
/// ends before the frame does.
pub fn decode_complete_response_frame(
    buf: &[u8],
    limits: &FrameLimits,
) -> Result<ResponseFrame, FrameError> {
    decode_response_frame(buf, limits)?.ok_or(FrameError::Truncated {
        needed: bytes_needed(buf, RESPONSE_HEADER_BYTES),
        available: buf.len(),
    })
}

/// How many bytes, from the start of `buf`, the next step of decoding needs:
/// the fixed header while it is incomplete, then the whole frame. Meant for
/// sizing a read after a decoder returned `Ok(None)`; the value is only
/// trustworthy once the header was accepted, and is never above
/// `header_bytes + u32::MAX`.
///
/// `header_bytes` is [`REQUEST_HEADER_BYTES`] or [`RESPONSE_HEADER_BYTES`].
#[must_use]
pub fn bytes_needed(buf: &[u8], header_bytes: usize) -> usize {
    match buf.first_chunk::<LENGTH_FIELD_BYTES>() {
        Some(length_field) if buf.len() >= header_bytes => {
            LENGTH_FIELD_BYTES + u32::from_be_bytes(*length_field) as usize
        }
        _ => header_bytes,
    }
}

/// The `length` field for a frame whose header is `header_bytes` long and
/// whose body is `body_len` bytes.
fn frame_length(header_bytes: usize, body_len: usize) -> Result<u32, FrameError> {
    let length = (header_bytes - LENGTH_FIELD_BYTES)
        .checked_add(body_len)
        .and_then(|length| u32::try_from(length).ok());
    length.ok_or(FrameError::TooLarge {
        length: (header_bytes - LENGTH_FIELD_BYTES) as u64 + body_len as u64,
        max: u64::from(u32::MAX),
    })
}

impl RequestHeader {
    /// The header bytes of a frame with a body of `body_len` bytes, for a
    /// writer that sends header and body separately (vectored writes keep the
    /// body, and any record batches in it, from being copied).
    ///
    /// # Errors
    /// [`FrameError::TooLarge`] if the frame length does not fit a `u32`.
    pub fn encode(&self, body_len: usize) -> Result<[u8; REQUEST_HEADER_BYTES], FrameError> {
        let length = frame_length(REQUEST_HEADER_BYTES, body_len)?;
        let mut bytes = [0_u8; REQUEST_HEADER_BYTES];
        bytes[0..4].copy_from_slice(&length.to_be_bytes());
        bytes[4..6].copy_from_slice(&self.api_key.code().to_be_bytes());
        bytes[6..8].copy_from_slice(&self.api_version.to_be_bytes());
        bytes[8..12].copy_from_slice(&self.correlation_id.to_be_bytes());
        bytes[12..14].copy_from_slice(&self.flags.to_be_bytes());
        Ok(bytes)
    }
}

impl ResponseHeader {
    /// The header bytes of a frame with a body of `body_len` bytes; see
    /// [`RequestHeader::encode`].
    ///
    /// # Errors
    /// [`FrameError::TooLarge`] if the frame length does not fit a `u32`.
    pub fn encode(&self, body_len: usize) -> Result<[u8; RESPONSE_HEADER_BYTES], FrameError> {
        let length = frame_length(RESPONSE_HEADER_BYTES, body_len)?;
        let mut bytes = [0_u8; RESPONSE_HEADER_BYTES];
        bytes[0..4].copy_from_slice(&length.to_be_bytes());
        bytes[4..8].copy_from_slice(&self.correlation_id.to_be_bytes());
        Ok(bytes)
    }
}

/// Appends a whole request frame (header and body) to `out`.
///
/// The sender's own limit is not checked here: the peer decides, and an
/// over-limit frame is refused by the peer's decoder.
///
/// # Errors
/// [`FrameError::TooLarge`] if the frame length does not fit a `u32`; nothing
/// is written then.
pub fn encode_request_frame(
    header: &RequestHeader,
    body: &[u8],
    out: &mut impl BufMut,
) -> Result<(), FrameError> {
    let head = header.encode(body.len())?;
    out.put_slice(&head);
    out.put_slice(body);
    Ok(())
}

/// Appends a whole response frame (header and body) to `out`.
///
/// # Errors
/// [`FrameError::TooLarge`] if the frame length does not fit a `u32`; nothing
/// is written then.
pub fn encode_response_frame(
    header: &ResponseHeader,
    body: &[u8],
    out: &mut impl BufMut,
) -> Result<(), FrameError> {
    let head = header.encode(body.len())?;
    out.put_slice(&head);
    out.put_slice(body);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const LIMITS: FrameLimits = FrameLimits {
        max_frame_bytes: 1024,
    };

    fn request_header() -> RequestHeader {
        RequestHeader {
            api_key: ApiKey::Produce,
            api_version: 0,
            correlation_id: 0xDEAD_BEEF,
            flags: 0,
        }
    }

    #[test]
    fn request_header_layout_is_big_endian_and_pinned() {
        let header = RequestHeader {
            api_key: ApiKey::Fetch,
            api_version: 0x0102,
            correlation_id: 0x0304_0506,
            flags: 0x0708,
        };
        let bytes = header.encode(3).unwrap();
        assert_eq!(bytes, [0, 0, 0, 13, 0, 6, 1, 2, 3, 4, 5, 6, 7, 8]);
        let response = ResponseHeader {
            correlation_id: 0x0A0B_0C0D,
        }
        .encode(2)
        .unwrap();
        assert_eq!(response, [0, 0, 0, 6, 0x0A, 0x0B, 0x0C, 0x0D]);
    }

    #[test]
    fn api_key_numbers_are_pinned() {
        let numbers: Vec<(u16, &str)> = ApiKey::ALL.iter().map(|k| (k.code(), k.name())).collect();
        assert_eq!(
            numbers,
            [
                (0, "ApiVersions"),
                (1, "Metadata"),
                (2, "CreateTopics"),
                (3, "DeleteTopics"),
                (4, "DescribeTopics"),
                (5, "Produce"),
                (6, "Fetch"),
                (7, "ListOffsets"),
                (8, "InitProducerId"),
                (9, "DescribeShards"),
                (10, "DescribeCluster"),
                (11, "Authenticate"),
                (12, "DescribeUsers"),
                (13, "AlterUsers"),
                (14, "DescribeAcls"),
                (15, "AlterAcls"),
                (16, "DescribeQuotas"),
                (17, "AlterQuotas"),
                (18, "AlterCluster"),
                (20, "FindCoordinator"),
                (21, "JoinGroup"),
                (22, "Heartbeat"),
                (23, "LeaveGroup"),
                (24, "OffsetCommit"),
                (25, "OffsetFetch"),
                (26, "ListGroups"),
                (27, "DescribeGroups"),
                (28, "DeleteGroups"),
                (29, "ResetOffsets"),
                (30, "WriteAudit"),
                (31, "DeleteOffsets"),
                (40, "ControllerRaft"),
                (41, "BrokerRegister"),
                (42, "BrokerHeartbeat"),
                (43, "MetadataFetch"),
                (44, "ControllerOperation"),
                (45, "ReplicaPush"),
                (46, "ReplicaQuery"),
                (47, "ReplicaStream"),
                (48, "PartitionReport"),
            ]
        );
        for code in 0..=u16::MAX {
            assert_eq!(
                ApiKey::from_code(code).map(ApiKey::code),
                (code <= 18 || (20..=31).contains(&code) || (40..=48).contains(&code))
                    .then_some(code)
            );
        }
        for key in ApiKey::ALL {
            assert!(key.supports(0));
            // DescribeGroups version 1 lists deleted topics' offsets;
            // quotas gained topic, partition and group limits in version 1;
            // DescribeCluster's shows maintenance and moves (version 2:
            // decommissions); PartitionReport's
            // says whether each leader committed its epoch.
            let newest = match key {
                ApiKey::DescribeCluster => 2,
                ApiKey::DescribeGroups
                | ApiKey::DescribeQuotas
                | ApiKey::AlterQuotas
                | ApiKey::PartitionReport => 1,
                _ => 0,
            };
            assert!(key.supports(newest));
            assert!(!key.supports(newest + 1));
            assert_eq!(
                key.supported_versions(),
                VersionRange {
                    min: 0,
                    max: newest
                }
            );
        }
    }

    #[test]
    fn inter_broker_apis_are_exactly_40_to_48() {
        let inter_broker: Vec<u16> = ApiKey::ALL
            .iter()
            .filter(|key| key.is_inter_broker())
            .map(|key| key.code())
            .collect();
        assert_eq!(inter_broker, [40, 41, 42, 43, 44, 45, 46, 47, 48]);
    }

    #[test]
    fn oversized_request_frame_is_refused_from_the_length_field_alone() {
        // Only the four length bytes exist: nothing else was read.
        let too_large = (LIMITS.max_frame_bytes + 1).to_be_bytes();
        let expected = FrameError::TooLarge {
            length: 1025,
            max: 1024,
        };
        assert_eq!(decode_request_frame(&too_large, &LIMITS), Err(expected));
        assert_eq!(decode_response_frame(&too_large, &LIMITS), Err(expected));
        assert_eq!(check_request_length(too_large, &LIMITS), Err(expected));
        let huge = [0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(
            decode_request_header(&huge, &LIMITS),
            Err(FrameError::TooLarge {
                length: u64::from(u32::MAX),
                max: 1024
            })
        );
        // Exactly at the limit is accepted.
        let at_limit = request_header().encode(1024 - 10).unwrap();
        assert_eq!(
            decode_request_header(&at_limit, &LIMITS).unwrap().body_len,
            1014
        );
    }

    #[test]
    fn length_shorter_than_header_is_too_short() {
        let mut bytes = request_header().encode(0).unwrap();
        bytes[0..4].copy_from_slice(&9_u32.to_be_bytes());
        assert_eq!(
            decode_request_header(&bytes, &LIMITS),
            Err(FrameError::TooShort { length: 9, min: 10 })
        );
        assert_eq!(
            decode_request_frame(&bytes[..4], &LIMITS),
            Err(FrameError::TooShort { length: 9, min: 10 })
        );
        let response = [0, 0, 0, 3, 0, 0, 0, 0];
        assert_eq!(
            decode_response_header(&response, &LIMITS),
            Err(FrameError::TooShort { length: 3, min: 4 })
        );
    }

    #[test]
    fn truncated_frame_needs_more_and_complete_decoder_says_truncated() {
        let mut frame = Vec::new();
        encode_request_frame(&request_header(), b"hello", &mut frame).unwrap();
        assert_eq!(frame.len(), 19);
        for cut in 0..frame.len() {
            assert_eq!(
                decode_request_frame(&frame[..cut], &LIMITS),
                Ok(None),
                "cut at {cut}"
            );
            let needed = if cut < REQUEST_HEADER_BYTES {
                REQUEST_HEADER_BYTES
            } else {
                19
            };
            assert_eq!(
                decode_complete_request_frame(&frame[..cut], &LIMITS),
                Err(FrameError::Truncated {
                    needed,
                    available: cut
                })
            );
        }
        let decoded = decode_request_frame(&frame, &LIMITS).unwrap().unwrap();
        assert_eq!(decoded.header, request_header());
        assert_eq!(&frame[decoded.body.clone()], b"hello");
        assert_eq!(decoded.body.end, frame.len());
    }

    #[test]
    fn response_frames_round_trip_and_leave_following_bytes() {
        let mut stream = Vec::new();
        encode_response_frame(&ResponseHeader { correlation_id: 7 }, b"abc", &mut stream).unwrap();
        encode_response_frame(&ResponseHeader { correlation_id: 8 }, b"", &mut stream).unwrap();
        let first = decode_response_frame(&stream, &LIMITS).unwrap().unwrap();
        assert_eq!(first.header.correlation_id, 7);
        assert_eq!(&stream[first.body.clone()], b"abc");
        let rest = &stream[first.body.end..];
        let second = decode_complete_response_frame(rest, &LIMITS).unwrap();
        assert_eq!(second.header.correlation_id, 8);
        assert!(second.body.is_empty());
        assert_eq!(second.body.end, rest.len());
    }

    #[test]
    fn unknown_api_key_is_a_typed_error_carrying_the_correlation_id() {
        let mut bytes = request_header().encode(5).unwrap();
        bytes[4..6].copy_from_slice(&19_u16.to_be_bytes());
        assert_eq!(
            decode_request_header(&bytes, &LIMITS),
            Err(FrameError::UnknownApiKey {
                api_key: 19,
                correlation_id: 0xDEAD_BEEF,
                body_len: 5
            })
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn request_frame_round_trips(
            key in prop::sample::select(ApiKey::ALL),
            api_version: u16,
            correlation_id: u32,
            flags: u16,
            body in prop::collection::vec(any::<u8>(), 0..64),
            trailing in prop::collection::vec(any::<u8>(), 0..16),
        ) {
            let header = RequestHeader { api_key: key, api_version, correlation_id, flags };
            let mut buf = Vec::new();
            encode_request_frame(&header, &body, &mut buf).unwrap();
            let frame_len = buf.len();
            buf.extend_from_slice(&trailing);
            let frame = decode_request_frame(&buf, &LIMITS).unwrap().unwrap();
            prop_assert_eq!(frame.header, header);
            prop_assert_eq!(&buf[frame.body.clone()], &body[..]);
            prop_assert_eq!(frame.body.end, frame_len);
        }

        #[test]
        fn response_frame_round_trips(
            correlation_id: u32,
            body in prop::collection::vec(any::<u8>(), 0..64),
        ) {
            let header = ResponseHeader { correlation_id };
            let mut buf = Vec::new();
            encode_response_frame(&header, &body, &mut buf).unwrap();
            let frame = decode_complete_response_frame(&buf, &LIMITS).unwrap();
            prop_assert_eq!(frame.header, header);
            prop_assert_eq!(&buf[frame.body], &body[..]);
        }

        /// Arbitrary bytes never panic, and whatever is accepted respects the
        /// limit and lies inside the buffer.
        #[test]
        fn arbitrary_bytes_never_panic_and_accepted_frames_fit(
            buf in prop::collection::vec(any::<u8>(), 0..64),
            max_frame_bytes in 0_u32..80,
        ) {
            let limits = FrameLimits { max_frame_bytes };
            if let Ok(Some(frame)) = decode_request_frame(&buf, &limits) {
                prop_assert!(frame.body.end <= buf.len());
                prop_assert!(frame.body.end - LENGTH_FIELD_BYTES <= max_frame_bytes as usize);
            }
            if let Ok(Some(frame)) = decode_response_frame(&buf, &limits) {
                prop_assert!(frame.body.end <= buf.len());
                prop_assert!(frame.body.end - LENGTH_FIELD_BYTES <= max_frame_bytes as usize);
            }
            let _ = decode_complete_request_frame(&buf, &limits);
            let _ = decode_complete_response_frame(&buf, &limits);
            if let Some(header) = buf.first_chunk::<REQUEST_HEADER_BYTES>()
                && let Ok(head) = decode_request_header(header, &limits)
            {
                prop_assert!(head.body_len + 10 <= max_frame_bytes as usize);
            }
            if let Some(header) = buf.first_chunk::<RESPONSE_HEADER_BYTES>()
                && let Ok(head) = decode_response_header(header, &limits)
            {
                prop_assert!(head.body_len + 4 <= max_frame_bytes as usize);
            }
        }

        /// Any length field over the limit is refused with only the length
        /// bytes present, whatever else the header holds.
        #[test]
        fn any_length_over_the_limit_is_refused_early(
            max_frame_bytes: u32,
            excess in 1_u32..=u32::MAX,
            rest in prop::array::uniform10(any::<u8>()),
        ) {
            let limits = FrameLimits { max_frame_bytes };
            let length = max_frame_bytes.saturating_add(excess);
            prop_assume!(length > max_frame_bytes);
            let mut header = [0_u8; REQUEST_HEADER_BYTES];
            header[..4].copy_from_slice(&length.to_be_bytes());
            header[4..].copy_from_slice(&rest);
            let expected = FrameError::TooLarge { length: u64::from(length), max: u64::from(max_frame_bytes) };
            prop_assert_eq!(decode_request_frame(&header[..4], &limits), Err(expected));
            prop_assert_eq!(decode_request_header(&header, &limits), Err(expected));
            prop_assert_eq!(decode_response_frame(&header[..4], &limits), Err(expected));
        }
    }
}
