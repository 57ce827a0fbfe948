//! TLS to the brokers: rustls with the *ring* provider through
//! tokio-rustls, verifying each broker's certificate against the CA the
//! user names (`--tls-ca`), and presenting a client certificate when given
//! one (`--tls-cert`, `--tls-key`) for brokers that ask for it.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::crypto::{CryptoProvider, ring};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{CertificateError, RootCertStore};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

use crate::error::ClientError;

/// How the client speaks TLS: whom it trusts, and what it presents.
#[derive(Clone)]
pub struct ClientTls {
    config: Arc<rustls::ClientConfig>,
    ca: PathBuf,
}

impl fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientTls")
            .field("ca", &self.ca)
            .finish_non_exhaustive()
    }
}

impl ClientTls {
    /// Trusts the CA certificates of the PEM file `ca`, and presents the
    /// certificate chain and key of `identity` (two PEM files) if given.
    ///
    /// # Errors
    /// [`ClientError::InvalidConfig`] naming the file at fault.
    pub fn from_files(
        ca: &Path,
        identity: Option<(&Path, &Path)>,
    ) -> Result<ClientTls, ClientError> {
        let mut roots = RootCertStore::empty();
        for certificate in certificates(ca)? {
            roots
                .add(certificate)
                .map_err(|error| invalid(ca, &format!("not a usable CA certificate: {error}")))?;
        }
        let builder = rustls::ClientConfig::builder_with_provider(Arc::new(provider()))
            .with_safe_default_protocol_versions()
            .map_err(|error| ClientError::InvalidConfig(format!("TLS: {error}")))?
            .with_root_certificates(roots);
        let config = match identity {
            None => builder.with_no_client_auth(),
            Some((cert, key)) => {
                let chain = certificates(cert)?;
                let key_bytes = read(key)?;
                let private = PrivateKeyDer::from_pem_slice(&key_bytes).map_err(|error| {
                    invalid(key, &format!("no PEM private key in it ({error})"))
                })?;
                builder
                    .with_client_auth_cert(chain, private)
                    .map_err(|error| invalid(cert, &format!("unusable with its key: {error}")))?
            }
        };
        Ok(ClientTls {
            config: Arc::new(config),
            ca: ca.to_owned(),
        })
    }

    /// Runs the TLS handshake on `stream` to the broker at `addr`
    /// (`host:port`), whose certificate must name `host`.
    ///
    /// # Errors
    /// [`ClientError::Tls`] saying why the broker was not trusted, or that
    /// it does not speak TLS; [`ClientError::InvalidConfig`] for a host
    /// that cannot be a TLS server name.
    pub(crate) async fn connect(
        &self,
        addr: &str,
        stream: TcpStream,
    ) -> Result<TlsStream<TcpStream>, ClientError> {
        let host = server_host(addr);
        let name = ServerName::try_from(host.to_owned()).map_err(|_| {
            ClientError::InvalidConfig(format!("{host:?} (of {addr}) is not a host name for TLS"))
        })?;
        tokio_rustls::TlsConnector::from(self.config.clone())
            .connect(name, stream)
            .await
            .map_err(|error| handshake_failure(addr, &error, &self.ca.display()))
    }
}

/// The error of a failed handshake. A TLS error (the broker's certificate
/// is not trusted, it refused ours, it does not speak TLS) says what to do
/// and is not retried. A connection that broke off before the handshake
/// ended (end of stream, reset) is retriable: it is what a broker that died
/// behind an address that still accepts looks like (a proxy, a load
/// balancer), and giving up on it for good stopped a group member.
fn handshake_failure(addr: &str, error: &std::io::Error, ca: &dyn fmt::Display) -> ClientError {
    if rustls_error(error).is_none() {
        return ClientError::ConnectionLost {
            addr: addr.to_owned(),
            reason: format!("the TLS handshake broke off: {error}"),
        };
    }
    ClientError::Tls {
        addr: addr.to_owned(),
        detail: explain(error, ca),
    }
}

