//! `CORELOG-CLUSTER`: a broker proves to another that both hold the
//! cluster's shared secret, before it may speak the inter-broker APIs
//! (controller Raft, registration, replication). Mutual: the connecting
//! broker checks the other's proof before it sends its own.
//!
//! ```text
//! client-first  node_id: u32 (big-endian) · client_nonce: [u8; 32]
//! server-first  server_nonce: [u8; 32] · server_proof: [u8; 32]
//! client-final  client_proof: [u8; 32]
//!
//! server_proof = HMAC-SHA256(secret, "corelog-cluster server" · node_id · client_nonce · server_nonce)
//! client_proof = HMAC-SHA256(secret, "corelog-cluster client" · node_id · client_nonce · server_nonce)
//! ```
//!
//! Each proof covers both nonces, so a proof recorded on one connection is
//! worthless on the next (the server draws a fresh nonce per exchange), and
//! the secret never crosses the network. Proofs are compared in constant
//! time. Without TLS the exchange does not bind the connection: an active
//! man in the middle can relay it. It keeps ordinary clients on the network
//! from driving Raft or replication; TLS with broker certificates keeps out
//! the rest.

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The mechanism name in `AuthenticateRequest::mechanism`.
pub const MECHANISM: &str = "CORELOG-CLUSTER";

/// Bytes of each nonce.
pub const NONCE_BYTES: usize = 32;

/// Bytes of each proof (an HMAC-SHA256).
const PROOF_BYTES: usize = 32;

/// Shortest secret accepted: 16 bytes (128 bits if random).
pub const SECRET_BYTES_MIN: usize = 16;

const CLIENT_FIRST_BYTES: usize = 4 + NONCE_BYTES;
const SERVER_FIRST_BYTES: usize = NONCE_BYTES + PROOF_BYTES;

type HmacSha256 = Hmac<Sha256>;

/// The cluster's shared secret. Its `Debug` never shows the bytes.
#[derive(Clone, PartialEq, Eq)]
pub struct ClusterSecret(Vec<u8>);

impl std::fmt::Debug for ClusterSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ClusterSecret({} bytes)", self.0.len())
    }
}

/// Why an exchange failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ExchangeError {
    /// The secret is too short to resist guessing.
    #[error("the cluster secret has {len} bytes; it needs at least {SECRET_BYTES_MIN}")]
    SecretTooShort {
        /// Its length.
        len: usize,
    },
    /// A message of the wrong length.
    #[error("malformed {step}: {len} bytes, expected {expected}")]
    Malformed {
        /// Which message.
        step: &'static str,
        /// Its length.
        len: usize,
        /// The length it must have.
        expected: usize,
    },
    /// The other side's proof does not match: it holds another secret.
    #[error("the {side}'s proof does not match: it does not hold this cluster's secret")]
    BadProof {
        /// `server` or `client`.
        side: &'static str,
    },
}

impl ClusterSecret {
    /// A secret from its bytes (a file's contents, trimmed of surrounding
    /// whitespace).
    ///
    /// # Errors
    /// [`ExchangeError::SecretTooShort`] below [`SECRET_BYTES_MIN`].
    pub fn new(bytes: &[u8]) -> Result<ClusterSecret, ExchangeError> {
        let trimmed = bytes.trim_ascii();
        if trimmed.len() < SECRET_BYTES_MIN {
            return Err(ExchangeError::SecretTooShort { len: trimmed.len() });
        }
        Ok(ClusterSecret(trimmed.to_vec()))
    }

    /// A key for another purpose, derived from the secret (HMAC-SHA256 of
    /// `label`): the secret itself stays out of other uses.
    #[must_use]
    pub fn derive(&self, label: &[u8]) -> Vec<u8> {
        self.mac(label, 0, &[], &[])
            .finalize()
            .into_bytes()
            .to_vec()
    }

    fn mac(&self, label: &[u8], node_id: u32, client: &[u8], server: &[u8]) -> HmacSha256 {
        // HMAC takes a key of any length; this cannot fail.
        let mut mac = match HmacSha256::new_from_slice(&self.0) {
            Ok(mac) => mac,
            Err(_) => unreachable!("HMAC accepts keys of every length"),
        };
        mac.update(label);
        mac.update(&node_id.to_be_bytes());
        mac.update(client);
        mac.update(server);
        mac
    }
}

