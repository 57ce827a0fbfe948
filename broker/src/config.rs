//! Broker configuration: documented defaults, overridden by an optional
//! TOML file (`--config`), overridden by command-line flags.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use clap::Parser;
use serde::Deserialize;

use corelog_controller::topic_config::{
    MAX_MESSAGE_BYTES_MIN, MAX_UNCOMPRESSED_MESSAGE_BYTES_DEFAULT, SEGMENT_BYTES_MIN,
};
use corelog_wire::sasl::cluster::ClusterSecret;

use crate::metadata::{CleanupPolicy, TopicConfig};
use corelog_storage::LogConfig;
use corelog_storage::retention::DEFAULT_RETENTION_MS;

pub mod edge;

pub use edge::{MetricsToken, Toggle};

/// Partition replicas a shard holds at most unless configured: Redpanda's
/// order of magnitude per core. An idle partition costs no descriptor (its
/// files are opened through a bounded cache) but some memory.
pub const DEFAULT_PARTITIONS_PER_SHARD: u32 = 5_000;

/// Default produce bytes a shard admits at once: about half a second of
/// what a shard commits at RF 3 on a small box, and half of what a
/// replication stream queues before it refuses pushes (four 4 MiB frames),
/// so that admitted produces alone never fill a stream.
pub const PRODUCE_BYTES_IN_FLIGHT_DEFAULT: u64 = 8 << 20;

/// The least produce bytes in flight a shard may be set to.
pub const PRODUCE_BYTES_IN_FLIGHT_MIN: u64 = 64 << 10;

/// Everything `corelogd` needs to run, resolved.
#[derive(Clone, Debug, PartialEq)]
pub struct BrokerConfig {
    /// Client listener; every shard accepts on it (SO_REUSEPORT). When its
    /// IP is a specific address (not 0.0.0.0 or ::), connections to other
    /// brokers start from that IP too, so a firewall can tell brokers apart.
    pub listen: SocketAddr,
    /// Prometheus `/metrics` listener.
    pub metrics_listen: SocketAddr,
    /// Whether and where each shard also accepts connections alone, so
    /// that shard-aware clients reach a partition's owner directly.
    pub shard_ports: ShardPorts,
    /// Where partitions and metadata live.
    pub data_dir: PathBuf,
    /// Executors, one per core by default.
    pub shards: u16,
    /// Pin each executor to a CPU.
    pub pin: bool,
    /// glommio registered I/O memory per executor, bytes.
    pub io_memory_bytes: usize,
    /// This broker's id in the cluster.
    pub node_id: u32,
    /// Host name clients are told to connect to (Metadata).
    pub advertised_host: String,
    /// The controller voters as `id@host:port` (their client listeners).
    /// Empty: a single node, the only voter of its own cluster, which no
    /// other broker joins. Otherwise this broker joins the cluster they
    /// lead, and is a voter itself if its `node_id` is among them.
    pub controller_voters: Vec<ControllerVoter>,
    /// Failure domain; placement spreads a partition's replicas over racks.
    pub rack: Option<String>,
    /// The cluster this broker belongs to, if pinned: the data directory
    /// must have been created for it (see [`crate::identity`]).
    pub cluster_id: Option<String>,
    /// The secret every broker of the cluster shares (read from
    /// `cluster_secret_file`): inter-broker APIs are served only on
    /// connections that proved it. Required when this broker joins other
    /// brokers; without it a broker refuses inter-broker APIs from the
    /// network altogether.
    pub cluster_secret: Option<ClusterSecret>,
    /// TLS on the client listener and between brokers; `None`: plaintext.
    pub tls: Option<TlsSettings>,
    /// Whether client connections must authenticate before any API but
    /// `ApiVersions` and `Authenticate`.
    pub authentication: Authentication,
    /// Whether requests are checked against the cluster's ACLs.
    pub authorization: Authorization,
    /// Principals allowed everything, whatever the ACLs say (how the
    /// first administrator creates the others).
    pub super_users: Vec<String>,
    /// How often a broker heartbeats to the controller leader.
    pub broker_heartbeat_interval_ms: u64,
    /// A broker silent this long is fenced by the controller.
    pub broker_session_timeout_ms: u64,
    /// A follower that has not caught up with its leader's log for this
    /// long leaves the partition's in-sync replicas (what `topic
    /// describe`, `cluster health` and the under-replicated series show).
    pub replica_lag_max_ms: u64,
    /// Largest request frame, bytes after the length field.
    pub max_frame_bytes: u32,
    /// Open client connections per broker (lowered at start when the
    /// descriptor limit cannot hold them, see `crate::descriptors`).
    pub max_connections: u32,
    /// Partition replicas one shard may hold. Applied by the controller
    /// leader to every broker (times its shards) before it commits a
    /// topic: a partition costs memory while it lives, though no
    /// descriptor while idle.
    pub max_partitions_per_shard: u32,
    /// Requests one connection may have in flight; further frames are not
    /// read until one completes (backpressure).
    pub max_in_flight_per_connection: u32,
    /// A connection with no request in flight that sends nothing for this
    /// long is closed; 0 never closes one.
    pub connection_idle_timeout_ms: u64,
    /// A request frame must arrive whole within this long of its first
    /// byte, or the connection is closed (a header that promises a large
    /// body and stops must not hold a connection for good).
    pub frame_read_timeout_ms: u64,
    /// Commands one shard may have queued from the others.
    pub shard_queue_depth: u32,
    /// Produce request bytes one shard admits at once (admission control):
    /// a produce counts from the moment its frame is read until its answer
    /// is ready; past the bound the shard reads no further produce from
    /// its connections until one finishes, so overload queues in the
    /// producers (whose buffers block `send`) instead of in the broker. A
    /// single larger request is admitted alone.
    pub produce_bytes_in_flight_max: u64,
    /// Free space appends never use.
    pub disk_reserve_bytes: u64,
    /// Per-shard cache of recent batches.
    pub tail_cache_bytes: usize,
    /// Acknowledge appends once durable in the shard journal (one
    /// fdatasync for all of a shard's partitions) instead of fdatasyncing
    /// each partition's segment.
    pub storage_journal: bool,
    /// Most bytes one fetch response carries.
    pub fetch_max_bytes: u32,
    /// Longest a fetch may wait for data.
    pub fetch_max_wait_ms: u32,
    /// Forget idempotent producers idle longer than this.
    pub producer_state_retention_ms: i64,
    /// How often retention and housekeeping run.
    pub maintenance_interval_ms: u64,
    /// How long graceful shutdown waits for in-flight requests.
    pub shutdown_timeout_ms: u64,
    /// How long a stopping cluster member waits for its leaderships to
    /// move (a controlled shutdown) before it closes its partitions; 0
    /// skips the wait, and its leaderships move once its session expires.
    pub controlled_shutdown_timeout_ms: u64,
    /// Settings of new topics, unless `CreateTopics` overrides them.
    pub topic_defaults: TopicConfig,
    /// Partitions of a topic created without a count (the CLI's default).
    pub default_partitions: u32,
    /// Partitions of the internal `__groups` topic, fixed when it is created:
    /// group `g` is coordinated by partition `xxh3_64(g) % N`.
    pub group_topic_partitions: u32,
    /// Longest session and rebalance timeout a consumer may ask for in
    /// JoinGroup: a member's timeouts decide how long a silent member stays
    /// and how long the next rebalance waits for it, so without a bound one
    /// client could stall its group for weeks.
    pub group_timeout_max_ms: u32,
    /// Storage settings that are not per topic.
    pub log: LogConfig,
    /// `tracing` filter, e.g. `info` or `corelog_broker=debug`.
    pub log_level: String,
    /// Rebuild the catalog of a single node whose controller log was lost
    /// from its topic directories (see `crate::migration::rebuild`).
    pub rebuild_catalog: bool,
    /// Client connections one source address may hold, unless a quota
    /// (`ip:ADDRESS` or `ip:*`) says otherwise; 0: no limit.
    pub max_connections_per_address: u32,
    /// A client connection that has not logged in this long after it was
    /// accepted (with authentication required; else, that has not done its
    /// handshake) is closed.
    pub login_timeout_ms: u64,
    /// Failed logins of one user name (within 10 minutes) that lock it out
    /// from addresses it never logged in from.
    pub login_failures_max: u32,
    /// How long such a lockout lasts.
    pub login_lockout_ms: u64,
    /// The bearer token a scrape of `/metrics` must present; `None`:
    /// anyone who reaches the metrics port may read it.
    pub metrics_token: Option<MetricsToken>,
    /// Whether `/metrics` carries the series labelled with tenants' names
    /// (topics, groups, quota entities).
    pub metrics_tenant_series: Toggle,
}

