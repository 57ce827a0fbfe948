//! The membership task: joins the group, sends heartbeats, rejoins on a
//! rebalance, and publishes each new assignment to the group consumer. It
//! runs in the background so that a member stays alive while the
//! application is busy with records.
//!
//! # The protocol, as this task follows it
//!
//! 1. JoinGroup with what the member owns now (`owned`). The coordinator
//!    answers once the rebalance completes (at most `rebalance_timeout`)
//!    with the generation and this member's share. Partitions the member
//!    keeps are never paused (cooperative); partitions missing from the new
//!    share are revoked at once: dropped from the tracker here, so no later
//!    commit names them, and unassigned from the fetcher by the next
//!    `poll`.
//! 2. Heartbeat every `heartbeat_interval` (the coordinator's number).
//!    - `REBALANCE_IN_PROGRESS`: commit the completed prefix first — the
//!      coordinator accepts commits of the current generation while it
//!      prepares the rebalance — then rejoin (step 1). This is also how a
//!      member learns of the follow-up rebalance that hands it partitions
//!      withheld for one round.
//!    - `ILLEGAL_GENERATION` / `UNKNOWN_MEMBER_ID`: the membership is lost.
//!      Everything is revoked (another member may own it already) and the
//!      member joins as new.
//!    - No successful heartbeat for `session_timeout`: the coordinator has
//!      removed the member by now, so it stops consuming (lost) and rejoins
//!      once the coordinator answers.
//! 3. With auto-commit, the completed prefix is committed every
//!    `commit_interval` from here.
//!
//! Leaving (LeaveGroup) is the group consumer's `close`, after this task
//! stopped and the final commit was made.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use corelog_wire::error::ErrorCode;
use corelog_wire::message::join_group::JoinGroupRequest;
use corelog_wire::types::Offset;
use tokio::sync::watch;
use tokio::time::Instant;

use super::coordinator::{Coordinator, Joined, MemberGeneration, OffsetToCommit, by_topic};
use super::tracker::{OffsetTracker, TopicPartition};
use crate::error::ClientError;

/// Shortest heartbeat interval, whatever the coordinator says: a bound on
/// the request rate of one member.
const HEARTBEAT_INTERVAL_MIN: Duration = Duration::from_millis(10);

/// Longest wait between two join attempts while the coordinator is
/// unreachable.
const JOIN_BACKOFF_MAX: Duration = Duration::from_secs(1);

/// The membership as the task last saw it, shared with the group consumer.
#[derive(Debug)]
pub(crate) struct MemberState {
    /// Set after the first successful join; cleared when membership is lost.
    pub member_id: Option<String>,
    /// The generation of `assignment`; -1 before the first join.
    pub generation: i32,
    /// The partitions this member owns in `generation`.
    pub assignment: BTreeSet<TopicPartition>,
    /// Bumped whenever the membership is lost, so that the consumer resets
    /// every partition (positions read under the lost membership are not
    /// to be trusted) even if the same partitions come back.
    pub lost_count: u64,
    /// Whether a rebalance is under way (JoinGroup sent, not answered).
    pub rebalancing: bool,
    /// Members in the group as of the last join.
    pub members: u32,
    /// The completed prefix of every owned partition.
    pub tracker: OffsetTracker,
    /// An error that ended the membership for good (for example
    /// `INVALID_GROUP_ID`); `poll` reports it.
    pub fatal: Option<ClientError>,
}

/// State shared by the group consumer, its completion handles and the
/// membership task.
#[derive(Debug)]
pub(crate) struct Shared {
    state: Mutex<MemberState>,
    /// Bumped after every change of the membership; `poll` watches it.
    pub changed: watch::Sender<u64>,
    /// Serialises commits, so that an older commit can never land after a
    /// newer one and move the group's offset backwards.
    pub commit_lock: tokio::sync::Mutex<()>,
}

