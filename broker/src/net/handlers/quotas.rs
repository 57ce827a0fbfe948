//! DescribeQuotas and AlterQuotas: the quotas of the cluster, kept in
//! controller metadata. Both need `cluster-admin`. Altering checks the
//! quota here, then goes to the controller through shard 0 and answers once
//! this broker's metadata shows the change.

use std::rc::Rc;

use corelog_wire::error::ErrorCode;
use corelog_wire::message::alter_quotas::{AlterQuotasRequest, AlterQuotasResponse, QuotaChange};
use corelog_wire::message::controller_operation::ControllerOp;
use corelog_wire::message::describe_quotas::{DescribeQuotasRequest, DescribeQuotasResponse};

use crate::api::{Reply, owned};
use crate::cluster::quota_entries;
use crate::net::access::Access;
use crate::runtime::shard::Shard;

pub(super) fn describe(
    shard: &Rc<Shard>,
    body: &[u8],
    access: &Access,
) -> Result<Reply, ErrorCode> {
    let request: DescribeQuotasRequest = owned(body)?;
    let answer = |error_code: ErrorCode, quotas| {
        Reply::encode(
            &DescribeQuotasResponse {
                error_code: error_code.code(),
                quotas,
            },
            Vec::new(),
        )
    };
    if let Err(error) = access.cluster_admin() {
        shard.metrics.error(error.code);
        return answer(error.code, Vec::new());
    }
    let wanted = match request.entity.as_deref().map(quota_entries::entity) {
        None => None,
        Some(Ok(entity)) => Some(entity),
        Some(Err((code, _))) => return answer(code, Vec::new()),
    };
    let snapshot = shard.snapshot();
    let quotas = snapshot
        .cluster
        .state
        .quotas()
        .iter()
        .filter(|(entity, _)| wanted.as_ref().is_none_or(|wanted| wanted == *entity))
        .map(|(entity, limits)| quota_entries::entry(entity, limits))
        .collect();
    answer(ErrorCode::None, quotas)
}

pub(super) async fn alter(
    shard: &Rc<Shard>,
    body: &[u8],
    access: &Access,
) -> Result<Reply, ErrorCode> {
    let request: AlterQuotasRequest = owned(body)?;
    let answer = |error_code: ErrorCode, error_message: Option<String>, created: bool| {
        if !error_code.is_none() {
            shard.metrics.error(error_code);
        }
        Reply::encode(
            &AlterQuotasResponse {
                error_code: error_code.code(),
                error_message,
                created,
            },
            Vec::new(),
        )
    };
    if let Err(error) = access.cluster_admin() {
        return answer(error.code, Some(error.message), false);
    }
    // Checked here so that a bad quota costs no controller trip.
    let checked = match &request.change {
        QuotaChange::Set(entry) => quota_entries::quota(entry).map(drop),
        QuotaChange::Remove { entity } => quota_entries::entity(entity).map(drop),
    };
    if let Err((code, reason)) = checked {
        return answer(code, Some(reason), false);
    }
    let op = match request.change {
        QuotaChange::Set(quota) => ControllerOp::PutQuota { quota },
        QuotaChange::Remove { entity } => ControllerOp::DeleteQuota { entity },
    };
    match shard.alter_security(op).await {
        Ok(created) => answer(ErrorCode::None, None, created),
        Err(error) => answer(error.code, Some(error.message), false),
    }
}
