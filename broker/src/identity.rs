//! The data directory's identity: the node and the cluster it belongs to,
//! recorded in `meta.properties` the first time a broker starts on it (as
//! Kafka's `meta.properties`), and checked at every start after.
//!
//! A directory holds the node's controller Raft log: a broker started with
//! another node's directory would vote with that node's log and term, and
//! two voters sharing one history can elect two leaders in one term. So a
//! directory of another node id, or of another cluster than `--cluster-id`
//! names, is refused before anything in it is opened (exit code 2).
//!
//! A directory written before identities existed has no file: the first
//! start records the identity it is started with.

use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

/// The identity file, in the data directory.
pub const META_FILE: &str = "meta.properties";
/// The format this broker writes and reads.
const FORMAT_VERSION: u32 = 1;
/// Longest cluster id.
const CLUSTER_ID_MAX: usize = 64;

/// Which node and cluster a data directory belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataDirIdentity {
    /// The node id the directory was created for.
    pub node_id: u32,
    /// The cluster it belongs to.
    pub cluster_id: String,
}

impl DataDirIdentity {
    /// The file's text.
    #[must_use]
    pub fn encode(&self) -> String {
        format!(
            "# corelog data directory identity; written once, checked at every start\n\
             version={FORMAT_VERSION}\nnode.id={}\ncluster.id={}\n",
            self.node_id, self.cluster_id
        )
    }

    /// Parses the file's text.
    ///
    /// # Errors
    /// What is missing or malformed.
    pub fn parse(text: &str) -> Result<DataDirIdentity, String> {
        let mut version = None;
        let mut node_id = None;
        let mut cluster_id = None;
        for line in text.lines().map(str::trim) {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let Some((key, value)) = line.split_once('=') else {
                return Err(format!("line {line:?} is not key=value"));
            };
            let value = value.trim();
            match key.trim() {
                "version" => version = Some(value.to_owned()),
                "node.id" => {
                    node_id = Some(
                        value
                            .parse::<u32>()
                            .map_err(|_| format!("node.id {value:?} is not a node id"))?,
                    );
                }
                "cluster.id" => {
                    check_cluster_id(value)?;
                    cluster_id = Some(value.to_owned());
                }
                // Keys a later version may add.
                _ => {}
            }
        }
        if version.as_deref() != Some("1") {
            return Err(format!(
                "version {} is not one this broker reads (it reads {FORMAT_VERSION})",
                version.as_deref().unwrap_or("(missing)")
            ));
        }
        Ok(DataDirIdentity {
            node_id: node_id.ok_or("node.id is missing")?,
            cluster_id: cluster_id.ok_or("cluster.id is missing")?,
        })
    }
}

/// Checks a cluster id's shape: 1 to 64 letters, digits, `-` or `_`.
///
/// # Errors
/// What a valid id looks like.
pub fn check_cluster_id(id: &str) -> Result<(), String> {
    let valid = !id.is_empty()
        && id.len() <= CLUSTER_ID_MAX
        && id
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || byte == b'-' || byte == b'_');
    if valid {
        Ok(())
    } else {
        Err(format!(
            "cluster id {id:?} must be 1 to {CLUSTER_ID_MAX} letters, digits, '-' or '_'"
        ))
    }
}

/// What a start does with the identity it found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// The directory is this node's, of this cluster.
    Matches(DataDirIdentity),
    /// A directory without an identity: record this one.
    Record(DataDirIdentity),
}

/// Decides whether a broker started as `node_id` (and `cluster_id`, if
/// pinned) may use a directory whose recorded identity is `recorded`;
/// `new_cluster_id` makes the id of a directory that has none and is given
/// none.
///
/// # Errors
/// Which ids differ and what to do, naming `dir`.
pub fn decide(
    dir: &Path,
    recorded: Option<DataDirIdentity>,
    node_id: u32,
    cluster_id: Option<&str>,
    new_cluster_id: impl FnOnce() -> String,
) -> Result<Decision, String> {
    let Some(recorded) = recorded else {
        return Ok(Decision::Record(DataDirIdentity {
            node_id,
            cluster_id: cluster_id.map_or_else(new_cluster_id, str::to_owned),
        }));
    };
    if recorded.node_id != node_id {
        return Err(format!(
            "data directory {} belongs to node {} (its {META_FILE}), but this broker was started \
             with --node-id {node_id}: start it with --node-id {}, or give node {node_id} its own \
             data directory. Starting one node on another's directory would let it vote with that \
             node's controller log.",
            dir.display(),
            recorded.node_id,
            recorded.node_id
        ));
    }
    if let Some(wanted) = cluster_id
        && wanted != recorded.cluster_id
    {
        return Err(format!(
            "data directory {} belongs to cluster {} (its {META_FILE}), but this broker was \
             started with --cluster-id {wanted}: point --data-dir at node {node_id}'s directory \
             of cluster {wanted}, or start with --cluster-id {}.",
            dir.display(),
            recorded.cluster_id,
            recorded.cluster_id
        ));
    }
    Ok(Decision::Matches(recorded))
}

/// Reads and checks the identity of `data_dir`, before anything else in it
/// is opened: [`Decision::Matches`] for a directory that has one,
/// [`Decision::Record`] with the identity to [`record`] for one that has
/// none yet.
///
/// A new identity is recorded only once the broker has started (its
/// controller log, on a voter, exists then): a directory with an identity
/// and without a controller log lost its log, rather than crashed during
/// its first start (see `crate::data_dir::check_controller_log`).
///
/// # Errors
/// A directory of another node or cluster, or an unreadable or malformed
/// identity file: what to do, for the operator.
pub fn establish(
    data_dir: &Path,
    node_id: u32,
    cluster_id: Option<&str>,
) -> Result<Decision, String> {
    let recorded = read(&data_dir.join(META_FILE))?;
    decide(data_dir, recorded, node_id, cluster_id, random_cluster_id)
}

