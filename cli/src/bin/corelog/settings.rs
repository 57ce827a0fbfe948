//! Connection settings from a file, for the flags that would otherwise be
//! repeated on every command: `--client-config FILE` (or
//! `CORELOG_CLIENT_CONFIG`), TOML with the global flags' names in
//! snake_case. A flag, or its environment variable, wins over the file;
//! relative paths in the file are relative to the file.
//!
//! ```toml
//! bootstrap = "broker-1.example:7100"
//! tls_ca = "ca.pem"
//! sasl_user = "alice"
//! sasl_password_file = "alice.password"
//! sasl_mechanism = "SCRAM-SHA-512"
//! ```

use std::path::{Path, PathBuf};

use serde::Deserialize;

/// The file's settings; each is optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ClientSettings {
    pub bootstrap: Option<String>,
    pub tls_ca: Option<PathBuf>,
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    pub sasl_user: Option<String>,
    pub sasl_password_file: Option<PathBuf>,
    pub sasl_mechanism: Option<String>,
}

impl ClientSettings {
    /// Reads `path`, with its relative paths made relative to it.
    ///
    /// # Errors
    /// A message naming the file and what is wrong with it.
    pub(crate) fn read(path: &Path) -> Result<ClientSettings, String> {
        let text = std::fs::read_to_string(path).map_err(|error| {
            format!("cannot read the client config {}: {error}", path.display())
        })?;
        let mut settings: ClientSettings = toml::from_str(&text)
            .map_err(|error| format!("client config {}: {error}", path.display()))?;
        let base = path.parent().unwrap_or(Path::new("."));
        for file in [
            &mut settings.tls_ca,
            &mut settings.tls_cert,
            &mut settings.tls_key,
            &mut settings.sasl_password_file,
        ]
        .into_iter()
        .flatten()
        {
            if file.is_relative() {
                *file = base.join(&*file);
            }
        }
        Ok(settings)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_relative_to_the_file_and_unknown_keys_refused() {
        let dir = std::env::temp_dir().join(format!("corelog-settings-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("client.toml");
        std::fs::write(
            &file,
            "bootstrap = \"b:7100\"\ntls_ca = \"ca.pem\"\nsasl_password_file = \"/abs/pw\"\n",
        )
        .unwrap();
        let settings = ClientSettings::read(&file).unwrap();
        assert_eq!(settings.bootstrap.as_deref(), Some("b:7100"));
        assert_eq!(settings.tls_ca, Some(dir.join("ca.pem")));
        assert_eq!(settings.sasl_password_file, Some(PathBuf::from("/abs/pw")));
        std::fs::write(&file, "tls_ca_file = \"ca.pem\"\n").unwrap();
        let error = ClientSettings::read(&file).unwrap_err();
        assert!(error.contains("unknown field"), "{error}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
