//! Deterministic simulation of corelog's partition replication, running
//! the production code.
//!
//! Dev-only (`publish = false`). A run is 3 to 5 simulated brokers, each
//! hosting one replica of one partition as the broker's own replica shell
//! ([`corelog_broker::replica::ReplicatedPartition`], which drives the
//! [`corelog_replication::Replica`] state machine and the broker's storage
//! engine, its appends made durable by the broker's shard journal) on a
//! [`corelog_storage::memory_disk::MemoryDisk`], plus
//! a controller group of one or three processes running the production
//! controller node (Raft, the metadata state machine, its log file) and the
//! broker's session and election code, and producers, all over a simulated
//! network. The replica shell's
//! runtime seam ([`corelog_broker::executor::Executor`]: spawn, sleep, now)
//! is implemented by [`executor::SimExecutor`], a single-threaded executor
//! on simulated time. Everything in a run is a function of one `u64` seed:
//! one SplitMix64, `BTreeMap` wherever order matters, tasks polled in wake
//! order, no wall clock, no threads. A seed replays exactly.
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
//! seeds 0..2000 on two cores. `scripts/sim-mutations.sh` plants four
//! known replication bugs, a shard journal that acknowledges before its
//! fdatasync and a controller that applies an entry before it commits,
//! and reports which the seeds catch (the fig. 8 marker rule through
//! [`fig8`]'s schedule).
//!
//! # What runs, and what is modelled
//!
//! Production code: the replica shell and state machine, the storage
//! engine (segments, indexes, recovery, retention, replica metadata), the
//! shard journal ([`corelog_storage::journal::ShardJournal`]: every
//! append is acknowledged once a journal group commit's fdatasync covers
//! it; segments are filled from it later by the runtime's flusher rule,
//! its files reclaimed; a restart recovers through
//! [`corelog_storage::log::recover_shard_journal`], the broker's
//! own shard start, which replays it into the segments), the
//! push and query wire conversions, the leadership-following rule
//! ([`corelog_broker::replica::role_change`]), the controller leader's
//! work ([`corelog_broker::cluster::leader_work::LeaderWork`]: broker
//! sessions, fencing, the election planner and rounds of
//! [`corelog_broker::cluster::election`]) and the controller node ([`corelog_controller::ControllerNode`]: tikv's raft-rs,
//! the metadata state machine, the log file's format and recovery), one
//! per controller process, each on its own simulated disk.
//!
//! Shells, as thin as the broker's: the controller process's Ready loop
//! and log file ([`controller`], [`raft_log`]) follow the broker's
//! `ControllerService` and `RaftLogFile` step for step; brokers send their
//! sessions to every controller process (only the leader acts, where in
//! production followers answer `NOT_CONTROLLER`), and metadata reaches
//! brokers as a lossy broadcast from every process standing in for the
//! metadata long-poll. Not simulated: disk I/O errors and a full disk (the
//! real-time nemesis rig covers those), more than one partition, the TCP
//! framing.
//!
//! # Fault model
//!
//! - Network ([`network`]): per-message delay (1 ms up to a per-seed
//!   maximum), loss, duplication, rare long delays (strong reordering);
//!   partitions that form and heal on a random schedule: a node or a
//!   controller process isolated, the endpoints split in two, a one-way
//!   link failure, a node cut from every controller process. Clients and
//!   controller processes are endpoints too.
//! - Disks ([`disk`]): writes are unsynced until an fsync that completes
//!   after a random delay (group commit); a crash keeps only synced bytes
//!   (every file, the journal's included, cut to its synced length); the
//!   node restarts after a random down time and recovers through the
//!   storage engine's own recovery and journal replay. Journal file sizes,
//!   commit sizes, the bypass threshold and the segment flusher's
//!   thresholds are drawn per seed, small, so that runs roll, reclaim and
//!   bypass the journal. Retention deletes committed, durable prefixes, so followers
//!   below a leader's log start are reset.
//! - Controller ([`controller`]): its Raft messages and its traffic with
//!   brokers cross the faulty network; its processes crash (their log
//!   keeps only synced bytes) and restart through the log's recovery, and
//!   partitions isolate them; session-timeout fencing, election rounds
//!   with timeouts and retries, moves to the preferred replica.
//! - Clients ([`client`]): produce with `acks=quorum` to the believed
//!   leader, several in flight, time out and move on.
//! - Targeted ([`fig8`]): one seed in eight replaces random crashes and
//!   partitions with a schedule that walks Raft's figure 8 step by step
//!   (three nodes, tiny pushes, little loss). Besides, on every seed a
//!   leader that has committed nothing in its epoch may crash right after
//!   a push answer reaches it.
//!
//! Each run has a faulty phase ([`run::CHAOS_MS`]) and a healed phase
//! ([`run::HEAL_MS`]: no partitions, loss, duplication or crashes, every
//! node restarted) in which a leader must be elected and new appends
//! acknowledged: a run that never makes progress once healed is a bug.
//!
//! # Invariants
//!
//! See [`checker`], checked after every task poll, message delivery and
//! timer: acknowledged records never lost or changed; high watermarks
//! never move back; agreement below high watermarks; one leader per epoch;
//! a fenced leader commits nothing it wrote after the fencing; for the
//! controller ([`controller::History`]), one Raft leader per term, the
//! same command at every index on every process, nothing applied beyond
//! the commit index, the metadata's invariants, no process halting. The
//! durable files (log segments continued by the shard journal's synced
//! frames, and replica metadata) are parsed and checked again after every
//! crash, truncation, reset and retention step. The state machine's and the shell's own assertions
//! count too: a panic fails the seed like a violation.

pub mod checker;
pub mod client;
pub mod controller;
pub mod disk;
pub mod executor;
pub mod fig8;
pub mod network;
pub mod node;
pub mod raft_log;
pub mod run;
pub mod trace;
pub mod world;

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
    /// Task polls.
    pub polls: u64,
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
        self.polls += other.polls;
        let (sum, add) = (&mut self.stats, other.stats);
        sum.truncations += add.truncations;
        sum.resets += add.resets;
        sum.reset_pushes += add.reset_pushes;
        sum.retentions += add.retentions;
        sum.mismatches += add.mismatches;
        sum.leaderships += add.leaderships;
        sum.already_led += add.already_led;
        sum.resignations += add.resignations;
        sum.restarts += add.restarts;
        sum.fig8_chains += add.fig8_chains;
        sum.fig8_suffixes += add.fig8_suffixes;
        sum.journal_replays += add.journal_replays;
        sum.journal_replayed_batches += add.journal_replayed_batches;
        sum.segment_flushes += add.segment_flushes;
        sum.journal_files_reclaimed += add.journal_files_reclaimed;
        sum.controller_crashes += add.controller_crashes;
        sum.controlled_stops += add.controlled_stops;
        sum.handed_off += add.handed_off;
        sum.transfers_requested += add.transfers_requested;
        sum.transfers_done += add.transfers_done;
        sum.maintenance_changes += add.maintenance_changes;
        sum.reassignments_started += add.reassignments_started;
        sum.reassignments_cancelled += add.reassignments_cancelled;
        sum.reassignments_ended += add.reassignments_ended;
        sum.decommissions += add.decommissions;
        sum.recommissions += add.recommissions;
        sum.decommissions_done += add.decommissions_done;
        sum.controller_restarts += add.controller_restarts;
        sum.controller_terms += add.controller_terms;
        sum.produce_timeouts += add.produce_timeouts;
        sum.slow_runs += add.slow_runs;
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
            polls: outcome.polls,
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
