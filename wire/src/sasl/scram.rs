//! SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677): a client proves
//! its password without sending it, and the server proves that it holds
//! the user's keys, so neither side's messages can be replayed.
//!
//! The broker stores only a [`StoredCredential`] per user: a random salt,
//! the iteration count (at least [`ITERATIONS_MIN`]) and the two derived
//! keys, never the password. The exchange is three messages:
//!
//! ```text
//! client-first  n,,n=<user>,r=<client nonce>
//! server-first  r=<client nonce><server nonce>,s=<salt, base64>,i=<iterations>
//! client-final  c=biws,r=<both nonces>,p=<client proof, base64>
//! server-final  v=<server signature, base64>      (or e=<error>)
//! ```
//!
//! Channel binding is not offered (the GS2 header is `n,,`), and an
//! authorization identity other than the user is refused. Passwords are
//! used as their UTF-8 bytes, without SASLprep. An unknown user gets a
//! made-up salt derived from the name, so that the server-first message
//! does not tell which users exist; the exchange then fails at the proof,
//! exactly as a wrong password does.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256, Sha512};

/// Fewest PBKDF2 iterations a credential may use (RFC 7677's floor).
pub const ITERATIONS_MIN: u32 = 4096;

/// PBKDF2 iterations of a new credential unless asked otherwise (twice RFC
/// 7677's floor), and of an unknown user's decoy when no user says
/// otherwise: a decoy with another count would tell that the user does not
/// exist.
pub const ITERATIONS_DEFAULT: u32 = 8192;

/// Longest user name, in bytes, before escaping.
pub const USERNAME_BYTES_MAX: usize = 255;

/// Bytes of a salt the broker draws for a new credential.
pub const SALT_BYTES: usize = 16;

/// Longest message accepted from the other side: far above any honest one.
const MESSAGE_BYTES_MAX: usize = 4096;

/// The GS2 header of a client without channel binding, and its base64 form
/// as the client-final's `c=` attribute.
const GS2_HEADER: &str = "n,,";
const GS2_HEADER_BASE64: &str = "biws";

/// The hash a SCRAM mechanism is built on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ScramMechanism {
    /// `SCRAM-SHA-256`.
    Sha256,
    /// `SCRAM-SHA-512`.
    Sha512,
}

impl ScramMechanism {
    /// Both, strongest first.
    pub const ALL: [ScramMechanism; 2] = [ScramMechanism::Sha512, ScramMechanism::Sha256];

    /// The SASL mechanism name.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            ScramMechanism::Sha256 => "SCRAM-SHA-256",
            ScramMechanism::Sha512 => "SCRAM-SHA-512",
        }
    }

    /// Bytes of the hash's output: the length of its stored and server
    /// keys.
    #[must_use]
    pub const fn key_bytes(self) -> usize {
        match self {
            ScramMechanism::Sha256 => 32,
            ScramMechanism::Sha512 => 64,
        }
    }

    /// The mechanism of a SASL name.
    #[must_use]
    pub fn from_name(name: &str) -> Option<ScramMechanism> {
        Self::ALL
            .into_iter()
            .find(|mechanism| mechanism.name() == name)
    }

    fn hmac(self, key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
        macro_rules! mac {
            ($hash:ty) => {{
                // HMAC takes keys of every length.
                let Ok(mut mac) = Hmac::<$hash>::new_from_slice(key) else {
                    unreachable!("HMAC accepts keys of every length")
                };
                for part in parts {
                    mac.update(part);
                }
                mac.finalize().into_bytes().to_vec()
            }};
        }
        match self {
            ScramMechanism::Sha256 => mac!(Sha256),
            ScramMechanism::Sha512 => mac!(Sha512),
        }
    }

    fn hash(self, data: &[u8]) -> Vec<u8> {
        match self {
            ScramMechanism::Sha256 => Sha256::digest(data).to_vec(),
            ScramMechanism::Sha512 => Sha512::digest(data).to_vec(),
        }
    }

    fn salted_password(self, password: &[u8], salt: &[u8], iterations: u32) -> Vec<u8> {
        match self {
            ScramMechanism::Sha256 => {
                let mut out = vec![0u8; 32];
                pbkdf2::pbkdf2_hmac::<Sha256>(password, salt, iterations, &mut out);
                out
            }
            ScramMechanism::Sha512 => {
                let mut out = vec![0u8; 64];
                pbkdf2::pbkdf2_hmac::<Sha512>(password, salt, iterations, &mut out);
                out
            }
        }
    }
}