const SERVER_LABEL: &[u8] = b"corelog-cluster server";
const CLIENT_LABEL: &[u8] = b"corelog-cluster client";

/// The connecting broker's side.
#[derive(Debug)]
pub struct ClientExchange {
    secret: ClusterSecret,
    node_id: u32,
    client_nonce: [u8; NONCE_BYTES],
}

impl ClientExchange {
    /// Starts an exchange for broker `node_id` with a fresh random nonce.
    #[must_use]
    pub fn new(secret: ClusterSecret, node_id: u32, client_nonce: [u8; NONCE_BYTES]) -> Self {
        ClientExchange {
            secret,
            node_id,
            client_nonce,
        }
    }

    /// The client-first message.
    #[must_use]
    pub fn first(&self) -> Vec<u8> {
        let mut message = Vec::with_capacity(CLIENT_FIRST_BYTES);
        message.extend_from_slice(&self.node_id.to_be_bytes());
        message.extend_from_slice(&self.client_nonce);
        message
    }

    /// Checks the server-first message and answers with the client-final.
    ///
    /// # Errors
    /// [`ExchangeError::Malformed`], or [`ExchangeError::BadProof`] when
    /// the server does not hold the secret (nothing is sent to it then).
    pub fn answer(&self, server_first: &[u8]) -> Result<Vec<u8>, ExchangeError> {
        if server_first.len() != SERVER_FIRST_BYTES {
            return Err(ExchangeError::Malformed {
                step: "server-first",
                len: server_first.len(),
                expected: SERVER_FIRST_BYTES,
            });
        }
        let (server_nonce, server_proof) = server_first.split_at(NONCE_BYTES);
        self.secret
            .mac(SERVER_LABEL, self.node_id, &self.client_nonce, server_nonce)
            .verify_slice(server_proof)
            .map_err(|_| ExchangeError::BadProof { side: "server" })?;
        Ok(self
            .secret
            .mac(CLIENT_LABEL, self.node_id, &self.client_nonce, server_nonce)
            .finalize()
            .into_bytes()
            .to_vec())
    }
}

/// The accepting broker's side, between its server-first and the
/// client-final.
#[derive(Debug)]
pub struct ServerExchange {
    node_id: u32,
    client_nonce: [u8; NONCE_BYTES],
    server_nonce: [u8; NONCE_BYTES],
}

impl ServerExchange {
    /// Reads the client-first message and answers with the server-first,
    /// proving the secret with a fresh random `server_nonce`.
    ///
    /// # Errors
    /// [`ExchangeError::Malformed`].
    pub fn start(
        secret: &ClusterSecret,
        client_first: &[u8],
        server_nonce: [u8; NONCE_BYTES],
    ) -> Result<(ServerExchange, Vec<u8>), ExchangeError> {
        let malformed = || ExchangeError::Malformed {
            step: "client-first",
            len: client_first.len(),
            expected: CLIENT_FIRST_BYTES,
        };
        if client_first.len() != CLIENT_FIRST_BYTES {
            return Err(malformed());
        }
        let (node, nonce) = client_first.split_at(4);
        let node_id = u32::from_be_bytes(node.try_into().map_err(|_| malformed())?);
        let client_nonce: [u8; NONCE_BYTES] = nonce.try_into().map_err(|_| malformed())?;
        let mut server_first = Vec::with_capacity(SERVER_FIRST_BYTES);
        server_first.extend_from_slice(&server_nonce);
        server_first.extend_from_slice(
            &secret
                .mac(SERVER_LABEL, node_id, &client_nonce, &server_nonce)
                .finalize()
                .into_bytes(),
        );
        let exchange = ServerExchange {
            node_id,
            client_nonce,
            server_nonce,
        };
        Ok((exchange, server_first))
    }