/// Whether `data_dir` has an identity file.
#[must_use]
pub fn is_recorded(data_dir: &Path) -> bool {
    data_dir.join(META_FILE).exists()
}

/// Records `identity` in `data_dir`, durably.
///
/// # Errors
/// The failed write, for the operator.
pub fn record(data_dir: &Path, identity: &DataDirIdentity) -> Result<(), String> {
    let path = data_dir.join(META_FILE);
    write(&path, identity).map_err(|error| {
        format!(
            "cannot record the data directory's identity in {}: {error}",
            path.display()
        )
    })?;
    tracing::info!(
        node_id = identity.node_id,
        cluster_id = %identity.cluster_id,
        file = %path.display(),
        "recorded the data directory's identity"
    );
    Ok(())
}

fn read(path: &Path) -> Result<Option<DataDirIdentity>, String> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(format!("cannot read {}: {error}", path.display())),
    };
    DataDirIdentity::parse(&text).map(Some).map_err(|error| {
        format!(
            "{} is damaged ({error}); restore it from a backup of this node's directory \
             (it names node.id and cluster.id)",
            path.display()
        )
    })
}

/// Writes the file durably: a temporary file synced, renamed over, and the
/// directory synced.
fn write(path: &Path, identity: &DataDirIdentity) -> io::Result<()> {
    let temporary: PathBuf = path.with_extension("properties.tmp");
    let mut file = std::fs::File::create(&temporary)?;
    file.write_all(identity.encode().as_bytes())?;
    file.sync_all()?;
    drop(file);
    std::fs::rename(&temporary, path)?;
    let dir = path.parent().unwrap_or_else(|| Path::new("."));
    std::fs::File::open(dir)?.sync_all()
}

/// 128 random bits, as 32 hex digits.
fn random_cluster_id() -> String {
    let mut bytes = [0u8; 16];
    let filled =
        std::fs::File::open("/dev/urandom").and_then(|mut file| file.read_exact(&mut bytes));
    if filled.is_err() {
        // No entropy device: the time and process still tell clusters apart.
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.as_nanos());
        bytes = (nanos ^ (u128::from(std::process::id()) << 64)).to_le_bytes();
    }
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn identity(node_id: u32, cluster_id: &str) -> DataDirIdentity {
        DataDirIdentity {
            node_id,
            cluster_id: cluster_id.to_owned(),
        }
    }

    fn never() -> String {
        panic!("no new cluster id is needed")
    }

    #[test]
    fn the_file_round_trips_and_refuses_what_it_cannot_read() {
        let written = identity(7, "a1b2-c3");
        assert_eq!(DataDirIdentity::parse(&written.encode()), Ok(written));
        for damaged in [
            "",
            "version=1\nnode.id=1\n",
            "version=1\ncluster.id=x\n",
            "version=2\nnode.id=1\ncluster.id=x\n",
            "version=1\nnode.id=one\ncluster.id=x\n",
            "version=1\nnode.id=1\ncluster.id=has space\n",
            "version=1\nnode.id\n",
        ] {
            assert!(
                DataDirIdentity::parse(damaged).is_err(),
                "{damaged:?} was accepted"
            );
        }
    }

    #[test]
    fn a_directory_without_identity_records_the_flags_or_a_new_cluster_id() {
        let dir = Path::new("/data");
        assert_eq!(
            decide(dir, None, 2, Some("prod"), never),
            Ok(Decision::Record(identity(2, "prod")))
        );
        assert_eq!(
            decide(dir, None, 2, None, || "fresh".to_owned()),
            Ok(Decision::Record(identity(2, "fresh")))
        );
    }

    #[test]
    fn another_nodes_directory_is_refused_naming_both_ids() {
        let error = decide(Path::new("/data"), Some(identity(1, "c")), 2, None, never)
            .expect_err("node 2 on node 1's directory");
        assert!(error.contains("belongs to node 1"), "{error}");
        assert!(error.contains("--node-id 2"), "{error}");
        assert!(error.contains("start it with --node-id 1"), "{error}");
    }

    #[test]
    fn another_clusters_directory_is_refused_and_an_unpinned_start_keeps_its_own() {
        let error = decide(
            Path::new("/d"),
            Some(identity(1, "east")),
            1,
            Some("west"),
            never,
        )
        .expect_err("cluster west on east's directory");
        assert!(error.contains("belongs to cluster east"), "{error}");
        assert!(error.contains("--cluster-id west"), "{error}");
        assert_eq!(
            decide(Path::new("/d"), Some(identity(1, "east")), 1, None, never),
            Ok(Decision::Matches(identity(1, "east")))
        );
        assert_eq!(
            decide(
                Path::new("/d"),
                Some(identity(1, "east")),
                1,
                Some("east"),
                never
            ),
            Ok(Decision::Matches(identity(1, "east")))
        );
    }

    #[test]
    fn cluster_ids_are_short_plain_words() {
        assert!(check_cluster_id("prod-eu_1").is_ok());
        assert!(check_cluster_id(&random_cluster_id()).is_ok());
        assert_ne!(random_cluster_id(), random_cluster_id());
        for bad in ["", "a b", "a/b", &"x".repeat(65)] {
            assert!(check_cluster_id(bad).is_err(), "{bad:?}");
        }
    }
}
