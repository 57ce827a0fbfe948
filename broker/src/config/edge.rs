//! Settings of the broker's edge (issue 35): how many connections one
//! source address may hold, how soon a connection must log in, the failed
//! login budget, and who may read `/metrics` and what it names.

use std::path::Path;

use serde::Deserialize;

use super::ConfigError;

/// Default connections per source address: a tenth of the default
/// `max_connections`, so that one host cannot take every connection.
pub const MAX_CONNECTIONS_PER_ADDRESS: u32 = 1_000;
/// Default login deadline: a client logs in within milliseconds; ten
/// seconds leaves room for a slow TLS handshake and a failed login's delay.
pub const LOGIN_TIMEOUT_MS: u64 = 10_000;
/// Default failures of one user name before it is locked out.
pub const LOGIN_FAILURES_MAX: u32 = 10;
/// Default lockout: fifteen minutes.
pub const LOGIN_LOCKOUT_MS: u64 = 15 * 60 * 1000;
/// Shortest bearer token accepted for `/metrics`.
const METRICS_TOKEN_BYTES_MIN: usize = 16;

/// A setting that is on or off.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Toggle {
    /// On.
    #[default]
    On,
    /// Off.
    Off,
}

/// The bearer token a scrape of `/metrics` must present. Its `Debug` does
/// not show it.
#[derive(Clone, PartialEq, Eq)]
pub struct MetricsToken(String);

impl std::fmt::Debug for MetricsToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MetricsToken(..)")
    }
}

impl MetricsToken {
    /// Whether `presented` is the token, compared in time that does not
    /// depend on where they differ.
    #[must_use]
    pub fn matches(&self, presented: &[u8]) -> bool {
        let expected = self.0.as_bytes();
        let mut difference = expected.len() ^ presented.len();
        for (index, byte) in expected.iter().enumerate() {
            difference |= usize::from(byte ^ presented.get(index).copied().unwrap_or(!byte));
        }
        difference == 0
    }

    /// A token for tests.
    #[cfg(test)]
    #[must_use]
    pub fn new(token: &str) -> MetricsToken {
        MetricsToken(token.to_owned())
    }
}

/// Reads the token file: one line of at least 16 printable characters.
///
/// # Errors
/// [`ConfigError::Invalid`] naming `metrics_token_file`.
pub fn read_metrics_token(path: &Path) -> Result<MetricsToken, ConfigError> {
    let invalid = |message: String| ConfigError::Invalid {
        name: "metrics_token_file",
        message,
    };
    let text = std::fs::read_to_string(path)
        .map_err(|error| invalid(format!("cannot read {}: {error}", path.display())))?;
    let token = text.trim();
    if token.len() < METRICS_TOKEN_BYTES_MIN || !token.bytes().all(|byte| byte.is_ascii_graphic()) {
        return Err(invalid(format!(
            "{}: the token must be one line of at least {METRICS_TOKEN_BYTES_MIN} printable \
             characters without spaces (make one with `head -c 32 /dev/urandom | od -An -tx1 | \
             tr -d ' \\n'`)",
            path.display()
        )));
    }
    Ok(MetricsToken(token.to_owned()))
}

/// Checks the edge settings.
///
/// # Errors
/// [`ConfigError::Invalid`] naming the setting.
pub fn validate(
    login_timeout_ms: u64,
    login_failures_max: u32,
    login_lockout_ms: u64,
) -> Result<(), ConfigError> {
    let invalid = |name, message: &str| {
        Err(ConfigError::Invalid {
            name,
            message: message.to_owned(),
        })
    };
    if login_timeout_ms == 0 {
        return invalid("login_timeout_ms", "must be at least 1");
    }
    if login_failures_max == 0 {
        return invalid("login_failures_max", "must be at least 1");
    }
    if login_lockout_ms < 1_000 {
        return invalid("login_lockout_ms", "must be at least 1000 (one second)");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_matches_only_itself() {
        let token = MetricsToken::new("0123456789abcdef");
        assert!(token.matches(b"0123456789abcdef"));
        for other in [
            &b"0123456789abcdeF"[..],
            b"0123456789abcde",
            b"0123456789abcdefg",
            b"",
        ] {
            assert!(!token.matches(other), "{other:?}");
        }
        assert_eq!(format!("{token:?}"), "MetricsToken(..)");
    }

    #[test]
    fn a_token_file_needs_one_long_printable_line() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("token");
        std::fs::write(&file, "  0123456789abcdef0123\n").unwrap();
        assert!(
            read_metrics_token(&file)
                .unwrap()
                .matches(b"0123456789abcdef0123")
        );
        for bad in ["short\n", "0123456789 abcdef0123\n"] {
            std::fs::write(&file, bad).unwrap();
            let error = read_metrics_token(&file).unwrap_err().to_string();
            assert!(error.contains("metrics_token_file"), "{error}");
        }
        let missing = read_metrics_token(&dir.path().join("absent")).unwrap_err();
        assert!(missing.to_string().contains("cannot read"), "{missing}");
    }
}
