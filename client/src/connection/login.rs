//! Logging in to the brokers: SCRAM-SHA-256 or SCRAM-SHA-512 (RFC 5802,
//! RFC 7677) over `Authenticate`, right after the handshake of every
//! connection. The password stays in this process: the broker sees a
//! proof, and proves in turn that it holds the user's credential.

use std::time::Duration;

use corelog_wire::error::ErrorCode;
use corelog_wire::message::authenticate::AuthenticateRequest;
use corelog_wire::sasl::scram::ScramClient;

use super::Connection;
use crate::error::ClientError;
use crate::sasl::SaslCredentials;

/// Runs the SCRAM exchange on a fresh connection.
///
/// # Errors
/// The broker's refusal (`AUTHENTICATION_FAILED` for a wrong user name or
/// password, `UNSUPPORTED_SASL_MECHANISM`), or
/// [`ClientError::Authentication`] when the broker cannot prove that it
/// holds the user's credential.
pub(crate) async fn login(
    connection: &Connection,
    credentials: &SaslCredentials,
) -> Result<(), ClientError> {
    let addr = connection.addr().to_owned();
    let refused = |detail: String| ClientError::Authentication {
        addr: addr.clone(),
        user: credentials.username().to_owned(),
        detail,
    };
    let mut nonce = [0u8; 18];
    getrandom::fill(&mut nonce).map_err(|error| refused(format!("no randomness: {error}")))?;
    let nonce: String = nonce.iter().map(|byte| format!("{byte:02x}")).collect();
    let mut client = ScramClient::new(
        credentials.mechanism(),
        credentials.username(),
        credentials.password(),
        &nonce,
    )
    .map_err(|error| refused(error.to_string()))?;
    let server_first = step(connection, credentials, client.first()).await?;
    if server_first.1 {
        return Err(refused("the broker ended the exchange early".to_owned()));
    }
    let client_final = client
        .answer(&server_first.0)
        .map_err(|error| refused(error.to_string()))?;
    let (server_final, complete) = step(connection, credentials, client_final).await?;
    if !complete {
        return Err(refused(
            "the broker did not complete the exchange".to_owned(),
        ));
    }
    client
        .verify(&server_final)
        .map_err(|error| refused(error.to_string()))
}

/// One exchange step: the server's payload and whether it completed.
async fn step(
    connection: &Connection,
    credentials: &SaslCredentials,
    payload: Vec<u8>,
) -> Result<(Vec<u8>, bool), ClientError> {
    let request = AuthenticateRequest {
        mechanism: credentials.mechanism().name().to_owned(),
        payload,
    };
    let reply = connection
        .call(&request, Vec::new(), Duration::ZERO)
        .await?;
    let (response, _) = reply.decode()?;
    let code = response.error_code.to_native();
    if code != ErrorCode::None.code() {
        let detail = response.error_message.as_ref().map(|m| m.to_string());
        return Err(ClientError::from_wire(
            code,
            || {
                format!(
                    "logging in to {} as {}",
                    connection.addr(),
                    credentials.username()
                )
            },
            detail,
        )
        .unwrap_or_else(|| ClientError::Authentication {
            addr: connection.addr().to_owned(),
            user: credentials.username().to_owned(),
            detail: "refused without a code".to_owned(),
        }));
    }
    Ok((response.payload.to_vec(), response.complete))
}