/// What a failed handshake (or a read right after it, where TLS 1.3
/// reports a refused client certificate) means for the user.
pub(crate) fn explain(error: &std::io::Error, ca: &dyn fmt::Display) -> String {
    let Some(tls) = rustls_error(error) else {
        return format!("the TLS handshake failed: {error}");
    };
    match tls {
        rustls::Error::InvalidMessage(_) => {
            "the broker answered in plaintext: its listener does not speak TLS; connect without \
             --tls-ca, or turn TLS on at the broker (--tls-cert and --tls-key)"
                .to_owned()
        }
        rustls::Error::InvalidCertificate(reason) => match reason {
            CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
                "the broker's certificate has expired: renew it and reload the broker (SIGHUP)"
                    .to_owned()
            }
            CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
                "the broker's certificate is not valid yet: check the clocks, or the certificate's \
                 start date"
                    .to_owned()
            }
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => {
                "the broker's certificate does not name the host connected to: connect by a name \
                 (or IP address) the certificate lists"
                    .to_owned()
            }
            CertificateError::UnknownIssuer => format!(
                "the broker's certificate is not signed by the CA of {ca}: pass the CA that \
                 signed it with --tls-ca"
            ),
            other => format!("the broker's certificate was refused: {other:?}"),
        },
        rustls::Error::AlertReceived(alert) => format!(
            "the broker refused the TLS handshake ({alert:?}): if it requires client \
             certificates, pass --tls-cert and --tls-key signed by a CA it trusts"
        ),
        other => format!("the TLS handshake failed: {other}"),
    }
}

/// The TLS error inside an I/O error of a TLS stream, if that is what it
/// is.
pub(crate) fn rustls_error(error: &std::io::Error) -> Option<&rustls::Error> {
    error
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
}

/// The host of `host:port`, without the brackets of an IPv6 address.
fn server_host(addr: &str) -> &str {
    let host = addr.rsplit_once(':').map_or(addr, |(host, _)| host);
    host.strip_prefix('[')
        .and_then(|inner| inner.strip_suffix(']'))
        .unwrap_or(host)
}

/// rustls with *ring*, as in the broker (which says why).
#[allow(deprecated)]
fn provider() -> CryptoProvider {
    ring::default_provider()
}

fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, ClientError> {
    let bytes = read(path)?;
    let certificates = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| invalid(path, &format!("unreadable PEM: {error}")))?;
    if certificates.is_empty() {
        return Err(invalid(
            path,
            "holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
        ));
    }
    Ok(certificates)
}

fn read(path: &Path) -> Result<Vec<u8>, ClientError> {
    std::fs::read(path).map_err(|error| invalid(path, &format!("cannot read it: {error}")))
}

fn invalid(path: &Path, message: &str) -> ClientError {
    ClientError::InvalidConfig(format!("TLS file {}: {message}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_server_name_is_the_host_of_the_address() {
        assert_eq!(server_host("broker-1.example:7100"), "broker-1.example");
        assert_eq!(server_host("127.0.0.1:7100"), "127.0.0.1");
        assert_eq!(server_host("[::1]:7100"), "::1");
    }

    #[test]
    fn a_handshake_that_broke_off_is_retried_and_a_refused_one_is_not() {
        let eof = std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "tls handshake eof");
        let broke_off = handshake_failure("127.0.0.1:7100", &eof, &"ca.pem");
        assert!(broke_off.is_retriable(), "{broke_off}");
        assert!(
            broke_off
                .to_string()
                .contains("the TLS handshake broke off"),
            "{broke_off}"
        );
        let distrusted = std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer),
        );
        let refused = handshake_failure("127.0.0.1:7100", &distrusted, &"ca.pem");
        assert!(!refused.is_retriable(), "{refused}");
        assert!(
            refused
                .to_string()
                .contains("not signed by the CA of ca.pem"),
            "{refused}"
        );
    }

    #[test]
    fn a_missing_or_empty_ca_file_is_named() {
        let dir = std::env::temp_dir().join(format!("corelog-tls-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let empty = dir.join("empty.pem");
        std::fs::write(&empty, "no certificate here\n").unwrap();
        let error = ClientTls::from_files(&empty, None).unwrap_err().to_string();
        assert!(error.contains("holds no PEM certificate"), "{error}");
        let missing = dir.join("missing.pem");
        let error = ClientTls::from_files(&missing, None)
            .unwrap_err()
            .to_string();
        assert!(error.contains("cannot read it"), "{error}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
