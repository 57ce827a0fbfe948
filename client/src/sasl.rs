//! Who the client logs in as: [`SaslCredentials`] for SCRAM-SHA-256 or
//! SCRAM-SHA-512 (RFC 5802, RFC 7677). The configuration holds them; the
//! exchange itself runs on each new connection (`connection::login`). This
//! module names no connection, so that the configuration can hold
//! credentials without depending on the connection that reads it.

use std::fmt;
use std::path::Path;

use corelog_wire::sasl::scram::USERNAME_BYTES_MAX;

pub use corelog_wire::sasl::scram::ScramMechanism;

use crate::error::ClientError;

/// Who the client logs in as.
#[derive(Clone)]
pub struct SaslCredentials {
    mechanism: ScramMechanism,
    username: String,
    password: String,
}

impl fmt::Debug for SaslCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SaslCredentials")
            .field("mechanism", &self.mechanism.name())
            .field("username", &self.username)
            .finish_non_exhaustive()
    }
}

impl SaslCredentials {
    /// Logs in as `username` with `password` by `mechanism`.
    ///
    /// # Errors
    /// [`ClientError::InvalidConfig`] for an empty or over-long user name
    /// or an empty password.
    pub fn scram(
        mechanism: ScramMechanism,
        username: &str,
        password: &str,
    ) -> Result<SaslCredentials, ClientError> {
        if username.is_empty() || username.len() > USERNAME_BYTES_MAX {
            return Err(ClientError::InvalidConfig(format!(
                "a user name has 1 to {USERNAME_BYTES_MAX} bytes"
            )));
        }
        if password.is_empty() {
            return Err(ClientError::InvalidConfig(
                "the password is empty".to_owned(),
            ));
        }
        Ok(SaslCredentials {
            mechanism,
            username: username.to_owned(),
            password: password.to_owned(),
        })
    }

    /// Like [`SaslCredentials::scram`], with the password read from the
    /// first line of `path`.
    ///
    /// # Errors
    /// [`ClientError::InvalidConfig`] naming the file if it cannot be read.
    pub fn scram_from_file(
        mechanism: ScramMechanism,
        username: &str,
        path: &Path,
    ) -> Result<SaslCredentials, ClientError> {
        let text = std::fs::read_to_string(path).map_err(|error| {
            ClientError::InvalidConfig(format!(
                "cannot read the password file {}: {error}",
                path.display()
            ))
        })?;
        let password = text.lines().next().unwrap_or("");
        Self::scram(mechanism, username, password)
    }

    /// The user name.
    #[must_use]
    pub fn username(&self) -> &str {
        &self.username
    }

    /// The mechanism to log in by.
    pub(crate) fn mechanism(&self) -> ScramMechanism {
        self.mechanism
    }

    /// The password, for the exchange only: never printed (the `Debug`
    /// form leaves it out).
    pub(crate) fn password(&self) -> &str {
        &self.password
    }
}
