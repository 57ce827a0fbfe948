//! Users and their SCRAM credentials, kept in cluster metadata so that
//! every broker can check a login: salted keys only (RFC 5802 §3), never a
//! password, replicated through Raft with the rest of the metadata.
//!
//! Encoding of one user (in [`crate::command::Command::PutUser`] and the
//! metadata snapshot):
//!
//! ```text
//! name str · changed at u64 (snapshot only)
//! · credentials: count u32 · (mechanism u8 (1 SHA-256, 2 SHA-512)
//!                             · salt bytes · iterations u32
//!                             · stored key bytes · server key bytes)*
//! ```

use corelog_wire::sasl::scram::{ITERATIONS_MIN, ScramMechanism, StoredCredential};

use crate::codec::{DecodeError, Reader, Writer};

pub use corelog_wire::sasl::scram::USERNAME_BYTES_MAX;

/// Most users a cluster holds: each costs every broker a little memory.
pub const USERS_MAX: usize = 100_000;
/// Longest salt accepted.
pub const SALT_BYTES_MAX: usize = 64;
/// Most PBKDF2 iterations accepted: every login costs the client this many
/// HMACs.
pub const ITERATIONS_MAX: u32 = 10_000_000;

/// A user: who it is and how it proves it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UserRecord {
    /// The SCRAM username, and the principal its connections act as.
    pub name: String,
    /// One per mechanism, SHA-256 before SHA-512.
    pub credentials: Vec<StoredCredential>,
    /// The metadata version that last set the credentials. A broker closes
    /// the connections a user authenticated under an older one (a changed
    /// password), as it does when the user is deleted.
    pub changed_at: u64,
}

impl UserRecord {
    /// The credential for `mechanism`, if the user has one.
    #[must_use]
    pub fn credential(&self, mechanism: ScramMechanism) -> Option<&StoredCredential> {
        self.credentials
            .iter()
            .find(|credential| credential.mechanism == mechanism)
    }
}

/// Checks a username: 1 to [`USERNAME_BYTES_MAX`] bytes of printable
/// characters other than `,` and `=` (which SCRAM would have to escape) and
/// spaces.
///
/// # Errors
/// What is wrong with it, as a sentence.
pub fn check_user_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > USERNAME_BYTES_MAX {
        return Err(format!(
            "a user name has 1 to {USERNAME_BYTES_MAX} bytes, not {}",
            name.len()
        ));
    }
    if let Some(bad) = name
        .chars()
        .find(|c| *c == ',' || *c == '=' || c.is_whitespace() || c.is_control())
    {
        return Err(format!(
            "user name {name:?} holds {bad:?}: use letters, digits and punctuation other than ',' and '='"
        ));
    }
    Ok(())
}

/// Checks a user's credentials: one or two, at most one per mechanism, in
/// mechanism order, each with a salt, at least [`ITERATIONS_MIN`]
/// iterations and keys of its hash's length.
///
/// # Errors
/// What is wrong with them, as a sentence.
pub fn check_credentials(credentials: &[StoredCredential]) -> Result<(), String> {
    if credentials.is_empty() || credentials.len() > ScramMechanism::ALL.len() {
        return Err(format!(
            "a user has 1 or 2 credentials, not {}",
            credentials.len()
        ));
    }
    for pair in credentials.windows(2) {
        if mechanism_code(pair[0].mechanism) >= mechanism_code(pair[1].mechanism) {
            return Err("credentials repeat a mechanism or are out of order".to_owned());
        }
    }
    for credential in credentials {
        let name = credential.mechanism.name();
        if credential.salt.is_empty() || credential.salt.len() > SALT_BYTES_MAX {
            return Err(format!("{name}: a salt has 1 to {SALT_BYTES_MAX} bytes"));
        }
        if !(ITERATIONS_MIN..=ITERATIONS_MAX).contains(&credential.iterations) {
            return Err(format!(
                "{name}: {} iterations, not {ITERATIONS_MIN} to {ITERATIONS_MAX}",
                credential.iterations
            ));
        }
        let key_bytes = credential.mechanism.key_bytes();
        if credential.stored_key.len() != key_bytes || credential.server_key.len() != key_bytes {
            return Err(format!("{name}: keys must have {key_bytes} bytes"));
        }
    }
    Ok(())
}

