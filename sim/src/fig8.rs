//! A targeted fault schedule for Raft's figure 8: the interleaving in which
//! a leader takes over an older epoch's uncommitted suffix, gets it onto a
//! majority before its own epoch-start marker, and dies, while a replica
//! holding a different record of a newer epoch at the same offset is
//! still able to win the next election.
//!
//! Random faults reach that interleaving too rarely to be a test of it
//! (five conditions in a row, each a few per cent likely). This schedule
//! drives it step by step, reacting only to what an outside observer sees
//! (roles, log ends, durable ends, messages on the wire), never to the
//! code under test's internals, with three nodes `first`, `second`,
//! `third` chosen as it goes:
//!
//! 1. `first` leads: its links to the other replicas are cut, and once it
//!    holds a durable suffix no one else has, it crashes.
//! 2. A new leader `second` takes a newer epoch: its links to the other
//!    replicas are cut, and once its marker is durable, it crashes. Its
//!    log now ends in that marker, at the offset where `first` has the
//!    older suffix.
//! 3. `first` restarts and wins the next epoch over `third` (its log is
//!    longer). Its pushes to `third` that carry a batch of its new epoch
//!    (the marker first) are lost; the ones with only the older suffix
//!    arrive. Once `third` appended and synced from one and its answer
//!    reached `first`, `first` crashes: `third` holds (part of) the older
//!    suffix and not the marker.
//! 4. `second` restarts and wins (its last epoch is newer than `third`'s)
//!    and truncates `third`'s suffix. That is only safe if `first` did not
//!    count the suffix committed before its own marker was on a majority.
//!
//! A step that does not come within [`STEP_TIMEOUT_MS`] (another node won
//! an election, a push was lost) abandons the attempt: every node
//! restarts, every cut heals, and the schedule starts over.

use corelog_replication::RoleView;
use corelog_wire::types::{LeaderEpoch, Offset};

/// How long one step may wait for what it expects, milliseconds.
pub const STEP_TIMEOUT_MS: u64 = 1_200;

/// What the schedule sees of one node.
#[derive(Clone, Copy, Debug)]
pub struct NodeView {
    /// The node.
    pub id: u32,
    /// Whether its process is down.
    pub down: bool,
    /// Its replica's role (`Offline` when down).
    pub role: RoleView,
    /// End of its log (appended, perhaps not yet durable).
    pub appended_end: Offset,
    /// End of what is durable on its disk.
    pub durable_end: Offset,
    /// Where its current leadership's marker is, if it leads and the
    /// marker is appended.
    pub marker: Option<Offset>,
}

/// What the schedule asks the simulator to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Act {
    /// Cut the link from one node to another (messages in flight on it are
    /// lost).
    Cut { from: u32, to: u32 },
    /// Heal every link this schedule cut.
    HealCuts,
    /// Crash a node now, to stay down until [`Act::Restart`].
    Crash(u32),
    /// Crash a node once the tasks ready now have run (the message just
    /// delivered to it is handled first).
    CrashAfterHandling(u32),
    /// Restart a node that the schedule crashed.
    Restart(u32),
    /// Lose the message being delivered.
    Lose,
}

#[derive(Clone, Copy, Debug)]
enum Awaiting {
    /// Waiting for a leader, all three nodes up.
    Leader,
    /// `first` leads, cut off from the replicas; waiting for it to hold a
    /// durable suffix beyond every other log.
    LoneSuffix { first: u32 },
    /// `first` is down; waiting for another node to lead a newer epoch.
    SecondLeader { first: u32 },
    /// `second` leads `epoch`, cut off; waiting for its marker to be
    /// durable.
    SecondMarker {
        first: u32,
        second: u32,
        epoch: LeaderEpoch,
    },
    /// `first` is back; waiting for it to lead an epoch newer than
    /// `second`'s.
    FirstLeads {
        first: u32,
        second: u32,
        epoch: LeaderEpoch,
    },
    /// `first` leads `epoch`; waiting for `third` to append past
    /// `third_end` (its end when first seen in this step) from a push.
    PushToThird {
        first: u32,
        second: u32,
        third: u32,
        epoch: LeaderEpoch,
        third_end: Option<Offset>,
    },
    /// `third` appended from `first`'s push; waiting for `third` to sync it
    /// (`armed`), then for its answer to reach `first`.
    ThirdAnswer {
        first: u32,
        second: u32,
        third: u32,
        epoch: LeaderEpoch,
        third_end: Offset,
        armed: bool,
    },
    /// `first` is down and `second` back; waiting for a newer leader.
    FinalLeader { first: u32, epoch: LeaderEpoch },
}

