//! The ports `--shard-ports auto` gives the shards, kept across restarts.
//!
//! Under `auto` the kernel picks each shard's own port. A client learns
//! them with `DescribeShards`; ports that changed at every start left
//! whatever a client had learnt pointing where nothing listens any more
//! after a restart (issue 35, item 18). So once the shards have bound
//! their ports the broker records them in its data directory, and the
//! next start asks for the same ones. A recorded port that something else
//! took meanwhile is given up for a new one the kernel picks (clients fall
//! back to the shared port until they ask again). Nothing else depends on
//! the record: a missing or damaged one only means new ports.
//!
//! Runs on the thread that starts the broker, before and after the
//! executors start, never on a reactor: plain `std::fs`.

use std::collections::BTreeMap;
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// The record's file name in the data directory: one `shard port` line
/// per shard.
pub const FILE_NAME: &str = "shard-ports";

/// The ports the last start recorded, by shard; empty without a record.
#[must_use]
pub fn load(data_dir: &Path) -> BTreeMap<u16, u16> {
    match std::fs::read_to_string(data_dir.join(FILE_NAME)) {
        Ok(text) => parse(&text),
        Err(error) => {
            if error.kind() != io::ErrorKind::NotFound {
                tracing::warn!(%error, "cannot read the recorded shard ports; the shards take new ones");
            }
            BTreeMap::new()
        }
    }
}

fn parse(text: &str) -> BTreeMap<u16, u16> {
    text.lines()
        .filter_map(|line| {
            let (shard, port) = line.trim().split_once(' ')?;
            let port: u16 = port.trim().parse().ok()?;
            Some((shard.parse().ok()?, port)).filter(|_| port != 0)
        })
        .collect()
}

/// Records `ports` (by shard index) for the next start: written beside
/// the record and renamed over it, so a crash leaves the old record or
/// the new one, never half of one.
///
/// # Errors
/// The file system's error.
pub fn store(data_dir: &Path, ports: &[u16]) -> io::Result<()> {
    let text: String = (0u16..)
        .zip(ports)
        .filter(|(_, port)| **port != 0)
        .map(|(shard, port)| format!("{shard} {port}\n"))
        .collect();
    let path = data_dir.join(FILE_NAME);
    let temporary = data_dir.join(format!("{FILE_NAME}.tmp"));
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&temporary)?;
    file.write_all(text.as_bytes())?;
    file.sync_all()?;
    std::fs::rename(&temporary, &path)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;

    #[test]
    fn ports_round_trip_and_damage_is_no_record() {
        let dir = tempfile::tempdir().unwrap();
        assert!(load(dir.path()).is_empty());
        store(dir.path(), &[7301, 0, 7303]).unwrap();
        assert_eq!(load(dir.path()), BTreeMap::from([(0, 7301), (2, 7303)]));
        assert_eq!(
            parse("0 7301\nshard one\n1 99999\n2 0\n3 7304\n"),
            BTreeMap::from([(0, 7301), (3, 7304)])
        );
    }
}
