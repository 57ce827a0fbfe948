//! Quotas: set one ([`Admin::set_quota`]), remove one, describe them.
//! Managing them needs `cluster-admin`.

use std::time::Duration;

use corelog_wire::message::alter_quotas::{AlterQuotasRequest, QuotaChange};
use corelog_wire::message::describe_quotas::{DescribeQuotasRequest, QuotaEntry};
use serde::Serialize;

use super::Admin;
use crate::error::ClientError;

/// How long the broker may take to commit a quota change.
const QUOTA_CHANGE_TIMEOUT: Duration = Duration::from_secs(20);

/// One entity's quota; `None` is no limit.
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
}

impl Admin {
    /// Sets `quota` (replacing the entity's limits, if it had some);
    /// whether the entity had none. Every broker enforces it within a
    /// second.
    ///
    /// # Errors
    /// `INVALID_REQUEST` for a malformed quota, `CLUSTER_ADMIN_REQUIRED`;
    /// connection errors.
    pub async fn set_quota(&self, quota: &Quota) -> Result<bool, ClientError> {
        self.alter_quota(&quota.entity, QuotaChange::Set(quota.entry()))
            .await
    }

    /// Removes the quota of `entity` (the default applies to it again).
    ///
    /// # Errors
    /// `QUOTA_NOT_FOUND`, `CLUSTER_ADMIN_REQUIRED`; connection errors.
    pub async fn remove_quota(&self, entity: &str) -> Result<(), ClientError> {
        let change = QuotaChange::Remove {
            entity: entity.to_owned(),
        };
        self.alter_quota(entity, change).await.map(drop)
    }

    async fn alter_quota(&self, entity: &str, change: QuotaChange) -> Result<bool, ClientError> {
        let connection = self.cluster.any_connection().await?;
        let reply = connection
            .call(
                &AlterQuotasRequest { change },
                Vec::new(),
                QUOTA_CHANGE_TIMEOUT,
            )
            .await?;
        let (response, _) = reply.decode()?;
        let detail = response.error_message.as_ref().map(|m| m.to_string());
        match ClientError::from_wire(
            response.error_code.to_native(),
            || format!("quota of {entity}"),
            detail,
        ) {
            Some(error) => Err(error),
            None => Ok(response.created),
        }
    }

    /// Every quota, or `entity`'s.
    ///
    /// # Errors
    /// `CLUSTER_ADMIN_REQUIRED`; connection errors.
    pub async fn describe_quotas(&self, entity: Option<&str>) -> Result<Vec<Quota>, ClientError> {
        let connection = self.cluster.any_connection().await?;
        let request = DescribeQuotasRequest {
            entity: entity.map(str::to_owned),
        };
        let reply = connection
            .call(&request, Vec::new(), Duration::ZERO)
            .await?;
        let (response, _) = reply.decode()?;
        if let Some(error) = ClientError::from_wire(
            response.error_code.to_native(),
            || "quotas".to_owned(),
            None,
        ) {
            return Err(error);
        }
        Ok(response
            .quotas
            .iter()
            .map(|entry| Quota {
                entity: entry.entity.to_string(),
                produce_bytes_per_second: entry
                    .produce_bytes_per_second
                    .as_ref()
                    .map(|v| v.to_native()),
                fetch_bytes_per_second: entry
                    .fetch_bytes_per_second
                    .as_ref()
                    .map(|v| v.to_native()),
                request_percent: entry.request_percent.as_ref().map(|v| v.to_native()),
                connections: entry.connections.as_ref().map(|v| v.to_native()),
            })
            .collect())
    }
}