impl Default for BrokerConfig {
    fn default() -> Self {
        let log = LogConfig::default();
        BrokerConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 7100)),
            metrics_listen: SocketAddr::from(([127, 0, 0, 1], 7180)),
            shard_ports: ShardPorts::Auto,
            data_dir: PathBuf::from("data"),
            shards: std::thread::available_parallelism().map_or(1, |cores| cores.get() as u16),
            pin: false,
            io_memory_bytes: 1 << 20,
            node_id: 1,
            advertised_host: "127.0.0.1".to_owned(),
            controller_voters: Vec::new(),
            rack: None,
            cluster_id: None,
            cluster_secret: None,
            tls: None,
            authentication: Authentication::None,
            authorization: Authorization::Off,
            super_users: Vec::new(),
            broker_heartbeat_interval_ms: 250,
            broker_session_timeout_ms: 2_000,
            replica_lag_max_ms: 10_000,
            max_frame_bytes: 16 << 20,
            max_connections: 10_000,
            max_partitions_per_shard: DEFAULT_PARTITIONS_PER_SHARD,
            max_in_flight_per_connection: 64,
            connection_idle_timeout_ms: 10 * 60 * 1000,
            frame_read_timeout_ms: 30_000,
            shard_queue_depth: 4096,
            produce_bytes_in_flight_max: PRODUCE_BYTES_IN_FLIGHT_DEFAULT,
            disk_reserve_bytes: 1 << 30,
            tail_cache_bytes: 256 << 20,
            storage_journal: true,
            fetch_max_bytes: 8 << 20,
            fetch_max_wait_ms: 30_000,
            producer_state_retention_ms: DEFAULT_RETENTION_MS,
            maintenance_interval_ms: 1_000,
            shutdown_timeout_ms: 10_000,
            controlled_shutdown_timeout_ms: 10_000,
            topic_defaults: TopicConfig {
                retention_ms: Some(DEFAULT_RETENTION_MS),
                retention_bytes: None,
                segment_bytes: log.segment_bytes,
                segment_ms: log.segment_ms,
                max_message_bytes: 1 << 20,
                max_uncompressed_message_bytes: MAX_UNCOMPRESSED_MESSAGE_BYTES_DEFAULT,
                cleanup_policy: CleanupPolicy::Delete,
            },
            default_partitions: 1,
            group_topic_partitions: 8,
            // Kafka's group.max.session.timeout.ms default.
            group_timeout_max_ms: 1_800_000,
            log,
            log_level: "info".to_owned(),
            rebuild_catalog: false,
            max_connections_per_address: edge::MAX_CONNECTIONS_PER_ADDRESS,
            login_timeout_ms: edge::LOGIN_TIMEOUT_MS,
            login_failures_max: edge::LOGIN_FAILURES_MAX,
            login_lockout_ms: edge::LOGIN_LOCKOUT_MS,
            metrics_token: None,
            metrics_tenant_series: Toggle::On,
        }
    }
}

/// Whether and where each shard accepts connections of its own, besides
/// the shared port where the kernel spreads connections over the shards.
/// A broker of one shard never needs them, and opens none.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(try_from = "ShardPortsSetting")]
pub enum ShardPorts {
    /// Only the shared port: requests for another shard's partitions are
    /// forwarded to it.
    Off,
    /// A port the kernel picks for each shard at the first start, kept in
    /// the data directory and taken again at later starts (unless taken
    /// meanwhile); clients learn them with `DescribeShards`.
    Auto,
    /// Shard `N` listens on this port plus `N`, for firewalls that need
    /// fixed ports.
    From(u16),
}

impl ShardPorts {
    /// The address shard `shard` of a broker of `shards` listens on alone,
    /// if it does (port 0: any port).
    #[must_use]
    pub fn address(self, listen: SocketAddr, shards: u16, shard: u16) -> Option<SocketAddr> {
        let port = match self {
            _ if shards < 2 => return None,
            ShardPorts::Off => return None,
            ShardPorts::Auto => 0,
            ShardPorts::From(first) => first.checked_add(shard)?,
        };
        Some(SocketAddr::new(listen.ip(), port))
    }
}

impl std::str::FromStr for ShardPorts {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "off" => Ok(ShardPorts::Off),
            "auto" => Ok(ShardPorts::Auto),
            number => match number.parse::<u16>() {
                Ok(first) if first > 0 => Ok(ShardPorts::From(first)),
                _ => Err(format!(
                    "{number:?} is not `off`, `auto` or a port number from 1 to 65535"
                )),
            },
        }
    }
}

/// `shard_ports` as TOML may spell it: `"auto"`, `"off"` or a number.
#[derive(Deserialize)]
#[serde(untagged)]
enum ShardPortsSetting {
    Port(u16),
    Word(String),
}

impl TryFrom<ShardPortsSetting> for ShardPorts {
    type Error = String;

    fn try_from(setting: ShardPortsSetting) -> Result<Self, Self::Error> {
        match setting {
            // The same refusal as `--shard-ports 0`.
            ShardPortsSetting::Port(0) => "0".parse(),
            ShardPortsSetting::Port(first) => Ok(ShardPorts::From(first)),
            ShardPortsSetting::Word(word) => word.parse(),
        }
    }
}

/// TLS on the listener (see [`crate::tls`]): the broker's certificate
/// chain and key, and whether and how clients present certificates.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsSettings {
    /// PEM certificate chain, the broker's own certificate first.
    pub cert: PathBuf,
    /// PEM private key (PKCS#8, PKCS#1 or SEC1) of that certificate.
    pub key: PathBuf,
    /// PEM CA certificates that client certificates must chain to. Brokers
    /// of a cluster also verify each other's certificates against them.
    pub client_ca: Option<PathBuf>,
    /// Whether clients must present a certificate.
    pub client_auth: ClientAuth,
    /// The oldest TLS version accepted.
    pub min_version: TlsVersion,
    /// Which name of a client certificate is the connection's principal.
    pub principal_from: PrincipalFrom,
}

