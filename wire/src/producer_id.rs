//! Idempotent producer ids bound to the principal that was given them.
//!
//! A producer id identifies a producer's appends across every partition
//! (C5): whoever appends under it continues its sequences, and whoever
//! re-initialises it bumps its epoch and fences the producer holding it.
//! Ids come from controller-allocated blocks and are sequential, so
//! without a binding any principal could fence or interleave another's
//! producer. Each id therefore carries a tag: a keyed hash (HMAC-SHA256,
//! truncated) of the principal it was given to and its sequential part.
//!
//! ```text
//! producer id (i64, never negative) = tag (23 bits) << 40 | counter (40 bits)
//! tag = HMAC-SHA256(key, "corelog producer id" · principal · counter)[..23 bits]
//! principal = 0x00 (no login) | 0x01 · name
//! ```
//!
//! A broker checks the tag against the principal of the connection that
//! uses the id, on InitProducerId and on every produce (an id without a
//! tag, given before ids were bound, counts as given to connections
//! without a login); no state is kept
//! or shared, so every broker of a cluster that holds the key (derived
//! from the cluster secret) checks every id, after restarts too. The
//! counter stays unique (controller blocks); the tag cannot be computed
//! without the key, and another principal's tag for the same counter
//! matches by chance once in 2^23.

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// Bits of a producer id holding its sequential part.
pub const COUNTER_BITS: u32 = 40;

/// The largest sequential part: about 10^12 producer initialisations per
/// cluster.
pub const COUNTER_MAX: i64 = (1 << COUNTER_BITS) - 1;

/// Bits of the tag, above the counter (the sign bit stays clear).
const TAG_BITS: u32 = 63 - COUNTER_BITS;

/// The key of the tags; the same on every broker of a cluster.
#[derive(Clone)]
pub struct ProducerIdKey([u8; 32]);

impl std::fmt::Debug for ProducerIdKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ProducerIdKey(..)")
    }
}

/// Why a producer id cannot be given.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProducerIdError {
    /// The counter is past [`COUNTER_MAX`] (or negative).
    #[error(
        "producer id counter {0} is outside 0..={COUNTER_MAX}: the cluster's producer ids are used up"
    )]
    Exhausted(i64),
}

impl ProducerIdKey {
    /// A key from 32 secret bytes.
    #[must_use]
    pub fn new(bytes: [u8; 32]) -> ProducerIdKey {
        ProducerIdKey(bytes)
    }

    /// The id of sequential part `counter` for `principal` (`None`: a
    /// connection without a login).
    ///
    /// # Errors
    /// [`ProducerIdError::Exhausted`] past [`COUNTER_MAX`].
    pub fn bind(&self, principal: Option<&str>, counter: i64) -> Result<i64, ProducerIdError> {
        if !(0..=COUNTER_MAX).contains(&counter) {
            return Err(ProducerIdError::Exhausted(counter));
        }
        Ok(self.tag(principal, counter) << COUNTER_BITS | counter)
    }

    /// Whether `producer_id` was given to `principal`. An id without a
    /// tag (one given before ids were bound, a bare counter) counts as
    /// given to connections without a login: a cluster without logins
    /// keeps its producers (and their idempotent retries) across the
    /// upgrade, and a login takes a new id once.
    #[must_use]
    pub fn owns(&self, principal: Option<&str>, producer_id: i64) -> bool {
        if producer_id < 0 {
            return false;
        }
        let tag = producer_id >> COUNTER_BITS;
        tag == self.tag(principal, producer_id & COUNTER_MAX) || (principal.is_none() && tag == 0)
    }

    fn tag(&self, principal: Option<&str>, counter: i64) -> i64 {
        // HMAC takes a key of any length; this cannot fail.
        let mut mac = match Hmac::<Sha256>::new_from_slice(&self.0) {
            Ok(mac) => mac,
            Err(_) => unreachable!("HMAC accepts keys of every length"),
        };
        mac.update(b"corelog producer id");
        match principal {
            None => mac.update(&[0]),
            Some(name) => {
                mac.update(&[1]);
                mac.update(name.as_bytes());
            }
        }
        mac.update(&counter.to_be_bytes());
        let digest = mac.finalize().into_bytes();
        let mut first = [0u8; 8];
        first.copy_from_slice(&digest[..8]);
        (u64::from_be_bytes(first) >> (64 - TAG_BITS)) as i64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(byte: u8) -> ProducerIdKey {
        ProducerIdKey::new([byte; 32])
    }

    #[test]
    fn an_id_belongs_to_its_principal_only() {
        let key = key(7);
        for counter in [0, 1, 2, 1_000, COUNTER_MAX] {
            let alice = key.bind(Some("alice"), counter).unwrap();
            assert!(alice >= 0);
            assert_eq!(alice & COUNTER_MAX, counter);
            assert!(key.owns(Some("alice"), alice));
            assert!(!key.owns(Some("bob"), alice), "{counter}");
            assert!(!key.owns(None, alice), "{counter}");
            let anonymous = key.bind(None, counter).unwrap();
            assert!(key.owns(None, anonymous));
            assert!(
                !key.owns(Some(""), anonymous),
                "no login is not an empty name"
            );
        }
        // Ids handed out before the binding (the bare counter) belong to
        // connections without a login; a negative id to nobody.
        let legacy = 3;
        assert!(key.owns(None, legacy));
        assert!(!key.owns(Some("alice"), legacy) || key.bind(Some("alice"), 3) == Ok(3));
        assert!(!key.owns(Some("alice"), -1));
        assert!(!key.owns(None, -1));
    }

    #[test]
    fn the_key_decides_and_counters_are_bounded() {
        let id = key(1).bind(Some("alice"), 42).unwrap();
        assert!(!key(2).owns(Some("alice"), id));
        assert_eq!(
            key(1).bind(Some("alice"), COUNTER_MAX + 1),
            Err(ProducerIdError::Exhausted(COUNTER_MAX + 1))
        );
        assert!(key(1).bind(Some("alice"), -1).is_err());
        assert!(format!("{:?}", key(1)).ends_with("(..)"));
    }
}
