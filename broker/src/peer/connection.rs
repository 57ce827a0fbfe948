//! One pipelined connection to a peer broker.

use std::cell::{Cell, RefCell};
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Duration;

use ahash::AHashMap;
use corelog_wire::frame::{
    ApiKey, FrameLimits, RESPONSE_HEADER_BYTES, RequestHeader, decode_response_header,
};
use corelog_wire::message::api_versions::ApiVersionsRequest;
use futures::channel::oneshot;
use futures::io::{ReadHalf, WriteHalf};
use futures::{AsyncReadExt, AsyncWriteExt};
use glommio::net::TcpStream;
use rkyv::util::AlignedVec;

use super::PeerError;

/// Largest response accepted from a peer: metadata states and pushes of
/// several batches, well below this.
const RESPONSE_BYTES_MAX: u32 = 64 << 20;

type Pending = AHashMap<u32, oneshot::Sender<Result<AlignedVec<16>, PeerError>>>;

/// A connection with requests in flight, matched to responses by
/// correlation id.
#[derive(Debug)]
pub struct PeerConnection {
    addr: SocketAddr,
    writer: async_lock::Mutex<WriteHalf<TcpStream>>,
    pending: Rc<RefCell<Pending>>,
    next_correlation: Cell<u32>,
    broken: Rc<Cell<bool>>,
}

impl PeerConnection {
    /// Connects, starts the reader, and does the ApiVersions handshake.
    ///
    /// # Errors
    /// [`PeerError::Unreachable`] or [`PeerError::Timeout`].
    pub async fn connect(
        addr: SocketAddr,
        timeout: Duration,
    ) -> Result<Rc<PeerConnection>, PeerError> {
        let stream = TcpStream::connect_timeout(addr, timeout)
            .await
            .map_err(|error| PeerError::Unreachable {
                addr,
                reason: error.to_string(),
            })?;
        if let Err(error) = stream.set_nodelay(true) {
            tracing::debug!(%error, "cannot set TCP_NODELAY on a peer connection");
        }
        let (reader, writer) = stream.split();
        let pending: Rc<RefCell<Pending>> = Rc::new(RefCell::new(AHashMap::new()));
        let broken = Rc::new(Cell::new(false));
        glommio::spawn_local(read_responses(
            addr,
            reader,
            pending.clone(),
            broken.clone(),
        ))
        .detach();
        let connection = Rc::new(PeerConnection {
            addr,
            writer: async_lock::Mutex::new(writer),
            pending,
            next_correlation: Cell::new(1),
            broken,
        });
        let handshake = corelog_wire::message::encode_request(
            &ApiVersionsRequest {
                client_name: "corelogd-peer".to_owned(),
                client_version: env!("CARGO_PKG_VERSION").to_owned(),
            },
            &[],
        )
        .map_err(|error| PeerError::Protocol {
            addr,
            reason: error.to_string(),
        })?;
        connection
            .call(ApiKey::ApiVersions, &[&handshake], timeout)
            .await?;
        Ok(connection)
    }

    /// Whether the connection failed and must be replaced.
    #[must_use]
    pub fn is_broken(&self) -> bool {
        self.broken.get()
    }

    /// Sends one request body, given in parts (the encoded message, then
    /// its raw section's pieces, copied once into the frame), and waits
    /// for its response body.
    ///
    /// # Errors
    /// [`PeerError`] on a broken connection or a missed deadline.
    pub async fn call(
        &self,
        api_key: ApiKey,
        body: &[&[u8]],
        timeout: Duration,
    ) -> Result<AlignedVec<16>, PeerError> {
        let addr = self.addr;
        if self.broken.get() {
            return Err(PeerError::Unreachable {
                addr,
                reason: "connection broken".to_owned(),
            });
        }
        let correlation_id = self.next_correlation.get();
        self.next_correlation.set(correlation_id.wrapping_add(1));
        let header = RequestHeader {
            api_key,
            api_version: 0,
            correlation_id,
            flags: 0,
        }
        .encode(body.iter().map(|part| part.len()).sum())
        .map_err(|error| PeerError::Protocol {
            addr,
            reason: error.to_string(),
        })?;
        let (sender, answer) = oneshot::channel();
        self.pending.borrow_mut().insert(correlation_id, sender);
        let written = {
            let mut writer = self.writer.lock().await;
            let body_len: usize = body.iter().map(|part| part.len()).sum();
            let mut frame = Vec::with_capacity(header.len() + body_len);
            frame.extend_from_slice(&header);
            for part in body {
                frame.extend_from_slice(part);
            }
            match writer.write_all(&frame).await {
                Ok(()) => writer.flush().await,
                Err(error) => Err(error),
            }
        };
        if let Err(error) = written {
            self.pending.borrow_mut().remove(&correlation_id);
            self.broken.set(true);
            return Err(PeerError::Unreachable {
                addr,
                reason: error.to_string(),
            });
        }
        let deadline = glommio::timer::sleep(timeout);
        match futures::future::select(answer, Box::pin(deadline)).await {
            futures::future::Either::Left((Ok(result), _)) => result,
            futures::future::Either::Left((Err(_), _)) => Err(PeerError::Unreachable {
                addr,
                reason: "connection closed".to_owned(),
            }),
            futures::future::Either::Right(_) => {
                self.pending.borrow_mut().remove(&correlation_id);
                Err(PeerError::Timeout { addr, timeout })
            }
        }
    }
}

async fn read_responses(
    addr: SocketAddr,
    mut reader: ReadHalf<TcpStream>,
    pending: Rc<RefCell<Pending>>,
    broken: Rc<Cell<bool>>,
) {
    let limits = FrameLimits {
        max_frame_bytes: RESPONSE_BYTES_MAX,
    };
    let failure = loop {
        let mut header = [0u8; RESPONSE_HEADER_BYTES];
        if let Err(error) = reader.read_exact(&mut header).await {
            break error.to_string();
        }
        let head = match decode_response_header(&header, &limits) {
            Ok(head) => head,
            Err(error) => break error.to_string(),
        };
        let mut body = AlignedVec::<16>::with_capacity(head.body_len);
        body.resize(head.body_len, 0);
        if let Err(error) = reader.read_exact(&mut body).await {
            break error.to_string();
        }
        let waiter = pending.borrow_mut().remove(&head.header.correlation_id);
        if let Some(waiter) = waiter {
            // The caller may have given up (deadline): nothing to do then.
            let _delivered = waiter.send(Ok(body));
        }
    };
    broken.set(true);
    let waiters: Vec<_> = pending
        .borrow_mut()
        .drain()
        .map(|(_, waiter)| waiter)
        .collect();
    for waiter in waiters {
        let _delivered = waiter.send(Err(PeerError::Unreachable {
            addr,
            reason: failure.clone(),
        }));
    }
}