/// Which name of a verified client certificate a connection acts as.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum PrincipalFrom {
    /// The subject's common name (CN).
    #[default]
    Cn,
    /// The first DNS name, else the first e-mail address, among the
    /// subject alternative names.
    San,
}

/// Whether connections must prove a user (or, for brokers, the cluster
/// secret) before they are served.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Authentication {
    /// Anyone who reaches the port is served; a connection may still
    /// authenticate.
    #[default]
    None,
    /// Every API but `ApiVersions` and `Authenticate` before a successful
    /// exchange closes the connection with `AUTHENTICATION_REQUIRED`.
    Required,
}

/// Whether requests are checked against the cluster's ACLs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Authorization {
    /// Every connection may do everything (the local default).
    #[default]
    Off,
    /// Default deny: a request is served only if an ACL allows it, or its
    /// principal is a super user or a broker of the cluster.
    On,
}

/// Whether TLS clients present a certificate.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum ClientAuth {
    /// Not asked for.
    #[default]
    None,
    /// Asked for and verified if presented.
    Optional,
    /// A connection without a valid client certificate fails its handshake.
    Required,
}

/// The oldest TLS version a listener accepts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, clap::ValueEnum)]
pub enum TlsVersion {
    /// TLS 1.2 and 1.3, for clients that cannot speak 1.3.
    #[serde(rename = "1.2")]
    #[value(name = "1.2")]
    Tls12,
    /// TLS 1.3 only.
    #[default]
    #[serde(rename = "1.3")]
    #[value(name = "1.3")]
    Tls13,
}

/// Command-line flags; each overrides the file and the default.
#[derive(Debug, Default, Parser)]
#[command(name = "corelogd", version, about = "The corelog broker")]
pub struct Flags {
    /// TOML file with any of the settings below (same names, snake_case).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Client listener [default: 127.0.0.1:7100]; a specific IP is also
    /// the source of connections to other brokers.
    #[arg(long)]
    pub listen: Option<SocketAddr>,
    /// Metrics listener [default: 127.0.0.1:7180].
    #[arg(long)]
    pub metrics_listen: Option<SocketAddr>,
    /// Per-shard ports for shard-aware clients, on the listen IP: `auto`
    /// (the kernel picks them), `off`, or a first port (shard N listens on
    /// it plus N) [default: auto; none with one shard].
    #[arg(long)]
    pub shard_ports: Option<ShardPorts>,
    /// Data directory [default: ./data].
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Executors [default: one per core].
    #[arg(long)]
    pub shards: Option<u16>,
    /// Pin executors to CPUs [default: off].
    #[arg(long)]
    pub pin: Option<bool>,
    /// Registered I/O memory per executor in bytes [default: 1 MiB].
    #[arg(long)]
    pub io_memory_bytes: Option<usize>,
    /// Node id, non-zero [default: 1].
    #[arg(long)]
    pub node_id: Option<u32>,
    /// Host advertised to clients [default: 127.0.0.1].
    #[arg(long)]
    pub advertised_host: Option<String>,
    /// Controller voters, `id@host:port,...` (1, 3 or 5) [default: none,
    /// a single node that is its own one-voter cluster].
    #[arg(long)]
    pub controller_voters: Option<String>,
    /// Rack (failure domain) of this broker [default: none].
    #[arg(long)]
    pub rack: Option<String>,
    /// Cluster id: the data directory must belong to this cluster; a new
    /// one records it [default: a new directory gets a random id, an
    /// existing one keeps its own].
    #[arg(long)]
    pub cluster_id: Option<String>,
    /// File holding the secret every broker of the cluster shares (at least
    /// 16 bytes; surrounding whitespace ignored). Brokers prove it to each
    /// other before speaking the inter-broker APIs [required with
    /// --controller-voters naming other brokers].
    #[arg(long)]
    pub cluster_secret_file: Option<PathBuf>,
    /// PEM certificate chain of this broker: turns TLS on for the client
    /// listener and between brokers [default: none, plaintext].
    #[arg(long)]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert.
    #[arg(long)]
    pub tls_key: Option<PathBuf>,
    /// PEM CA certificates that client certificates must chain to (and
    /// that the brokers of a cluster verify each other against).
    #[arg(long)]
    pub tls_client_ca: Option<PathBuf>,
    /// Whether clients present a certificate [default: none; `optional`
    /// and `required` need --tls-client-ca].
    #[arg(long)]
    pub tls_client_auth: Option<ClientAuth>,
    /// Oldest TLS version accepted [default: 1.3].
    #[arg(long)]
    pub tls_min_version: Option<TlsVersion>,
    /// Which name of a client certificate is the connection's principal:
    /// `cn` or `san` [default: cn].
    #[arg(long)]
    pub tls_principal_from: Option<PrincipalFrom>,
    /// `required`: serve only connections that authenticated (SCRAM, or
    /// the cluster secret between brokers) [default: none].
    #[arg(long)]
    pub authentication: Option<Authentication>,
    /// `on`: serve a request only if an ACL allows it (default deny)
    /// [default: off].
    #[arg(long)]
    pub authorization: Option<Authorization>,
    /// Comma-separated principals allowed everything (the administrators
    /// who grant the others their ACLs).
    #[arg(long)]
    pub super_users: Option<String>,
    /// Heartbeat interval to the controller in ms [default: 250].
    #[arg(long)]
    pub broker_heartbeat_interval_ms: Option<u64>,
    /// Silence after which the controller fences a broker, ms [default: 2000].
    #[arg(long)]
    pub broker_session_timeout_ms: Option<u64>,
    /// A follower this long behind its leader's log end leaves the
    /// in-sync replicas, ms [default: 10000].
    #[arg(long)]
    pub replica_lag_max_ms: Option<u64>,
    /// Largest request frame in bytes [default: 16 MiB].
    #[arg(long)]
    pub max_frame_bytes: Option<u32>,
    /// Connection limit [default: 10000, or fewer if the descriptor limit
    /// cannot hold them].
    #[arg(long)]
    pub max_connections: Option<u32>,
    /// Partition replicas one shard may hold; a topic that would place
    /// more on a broker is refused [default: 5000].
    #[arg(long)]
    pub max_partitions_per_shard: Option<u32>,
    /// In-flight requests per connection [default: 64].
    #[arg(long)]
    pub max_in_flight_per_connection: Option<u32>,
    /// Close a connection idle (nothing in flight, nothing sent) this long,
    /// ms; 0 never [default: 10 min].
    #[arg(long)]
    pub connection_idle_timeout_ms: Option<u64>,
    /// Close a connection whose request frame is not whole this long after
    /// its first byte, ms [default: 30 s].
    #[arg(long)]
    pub frame_read_timeout_ms: Option<u64>,
    /// On SIGTERM, wait this long for this broker's leaderships to move to
    /// other replicas before closing its partitions, ms; 0 skips it
    /// [default: 10 s].
    #[arg(long)]
    pub controlled_shutdown_timeout_ms: Option<u64>,
    /// Cross-shard queue depth per shard [default: 4096].
    #[arg(long)]
    pub shard_queue_depth: Option<u32>,
    /// Produce bytes one shard handles at once; more wait unread in their
    /// connections [default: 8 MiB].
    #[arg(long)]
    pub produce_bytes_in_flight_max: Option<u64>,
    /// Free disk space appends never use, bytes [default: 1 GiB].
    #[arg(long)]
    pub disk_reserve_bytes: Option<u64>,
    /// Tail cache per shard, bytes [default: 256 MiB].
    #[arg(long)]
    pub tail_cache_bytes: Option<usize>,
    /// Make appends durable through the shard journal, one fdatasync for
    /// all of a shard's partitions (false: one per partition) [default: true].
    #[arg(long)]
    pub storage_journal: Option<bool>,
    /// Largest fetch response, bytes [default: 8 MiB].
    #[arg(long)]
    pub fetch_max_bytes: Option<u32>,
    /// Default partitions for new topics [default: 1].
    #[arg(long)]
    pub default_partitions: Option<u32>,
    /// Partitions of the internal __groups topic, at its creation [default: 8].
    #[arg(long)]
    pub group_topic_partitions: Option<u32>,
    /// Longest session and rebalance timeout a JoinGroup may ask for
    /// [default: 30 min].
    #[arg(long)]
    pub group_timeout_max_ms: Option<u32>,
    /// Default retention.ms of new topics; -1 keeps forever [default: 7 days].
    #[arg(long, allow_negative_numbers = true)]
    pub retention_ms: Option<i64>,
    /// Default retention.bytes of new topics; -1 unbounded [default: -1].
    #[arg(long, allow_negative_numbers = true)]
    pub retention_bytes: Option<i64>,
    /// Default segment.bytes of new topics [default: 1 GiB].
    #[arg(long)]
    pub segment_bytes: Option<u64>,
    /// Default segment.ms of new topics [default: 7 days].
    #[arg(long)]
    pub segment_ms: Option<i64>,
    /// Default max.message.bytes of new topics [default: 1 MiB].
    #[arg(long)]
    pub max_message_bytes: Option<u32>,
    /// Default max.uncompressed.message.bytes of new topics: the largest a
    /// compressed batch may inflate to [default: 4 MiB; at most 16 MiB].
    #[arg(long)]
    pub max_uncompressed_message_bytes: Option<u32>,
    /// Forget idempotent producers idle this long, ms [default: 7 days].
    #[arg(long)]
    pub producer_state_retention_ms: Option<i64>,
    /// Retention and housekeeping period, ms [default: 1000].
    #[arg(long)]
    pub maintenance_interval_ms: Option<u64>,
    /// Log filter [default: info].
    #[arg(long)]
    pub log_level: Option<String>,
    /// A single node whose controller/raft.log was lost: rebuild its
    /// catalog of topics from the topic directories, then run. Settings,
    /// users, ACLs and quotas are not recoverable this way (see the README).
    #[arg(long)]
    pub rebuild_catalog: bool,
    /// Client connections one source address may hold, unless a quota
    /// says otherwise; 0: no limit [default: 1000].
    #[arg(long)]
    pub max_connections_per_address: Option<u32>,
    /// Close a connection that has not logged in (with authentication
    /// required; else, done its handshake) this long after it opened, ms
    /// [default: 10000].
    #[arg(long)]
    pub login_timeout_ms: Option<u64>,
    /// Failed logins of a user name (within 10 min) that lock it out from
    /// addresses it never logged in from [default: 10].
    #[arg(long)]
    pub login_failures_max: Option<u32>,
    /// How long such a lockout lasts, ms [default: 15 min].
    #[arg(long)]
    pub login_lockout_ms: Option<u64>,
    /// File holding the bearer token a scrape of /metrics must present
    /// (`Authorization: Bearer TOKEN`) [default: none, no token].
    #[arg(long)]
    pub metrics_token_file: Option<PathBuf>,
    /// `off`: leave the series that name topics, groups and quota entities
    /// out of /metrics [default: on].
    #[arg(long)]
    pub metrics_tenant_series: Option<Toggle>,
}

