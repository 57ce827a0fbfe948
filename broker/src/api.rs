//! API bodies as the broker handles them: the encoded [`Reply`] to a
//! request, and the decoding of request bodies. Shared by the network
//! handlers (`net`), the controller APIs (`cluster::api`) and the
//! in-process calls a broker makes to itself (`peer`'s loopback), so that
//! a request served locally runs exactly the code a network one does.

use bytes::Bytes;
use corelog_wire::error::ErrorCode;
use corelog_wire::message::{self, MessageError, Request, Response, decode_request};
use rkyv::rancor;

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

    /// [`Reply::message`] for a response built here: a failure to encode
    /// it is a bug, answered `UNKNOWN_SERVER_ERROR`.
    ///
    /// # Errors
    /// `UNKNOWN_SERVER_ERROR` when the response does not encode.
    pub fn encode<T: Response>(response: &T, raw: Vec<Bytes>) -> Result<Reply, ErrorCode> {
        Reply::message(response, raw).map_err(unencodable)
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

/// Maps a request body's decoding failure to the code it is answered with.
#[must_use]
pub fn refused(error: MessageError) -> ErrorCode {
    tracing::debug!(%error, "request body refused");
    error.error_code()
}

/// Maps a response encoding failure (a bug: responses are built here).
#[must_use]
pub fn unencodable(error: MessageError) -> ErrorCode {
    tracing::error!(%error, "cannot encode a response");
    ErrorCode::UnknownServerError
}

/// Decodes (validated) and deserialises a request into its owned form.
///
/// # Errors
/// The code a body that does not decode is answered with.
pub fn owned<T>(body: &[u8]) -> Result<T, ErrorCode>
where
    T: Request,
    T::Archived: rkyv::Deserialize<T, rkyv::api::high::HighDeserializer<rancor::Error>>,
{
    let (archived, _) = decode_request::<T>(body).map_err(refused)?;
    rkyv::deserialize::<T, rancor::Error>(archived).map_err(|error| {
        tracing::debug!(%error, "request did not deserialise");
        ErrorCode::InvalidRequest
    })
}
