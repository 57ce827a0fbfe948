//! The fault schedule: a pure function of the seed.

use std::time::Duration;

use corelog_wire::rng::SplitMix64;
use serde::Serialize;

/// Milliseconds uniform in `from..=to`.
fn millis(rng: &mut SplitMix64, from: u64, to: u64) -> Duration {
    rng.duration(Duration::from_millis(from), Duration::from_millis(to))
}

/// What a fault does. Each kind is undone after its hold time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FaultKind {
    /// kill -9, restart on the same data directory.
    Kill,
    /// SIGSTOP, then SIGCONT.
    Pause,
    /// Two brokers killed: no partition has a quorum.
    KillTwo,
    /// Two brokers paused: no partition has a quorum.
    PauseTwo,
    /// kill -9 and every file cut to its last fdatasync'ed length.
    PowerLoss,
    /// Power loss of all three brokers at once.
    PowerLossAll,
    /// One broker paused while another loses power (no quorum).
    PowerLossWhilePaused,
    /// One broker cut off from the network while another loses power (no
    /// quorum).
    PowerLossWhilePartitioned,
    /// Every link to and from one broker cut.
    Isolate,
    /// The links between two brokers cut, both ways.
    SplitPair,
    /// One broker's requests to another dropped; the other way works.
    OneWay,
    /// The clients cut off from one broker (the brokers still see it).
    ClientIsolated,
    /// Every proxy delays, reorders, duplicates, drops and corrupts frames
    /// and swallows replies.
    ProxyChaos,
    /// The next fdatasync of a broker fails with EIO; the broker is then
    /// restarted (an EIO-fenced replica stays fenced until then).
    EioSync,
    /// The next write of a broker fails with EIO; then as `EioSync`.
    EioWrite,
    /// The small filesystem under one broker's data directory filled up,
    /// then freed.
    DiskFull,
    /// A stopped broker's file bit-flipped or truncated, then a restart:
    /// it must repair or refuse to start (then its pristine copy is put
    /// back).
    Corrupt,
    /// SIGTERM, restart on the same data directory: a controlled shutdown
    /// (its leaderships move before it stops).
    Terminate,
    /// An operator moves a random partition's leadership to a random
    /// broker (`partition elect-leader --to`).
    Transfer,
    /// An operator puts a broker in maintenance (its leaderships move
    /// away), restarts it with SIGTERM, and takes it out of maintenance
    /// after the hold.
    Maintenance,
}

impl FaultKind {
    /// Whether an operator's command (through the admin client) makes the
    /// fault rather than the rig alone.
    pub fn is_operator(self) -> bool {
        matches!(self, FaultKind::Transfer | FaultKind::Maintenance)
    }

    /// Whether the fault cuts network links (falls back to a pause where
    /// no private network namespace is available).
    pub fn needs_network(self) -> bool {
        matches!(
            self,
            FaultKind::Isolate
                | FaultKind::SplitPair
                | FaultKind::OneWay
                | FaultKind::ClientIsolated
                | FaultKind::PowerLossWhilePartitioned
        )
    }

    /// Relative weights of the kinds in a schedule.
    const WEIGHTS: [(FaultKind, u64); 20] = [
        (FaultKind::Kill, 5),
        (FaultKind::Pause, 5),
        (FaultKind::KillTwo, 3),
        (FaultKind::PauseTwo, 2),
        (FaultKind::PowerLoss, 5),
        (FaultKind::PowerLossAll, 2),
        (FaultKind::PowerLossWhilePaused, 2),
        (FaultKind::PowerLossWhilePartitioned, 2),
        (FaultKind::Isolate, 4),
        (FaultKind::SplitPair, 3),
        (FaultKind::OneWay, 3),
        (FaultKind::ClientIsolated, 3),
        (FaultKind::ProxyChaos, 5),
        (FaultKind::EioSync, 3),
        (FaultKind::EioWrite, 2),
        (FaultKind::DiskFull, 3),
        (FaultKind::Corrupt, 4),
        (FaultKind::Terminate, 3),
        (FaultKind::Transfer, 4),
        (FaultKind::Maintenance, 3),
    ];

