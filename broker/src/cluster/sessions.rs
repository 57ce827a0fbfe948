//! The controller leader's view of broker sessions, pure: a broker silent
//! past the session timeout is fenced, and a fenced broker whose heartbeat
//! shows it caught up with the metadata of its registration is unfenced.
//! A broker that is leaving (a controlled shutdown) is fenced at once and
//! stays fenced until a new process of it registers, so that its
//! leaderships move before it stops rather than a session timeout after.
//!
//! Time comes in as an argument and the fences and unfences to propose go
//! out as commands; the controller service proposes them through Raft, the
//! simulator applies them to its state machine. Each broker has at most
//! one such proposal in flight ([`SessionBook::settled`] ends it), so that
//! a tick or a heartbeat does not repeat it.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use corelog_controller::{BrokerRecord, Command, MetadataState, NodeId};

/// A broker's session as the leader sees it.
#[derive(Clone, Copy, Debug)]
struct Session {
    /// When this leader last heard the broker, or (until it does) when the
    /// leadership started: the session timeout runs from here.
    last_heartbeat: Instant,
    /// The metadata version at which its registration applied: it is
    /// unfenced once it reports at least this version.
    registered_version: u64,
    /// Whether this leadership has heard the broker (a heartbeat or a
    /// registration). A new leader starts every timer without having
    /// heard anyone: until then the broker's liveness is unknown.
    heard: bool,
}

/// Why a heartbeat is refused: the broker must register (again).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HeartbeatRefusal {
    /// The broker is not registered.
    #[error("broker {node} is not registered; register first")]
    NotRegistered {
        /// The broker.
        node: NodeId,
    },
    /// The heartbeat comes from another process than the registered one.
    #[error("broker {node} is registered with incarnation {registered}, not {got}; register again")]
    StaleIncarnation {
        /// The broker.
        node: NodeId,
        /// The registered incarnation.
        registered: u64,
        /// The heartbeat's.
        got: u64,
    },
}

/// What a heartbeat found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Heartbeat {
    /// Whether the broker is fenced (before `unfence` applies).
    pub fenced: bool,
    /// The unfence to propose: the broker caught up since registering.
    pub unfence: Option<Command>,
}

/// The sessions of the brokers, kept by the controller leader.
#[derive(Debug)]
pub struct SessionBook {
    timeout: Duration,
    sessions: BTreeMap<NodeId, Session>,
    /// Brokers with a fence or unfence proposal in flight.
    pending: BTreeSet<NodeId>,
    /// Whether this node has led since it last stopped leading: a new
    /// leader gives every broker a full timeout from its first tick.
    leading: bool,
    /// The brokers shutting down, by the incarnation that said so.
    leaving: BTreeMap<NodeId, u64>,
}

impl SessionBook {
    /// No sessions; a broker is fenced after `timeout` without a heartbeat.
    #[must_use]
    pub fn new(timeout: Duration) -> SessionBook {
        SessionBook {
            timeout,
            sessions: BTreeMap::new(),
            pending: BTreeSet::new(),
            leading: false,
            leaving: BTreeMap::new(),
        }
    }

    /// The session timeout.
    #[must_use]
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// `node`'s registration applied at metadata `version`: its session
    /// starts now, and it is unfenced once it reports that version.
    pub fn registered(&mut self, node: NodeId, version: u64, now: Instant) {
        self.leaving.remove(&node);
        self.sessions.insert(
            node,
            Session {
                last_heartbeat: now,
                registered_version: version,
                heard: true,
            },
        );
    }

    /// A heartbeat from `node` (the process `incarnation`) that has applied
    /// `metadata_version`.
    ///
    /// # Errors
    /// [`HeartbeatRefusal`] when the broker must register again.
    pub fn heartbeat(
        &mut self,
        state: &MetadataState,
        node: NodeId,
        incarnation: u64,
        metadata_version: u64,
        now: Instant,
    ) -> Result<Heartbeat, HeartbeatRefusal> {
        let record = registered(state, node, incarnation)?;
        let session = self.sessions.entry(node).or_insert(Session {
            last_heartbeat: now,
            registered_version: 0,
            heard: true,
        });
        session.last_heartbeat = now;
        session.heard = true;
        let caught_up = metadata_version >= session.registered_version;
        let leaving = self.leaving.get(&node) == Some(&incarnation);
        let unfence = (record.fenced && caught_up && !leaving && self.pending.insert(node))
            .then_some(Command::UnfenceBroker { node, incarnation });
        Ok(Heartbeat {
            fenced: record.fenced,
            unfence,
        })
    }

