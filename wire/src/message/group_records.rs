//! The records the group coordinator keeps in the `__groups` topic: committed
//! offsets and memberships. A coordinator rebuilds a group's state by
//! replaying its `__groups` partition (DESIGN §8), so this is the durable
//! format of C6, defined here in one pure, fuzzable place.
//!
//! # Encoding
//!
//! A record value is `version: u8` ([`GROUP_RECORD_VERSION`]) followed by an
//! rkyv archive of [`GroupRecord`], as for [audit records](super::audit).
//! Decoding validates the archive and never panics on garbage.
//!
//! Version 2 (issue 35, item 17) gives offsets and their tombstones the id
//! of the topic they were committed on, so that a topic deleted and
//! created again under its name does not inherit its predecessor's
//! offsets. Version 1 records (no topic id) are still read, as records
//! whose `topic_id` is `None`: the coordinator decides which topic they
//! belong to (see `broker/src/group/state.rs`). Only version 2 is written.
//!
//! # Keys
//!
//! Each record also has a compaction key ([`GroupRecord::key`]): the latest
//! record of a key is the current state, so compaction may drop older ones.
//! Strings are length-prefixed, so two different records can never share a
//! key whatever bytes the names contain (a separator byte would need names
//! to exclude it). Integers are big-endian. The layouts are frozen:
//!
//! ```text
//! offset key:       b'o' · group_len: u32 · group · topic_len: u32 · topic · partition: u32
//! topic offset key: b'i' · group_len: u32 · group · topic_len: u32 · topic · topic_id: u64 · partition: u32
//! membership key:   b'm' · group_len: u32 · group
//! ```
//!
//! An offset without a topic id (read from version 1) keeps the offset key
//! it was written under; one with a topic id has the topic offset key, so
//! that two topics of one name never share a key.
//!
//! An [`OffsetTombstone`](GroupRecord::OffsetTombstone) shares its offset's
//! key, and a [`GroupDeleted`](GroupRecord::GroupDeleted) marker shares the
//! membership key, so each replaces what it deletes.

use rkyv::{Archive, Deserialize, Serialize};

use super::common::TopicPartitions;
use super::stored::{self, StoredError};

/// The internal topic group records are appended to. Group `g` lives in
/// partition `xxh3_64(g) % N`, whose leader is `g`'s coordinator.
pub const GROUPS_TOPIC: &str = "__groups";

/// The version byte of the current group record encoding.
pub const GROUP_RECORD_VERSION: u8 = 2;

/// The version byte of the first encoding, whose offsets carry no topic
/// id: still read, never written.
pub const GROUP_RECORD_VERSION_1: u8 = 1;

/// Tag byte that starts an offset key.
const OFFSET_KEY_TAG: u8 = b'o';

/// Tag byte that starts the key of an offset with a topic id.
const TOPIC_OFFSET_KEY_TAG: u8 = b'i';

/// Tag byte that starts a membership key.
const MEMBERSHIP_KEY_TAG: u8 = b'm';

/// One member as the coordinator stores it: enough to restore the group and
/// its assignment after a coordinator failover without a rebalance.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct StoredMember {
    /// Member id given by the coordinator.
    pub member_id: String,
    /// Static membership id; `None` for a dynamic member.
    pub instance_id: Option<String>,
    /// Client software id from JoinGroup.
    pub client_id: String,
    /// Address the member connected from.
    pub client_host: String,
    /// Topics the member subscribes to.
    pub topics: Vec<String>,
    /// The member's session timeout.
    pub session_timeout_ms: u32,
    /// The member's rebalance timeout.
    pub rebalance_timeout_ms: u32,
    /// Partitions the member consumes in this generation.
    pub assignment: Vec<TopicPartitions>,
}