/// The same settings as [`Flags`], read from TOML.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileSettings {
    listen: Option<SocketAddr>,
    metrics_listen: Option<SocketAddr>,
    shard_ports: Option<ShardPorts>,
    data_dir: Option<PathBuf>,
    shards: Option<u16>,
    pin: Option<bool>,
    io_memory_bytes: Option<usize>,
    node_id: Option<u32>,
    advertised_host: Option<String>,
    controller_voters: Option<String>,
    rack: Option<String>,
    cluster_id: Option<String>,
    cluster_secret_file: Option<PathBuf>,
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
    tls_client_ca: Option<PathBuf>,
    tls_client_auth: Option<ClientAuth>,
    tls_min_version: Option<TlsVersion>,
    tls_principal_from: Option<PrincipalFrom>,
    authentication: Option<Authentication>,
    authorization: Option<Authorization>,
    super_users: Option<String>,
    broker_heartbeat_interval_ms: Option<u64>,
    broker_session_timeout_ms: Option<u64>,
    replica_lag_max_ms: Option<u64>,
    max_frame_bytes: Option<u32>,
    max_connections: Option<u32>,
    max_partitions_per_shard: Option<u32>,
    max_in_flight_per_connection: Option<u32>,
    connection_idle_timeout_ms: Option<u64>,
    frame_read_timeout_ms: Option<u64>,
    controlled_shutdown_timeout_ms: Option<u64>,
    shard_queue_depth: Option<u32>,
    produce_bytes_in_flight_max: Option<u64>,
    disk_reserve_bytes: Option<u64>,
    tail_cache_bytes: Option<usize>,
    storage_journal: Option<bool>,
    fetch_max_bytes: Option<u32>,
    default_partitions: Option<u32>,
    group_topic_partitions: Option<u32>,
    group_timeout_max_ms: Option<u32>,
    retention_ms: Option<i64>,
    retention_bytes: Option<i64>,
    segment_bytes: Option<u64>,
    segment_ms: Option<i64>,
    max_message_bytes: Option<u32>,
    max_uncompressed_message_bytes: Option<u32>,
    producer_state_retention_ms: Option<i64>,
    maintenance_interval_ms: Option<u64>,
    log_level: Option<String>,
    max_connections_per_address: Option<u32>,
    login_timeout_ms: Option<u64>,
    login_failures_max: Option<u32>,
    login_lockout_ms: Option<u64>,
    metrics_token_file: Option<PathBuf>,
    metrics_tenant_series: Option<Toggle>,
}

/// Why the configuration cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file cannot be read.
    #[error("cannot read config file {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not valid TOML for these settings.
    #[error("invalid config file {}: {message}", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// What is wrong, with line and column.
        message: String,
    },
    /// A value is out of range.
    #[error("invalid setting {name}: {message}")]
    Invalid {
        /// The setting.
        name: &'static str,
        /// What to do.
        message: String,
    },
}

macro_rules! resolve {
    ($config:ident, $flags:ident, $file:ident, $($field:ident),* $(,)?) => {
        $(
            if let Some(value) = $flags.$field.clone().or($file.$field.clone()) {
                $config.$field = value;
            }
        )*
    };
}

