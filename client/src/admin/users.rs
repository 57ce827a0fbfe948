//! Users: create one or change its password ([`Admin::put_user`]), delete
//! one, list them. The client derives the salted keys (PBKDF2 with a fresh
//! random salt) and sends only those: the password never leaves this
//! process.

use std::time::Duration;

use corelog_wire::message::alter_users::{AlterUsersRequest, ScramCredentialEntry, UserChange};
use corelog_wire::message::describe_users::DescribeUsersRequest;
use corelog_wire::sasl::scram::{SALT_BYTES, ScramMechanism, StoredCredential};
use serde::Serialize;

use super::Admin;
use crate::error::ClientError;

/// How long the broker may take to commit a user change.
const USER_CHANGE_TIMEOUT: Duration = Duration::from_secs(20);

/// PBKDF2 iterations of new credentials unless asked otherwise: twice
/// RFC 7677's minimum, the count the broker gives unknown users' decoys.
pub const DEFAULT_ITERATIONS: u32 = corelog_wire::sasl::scram::ITERATIONS_DEFAULT;

/// A user as the cluster describes it: no key, no salt.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct UserListing {
    /// Its name.
    pub name: String,
    /// Its credentials' mechanisms and PBKDF2 iterations.
    pub credentials: Vec<(String, u32)>,
}

impl Admin {
    /// Creates `name` with `password`, or gives it that password if it
    /// exists, with a credential per mechanism of `mechanisms` derived with
    /// `iterations` PBKDF2 iterations. Returns whether the user is new. The
    /// user's open connections are closed if its password changed.
    ///
    /// # Errors
    /// `INVALID_REQUEST` for a name or iteration count the cluster refuses;
    /// connection errors.
    pub async fn put_user(
        &self,
        name: &str,
        password: &str,
        mechanisms: &[ScramMechanism],
        iterations: u32,
    ) -> Result<bool, ClientError> {
        if mechanisms.is_empty() {
            return Err(ClientError::InvalidArgument(
                "a user needs at least one mechanism".to_owned(),
            ));
        }
        let mut credentials = Vec::with_capacity(mechanisms.len());
        for mechanism in mechanisms {
            let mut salt = [0u8; SALT_BYTES];
            getrandom::fill(&mut salt).map_err(|error| {
                ClientError::InvalidArgument(format!("no randomness for a salt: {error}"))
            })?;
            let derived = StoredCredential::derive(*mechanism, password, &salt, iterations)
                .map_err(|error| ClientError::InvalidArgument(error.to_string()))?;
            credentials.push(ScramCredentialEntry {
                mechanism: mechanism.name().to_owned(),
                salt: derived.salt,
                iterations: derived.iterations,
                stored_key: derived.stored_key,
                server_key: derived.server_key,
            });
        }
        self.alter_user(name, UserChange::Put { credentials }).await
    }

    /// Deletes `name`; its open connections are closed.
    ///
    /// # Errors
    /// `USER_NOT_FOUND`; connection errors.
    pub async fn delete_user(&self, name: &str) -> Result<(), ClientError> {
        self.alter_user(name, UserChange::Delete).await.map(drop)
    }

    async fn alter_user(&self, name: &str, change: UserChange) -> Result<bool, ClientError> {
        let request = AlterUsersRequest {
            name: name.to_owned(),
            change,
        };
        let connection = self.cluster.any_connection().await?;
        let reply = connection
            .call(&request, Vec::new(), USER_CHANGE_TIMEOUT)
            .await?;
        let (response, _) = reply.decode()?;
        let detail = response.error_message.as_ref().map(|m| m.to_string());
        match ClientError::from_wire(
            response.error_code.to_native(),
            || format!("user {name}"),
            detail,
        ) {
            Some(error) => Err(error),
            None => Ok(response.created),
        }
    }

    /// Every user of the cluster, by name.
    ///
    /// # Errors
    /// Connection errors.
    pub async fn list_users(&self) -> Result<Vec<UserListing>, ClientError> {
        let connection = self.cluster.any_connection().await?;
        let reply = connection
            .call(
                &DescribeUsersRequest { names: None },
                Vec::new(),
                Duration::ZERO,
            )
            .await?;
        let (response, _) = reply.decode()?;
        if let Some(error) =
            ClientError::from_wire(response.error_code.to_native(), || "users".to_owned(), None)
        {
            return Err(error);
        }
        Ok(response
            .users
            .iter()
            .map(|user| UserListing {
                name: user.name.to_string(),
                credentials: user
                    .mechanisms
                    .iter()
                    .zip(user.iterations.iter())
                    .map(|(mechanism, iterations)| (mechanism.to_string(), iterations.to_native()))
                    .collect(),
            })
            .collect())
    }
}
