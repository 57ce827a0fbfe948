//! Identities and positions that travel on the wire, as distinct types so that
//! an offset is never passed where an epoch or a sequence was meant.

use std::fmt;

macro_rules! newtype {
    ($(#[$doc:meta])* $name:ident($inner:ty)) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
        pub struct $name(pub $inner);

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({})", stringify!($name), self.0)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(&self.0, f)
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