/// Reads `alice,bob`: names of 1 to 255 bytes, no spaces; `*` is refused
/// (it would make every connection an administrator).
fn parse_super_users(list: &str) -> Result<Vec<String>, String> {
    let mut users = Vec::new();
    for name in list
        .split(',')
        .map(str::trim)
        .filter(|name| !name.is_empty())
    {
        if name == "*" {
            return Err("'*' would make every connection a super user; name them".to_owned());
        }
        if name.len() > 255 || name.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(format!("{name:?} is not a principal name"));
        }
        users.push(name.to_owned());
    }
    Ok(users)
}

impl BrokerConfig {
    /// Defaults ← file ← flags, then validated.
    ///
    /// # Errors
    /// [`ConfigError`] naming the file or setting at fault.
    pub fn resolve(flags: &Flags) -> Result<BrokerConfig, ConfigError> {
        let file = match &flags.config {
            Some(path) => read_file(path)?,
            None => FileSettings::default(),
        };
        let mut config = BrokerConfig::default();
        resolve!(
            config,
            flags,
            file,
            listen,
            metrics_listen,
            shard_ports,
            data_dir,
            shards,
            pin,
            io_memory_bytes,
            node_id,
            advertised_host,
            authentication,
            authorization,
            broker_heartbeat_interval_ms,
            broker_session_timeout_ms,
            replica_lag_max_ms,
            max_frame_bytes,
            max_connections,
            max_partitions_per_shard,
            max_in_flight_per_connection,
            connection_idle_timeout_ms,
            frame_read_timeout_ms,
            controlled_shutdown_timeout_ms,
            shard_queue_depth,
            produce_bytes_in_flight_max,
            disk_reserve_bytes,
            tail_cache_bytes,
            storage_journal,
            fetch_max_bytes,
            default_partitions,
            group_topic_partitions,
            group_timeout_max_ms,
            producer_state_retention_ms,
            maintenance_interval_ms,
            log_level,
            max_connections_per_address,
            login_timeout_ms,
            login_failures_max,
            login_lockout_ms,
            metrics_tenant_series,
        );
        if let Some(path) = flags
            .metrics_token_file
            .clone()
            .or(file.metrics_token_file.clone())
        {
            config.metrics_token = Some(edge::read_metrics_token(&path)?);
        }
        if let Some(voters) = flags
            .controller_voters
            .clone()
            .or(file.controller_voters.clone())
        {
            config.controller_voters =
                parse_voters(&voters).map_err(|message| ConfigError::Invalid {
                    name: "controller_voters",
                    message,
                })?;
        }
        if let Some(users) = flags.super_users.clone().or(file.super_users.clone()) {
            config.super_users =
                parse_super_users(&users).map_err(|message| ConfigError::Invalid {
                    name: "super_users",
                    message,
                })?;
        }
        if let Some(rack) = flags.rack.clone().or(file.rack.clone()) {
            config.rack = Some(rack);
        }
        if let Some(cluster_id) = flags.cluster_id.clone().or(file.cluster_id.clone()) {
            crate::identity::check_cluster_id(&cluster_id).map_err(|message| {
                ConfigError::Invalid {
                    name: "cluster_id",
                    message,
                }
            })?;
            config.cluster_id = Some(cluster_id);
        }
        if let Some(path) = flags
            .cluster_secret_file
            .clone()
            .or(file.cluster_secret_file.clone())
        {
            config.cluster_secret = Some(read_cluster_secret(&path)?);
        }
        config.tls = resolve_tls(flags, &file)?;
        // A one-off repair: a flag only, never in a file that every start reads.
        config.rebuild_catalog = flags.rebuild_catalog;
        let topic = &mut config.topic_defaults;
        if let Some(ms) = flags.retention_ms.or(file.retention_ms) {
            topic.retention_ms = (ms >= 0).then_some(ms);
        }
        if let Some(bytes) = flags.retention_bytes.or(file.retention_bytes) {
            topic.retention_bytes = u64::try_from(bytes).ok();
        }
        if let Some(bytes) = flags.segment_bytes.or(file.segment_bytes) {
            topic.segment_bytes = bytes;
        }
        if let Some(ms) = flags.segment_ms.or(file.segment_ms) {
            topic.segment_ms = ms;
        }
        if let Some(bytes) = flags.max_message_bytes.or(file.max_message_bytes) {
            topic.max_message_bytes = bytes;
        }
        if let Some(bytes) = flags
            .max_uncompressed_message_bytes
            .or(file.max_uncompressed_message_bytes)
        {
            topic.max_uncompressed_message_bytes = bytes;
        }
        // glommio opens directories relative to no descriptor, so a relative
        // path fails every directory sync (EBADF): resolve it here, once,
        // against the directory the broker was started in.
        config.data_dir =
            std::path::absolute(&config.data_dir).map_err(|error| ConfigError::Invalid {
                name: "data_dir",
                message: format!("cannot resolve {}: {error}", config.data_dir.display()),
            })?;
        config.validate()?;
        Ok(config)
    }

    fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |name, message: &str| {
            Err(ConfigError::Invalid {
                name,
                message: message.to_owned(),
            })
        };
        if self.shards == 0 {
            return invalid("shards", "must be at least 1");
        }
        if let ShardPorts::From(first) = self.shard_ports {
            let last = u32::from(first) + u32::from(self.shards) - 1;
            if last > u32::from(u16::MAX) {
                return invalid(
                    "shard_ports",
                    &format!("{first} plus {} shards passes port 65535", self.shards),
                );
            }
            let taken = |port: u16| (u32::from(first)..=last).contains(&u32::from(port));
            if self.shards > 1 && (taken(self.listen.port()) || taken(self.metrics_listen.port())) {
                return invalid(
                    "shard_ports",
                    &format!(
                        "ports {first}..={last} overlap the listen or metrics port; pick another first port"
                    ),
                );
            }
        }
        if self.max_in_flight_per_connection == 0 {
            return invalid("max_in_flight_per_connection", "must be at least 1");
        }
        if self.max_partitions_per_shard == 0 {
            return invalid("max_partitions_per_shard", "must be at least 1");
        }
        if self.frame_read_timeout_ms == 0 {
            return invalid("frame_read_timeout_ms", "must be at least 1");
        }
        if self.produce_bytes_in_flight_max < PRODUCE_BYTES_IN_FLIGHT_MIN {
            return invalid(
                "produce_bytes_in_flight_max",
                "must be at least 64 KiB (one request larger than the bound is still admitted alone)",
            );
        }
        if self.shard_queue_depth == 0 {
            return invalid("shard_queue_depth", "must be at least 1");
        }
        if (self.max_frame_bytes as usize) < 1024 {
            return invalid("max_frame_bytes", "must be at least 1024");
        }
        if self.topic_defaults.max_message_bytes as usize > self.log.batch_limits.batch_bytes_max {
            return invalid(
                "max_message_bytes",
                &format!(
                    "must be at most {} (the broker's batch limit)",
                    self.log.batch_limits.batch_bytes_max
                ),
            );
        }
        if self.topic_defaults.max_message_bytes >= self.max_frame_bytes {
            return invalid("max_message_bytes", "must be smaller than max_frame_bytes");
        }
        let uncompressed = self.topic_defaults.max_uncompressed_message_bytes;
        let broker_limit = self.log.batch_limits.decompressed_bytes_max;
        if uncompressed < MAX_MESSAGE_BYTES_MIN || uncompressed as usize > broker_limit {
            return invalid(
                "max_uncompressed_message_bytes",
                &format!(
                    "must be between {MAX_MESSAGE_BYTES_MIN} and {broker_limit} (the broker's limit on a decompressed batch)"
                ),
            );
        }
        if self.group_topic_partitions == 0 || self.group_topic_partitions > 1024 {
            return invalid("group_topic_partitions", "must be between 1 and 1024");
        }
        if self.group_timeout_max_ms < 1_000 {
            return invalid("group_timeout_max_ms", "must be at least 1000");
        }
        if self.default_partitions == 0 {
            return invalid("default_partitions", "must be at least 1");
        }
        // The bounds a topic's own segment.bytes must meet: a default
        // outside them would be accepted here and then refused for every
        // topic created.
        if !(SEGMENT_BYTES_MIN..=u64::from(u32::MAX)).contains(&self.topic_defaults.segment_bytes) {
            return invalid(
                "segment_bytes",
                &format!(
                    "must be between {SEGMENT_BYTES_MIN} (1 MiB) and {}",
                    u32::MAX
                ),
            );
        }
        if self.topic_defaults.segment_bytes < u64::from(self.topic_defaults.max_message_bytes) {
            return invalid("segment_bytes", "must be at least max_message_bytes");
        }
        edge::validate(
            self.login_timeout_ms,
            self.login_failures_max,
            self.login_lockout_ms,
        )?;
        if self.maintenance_interval_ms == 0 {
            return invalid("maintenance_interval_ms", "must be positive");
        }
        if self.node_id == 0 {
            return invalid(
                "node_id",
                "must be non-zero (0 is reserved: Raft's \"no node\")",
            );
        }
        if !self.controller_voters.is_empty() {
            let mut ids: Vec<u32> = self.controller_voters.iter().map(|v| v.id).collect();
            ids.sort_unstable();
            ids.dedup();
            if ids.len() != self.controller_voters.len() || ![1, 3, 5].contains(&ids.len()) {
                return invalid(
                    "controller_voters",
                    "must name 1, 3 or 5 distinct voters, e.g. 1@host1:7100,2@host2:7100,3@host3:7100",
                );
            }
        }
        if self.broker_heartbeat_interval_ms == 0
            || self.broker_session_timeout_ms < 2 * self.broker_heartbeat_interval_ms
        {
            return invalid(
                "broker_session_timeout_ms",
                "must be at least twice broker_heartbeat_interval_ms, which must be positive",
            );
        }
        let joins_others = self
            .controller_voters
            .iter()
            .any(|voter| voter.id != self.node_id);
        if joins_others && self.cluster_secret.is_none() {
            return invalid(
                "cluster_secret_file",
                "a broker of a cluster of several brokers needs the cluster's shared secret, so \
                 that only its brokers can speak Raft and replication to it: pass \
                 --cluster-secret-file FILE with the same file on every broker (make one with \
                 `head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \\n' > cluster.secret`; \
                 scripts/cluster.sh makes one for local clusters)",
            );
        }
        if joins_others && self.tls.as_ref().is_some_and(|tls| tls.client_ca.is_none()) {
            return invalid(
                "tls_client_ca",
                "with TLS on, the brokers of a cluster verify each other's certificates: pass \
                 --tls-client-ca FILE naming the CA that signed every broker's certificate",
            );
        }
        Ok(())
    }
}

impl BrokerConfig {
    /// Whether this broker is a single node: no `--controller-voters`, so
    /// it is the only voter of its own cluster and no other broker joins it.
    #[must_use]
    pub fn is_single_node(&self) -> bool {
        self.controller_voters.is_empty()
    }

    /// The controller voters by node id: as configured, or this broker
    /// alone (on its own listener) for a single node.
    #[must_use]
    pub fn voters(&self) -> BTreeMap<u32, SocketAddr> {
        if self.is_single_node() {
            return BTreeMap::from([(self.node_id, self.listen)]);
        }
        self.controller_voters
            .iter()
            .map(|voter| (voter.id, voter.addr))
            .collect()
    }
}

/// One controller voter: its node id and the address of its listener.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ControllerVoter {
    /// Its node id (non-zero).
    pub id: u32,
    /// Where it listens.
    pub addr: SocketAddr,
}

/// The TLS settings of flags over file: none without a certificate; a
/// certificate needs its key, and client certificates need a CA.
fn resolve_tls(flags: &Flags, file: &FileSettings) -> Result<Option<TlsSettings>, ConfigError> {
    let cert = flags.tls_cert.clone().or(file.tls_cert.clone());
    let key = flags.tls_key.clone().or(file.tls_key.clone());
    let client_ca = flags.tls_client_ca.clone().or(file.tls_client_ca.clone());
    let client_auth = flags.tls_client_auth.or(file.tls_client_auth);
    let min_version = flags.tls_min_version.or(file.tls_min_version);
    let principal_from = flags.tls_principal_from.or(file.tls_principal_from);
    let invalid = |name, message: &str| {
        Err(ConfigError::Invalid {
            name,
            message: message.to_owned(),
        })
    };
    let (cert, key) = match (cert, key) {
        (Some(cert), Some(key)) => (cert, key),
        (Some(_), None) => {
            return invalid("tls_key", "--tls-cert needs --tls-key, its private key");
        }
        (None, Some(_)) => {
            return invalid("tls_cert", "--tls-key needs --tls-cert, its certificate");
        }
        (None, None) => {
            if client_ca.is_some()
                || client_auth.is_some()
                || min_version.is_some()
                || principal_from.is_some()
            {
                return invalid(
                    "tls_cert",
                    "TLS settings need --tls-cert and --tls-key, which turn TLS on",
                );
            }
            return Ok(None);
        }
    };
    let client_auth = client_auth.unwrap_or_default();
    if client_auth != ClientAuth::None && client_ca.is_none() {
        return invalid(
            "tls_client_ca",
            "--tls-client-auth optional or required needs --tls-client-ca, the CA that client \
             certificates chain to",
        );
    }
    Ok(Some(TlsSettings {
        cert,
        key,
        client_ca,
        client_auth,
        min_version: min_version.unwrap_or_default(),
        principal_from: principal_from.unwrap_or_default(),
    }))
}

/// Reads the cluster secret file.
fn read_cluster_secret(path: &Path) -> Result<ClusterSecret, ConfigError> {
    let invalid = |message: String| ConfigError::Invalid {
        name: "cluster_secret_file",
        message,
    };
    let bytes = std::fs::read(path)
        .map_err(|error| invalid(format!("cannot read {}: {error}", path.display())))?;
    ClusterSecret::new(&bytes).map_err(|error| invalid(format!("{}: {error}", path.display())))
}

