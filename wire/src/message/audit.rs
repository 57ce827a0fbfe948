//! The audit record: what the broker appends to the `__audit` topic for
//! every privileged offset reset (C6) and every poison-record decision (C8),
//! and what `corelog group audit` reads back with an ordinary Fetch.
//!
//! # Encoding
//!
//! A record value is `version: u8` ([`AUDIT_RECORD_VERSION`]) followed by an
//! rkyv archive of [`AuditRecord`]. rkyv rather than JSON keeps the wire
//! crate free of a JSON dependency and reuses the validated, pinned archive
//! format of the messages; the version byte lets a later format be added
//! while old records stay readable for as long as `__audit` retains them.
//! The decoder copies the value into a 16-aligned buffer (a value sits at
//! any address in its batch), validates the archive, then deserializes it;
//! it never panics on garbage.

use rkyv::{Archive, Deserialize, Serialize};

use super::stored::{self, StoredError};
use super::write_audit::AuditAction;

/// The internal topic audit records are appended to. Clients cannot produce
/// to it (`INTERNAL_TOPIC`); they read it like any other topic.
pub const AUDIT_TOPIC: &str = "__audit";

/// The version byte of the current audit record encoding.
pub const AUDIT_RECORD_VERSION: u8 = 1;

/// What was audited.
#[derive(Archive, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug, PartialEq, Eq))]
pub enum AuditKind {
    /// A privileged ResetOffsets moved the group's offsets.
    OffsetReset,
    /// A consumer skipped a record it could not process.
    Skip,
    /// A consumer copied a record to a dead-letter topic and skipped it.
    Quarantine,
    /// A consumer stopped at a record it could not process.
    Stop,
}

impl From<AuditAction> for AuditKind {
    fn from(action: AuditAction) -> AuditKind {
        match action {
            AuditAction::Skip => AuditKind::Skip,
            AuditAction::Quarantine => AuditKind::Quarantine,
            AuditAction::Stop => AuditKind::Stop,
        }
    }
}

/// One audited change: who did what to which group's position, when and
/// why.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct AuditRecord {
    /// What happened.
    pub kind: AuditKind,
    /// Group id.
    pub group: String,
    /// Topic whose position changed or whose record was skipped.
    pub topic: String,
    /// The one partition concerned; `None` for a change to the whole topic
    /// (a reset of every partition).
    pub partition: Option<u32>,
    /// Who made the change.
    pub principal: String,
    /// Why, as given by the principal.
    pub reason: String,
    /// When the broker recorded the change (ms since the Unix epoch,
    /// coordinator clock).
    pub at_ms: i64,
    /// `(partition, committed next offset)` before the change; `-1` for no
    /// committed offset. Empty for a skip.
    pub before: Vec<(u32, i64)>,
    /// `(partition, committed next offset)` after the change. Empty for a
    /// skip.
    pub after: Vec<(u32, i64)>,
    /// Offset of the skipped, quarantined or stopping record; `None` for a
    /// reset.
    pub offset: Option<u64>,
    /// Dead-letter topic the record was copied to, for a quarantine.
    pub dead_letter_topic: Option<String>,
    /// Offset of the copy in the dead-letter topic.
    pub dead_letter_offset: Option<u64>,
    /// The processing error that led to the decision, if the client gave one
    /// apart from the reason.
    pub error: Option<String>,
}

/// Why an `__audit` record value did not decode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AuditDecodeError {
    /// The value is empty: not an audit record.
    #[error("empty audit record")]
    Empty,
    /// Written by a newer corelog with a format this build does not know.
    #[error("audit record version {version} is unknown; upgrade corelog to read it")]
    UnknownVersion {
        /// The version byte found.
        version: u8,
    },
    /// The archive failed validation: corrupt, or not an audit record.
    #[error("audit record of {len} bytes is not a valid archive")]
    InvalidArchive {
        /// Length of the value given.
        len: usize,
    },
}

