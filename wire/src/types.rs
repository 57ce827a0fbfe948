//! Identities and positions that travel on the wire, as distinct types so that
//! an offset is never passed where an epoch or a sequence was meant.

/// Declares an identity or position as a distinct `Copy` newtype, with
/// `Debug` as `Name(value)` and `Display` as the bare value: so that an
/// offset is never passed where an epoch was meant. Every crate of the
/// workspace declares its ids with it (`corelog_wire::newtype!`).
#[macro_export]
macro_rules! newtype {
    ($(#[$doc:meta])* $name:ident($inner:ty)) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
        pub struct $name(pub $inner);

        impl ::std::fmt::Debug for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                write!(f, "{}({})", stringify!($name), self.0)
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                ::std::fmt::Display::fmt(&self.0, f)
            }
        }
    };
}

newtype!(
    /// Position of a record in one partition. Offsets start at 0, grow by one
    /// per record and are never reused.
    Offset(u64)
);
newtype!(
    /// Term of a partition leader. Requests from an older epoch are fenced.
    LeaderEpoch(u32)
);
newtype!(
    /// Milliseconds since the Unix epoch.
    TimestampMs(i64)
);
newtype!(
    /// Index of a shard (an executor) on one broker: the one owner of each
    /// partition replica placed there (DESIGN §3).
    ShardId(u16)
);

/// A partition, named by its topic's id (never its name, so that a
/// re-created topic is never mistaken for its predecessor) and its index.
/// The one identity of a partition across the broker, its storage and the
/// replication protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PartitionId {
    /// The topic's id.
    pub topic_id: u64,
    /// The partition index.
    pub partition: u32,
}

impl std::fmt::Display for PartitionId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.topic_id, self.partition)
    }
}

impl ShardId {
    /// The shard's index into per-shard tables.
    #[must_use]
    pub fn index(self) -> usize {
        usize::from(self.0)
    }
}

impl Offset {
    /// The offset `count` records after this one.
    ///
    /// # Panics
    /// On overflow, which would mean 2^64 records in one partition.
    #[must_use]
    pub fn plus(self, count: u64) -> Offset {
        Offset(self.0.checked_add(count).expect("offset overflow"))
    }

    /// Records between `earlier` and this offset.
    ///
    /// # Panics
    /// If `earlier` is after this offset.
    #[must_use]
    pub fn since(self, earlier: Offset) -> u64 {
        assert!(earlier <= self, "offset {earlier} is after {self}");
        self.0 - earlier.0
    }
}
