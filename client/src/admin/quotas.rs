//! Quotas: set one ([`Admin::set_quota`]), remove one, describe them.
//! Managing them needs `cluster-admin`.
//!
//! Spoken in version 1 of AlterQuotas and DescribeQuotas (with topic,
//! partition and group limits) where the broker speaks it, else in
//! version 0: a broker of the release before has no such limits, and
//! setting one there is refused as an unsupported API.

use std::time::Duration;

use corelog_wire::frame::ApiKey;
use corelog_wire::message::alter_quotas::{
    AlterQuotasRequest, AlterQuotasRequestV1, ArchivedAlterQuotasResponse, QuotaChange,
    QuotaChangeV1,
};
use corelog_wire::message::describe_quotas::{
    ArchivedQuotaEntry, DescribeQuotasRequest, DescribeQuotasRequestV1, QuotaEntry, QuotaEntryV1,
};
use serde::Serialize;

use super::Admin;
use crate::connection::Connection;
use crate::error::ClientError;

/// How long the broker may take to commit a quota change.
const QUOTA_CHANGE_TIMEOUT: Duration = Duration::from_secs(20);

/// One entity's quota. `None` is no limit for a rate or a connection
/// count, and the default (the `user:*` entry's, else the broker's
/// built-in one) for a topic, partition or group limit.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Quota {
    /// `user:NAME`, `user:*` (every principal without its own quota),
    /// `ip:ADDRESS` or `ip:*`.
    pub entity: String,
    /// Produce request bytes per second, over the whole broker.
    pub produce_bytes_per_second: Option<u64>,
    /// Fetch response bytes per second, over the whole broker.
    pub fetch_bytes_per_second: Option<u64>,
    /// Percent of each shard's time spent on the entity's requests.
    pub request_percent: Option<u32>,
    /// Open connections to one broker.
    pub connections: Option<u32>,
    /// Topics the principal may own.
    pub topics: Option<u32>,
    /// Partitions the principal may own, over all its topics.
    pub partitions: Option<u32>,
    /// Consumer groups the principal may create per group coordinator.
    pub groups: Option<u32>,
}

impl Quota {
    fn entry(&self) -> QuotaEntry {
        QuotaEntry {
            entity: self.entity.clone(),
            produce_bytes_per_second: self.produce_bytes_per_second,
            fetch_bytes_per_second: self.fetch_bytes_per_second,
            request_percent: self.request_percent,
            connections: self.connections,
        }
    }

    fn entry_v1(&self) -> QuotaEntryV1 {
        QuotaEntryV1 {
            quota: self.entry(),
            topics: self.topics,
            partitions: self.partitions,
            groups: self.groups,
        }
    }

    fn has_object_limits(&self) -> bool {
        self.topics.is_some() || self.partitions.is_some() || self.groups.is_some()
    }

    fn from_wire(entry: &ArchivedQuotaEntry) -> Quota {
        Quota {
            entity: entry.entity.to_string(),
            produce_bytes_per_second: entry
                .produce_bytes_per_second
                .as_ref()
                .map(|v| v.to_native()),
            fetch_bytes_per_second: entry.fetch_bytes_per_second.as_ref().map(|v| v.to_native()),
            request_percent: entry.request_percent.as_ref().map(|v| v.to_native()),
            connections: entry.connections.as_ref().map(|v| v.to_native()),
            ..Quota::default()
        }
    }
}

/// A change, in the version the broker speaks.
enum Change {
    V0(QuotaChange),
    V1(QuotaChangeV1),
}

impl Admin {
    /// Sets `quota` (replacing the entity's limits, if it had some);
    /// whether the entity had none. Every broker enforces it within a
    /// second.
    ///
    /// # Errors
    /// `INVALID_REQUEST` for a malformed quota, `CLUSTER_ADMIN_REQUIRED`;
    /// [`ClientError::UnsupportedApi`] for a topic, partition or group
    /// limit on a broker without them; connection errors.
    pub async fn set_quota(&self, quota: &Quota) -> Result<bool, ClientError> {
        let connection = self.cluster.any_connection().await?;
        let change = if connection.supports(ApiKey::AlterQuotas, 1) || quota.has_object_limits() {
            Change::V1(QuotaChangeV1::Set(quota.entry_v1()))
        } else {
            Change::V0(QuotaChange::Set(quota.entry()))
        };
        alter_quota(&connection, &quota.entity, change).await
    }

    /// Removes the quota of `entity` (the default applies to it again).
    ///
    /// # Errors
    /// `QUOTA_NOT_FOUND`, `CLUSTER_ADMIN_REQUIRED`; connection errors.
    pub async fn remove_quota(&self, entity: &str) -> Result<(), ClientError> {
        let connection = self.cluster.any_connection().await?;
        let change = Change::V0(QuotaChange::Remove {
            entity: entity.to_owned(),
        });
        alter_quota(&connection, entity, change).await.map(drop)
    }

    /// Every quota, or `entity`'s.
    ///
    /// # Errors
    /// `CLUSTER_ADMIN_REQUIRED`; connection errors.
    pub async fn describe_quotas(&self, entity: Option<&str>) -> Result<Vec<Quota>, ClientError> {
        let connection = self.cluster.any_connection().await?;
        let entity = entity.map(str::to_owned);
        let refused = |code: u16| {
            ClientError::from_wire(code, || "quotas".to_owned(), None).map_or(Ok(()), Err)
        };
        if !connection.supports(ApiKey::DescribeQuotas, 1) {
            let request = DescribeQuotasRequest { entity };
            let reply = connection
                .call(&request, Vec::new(), Duration::ZERO)
                .await?;
            let (response, _) = reply.decode()?;
            refused(response.error_code.to_native())?;
            return Ok(response.quotas.iter().map(Quota::from_wire).collect());
        }
        let request = DescribeQuotasRequestV1 { entity };
        let reply = connection
            .call(&request, Vec::new(), Duration::ZERO)
            .await?;
        let (response, _) = reply.decode()?;
        refused(response.error_code.to_native())?;
        Ok(response
            .quotas
            .iter()
            .map(|entry| Quota {
                topics: entry.topics.as_ref().map(|v| v.to_native()),
                partitions: entry.partitions.as_ref().map(|v| v.to_native()),
                groups: entry.groups.as_ref().map(|v| v.to_native()),
                ..Quota::from_wire(&entry.quota)
            })
            .collect())
    }
}

async fn alter_quota(
    connection: &Connection,
    entity: &str,
    change: Change,
) -> Result<bool, ClientError> {
    let (code, detail, created) = match change {
        Change::V0(change) => {
            let request = AlterQuotasRequest { change };
            let reply = connection
                .call(&request, Vec::new(), QUOTA_CHANGE_TIMEOUT)
                .await?;
            let (response, _) = reply.decode()?;
            outcome(response)
        }
        Change::V1(change) => {
            let request = AlterQuotasRequestV1 { change };
            let reply = connection
                .call(&request, Vec::new(), QUOTA_CHANGE_TIMEOUT)
                .await?;
            let (response, _) = reply.decode()?;
            outcome(response)
        }
    };
    match ClientError::from_wire(code, || format!("quota of {entity}"), detail) {
        Some(error) => Err(error),
        None => Ok(created),
    }
}

/// The code, detail and `created` of an AlterQuotas answer (one layout
/// for both versions).
fn outcome(response: &ArchivedAlterQuotasResponse) -> (u16, Option<String>, bool) {
    (
        response.error_code.to_native(),
        response.error_message.as_ref().map(|m| m.to_string()),
        response.created,
    )
}