    /// `node` (the process `incarnation`) is shutting down: the fence to
    /// propose now, if it is not fenced and has no proposal in flight (the
    /// next tick proposes it otherwise). It stays fenced, whatever its
    /// heartbeats say, until a new process registers.
    ///
    /// # Errors
    /// [`HeartbeatRefusal`] when `node` is not registered with that
    /// incarnation.
    pub fn leave(
        &mut self,
        state: &MetadataState,
        node: NodeId,
        incarnation: u64,
    ) -> Result<Option<Command>, HeartbeatRefusal> {
        let record = registered(state, node, incarnation)?;
        self.leaving.insert(node, incarnation);
        Ok((!record.fenced && self.pending.insert(node)).then_some(Command::FenceBroker { node }))
    }

    /// Whether `node` said it is shutting down (to this leader).
    #[must_use]
    pub fn is_leaving(&self, node: NodeId) -> bool {
        self.leaving.contains_key(&node)
    }

    /// Leader tick: the fences to propose for unfenced brokers whose
    /// session expired or that are leaving. The first tick of a leadership
    /// gives every broker a full timeout from `now` instead (a new leader
    /// knows no session).
    pub fn expired(&mut self, state: &MetadataState, now: Instant) -> Vec<Command> {
        if !self.leading {
            self.leading = true;
            for session in self.sessions.values_mut() {
                session.last_heartbeat = now;
                session.heard = false;
            }
            for node in state.brokers().keys() {
                self.sessions.entry(*node).or_insert(Session {
                    last_heartbeat: now,
                    registered_version: 0,
                    heard: false,
                });
            }
        }
        let expired: Vec<NodeId> = state
            .brokers()
            .values()
            .filter(|broker| !broker.fenced)
            .filter(|broker| {
                self.leaving.get(&broker.id) == Some(&broker.incarnation)
                    || self.sessions.get(&broker.id).is_none_or(|session| {
                        now.saturating_duration_since(session.last_heartbeat) > self.timeout
                    })
            })
            .map(|broker| broker.id)
            .collect();
        expired
            .into_iter()
            .filter(|node| self.pending.insert(*node))
            .map(|node| Command::FenceBroker { node })
            .collect()
    }

    /// The fence or unfence proposed for `node` finished (applied or not):
    /// the next tick or heartbeat may propose again.
    pub fn settled(&mut self, node: NodeId) {
        self.pending.remove(&node);
    }

    /// How long since `node`'s last heartbeat (or registration) reached
    /// this leader; `None` if neither did during this leadership.
    #[must_use]
    pub fn heartbeat_age(&self, node: NodeId, now: Instant) -> Option<Duration> {
        self.sessions
            .get(&node)
            .filter(|session| session.heard)
            .map(|session| now.saturating_duration_since(session.last_heartbeat))
    }

    /// This node stopped leading the controller. The proposals in flight
    /// are forgotten with the leadership: they may never finish (their
    /// tasks can end with the term), and a broker whose proposal was lost
    /// must not stay unproposed when this node leads again. A late
    /// `settled` from an old term only allows one repeated proposal, which
    /// the state machine applies as a no-op.
    pub fn stop_leading(&mut self) {
        self.leading = false;
        self.pending.clear();
        // A leaving broker asks the next leader again.
        self.leaving.clear();
    }
}

