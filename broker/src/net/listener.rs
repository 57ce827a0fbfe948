//! The accept loop of one shard. Every shard binds the same port
//! (glommio sets SO_REUSEPORT) and the kernel spreads connections. The
//! broker-wide connection limit is a shared counter: a connection over it
//! is answered `TOO_MANY_CONNECTIONS` on its first request, then closed.

use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use futures::{AsyncReadExt, AsyncWriteExt};
use glommio::net::{TcpListener, TcpStream};

use super::connection;
use crate::runtime::shard::Shard;
use corelog_wire::error::ErrorCode;
use corelog_wire::frame::{REQUEST_HEADER_BYTES, ResponseHeader};
use corelog_wire::message;

/// How long a refused connection has to send its first request.
const REFUSAL_READ_TIMEOUT: Duration = Duration::from_secs(5);

/// Accepts connections until the shard stops.
pub async fn accept_loop(
    shard: Rc<Shard>,
    listener: TcpListener,
    open_connections: Arc<AtomicU32>,
) {
    // Connections wait in the kernel's backlog until the shard knows its topics.
    shard.wait_ready().await;
    loop {
        let stopping = shard.stopping.listen();
        if shard.is_stopping() {
            return;
        }
        let accepted = futures::future::select(Box::pin(listener.accept()), stopping).await;
        let stream = match accepted {
            futures::future::Either::Left((Ok(stream), _)) => stream,
            futures::future::Either::Left((Err(error), _)) => {
                tracing::warn!(%error, "accept failed");
                glommio::timer::sleep(Duration::from_millis(10)).await;
                continue;
            }
            futures::future::Either::Right(_) => return,
        };
        if let Err(error) = stream.set_nodelay(true) {
            tracing::debug!(%error, "cannot set TCP_NODELAY");
        }
        let open = open_connections.fetch_add(1, Ordering::Relaxed) + 1;
        let counter = open_connections.clone();
        let over_limit = open > shard.config.max_connections;
        let shard = shard.clone();
        glommio::spawn_local(async move {
            if over_limit {
                refuse(stream).await;
            } else {
                shard.connections.set(shard.connections.get() + 1);
                shard
                    .metrics
                    .connections
                    .set(i64::from(shard.connections.get()));
                connection::serve(shard.clone(), stream).await;
                shard.connections.set(shard.connections.get() - 1);
                shard
                    .metrics
                    .connections
                    .set(i64::from(shard.connections.get()));
            }
            counter.fetch_sub(1, Ordering::Relaxed);
        })
        .detach();
    }
}

/// Answers the first request of a connection over the limit with
/// `TOO_MANY_CONNECTIONS`, then closes it.
async fn refuse(mut stream: TcpStream) {
    if let Err(error) = stream.set_read_timeout(Some(REFUSAL_READ_TIMEOUT)) {
        tracing::debug!(%error, "cannot set a read timeout");
    }
    let mut header = [0u8; REQUEST_HEADER_BYTES];
    if stream.read_exact(&mut header).await.is_err() {
        return;
    }
    let correlation_id = u32::from_be_bytes([header[8], header[9], header[10], header[11]]);
    let body = message::encode_error_response(ErrorCode::TooManyConnections);
    let Ok(frame_header) = (ResponseHeader { correlation_id }).encode(body.len()) else {
        return;
    };
    let _sent = stream.write_all(&frame_header).await;
    let _sent = stream.write_all(&body).await;
    let _closed = stream.close().await;
}
