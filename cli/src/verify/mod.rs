//! Proving from a recorded history that the log kept its contracts.
//!
//! A workload (the fault-injection runner, or `corelog verify`) records
//! what its clients did and saw as a [`History`] of [`Event`]s: every
//! produce with its outcome, every record a fetch served, every commit,
//! the fault injector's no-quorum intervals, and at the end a fresh read of
//! every partition from its start. [`check`] then proves, from that history
//! alone, whether the contracts held, and says how not in a [`Report`].
//! It is pure: no I/O, no clock, no network, so the same history always
//! gives the same report and a failing run can be re-checked from its
//! file.
//!
//! ```
//! use corelog_cli::verify::{self, ClientId, EventKind, History, ValueId};
//!
//! let mut history = History::new();
//! let client = ClientId(1);
//! history.record(10, client, EventKind::ProduceInvoke {
//!     value_id: ValueId(1), key: Some("k".into()), topic: "t".into(),
//!     partition: Some(0), producer: None,
//! });
//! history.record(12, client, EventKind::ProduceOk { value_id: ValueId(1), partition: 0, offset: 0 });
//! history.record(20, ClientId(9), EventKind::FinalRead {
//!     topic: "t".into(), partition: 0, records: vec![(0, Some(ValueId(1)))],
//! });
//! let report = verify::check(&history);
//! assert!(report.is_clean(), "{report}");
//! ```
//!
//! # What is checked, and why
//!
//! Each check is a [`CheckKind`]; its count is `None` (printed `n/a`) when
//! the history holds no evidence for it, which is not the same as 0.
//!
//! - **Durability** (C1): an acknowledged record must be in the final read
//!   ([`CheckKind::AcknowledgedLost`]) at the offset its acknowledgement
//!   gave ([`CheckKind::AcknowledgedOffsetChanged`]). A record whose write
//!   was indeterminate but that a reader was served was committed, so it
//!   must survive too ([`CheckKind::ReadThenLost`]).
//! - **No invention**: every record read must have been sent
//!   ([`CheckKind::PhantomRead`], which also counts records that are not
//!   workload records), and a write reported as failed must not be visible
//!   ([`CheckKind::FailedWriteVisible`]).
//! - **Exactly once per idempotent send** (C5): no record of an idempotent
//!   producer at two offsets ([`CheckKind::Duplicate`]); without
//!   idempotence duplicates are allowed and only counted.
//! - **Order**: one producer's acknowledged offsets grow with its sequence
//!   on a partition ([`CheckKind::ProducerOrder`]), the final read's
//!   offsets strictly increase ([`CheckKind::FinalReadOrder`]), and an
//!   offset always holds the same record ([`CheckKind::DivergentRead`]).
//! - **Group progress** (C6): a committed offset never moves back without
//!   an operator reset ([`CheckKind::CommitRegression`]), and a commit from
//!   a generation older than one already seen is refused
//!   ([`CheckKind::StaleGenerationCommit`]).
//! - **Integrity** (C7): no record is served that fails its checksum
//!   ([`CheckKind::CorruptRead`]).
//! - **Quorum**: nothing is acknowledged on a partition that had no quorum
//!   ([`CheckKind::AckWithoutQuorum`]).
//!
//! # Sound under concurrency
//!
//! The checker flags only what the history proves; where an operation's
//! effect could have happened anywhere between its invocation and its
//! completion, it gives it the benefit of that window:
//!
//! - A commit is compared with the commits *acknowledged before it was
//!   invoked*, and with the generations *seen before it was invoked*: two
//!   commits in flight together may be applied in either order.
//! - An acknowledgement is a quorum violation only if the whole send, from
//!   invocation to acknowledgement, lies inside a no-quorum interval; one
//!   that merely arrives inside it may have been committed just before, and
//!   is counted in [`Stats::acks_straddling_no_quorum`].
//! - Indeterminate writes ([`EventKind::ProduceUnknown`], or no outcome at
//!   all) may or may not be in the log; either is fine.
//!
//! # What the history must satisfy
//!
//! Events are in real-time order (`at_ms` non-decreasing); every outcome
//! follows its invocation, once; a commit's completion repeats its
//! invocation's client, group, generation, partition and offset; topics
//! hold only workload records; retention deletes nothing during the run;
//! and the final read covers every partition written or read. Breaches
//! are reported as [`HistoryProblems`] and make the report unclean, since
//! the verdict cannot be trusted then.
//!
//! [`workload`] is the I/O side: the producers, group and final read that
//! `corelog verify` and the fault-injection runner record histories with.

mod checker;
mod history;
mod report;
pub mod workload;

pub use self::checker::{DEFAULT_MAX_EXAMPLES, check, check_with_limit};
pub use self::history::{
    ClientId, Event, EventKind, History, HistoryParseError, Key, ProducerStamp, ValueId,
};
pub use self::report::{
    Check, CheckKind, DISPLAY_EXAMPLES, HistoryProblems, PartitionRecords, Report, Stats,
};
