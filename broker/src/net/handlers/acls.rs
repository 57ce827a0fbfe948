//! DescribeAcls and AlterAcls: the cluster's access rules, kept in
//! controller metadata. Both need `cluster-admin`. Altering checks the rule
//! here, then goes to the controller through shard 0 and answers once this
//! broker's metadata shows the change.

use std::rc::Rc;

use corelog_wire::error::ErrorCode;
use corelog_wire::message::alter_acls::{AclChange, AlterAclsRequest, AlterAclsResponse};
use corelog_wire::message::controller_operation::ControllerOp;
use corelog_wire::message::describe_acls::{DescribeAclsRequest, DescribeAclsResponse};

use crate::api::{Reply, owned};
use crate::cluster::access_rules;
use crate::net::access::Access;
use crate::runtime::shard::Shard;

pub(super) fn describe(
    shard: &Rc<Shard>,
    body: &[u8],
    access: &Access,
) -> Result<Reply, ErrorCode> {
    let request: DescribeAclsRequest = owned(body)?;
    if let Err(error) = access.cluster_admin() {
        shard.metrics.error(error.code);
        return Reply::encode(
            &DescribeAclsResponse {
                error_code: error.code.code(),
                acls: Vec::new(),
            },
            Vec::new(),
        );
    }
    let snapshot = shard.snapshot();
    let acls = snapshot
        .cluster
        .state
        .acls()
        .iter()
        .filter(|binding| {
            request
                .principal
                .as_ref()
                .is_none_or(|principal| *principal == binding.principal)
                && request
                    .resource_type
                    .is_none_or(|code| code == binding.resource_type.code())
                && request
                    .name
                    .as_ref()
                    .is_none_or(|name| *name == binding.name)
        })
        .map(access_rules::entry)
        .collect();
    Reply::encode(
        &DescribeAclsResponse {
            error_code: ErrorCode::None.code(),
            acls,
        },
        Vec::new(),
    )
}

pub(super) async fn alter(
    shard: &Rc<Shard>,
    body: &[u8],
    access: &Access,
) -> Result<Reply, ErrorCode> {
    let request: AlterAclsRequest = owned(body)?;
    let op = access_rules::binding(&request.acl).map(|_| match request.change {
        AclChange::Add => ControllerOp::PutAcl { acl: request.acl },
        AclChange::Remove => ControllerOp::DeleteAcl { acl: request.acl },
    });
    let (code, error_message, created) = super::alter_security(shard, access, op).await;
    Reply::encode(
        &AlterAclsResponse {
            error_code: code.code(),
            error_message,
            created,
        },
        Vec::new(),
    )
}