impl Shared {
    pub(crate) fn new(tracker: OffsetTracker) -> Shared {
        Shared {
            state: Mutex::new(MemberState {
                member_id: None,
                generation: -1,
                assignment: BTreeSet::new(),
                lost_count: 0,
                rebalancing: false,
                members: 0,
                tracker,
                fatal: None,
            }),
            changed: watch::channel(0).0,
            commit_lock: tokio::sync::Mutex::new(()),
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, MemberState> {
        // Nothing panics while holding this lock (no I/O, no user code);
        // recover instead of spreading a poison that cannot mean
        // inconsistent state.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn bump(&self) {
        self.changed.send_modify(|version| *version += 1);
    }

    /// Installs the result of a join.
    fn joined(&self, joined: Joined) {
        {
            let mut state = self.lock();
            let keep = joined.assignment.clone();
            state.tracker.retain(|partition| keep.contains(partition));
            state.member_id = Some(joined.member_id);
            state.generation = joined.generation;
            state.assignment = joined.assignment;
            state.members = joined.members;
            state.rebalancing = false;
        }
        self.bump();
    }

    /// Drops the membership: revokes everything and forgets the member id,
    /// so the next join is as a new member.
    pub(crate) fn lose(&self, why: &ClientError) {
        {
            let mut state = self.lock();
            if state.member_id.is_none() && state.assignment.is_empty() {
                return;
            }
            tracing::warn!(generation = state.generation, error = %why,
                "group membership lost: every partition is revoked");
            state.member_id = None;
            state.generation = -1;
            state.assignment.clear();
            state.tracker.revoke_all();
            state.lost_count += 1;
        }
        self.bump();
    }

    fn fail(&self, error: ClientError) {
        self.lock().fatal = Some(error);
        self.bump();
    }
}

/// Commits the completed prefix of every owned partition as the current
/// member and generation, and returns what was committed.
///
/// # Errors
/// A refusal of the whole commit (`ILLEGAL_GENERATION` after a rebalance,
/// `UNKNOWN_MEMBER_ID`, …), connection errors, or the first partition's
/// refusal — after the others' offsets were recorded as committed.
pub(crate) async fn commit_completed(
    shared: &Shared,
    coordinator: &Coordinator,
) -> Result<Vec<(TopicPartition, Offset)>, ClientError> {
    let _serial = shared.commit_lock.lock().await;
    let (member, offsets) = {
        let state = shared.lock();
        let Some(member_id) = state.member_id.clone() else {
            return Ok(Vec::new());
        };
        let offsets: Vec<OffsetToCommit> = state
            .tracker
            .to_commit()
            .into_iter()
            .map(|(partition, next_offset)| OffsetToCommit {
                partition,
                next_offset,
                metadata: None,
            })
            .collect();
        let member = MemberGeneration {
            member_id,
            generation: state.generation,
        };
        (member, offsets)
    };
    if offsets.is_empty() {
        return Ok(Vec::new());
    }
    let results = coordinator.commit(&member, &offsets).await?;
    let mut committed = Vec::new();
    let mut first_error = None;
    {
        let mut state = shared.lock();
        for (partition, outcome) in results {
            match outcome {
                Ok(offset) => {
                    state.tracker.committed(&partition, offset);
                    committed.push((partition, offset));
                }
                Err(error) => {
                    first_error.get_or_insert(error);
                }
            }
        }
    }
    match first_error {
        Some(error) => Err(error),
        None => Ok(committed),
    }
}

/// What the membership task needs to know.
#[derive(Clone, Debug)]
pub(crate) struct Settings {
    pub topics: Vec<String>,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub session_timeout: Duration,
    pub rebalance_timeout: Duration,
    /// Commit the completed prefix this often, if set.
    pub auto_commit: Option<Duration>,
    /// First wait after a failed join; doubles up to a second.
    pub retry_backoff: Duration,
}

/// How the heartbeat loop ended.
enum Next {
    /// Join again with the current member id.
    Rejoin,
    /// Stop: the consumer is closing.
    Shutdown,
}

/// The membership task; runs until `shutdown` turns true or the membership
/// fails for good.
pub(crate) async fn run(
    shared: Arc<Shared>,
    coordinator: Arc<Coordinator>,
    settings: Settings,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut backoff = settings.retry_backoff;
    // When the coordinator last acknowledged this member.
    let mut alive_at = Instant::now();
    loop {
        if *shutdown.borrow() {
            return;
        }
        let request = join_request(&shared, &coordinator, &settings);
        shared.lock().rebalancing = true;
        let joined = tokio::select! {
            joined = coordinator.join(&request, settings.rebalance_timeout) => joined,
            _ = shutdown.wait_for(|stop| *stop) => return,
        };
        let joined = match joined {
            Ok(joined) => joined,
            Err(error) => {
                match error.code() {
                    Some(ErrorCode::UnknownMemberId | ErrorCode::IllegalGeneration) => {
                        shared.lose(&error);
                        backoff = settings.retry_backoff;
                    }
                    // Another rebalance started meanwhile: join it at once.
                    Some(ErrorCode::RebalanceInProgress) => {}
                    _ if error.is_retriable() => {
                        tracing::debug!(group = coordinator.group(), %error, "join failed; retrying");
                        if alive_at.elapsed() > settings.session_timeout {
                            shared.lose(&error);
                        }
                        tokio::select! {
                            () = tokio::time::sleep(backoff) => {}
                            _ = shutdown.wait_for(|stop| *stop) => return,
                        }
                        backoff = (backoff * 2).min(JOIN_BACKOFF_MAX);
                    }
                    _ => {
                        tracing::error!(group = coordinator.group(), %error, "cannot join the group");
                        shared.fail(error);
                        return;
                    }
                }
                continue;
            }
        };
        backoff = settings.retry_backoff;
        alive_at = Instant::now();
        let interval = joined.heartbeat_interval.max(HEARTBEAT_INTERVAL_MIN);
        let member = MemberGeneration {
            member_id: joined.member_id.clone(),
            generation: joined.generation,
        };
        tracing::info!(group = coordinator.group(), member = %member.member_id,
            generation = member.generation, partitions = joined.assignment.len(), "joined");
        shared.joined(joined);
        match heartbeats(
            &shared,
            &coordinator,
            &settings,
            &member,
            interval,
            &mut alive_at,
            &mut shutdown,
        )
        .await
        {
            Next::Rejoin => {}
            Next::Shutdown => return,
        }
    }
}

/// The JoinGroup request: subscription, identity, and what is owned now.
fn join_request(
    shared: &Shared,
    coordinator: &Coordinator,
    settings: &Settings,
) -> JoinGroupRequest {
    let state = shared.lock();
    let millis = |duration: Duration| u32::try_from(duration.as_millis()).unwrap_or(u32::MAX);
    JoinGroupRequest {
        group: coordinator.group().to_owned(),
        member_id: state.member_id.clone(),
        instance_id: settings.instance_id.clone(),
        client_id: settings.client_id.clone(),
        topics: settings.topics.clone(),
        session_timeout_ms: millis(settings.session_timeout),
        rebalance_timeout_ms: millis(settings.rebalance_timeout),
        owned: by_topic(&state.assignment),
    }
}

/// Sends heartbeats until a rebalance, a lost membership or shutdown.
async fn heartbeats(
    shared: &Shared,
    coordinator: &Coordinator,
    settings: &Settings,
    member: &MemberGeneration,
    interval: Duration,
    alive_at: &mut Instant,
    shutdown: &mut watch::Receiver<bool>,
) -> Next {
    let mut next_commit = settings.auto_commit.map(|every| Instant::now() + every);
    let mut next_heartbeat = Instant::now() + interval;
    loop {
        let wake = next_commit.map_or(next_heartbeat, |at| at.min(next_heartbeat));
        tokio::select! {
            () = tokio::time::sleep_until(wake) => {}
            _ = shutdown.wait_for(|stop| *stop) => return Next::Shutdown,
        }
        if let (Some(at), Some(every)) = (next_commit, settings.auto_commit)
            && Instant::now() >= at
        {
            if let Err(error) = commit_completed(shared, coordinator).await {
                tracing::debug!(group = coordinator.group(), %error, "auto-commit failed");
            }
            next_commit = Some(Instant::now() + every);
        }
        if Instant::now() < next_heartbeat {
            continue;
        }
        next_heartbeat = Instant::now() + interval;
        let result = coordinator
            .heartbeat(
                &member.member_id,
                member.generation,
                settings.session_timeout,
            )
            .await;
        match result {
            Ok(()) => *alive_at = Instant::now(),
            Err(error) => match error.code() {
                Some(ErrorCode::RebalanceInProgress) => {
                    *alive_at = Instant::now();
                    // The generation is still current while the
                    // coordinator prepares the rebalance: save progress
                    // now, or the next owner of a moving partition redoes
                    // it.
                    if let Err(error) = commit_completed(shared, coordinator).await {
                        tracing::debug!(group = coordinator.group(), %error,
                            "commit before rejoining failed; the next owner will replay those records");
                    }
                    return Next::Rejoin;
                }
                Some(ErrorCode::IllegalGeneration | ErrorCode::UnknownMemberId) => {
                    shared.lose(&error);
                    return Next::Rejoin;
                }
                _ => {
                    tracing::debug!(group = coordinator.group(), %error, "heartbeat failed");
                    if alive_at.elapsed() > settings.session_timeout {
                        // The coordinator has removed this member by now:
                        // stop consuming before someone else starts.
                        shared.lose(&error);
                        return Next::Rejoin;
                    }
                }
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn joined(generation: i32, partitions: &[u32]) -> Joined {
        Joined {
            member_id: "m1".to_owned(),
            generation,
            assignment: partitions
                .iter()
                .map(|&p| TopicPartition::new("t", p))
                .collect(),
            heartbeat_interval: Duration::from_secs(1),
            members: 2,
        }
    }

    #[test]
    fn a_join_revokes_from_the_tracker_what_the_member_no_longer_owns() {
        let shared = Shared::new(OffsetTracker::default());
        shared.joined(joined(1, &[0, 1]));
        {
            let mut state = shared.lock();
            for p in [0, 1] {
                state
                    .tracker
                    .assign(TopicPartition::new("t", p), Some(Offset(10)));
            }
        }
        shared.joined(joined(2, &[1]));
        let state = shared.lock();
        assert!(!state.tracker.is_assigned(&TopicPartition::new("t", 0)));
        assert!(
            state.tracker.is_assigned(&TopicPartition::new("t", 1)),
            "kept, not paused"
        );
        assert_eq!(state.generation, 2);
        assert_eq!(*shared.changed.borrow(), 2);
    }

    #[test]
    fn losing_the_membership_revokes_everything_and_forgets_the_member_id() {
        let shared = Shared::new(OffsetTracker::default());
        shared.joined(joined(3, &[0]));
        shared
            .lock()
            .tracker
            .assign(TopicPartition::new("t", 0), Some(Offset(1)));
        let error = ClientError::Broker {
            code: ErrorCode::IllegalGeneration,
            context: String::new(),
            detail: None,
        };
        shared.lose(&error);
        let state = shared.lock();
        assert!(state.member_id.is_none());
        assert!(state.assignment.is_empty());
        assert!(state.tracker.to_commit().is_empty());
        assert_eq!(state.lost_count, 1);
    }
}