/// `node`'s record, if the process `incarnation` is the registered one.
fn registered(
    state: &MetadataState,
    node: NodeId,
    incarnation: u64,
) -> Result<&BrokerRecord, HeartbeatRefusal> {
    let record = state
        .brokers()
        .get(&node)
        .ok_or(HeartbeatRefusal::NotRegistered { node })?;
    if record.incarnation != incarnation {
        return Err(HeartbeatRefusal::StaleIncarnation {
            node,
            registered: record.incarnation,
            got: incarnation,
        });
    }
    Ok(record)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;

    fn ms(millis: u64) -> Duration {
        Duration::from_millis(millis)
    }

    fn apply(state: &mut MetadataState, command: &Command) {
        let index = state.version() + 1;
        if let Err(error) = state.apply(index, command) {
            panic!("{command:?} refused: {error}");
        }
    }

    fn registered(node: u64, incarnation: u64) -> Command {
        Command::RegisterBroker {
            node: NodeId(node),
            host: "127.0.0.1".to_owned(),
            port: 9000,
            rack: None,
            shard_count: 1,
            incarnation,
        }
    }

    #[test]
    fn a_silent_broker_is_fenced_once_and_a_caught_up_one_unfenced() {
        let start = Instant::now();
        let mut state = MetadataState::default();
        let mut book = SessionBook::new(ms(100));
        apply(&mut state, &registered(1, 7));
        book.registered(NodeId(1), state.version(), start);

        let early = book.heartbeat(&state, NodeId(1), 7, 0, start).unwrap();
        assert!(early.fenced);
        assert_eq!(early.unfence, None, "not caught up with its registration");
        let caught_up = book
            .heartbeat(&state, NodeId(1), 7, state.version(), start)
            .unwrap();
        let Some(unfence) = caught_up.unfence else {
            panic!("a caught-up broker is unfenced");
        };
        assert_eq!(
            book.heartbeat(&state, NodeId(1), 7, state.version(), start)
                .unwrap()
                .unfence,
            None,
            "one proposal in flight"
        );
        apply(&mut state, &unfence);
        book.settled(NodeId(1));

        assert!(book.expired(&state, start + ms(50)).is_empty());
        book.heartbeat(&state, NodeId(1), 7, state.version(), start + ms(50))
            .unwrap();
        assert!(book.expired(&state, start + ms(150)).is_empty());
        let fences = book.expired(&state, start + ms(151));
        assert_eq!(fences, vec![Command::FenceBroker { node: NodeId(1) }]);
        assert!(
            book.expired(&state, start + ms(200)).is_empty(),
            "not proposed twice while in flight"
        );
    }

    /// Found by the simulator (seed 1115 of the stream-frame change): a
    /// controller failover ended the unfence task of two brokers before it
    /// called `settled`, and the next leader never unfenced them.
    #[test]
    fn a_proposal_lost_with_the_leadership_does_not_block_the_next_term() {
        let start = Instant::now();
        let mut state = MetadataState::default();
        let mut book = SessionBook::new(ms(100));
        apply(&mut state, &registered(1, 7));
        book.registered(NodeId(1), state.version(), start);
        let heartbeat = |book: &mut SessionBook, state: &MetadataState| {
            book.heartbeat(state, NodeId(1), 7, state.version(), start)
                .unwrap()
                .unfence
        };
        assert!(heartbeat(&mut book, &state).is_some());
        // The leadership moves; the unfence never settles.
        book.stop_leading();
        assert!(book.expired(&state, start).is_empty());
        assert_eq!(
            heartbeat(&mut book, &state),
            Some(Command::UnfenceBroker {
                node: NodeId(1),
                incarnation: 7
            }),
            "the next leader proposes the unfence again"
        );
    }

    /// A new leader gives every broker a full timeout, but has heard from
    /// none of them: their heartbeat age is unknown (so `cluster health`
    /// cannot call a dead one alive) until each heartbeats or registers
    /// (issue 35, item 21).
    #[test]
    fn a_new_leader_knows_no_heartbeat_until_one_arrives() {
        let start = Instant::now();
        let mut state = MetadataState::default();
        let mut book = SessionBook::new(ms(100));
        for node in [1, 2] {
            apply(&mut state, &registered(node, 7));
        }
        // Leadership gained: the first tick starts every session's timer.
        assert!(book.expired(&state, start).is_empty());
        for node in [1, 2] {
            assert_eq!(
                book.heartbeat_age(NodeId(node), start + ms(10)),
                None,
                "broker {node} was not heard by this leader"
            );
        }
        book.heartbeat(&state, NodeId(1), 7, state.version(), start + ms(20))
            .unwrap();
        assert_eq!(book.heartbeat_age(NodeId(1), start + ms(30)), Some(ms(10)));
        assert_eq!(book.heartbeat_age(NodeId(2), start + ms(30)), None);
        book.registered(NodeId(2), state.version(), start + ms(40));
        assert_eq!(book.heartbeat_age(NodeId(2), start + ms(50)), Some(ms(10)));

        // Leading again later: what the last leadership heard is no news.
        book.stop_leading();
        assert!(book.expired(&state, start + ms(60)).is_empty());
        assert_eq!(book.heartbeat_age(NodeId(1), start + ms(70)), None);
    }

    #[test]
    fn another_incarnation_must_register_and_a_new_leader_gives_a_full_timeout() {
        let start = Instant::now();
        let mut state = MetadataState::default();
        let mut book = SessionBook::new(ms(100));
        assert_eq!(
            book.heartbeat(&state, NodeId(2), 1, 0, start),
            Err(HeartbeatRefusal::NotRegistered { node: NodeId(2) })
        );
        apply(&mut state, &registered(2, 3));
        apply(
            &mut state,
            &Command::UnfenceBroker {
                node: NodeId(2),
                incarnation: 3,
            },
        );
        assert!(matches!(
            book.heartbeat(&state, NodeId(2), 2, state.version(), start),
            Err(HeartbeatRefusal::StaleIncarnation { registered: 3, .. })
        ));
        // Leadership (re)gained long after the last heartbeat: a full
        // timeout from the first tick, not an instant fence.
        let later = start + ms(1_000);
        assert!(book.expired(&state, later).is_empty());
        assert_eq!(book.expired(&state, later + ms(101)).len(), 1);
        book.settled(NodeId(2));
        book.stop_leading();
        assert!(book.expired(&state, later + ms(500)).is_empty());
    }

    #[test]
    fn a_leaving_broker_is_fenced_at_once_and_stays_fenced_until_it_registers_again() {
        let start = Instant::now();
        let mut state = MetadataState::default();
        let mut book = SessionBook::new(ms(100));
        apply(&mut state, &registered(1, 7));
        book.registered(NodeId(1), state.version(), start);
        let unfence = book
            .heartbeat(&state, NodeId(1), 7, state.version(), start)
            .unwrap()
            .unfence
            .unwrap();
        apply(&mut state, &unfence);
        book.settled(NodeId(1));

        assert!(matches!(
            book.leave(&state, NodeId(1), 6),
            Err(HeartbeatRefusal::StaleIncarnation { registered: 7, .. })
        ));
        assert!(!book.is_leaving(NodeId(1)), "an older process cannot leave");
        let fence = book.leave(&state, NodeId(1), 7).unwrap();
        assert_eq!(fence, Some(Command::FenceBroker { node: NodeId(1) }));
        assert!(book.is_leaving(NodeId(1)));
        assert_eq!(book.leave(&state, NodeId(1), 7).unwrap(), None, "in flight");
        // The proposal was lost: the tick proposes it again, long before the
        // session would expire.
        book.settled(NodeId(1));
        assert_eq!(
            book.expired(&state, start + ms(1)),
            [Command::FenceBroker { node: NodeId(1) }]
        );
        apply(&mut state, &Command::FenceBroker { node: NodeId(1) });
        book.settled(NodeId(1));
        let heartbeat = book
            .heartbeat(&state, NodeId(1), 7, state.version(), start + ms(2))
            .unwrap();
        assert!(heartbeat.fenced);
        assert_eq!(heartbeat.unfence, None, "a leaving broker stays fenced");

        // Its next process registers and is unfenced as usual.
        apply(&mut state, &registered(1, 8));
        book.registered(NodeId(1), state.version(), start + ms(3));
        assert!(!book.is_leaving(NodeId(1)));
        let heartbeat = book
            .heartbeat(&state, NodeId(1), 8, state.version(), start + ms(4))
            .unwrap();
        assert!(heartbeat.unfence.is_some());
    }
}