/// Parses `id@host:port,id@host:port,...`.
///
/// # Errors
/// A message naming the entry at fault.
pub fn parse_voters(text: &str) -> Result<Vec<ControllerVoter>, String> {
    text.split(',')
        .filter(|entry| !entry.trim().is_empty())
        .map(|entry| {
            let entry = entry.trim();
            let (id, addr) = entry
                .split_once('@')
                .ok_or_else(|| format!("voter {entry:?} is not id@host:port"))?;
            let id: u32 = id
                .parse()
                .ok()
                .filter(|id| *id > 0)
                .ok_or_else(|| format!("voter {entry:?}: the id must be a positive integer"))?;
            let addr = std::net::ToSocketAddrs::to_socket_addrs(addr)
                .ok()
                .and_then(|mut addrs| addrs.next())
                .ok_or_else(|| format!("voter {entry:?}: cannot resolve {addr:?}"))?;
            Ok(ControllerVoter { id, addr })
        })
        .collect()
}

fn read_file(path: &Path) -> Result<FileSettings, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    toml::from_str(&text).map_err(|error| ConfigError::Parse {
        path: path.to_path_buf(),
        message: error.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn super_users_are_named_one_by_one_never_as_everyone() {
        let flags = Flags {
            authorization: Some(Authorization::On),
            super_users: Some("admin, ops,".to_owned()),
            ..Flags::default()
        };
        let config = BrokerConfig::resolve(&flags).unwrap();
        assert_eq!(config.authorization, Authorization::On);
        assert_eq!(config.super_users, ["admin", "ops"]);
        for bad in ["*", "admin,*", "two words"] {
            let flags = Flags {
                super_users: Some(bad.to_owned()),
                ..Flags::default()
            };
            assert!(
                matches!(
                    BrokerConfig::resolve(&flags),
                    Err(ConfigError::Invalid {
                        name: "super_users",
                        ..
                    })
                ),
                "{bad}"
            );
        }
        assert_eq!(
            BrokerConfig::resolve(&Flags::default())
                .unwrap()
                .authorization,
            Authorization::Off,
            "off unless asked for"
        );
    }

    #[test]
    fn the_uncompressed_batch_default_is_bounded_by_the_brokers_limit() {
        let config = BrokerConfig::resolve(&Flags::default()).unwrap();
        assert_eq!(
            config.topic_defaults.max_uncompressed_message_bytes,
            4 << 20
        );
        let resolve = |bytes: u32| {
            BrokerConfig::resolve(&Flags {
                max_uncompressed_message_bytes: Some(bytes),
                ..Flags::default()
            })
        };
        assert_eq!(
            resolve(16 << 20)
                .unwrap()
                .topic_defaults
                .max_uncompressed_message_bytes,
            16 << 20
        );
        for bad in [(16 << 20) + 1, 10] {
            let error = resolve(bad).unwrap_err();
            assert!(
                error.to_string().contains("max_uncompressed_message_bytes"),
                "{bad}: {error}"
            );
        }
    }

    #[test]
    fn the_produce_bound_defaults_below_a_replication_streams_queue_and_has_a_floor() {
        let config = BrokerConfig::resolve(&Flags::default()).unwrap();
        assert_eq!(config.produce_bytes_in_flight_max, 8 << 20);
        let resolve = |bytes: u64| {
            BrokerConfig::resolve(&Flags {
                produce_bytes_in_flight_max: Some(bytes),
                ..Flags::default()
            })
        };
        assert_eq!(
            resolve(64 << 10).unwrap().produce_bytes_in_flight_max,
            64 << 10
        );
        let error = resolve(1000).unwrap_err().to_string();
        assert!(
            error.contains("produce_bytes_in_flight_max") && error.contains("at least 64 KiB"),
            "{error}"
        );
    }

    #[test]
    fn a_relative_data_dir_is_resolved_against_the_working_directory() {
        let config = BrokerConfig::resolve(&Flags::default()).unwrap();
        assert!(
            config.data_dir.is_absolute(),
            "{}",
            config.data_dir.display()
        );
        assert_eq!(
            config.data_dir,
            std::env::current_dir().unwrap().join("data")
        );
    }

    #[test]
    fn a_broker_without_voters_is_a_single_node_of_its_own_cluster() {
        let config = BrokerConfig::resolve(&Flags::default()).unwrap();
        assert_eq!(config.node_id, 1, "node id 0 is Raft's \"no node\"");
        assert!(config.is_single_node());
        assert_eq!(
            config.voters(),
            BTreeMap::from([(1, config.listen)]),
            "its own only voter"
        );
        let zero = BrokerConfig::resolve(&Flags {
            node_id: Some(0),
            ..Flags::default()
        })
        .unwrap_err();
        assert!(zero.to_string().contains("node_id"), "{zero}");
    }

    #[test]
    fn controller_voters_parse_and_are_checked() {
        let voters = parse_voters("1@127.0.0.1:7101, 2@127.0.0.1:7102,3@127.0.0.1:7103").unwrap();
        assert_eq!(voters.len(), 3);
        assert_eq!(voters[1].id, 2);
        assert_eq!(voters[2].addr, SocketAddr::from(([127, 0, 0, 1], 7103)));
        assert!(
            parse_voters("127.0.0.1:7101")
                .unwrap_err()
                .contains("id@host:port")
        );
        assert!(
            parse_voters("0@127.0.0.1:7101")
                .unwrap_err()
                .contains("positive")
        );
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("cluster.secret");
        std::fs::write(&secret, "0123456789abcdef0123456789abcdef\n").unwrap();
        let resolve = |voters: &str, node_id: u32| {
            BrokerConfig::resolve(&Flags {
                controller_voters: Some(voters.to_owned()),
                node_id: Some(node_id),
                cluster_secret_file: Some(secret.clone()),
                ..Flags::default()
            })
        };
        assert!(resolve("1@127.0.0.1:7101,2@127.0.0.1:7102,3@127.0.0.1:7103", 2).is_ok());
        let two = resolve("1@127.0.0.1:7101,2@127.0.0.1:7102", 1).unwrap_err();
        assert!(two.to_string().contains("1, 3 or 5"), "{two}");
        let unnamed = resolve("1@127.0.0.1:7101", 0).unwrap_err();
        assert!(unnamed.to_string().contains("node_id"), "{unnamed}");
    }

    #[test]
    fn tls_settings_come_from_flags_over_the_file_and_go_together() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("corelogd.toml");
        std::fs::write(
            &file,
            "tls_cert = \"file.pem\"\ntls_key = \"file.key\"\ntls_client_ca = \"ca.pem\"\n\
             tls_client_auth = \"required\"\ntls_min_version = \"1.2\"\n",
        )
        .unwrap();
        let from_file = BrokerConfig::resolve(&Flags {
            config: Some(file.clone()),
            ..Flags::default()
        })
        .unwrap();
        assert_eq!(
            from_file.tls,
            Some(TlsSettings {
                cert: PathBuf::from("file.pem"),
                key: PathBuf::from("file.key"),
                client_ca: Some(PathBuf::from("ca.pem")),
                client_auth: ClientAuth::Required,
                min_version: TlsVersion::Tls12,
                principal_from: PrincipalFrom::Cn,
            })
        );
        let flags_win = BrokerConfig::resolve(&Flags {
            config: Some(file),
            tls_cert: Some(PathBuf::from("flag.pem")),
            tls_min_version: Some(TlsVersion::Tls13),
            ..Flags::default()
        })
        .unwrap()
        .tls
        .unwrap();
        assert_eq!(flags_win.cert, PathBuf::from("flag.pem"));
        assert_eq!(flags_win.key, PathBuf::from("file.key"));
        assert_eq!(flags_win.min_version, TlsVersion::Tls13);

        let refused = |flags: Flags| BrokerConfig::resolve(&flags).unwrap_err().to_string();
        let alone = refused(Flags {
            tls_cert: Some(PathBuf::from("c.pem")),
            ..Flags::default()
        });
        assert!(alone.contains("--tls-key"), "{alone}");
        let no_ca = refused(Flags {
            tls_cert: Some(PathBuf::from("c.pem")),
            tls_key: Some(PathBuf::from("c.key")),
            tls_client_auth: Some(ClientAuth::Optional),
            ..Flags::default()
        });
        assert!(no_ca.contains("--tls-client-ca"), "{no_ca}");
        let without_tls = refused(Flags {
            tls_min_version: Some(TlsVersion::Tls12),
            ..Flags::default()
        });
        assert!(without_tls.contains("--tls-cert"), "{without_tls}");
        // A cluster's brokers verify each other: TLS there needs the CA.
        let secret = dir.path().join("cluster.secret");
        std::fs::write(&secret, "0123456789abcdef0123456789abcdef\n").unwrap();
        let cluster = refused(Flags {
            node_id: Some(1),
            controller_voters: Some(
                "1@127.0.0.1:7101,2@127.0.0.1:7102,3@127.0.0.1:7103".to_owned(),
            ),
            cluster_secret_file: Some(secret),
            tls_cert: Some(PathBuf::from("c.pem")),
            tls_key: Some(PathBuf::from("c.key")),
            ..Flags::default()
        });
        assert!(cluster.contains("verify each other"), "{cluster}");
        assert_eq!(BrokerConfig::resolve(&Flags::default()).unwrap().tls, None);
    }

    #[test]
    fn a_broker_joining_others_needs_a_cluster_secret_of_sixteen_bytes_or_more() {
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("cluster.secret");
        let voters = "1@127.0.0.1:7101,2@127.0.0.1:7102,3@127.0.0.1:7103";
        let resolve = |voters: &str, secret_file: Option<PathBuf>| {
            BrokerConfig::resolve(&Flags {
                controller_voters: Some(voters.to_owned()),
                node_id: Some(1),
                cluster_secret_file: secret_file,
                ..Flags::default()
            })
        };
        let missing = resolve(voters, None).unwrap_err().to_string();
        assert!(missing.contains("--cluster-secret-file"), "{missing}");
        // Its only voter, alone: no peers, no secret needed.
        assert!(resolve("1@127.0.0.1:7101", None).is_ok());
        std::fs::write(&secret, " short \n").unwrap();
        let short = resolve(voters, Some(secret.clone()))
            .unwrap_err()
            .to_string();
        assert!(short.contains("at least 16"), "{short}");
        let absent = resolve(voters, Some(dir.path().join("absent")))
            .unwrap_err()
            .to_string();
        assert!(absent.contains("cannot read"), "{absent}");
        std::fs::write(&secret, "0123456789abcdef0123456789abcdef\n").unwrap();
        let config = resolve(voters, Some(secret)).unwrap();
        assert_eq!(
            config.cluster_secret,
            Some(ClusterSecret::new(b"0123456789abcdef0123456789abcdef").unwrap())
        );
    }

    #[test]
    fn flags_override_the_file_which_overrides_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("corelog.toml");
        std::fs::write(
            &path,
            "shards = 3\nretention_ms = -1\nlisten = \"127.0.0.1:9000\"\n",
        )
        .unwrap();
        let flags = Flags {
            config: Some(path),
            shards: Some(1),
            ..Flags::default()
        };
        let config = BrokerConfig::resolve(&flags).unwrap();
        assert_eq!(config.shards, 1);
        assert_eq!(config.listen, SocketAddr::from(([127, 0, 0, 1], 9000)));
        assert_eq!(config.topic_defaults.retention_ms, None);
        assert_eq!(
            config.metrics_listen,
            SocketAddr::from(([127, 0, 0, 1], 7180))
        );
    }

    #[test]
    fn unknown_file_settings_and_bad_values_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("corelog.toml");
        std::fs::write(&path, "shard = 3\n").unwrap();
        let flags = Flags {
            config: Some(path),
            ..Flags::default()
        };
        let error = BrokerConfig::resolve(&flags).unwrap_err().to_string();
        assert!(error.contains("shard"), "{error}");
        let flags = Flags {
            shards: Some(0),
            ..Flags::default()
        };
        assert!(
            BrokerConfig::resolve(&flags)
                .unwrap_err()
                .to_string()
                .contains("shards")
        );
        for bytes in [4096, u64::from(u32::MAX) + 1] {
            let flags = Flags {
                segment_bytes: Some(bytes),
                ..Flags::default()
            };
            let error = BrokerConfig::resolve(&flags).unwrap_err().to_string();
            assert!(
                error.contains("segment_bytes: must be between 1048576"),
                "{error}"
            );
        }
        let flags = Flags {
            segment_bytes: Some(SEGMENT_BYTES_MIN),
            ..Flags::default()
        };
        assert!(BrokerConfig::resolve(&flags).is_ok());
    }

    #[test]
    fn shard_ports_are_auto_off_or_a_first_port_from_flag_or_file() {
        let listen = SocketAddr::from(([127, 0, 0, 2], 7100));
        assert_eq!(
            ShardPorts::Auto.address(listen, 2, 1),
            Some(SocketAddr::from(([127, 0, 0, 2], 0)))
        );
        assert_eq!(
            ShardPorts::From(7110).address(listen, 2, 1),
            Some(SocketAddr::from(([127, 0, 0, 2], 7111)))
        );
        assert_eq!(ShardPorts::Off.address(listen, 2, 1), None);
        assert_eq!(
            ShardPorts::Auto.address(listen, 1, 0),
            None,
            "one shard owns every partition: nothing to pick"
        );
        assert_eq!("auto".parse(), Ok(ShardPorts::Auto));
        assert_eq!("off".parse(), Ok(ShardPorts::Off));
        assert_eq!("7110".parse(), Ok(ShardPorts::From(7110)));
        for bad in ["0", "70000", "on"] {
            let error = bad.parse::<ShardPorts>().unwrap_err();
            assert!(error.contains("`off`, `auto` or a port number"), "{error}");
        }

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("corelog.toml");
        for (text, expected) in [
            ("shard_ports = 7300\n", ShardPorts::From(7300)),
            ("shard_ports = \"off\"\n", ShardPorts::Off),
        ] {
            std::fs::write(&path, text).unwrap();
            let config = BrokerConfig::resolve(&Flags {
                config: Some(path.clone()),
                shards: Some(2),
                ..Flags::default()
            })
            .unwrap();
            assert_eq!(config.shard_ports, expected, "{text}");
        }
        assert_eq!(
            BrokerConfig::resolve(&Flags::default())
                .unwrap()
                .shard_ports,
            ShardPorts::Auto
        );
        for first in [7099, 65535] {
            let error = BrokerConfig::resolve(&Flags {
                shards: Some(2),
                shard_ports: Some(ShardPorts::From(first)),
                ..Flags::default()
            })
            .unwrap_err()
            .to_string();
            assert!(error.contains("shard_ports"), "{error}");
        }
    }
}
