//! The cluster every broker belongs to, a single node included (a cluster
//! of one, its only controller voter): the controller role and this
//! broker's membership.
//!
//! - [`raft_log`]: the controller's Raft log file (bytes only; the format
//!   and recovery are `corelog-controller`'s).
//! - [`ready_loop`]: the controller node's Ready loop (records durable,
//!   then messages, then what committed, then `advance`), over a log file
//!   and a shell: the service here, or the simulator's controller
//!   processes.
//! - [`controller_service`]: the controller role on shard 0 of a voter:
//!   drives the Raft node, persists before sending, answers registrations,
//!   heartbeats, metadata long-polls and operations, fences brokers whose
//!   session expired, and runs partition elections.
//! - [`election`]: the leader's partition elections: which partitions need
//!   a leader (lost leader, preferred leader back) and what to publish from
//!   the replicas' `ReplicaQuery` answers (pure), and the round itself over
//!   a [`election::RoundHost`] (the service here, the simulator's
//!   controller in `sim/`).
//! - [`sessions`]: the leader's broker sessions, pure: whom to fence,
//!   whom to unfence.
//! - [`leader_work`]: when the leader consults those books (each
//!   heartbeat, each tick) and the proposals and rounds it spawns, over a
//!   [`leader_work::LeaderHost`]: the service here, and the simulator's
//!   controller processes in `sim/`, which so run it as production does.
//! - [`in_sync`]: the leader's view of in-sync replicas from the
//!   partition leaders' reports, and the partition health it implies
//!   (pure).
//! - [`membership`]: every broker, on shard 0: registers, heartbeats,
//!   follows the metadata log and publishes each version to its shards;
//!   forwards topic changes and producer-id requests to the controller.
//! - [`api`]: the controller APIs as shard 0 serves them.
//!
//! Inter-broker requests reach shard 0 whatever shard accepted the
//! connection: other shards forward them (with `Shard::invoke_on`); those a
//! broker sends itself are served in-process (`crate::peer`).
//!
//! The data path is not here: shards open the replicas the published
//! metadata places on them and follow its leadership
//! (`crate::runtime::replicas`), and the replica itself is
//! `crate::replica::ReplicatedPartition`.

pub mod access_rules;
pub mod api;
pub mod controller_service;
pub mod credentials;
pub mod election;
pub mod in_sync;
pub mod leader_work;
pub mod membership;
pub mod quota_entries;
pub mod raft_log;
pub mod ready_loop;
pub mod sessions;

use std::rc::Rc;

pub use controller_service::{
    ControllerRequestError, ControllerService, InternalTopicSpec, NewTopic,
};
pub use membership::{ClusterMember, MemberHost};

/// Shard 0's cluster parts.
#[derive(Debug, Clone)]
pub struct ClusterRole {
    /// The controller role, on voters only.
    pub controller: Option<Rc<ControllerService>>,
    /// This broker's membership.
    pub member: Rc<ClusterMember>,
}