/// Why an exchange failed. The server tells the client only
/// [`ScramError::client_message`]: never whether the user exists.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ScramError {
    /// A message that does not follow the grammar.
    #[error("malformed SCRAM {step}: {detail}")]
    Malformed {
        /// Which message.
        step: &'static str,
        /// What is wrong.
        detail: String,
    },
    /// A user name longer than [`USERNAME_BYTES_MAX`].
    #[error("the user name has {len} bytes; at most {USERNAME_BYTES_MAX} are allowed")]
    UsernameTooLong {
        /// Its length.
        len: usize,
    },
    /// The client-final's nonce is not the one of this exchange (a replay
    /// from another exchange, or a confused client).
    #[error("the client-final message carries another exchange's nonce")]
    NonceMismatch,
    /// The client's proof does not match the stored key: a wrong password
    /// or an unknown user.
    #[error("the password is wrong or the user is unknown")]
    BadProof,
    /// The server's signature does not match: it does not hold this user's
    /// keys.
    #[error("the server could not prove that it knows this user's credential")]
    BadServerSignature,
    /// Fewer iterations than [`ITERATIONS_MIN`].
    #[error("{iterations} PBKDF2 iterations are too few; at least {ITERATIONS_MIN} are needed")]
    TooFewIterations {
        /// The count asked for.
        iterations: u32,
    },
}

impl ScramError {
    /// What the server says to the client: the same for an unknown user as
    /// for a wrong password.
    #[must_use]
    pub fn client_message(&self) -> String {
        match self {
            ScramError::BadProof => "authentication failed: wrong user name or password".to_owned(),
            other => other.to_string(),
        }
    }
}

/// What the broker stores per user and mechanism (RFC 5802 §3): the
/// password itself is never kept.
#[derive(Clone, PartialEq, Eq)]
pub struct StoredCredential {
    /// The mechanism the keys were derived for.
    pub mechanism: ScramMechanism,
    /// The per-user random salt.
    pub salt: Vec<u8>,
    /// PBKDF2 iterations.
    pub iterations: u32,
    /// `H(HMAC(SaltedPassword, "Client Key"))`.
    pub stored_key: Vec<u8>,
    /// `HMAC(SaltedPassword, "Server Key")`.
    pub server_key: Vec<u8>,
}

impl std::fmt::Debug for StoredCredential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoredCredential")
            .field("mechanism", &self.mechanism)
            .field("iterations", &self.iterations)
            .finish_non_exhaustive()
    }
}

impl StoredCredential {
    /// Derives the stored keys of `password` with `salt` (drawn at random
    /// by the caller, [`SALT_BYTES`] long).
    ///
    /// # Errors
    /// [`ScramError::TooFewIterations`] below [`ITERATIONS_MIN`].
    pub fn derive(
        mechanism: ScramMechanism,
        password: &str,
        salt: &[u8],
        iterations: u32,
    ) -> Result<StoredCredential, ScramError> {
        if iterations < ITERATIONS_MIN {
            return Err(ScramError::TooFewIterations { iterations });
        }
        let salted = mechanism.salted_password(password.as_bytes(), salt, iterations);
        let client_key = mechanism.hmac(&salted, &[b"Client Key"]);
        Ok(StoredCredential {
            mechanism,
            salt: salt.to_vec(),
            iterations,
            stored_key: mechanism.hash(&client_key),
            server_key: mechanism.hmac(&salted, &[b"Server Key"]),
        })
    }

