//! SCRAM credentials between their wire form (`AlterUsers`,
//! `ControllerOperation`) and the metadata's
//! ([`corelog_controller::users`]).

use corelog_controller::users::check_credentials;
use corelog_wire::error::ErrorCode;
use corelog_wire::message::alter_users::ScramCredentialEntry;
use corelog_wire::sasl::scram::{ScramMechanism, StoredCredential};

/// The stored form of `entries`, checked by the metadata's rules.
///
/// # Errors
/// `UNSUPPORTED_SASL_MECHANISM` for a mechanism other than SCRAM-SHA-256
/// and SCRAM-SHA-512; `INVALID_REQUEST` for credentials the rules refuse;
/// each with a message saying which.
pub fn stored(
    entries: Vec<ScramCredentialEntry>,
) -> Result<Vec<StoredCredential>, (ErrorCode, String)> {
    let mut credentials = entries
        .into_iter()
        .map(|entry| {
            let mechanism = ScramMechanism::from_name(&entry.mechanism).ok_or_else(|| {
                (
                    ErrorCode::UnsupportedSaslMechanism,
                    format!(
                        "mechanism {:?} is not offered; use {} or {}",
                        entry.mechanism,
                        ScramMechanism::Sha256.name(),
                        ScramMechanism::Sha512.name()
                    ),
                )
            })?;
            Ok(StoredCredential {
                mechanism,
                salt: entry.salt,
                iterations: entry.iterations,
                stored_key: entry.stored_key,
                server_key: entry.server_key,
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    // The metadata keeps them in mechanism order.
    credentials.sort_by_key(|credential| credential.mechanism == ScramMechanism::Sha512);
    check_credentials(&credentials).map_err(|reason| (ErrorCode::InvalidRequest, reason))?;
    Ok(credentials)
}

/// The wire form of a stored credential.
#[must_use]
pub fn entry(credential: &StoredCredential) -> ScramCredentialEntry {
    ScramCredentialEntry {
        mechanism: credential.mechanism.name().to_owned(),
        salt: credential.salt.clone(),
        iterations: credential.iterations,
        stored_key: credential.stored_key.clone(),
        server_key: credential.server_key.clone(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use corelog_wire::sasl::scram::ITERATIONS_MIN;

    use super::*;

    fn credential(mechanism: ScramMechanism) -> StoredCredential {
        StoredCredential::derive(mechanism, "pw", b"0123456789abcdef", ITERATIONS_MIN).unwrap()
    }

    #[test]
    fn entries_round_trip_in_mechanism_order() {
        let both = vec![
            credential(ScramMechanism::Sha256),
            credential(ScramMechanism::Sha512),
        ];
        let reversed = both.iter().rev().map(entry).collect();
        assert_eq!(stored(reversed).unwrap(), both);
    }

    #[test]
    fn unknown_mechanisms_and_weak_credentials_are_refused_by_code() {
        let mut plain = entry(&credential(ScramMechanism::Sha256));
        plain.mechanism = "PLAIN".to_owned();
        assert_eq!(
            stored(vec![plain]).unwrap_err().0,
            ErrorCode::UnsupportedSaslMechanism
        );
        let mut weak = entry(&credential(ScramMechanism::Sha256));
        weak.iterations = 1;
        let (code, reason) = stored(vec![weak]).unwrap_err();
        assert_eq!(code, ErrorCode::InvalidRequest);
        assert!(reason.contains("iterations"), "{reason}");
        assert_eq!(stored(Vec::new()).unwrap_err().0, ErrorCode::InvalidRequest);
    }
}
