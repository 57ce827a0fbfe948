//! TLS on the client listener and between brokers: rustls with the ring
//! provider, through futures-rustls over glommio's streams.
//!
//! The broker's certificate and key are held by a [`CertificateStore`]
//! that every handshake asks for them, server side and (for peers that
//! require client certificates) client side, so a reload on SIGHUP reaches
//! new connections while open ones keep their sessions.
//!
//! A listener with TLS tells a plaintext client so: the first byte of a
//! TLS connection is a handshake record (0x16), which no corelog frame
//! starts with (it would promise a frame of over 350 MiB), so anything
//! else is answered in plaintext with `TLS_REQUIRED` ([`is_tls_hello`]).

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock};

use futures::{AsyncRead, AsyncWrite};
use rustls::client::ResolvesClientCert;
use rustls::crypto::{CryptoProvider, ring};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{RootCertStore, SignatureScheme};

use crate::config::{ClientAuth, PrincipalFrom, TlsSettings, TlsVersion};

/// A connection's byte stream, plaintext or TLS.
pub trait Duplex: AsyncRead + AsyncWrite + Unpin {}

impl<T: AsyncRead + AsyncWrite + Unpin> Duplex for T {}

/// A connection's byte stream, whichever it is.
pub type Stream = Box<dyn Duplex>;

/// The first byte of a TLS connection: a handshake record.
const TLS_HANDSHAKE_RECORD: u8 = 0x16;

/// Whether a connection's first byte starts a TLS handshake.
#[must_use]
pub fn is_tls_hello(first_byte: u8) -> bool {
    first_byte == TLS_HANDSHAKE_RECORD
}

/// Why TLS cannot be set up from the configured files.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file cannot be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// A file does not hold what it should.
    #[error("{}: {message}", path.display())]
    Content {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// rustls refused the combination.
    #[error("TLS settings refused: {0}")]
    Refused(#[from] rustls::Error),
}

/// The broker's TLS: the listener's configuration, and the one its
/// connections to other brokers use.
pub struct BrokerTls {
    store: Arc<CertificateStore>,
    server: Arc<rustls::ServerConfig>,
    peer: Option<Arc<rustls::ClientConfig>>,
    principal_from: PrincipalFrom,
}

impl fmt::Debug for BrokerTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BrokerTls")
            .field("cert", &self.store.cert)
            .field("peer", &self.peer.is_some())
            .finish_non_exhaustive()
    }
}

impl BrokerTls {
    /// Reads the certificate, key and CA files of `settings`.
    ///
    /// # Errors
    /// [`TlsError`] naming the file at fault.
    pub fn load(settings: &TlsSettings) -> Result<BrokerTls, TlsError> {
        let provider = Arc::new(provider());
        let versions: &[&rustls::SupportedProtocolVersion] = match settings.min_version {
            TlsVersion::Tls13 => &[&rustls::version::TLS13],
            TlsVersion::Tls12 => &[&rustls::version::TLS13, &rustls::version::TLS12],
        };
        let store = Arc::new(CertificateStore::load(&settings.cert, &settings.key)?);
        let roots = match &settings.client_ca {
            Some(path) => Some(Arc::new(root_store(path)?)),
            None => None,
        };
        let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(versions)?;
        let builder = match (&roots, settings.client_auth) {
            (Some(roots), ClientAuth::Optional | ClientAuth::Required) => {
                let verifier =
                    WebPkiClientVerifier::builder_with_provider(roots.clone(), provider.clone());
                let verifier = if settings.client_auth == ClientAuth::Optional {
                    verifier.allow_unauthenticated()
                } else {
                    verifier
                };
                let verifier = verifier
                    .build()
                    .map_err(|error| rustls::Error::General(error.to_string()))?;
                builder.with_client_cert_verifier(verifier)
            }
            _ => builder.with_no_client_auth(),
        };
        let server = builder.with_cert_resolver(store.clone());
        let peer = match roots {
            Some(roots) => Some(Arc::new(
                rustls::ClientConfig::builder_with_provider(provider)
                    .with_protocol_versions(versions)?
                    .with_root_certificates(roots)
                    .with_client_cert_resolver(store.clone()),
            )),
            None => None,
        };
        Ok(BrokerTls {
            store,
            server: Arc::new(server),
            peer,
            principal_from: settings.principal_from,
        })
    }