/// One record of the `__groups` topic.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub enum GroupRecord {
    /// A committed offset (OffsetCommit or ResetOffsets).
    Offset {
        /// Group id.
        group: String,
        /// Topic name.
        topic: String,
        /// The id of the topic it was committed on; `None` for a version 1
        /// record.
        topic_id: Option<u64>,
        /// Partition index.
        partition: u32,
        /// The offset of the next record to consume.
        next_offset: u64,
        /// Application data stored with the offset.
        metadata: Option<String>,
        /// When the offset was committed (ms since the Unix epoch,
        /// coordinator clock).
        committed_at_ms: i64,
        /// The generation that committed it; `-1` for a commit outside a
        /// generation or a reset.
        generation: i32,
    },
    /// The committed offset of one partition is gone (deleted with
    /// `group delete-offsets`).
    OffsetTombstone {
        /// Group id.
        group: String,
        /// Topic name.
        topic: String,
        /// The id of the topic whose offset is gone; `None` for a version 1
        /// record or an offset that had none.
        topic_id: Option<u64>,
        /// Partition index.
        partition: u32,
    },
    /// The group's membership after a change; each change bumps the
    /// generation.
    Membership {
        /// Group id.
        group: String,
        /// The new generation.
        generation: i32,
        /// The members of this generation.
        members: Vec<StoredMember>,
    },
    /// The group was deleted. Its offsets are deleted by their own
    /// tombstones; topic data is never touched (C6).
    GroupDeleted {
        /// Group id.
        group: String,
    },
}

/// The version 1 encoding of [`GroupRecord`], frozen: offsets without a
/// topic id. Only decoded.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
enum GroupRecordV1 {
    Offset {
        group: String,
        topic: String,
        partition: u32,
        next_offset: u64,
        metadata: Option<String>,
        committed_at_ms: i64,
        generation: i32,
    },
    OffsetTombstone {
        group: String,
        topic: String,
        partition: u32,
    },
    Membership {
        group: String,
        generation: i32,
        members: Vec<StoredMember>,
    },
    GroupDeleted {
        group: String,
    },
}

impl From<GroupRecordV1> for GroupRecord {
    fn from(record: GroupRecordV1) -> GroupRecord {
        match record {
            GroupRecordV1::Offset {
                group,
                topic,
                partition,
                next_offset,
                metadata,
                committed_at_ms,
                generation,
            } => GroupRecord::Offset {
                group,
                topic,
                topic_id: None,
                partition,
                next_offset,
                metadata,
                committed_at_ms,
                generation,
            },
            GroupRecordV1::OffsetTombstone {
                group,
                topic,
                partition,
            } => GroupRecord::OffsetTombstone {
                group,
                topic,
                topic_id: None,
                partition,
            },
            GroupRecordV1::Membership {
                group,
                generation,
                members,
            } => GroupRecord::Membership {
                group,
                generation,
                members,
            },
            GroupRecordV1::GroupDeleted { group } => GroupRecord::GroupDeleted { group },
        }
    }
}

/// Why a `__groups` record value did not decode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GroupRecordError {
    /// The value is empty: not a group record.
    #[error("empty group record")]
    Empty,
    /// Written by a newer corelog with a format this build does not know.
    #[error("group record version {version} is unknown; upgrade corelog to read it")]
    UnknownVersion {
        /// The version byte found.
        version: u8,
    },
    /// The archive failed validation: corrupt, or not a group record.
    #[error("group record of {len} bytes is not a valid archive")]
    InvalidArchive {
        /// Length of the value given.
        len: usize,
    },
}

/// Appends a name to a key, length first.
fn push_name(key: &mut Vec<u8>, name: &str) {
    // Names arrive in frames and batches, whose lengths are u32.
    let len = u32::try_from(name.len()).expect("a name is shorter than 4 GiB");
    key.extend_from_slice(&len.to_be_bytes());
    key.extend_from_slice(name.as_bytes());
}

/// The compaction key of a group's committed offset for one partition (see
/// the [module docs](self) for the layout).
#[must_use]
pub fn offset_key(group: &str, topic: &str, partition: u32) -> Vec<u8> {
    let mut key = Vec::with_capacity(1 + 4 + group.len() + 4 + topic.len() + 4);
    key.push(OFFSET_KEY_TAG);
    push_name(&mut key, group);
    push_name(&mut key, topic);
    key.extend_from_slice(&partition.to_be_bytes());
    key
}

