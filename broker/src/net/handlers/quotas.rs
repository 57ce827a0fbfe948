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
    let op = match request.change {
        QuotaChange::Set(quota) => {
            quota_entries::quota(&quota).map(|_| ControllerOp::PutQuota { quota })
        }
        QuotaChange::Remove { entity } => {
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