fn mechanism_code(mechanism: ScramMechanism) -> u8 {
    match mechanism {
        ScramMechanism::Sha256 => 1,
        ScramMechanism::Sha512 => 2,
    }
}

pub(crate) fn write_credentials(writer: &mut Writer, credentials: &[StoredCredential]) {
    writer.len(credentials.len());
    for credential in credentials {
        writer.u8(mechanism_code(credential.mechanism));
        writer.bytes(&credential.salt);
        writer.u32(credential.iterations);
        writer.bytes(&credential.stored_key);
        writer.bytes(&credential.server_key);
    }
}

/// Reads credentials; their rules are checked by the caller
/// ([`check_credentials`]), bounds here.
pub(crate) fn read_credentials(
    reader: &mut Reader<'_>,
) -> Result<Vec<StoredCredential>, DecodeError> {
    // A credential takes at least 17 bytes: code, three lengths, iterations.
    let count = reader.len("credentials", ScramMechanism::ALL.len(), 17)?;
    let mut credentials = Vec::with_capacity(count);
    for _ in 0..count {
        let at = reader.position();
        let mechanism = match reader.u8("mechanism")? {
            1 => ScramMechanism::Sha256,
            2 => ScramMechanism::Sha512,
            other => {
                return Err(reader.invalid_at("mechanism", at, format!("unknown code {other}")));
            }
        };
        credentials.push(StoredCredential {
            mechanism,
            salt: reader.bytes("salt", SALT_BYTES_MAX)?.to_vec(),
            iterations: reader.u32("iterations")?,
            stored_key: reader.bytes("stored key", 64)?.to_vec(),
            server_key: reader.bytes("server key", 64)?.to_vec(),
        });
    }
    Ok(credentials)
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn credential(mechanism: ScramMechanism, password: &str) -> StoredCredential {
        StoredCredential::derive(mechanism, password, b"a salt of 16 byt", ITERATIONS_MIN).unwrap()
    }

    #[test]
    fn user_names_are_printable_without_commas_equals_or_spaces() {
        assert!(check_user_name("tenant-a.reader@example").is_ok());
        for bad in ["", "a,b", "a=b", "a b", "tab\t", &"x".repeat(256)] {
            assert!(check_user_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn credentials_are_one_per_mechanism_in_order_with_enough_iterations() {
        let sha256 = credential(ScramMechanism::Sha256, "pw");
        let sha512 = credential(ScramMechanism::Sha512, "pw");
        assert!(check_credentials(std::slice::from_ref(&sha256)).is_ok());
        assert!(check_credentials(&[sha256.clone(), sha512.clone()]).is_ok());
        assert!(check_credentials(&[]).is_err());
        assert!(check_credentials(&[sha512.clone(), sha256.clone()]).is_err());
        assert!(check_credentials(&[sha256.clone(), sha256.clone()]).is_err());
        let weak = StoredCredential {
            iterations: ITERATIONS_MIN - 1,
            ..sha256.clone()
        };
        assert!(
            check_credentials(&[weak])
                .unwrap_err()
                .contains("iterations")
        );
        let short_key = StoredCredential {
            stored_key: vec![0; 16],
            ..sha256
        };
        assert!(
            check_credentials(&[short_key])
                .unwrap_err()
                .contains("32 bytes")
        );
    }

    #[test]
    fn credentials_round_trip() {
        let credentials = vec![
            credential(ScramMechanism::Sha256, "pw"),
            credential(ScramMechanism::Sha512, "pw"),
        ];
        let mut writer = Writer::default();
        write_credentials(&mut writer, &credentials);
        let mut reader = Reader::new(&writer.bytes, 0);
        assert_eq!(read_credentials(&mut reader).unwrap(), credentials);
        reader.finish().unwrap();
    }
}
