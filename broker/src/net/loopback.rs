//! Requests this broker sends itself: its membership calling its own
//! controller, its controller querying its own replicas (on a single node,
//! every inter-broker call). They run through [`handlers::dispatch`], the
//! code a network request runs, without a socket.

use std::rc::{Rc, Weak};
use std::time::Instant;

use corelog_wire::error::ErrorCode;
use corelog_wire::frame::ApiKey;
use futures::future::LocalBoxFuture;

use super::handlers::{self, Caller, Origin};
use super::request_body::RequestBody;
use crate::api::Reply;
use crate::peer::LocalService;
use crate::runtime::shard::Shard;

/// One shard's handlers as a [`LocalService`].
#[derive(Debug)]
pub struct Loopback {
    shard: Weak<Shard>,
}

impl Loopback {
    /// The loopback of `shard`.
    #[must_use]
    pub fn new(shard: &Rc<Shard>) -> Loopback {
        Loopback {
            shard: Rc::downgrade(shard),
        }
    }
}

impl LocalService for Loopback {
    fn serve(&self, api_key: ApiKey, body: Vec<u8>) -> LocalBoxFuture<'static, Reply> {
        let shard = self.shard.clone();
        Box::pin(async move {
            let Some(shard) = shard.upgrade() else {
                return Reply::error(ErrorCode::LeaderNotAvailable);
            };
            let body = RequestBody::copy_from(&body);
            // This broker's own calls speak version 0 of every API.
            handlers::dispatch(
                &shard,
                (api_key, 0),
                body,
                Instant::now(),
                Origin::Loopback,
                &Caller::this_broker(),
            )
            .await
            .unwrap_or_else(Reply::error)
        })
    }
}
