//! DescribeUsers and AlterUsers: the users of the cluster, whose salted
//! keys live in controller metadata. Describing reads this broker's
//! metadata and shows names, mechanisms and iteration counts, never a key
//! or a salt; altering checks the request here, then goes to the
//! controller through shard 0 and answers once this broker's metadata
//! shows the change.

use std::rc::Rc;

use corelog_controller::users::check_user_name;
use corelog_wire::error::ErrorCode;
use corelog_wire::message::alter_users::{AlterUsersRequest, AlterUsersResponse, UserChange};
use corelog_wire::message::controller_operation::ControllerOp;
use corelog_wire::message::decode_request;
use corelog_wire::message::describe_users::{
    DescribeUsersRequest, DescribeUsersResponse, UserDescription,
};

use crate::api::{Reply, refused};
use crate::cluster::credentials;
use crate::net::access::Access;
use crate::runtime::shard::Shard;

pub(super) fn describe(
    shard: &Rc<Shard>,
    body: &[u8],
    access: &Access,
) -> Result<Reply, ErrorCode> {
    let (request, _) = decode_request::<DescribeUsersRequest>(body).map_err(refused)?;
    if let Err(error) = access.cluster_admin() {
        shard.metrics.error(error.code);
        return Reply::encode(
            &DescribeUsersResponse {
                error_code: error.code.code(),
                users: Vec::new(),
            },
            Vec::new(),
        );
    }
    let wanted: Option<Vec<String>> = request
        .names
        .as_ref()
        .map(|names| names.iter().map(|name| name.as_str().to_owned()).collect());
    let snapshot = shard.snapshot();
    let users = snapshot
        .cluster
        .state
        .users()
        .values()
        .filter(|user| {
            wanted
                .as_ref()
                .is_none_or(|names| names.contains(&user.name))
        })
        .map(|user| UserDescription {
            name: user.name.clone(),
            mechanisms: user
                .credentials
                .iter()
                .map(|credential| credential.mechanism.name().to_owned())
                .collect(),
            iterations: user
                .credentials
                .iter()
                .map(|credential| credential.iterations)
                .collect(),
        })
        .collect();
    Reply::encode(
        &DescribeUsersResponse {
            error_code: ErrorCode::None.code(),
            users,
        },
        Vec::new(),
    )
}

pub(super) async fn alter(
    shard: &Rc<Shard>,
    body: &[u8],
    access: &Access,
) -> Result<Reply, ErrorCode> {
    let (request, _) = decode_request::<AlterUsersRequest>(body).map_err(refused)?;
    let request: AlterUsersRequest =
        rkyv::deserialize::<AlterUsersRequest, rkyv::rancor::Error>(request)
            .map_err(|_| ErrorCode::InvalidRequest)?;
    let name = request.name;
    let op = check_user_name(&name)
        .map_err(|reason| (ErrorCode::InvalidRequest, reason))
        .and_then(|()| match request.change {
            UserChange::Put { credentials } => credentials::stored(credentials.clone())
                .map(|_| ControllerOp::PutUser { name, credentials }),
            UserChange::Delete => Ok(ControllerOp::DeleteUser { name }),
        });
    let (code, error_message, created) = super::alter_security(shard, access, op).await;
    Reply::encode(
        &AlterUsersResponse {
            error_code: code.code(),
            error_message,
            created,
        },
        Vec::new(),
    )
}