/// The schedule's state.
#[derive(Debug)]
pub struct Fig8Schedule {
    step: Awaiting,
    step_since_ms: u64,
    /// Attempts that reached step 4 (statistics).
    pub completed: u64,
}

impl Default for Fig8Schedule {
    fn default() -> Self {
        Self {
            step: Awaiting::Leader,
            step_since_ms: 0,
            completed: 0,
        }
    }
}

fn leads(view: &NodeView) -> Option<LeaderEpoch> {
    match view.role {
        RoleView::Leader { epoch, .. } if !view.down => Some(epoch),
        _ => None,
    }
}

fn view(nodes: &[NodeView], id: u32) -> Option<&NodeView> {
    nodes.iter().find(|node| node.id == id)
}

/// The leader of the newest epoch among `nodes` other than `except`, if
/// that epoch is above `above`.
fn new_leader(
    nodes: &[NodeView],
    except: Option<u32>,
    above: Option<LeaderEpoch>,
) -> Option<(u32, LeaderEpoch)> {
    nodes
        .iter()
        .filter(|node| Some(node.id) != except)
        .filter_map(|node| leads(node).map(|epoch| (node.id, epoch)))
        .filter(|(_, epoch)| above.is_none_or(|above| *epoch > above))
        .max_by_key(|(_, epoch)| *epoch)
}

fn cut_from(nodes: &[NodeView], from: u32) -> Vec<Act> {
    nodes
        .iter()
        .filter(|node| node.id != from)
        .map(|node| Act::Cut { from, to: node.id })
        .collect()
}

impl Fig8Schedule {
    fn enter(&mut self, step: Awaiting, now_ms: u64) {
        self.step = step;
        self.step_since_ms = now_ms;
    }

    /// Abandons the attempt: heal, restart everyone, start over.
    fn abandon(&mut self, nodes: &[NodeView], now_ms: u64) -> Vec<Act> {
        self.enter(Awaiting::Leader, now_ms);
        let mut acts = vec![Act::HealCuts];
        acts.extend(
            nodes
                .iter()
                .filter(|node| node.down)
                .map(|node| Act::Restart(node.id)),
        );
        acts
    }