    fn pick(rng: &mut SplitMix64) -> FaultKind {
        let total: u64 = Self::WEIGHTS.iter().map(|(_, weight)| weight).sum();
        let mut ticket = rng.below(total);
        for (kind, weight) in Self::WEIGHTS {
            if ticket < weight {
                return kind;
            }
            ticket -= weight;
        }
        FaultKind::Kill
    }
}

/// Which broker a fault hits.
#[derive(Clone, Copy, Debug, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Target {
    Any,
    PartitionLeader(u32),
    ControllerLeader,
}

/// One planned fault.
#[derive(Clone, Debug, Serialize)]
pub struct Fault {
    pub kind: FaultKind,
    pub target: Target,
    /// Index of the broker used when the target cannot be resolved.
    pub fallback: usize,
    /// Index of the second broker of a two-broker fault (made different
    /// from the first when they collide).
    pub second: usize,
    pub gap_before_ms: u64,
    pub hold_ms: u64,
    /// Seed of the fault's own choices (which file to corrupt, how).
    pub seed: u64,
}

/// `count` faults from `seed`.
pub fn plan(seed: u64, count: usize, gap_mean: Duration, partitions: u32) -> Vec<Fault> {
    let mut rng = SplitMix64::new(seed);
    let gap_ms = u64::try_from(gap_mean.as_millis()).unwrap_or(u64::MAX);
    (0..count)
        .map(|_| {
            let kind = FaultKind::pick(&mut rng);
            let target = match rng.below(3) {
                0 => Target::Any,
                1 => Target::PartitionLeader(
                    u32::try_from(rng.below(u64::from(partitions))).unwrap_or(0),
                ),
                _ => Target::ControllerLeader,
            };
            let fallback = rng.index(3);
            let second = (fallback + 1 + rng.index(2)) % 3;
            let hold = match kind {
                FaultKind::Kill | FaultKind::PowerLoss | FaultKind::Corrupt => {
                    millis(&mut rng, 500, 3_000)
                }
                // Half of the pauses and cuts outlast the 2 s session
                // timeout, so leaderships move.
                FaultKind::Pause
                | FaultKind::Isolate
                | FaultKind::SplitPair
                | FaultKind::OneWay
                | FaultKind::ClientIsolated => millis(&mut rng, 300, 4_500),
                FaultKind::KillTwo
                | FaultKind::PauseTwo
                | FaultKind::PowerLossAll
                | FaultKind::PowerLossWhilePaused
                | FaultKind::PowerLossWhilePartitioned => millis(&mut rng, 1_500, 4_000),
                FaultKind::ProxyChaos | FaultKind::DiskFull => millis(&mut rng, 3_000, 8_000),
                FaultKind::EioSync | FaultKind::EioWrite => millis(&mut rng, 1_000, 3_000),
                // After the restart (or the move), before the next fault.
                FaultKind::Terminate | FaultKind::Transfer | FaultKind::Maintenance => {
                    millis(&mut rng, 500, 3_000)
                }
            };
            Fault {
                kind,
                target,
                fallback,
                second,
                gap_before_ms: gap_ms / 2 + rng.below(gap_ms + 1),
                hold_ms: u64::try_from(hold.as_millis()).unwrap_or(u64::MAX),
                seed: rng.next_u64(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_schedule_is_a_function_of_its_seed() {
        let schedule = |seed| {
            plan(seed, 50, Duration::from_secs(2), 6)
                .iter()
                .map(|fault| (fault.kind, fault.hold_ms, fault.gap_before_ms, fault.seed))
                .collect::<Vec<_>>()
        };
        assert_eq!(schedule(3), schedule(3));
        assert_ne!(schedule(3), schedule(4));
    }

    #[test]
    fn every_kind_is_scheduled_and_two_brokers_are_distinct() {
        let faults = plan(1, 2_000, Duration::from_secs(2), 6);
        for (kind, _) in FaultKind::WEIGHTS {
            assert!(
                faults.iter().any(|fault| fault.kind == kind),
                "{kind:?} never scheduled"
            );
        }
        assert!(faults.iter().all(|fault| fault.second != fault.fallback));
        assert!(
            faults
                .iter()
                .all(|fault| fault.fallback < 3 && fault.second < 3)
        );
    }
}
