//! The envelope of the records the broker stores in its internal topics
//! (`__audit`, `__groups`): one version byte, then an rkyv archive.
//!
//! ```text
//! stored record: version: u8 · archive
//! ```
//!
//! Unlike message bodies these bytes live on disk for as long as the topic
//! retains them, so the version byte comes first: a later format gets a new
//! number and a new archived type, and a reader keeps decoding the old one.
//! The archive uses the same pinned rkyv format as the messages (see the
//! [module docs](crate::message)). A record value sits at any address inside
//! its batch, so the decoder copies the archive into a 16-aligned buffer
//! before validating it; records are small, and the copy is as large as the
//! value, which the batch limits already bounded.

use rkyv::api::high::{HighDeserializer, HighSerializer, HighValidator};
use rkyv::bytecheck::CheckBytes;
use rkyv::rancor;
use rkyv::ser::allocator::ArenaHandle;
use rkyv::util::AlignedVec;
use rkyv::{Archive, Deserialize, Serialize};

/// Why a stored record did not decode; each record type maps it to its own
/// public error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StoredError {
    /// No bytes at all: not even a version.
    Empty,
    /// A version this build does not know.
    UnknownVersion(u8),
    /// The archive failed validation.
    InvalidArchive,
}

/// `version` followed by `value`'s archive.
///
/// # Panics
/// If rkyv cannot archive `value`, which happens only past its 32-bit
/// relative pointers (an archive over 2 GiB): stored records are built from
/// frame- and batch-bounded input, so that would be a bug.
pub(crate) fn encode<T>(version: u8, value: &T) -> Vec<u8>
where
    T: for<'a> Serialize<HighSerializer<AlignedVec, ArenaHandle<'a>, rancor::Error>>,
{
    let archive = rkyv::to_bytes::<rancor::Error>(value)
        .expect("a stored record is far below rkyv's 2 GiB pointer range");
    let mut bytes = Vec::with_capacity(1 + archive.len());
    bytes.push(version);
    bytes.extend_from_slice(&archive);
    bytes
}

/// Checks the version byte, validates the archive after it and
/// deserializes it. Never panics; allocates the aligned copy and what the
/// validated archive holds, both bounded by `bytes.len()`.
pub(crate) fn decode<T>(version: u8, bytes: &[u8]) -> Result<T, StoredError>
where
    T: Archive,
    T::Archived: for<'a> CheckBytes<HighValidator<'a, rancor::Error>>
        + Deserialize<T, HighDeserializer<rancor::Error>>,
{
    let (&found, archive) = bytes.split_first().ok_or(StoredError::Empty)?;
    if found != version {
        return Err(StoredError::UnknownVersion(found));
    }
    let mut aligned = AlignedVec::<16>::with_capacity(archive.len());
    aligned.extend_from_slice(archive);
    rkyv::from_bytes::<T, rancor::Error>(&aligned).map_err(|_| StoredError::InvalidArchive)
}

/// Lowercase hex of `bytes`, for the tests that pin stored formats.
#[cfg(test)]
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// Hostile inputs for a stored-record decoder, derived from a valid
/// encoding: the noise alone, the noise behind the right version byte, the
/// encoding with bytes overwritten, and the encoding cut short. The test is
/// that none of this panics; `decode` must also walk what it accepts.
#[cfg(test)]
pub(crate) fn hostile_inputs(
    version: u8,
    valid: &[u8],
    noise: &[u8],
    flips: &[(proptest::sample::Index, u8)],
    cut: proptest::sample::Index,
) -> Vec<Vec<u8>> {
    let mut behind_version = vec![version];
    behind_version.extend_from_slice(noise);
    let mut flipped = valid.to_vec();
    let archive_len = flipped.len().saturating_sub(1);
    if archive_len > 0 {
        for (index, value) in flips {
            // Keep the version byte so that the archive is what is tested.
            flipped[1 + index.index(archive_len)] = *value;
        }
    }
    vec![
        noise.to_vec(),
        behind_version,
        flipped,
        valid[..cut.index(valid.len() + 1)].to_vec(),
    ]
}