    /// One look at the nodes (after every step of the simulation).
    pub fn observe(&mut self, nodes: &[NodeView], now_ms: u64) -> Vec<Act> {
        if !matches!(self.step, Awaiting::Leader) && now_ms > self.step_since_ms + STEP_TIMEOUT_MS {
            return self.abandon(nodes, now_ms);
        }
        match self.step {
            Awaiting::Leader => {
                if nodes.len() != 3 || nodes.iter().any(|node| node.down) {
                    return Vec::new();
                }
                let Some((first, _)) = new_leader(nodes, None, None) else {
                    return Vec::new();
                };
                self.enter(Awaiting::LoneSuffix { first }, now_ms);
                cut_from(nodes, first)
            }
            Awaiting::LoneSuffix { first } => {
                let Some(leader) = view(nodes, first) else {
                    return Vec::new();
                };
                if leads(leader).is_none() {
                    return self.abandon(nodes, now_ms);
                }
                let others_end = nodes
                    .iter()
                    .filter(|node| node.id != first)
                    .map(|node| node.appended_end)
                    .max()
                    .unwrap_or(Offset(0));
                if leader.durable_end > others_end {
                    self.enter(Awaiting::SecondLeader { first }, now_ms);
                    return vec![Act::Crash(first), Act::HealCuts];
                }
                Vec::new()
            }
            Awaiting::SecondLeader { first } => {
                let Some((second, epoch)) = new_leader(nodes, Some(first), None) else {
                    return Vec::new();
                };
                self.enter(
                    Awaiting::SecondMarker {
                        first,
                        second,
                        epoch,
                    },
                    now_ms,
                );
                cut_from(nodes, second)
            }
            Awaiting::SecondMarker {
                first,
                second,
                epoch,
            } => {
                let Some(leader) = view(nodes, second) else {
                    return Vec::new();
                };
                if leads(leader) != Some(epoch) {
                    return self.abandon(nodes, now_ms);
                }
                match leader.marker {
                    Some(marker) if leader.durable_end > marker => {
                        self.enter(
                            Awaiting::FirstLeads {
                                first,
                                second,
                                epoch,
                            },
                            now_ms,
                        );
                        vec![Act::Crash(second), Act::HealCuts, Act::Restart(first)]
                    }
                    _ => Vec::new(),
                }
            }
            Awaiting::FirstLeads {
                first,
                second,
                epoch,
            } => match new_leader(nodes, Some(second), Some(epoch)) {
                Some((leader, led)) if leader == first => {
                    let Some(third) = nodes
                        .iter()
                        .map(|node| node.id)
                        .find(|id| *id != first && *id != second)
                    else {
                        return self.abandon(nodes, now_ms);
                    };
                    self.enter(
                        Awaiting::PushToThird {
                            first,
                            second,
                            third,
                            epoch: led,
                            third_end: None,
                        },
                        now_ms,
                    );
                    Vec::new()
                }
                Some(_) => self.abandon(nodes, now_ms),
                None => Vec::new(),
            },
            Awaiting::PushToThird {
                first,
                second,
                third,
                epoch,
                third_end,
            } => {
                if view(nodes, first).and_then(leads) != Some(epoch) {
                    return self.abandon(nodes, now_ms);
                }
                let Some(end) = view(nodes, third).map(|node| node.appended_end) else {
                    return Vec::new();
                };
                match third_end {
                    None => {
                        self.step = Awaiting::PushToThird {
                            first,
                            second,
                            third,
                            epoch,
                            third_end: Some(end),
                        };
                        Vec::new()
                    }
                    Some(before) if end > before => {
                        self.enter(
                            Awaiting::ThirdAnswer {
                                first,
                                second,
                                third,
                                epoch,
                                third_end: before,
                                armed: false,
                            },
                            now_ms,
                        );
                        Vec::new()
                    }
                    Some(_) => Vec::new(),
                }
            }
            Awaiting::ThirdAnswer {
                first,
                second,
                third,
                epoch,
                third_end,
                armed: false,
            } => {
                if view(nodes, third).is_some_and(|node| node.durable_end > third_end) {
                    self.step = Awaiting::ThirdAnswer {
                        first,
                        second,
                        third,
                        epoch,
                        third_end,
                        armed: true,
                    };
                }
                Vec::new()
            }
            Awaiting::ThirdAnswer { armed: true, .. } => Vec::new(),
            Awaiting::FinalLeader { first, epoch } => {
                if new_leader(nodes, Some(first), Some(epoch)).is_some() {
                    self.completed += 1;
                    self.enter(Awaiting::Leader, now_ms);
                    return vec![Act::HealCuts, Act::Restart(first)];
                }
                Vec::new()
            }
        }
    }