    /// A stand-in for an unknown user: a salt derived from the name and
    /// `server_secret` (stable, so that asking twice gives the same
    /// answer), `iterations` (those real users have: [`ITERATIONS_DEFAULT`]
    /// unless the broker knows better; never below [`ITERATIONS_MIN`]), and
    /// keys no password matches.
    #[must_use]
    pub fn decoy(
        mechanism: ScramMechanism,
        username: &str,
        server_secret: &[u8],
        iterations: u32,
    ) -> Self {
        let salt = mechanism.hmac(server_secret, &[b"decoy salt", username.as_bytes()]);
        StoredCredential {
            mechanism,
            salt: salt[..SALT_BYTES].to_vec(),
            iterations: iterations.max(ITERATIONS_MIN),
            stored_key: mechanism.hmac(server_secret, &[b"decoy stored key"]),
            server_key: mechanism.hmac(server_secret, &[b"decoy server key"]),
        }
    }
}

/// A parsed client-first message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientFirst {
    /// The user name, unescaped.
    pub username: String,
    client_nonce: String,
    /// The message without its GS2 header (part of the AuthMessage).
    bare: String,
}

fn malformed(step: &'static str, detail: impl Into<String>) -> ScramError {
    ScramError::Malformed {
        step,
        detail: detail.into(),
    }
}

fn text<'a>(step: &'static str, bytes: &'a [u8]) -> Result<&'a str, ScramError> {
    if bytes.len() > MESSAGE_BYTES_MAX {
        return Err(malformed(
            step,
            format!("{} bytes is too long", bytes.len()),
        ));
    }
    std::str::from_utf8(bytes).map_err(|_| malformed(step, "not UTF-8"))
}

/// `name=value` with the expected one-letter name.
fn attribute<'a>(
    step: &'static str,
    part: Option<&'a str>,
    name: char,
) -> Result<&'a str, ScramError> {
    let part = part.ok_or_else(|| malformed(step, format!("missing {name}=")))?;
    let mut chars = part.chars();
    if chars.next() != Some(name) || chars.next() != Some('=') {
        return Err(malformed(step, format!("expected {name}=, found {part:?}")));
    }
    Ok(&part[2..])
}

/// A nonce: printable ASCII except `,` (RFC 5802 §7).
fn check_nonce(step: &'static str, nonce: &str) -> Result<(), ScramError> {
    if nonce.is_empty()
        || !nonce
            .bytes()
            .all(|byte| (0x21..=0x7e).contains(&byte) && byte != b',')
    {
        return Err(malformed(step, "the nonce is empty or not printable ASCII"));
    }
    Ok(())
}

fn escape_username(username: &str) -> String {
    username.replace('=', "=3D").replace(',', "=2C")
}

fn unescape_username(step: &'static str, escaped: &str) -> Result<String, ScramError> {
    let mut out = String::with_capacity(escaped.len());
    let mut rest = escaped;
    while let Some(at) = rest.find('=') {
        out.push_str(&rest[..at]);
        let code = rest.get(at + 1..at + 3);
        match code {
            Some("3D") => out.push('='),
            Some("2C") => out.push(','),
            _ => return Err(malformed(step, "a user name with a bad escape")),
        }
        rest = &rest[at + 3..];
    }
    out.push_str(rest);
    Ok(out)
}