/// The compaction key of a group's committed offset for one partition of
/// the topic with id `topic_id` (see the [module docs](self)).
#[must_use]
pub fn topic_offset_key(group: &str, topic: &str, topic_id: u64, partition: u32) -> Vec<u8> {
    let mut key = Vec::with_capacity(1 + 4 + group.len() + 4 + topic.len() + 8 + 4);
    key.push(TOPIC_OFFSET_KEY_TAG);
    push_name(&mut key, group);
    push_name(&mut key, topic);
    key.extend_from_slice(&topic_id.to_be_bytes());
    key.extend_from_slice(&partition.to_be_bytes());
    key
}

/// The compaction key of a group's membership and of its deletion marker.
#[must_use]
pub fn membership_key(group: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(1 + 4 + group.len());
    key.push(MEMBERSHIP_KEY_TAG);
    push_name(&mut key, group);
    key
}

impl GroupRecord {
    /// The group this record belongs to: it lives in that group's
    /// `__groups` partition.
    #[must_use]
    pub fn group(&self) -> &str {
        match self {
            GroupRecord::Offset { group, .. }
            | GroupRecord::OffsetTombstone { group, .. }
            | GroupRecord::Membership { group, .. }
            | GroupRecord::GroupDeleted { group } => group,
        }
    }

    /// The record's compaction key: [`topic_offset_key`] for offsets and
    /// their tombstones ([`offset_key`] for those without a topic id),
    /// [`membership_key`] for memberships and deletion markers.
    #[must_use]
    pub fn key(&self) -> Vec<u8> {
        match self {
            GroupRecord::Offset {
                group,
                topic,
                topic_id,
                partition,
                ..
            }
            | GroupRecord::OffsetTombstone {
                group,
                topic,
                topic_id,
                partition,
            } => match topic_id {
                Some(topic_id) => topic_offset_key(group, topic, *topic_id, *partition),
                None => offset_key(group, topic, *partition),
            },
            GroupRecord::Membership { group, .. } | GroupRecord::GroupDeleted { group } => {
                membership_key(group)
            }
        }
    }