    /// Accepts TLS on connections of the listener.
    #[must_use]
    pub fn listener(&self) -> ListenerTls {
        ListenerTls {
            acceptor: futures_rustls::TlsAcceptor::from(self.server.clone()),
            principal_from: self.principal_from,
        }
    }

    /// Opens TLS on connections to other brokers, verifying them against
    /// the cluster's CA; `None` when no CA is configured (a single node).
    #[must_use]
    pub fn peer_connector(&self) -> Option<PeerConnector> {
        self.peer.clone().map(PeerConnector)
    }

    /// Reads the certificate and key files again: new handshakes use
    /// them, open connections keep theirs. Returns what the new
    /// certificate is.
    ///
    /// # Errors
    /// [`TlsError`] naming the file at fault; the old pair stays in use.
    pub fn reload(&self) -> Result<CertificateInfo, TlsError> {
        self.store.reload()
    }

    /// The certificate in use.
    #[must_use]
    pub fn certificate(&self) -> CertificateInfo {
        self.store.info()
    }
}

/// What a certificate says about itself, for the log: whom it names and
/// until when it is valid.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertificateInfo {
    /// Its subject, e.g. `CN=broker-1.example`.
    pub subject: String,
    /// Its last valid second, as the certificate writes it.
    pub not_after: String,
    /// The same as a Unix timestamp, seconds.
    pub not_after_unix: i64,
}

impl CertificateInfo {
    /// Whole days from `now_unix` until it expires; negative once expired.
    #[must_use]
    pub fn days_left(&self, now_unix: i64) -> i64 {
        (self.not_after_unix - now_unix).div_euclid(86_400)
    }

    fn of(der: &CertificateDer<'_>, path: &Path) -> Result<CertificateInfo, TlsError> {
        let (_, parsed) =
            x509_parser::parse_x509_certificate(der).map_err(|error| TlsError::Content {
                path: path.to_owned(),
                message: format!("its first certificate cannot be parsed: {error}"),
            })?;
        let not_after = parsed.validity().not_after;
        Ok(CertificateInfo {
            subject: parsed.subject().to_string(),
            not_after: not_after.to_string(),
            not_after_unix: not_after.timestamp(),
        })
    }
}

/// The principal a verified client certificate (DER) names, by `rule`:
/// its subject's common name, or its first DNS name (else e-mail address)
/// among the subject alternative names. `None` when it names none, or
/// does not parse.
#[must_use]
pub fn principal_of(certificate: &[u8], rule: PrincipalFrom) -> Option<String> {
    use x509_parser::extensions::GeneralName;
    let (_, parsed) = x509_parser::parse_x509_certificate(certificate).ok()?;
    let name = match rule {
        PrincipalFrom::Cn => parsed
            .subject()
            .iter_common_name()
            .next()
            .and_then(|cn| cn.as_str().ok())
            .map(str::to_owned),
        PrincipalFrom::San => {
            let names = parsed.subject_alternative_name().ok().flatten()?;
            let names = &names.value.general_names;
            names
                .iter()
                .find_map(|name| match name {
                    GeneralName::DNSName(dns) => Some((*dns).to_owned()),
                    _ => None,
                })
                .or_else(|| {
                    names.iter().find_map(|name| match name {
                        GeneralName::RFC822Name(email) => Some((*email).to_owned()),
                        _ => None,
                    })
                })
        }
    };
    name.filter(|name| !name.is_empty())
}

/// TLS as a listener speaks it: the handshake, and the principal a
/// verified client certificate names.
#[derive(Clone)]
pub struct ListenerTls {
    acceptor: futures_rustls::TlsAcceptor,
    principal_from: PrincipalFrom,
}

impl fmt::Debug for ListenerTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ListenerTls")
            .field("principal_from", &self.principal_from)
            .finish_non_exhaustive()
    }
}

impl ListenerTls {
    /// Runs the server side of a handshake on `stream`; the TLS stream,
    /// and the principal of the client's certificate if it presented one
    /// (it was verified against `--tls-client-ca` by then).
    ///
    /// # Errors
    /// The handshake's failure.
    pub async fn accept<S: AsyncRead + AsyncWrite + Unpin>(
        &self,
        stream: S,
    ) -> io::Result<(futures_rustls::server::TlsStream<S>, Option<String>)> {
        let secured = self.acceptor.accept(stream).await?;
        let principal = secured
            .get_ref()
            .1
            .peer_certificates()
            .and_then(|chain| chain.first())
            .and_then(|leaf| principal_of(leaf, self.principal_from));
        Ok((secured, principal))
    }
}

