//! DescribeQuotas and AlterQuotas: the quotas of the cluster, kept in
//! controller metadata. Both need `cluster-admin`. Altering checks the
//! quota here, then goes to the controller through shard 0 and answers once
//! this broker's metadata shows the change.
//!
//! Version 1 of both carries the topic, partition and group limits;
//! version 0 answers without them, and a version 0 `Set` keeps the ones
//! the entity has, which its sender cannot see.

use std::rc::Rc;

use corelog_controller::quotas::{QuotaEntity, QuotaLimits};
use corelog_wire::error::ErrorCode;
use corelog_wire::message::alter_quotas::{
    AlterQuotasRequest, AlterQuotasRequestV1, AlterQuotasResponse, QuotaChange, QuotaChangeV1,
};
use corelog_wire::message::controller_operation::ControllerOp;
use corelog_wire::message::describe_quotas::{
    DescribeQuotasRequest, DescribeQuotasRequestV1, DescribeQuotasResponse,
    DescribeQuotasResponseV1, QuotaEntryV1,
};

use crate::api::{Reply, owned};
use crate::cluster::quota_entries;
use crate::net::access::Access;
use crate::runtime::shard::Shard;

pub(super) fn describe(
    shard: &Rc<Shard>,
    body: &[u8],
    version: u16,
    access: &Access,
) -> Result<Reply, ErrorCode> {
    let entity = if version == 0 {
        owned::<DescribeQuotasRequest>(body)?.entity
    } else {
        owned::<DescribeQuotasRequestV1>(body)?.entity
    };
    let (code, quotas) = match described(shard, entity.as_deref(), access) {
        Ok(quotas) => (ErrorCode::None, quotas),
        Err(code) => (code, Vec::new()),
    };
    if version == 0 {
        let quotas = quotas
            .iter()
            .map(|(entity, limits)| quota_entries::entry(entity, limits))
            .collect();
        let response = DescribeQuotasResponse {
            error_code: code.code(),
            quotas,
        };
        return Reply::encode(&response, Vec::new());
    }
    let quotas = quotas
        .iter()
        .map(|(entity, limits)| quota_entries::entry_v1(entity, limits))
        .collect();
    let response = DescribeQuotasResponseV1 {
        error_code: code.code(),
        quotas,
    };
    Reply::encode(&response, Vec::new())
}

/// The quotas asked for, or the refusal's code.
fn described(
    shard: &Rc<Shard>,
    wanted: Option<&str>,
    access: &Access,
) -> Result<Vec<(QuotaEntity, QuotaLimits)>, ErrorCode> {
    if let Err(error) = access.cluster_admin() {
        shard.metrics.error(error.code);
        return Err(error.code);
    }
    let wanted = wanted
        .map(quota_entries::entity)
        .transpose()
        .map_err(|(code, _)| code)?;
    let snapshot = shard.snapshot();
    Ok(snapshot
        .cluster
        .state
        .quotas()
        .iter()
        .filter(|(entity, _)| wanted.as_ref().is_none_or(|wanted| wanted == *entity))
        .map(|(entity, limits)| (entity.clone(), *limits))
        .collect())
}

pub(super) async fn alter(
    shard: &Rc<Shard>,
    body: &[u8],
    version: u16,
    access: &Access,
) -> Result<Reply, ErrorCode> {
    let change = if version == 0 {
        match owned::<AlterQuotasRequest>(body)?.change {
            QuotaChange::Set(quota) => {
                // Keep what a version 0 sender cannot see.
                let kept = quota_entries::entity(&quota.entity)
                    .ok()
                    .and_then(|entity| {
                        shard
                            .snapshot()
                            .cluster
                            .state
                            .quotas()
                            .get(&entity)
                            .copied()
                    })
                    .unwrap_or_default();
                QuotaChangeV1::Set(QuotaEntryV1 {
                    quota,
                    topics: kept.topics,
                    partitions: kept.partitions,
                    groups: kept.groups,
                })
            }
            QuotaChange::Remove { entity } => QuotaChangeV1::Remove { entity },
        }
    } else {
        owned::<AlterQuotasRequestV1>(body)?.change
    };
    let op = match change {
        QuotaChangeV1::Set(quota) => quota_entries::quota_v1(&quota).map(|(_, limits)| {
            // Without object limits, the operation a controller of the
            // release before knows.
            if limits.has_object_limits() {
                ControllerOp::PutQuotaV1 { quota }
            } else {
                ControllerOp::PutQuota { quota: quota.quota }
            }
        }),
        QuotaChangeV1::Remove { entity } => {
            quota_entries::entity(&entity).map(|_| ControllerOp::DeleteQuota { entity })
        }
    };
    let (code, error_message, created) = super::alter_security(shard, access, op).await;
    Reply::encode(
        &AlterQuotasResponse {
            error_code: code.code(),
            error_message,
            created,
        },
        Vec::new(),
    )
}
