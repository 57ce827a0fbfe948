//! The key that binds idempotent producer ids to principals
//! ([`corelog_wire::producer_id`]): the same on every broker of a
//! cluster, and the same after every restart, or producers would lose
//! their ids.
//!
//! A broker with a cluster secret derives it from the secret (every
//! member of a cluster has one). A single node without one keeps a random
//! key in its data directory (`producer-ids.key`, mode 0600), made at its
//! first start. Losing or replacing either key only makes producers
//! initialise new ids (they are told `PRODUCER_ID_NOT_OWNED`); nothing
//! stored depends on it.

use std::io::{self, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use corelog_wire::producer_id::ProducerIdKey;
use corelog_wire::sasl::cluster::ClusterSecret;

/// The key file of a single node, in the data directory.
pub const KEY_FILE: &str = "producer-ids.key";

/// Bytes of key.
const KEY_BYTES: usize = 32;

/// The key of this broker: derived from `secret`, else read from (or
/// first made in) `data_dir`.
///
/// # Errors
/// The key file cannot be read, is damaged, or cannot be written: what to
/// do, for the operator.
pub fn establish(secret: Option<&ClusterSecret>, data_dir: &Path) -> Result<ProducerIdKey, String> {
    if let Some(secret) = secret {
        return Ok(ProducerIdKey::new(fixed(
            &secret.derive(b"corelog producer ids"),
        )));
    }
    let path = data_dir.join(KEY_FILE);
    match std::fs::File::open(&path) {
        Ok(mut file) => {
            let mut text = String::new();
            file.read_to_string(&mut text)
                .map_err(|error| format!("cannot read {}: {error}", path.display()))?;
            parse(text.trim()).map(ProducerIdKey::new).ok_or_else(|| {
                format!(
                    "{} is damaged (it holds {KEY_BYTES} bytes as hex); delete it and restart: \
                     producers then initialise new ids",
                    path.display()
                )
            })
        }
        Err(error) if error.kind() == io::ErrorKind::NotFound => {
            let mut key = [0u8; KEY_BYTES];
            getrandom::fill(&mut key)
                .map_err(|error| format!("no randomness for the producer id key: {error}"))?;
            write(&path, &key)
                .map_err(|error| format!("cannot write {}: {error}", path.display()))?;
            tracing::info!(file = %path.display(), "made the producer id key");
            Ok(ProducerIdKey::new(key))
        }
        Err(error) => Err(format!("cannot read {}: {error}", path.display())),
    }
}

/// The first [`KEY_BYTES`] of a derived key (HMAC-SHA256 gives exactly
/// that many).
fn fixed(derived: &[u8]) -> [u8; KEY_BYTES] {
    let mut key = [0u8; KEY_BYTES];
    for (slot, byte) in key.iter_mut().zip(derived) {
        *slot = *byte;
    }
    key
}

fn parse(hex: &str) -> Option<[u8; KEY_BYTES]> {
    if hex.len() != KEY_BYTES * 2 || !hex.is_ascii() {
        return None;
    }
    let mut key = [0u8; KEY_BYTES];
    for (index, slot) in key.iter_mut().enumerate() {
        *slot = u8::from_str_radix(&hex[index * 2..index * 2 + 2], 16).ok()?;
    }
    Some(key)
}

/// Writes the key durably, readable by its owner only: a temporary file
/// synced, renamed over, and the directory synced.
fn write(path: &Path, key: &[u8; KEY_BYTES]) -> io::Result<()> {
    let temporary = path.with_extension("key.tmp");
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&temporary)?;
    let hex: String = key.iter().map(|byte| format!("{byte:02x}")).collect();
    file.write_all(format!("{hex}\n").as_bytes())?;
    file.sync_all()?;
    drop(file);
    std::fs::rename(&temporary, path)?;
    let dir = path.parent().unwrap_or_else(|| Path::new("."));
    std::fs::File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_single_nodes_key_is_made_once_kept_private_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let first = establish(None, dir.path()).unwrap();
        let id = first.bind(Some("alice"), 5).unwrap();
        let again = establish(None, dir.path()).unwrap();
        assert!(again.owns(Some("alice"), id), "the key survives a restart");
        let mode = std::fs::metadata(dir.path().join(KEY_FILE))
            .unwrap()
            .permissions();
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
            0o600
        );

        std::fs::write(dir.path().join(KEY_FILE), "not hex\n").unwrap();
        let damaged = establish(None, dir.path()).unwrap_err();
        assert!(damaged.contains("damaged"), "{damaged}");
    }

    #[test]
    fn brokers_sharing_a_cluster_secret_share_the_key() {
        let secret = ClusterSecret::new(b"0123456789abcdef0123456789abcdef").unwrap();
        let one = establish(Some(&secret), tempfile::tempdir().unwrap().path()).unwrap();
        let other = establish(Some(&secret), tempfile::tempdir().unwrap().path()).unwrap();
        let id = one.bind(Some("alice"), 9).unwrap();
        assert!(other.owns(Some("alice"), id));
    }
}
