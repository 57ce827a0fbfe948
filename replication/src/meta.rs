//! The durable per-replica metadata: the promise (fence) and the epoch
//! history, persisted by the shell whenever [`crate::Action::Persist`]
//! says so.

use corelog_wire::types::LeaderEpoch;

use crate::codec::{Reader, Writer};
use crate::error::DecodeError;
use crate::history::{ENTRY_BYTES, EpochHistory};

/// What a replica must remember across restarts.
///
/// Durability contract: the shell writes the whole value atomically (write a
/// temporary file, fsync, rename, fsync the directory) and the write is
/// durable before the shell acts on any later action of the same call, in
/// particular before it sends a query answer or a push acknowledgement.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReplicaMeta {
    /// The highest epoch this replica has promised to, by answering a query
    /// or accepting a push. It never decreases. Pushes and queries from a
    /// lower epoch are refused.
    pub fenced_epoch: LeaderEpoch,
    /// The highest epoch this replica has led. A replica never leads the
    /// same epoch twice: after a restart its unsynced tail may be gone while
    /// followers kept it, so a second term under the same epoch could put
    /// different records at offsets that already carry that epoch elsewhere,
    /// breaking the log matching property the divergence rules rely on.
    /// (An addition to the spec's `ReplicaMeta`; see the crate docs.)
    pub led_epoch: Option<LeaderEpoch>,
    /// Which epoch wrote which offsets of this replica's log.
    pub history: EpochHistory,
}

/// Magic of the encoded metadata ("CLRM", little-endian).
const META_MAGIC: u32 = u32::from_le_bytes(*b"CLRM");
/// Format version.
const META_VERSION: u8 = 1;
/// Bytes before the entries: magic, version, fence, led flag, led epoch,
/// entry count.
const META_FIXED_BYTES: usize = 4 + 1 + 4 + 1 + 4 + 4;

impl ReplicaMeta {
    /// The metadata of a replica that has never promised anything.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// The persisted form: magic, version, fenced epoch, led epoch (flag and
    /// value), history entries, CRC32C of everything before it.
    /// Little-endian.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        let mut writer = Writer::with_capacity(
            META_FIXED_BYTES + self.history.entries().len() * ENTRY_BYTES + 4,
        );
        writer.u32(META_MAGIC);
        writer.u8(META_VERSION);
        writer.u32(self.fenced_epoch.0);
        writer.u8(u8::from(self.led_epoch.is_some()));
        writer.u32(self.led_epoch.map_or(0, |epoch| epoch.0));
        self.history.encode_entries(&mut writer);
        writer.finish_with_crc()
    }

    /// Decodes [`encode`](Self::encode)'s output.
    ///
    /// # Errors
    /// [`DecodeError`] for damaged or foreign bytes. Never panics and never
    /// allocates more than the input's length implies.
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let mut reader = Reader::with_crc(bytes, META_FIXED_BYTES)?;
        reader.magic(META_MAGIC)?;
        reader.version(META_VERSION)?;
        let fenced_epoch = LeaderEpoch(reader.u32()?);
        let has_led = reader.flag()?;
        let led = LeaderEpoch(reader.u32()?);
        let history = EpochHistory::decode_entries(&mut reader)?;
        reader.finish()?;
        Ok(Self {
            fenced_epoch,
            led_epoch: has_led.then_some(led),
            history,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::EpochEntry;
    use corelog_wire::types::Offset;
    use proptest::prelude::*;

    fn sample() -> ReplicaMeta {
        let mut history = EpochHistory::new();
        history.append(LeaderEpoch(1), Offset(0)).unwrap();
        history.append(LeaderEpoch(4), Offset(17)).unwrap();
        ReplicaMeta {
            fenced_epoch: LeaderEpoch(5),
            led_epoch: Some(LeaderEpoch(4)),
            history,
        }
    }

    #[test]
    fn meta_round_trips() {
        let meta = sample();
        assert_eq!(ReplicaMeta::decode(&meta.encode()).unwrap(), meta);
        let empty = ReplicaMeta::new();
        assert_eq!(ReplicaMeta::decode(&empty.encode()).unwrap(), empty);
    }

    #[test]
    fn every_single_bit_flip_is_refused() {
        let bytes = sample().encode();
        for index in 0..bytes.len() {
            for bit in 0..8 {
                let mut damaged = bytes.clone();
                damaged[index] ^= 1 << bit;
                assert!(ReplicaMeta::decode(&damaged).is_err(), "flip {index}.{bit}");
            }
        }
    }

    #[test]
    fn every_truncation_is_refused() {
        let bytes = sample().encode();
        for len in 0..bytes.len() {
            assert!(ReplicaMeta::decode(&bytes[..len]).is_err(), "len {len}");
        }
    }

    #[test]
    fn history_breaking_the_order_is_refused_even_with_a_good_crc() {
        // Build bytes by hand with entries out of order and a valid CRC.
        let mut writer = Writer::with_capacity(64);
        writer.u32(META_MAGIC);
        writer.u8(META_VERSION);
        writer.u32(3);
        writer.u8(0);
        writer.u32(0);
        writer.u32(2);
        writer.u32(2);
        writer.u64(10);
        writer.u32(1);
        writer.u64(20);
        let bytes = writer.finish_with_crc();
        assert!(matches!(
            ReplicaMeta::decode(&bytes),
            Err(DecodeError::History(_))
        ));
    }

    proptest! {
        #[test]
        fn arbitrary_meta_round_trips(
            fenced in any::<u32>(),
            led in proptest::option::of(any::<u32>()),
            steps in proptest::collection::vec((1u32..5, 0u64..50), 0..20),
        ) {
            let mut entries = Vec::new();
            let (mut epoch, mut start) = (0u32, 0u64);
            for (epoch_step, start_step) in steps {
                epoch += epoch_step;
                start += start_step;
                entries.push(EpochEntry { epoch: LeaderEpoch(epoch), start_offset: Offset(start) });
            }
            let meta = ReplicaMeta {
                fenced_epoch: LeaderEpoch(fenced),
                led_epoch: led.map(LeaderEpoch),
                history: EpochHistory::from_entries(entries).unwrap(),
            };
            prop_assert_eq!(ReplicaMeta::decode(&meta.encode()).unwrap(), meta);
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = ReplicaMeta::decode(&bytes);
            let _ = EpochHistory::decode(&bytes);
        }
    }
}