impl ClientFirst {
    /// Parses a client-first message.
    ///
    /// # Errors
    /// [`ScramError::Malformed`] (channel binding or an authorization
    /// identity asked for, a bad nonce or escape), or
    /// [`ScramError::UsernameTooLong`].
    pub fn parse(bytes: &[u8]) -> Result<ClientFirst, ScramError> {
        const STEP: &str = "client-first";
        let message = text(STEP, bytes)?;
        let bare = message
            .strip_prefix(GS2_HEADER)
            .or_else(|| message.strip_prefix("y,,"))
            .ok_or_else(|| {
                malformed(
                    STEP,
                    "channel binding and authorization identities are not supported; the message must start with n,,",
                )
            })?;
        let mut parts = bare.split(',');
        let username = unescape_username(STEP, attribute(STEP, parts.next(), 'n')?)?;
        if username.len() > USERNAME_BYTES_MAX {
            return Err(ScramError::UsernameTooLong {
                len: username.len(),
            });
        }
        if username.is_empty() {
            return Err(malformed(STEP, "an empty user name"));
        }
        let client_nonce = attribute(STEP, parts.next(), 'r')?;
        check_nonce(STEP, client_nonce)?;
        // Extensions (`m=`) are refused: none is supported.
        if let Some(extra) = parts.next() {
            return Err(malformed(STEP, format!("unexpected attribute {extra:?}")));
        }
        Ok(ClientFirst {
            username,
            client_nonce: client_nonce.to_owned(),
            bare: bare.to_owned(),
        })
    }
}

/// The server between its server-first message and the client-final.
#[derive(Debug)]
pub struct ScramServer {
    credential: StoredCredential,
    nonce: String,
    client_first_bare: String,
    server_first: String,
}

impl ScramServer {
    /// Answers `client_first` for `credential` (the user's, or a
    /// [`StoredCredential::decoy`]), appending `server_nonce` (fresh and
    /// random, printable ASCII without `,`) to the client's nonce.
    ///
    /// # Errors
    /// [`ScramError::Malformed`] for a bad `server_nonce`.
    pub fn start(
        client_first: &ClientFirst,
        credential: StoredCredential,
        server_nonce: &str,
    ) -> Result<(ScramServer, Vec<u8>), ScramError> {
        check_nonce("server nonce", server_nonce)?;
        let nonce = format!("{}{server_nonce}", client_first.client_nonce);
        let server_first = format!(
            "r={nonce},s={},i={}",
            BASE64.encode(&credential.salt),
            credential.iterations
        );
        let message = server_first.clone().into_bytes();
        Ok((
            ScramServer {
                credential,
                nonce,
                client_first_bare: client_first.bare.clone(),
                server_first,
            },
            message,
        ))
    }

    /// Checks the client-final message: on success the server-final
    /// message to send.
    ///
    /// # Errors
    /// [`ScramError::Malformed`], [`ScramError::NonceMismatch`], or
    /// [`ScramError::BadProof`] (wrong password, unknown user).
    pub fn finish(&self, client_final: &[u8]) -> Result<Vec<u8>, ScramError> {
        const STEP: &str = "client-final";
        let message = text(STEP, client_final)?;
        let (without_proof, proof) = message
            .rsplit_once(",p=")
            .ok_or_else(|| malformed(STEP, "missing p="))?;
        let mut parts = without_proof.split(',');
        if attribute(STEP, parts.next(), 'c')? != GS2_HEADER_BASE64 {
            return Err(malformed(STEP, "the channel binding is not c=biws"));
        }
        if attribute(STEP, parts.next(), 'r')? != self.nonce {
            return Err(ScramError::NonceMismatch);
        }
        if let Some(extra) = parts.next() {
            return Err(malformed(STEP, format!("unexpected attribute {extra:?}")));
        }
        let proof = BASE64
            .decode(proof)
            .map_err(|_| malformed(STEP, "the proof is not base64"))?;
        let mechanism = self.credential.mechanism;
        let auth_message = format!(
            "{},{},{without_proof}",
            self.client_first_bare, self.server_first
        );
        let signature = mechanism.hmac(&self.credential.stored_key, &[auth_message.as_bytes()]);
        if proof.len() != signature.len() {
            return Err(ScramError::BadProof);
        }
        let client_key: Vec<u8> = proof.iter().zip(&signature).map(|(a, b)| a ^ b).collect();
        let recomputed = mechanism.hash(&client_key);
        let equal = constant_time_eq(&recomputed, &self.credential.stored_key);
        if !equal {
            return Err(ScramError::BadProof);
        }
        let server_signature =
            mechanism.hmac(&self.credential.server_key, &[auth_message.as_bytes()]);
        Ok(format!("v={}", BASE64.encode(server_signature)).into_bytes())
    }
}

