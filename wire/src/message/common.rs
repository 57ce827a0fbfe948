//! Message parts shared by several APIs.

use rkyv::{Archive, Deserialize, Serialize};

/// One topic configuration setting, as text (parsed and checked by the
/// broker).
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct ConfigEntry {
    /// Setting name, for example `retention.ms`.
    pub key: String,
    /// Setting value.
    pub value: String,
}

/// The outcome of an administrative operation on one topic.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct TopicResult {
    /// Topic name, as in the request.
    pub name: String,
    /// `NONE` (0) on success, else an [`ErrorCode`](crate::error::ErrorCode)
    /// number.
    pub error_code: u16,
    /// Detail for people, beyond the error code's own message.
    pub message: Option<String>,
}

/// Some partitions of one topic: a member's assignment, what it owns now, or
/// which committed offsets to read. Used by several group APIs and by the
/// group records the broker stores.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct TopicPartitions {
    /// Topic name.
    pub topic: String,
    /// Partition indexes.
    pub partitions: Vec<u32>,
}