/// Opens TLS to another broker.
#[derive(Clone)]
pub struct PeerConnector(Arc<rustls::ClientConfig>);

impl fmt::Debug for PeerConnector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PeerConnector")
    }
}

impl PeerConnector {
    /// Runs the client side of a handshake on `stream` to the broker at
    /// `addr`, whose certificate must name its IP address.
    ///
    /// # Errors
    /// The handshake's failure: an untrusted or mismatched certificate, or
    /// a peer that does not speak TLS.
    pub async fn connect<S: AsyncRead + AsyncWrite + Unpin>(
        &self,
        addr: SocketAddr,
        stream: S,
    ) -> io::Result<futures_rustls::client::TlsStream<S>> {
        let name = ServerName::IpAddress(addr.ip().into());
        futures_rustls::TlsConnector::from(self.0.clone())
            .connect(name, stream)
            .await
    }
}

/// The broker's certificate chain and key, replaceable while it runs.
#[derive(Debug)]
struct CertificateStore {
    cert: PathBuf,
    key: PathBuf,
    current: RwLock<(Arc<CertifiedKey>, CertificateInfo)>,
}

impl CertificateStore {
    fn load(cert: &Path, key: &Path) -> Result<CertificateStore, TlsError> {
        let (certified, info) = certified_key(cert, key)?;
        Ok(CertificateStore {
            current: RwLock::new((Arc::new(certified), info)),
            cert: cert.to_owned(),
            key: key.to_owned(),
        })
    }

    fn reload(&self) -> Result<CertificateInfo, TlsError> {
        let (certified, info) = certified_key(&self.cert, &self.key)?;
        *self.current.write().unwrap_or_else(PoisonError::into_inner) =
            (Arc::new(certified), info.clone());
        Ok(info)
    }

    fn current(&self) -> Arc<CertifiedKey> {
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .0
            .clone()
    }

    fn info(&self) -> CertificateInfo {
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .1
            .clone()
    }
}

impl ResolvesServerCert for CertificateStore {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

impl ResolvesClientCert for CertificateStore {
    fn resolve(
        &self,
        _root_hint_subjects: &[&[u8]],
        _sigschemes: &[SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }

    fn has_certs(&self) -> bool {
        true
    }
}

/// rustls with *ring*: it builds without cmake or NASM. rustls 0.23.48
/// deprecates it for lacking post-quantum key exchange (aws-lc-rs has
/// X25519MLKEM768); moving the workspace to aws-lc-rs is a build-cost
/// decision left open, and this is the one place that names the provider.
#[allow(deprecated)]
fn provider() -> CryptoProvider {
    ring::default_provider()
}

/// The chain of `cert` with the signing key of `key`, checked to match,
/// and what its first certificate says.
fn certified_key(cert: &Path, key: &Path) -> Result<(CertifiedKey, CertificateInfo), TlsError> {
    let chain = certificates(cert)?;
    let info = CertificateInfo::of(&chain[0], cert)?;
    let key_bytes = read(key)?;
    let private = PrivateKeyDer::from_pem_slice(&key_bytes).map_err(|error| TlsError::Content {
        path: key.to_owned(),
        message: format!("no PEM private key in it ({error})"),
    })?;
    let signing = provider()
        .key_provider
        .load_private_key(private)
        .map_err(|error| TlsError::Content {
            path: key.to_owned(),
            message: format!("unusable private key: {error}"),
        })?;
    let certified = CertifiedKey::new(chain, signing);
    certified.keys_match().map_err(|_| TlsError::Content {
        path: key.to_owned(),
        message: format!(
            "this key does not belong to the certificate {}",
            cert.display()
        ),
    })?;
    Ok((certified, info))
}

/// Every PEM certificate of a file, in order; at least one.
fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let bytes = read(path)?;
    let certificates = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| TlsError::Content {
            path: path.to_owned(),
            message: format!("unreadable PEM: {error}"),
        })?;
    if certificates.is_empty() {
        return Err(TlsError::Content {
            path: path.to_owned(),
            message: "holds no PEM certificate (-----BEGIN CERTIFICATE-----)".to_owned(),
        });
    }
    Ok(certificates)
}

