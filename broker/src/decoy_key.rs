//! The key of unknown users' decoy SCRAM credentials. An unknown user gets
//! a salt derived from this key and its name, so the key must be the same
//! on every broker of a cluster and across restarts: a salt that changed
//! with each start would tell an unknown name from a real one (whose salt
//! never changes). A cluster derives it from its shared secret; a broker
//! without one keeps a random key in its data directory (`scram-decoy.key`,
//! readable by its owner only), made at its first start.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use crate::config::BrokerConfig;

/// The key file's name in the data directory.
pub const FILE_NAME: &str = "scram-decoy.key";
/// Bytes of a key.
const KEY_BYTES: usize = 32;

/// The decoy key of this broker.
///
/// # Errors
/// Why the key file cannot be read or made, as a sentence.
pub fn load(config: &BrokerConfig) -> Result<Vec<u8>, String> {
    if let Some(secret) = &config.cluster_secret {
        return Ok(secret.derive(b"corelog scram decoy"));
    }
    load_or_create(&config.data_dir.join(FILE_NAME))
}

fn load_or_create(path: &Path) -> Result<Vec<u8>, String> {
    match std::fs::read(path) {
        Ok(key) if key.len() == KEY_BYTES => return Ok(key),
        Ok(key) => {
            return Err(format!(
                "{} holds {} bytes, not {KEY_BYTES}: it is damaged; remove it (unknown users then \
                 get other decoy salts, which tells an observer of both nothing it could not \
                 learn from a restart before this file existed)",
                path.display(),
                key.len()
            ));
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) => return Err(format!("cannot read {}: {error}", path.display())),
    }
    let mut key = vec![0u8; KEY_BYTES];
    getrandom::fill(&mut key)
        .map_err(|error| format!("no randomness for {}: {error}", path.display()))?;
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .and_then(|mut file| {
            file.write_all(&key)?;
            file.sync_all()
        });
    match written {
        Ok(()) => Ok(key),
        Err(error) => Err(format!("cannot write {}: {error}", path.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_is_made_once_private_and_read_back_after() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE_NAME);
        let made = load_or_create(&path).unwrap();
        assert_eq!(made.len(), KEY_BYTES);
        assert_eq!(load_or_create(&path).unwrap(), made);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        std::fs::write(&path, b"short").unwrap();
        assert!(load_or_create(&path).unwrap_err().contains("damaged"));
    }
}