/// Compares two byte strings without stopping at the first difference.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The client side.
#[derive(Debug)]
pub struct ScramClient {
    mechanism: ScramMechanism,
    password: String,
    client_first_bare: String,
    client_nonce: String,
    /// The server signature to expect, once the client-final is built.
    expected_server_signature: Option<Vec<u8>>,
}

impl ScramClient {
    /// Starts an exchange for `username` with a fresh random `client_nonce`
    /// (printable ASCII without `,`).
    ///
    /// # Errors
    /// [`ScramError::UsernameTooLong`], or [`ScramError::Malformed`] for a
    /// bad nonce.
    pub fn new(
        mechanism: ScramMechanism,
        username: &str,
        password: &str,
        client_nonce: &str,
    ) -> Result<ScramClient, ScramError> {
        if username.len() > USERNAME_BYTES_MAX {
            return Err(ScramError::UsernameTooLong {
                len: username.len(),
            });
        }
        check_nonce("client nonce", client_nonce)?;
        Ok(ScramClient {
            mechanism,
            password: password.to_owned(),
            client_first_bare: format!("n={},r={client_nonce}", escape_username(username)),
            client_nonce: client_nonce.to_owned(),
            expected_server_signature: None,
        })
    }

    /// The client-first message.
    #[must_use]
    pub fn first(&self) -> Vec<u8> {
        format!("{GS2_HEADER}{}", self.client_first_bare).into_bytes()
    }

    /// Reads the server-first message and builds the client-final.
    ///
    /// # Errors
    /// [`ScramError::Malformed`] (a nonce that does not extend ours, too few
    /// iterations, bad base64).
    pub fn answer(&mut self, server_first: &[u8]) -> Result<Vec<u8>, ScramError> {
        const STEP: &str = "server-first";
        let message = text(STEP, server_first)?;
        let mut parts = message.split(',');
        let nonce = attribute(STEP, parts.next(), 'r')?;
        if !nonce.starts_with(&self.client_nonce) || nonce.len() == self.client_nonce.len() {
            return Err(malformed(
                STEP,
                "the server's nonce does not extend the client's",
            ));
        }
        check_nonce(STEP, nonce)?;
        let salt = BASE64
            .decode(attribute(STEP, parts.next(), 's')?)
            .map_err(|_| malformed(STEP, "the salt is not base64"))?;
        let iterations: u32 = attribute(STEP, parts.next(), 'i')?
            .parse()
            .map_err(|_| malformed(STEP, "the iteration count is not a number"))?;
        if iterations < ITERATIONS_MIN {
            return Err(ScramError::TooFewIterations { iterations });
        }
        let mechanism = self.mechanism;
        let salted = mechanism.salted_password(self.password.as_bytes(), &salt, iterations);
        let client_key = mechanism.hmac(&salted, &[b"Client Key"]);
        let stored_key = mechanism.hash(&client_key);
        let without_proof = format!("c={GS2_HEADER_BASE64},r={nonce}");
        let auth_message = format!("{},{message},{without_proof}", self.client_first_bare);
        let signature = mechanism.hmac(&stored_key, &[auth_message.as_bytes()]);
        let proof: Vec<u8> = client_key
            .iter()
            .zip(&signature)
            .map(|(a, b)| a ^ b)
            .collect();
        let server_key = mechanism.hmac(&salted, &[b"Server Key"]);
        self.expected_server_signature =
            Some(mechanism.hmac(&server_key, &[auth_message.as_bytes()]));
        Ok(format!("{without_proof},p={}", BASE64.encode(proof)).into_bytes())
    }