    /// Checks the client-final message: the node id the connection now
    /// speaks for.
    ///
    /// # Errors
    /// [`ExchangeError::Malformed`] or [`ExchangeError::BadProof`].
    pub fn finish(
        &self,
        secret: &ClusterSecret,
        client_final: &[u8],
    ) -> Result<u32, ExchangeError> {
        if client_final.len() != PROOF_BYTES {
            return Err(ExchangeError::Malformed {
                step: "client-final",
                len: client_final.len(),
                expected: PROOF_BYTES,
            });
        }
        secret
            .mac(
                CLIENT_LABEL,
                self.node_id,
                &self.client_nonce,
                &self.server_nonce,
            )
            .verify_slice(client_final)
            .map_err(|_| ExchangeError::BadProof { side: "client" })?;
        Ok(self.node_id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(text: &str) -> ClusterSecret {
        ClusterSecret::new(text.as_bytes()).unwrap()
    }

    #[test]
    fn brokers_with_the_same_secret_prove_it_to_each_other() {
        let shared = secret("0123456789abcdef0123456789abcdef\n");
        let client = ClientExchange::new(shared.clone(), 7, [1; NONCE_BYTES]);
        let (server, server_first) =
            ServerExchange::start(&shared, &client.first(), [2; NONCE_BYTES]).unwrap();
        let client_final = client.answer(&server_first).unwrap();
        assert_eq!(server.finish(&shared, &client_final), Ok(7));
    }

    #[test]
    fn a_client_with_another_secret_is_refused() {
        let client = ClientExchange::new(secret("guessed-secret-0000"), 7, [1; NONCE_BYTES]);
        let shared = secret("0123456789abcdef0123456789abcdef");
        let (server, server_first) =
            ServerExchange::start(&shared, &client.first(), [2; NONCE_BYTES]).unwrap();
        // The client notices first: the server's proof does not match.
        assert_eq!(
            client.answer(&server_first),
            Err(ExchangeError::BadProof { side: "server" })
        );
        // A made-up client-final fails too.
        assert_eq!(
            server.finish(&shared, &[0; PROOF_BYTES]),
            Err(ExchangeError::BadProof { side: "client" })
        );
    }

    #[test]
    fn a_recorded_proof_is_worthless_against_a_fresh_server_nonce() {
        let shared = secret("0123456789abcdef0123456789abcdef");
        let client = ClientExchange::new(shared.clone(), 7, [1; NONCE_BYTES]);
        let (_, first) = ServerExchange::start(&shared, &client.first(), [2; NONCE_BYTES]).unwrap();
        let recorded = client.answer(&first).unwrap();
        // The eavesdropper replays client-first and the recorded final on a
        // new connection, whose server draws another nonce.
        let (server, _) =
            ServerExchange::start(&shared, &client.first(), [3; NONCE_BYTES]).unwrap();
        assert_eq!(
            server.finish(&shared, &recorded),
            Err(ExchangeError::BadProof { side: "client" })
        );
    }

    #[test]
    fn the_node_id_is_bound_into_the_proof() {
        let shared = secret("0123456789abcdef0123456789abcdef");
        let client = ClientExchange::new(shared.clone(), 7, [1; NONCE_BYTES]);
        let mut first = client.first();
        // Claim to be node 8 with node 7's proof.
        first[..4].copy_from_slice(&8u32.to_be_bytes());
        let (server, server_first) =
            ServerExchange::start(&shared, &first, [2; NONCE_BYTES]).unwrap();
        assert!(client.answer(&server_first).is_err());
        let (_, honest_first) =
            ServerExchange::start(&shared, &client.first(), [2; NONCE_BYTES]).unwrap();
        let proof_for_7 = client.answer(&honest_first).unwrap();
        assert_eq!(
            server.finish(&shared, &proof_for_7),
            Err(ExchangeError::BadProof { side: "client" })
        );
    }

    #[test]
    fn malformed_messages_and_short_secrets_are_refused() {
        let shared = secret("0123456789abcdef0123456789abcdef");
        assert!(matches!(
            ServerExchange::start(&shared, &[0; 3], [2; NONCE_BYTES]),
            Err(ExchangeError::Malformed {
                step: "client-first",
                ..
            })
        ));
        let client = ClientExchange::new(shared.clone(), 1, [1; NONCE_BYTES]);
        assert!(matches!(
            client.answer(&[0; 10]),
            Err(ExchangeError::Malformed {
                step: "server-first",
                ..
            })
        ));
        let (server, _) =
            ServerExchange::start(&shared, &client.first(), [2; NONCE_BYTES]).unwrap();
        assert!(matches!(
            server.finish(&shared, &[0; 31]),
            Err(ExchangeError::Malformed {
                step: "client-final",
                ..
            })
        ));
        assert_eq!(
            ClusterSecret::new(b"  short \n"),
            Err(ExchangeError::SecretTooShort { len: 5 })
        );
        assert_eq!(format!("{shared:?}"), "ClusterSecret(32 bytes)");
    }
}
