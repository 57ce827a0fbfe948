//! The disk reserve (C7): appends stop, with a retriable `DISK_FULL`, before
//! they eat into `disk_reserve_bytes` of free space. Nothing retained is
//! deleted to make room.
//!
//! Free space is measured with statvfs and then tracked by subtracting what
//! this shard wrote, re-measured whenever the estimate gets near the reserve
//! or every [`PROBE_EVERY_BYTES`] written (other writers share the disk).

use std::cell::Cell;
use std::fmt;
use std::io;

/// Re-measure free space after this many bytes written, even far from the reserve.
pub const PROBE_EVERY_BYTES: u64 = 16 << 20;

/// Tracks free space against the reserve for one shard.
pub struct DiskSpace {
    reserve_bytes: u64,
    probe: Box<dyn Fn() -> io::Result<u64>>,
    free_at_probe: Cell<Option<u64>>,
    written_since_probe: Cell<u64>,
}

impl fmt::Debug for DiskSpace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DiskSpace")
            .field("reserve_bytes", &self.reserve_bytes)
            .field("free_at_probe", &self.free_at_probe.get())
            .field("written_since_probe", &self.written_since_probe.get())
            .finish_non_exhaustive()
    }
}

/// An append refused to keep the reserve.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReserveExceeded {
    /// Free bytes measured.
    pub free_bytes: u64,
    /// The reserve.
    pub reserve_bytes: u64,
    /// Bytes the append needed.
    pub needed_bytes: u64,
}

impl DiskSpace {
    /// Keeps `reserve_bytes` free, measuring with `probe`.
    pub fn new(reserve_bytes: u64, probe: impl Fn() -> io::Result<u64> + 'static) -> Self {
        DiskSpace {
            reserve_bytes,
            probe: Box::new(probe),
            free_at_probe: Cell::new(None),
            written_since_probe: Cell::new(0),
        }
    }

    /// Accounts for `bytes` about to be written, or refuses them.
    ///
    /// # Errors
    /// [`ReserveExceeded`] when writing would leave less than the reserve free.
    /// A failed measurement counts as no space: refusing is the safe side.
    pub fn claim(&self, bytes: u64) -> Result<(), ReserveExceeded> {
        let estimate = self
            .free_at_probe
            .get()
            .map(|free| free.saturating_sub(self.written_since_probe.get()));
        let near_reserve =
            estimate.is_none_or(|free| free < self.reserve_bytes.saturating_add(bytes));
        if near_reserve || self.written_since_probe.get() >= PROBE_EVERY_BYTES {
            self.measure();
        }
        let free = self
            .free_at_probe
            .get()
            .unwrap_or(0)
            .saturating_sub(self.written_since_probe.get());
        if free < self.reserve_bytes.saturating_add(bytes) {
            return Err(ReserveExceeded {
                free_bytes: free,
                reserve_bytes: self.reserve_bytes,
                needed_bytes: bytes,
            });
        }
        self.written_since_probe
            .set(self.written_since_probe.get() + bytes);
        Ok(())
    }

    /// Free bytes as last estimated (for metrics), re-measured if never measured.
    #[must_use]
    pub fn free_bytes(&self) -> u64 {
        if self.free_at_probe.get().is_none() {
            self.measure();
        }
        self.free_at_probe
            .get()
            .unwrap_or(0)
            .saturating_sub(self.written_since_probe.get())
    }

    /// Forgets the estimate: the next claim measures free space again.
    /// Called after a write met `ENOSPC`, which proves the estimate wrong.
    pub fn remeasure(&self) {
        self.free_at_probe.set(None);
        self.written_since_probe.set(0);
    }

    /// Measures now whether at least `margin_bytes` are free above the
    /// reserve: whether a log fenced by a full disk may be reopened.
    #[must_use]
    pub fn has_room_above_reserve(&self, margin_bytes: u64) -> bool {
        self.measure();
        self.free_bytes() >= self.reserve_bytes.saturating_add(margin_bytes)
    }

    /// The reserve.
    #[must_use]
    pub fn reserve_bytes(&self) -> u64 {
        self.reserve_bytes
    }

    fn measure(&self) {
        match (self.probe)() {
            Ok(free) => self.free_at_probe.set(Some(free)),
            Err(error) => {
                tracing::warn!(%error, "cannot measure free disk space; refusing appends until it can");
                self.free_at_probe.set(None);
            }
        }
        self.written_since_probe.set(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::rc::Rc;

    #[test]
    fn refuses_before_the_reserve_and_recovers_when_space_returns() {
        let free = Rc::new(Cell::new(10_000u64));
        let probe_free = free.clone();
        let space = DiskSpace::new(4_000, move || Ok(probe_free.get()));
        assert!(space.claim(5_000).is_ok());
        // The estimate is now 5_000; 1_500 more would leave 3_500 < 4_000.
        free.set(5_000);
        let refused = space.claim(1_500).unwrap_err();
        assert_eq!(refused.free_bytes, 5_000);
        free.set(50_000);
        assert!(space.claim(1_500).is_ok());
    }

    #[test]
    fn remeasure_after_enospc_refuses_on_a_stale_estimate_and_room_returns() {
        let free = Rc::new(Cell::new(10_000u64));
        let probe_free = free.clone();
        let space = DiskSpace::new(1_000, move || Ok(probe_free.get()));
        assert!(space.claim(100).is_ok());
        // Another writer took the space; the estimate (9_900) is stale.
        free.set(0);
        assert!(space.claim(100).is_ok(), "a stale estimate passes");
        space.remeasure();
        assert!(space.claim(100).is_err(), "measured again after ENOSPC");
        assert!(!space.has_room_above_reserve(500));
        free.set(1_400);
        assert!(!space.has_room_above_reserve(500));
        free.set(1_500);
        assert!(space.has_room_above_reserve(500));
    }

    #[test]
    fn a_failed_measurement_refuses() {
        let space = DiskSpace::new(0, || Err(io::Error::other("statvfs failed")));
        assert!(space.claim(1).is_err());
    }
}