    /// Checks the server-final message: the server knew this user's keys.
    ///
    /// # Errors
    /// [`ScramError::BadServerSignature`], or [`ScramError::Malformed`].
    pub fn verify(&self, server_final: &[u8]) -> Result<(), ScramError> {
        const STEP: &str = "server-final";
        let message = text(STEP, server_final)?;
        if let Some(error) = message.strip_prefix("e=") {
            return Err(malformed(STEP, format!("the server refused: {error}")));
        }
        let signature = BASE64
            .decode(attribute(STEP, Some(message), 'v')?)
            .map_err(|_| malformed(STEP, "the signature is not base64"))?;
        match &self.expected_server_signature {
            Some(expected) if constant_time_eq(expected, &signature) => Ok(()),
            _ => Err(ScramError::BadServerSignature),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 7677 §3: the SCRAM-SHA-256 example exchange, byte for byte.
    #[test]
    fn the_rfc_7677_exchange_is_reproduced_on_both_sides() {
        let salt = BASE64.decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap();
        let credential =
            StoredCredential::derive(ScramMechanism::Sha256, "pencil", &salt, 4096).unwrap();
        let mut client = ScramClient::new(
            ScramMechanism::Sha256,
            "user",
            "pencil",
            "rOprNGfwEbeRWgbNEkqO",
        )
        .unwrap();
        let first = client.first();
        assert_eq!(first, b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO");
        let parsed = ClientFirst::parse(&first).unwrap();
        assert_eq!(parsed.username, "user");
        let (server, server_first) =
            ScramServer::start(&parsed, credential, "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0").unwrap();
        assert_eq!(
            String::from_utf8(server_first.clone()).unwrap(),
            "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
        );
        let client_final = client.answer(&server_first).unwrap();
        assert_eq!(
            String::from_utf8(client_final.clone()).unwrap(),
            "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
        );
        let server_final = server.finish(&client_final).unwrap();
        assert_eq!(
            String::from_utf8(server_final.clone()).unwrap(),
            "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
        );
        client.verify(&server_final).unwrap();
    }

    fn exchange(
        mechanism: ScramMechanism,
        stored_password: &str,
        tried_password: &str,
        server_nonce: &str,
    ) -> (Result<Vec<u8>, ScramError>, Vec<u8>) {
        let credential =
            StoredCredential::derive(mechanism, stored_password, b"0123456789abcdef", 4096)
                .unwrap();
        let mut client =
            ScramClient::new(mechanism, "alice", tried_password, "clientnonce").unwrap();
        let parsed = ClientFirst::parse(&client.first()).unwrap();
        let (server, server_first) = ScramServer::start(&parsed, credential, server_nonce).unwrap();
        let client_final = client.answer(&server_first).unwrap();
        (server.finish(&client_final), client_final)
    }

    #[test]
    fn sha_512_round_trips_and_a_wrong_password_is_refused() {
        for mechanism in ScramMechanism::ALL {
            assert!(
                exchange(mechanism, "s3cret", "s3cret", "servernonce")
                    .0
                    .is_ok()
            );
            assert_eq!(
                exchange(mechanism, "s3cret", "guess", "servernonce").0,
                Err(ScramError::BadProof)
            );
        }
        assert_eq!(
            ScramMechanism::from_name("SCRAM-SHA-512"),
            Some(ScramMechanism::Sha512)
        );
        assert_eq!(ScramMechanism::from_name("PLAIN"), None);
    }

    #[test]
    fn a_replayed_client_final_fails_against_a_new_server_nonce() {
        let mechanism = ScramMechanism::Sha256;
        let (accepted, recorded) = exchange(mechanism, "s3cret", "s3cret", "first");
        assert!(accepted.is_ok());
        let credential =
            StoredCredential::derive(mechanism, "s3cret", b"0123456789abcdef", 4096).unwrap();
        let client = ScramClient::new(mechanism, "alice", "s3cret", "clientnonce").unwrap();
        let parsed = ClientFirst::parse(&client.first()).unwrap();
        let (server, _) = ScramServer::start(&parsed, credential, "second").unwrap();
        assert_eq!(server.finish(&recorded), Err(ScramError::NonceMismatch));
    }

    #[test]
    fn an_unknown_user_looks_like_a_known_one_until_the_proof() {
        let secret = b"broker decoy secret";
        let one = StoredCredential::decoy(
            ScramMechanism::Sha256,
            "mallory",
            secret,
            ITERATIONS_DEFAULT,
        );
        let again = StoredCredential::decoy(
            ScramMechanism::Sha256,
            "mallory",
            secret,
            ITERATIONS_DEFAULT,
        );
        assert_eq!(one, again, "asking twice must give the same salt");
        assert_eq!(one.salt.len(), SALT_BYTES);
        assert_eq!(one.iterations, ITERATIONS_DEFAULT);
        let mut client =
            ScramClient::new(ScramMechanism::Sha256, "mallory", "anything", "nonce").unwrap();
        let parsed = ClientFirst::parse(&client.first()).unwrap();
        let (server, server_first) = ScramServer::start(&parsed, one, "server").unwrap();
        let client_final = client.answer(&server_first).unwrap();
        let refused = server.finish(&client_final).unwrap_err();
        assert_eq!(refused, ScramError::BadProof);
        assert_eq!(
            refused.client_message(),
            "authentication failed: wrong user name or password"
        );
    }

    #[test]
    fn malformed_truncated_and_over_long_messages_are_refused() {
        let long = "u".repeat(USERNAME_BYTES_MAX + 1);
        assert_eq!(
            ClientFirst::parse(format!("n,,n={long},r=abc").as_bytes()),
            Err(ScramError::UsernameTooLong {
                len: USERNAME_BYTES_MAX + 1
            })
        );
        assert!(ScramClient::new(ScramMechanism::Sha256, &long, "p", "abc").is_err());
        for bad in [
            &b"p=tls-unique,,n=user,r=abc"[..],
            b"n,a=admin,n=user,r=abc",
            b"n,,n=user",
            b"n,,n=user,r=",
            b"n,,n=us=3Xer,r=abc",
            b"n,,n=user,r=abc,m=ext",
            b"n,,",
            b"",
            &[0xff, 0xfe],
        ] {
            assert!(
                matches!(ClientFirst::parse(bad), Err(ScramError::Malformed { .. })),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        // Escapes round-trip.
        let client = ScramClient::new(ScramMechanism::Sha256, "a=b,c", "p", "abc").unwrap();
        assert_eq!(
            ClientFirst::parse(&client.first()).unwrap().username,
            "a=b,c"
        );

        let credential =
            StoredCredential::derive(ScramMechanism::Sha256, "p", b"salt", 4096).unwrap();
        let parsed = ClientFirst::parse(b"n,,n=user,r=abc").unwrap();
        let (server, _) = ScramServer::start(&parsed, credential, "xyz").unwrap();
        for bad in [
            &b""[..],
            b"c=biws,r=abcxyz",
            b"c=eSws,r=abcxyz,p=AAAA",
            b"c=biws,r=abcxyz,p=!!",
            b"c=biws,r=abcxyz,p=AAAA",
        ] {
            assert!(
                server.finish(bad).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        assert_eq!(
            StoredCredential::derive(ScramMechanism::Sha256, "p", b"salt", 4095),
            Err(ScramError::TooFewIterations { iterations: 4095 })
        );
        let mut client = ScramClient::new(ScramMechanism::Sha256, "user", "p", "abc").unwrap();
        // A server whose nonce does not extend the client's, or asks for
        // too few iterations.
        assert!(client.answer(b"r=other,s=c2FsdA==,i=4096").is_err());
        assert!(client.answer(b"r=abc,s=c2FsdA==,i=4096").is_err());
        assert_eq!(
            client.answer(b"r=abcxyz,s=c2FsdA==,i=1"),
            Err(ScramError::TooFewIterations { iterations: 1 })
        );
        // A server-final before the client-final, or a forged one.
        assert_eq!(
            client.verify(b"v=AAAA"),
            Err(ScramError::BadServerSignature)
        );
    }
}
