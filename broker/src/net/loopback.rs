//! Requests this broker sends itself: its membership calling its own
//! controller, its controller querying its own replicas (on a single node,
//! every inter-broker call). They run through [`handlers::dispatch`], the
//! code a network request runs, without a socket.

use std::rc::{Rc, Weak};
use std::sync::Arc;
use std::time::Instant;

use corelog_wire::error::ErrorCode;
use corelog_wire::frame::ApiKey;
use futures::future::LocalBoxFuture;

use super::handlers::{self, Caller};
use super::request_body::RequestBody;
use super::shard_ports::ShardPortTable;
use crate::api::Reply;
use crate::peer::LocalService;
use crate::runtime::shard::Shard;

/// One shard's handlers as a [`LocalService`].
#[derive(Debug)]
pub struct Loopback {
    shard: Weak<Shard>,
    shard_ports: Arc<ShardPortTable>,
}

impl Loopback {
    /// The loopback of `shard`, on a broker whose shards accept alone on
    /// `shard_ports`.
    #[must_use]
    pub fn new(shard: &Rc<Shard>, shard_ports: Arc<ShardPortTable>) -> Loopback {
        Loopback {
            shard: Rc::downgrade(shard),
            shard_ports,
        }
    }
}

impl LocalService for Loopback {
    fn serve(
        &self,
        api_key: ApiKey,
        api_version: u16,
        body: Vec<u8>,
    ) -> LocalBoxFuture<'static, Reply> {
        let shard = self.shard.clone();
        let shard_ports = self.shard_ports.clone();
        Box::pin(async move {
            let Some(shard) = shard.upgrade() else {
                return Reply::error(ErrorCode::LeaderNotAvailable);
            };
            let body = RequestBody::copy_from(&body);
            handlers::dispatch(
                &shard,
                api_key,
                api_version,
                body,
                Instant::now(),
                &Caller::this_broker(),
                &shard_ports,
            )
            .await
            .unwrap_or_else(Reply::error)
        })
    }
}
