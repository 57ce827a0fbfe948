//! The broker's file descriptor budget.
//!
//! Every connection, segment file, journal file, io_uring ring and listener
//! is a descriptor, and `RLIMIT_NOFILE` bounds them all. At start the
//! broker raises its soft limit to the hard limit (what systemd's
//! `LimitNOFILE=` or `ulimit -Hn` allows), then divides it: a reserve for
//! what every shard and the process always hold, the connection limit, and
//! each shard's cache of open segment files
//! ([`corelog_storage::open_files`]). Partitions do not take descriptors of
//! their own, so their count is bounded by `--max-partitions-per-shard`,
//! which the controller checks, not by the descriptor limit.
//!
//! A broker that still runs out (another process's share of `ENFILE`, a
//! burst of transient opens) answers the retriable
//! `OUT_OF_FILE_DESCRIPTORS`: running out is a resource error, never a
//! failed disk.

/// Descriptors the process holds whatever its shards do: stdio, the
/// controller log, the metrics listener, connections to other brokers,
/// TLS and configuration files, and opens that last one operation
/// (checkpoints, indexes and replica metadata being written).
const RESERVED_PER_PROCESS: u64 = 128;
/// Descriptors each shard holds: its io_uring rings and event fds, its
/// listeners and journal files, and its transient opens.
const RESERVED_PER_SHARD: u64 = 64;
/// Open segment files a shard keeps at most, however high the limit: past
/// this, caching more idle files saves little.
const OPEN_FILES_PER_SHARD_MAX: u64 = 4_096;
/// Open segment files a shard needs at least to make progress: a flush
/// and a read of a few partitions at once.
const OPEN_FILES_PER_SHARD_MIN: u64 = 16;
/// Connections a broker needs at least to be of use: clients, and its
/// peers' replication and controller traffic.
const CONNECTIONS_MIN: u64 = 32;

/// How the descriptor limit is divided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DescriptorBudget {
    /// The soft `RLIMIT_NOFILE` the broker runs with.
    pub limit: u64,
    /// Client connections accepted at most: the configured limit, or
    /// fewer when the descriptor limit cannot hold it.
    pub connections: u32,
    /// Open segment files each shard's cache keeps.
    pub open_files_per_shard: usize,
}

impl DescriptorBudget {
    /// Divides `limit` descriptors between `shards` shards' reserves,
    /// `connections_wanted` connections and the shards' file caches: the
    /// caches get a quarter of what is left after the reserves (within
    /// their bounds), the connections the rest, up to what is configured.
    ///
    /// # Errors
    /// When `limit` cannot hold the reserves, the smallest caches and a
    /// few connections: the message names the least limit that can.
    pub fn plan(limit: u64, shards: u16, connections_wanted: u32) -> Result<Self, String> {
        let shards = u64::from(shards.max(1));
        let reserved = RESERVED_PER_PROCESS + RESERVED_PER_SHARD * shards;
        let needed = reserved + OPEN_FILES_PER_SHARD_MIN * shards + CONNECTIONS_MIN;
        if limit < needed {
            return Err(format!(
                "the open file limit (RLIMIT_NOFILE) is {limit}, and {shards} shard(s) need at \
                 least {needed}: raise it (LimitNOFILE= in the systemd unit, or ulimit -n)"
            ));
        }
        let free = limit - reserved;
        let open_files_per_shard =
            (free / 4 / shards).clamp(OPEN_FILES_PER_SHARD_MIN, OPEN_FILES_PER_SHARD_MAX);
        let connections = (free - open_files_per_shard * shards).min(u64::from(connections_wanted));
        Ok(DescriptorBudget {
            limit,
            connections: u32::try_from(connections).unwrap_or(u32::MAX),
            open_files_per_shard: usize::try_from(open_files_per_shard).unwrap_or(usize::MAX),
        })
    }
}

/// The soft `RLIMIT_NOFILE` before and after raising it to the hard limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RaisedLimit {
    /// The soft limit the process started with.
    pub before: u64,
    /// The soft limit now (the hard limit, unless raising failed).
    pub after: u64,
}

/// Raises this process's soft `RLIMIT_NOFILE` to its hard limit. An
/// unlimited hard limit is taken as the kernel's `fs.nr_open` ceiling.
///
/// # Errors
/// When the limit cannot be read; failing to raise it is not an error (the
/// broker runs within the soft limit, and [`RaisedLimit`] says so).
pub fn raise_soft_limit() -> Result<RaisedLimit, String> {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let current = getrlimit(Resource::Nofile);
    let before = current.current.unwrap_or(u64::MAX);
    let hard = current.maximum.unwrap_or_else(kernel_ceiling);
    if hard <= before {
        return Ok(RaisedLimit {
            before,
            after: before,
        });
    }
    let raised = Rlimit {
        current: Some(hard),
        maximum: current.maximum,
    };
    match setrlimit(Resource::Nofile, raised) {
        Ok(()) => Ok(RaisedLimit {
            before,
            after: hard,
        }),
        Err(error) => {
            tracing::warn!(%error, before, hard, "cannot raise the open file limit to its hard limit");
            Ok(RaisedLimit {
                before,
                after: before,
            })
        }
    }
}

/// `fs.nr_open`: the most descriptors a process may be allowed.
fn kernel_ceiling() -> u64 {
    std::fs::read_to_string("/proc/sys/fs/nr_open")
        .ok()
        .and_then(|text| text.trim().parse().ok())
        .unwrap_or(1 << 20)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generous_limit_keeps_the_configured_connections_and_full_caches() {
        let budget = DescriptorBudget::plan(1 << 20, 2, 10_000).unwrap();
        assert_eq!(budget.connections, 10_000);
        assert_eq!(budget.open_files_per_shard, 4_096);
    }

    #[test]
    fn a_small_limit_is_divided_and_never_overcommitted() {
        for (limit, shards) in [(512, 1), (1_024, 2), (4_096, 8), (20_000, 2)] {
            let budget = DescriptorBudget::plan(limit, shards, 10_000).unwrap();
            let used = RESERVED_PER_PROCESS
                + u64::from(shards) * (RESERVED_PER_SHARD + budget.open_files_per_shard as u64)
                + u64::from(budget.connections);
            assert!(used <= limit, "{limit}/{shards}: {budget:?} uses {used}");
            assert!(budget.open_files_per_shard as u64 >= OPEN_FILES_PER_SHARD_MIN);
            assert!(u64::from(budget.connections) >= CONNECTIONS_MIN);
        }
        let budget = DescriptorBudget::plan(512, 1, 10_000).unwrap();
        assert_eq!(budget.open_files_per_shard, 80);
        assert_eq!(budget.connections, 240);
    }

    #[test]
    fn a_limit_too_small_to_run_names_the_least_that_works() {
        let error = DescriptorBudget::plan(200, 2, 10_000).unwrap_err();
        assert!(error.contains("need at least 320"), "{error}");
        assert!(DescriptorBudget::plan(320, 2, 10_000).is_ok());
    }
}
