//! Certificates for the TLS tests, made with rcgen: a CA, certificates it
//! signs for brokers and clients (valid, expired, not yet valid, or for
//! another host), each written as PEM files in a temporary directory.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose, date_time_ymd,
};

/// When a certificate is valid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Validity {
    /// From 1975 to 4096 (rcgen's default): valid now.
    Now,
    /// All of 2020: expired.
    Expired,
    /// From 2090: not valid yet.
    NotYetValid,
}

/// A certificate and its key, as PEM files.
#[derive(Clone, Debug)]
pub struct Issued {
    /// The certificate chain: the leaf, then any intermediate CAs (the
    /// root is the trust anchor).
    pub cert: PathBuf,
    /// Its private key.
    pub key: PathBuf,
}

/// A test certificate authority, with its files in a temporary directory.
pub struct TestCa {
    dir: tempfile::TempDir,
    cert: rcgen::Certificate,
    key: KeyPair,
    /// PEM of the CAs between this one and the root, this one first
    /// (empty for a root): what a certificate it issues is served with.
    chain: String,
}

impl std::fmt::Debug for TestCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestCa")
            .field("dir", &self.dir.path())
            .finish_non_exhaustive()
    }
}

impl TestCa {
    /// A new CA named `name`.
    ///
    /// # Panics
    /// If rcgen cannot make it or the files cannot be written.
    #[must_use]
    pub fn new(name: &str) -> TestCa {
        let key = KeyPair::generate().unwrap();
        let cert = ca_params(name).self_signed(&key).unwrap();
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("ca.pem"), cert.pem()).unwrap();
        TestCa {
            dir,
            cert,
            key,
            chain: String::new(),
        }
    }

    /// An intermediate CA named `name`, signed by this one: the
    /// certificates it issues carry it in their chain files, and chain to
    /// this CA's trust anchor.
    ///
    /// # Panics
    /// If rcgen cannot make it or the files cannot be written.
    #[must_use]
    pub fn intermediate(&self, name: &str) -> TestCa {
        let key = KeyPair::generate().unwrap();
        let cert = ca_params(name)
            .signed_by(&key, &self.cert, &self.key)
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("ca.pem"), cert.pem()).unwrap();
        let chain = format!("{}{}", cert.pem(), self.chain);
        TestCa {
            dir,
            cert,
            key,
            chain,
        }
    }

    /// The CA's certificate file, what clients and brokers trust.
    #[must_use]
    pub fn ca_file(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }

    /// Issues a certificate named `file_stem` for the host names and IP
    /// addresses `names`, valid as `validity` says.
    ///
    /// # Panics
    /// If rcgen cannot make it or the files cannot be written.
    #[must_use]
    pub fn issue(&self, file_stem: &str, names: &[&str], validity: Validity) -> Issued {
        let mut params = CertificateParams::new(
            names
                .iter()
                .map(|name| (*name).to_owned())
                .collect::<Vec<_>>(),
        )
        .unwrap();
        params.distinguished_name.push(
            DnType::CommonName,
            names.first().copied().unwrap_or(file_stem),
        );
        match validity {
            Validity::Now => {}
            Validity::Expired => {
                params.not_before = date_time_ymd(2020, 1, 1);
                params.not_after = date_time_ymd(2021, 1, 1);
            }
            Validity::NotYetValid => {
                params.not_before = date_time_ymd(2090, 1, 1);
                params.not_after = date_time_ymd(2091, 1, 1);
            }
        }
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.cert, &self.key).unwrap();
        let issued = Issued {
            cert: self.dir.path().join(format!("{file_stem}.pem")),
            key: self.dir.path().join(format!("{file_stem}.key")),
        };
        std::fs::write(&issued.cert, format!("{}{}", cert.pem(), self.chain)).unwrap();
        std::fs::write(&issued.key, key.serialize_pem()).unwrap();
        issued
    }

    /// The directory the files are in.
    #[must_use]
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

fn ca_params(name: &str) -> CertificateParams {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params
}

/// The broker flags that turn TLS on with `issued`.
#[must_use]
pub fn broker_tls_args(issued: &Issued) -> Vec<String> {
    vec![
        "--tls-cert".to_owned(),
        issued.cert.display().to_string(),
        "--tls-key".to_owned(),
        issued.key.display().to_string(),
    ]
}

/// The broker flags of a secured cluster: TLS with `issued`, client
/// certificates of `ca` accepted as logins, a login required, ACLs on, and
/// `super_user` (a certificate's common name) allowed everything.
#[must_use]
pub fn secured_broker_args(issued: &Issued, ca: &TestCa, super_user: &str) -> Vec<String> {
    let mut args = broker_tls_args(issued);
    args.extend(
        [
            "--tls-client-ca",
            &ca.ca_file().display().to_string(),
            "--tls-client-auth",
            "optional",
            "--authentication",
            "required",
            "--authorization",
            "on",
            "--super-users",
            super_user,
        ]
        .map(str::to_owned),
    );
    args
}