    /// The record value to append to [`GROUPS_TOPIC`].
    ///
    /// # Panics
    /// Only if the archive would exceed 2 GiB (rkyv's 32-bit relative
    /// pointers): its fields come from frame-bounded requests, so that would
    /// be a bug.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        stored::encode(GROUP_RECORD_VERSION, self)
    }

    /// Decodes a record value read from [`GROUPS_TOPIC`]. Validates before
    /// it reads; never panics.
    ///
    /// # Errors
    /// [`GroupRecordError::Empty`] for an empty value,
    /// [`GroupRecordError::UnknownVersion`] for a format this build does not
    /// know, [`GroupRecordError::InvalidArchive`] for anything else that is
    /// not a valid record.
    pub fn decode(bytes: &[u8]) -> Result<GroupRecord, GroupRecordError> {
        let decoded = match bytes.first() {
            Some(&GROUP_RECORD_VERSION_1) => {
                stored::decode::<GroupRecordV1>(GROUP_RECORD_VERSION_1, bytes).map(Into::into)
            }
            _ => stored::decode(GROUP_RECORD_VERSION, bytes),
        };
        decoded.map_err(|error| match error {
            StoredError::Empty => GroupRecordError::Empty,
            StoredError::UnknownVersion(version) => GroupRecordError::UnknownVersion { version },
            StoredError::InvalidArchive => GroupRecordError::InvalidArchive { len: bytes.len() },
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use proptest::prelude::*;
    use proptest::sample::Index;

    use super::*;
    use crate::message::stored::{hex, hostile_inputs};
    use crate::message::test_support::{few, name, optional_name, topic_partitions};

    fn member() -> impl Strategy<Value = StoredMember> {
        (
            (name(), optional_name(), name(), name()),
            (
                few(name()),
                any::<u32>(),
                any::<u32>(),
                few(topic_partitions()),
            ),
        )
            .prop_map(
                |(
                    (member_id, instance_id, client_id, client_host),
                    (topics, session_timeout_ms, rebalance_timeout_ms, assignment),
                )| StoredMember {
                    member_id,
                    instance_id,
                    client_id,
                    client_host,
                    topics,
                    session_timeout_ms,
                    rebalance_timeout_ms,
                    assignment,
                },
            )
    }

    pub(crate) fn record() -> impl Strategy<Value = GroupRecord> {
        prop_oneof![
            (
                (
                    name(),
                    name(),
                    any::<Option<u64>>(),
                    any::<u32>(),
                    any::<u64>()
                ),
                (optional_name(), any::<i64>(), any::<i32>()),
            )
                .prop_map(
                    |(
                        (group, topic, topic_id, partition, next_offset),
                        (metadata, committed_at_ms, generation),
                    )| GroupRecord::Offset {
                        group,
                        topic,
                        topic_id,
                        partition,
                        next_offset,
                        metadata,
                        committed_at_ms,
                        generation,
                    }
                ),
            (name(), name(), any::<Option<u64>>(), any::<u32>()).prop_map(
                |(group, topic, topic_id, partition)| GroupRecord::OffsetTombstone {
                    group,
                    topic,
                    topic_id,
                    partition,
                }
            ),
            (name(), any::<i32>(), few(member())).prop_map(|(group, generation, members)| {
                GroupRecord::Membership {
                    group,
                    generation,
                    members,
                }
            }),
            name().prop_map(|group| GroupRecord::GroupDeleted { group }),
        ]
    }

    fn offset() -> GroupRecord {
        GroupRecord::Offset {
            group: "billing".to_owned(),
            topic: "orders".to_owned(),
            topic_id: Some(5),
            partition: 3,
            next_offset: 42,
            metadata: None,
            committed_at_ms: 1_700_000_000_000,
            generation: 7,
        }
    }

    /// A version 1 offset, as older brokers wrote it: read as one
    /// without a topic id, under its old key.
    fn offset_without_topic_id() -> GroupRecord {
        match offset() {
            GroupRecord::Offset {
                group,
                topic,
                partition,
                next_offset,
                metadata,
                committed_at_ms,
                generation,
                ..
            } => GroupRecord::Offset {
                group,
                topic,
                topic_id: None,
                partition,
                next_offset,
                metadata,
                committed_at_ms,
                generation,
            },
            other => other,
        }
    }

    /// `__groups` records are replayed on every coordinator start: a change
    /// to these bytes or keys makes stored state unreadable or uncompactable,
    /// so it needs a new version byte instead. Version 1 records (written
    /// before offsets carried topic ids) stay readable.
    #[test]
    fn version_one_records_and_keys_stay_readable() {
        const PINNED_V1: &str = concat!(
            "010000000062696c6c696e67ff6f7264657273ffff030000002a000000000000",
            "00000000000000000000000000000000000068e5cf8b01000007000000000000",
            "00",
        );
        let bytes: Vec<u8> = (0..PINNED_V1.len())
            .step_by(2)
            .map(|at| u8::from_str_radix(&PINNED_V1[at..at + 2], 16).unwrap())
            .collect();
        assert_eq!(GroupRecord::decode(&bytes), Ok(offset_without_topic_id()));
        assert_eq!(
            offset_without_topic_id().key(),
            b"o\0\0\0\x07billing\0\0\0\x06orders\0\0\0\x03".to_vec()
        );
        // Written again (a compaction), it is a version 2 record.
        let rewritten = offset_without_topic_id().encode();
        assert_eq!(rewritten[0], GROUP_RECORD_VERSION);
        assert_eq!(
            GroupRecord::decode(&rewritten),
            Ok(offset_without_topic_id())
        );
    }

    #[test]
    fn version_two_encoding_and_keys_are_pinned() {
        const PINNED: &str = concat!(
            "020000000062696c6c696e67ff6f7264657273ffff0000000001000000000000",
            "00050000000000000003000000000000002a0000000000000000000000000000",
            "0000000000000000000068e5cf8b0100000700000000000000",
        );
        let bytes = offset().encode();
        assert_eq!(hex(&bytes), PINNED);
        assert_eq!(GroupRecord::decode(&bytes), Ok(offset()));
        assert_eq!(
            offset().key(),
            b"i\0\0\0\x07billing\0\0\0\x06orders\0\0\0\0\0\0\0\x05\0\0\0\x03".to_vec()
        );
        assert_ne!(offset().key(), offset_without_topic_id().key());
        let deleted = GroupRecord::GroupDeleted {
            group: "billing".to_owned(),
        };
        assert_eq!(deleted.key(), b"m\0\0\0\x07billing".to_vec());
    }

    #[test]
    fn deletions_share_the_key_of_what_they_delete() {
        let tombstone = GroupRecord::OffsetTombstone {
            group: "billing".to_owned(),
            topic: "orders".to_owned(),
            topic_id: Some(5),
            partition: 3,
        };
        assert_eq!(tombstone.key(), offset().key());
        let membership = GroupRecord::Membership {
            group: "billing".to_owned(),
            generation: 1,
            members: Vec::new(),
        };
        let deleted = GroupRecord::GroupDeleted {
            group: "billing".to_owned(),
        };
        assert_eq!(membership.key(), deleted.key());
        assert_ne!(membership.key(), offset().key());
        assert_eq!(deleted.group(), "billing");
    }

    #[test]
    fn empty_unknown_version_and_garbage_are_refused() {
        assert_eq!(GroupRecord::decode(&[]), Err(GroupRecordError::Empty));
        let mut bytes = offset().encode();
        bytes[0] = 0;
        assert_eq!(
            GroupRecord::decode(&bytes),
            Err(GroupRecordError::UnknownVersion { version: 0 })
        );
        assert_eq!(
            GroupRecord::decode(&[GROUP_RECORD_VERSION]),
            Err(GroupRecordError::InvalidArchive { len: 1 })
        );
    }

    proptest! {
        #[test]
        fn record_round_trips(record in record()) {
            let bytes = record.encode();
            prop_assert_eq!(bytes[0], GROUP_RECORD_VERSION);
            prop_assert_eq!(GroupRecord::decode(&bytes), Ok(record));
        }

        /// Names with separators or shared prefixes never collide: the key
        /// is equal exactly when (group, topic, partition) is.
        #[test]
        fn offset_keys_are_equal_exactly_when_their_fields_are(
            a in ("[a\\x00o]{0,3}", "[a\\x00o]{0,3}", 0_u32..2),
            b in ("[a\\x00o]{0,3}", "[a\\x00o]{0,3}", 0_u32..2),
        ) {
            prop_assert_eq!(
                offset_key(&a.0, &a.1, a.2) == offset_key(&b.0, &b.1, b.2),
                a == b
            );
            prop_assert_ne!(offset_key(&a.0, &a.1, a.2), membership_key(&b.0));
            prop_assert_eq!(membership_key(&a.0) == membership_key(&b.0), a.0 == b.0);
            let (a_id, b_id) = (u64::from(a.2) * 7, u64::from(b.2) * 7);
            prop_assert_eq!(
                topic_offset_key(&a.0, &a.1, a_id, a.2) == topic_offset_key(&b.0, &b.1, b_id, b.2),
                a == b
            );
            prop_assert_ne!(topic_offset_key(&a.0, &a.1, a_id, a.2), offset_key(&b.0, &b.1, b.2));
            prop_assert_ne!(topic_offset_key(&a.0, &a.1, a_id, a.2), membership_key(&b.0));
        }

        /// Two topics of one name (one deleted, one created again) never
        /// share an offset key.
        #[test]
        fn topics_of_one_name_have_their_own_offset_keys(
            group in "[a\\x00o]{0,3}", topic in "[a\\x00o]{0,3}", ids in (0_u64..4, 0_u64..4)
        ) {
            prop_assert_eq!(
                topic_offset_key(&group, &topic, ids.0, 0) == topic_offset_key(&group, &topic, ids.1, 0),
                ids.0 == ids.1
            );
        }

        #[test]
        fn arbitrary_bytes_never_panic(
            record in record(),
            noise in prop::collection::vec(any::<u8>(), 0..256),
            flips in prop::collection::vec((any::<Index>(), any::<u8>()), 1..4),
            cut in any::<Index>(),
        ) {
            let valid = record.encode();
            let versions = [GROUP_RECORD_VERSION, GROUP_RECORD_VERSION_1];
            for input in versions
                .into_iter()
                .flat_map(|version| hostile_inputs(version, &valid, &noise, &flips, cut))
            {
                if let Ok(decoded) = GroupRecord::decode(&input) {
                    let _ = decoded.key();
                    prop_assert_eq!(GroupRecord::decode(&decoded.encode()), Ok(decoded));
                }
            }
        }
    }
}
