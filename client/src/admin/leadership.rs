//! Moving leaderships: to one replica ([`Admin::elect_leader`]), back to
//! every partition's preferred replica (`corelog cluster
//! rebalance-leaders`, built on it), and away from a broker in maintenance
//! ([`Admin::set_maintenance`]). Spoken with `AlterCluster`.

use std::time::Duration;

use corelog_wire::message::alter_cluster::{AlterClusterRequest, ClusterChange};

use super::Admin;
use crate::error::ClientError;

/// How long a broker may take to show a leadership move or a maintenance
/// change before answering `REQUEST_TIMED_OUT`: a transfer is retried
/// for 10 s, a maintenance drain takes one election round per partition.
pub const LEADERSHIP_CHANGE_TIMEOUT: Duration = Duration::from_secs(30);

/// A partition's leadership after a move.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Leadership {
    /// The leader.
    pub leader: u32,
    /// Its epoch.
    pub epoch: u32,
}

/// An `AlterCluster` answer without an error.
pub(super) struct Altered {
    /// The partition's leader (`ElectLeader`).
    leader: Option<u32>,
    /// Its epoch (`ElectLeader`), the partitions the broker still leads
    /// (`SetMaintenance`), or see `AlterClusterResponse::value`.
    pub(super) value: u32,
    /// The broker that answered.
    addr: String,
}

impl Admin {
    /// Moves the leadership of `partition` of `topic` to broker `to`, or to
    /// the preferred replica (the first) when `None`, and waits until the
    /// answering broker's metadata shows it. The new leader is elected by
    /// a majority of the other replicas, so no acknowledged record is
    /// lost; producers retry the appends in flight (`NOT_LEADER`).
    ///
    /// # Errors
    /// `UNKNOWN_TOPIC_OR_PARTITION`; `INVALID_REQUEST` (not a replica),
    /// `BROKER_FENCED`, `BROKER_IN_MAINTENANCE`, `REPLICA_NOT_IN_SYNC`
    /// (cannot lead now); `REQUEST_TIMED_OUT` (it did not move: try
    /// again); `CLUSTER_ADMIN_REQUIRED`; connection errors.
    pub async fn elect_leader(
        &self,
        topic: &str,
        partition: u32,
        to: Option<u32>,
    ) -> Result<Leadership, ClientError> {
        let change = ClusterChange::ElectLeader {
            topic: topic.to_owned(),
            partition,
            to,
        };
        let altered = self
            .alter_cluster(change, || format!("{topic}/{partition}"))
            .await?;
        let leader = altered.leader.ok_or_else(|| ClientError::Protocol {
            addr: altered.addr,
            detail: format!("AlterCluster moved {topic}/{partition} but named no leader"),
        })?;
        Ok(Leadership {
            leader,
            epoch: altered.value,
        })
    }

    /// Puts `broker` in maintenance (its leaderships move to other
    /// replicas; it leads nothing until disabled, across restarts, and
    /// still replicates) or takes it out. With `enabled`, waits until it
    /// leads nothing and returns how many partitions it still leads (those
    /// whose other replicas are no majority keep it as leader). One broker
    /// at a time.
    ///
    /// # Errors
    /// `BROKER_IN_MAINTENANCE` (another broker is), `INVALID_REQUEST`
    /// (unknown broker), `REQUEST_TIMED_OUT`, `CLUSTER_ADMIN_REQUIRED`;
    /// connection errors.
    pub async fn set_maintenance(&self, broker: u32, enabled: bool) -> Result<u32, ClientError> {
        let change = ClusterChange::SetMaintenance { broker, enabled };
        let altered = self
            .alter_cluster(change, || format!("broker {broker}"))
            .await?;
        Ok(altered.value)
    }

    pub(super) async fn alter_cluster(
        &self,
        change: ClusterChange,
        what: impl FnOnce() -> String,
    ) -> Result<Altered, ClientError> {
        let connection = self.cluster.any_connection().await?;
        let request = AlterClusterRequest {
            change,
            timeout_ms: u32::try_from(LEADERSHIP_CHANGE_TIMEOUT.as_millis()).unwrap_or(u32::MAX),
        };
        let reply = connection
            .call(&request, Vec::new(), LEADERSHIP_CHANGE_TIMEOUT)
            .await?;
        let (response, _) = reply.decode()?;
        let detail = response.error_message.as_ref().map(|m| m.to_string());
        if let Some(error) = ClientError::from_wire(response.error_code.to_native(), what, detail) {
            return Err(error);
        }
        Ok(Altered {
            leader: response.leader.as_ref().map(|leader| leader.to_native()),
            value: response.value.to_native(),
            addr: connection.addr().to_string(),
        })
    }
}