impl AuditRecord {
    /// The record value to append to [`AUDIT_TOPIC`].
    ///
    /// # Panics
    /// Only if the archive would exceed 2 GiB (rkyv's 32-bit relative
    /// pointers): its fields come from frame-bounded requests, so that would
    /// be a bug.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        stored::encode(AUDIT_RECORD_VERSION, self)
    }

    /// Decodes a record value read from [`AUDIT_TOPIC`]. Validates before it
    /// reads; never panics.
    ///
    /// # Errors
    /// [`AuditDecodeError::Empty`] for an empty value,
    /// [`AuditDecodeError::UnknownVersion`] for a format this build does not
    /// know, [`AuditDecodeError::InvalidArchive`] for anything else that is
    /// not a valid record.
    pub fn decode(bytes: &[u8]) -> Result<AuditRecord, AuditDecodeError> {
        stored::decode(AUDIT_RECORD_VERSION, bytes).map_err(|error| match error {
            StoredError::Empty => AuditDecodeError::Empty,
            StoredError::UnknownVersion(version) => AuditDecodeError::UnknownVersion { version },
            StoredError::InvalidArchive => AuditDecodeError::InvalidArchive { len: bytes.len() },
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use proptest::prelude::*;
    use proptest::sample::Index;

    use super::*;
    use crate::message::stored::{hex, hostile_inputs};
    use crate::message::test_support::{few, name, optional_name};

    pub(crate) fn record() -> impl Strategy<Value = AuditRecord> {
        let kind = prop_oneof![
            Just(AuditKind::OffsetReset),
            Just(AuditKind::Skip),
            Just(AuditKind::Quarantine),
            Just(AuditKind::Stop),
        ];
        let positions = || few((any::<u32>(), any::<i64>()));
        (
            (kind, name(), name(), prop::option::of(any::<u32>())),
            (name(), name(), any::<i64>(), positions(), positions()),
            (
                prop::option::of(any::<u64>()),
                optional_name(),
                prop::option::of(any::<u64>()),
                optional_name(),
            ),
        )
            .prop_map(
                |(
                    (kind, group, topic, partition),
                    (principal, reason, at_ms, before, after),
                    (offset, dead_letter_topic, dead_letter_offset, error),
                )| AuditRecord {
                    kind,
                    group,
                    topic,
                    partition,
                    principal,
                    reason,
                    at_ms,
                    before,
                    after,
                    offset,
                    dead_letter_topic,
                    dead_letter_offset,
                    error,
                },
            )
    }

    fn reset() -> AuditRecord {
        AuditRecord {
            kind: AuditKind::OffsetReset,
            group: "billing".to_owned(),
            topic: "orders".to_owned(),
            partition: None,
            principal: "ana".to_owned(),
            reason: "replay after fix".to_owned(),
            at_ms: 1_700_000_000_000,
            before: vec![(0, 42), (1, -1)],
            after: vec![(0, 0), (1, 0)],
            offset: None,
            dead_letter_topic: None,
            dead_letter_offset: None,
            error: None,
        }
    }

    /// Audit records stay in `__audit` for as long as it retains them: a
    /// change to these bytes makes every stored record unreadable, so it
    /// needs a new version byte instead.
    #[test]
    fn version_one_encoding_is_pinned() {
        const PINNED: &str = concat!(
            "017265706c61792061667465722066697800000000000000002a000000000000",
            "000100000000000000ffffffffffffffff000000000000000000000000000000",
            "00010000000000000000000000000000000000000062696c6c696e67ff6f7264",
            "657273ffff0000000000000000616e61ffffffffff900000008cffffff000000",
            "000068e5cf8b01000088ffffff02000000a0ffffff0200000000000000000000",
            "0000000000000000000000000000000000000000000000000000000000000000",
            "00000000000000000000000000000000000000000000000000",
        );
        let bytes = reset().encode();
        assert_eq!(hex(&bytes), PINNED);
        assert_eq!(AuditRecord::decode(&bytes), Ok(reset()));
    }

    #[test]
    fn empty_unknown_version_and_garbage_are_refused() {
        assert_eq!(AuditRecord::decode(&[]), Err(AuditDecodeError::Empty));
        let mut bytes = reset().encode();
        bytes[0] = 2;
        assert_eq!(
            AuditRecord::decode(&bytes),
            Err(AuditDecodeError::UnknownVersion { version: 2 })
        );
        assert_eq!(
            AuditRecord::decode(&[AUDIT_RECORD_VERSION, 0xFF, 0xFF]),
            Err(AuditDecodeError::InvalidArchive { len: 3 })
        );
    }

    #[test]
    fn actions_map_to_their_kinds() {
        assert_eq!(AuditKind::from(AuditAction::Skip), AuditKind::Skip);
        assert_eq!(
            AuditKind::from(AuditAction::Quarantine),
            AuditKind::Quarantine
        );
        assert_eq!(AuditKind::from(AuditAction::Stop), AuditKind::Stop);
    }

    proptest! {
        #[test]
        fn record_round_trips(record in record()) {
            let bytes = record.encode();
            prop_assert_eq!(bytes[0], AUDIT_RECORD_VERSION);
            prop_assert_eq!(AuditRecord::decode(&bytes), Ok(record));
        }

        #[test]
        fn arbitrary_bytes_never_panic(
            record in record(),
            noise in prop::collection::vec(any::<u8>(), 0..256),
            flips in prop::collection::vec((any::<Index>(), any::<u8>()), 1..4),
            cut in any::<Index>(),
        ) {
            let valid = record.encode();
            for input in hostile_inputs(AUDIT_RECORD_VERSION, &valid, &noise, &flips, cut) {
                if let Ok(decoded) = AuditRecord::decode(&input) {
                    // Whatever decodes encodes and decodes to itself.
                    prop_assert_eq!(AuditRecord::decode(&decoded.encode()), Ok(decoded));
                }
            }
        }
    }
}