/// The trust anchors of a PEM file of CA certificates.
fn root_store(path: &Path) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    for certificate in certificates(path)? {
        roots.add(certificate).map_err(|error| TlsError::Content {
            path: path.to_owned(),
            message: format!("not a usable CA certificate: {error}"),
        })?;
    }
    Ok(roots)
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.to_owned(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A CA and a broker certificate it signed for 127.0.0.1, as files.
    struct Files {
        dir: tempfile::TempDir,
        ca: rcgen::Certificate,
        ca_key: rcgen::KeyPair,
    }

    impl Files {
        fn new() -> Files {
            let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
            params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
            params
                .distinguished_name
                .push(rcgen::DnType::CommonName, "test CA");
            let ca_key = rcgen::KeyPair::generate().unwrap();
            let ca = params.self_signed(&ca_key).unwrap();
            let dir = tempfile::tempdir().unwrap();
            std::fs::write(dir.path().join("ca.pem"), ca.pem()).unwrap();
            Files { dir, ca, ca_key }
        }

        /// Issues `stem`.pem/.key for 127.0.0.1, expiring at the start of
        /// `expiry_year`.
        fn issue(&self, stem: &str, expiry_year: i32) -> (PathBuf, PathBuf) {
            let mut params = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()]).unwrap();
            params
                .distinguished_name
                .push(rcgen::DnType::CommonName, stem);
            params.not_after = rcgen::date_time_ymd(expiry_year, 1, 1);
            let key = rcgen::KeyPair::generate().unwrap();
            let cert = params.signed_by(&key, &self.ca, &self.ca_key).unwrap();
            let (cert_file, key_file) = (
                self.dir.path().join(format!("{stem}.pem")),
                self.dir.path().join(format!("{stem}.key")),
            );
            std::fs::write(&cert_file, cert.pem()).unwrap();
            std::fs::write(&key_file, key.serialize_pem()).unwrap();
            (cert_file, key_file)
        }

        fn settings(&self, cert: PathBuf, key: PathBuf, min_version: TlsVersion) -> TlsSettings {
            TlsSettings {
                cert,
                key,
                client_ca: None,
                client_auth: ClientAuth::None,
                min_version,
                principal_from: PrincipalFrom::Cn,
            }
        }

        /// A client that trusts the CA and speaks only `version`.
        fn client(
            &self,
            version: &'static rustls::SupportedProtocolVersion,
        ) -> rustls::ClientConfig {
            rustls::ClientConfig::builder_with_provider(Arc::new(provider()))
                .with_protocol_versions(&[version])
                .unwrap()
                .with_root_certificates(root_store(&self.dir.path().join("ca.pem")).unwrap())
                .with_no_client_auth()
        }
    }

    /// Runs a handshake in memory; the certificate the server presented,
    /// or the error that ended it.
    fn handshake(
        server: &BrokerTls,
        client: rustls::ClientConfig,
    ) -> Result<CertificateDer<'static>, rustls::Error> {
        let name = ServerName::IpAddress(std::net::Ipv4Addr::LOCALHOST.into());
        let mut client = rustls::ClientConnection::new(Arc::new(client), name)?;
        let mut server = rustls::ServerConnection::new(server.server.clone())?;
        for _ in 0..20 {
            let mut bytes = Vec::new();
            client.write_tls(&mut bytes).unwrap();
            server.read_tls(&mut bytes.as_slice()).unwrap();
            server.process_new_packets()?;
            let mut bytes = Vec::new();
            server.write_tls(&mut bytes).unwrap();
            client.read_tls(&mut bytes.as_slice()).unwrap();
            client.process_new_packets()?;
            if !client.is_handshaking() && !server.is_handshaking() {
                let presented = client.peer_certificates().unwrap()[0].clone();
                return Ok(presented.into_owned());
            }
        }
        panic!("the handshake did not finish");
    }

    #[test]
    fn only_a_handshake_record_is_a_tls_hello() {
        assert!(is_tls_hello(0x16));
        // A corelog frame's first byte is the top of its length: 0 for any
        // frame under 16 MiB.
        assert!(!is_tls_hello(0x00));
        assert!(!is_tls_hello(b'G'));
    }

    #[test]
    fn tls_1_3_only_by_default_and_1_2_when_the_setting_allows_it() {
        let files = Files::new();
        let (cert, key) = files.issue("broker", 4000);
        let strict =
            BrokerTls::load(&files.settings(cert.clone(), key.clone(), TlsVersion::Tls13)).unwrap();
        handshake(&strict, files.client(&rustls::version::TLS13)).unwrap();
        let refused = handshake(&strict, files.client(&rustls::version::TLS12)).unwrap_err();
        assert!(
            matches!(
                refused,
                rustls::Error::AlertReceived(_) | rustls::Error::PeerIncompatible(_)
            ),
            "{refused:?}"
        );
        let lenient = BrokerTls::load(&files.settings(cert, key, TlsVersion::Tls12)).unwrap();
        handshake(&lenient, files.client(&rustls::version::TLS12)).unwrap();
        handshake(&lenient, files.client(&rustls::version::TLS13)).unwrap();
    }

    #[test]
    fn a_reload_swaps_the_certificate_and_a_bad_one_keeps_the_old() {
        let files = Files::new();
        let (cert, key) = files.issue("first", 4000);
        let tls =
            BrokerTls::load(&files.settings(cert.clone(), key.clone(), TlsVersion::Tls13)).unwrap();
        assert_eq!(tls.certificate().subject, "CN=first");
        let before = handshake(&tls, files.client(&rustls::version::TLS13)).unwrap();

        let (second_cert, second_key) = files.issue("second", 3000);
        std::fs::copy(&second_cert, &cert).unwrap();
        std::fs::copy(&second_key, &key).unwrap();
        let info = tls.reload().unwrap();
        assert_eq!(info.subject, "CN=second");
        assert_eq!(info.not_after_unix, 32_503_680_000, "{info:?}");
        let after = handshake(&tls, files.client(&rustls::version::TLS13)).unwrap();
        assert_ne!(before, after);

        // A key of another certificate: refused, and the second stays.
        let (_, third_key) = files.issue("third", 3000);
        std::fs::copy(&third_key, &key).unwrap();
        let error = tls.reload().unwrap_err().to_string();
        assert!(
            error.contains("does not belong to the certificate"),
            "{error}"
        );
        assert_eq!(tls.certificate().subject, "CN=second");
        assert_eq!(
            handshake(&tls, files.client(&rustls::version::TLS13)).unwrap(),
            after
        );
    }

    #[test]
    fn a_client_certificate_names_its_principal_by_the_rule() {
        let mut params = rcgen::CertificateParams::new(vec![
            "reader.tenant-a.example".to_owned(),
            "10.0.0.7".to_owned(),
        ])
        .unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "tenant-a-reader");
        let key = rcgen::KeyPair::generate().unwrap();
        let der = params.self_signed(&key).unwrap().der().to_vec();
        assert_eq!(
            principal_of(&der, PrincipalFrom::Cn).as_deref(),
            Some("tenant-a-reader")
        );
        assert_eq!(
            principal_of(&der, PrincipalFrom::San).as_deref(),
            Some("reader.tenant-a.example")
        );
        // No CN and only an IP address: no principal.
        let bare = rcgen::CertificateParams::new(vec!["10.0.0.7".to_owned()]).unwrap();
        let der = bare.self_signed(&key).unwrap().der().to_vec();
        assert_eq!(principal_of(&der, PrincipalFrom::San), None);
        assert_eq!(principal_of(b"not a certificate", PrincipalFrom::Cn), None);
    }

    #[test]
    fn days_left_count_down_and_go_negative_once_expired() {
        let info = CertificateInfo {
            subject: "CN=x".to_owned(),
            not_after: String::new(),
            not_after_unix: 10 * 86_400,
        };
        assert_eq!(info.days_left(0), 10);
        assert_eq!(info.days_left(10 * 86_400 - 1), 0);
        assert_eq!(info.days_left(10 * 86_400 + 1), -1);
    }

    #[test]
    fn files_without_pem_are_named() {
        let files = Files::new();
        let empty = files.dir.path().join("empty.pem");
        std::fs::write(&empty, "nothing\n").unwrap();
        let (cert, _) = files.issue("broker", 4000);
        let error =
            BrokerTls::load(&files.settings(empty.clone(), empty.clone(), TlsVersion::Tls13))
                .unwrap_err()
                .to_string();
        assert!(error.contains("holds no PEM certificate"), "{error}");
        let error = BrokerTls::load(&files.settings(cert, empty, TlsVersion::Tls13))
            .unwrap_err()
            .to_string();
        assert!(error.contains("no PEM private key"), "{error}");
    }
}
