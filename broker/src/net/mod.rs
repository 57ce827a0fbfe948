//! The client-facing network layer: every shard accepts connections on the
//! shared port, reads frames with bounded memory and in-flight count, hands
//! each request to its handler and writes responses as they complete.
//!
//! - [`listener`]: accept loop and the connection limit.
//! - [`connection`]: one connection's frames, handshake, backpressure.
//! - [`handlers`]: one module per API.

pub mod connection;
pub mod handlers;
pub mod listener;

use bytes::Bytes;
use corelog_wire::error::ErrorCode;
use corelog_wire::message::{self, MessageError, Response};

/// A response body ready to send: prefix and archive, then record bytes.
#[derive(Debug, Default)]
pub struct Reply {
    /// Prefix and archive (or only the prefix, for a top-level error).
    pub head: Vec<u8>,
    /// The raw section, as stored batches.
    pub raw: Vec<Bytes>,
}

impl Reply {
    /// A response refusing the whole request.
    #[must_use]
    pub fn error(code: ErrorCode) -> Reply {
        Reply {
            head: message::encode_error_response(code).to_vec(),
            raw: Vec::new(),
        }
    }

    /// A response message with its raw section.
    ///
    /// # Errors
    /// [`MessageError`] if the message cannot be encoded.
    pub fn message<T: Response>(response: &T, raw: Vec<Bytes>) -> Result<Reply, MessageError> {
        let raw_len = raw.iter().map(Bytes::len).sum();
        Ok(Reply {
            head: message::encode_response_archive(response, raw_len)?,
            raw,
        })
    }

    /// Body bytes in all.
    #[must_use]
    pub fn len(&self) -> usize {
        self.head.len() + self.raw.iter().map(Bytes::len).sum::<usize>()
    }

    /// Whether the body is empty (it never is: the prefix is always there).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