    /// A message from `from` is being delivered to `to`: `push_answer` when
    /// it answers a push, `pushed_epoch` the newest epoch of the batches a
    /// push carries.
    pub fn on_deliver(
        &mut self,
        from: u32,
        to: u32,
        push_answer: bool,
        pushed_epoch: Option<LeaderEpoch>,
        now_ms: u64,
    ) -> Vec<Act> {
        match self.step {
            Awaiting::PushToThird {
                first,
                third,
                epoch,
                ..
            }
            | Awaiting::ThirdAnswer {
                first,
                third,
                epoch,
                armed: false,
                ..
            } if from == first && to == third && pushed_epoch >= Some(epoch) => vec![Act::Lose],
            Awaiting::ThirdAnswer {
                first,
                second,
                third,
                epoch,
                armed: true,
                ..
            } if from == third && to == first && push_answer => {
                self.enter(Awaiting::FinalLeader { first, epoch }, now_ms);
                vec![Act::CrashAfterHandling(first), Act::Restart(second)]
            }
            _ => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(id: u32, role: RoleView, appended: u64, durable: u64) -> NodeView {
        NodeView {
            id,
            down: false,
            role,
            appended_end: Offset(appended),
            durable_end: Offset(durable),
            marker: None,
        }
    }

    fn leader(epoch: u32) -> RoleView {
        RoleView::Leader {
            epoch: LeaderEpoch(epoch),
            accepting_writes: true,
        }
    }

    fn down(id: u32) -> NodeView {
        NodeView {
            down: true,
            ..node(id, RoleView::Offline, 0, 0)
        }
    }

    /// Walks the whole chain with nodes 1 (first), 2 (second), 3 (third).
    #[test]
    fn the_schedule_walks_the_fig_8_chain() {
        let follower = RoleView::Offline;
        let mut schedule = Fig8Schedule::default();
        let acts = schedule.observe(
            &[
                node(1, leader(1), 3, 3),
                node(2, follower, 3, 3),
                node(3, follower, 3, 3),
            ],
            10,
        );
        assert_eq!(
            acts,
            vec![Act::Cut { from: 1, to: 2 }, Act::Cut { from: 1, to: 3 }]
        );
        // Nothing beyond the others yet; then a durable lone suffix.
        let acts = schedule.observe(
            &[
                node(1, leader(1), 5, 3),
                node(2, follower, 3, 3),
                node(3, follower, 3, 3),
            ],
            11,
        );
        assert!(acts.is_empty());
        let acts = schedule.observe(
            &[
                node(1, leader(1), 5, 5),
                node(2, follower, 3, 3),
                node(3, follower, 3, 3),
            ],
            12,
        );
        assert_eq!(acts, vec![Act::Crash(1), Act::HealCuts]);
        // 2 leads epoch 2; once its marker (at 3) is durable it crashes.
        let acts = schedule.observe(
            &[down(1), node(2, leader(2), 3, 3), node(3, follower, 3, 3)],
            20,
        );
        assert_eq!(
            acts,
            vec![Act::Cut { from: 2, to: 1 }, Act::Cut { from: 2, to: 3 }]
        );
        let with_marker = NodeView {
            marker: Some(Offset(3)),
            ..node(2, leader(2), 4, 4)
        };
        let acts = schedule.observe(&[down(1), with_marker, node(3, follower, 3, 3)], 21);
        assert_eq!(acts, vec![Act::Crash(2), Act::HealCuts, Act::Restart(1)]);
        // 1 leads epoch 3; its new-epoch pushes to 3 are lost, old ones pass.
        assert!(
            schedule
                .observe(
                    &[node(1, leader(3), 6, 6), down(2), node(3, follower, 3, 3)],
                    30
                )
                .is_empty()
        );
        assert!(
            schedule
                .observe(
                    &[node(1, leader(3), 6, 6), down(2), node(3, follower, 3, 3)],
                    31
                )
                .is_empty()
        );
        assert_eq!(
            schedule.on_deliver(1, 3, false, Some(LeaderEpoch(3)), 32),
            vec![Act::Lose]
        );
        assert!(
            schedule
                .on_deliver(1, 3, false, Some(LeaderEpoch(1)), 32)
                .is_empty()
        );
        assert!(
            schedule
                .observe(
                    &[node(1, leader(3), 6, 6), down(2), node(3, follower, 5, 3)],
                    33
                )
                .is_empty()
        );
        // An answer before 3 synced does not count; one after does.
        assert!(schedule.on_deliver(3, 1, true, None, 34).is_empty());
        assert!(
            schedule
                .observe(
                    &[node(1, leader(3), 6, 6), down(2), node(3, follower, 5, 5)],
                    35
                )
                .is_empty()
        );
        assert_eq!(
            schedule.on_deliver(3, 1, true, None, 36),
            vec![Act::CrashAfterHandling(1), Act::Restart(2)]
        );
        // 2 wins epoch 4: the chain is complete and 1 comes back.
        let acts = schedule.observe(
            &[down(1), node(2, leader(4), 5, 5), node(3, follower, 5, 5)],
            40,
        );
        assert_eq!(acts, vec![Act::HealCuts, Act::Restart(1)]);
        assert_eq!(schedule.completed, 1);
    }

    #[test]
    fn a_step_that_does_not_come_abandons_the_attempt() {
        let follower = RoleView::Offline;
        let mut schedule = Fig8Schedule::default();
        schedule.observe(
            &[
                node(1, leader(1), 3, 3),
                node(2, follower, 3, 3),
                node(3, follower, 3, 3),
            ],
            0,
        );
        schedule.observe(
            &[
                node(1, leader(1), 5, 5),
                node(2, follower, 3, 3),
                node(3, follower, 3, 3),
            ],
            1,
        );
        let acts = schedule.observe(
            &[down(1), node(2, follower, 3, 3), node(3, follower, 3, 3)],
            2 + STEP_TIMEOUT_MS,
        );
        assert_eq!(acts, vec![Act::HealCuts, Act::Restart(1)]);
        assert_eq!(schedule.completed, 0);
    }
}
