//! corelog's partition replication: the per-replica state machine and the
//! controller's election decision.
//!
//! # Purity
//!
//! This crate is pure: it performs no I/O, reads no clock, spawns nothing
//! and depends on no async runtime (`make lint` checks the dependency tree).
//! Time comes in as `now_ms` arguments, messages and local events come in as
//! method calls, and everything to be done comes out as a `Vec<`[`Action`]`>`
//! that the shell (the broker, or the simulator in `sim/`) carries out in
//! order. That is what lets the simulator run the real state machine against
//! a fake network, disk and clock, replayable from one seed.
//!
//! # Protocol summary
//!
//! Every record carries the epoch of the leader that wrote it. A replica's
//! durable [`ReplicaMeta`] holds its `fenced_epoch` (the highest epoch it
//! promised), its `led_epoch` (the highest it led), and its
//! [`EpochHistory`] (which epoch wrote which offsets).
//!
//! - **Election** (controller): query every replica with a new epoch
//!   ([`Replica::on_query`]); a replica promises it durably, stops leading or
//!   following, and answers its DURABLE `(last_epoch, log_end)`. With answers
//!   from a majority, [`election::decide`] picks the greatest, ties to the
//!   preferred replica. No majority, no leader.
//! - **Leader** ([`Replica::become_leader`]): starts a history run at its log
//!   end, appends a one-record epoch-start marker (unless the log is empty:
//!   no older record exists then), then, once the leadership is durable
//!   ([`Replica::on_persisted`]), takes client appends
//!   ([`Replica::on_local_append`]). It pushes to each follower
//!   ([`Replica::poll_sends`], [`Action::SendPush`]), pipelined up to
//!   [`ReplicaConfig::max_inflight_records`], and counts durable ends: the
//!   high watermark is the largest offset durable on a majority, but only
//!   once that includes its marker (an older epoch's records never commit by
//!   counting alone, Raft fig. 8). It never moves back.
//! - **Slow is not gone**: a push reported sent ([`Replica::on_push_sent`])
//!   is waited for until it is answered ([`Replica::on_push_ack`]) or its
//!   transport gives it up ([`Replica::on_push_failed`]); only then, with
//!   no progress for [`ReplicaConfig::resend_timeout_ms`], does the leader
//!   resend from the acknowledged end (as etcd's Raft moves a follower to
//!   probing on `ReportUnreachable`, not on a timer). A follower that
//!   answers late under overload is never sent its bytes twice, and a
//!   produce that times out is `REQUEST_TIMED_OUT` unless transport failures
//!   left fewer than a majority reachable ([`Replica::reachable_since`]).
//! - **Follower** ([`Replica::on_push`]): refuses pushes below its fence;
//!   checks that its record at `start - 1` has the push's `prev_epoch`
//!   (log matching; a `start` at or below its high watermark always
//!   passes: that prefix is committed, so every later leader shares it);
//!   skips batches it already holds with the same epoch,
//!   truncates at the first batch that conflicts (never below its high
//!   watermark or the prefix it already checked: such a push is refused,
//!   [`ProtocolError`]), appends the rest, and acknowledges only the
//!   prefix it checked against this leader ([`PushResult::Ok`]).
//! - **Divergence**: a failed check answers [`PushResult::Mismatch`] with a
//!   prefix `(last_epoch, log_end)` of the follower's log strictly below the
//!   push's start; the leader retries at `min(end of its largest epoch <=
//!   last_epoch, log_end)` ([`EpochHistory::end_of`]), or, when it lacks
//!   `last_epoch` and that cap applies, at the start of its own run holding
//!   `log_end - 1` (pushes start at batch boundaries). Each round moves back,
//!   so the exchange ends; one round suffices when the leader has the
//!   follower's last epoch. A follower below the leader's log start is
//!   reset ([`Push::reset_to`]).
//!
//! # On the wire
//!
//! [`wire`] converts the messages to and from `corelog_wire`'s
//! `ReplicaPush` and `ReplicaQuery` ([`Push::from_wire`],
//! [`PushAck::to_wire`], ...) and checks what a peer sent while it does (a
//! push's batches whole, CRC-checked once, stamped, where the push says):
//! the broker's shell hands bytes in and gets typed values or typed errors
//! back. A partition is named by `corelog_wire::types::PartitionId`, the
//! same identity the broker and its storage use.
//!
//! # Invariants
//!
//! Anything a peer can send is checked, not asserted: a push or an
//! acknowledgement that no correct replica sends is refused whole with a
//! [`ProtocolError`] (the replica is left as it was), so a broken or hostile
//! peer cannot stop a broker.
//!
//! Asserted in the state machine, in release builds too (a violated one
//! means acknowledged data could be lost, so the process must stop; only
//! this replica's own state and its shell's calls can violate them):
//! `log_start <= high_watermark <= log_end`; `durable_end <= log_end`; the
//! high watermark never decreases (per incarnation: it is soft state and
//! restarts at the log start after a crash); truncation and reset never cut
//! below it; the fence never decreases; the history never names an epoch
//! above the fence; a replica never leads the same epoch twice.
//!
//! Checked by the simulator (`sim/`) after every step: no acknowledged
//! record is lost or changed; the high watermark never moves back; replicas
//! agree at every offset below their high watermarks; at most one leader
//! (replica incarnation) accepts writes per epoch; records a fenced leader
//! writes after a majority promised a newer epoch never commit; and, once
//! faults heal, a leader is elected and new appends are acknowledged.
//!
//! # Decisions beyond the spec (issue 5)
//!
//! - The follower truncates at the first batch that conflicts with the
//!   leader's, after the consistency check passed below it, instead of
//!   obeying a `truncate_to` computed by the leader from one mismatch: the
//!   spec's rule keeps divergent records when the leader lacks the
//!   follower's last epoch, and truncates committed records when a mismatch
//!   answer is late. [`Push`] therefore has no `truncate_to`.
//! - Acknowledgements count only the prefix checked against the current
//!   leader (`min(durable_end, checked end)`), and a follower's high
//!   watermark is `min(push.hw, checked end)`: a durable tail left by an
//!   older leader is not the new leader's log.
//! - A replica that answered a query stops following: it must not
//!   acknowledge an older epoch's pushes after promising a newer one.
//! - [`ReplicaMeta::led_epoch`]: a replica never leads an epoch twice
//!   (after a restart it may have lost an unsynced tail that followers
//!   kept).
//! - [`QueryAnswer::epoch`] names the round answered, and
//!   [`election::decide`] takes the round's epoch and may also answer
//!   [`election::Decision::Superseded`].
//! - Recovery forgets history runs at or past the recovered log end, and
//!   the whole history when the log is empty.
//! - The pipelining window counts records (offsets), not bytes.
//! - The shell reports what a push carried with [`Replica::on_push_sent`],
//!   and settles every such push exactly once: answered or failed.
//! - [`Action::Reset`] is a separate action from [`Action::Truncate`]; both,
//!   like [`Action::Persist`], are durable before the next action runs.
//!
//! # Replaying a simulation seed
//!
//! `make sim SEED=N` replays seed `N` with a trace; `make sim SEEDS=N` runs
//! `N` seeds (from `SIM_FIRST_SEED`, default 0). See the `corelog-sim`
//! crate.

mod action;
mod codec;
pub mod election;
mod error;
mod history;
mod ids;
mod message;
mod meta;
mod replica;
pub mod wire;

pub use action::Action;
pub use error::{DecodeError, HistoryError, ProtocolError, ReplicationError};
pub use history::{EpochEnd, EpochEntry, EpochHistory};
pub use ids::ReplicaId;
pub use message::{Batch, BatchMeta, Push, PushAck, PushResult, Query, QueryAnswer, QueryResult};
pub use meta::ReplicaMeta;
pub use replica::{FollowerStatus, RecoveredLog, Replica, ReplicaConfig, RoleView};
