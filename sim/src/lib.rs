//! Deterministic simulation of corelog's partition replication.
//!
//! Dev-only (`publish = false`). It runs 3 to 5 nodes, each holding one
//! replica of one partition as the real [`corelog_replication::Replica`]
//! state machine, against a simulated network, simulated disks, producers
//! and a controller model, and checks the replication invariants after
//! every event. Everything in a run is a function of one `u64` seed: the
//! simulator's own PRNG ([`rng::Rng`], SplitMix64), `BTreeMap` wherever
//! order matters, no clock, no threads. A seed replays exactly.
//!
//! # Replaying a seed
//!
//! A failure prints one line to replay it:
//!
//! ```text
//! sim seed 1234 failed at 812 ms: ...
//!   replay: make sim SEED=1234
//! ```
//!
//! `make sim SEED=1234` runs that seed alone with its event trace
//! (`SIM_SEED=1234 SIM_TRACE=1 cargo test -p corelog-sim --release --test
//! sim -- --exact replay --nocapture`). `make sim SEEDS=N` runs `N` seeds
//! starting at `SIM_FIRST_SEED` (default 0), split over every core.
//! `cargo test -p corelog-sim --release` (what `make test` runs) runs
//! seeds 0..2000 in a few seconds.
//!
//! # Fault model
//!
//! - Network ([`network`]): per-message delay (1 ms up to a per-seed
//!   maximum), loss, duplication, rare long delays (strong reordering);
//!   partitions that form and heal on a random schedule: a node isolated,
//!   the endpoints split in two, a one-way link failure, a node cut from
//!   the controller. Clients and the controller are endpoints too.
//! - Disks ([`disk`]): appends are unsynced until an fsync that completes
//!   after a random delay (group commit); a crash keeps only fsynced
//!   batches and the persisted metadata; the node restarts after a random
//!   down time and recovers (log end = durable end). Retention deletes
//!   committed, durable prefixes, so followers below a leader's log start
//!   are reset.
//! - Controller ([`controller_model`]): reliable itself, but all its
//!   traffic crosses the faulty network; session-timeout failure
//!   detection, election rounds with timeouts and retries, occasional
//!   moves to the preferred replica.
//! - Clients ([`client`]): append to the believed leader, several in
//!   flight, time out and move on.
//!
//! Each run has a faulty phase ([`run::CHAOS_MS`]) and a healed phase
//! ([`run::HEAL_MS`]: no partitions, loss, duplication or crashes, every
//! node restarted) in which a leader must be elected and new appends
//! acknowledged: a run that never makes progress once healed is a bug.
//!
//! # Invariants
//!
//! See [`checker`]: acknowledged records never lost or changed; high
//! watermarks never move back; agreement below high watermarks; one
//! leader per epoch; a fenced leader commits nothing it wrote after the
//! fencing; plus the shell-level consistency of each replica's view with
//! its disk, and the state machine's own assertions (a panic fails the
//! seed like a violation).

pub mod checker;
pub mod client;
pub mod controller_model;
pub mod disk;
pub mod network;
pub mod node;
pub mod rng;
pub mod run;
pub mod trace;

use std::panic::{AssertUnwindSafe, catch_unwind};

pub use run::{Failure, Outcome, run};

/// Runs `seed`, turning a panic (a failed assertion in the state machine or
/// the simulator) into a [`Failure`] like any violation.
///
/// # Errors
/// The seed's failure.
pub fn run_seed(seed: u64, trace: bool) -> Result<Outcome, Failure> {
    match catch_unwind(AssertUnwindSafe(|| run(seed, trace))) {
        Ok(result) => result,
        Err(panic) => {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_string()))
                .unwrap_or_else(|| "panic".to_string());
            Err(Failure {
                seed,
                time_ms: run::last_time_ms(),
                message: format!("panicked: {message}"),
            })
        }
    }
}

/// Totals over many seeds.
#[derive(Clone, Copy, Debug, Default)]
pub struct Totals {
    /// Seeds run.
    pub seeds: u64,
    /// Appends acknowledged.
    pub acknowledged: u64,
    /// Election rounds.
    pub rounds: u64,
    /// Crashes.
    pub crashes: u64,
    /// Partitions.
    pub partitions: u64,
    /// Events.
    pub events: u64,
    /// Coverage of the interesting paths, summed.
    pub stats: node::Stats,
}

impl Totals {
    /// Adds the totals of another range of seeds.
    pub fn absorb(&mut self, other: &Totals) {
        self.seeds += other.seeds;
        self.acknowledged += other.acknowledged;
        self.rounds += other.rounds;
        self.crashes += other.crashes;
        self.partitions += other.partitions;
        self.events += other.events;
        let (sum, add) = (&mut self.stats, other.stats);
        sum.truncations += add.truncations;
        sum.resets += add.resets;
        sum.retentions += add.retentions;
        sum.mismatches += add.mismatches;
        sum.leaderships += add.leaderships;
        sum.already_led += add.already_led;
        sum.restarts += add.restarts;
    }
}

/// Runs `count` seeds from `first`, stopping at the first failure.
///
/// # Errors
/// The first failing seed.
pub fn run_seeds(first: u64, count: u64) -> Result<Totals, Failure> {
    let mut totals = Totals::default();
    for seed in first..first + count {
        let outcome = run_seed(seed, false)?;
        totals.absorb(&Totals {
            seeds: 1,
            acknowledged: outcome.acknowledged,
            rounds: outcome.rounds,
            crashes: outcome.crashes,
            partitions: outcome.partitions,
            events: outcome.events,
            stats: outcome.stats,
        });
    }
    Ok(totals)
}

/// Runs `count` seeds from `first` split over `threads` threads (each seed
/// is still a deterministic function of itself alone). Each thread stops at
/// its first failure; the lowest failing seed is returned.
///
/// # Errors
/// The lowest failing seed found.
pub fn run_seeds_parallel(first: u64, count: u64, threads: u64) -> Result<Totals, Failure> {
    let threads = threads.clamp(1, count.max(1));
    let chunk = count.div_ceil(threads);
    let results: Vec<Result<Totals, Failure>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|index| {
                let start = first + index * chunk;
                let len = chunk.min((first + count).saturating_sub(start));
                scope.spawn(move || run_seeds(start, len))
            })
            .collect();
        handles
            .into_iter()
            .map(|handle| match handle.join() {
                Ok(result) => result,
                // run_seed catches panics; a panic here is the runner's own.
                Err(_) => Err(Failure {
                    seed: first,
                    time_ms: 0,
                    message: "a seed runner thread panicked".to_string(),
                }),
            })
            .collect()
    });
    let mut totals = Totals::default();
    let mut failure: Option<Failure> = None;
    for result in results {
        match result {
            Ok(part) => totals.absorb(&part),
            Err(found) => {
                if failure.as_ref().is_none_or(|known| found.seed < known.seed) {
                    failure = Some(found);
                }
            }
        }
    }
    match failure {
        Some(failure) => Err(failure),
        None => Ok(totals),
    }
}
