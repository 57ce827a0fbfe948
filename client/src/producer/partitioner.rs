//! Which partition a record goes to.
//!
//! A record with a key goes to `xxh3_64(key) % partition_count` (C3). This
//! function is part of the contract with every application that relies on
//! per-key order, and with clients in other languages: it is frozen
//! forever, and the tests below pin its values against the reference
//! implementation of XXH3.
//!
//! A record without a key goes to the topic's sticky partition, which moves
//! on (round-robin) each time the batch it was filling closes: keyless
//! records fill whole batches instead of spreading one record per
//! partition, and over many batches every partition gets its share.

use xxhash_rust::xxh3::xxh3_64;

/// The partition of a keyed record: `xxh3_64(key) % partition_count` (C3).
///
/// # Panics
/// If `partition_count` is zero: a topic always has a partition.
#[must_use]
pub fn partition_for_key(key: &[u8], partition_count: u32) -> u32 {
    assert!(partition_count > 0, "a topic has at least one partition");
    // The remainder is below partition_count, so it fits a u32.
    (xxh3_64(key) % u64::from(partition_count)) as u32
}

/// A topic's sticky partition for keyless records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Sticky {
    /// The partition keyless records go to now.
    pub partition: u32,
    /// The batch they are filling there, once one is open.
    pub batch_id: Option<u64>,
}

impl Sticky {
    /// A starting point that differs between producers, so that many
    /// producers started together do not all fill partition 0 first.
    pub(crate) fn start(seed: u64, partition_count: u32) -> Sticky {
        Sticky {
            partition: (seed % u64::from(partition_count.max(1))) as u32,
            batch_id: None,
        }
    }

    /// The partition for the next keyless record, given whether the batch
    /// it was filling is still open. Moves on when that batch closed.
    pub(crate) fn next(&mut self, open_batch: Option<u64>, partition_count: u32) -> u32 {
        let count = partition_count.max(1);
        if self.batch_id.is_some() && self.batch_id != open_batch {
            self.partition = (self.partition + 1) % count;
            self.batch_id = None;
        }
        self.partition %= count;
        self.partition
    }
}

/// A seed for [`Sticky::start`] from the process id and the clock.
pub(crate) fn sticky_seed() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_nanos());
    xxh3_64(
        &[
            nanos.to_le_bytes().as_slice(),
            &std::process::id().to_le_bytes(),
        ]
        .concat(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values from the reference XXH3 implementation (the C library, via
    /// Python's `xxhash.xxh3_64_intdigest`). If this test fails, keys would
    /// move to other partitions: that breaks C3 for every deployed
    /// application. Do not "fix" the expected values.
    #[test]
    fn key_partitions_are_pinned_to_reference_xxh3() {
        let pinned: &[(&[u8], u64, [u32; 3])] = &[
            (b"", 0x2d06_8005_38d3_94c2, [1, 2, 10]),
            (b"a", 0xe6c6_32b6_1e96_4e1f, [1, 7, 7]),
            (b"customer42", 0x16b9_4a54_7f30_6d40, [2, 0, 8]),
            (b"order-1", 0x5fc4_6503_368e_2876, [2, 6, 2]),
            (b"hello world", 0xd447_b1ea_40e6_988b, [1, 3, 7]),
        ];
        for (key, hash, [of_3, of_8, of_12]) in pinned {
            assert_eq!(xxh3_64(key), *hash, "xxh3_64({key:?})");
            assert_eq!(partition_for_key(key, 3), *of_3, "{key:?} % 3");
            assert_eq!(partition_for_key(key, 8), *of_8, "{key:?} % 8");
            assert_eq!(partition_for_key(key, 12), *of_12, "{key:?} % 12");
            assert_eq!(partition_for_key(key, 1), 0);
        }
    }

    #[test]
    fn sticky_partition_moves_only_when_its_batch_closes() {
        let mut sticky = Sticky::start(7, 3);
        assert_eq!(sticky.partition, 1);
        assert_eq!(sticky.next(None, 3), 1);
        sticky.batch_id = Some(10);
        // Batch 10 still open: stay.
        assert_eq!(sticky.next(Some(10), 3), 1);
        // Batch 10 closed: move on, round-robin, wrapping.
        assert_eq!(sticky.next(None, 3), 2);
        sticky.batch_id = Some(11);
        assert_eq!(sticky.next(Some(12), 3), 0);
        // The topic shrank in our view: stay in range.
        sticky.partition = 5;
        assert_eq!(sticky.next(None, 2), 1);
    }
}
