//! The broker process: one executor thread per shard, the cross-shard
//! channels between them, each shard's listener, shard 0's cluster role
//! (controller and membership), the migration of a standalone data
//! directory, the metrics endpoint, and SIGTERM/SIGINT handling. The one
//! module that knows every layer: it wires `net` onto `runtime`.
//!
//! Start-up is all or nothing: every shard reports whether it could bind
//! its listener and open its disk; if any cannot, all are stopped and the
//! error is returned. Shutdown asks every shard to finish in-flight work and
//! close its partitions (flush, sync, seal indexes, snapshot producer
//! state), so that the next start needs no recovery scan.

use std::collections::BTreeMap;
use std::io;
use std::net::SocketAddr;
use std::path::Path;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use glommio::net::TcpListener;
use glommio::{LocalExecutorBuilder, Placement};

use corelog_wire::message::broker_register::BrokerRegisterRequest;
use corelog_wire::producer_id::ProducerIdKey;

use crate::cluster::raft_log::RaftLogFile;
use crate::cluster::{ClusterMember, ClusterRole, ControllerService, InternalTopicSpec};
use crate::config::{BrokerConfig, ShardPorts};
use crate::data_dir::{self, Privacy};
use crate::descriptors::{DescriptorBudget, raise_soft_limit};
use crate::group::service::{AUDIT_TOPIC, GROUPS_TOPIC};
use crate::identity::Decision;
use crate::metadata::{ShardId, TopicConfig};
use crate::metrics::{BrokerMetrics, ShardMetrics};
use crate::migration;
use crate::net::edge::Edge;
use crate::net::front::Front;
use crate::net::kept_ports;
use crate::net::login_ledger::LoginLimits;
use crate::net::port::Port;
use crate::net::shard_ports::ShardPortTable;
use crate::net::{listener, loopback::Loopback};
use crate::runtime::deletion::TopicDeletions;
use crate::runtime::fatal::{self, ExitOnFence};
use crate::runtime::invoke::{self, Address, Mailbox};
use crate::runtime::shard::{Shard, ShardParts};
use crate::tls::BrokerTls;
use corelog_storage::clock::{Clock, SystemClock};
use corelog_storage::disk::Disk;
use corelog_storage::glommio_disk::GlommioDisk;
use corelog_storage::journal::{Journal, JournalConfig};
use corelog_storage::log::recover_shard_journal;
use corelog_storage::{DiskSpace, ShardStorage, StorageError, TailCache};

/// Why the broker could not start or stopped abnormally.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// A shard could not start.
    #[error("shard {shard} could not start: {message}")]
    ShardStart {
        /// Which shard.
        shard: u16,
        /// Why, and what to do.
        message: String,
    },
    /// An executor thread could not be created.
    #[error("cannot start executor thread: {0}")]
    Executor(String),
    /// Signal handling could not be installed.
    #[error("cannot install signal handlers: {0}")]
    Signals(std::io::Error),
    /// The data directory cannot be used with this configuration.
    #[error("{0}")]
    Configuration(String),
    /// The data directory belongs to another node or cluster, or its
    /// identity cannot be read or recorded (see [`crate::identity`]).
    #[error("{0}")]
    Identity(String),
    /// The TLS certificate, key or CA files cannot be used.
    #[error("TLS: {0}")]
    Tls(#[from] crate::tls::TlsError),
    /// A data directory that ran before has no controller log.
    #[error("{0}")]
    ControllerLogMissing(String),
}

impl RunError {
    /// The process's exit code: 2 for a data directory of another node or
    /// cluster (a setting to fix, like a bad flag), 1 otherwise.
    #[must_use]
    pub fn exit_code(&self) -> i32 {
        match self {
            RunError::Identity(_) | RunError::Tls(_) => 2,
            // Stored data is missing, as when it is damaged.
            RunError::ControllerLogMissing(_) => fatal::STORAGE_CORRUPT_EXIT_CODE,
            _ => 1,
        }
    }
}

/// Whether the shards' ports are not `auto` ones to keep across restarts.
fn kept_ports_unused(config: &BrokerConfig) -> bool {
    config.shards < 2 || config.shard_ports != ShardPorts::Auto
}

/// Under `--shard-ports auto`, the ports the last start recorded that
/// nothing accepts connections on now. A port another program took is
/// given up, its shard takes a new one: the shards bind with
/// `SO_REUSEPORT`, so a bind alone could succeed beside another listener
/// of the same user and split its connections with it.
fn ports_to_keep(config: &BrokerConfig) -> BTreeMap<u16, u16> {
    if kept_ports_unused(config) {
        return BTreeMap::new();
    }
    kept_ports::load(&config.data_dir)
        .into_iter()
        .filter(|(shard, _)| *shard < config.shards)
        .filter(|(shard, port)| {
            let addr = SocketAddr::new(config.listen.ip(), *port);
            let taken = accepts_connections_until(addr, Instant::now() + LINGER_WAIT);
            if taken {
                tracing::warn!(
                    shard,
                    port,
                    "the shard's port of the last start is taken; it takes a new one"
                );
            }
            !taken
        })
        .collect()
}

/// Binds a shard's own port: `kept` (its port of the last start) if it
/// can, else `addr`.
fn bind_shard_port(addr: SocketAddr, kept: Option<u16>, listen_now: bool) -> io::Result<Port> {
    if let Some(port) = kept {
        match Port::bind(SocketAddr::new(addr.ip(), port), listen_now) {
            Ok(bound) => return Ok(bound),
            Err(error) => {
                tracing::warn!(port, %error, "cannot take the shard's port of the last start; it takes a new one");
            }
        }
    }
    Port::bind(addr, listen_now)
}

/// Refuses to start on a listen or metrics address where something already
/// accepts connections. The shards' listeners share their port with
/// `SO_REUSEPORT`, so binding alone would let a second broker silently take
/// part of the first one's connections. A listener of a predecessor that
/// just exited can linger while the kernel tears its io_uring down, so a
/// busy address is retried for a few seconds before giving up.
fn refuse_ports_in_use(config: &BrokerConfig) -> Result<(), RunError> {
    let shard_addresses = (0..config.shards).filter_map(|shard| {
        config
            .shard_ports
            .address(config.listen, config.shards, shard)
            .map(|addr| ("shard", addr))
    });
    for (what, addr) in [
        ("listen", config.listen),
        ("metrics", config.metrics_listen),
    ]
    .into_iter()
    .chain(shard_addresses)
    {
        if accepts_connections_until(addr, Instant::now() + LINGER_WAIT) {
            return Err(RunError::ShardStart {
                shard: 0,
                message: format!(
                    "cannot use {what} address {addr}: something already accepts connections there; is another broker running there?"
                ),
            });
        }
    }
    Ok(())
}

/// How long a listener of a predecessor that just exited may linger (its
/// io_uring torn down by the kernel after the process is gone) before an
/// address that still accepts connections counts as taken.
const LINGER_WAIT: Duration = Duration::from_secs(3);

/// Whether `addr` still accepts connections at `deadline`: asked again
/// every 50 ms until it refuses or the deadline passes.
fn accepts_connections_until(addr: SocketAddr, deadline: Instant) -> bool {
    while accepts_connections(addr) {
        if Instant::now() >= deadline {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

/// Whether a connection to `addr` (the loopback address for a wildcard)
/// is accepted.
fn accepts_connections(addr: std::net::SocketAddr) -> bool {
    let mut target = addr;
    if target.ip().is_unspecified() {
        target.set_ip(if addr.is_ipv4() {
            std::net::Ipv4Addr::LOCALHOST.into()
        } else {
            std::net::Ipv6Addr::LOCALHOST.into()
        });
    }
    if target.port() == 0 {
        return false;
    }
    std::net::TcpStream::connect_timeout(&target, std::time::Duration::from_millis(200)).is_ok()
}

/// Runs the broker until SIGTERM or SIGINT, then shuts down gracefully.
///
/// # Errors
/// [`RunError`] when start-up fails.
pub fn run(config: BrokerConfig) -> Result<(), RunError> {
    let broker = start(config)?;
    tracing::info!(
        listen = %broker.config.listen,
        metrics = %broker.config.metrics_listen,
        shards = broker.config.shards,
        shard_ports = ?broker.shard_ports(),
        data_dir = %broker.config.data_dir.display(),
        "corelogd ready"
    );
    let signalled = wait_for_signal(broker.tls.as_deref());
    broker.hand_off_leaderships();
    tracing::info!("stopping: finishing in-flight requests and closing partitions");
    broker.stop();
    signalled?;
    tracing::info!("corelogd stopped");
    Ok(())
}

/// A broker running in this process: its shard executors and the inboxes
/// that stop them. [`run`] wraps one for `corelogd`; in-process harnesses
/// (the request-handler fuzz target) start and stop one directly.
pub struct RunningBroker {
    config: BrokerConfig,
    tls: Option<Arc<BrokerTls>>,
    shard_ports: Arc<ShardPortTable>,
    senders: Vec<Address>,
    executors: Vec<glommio::ExecutorJoinHandle<()>>,
}

impl std::fmt::Debug for RunningBroker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunningBroker")
            .field("listen", &self.config.listen)
            .field("shards", &self.executors.len())
            .finish_non_exhaustive()
    }
}

impl RunningBroker {
    /// The configuration the broker runs with.
    #[must_use]
    pub fn config(&self) -> &BrokerConfig {
        &self.config
    }

    /// The port each shard accepts on alone, by shard (empty without).
    #[must_use]
    pub fn shard_ports(&self) -> Vec<u16> {
        self.shard_ports
            .endpoints()
            .iter()
            .map(|endpoint| endpoint.port)
            .collect()
    }

    /// A controlled shutdown's first step, for a cluster member: asks the
    /// controller to move this broker's leaderships to other replicas and
    /// waits (up to `controlled_shutdown_timeout_ms`) until they have,
    /// while every shard keeps serving, so that producers move to the new
    /// leaders within an election round instead of a session timeout. A
    /// single node has nobody to hand them to.
    pub fn hand_off_leaderships(&self) {
        let timeout = Duration::from_millis(self.config.controlled_shutdown_timeout_ms);
        if self.config.is_single_node() || timeout.is_zero() {
            return;
        }
        let Some(shard_zero) = self.senders.first() else {
            return;
        };
        tracing::info!(
            ?timeout,
            "controlled shutdown: moving this broker's leaderships"
        );
        let started = Instant::now();
        let left = invoke::invoke_from_outside(
            shard_zero,
            move |shard| async move {
                match shard.cluster() {
                    Some(role) => role
                        .member
                        .leave(timeout)
                        .await
                        .map_err(|error| error.to_string()),
                    None => Err("the broker has not joined the cluster yet".to_owned()),
                }
            },
            // The controller call's own retries, then the wait.
            timeout + Duration::from_secs(10),
        );
        let elapsed_ms = started.elapsed().as_millis() as u64;
        match left {
            Some(Ok(0)) => tracing::info!(
                elapsed_ms,
                "controlled shutdown: this broker leads no partition"
            ),
            Some(Ok(left)) => tracing::warn!(
                elapsed_ms,
                left,
                "controlled shutdown: partitions still led here (no other replica could take them); they stay leaderless until this broker is back"
            ),
            Some(Err(error)) => tracing::warn!(
                %error,
                "controlled shutdown refused: this broker's leaderships move once its session expires"
            ),
            None => tracing::warn!(
                elapsed_ms,
                "controlled shutdown: no answer in time; this broker's leaderships move once its session expires"
            ),
        }
    }

    /// Stops gracefully, as on SIGTERM: every shard finishes in-flight work
    /// and closes its partitions; returns once all executors have exited.
    pub fn stop(self) {
        invoke::stop_all(&self.senders);
        join_all(self.executors);
    }
}

/// Starts every shard and returns once all accept connections.
///
/// # Errors
/// [`RunError`] when any shard cannot start; the others are stopped.
pub fn start(config: BrokerConfig) -> Result<RunningBroker, RunError> {
    match data_dir::make_private(&config.data_dir).map_err(RunError::Configuration)? {
        Privacy::AlreadyPrivate => {}
        Privacy::Tightened { was } => tracing::warn!(
            data_dir = %config.data_dir.display(),
            was = %format_args!("{was:o}"),
            "the data directory could be read by other users; made it private (700): it holds records and the users' credentials"
        ),
    }
    let identity = crate::identity::establish(
        &config.data_dir,
        config.node_id,
        config.cluster_id.as_deref(),
    )
    .map_err(RunError::Identity)?;
    data_dir::check_controller_log(&config).map_err(RunError::ControllerLogMissing)?;
    let descriptors = descriptor_budget(&config)?;
    let open_files_per_shard = descriptors.open_files_per_shard;
    let mut config = config;
    config.max_connections = descriptors.connections;
    let producer_ids =
        crate::producer_ids::establish(config.cluster_secret.as_ref(), &config.data_dir)
            .map_err(RunError::Identity)?;
    refuse_ports_in_use(&config)?;
    migration::check_configuration(&config).map_err(RunError::Configuration)?;
    let tls = match &config.tls {
        Some(settings) => {
            let tls = BrokerTls::load(settings)?;
            log_certificate("TLS on", &tls.certificate());
            Some(Arc::new(tls))
        }
        None => None,
    };
    let metrics = BrokerMetrics::new();
    let shard_count = config.shards;
    let (senders, inboxes) = invoke::mailboxes(shard_count, config.shard_queue_depth as usize);
    let edge = Arc::new(Edge::new(
        shard_count,
        LoginLimits {
            failures_max: config.login_failures_max,
            lockout: Duration::from_millis(config.login_lockout_ms),
        },
        crate::decoy_key::load(&config).map_err(RunError::Configuration)?,
    ));
    let shard_ports = Arc::new(ShardPortTable::new(shard_count));
    let kept_ports = Arc::new(ports_to_keep(&config));
    let topic_deletions = Arc::new(TopicDeletions::default());
    let (started, start_reports) = mpsc::channel::<Result<u16, RunError>>();
    let (listening, listen_reports) = mpsc::channel::<Result<u16, RunError>>();
    // Closed (dropped) once the identity is recorded: no shard accepts a
    // connection before, so a directory that ever answered a client has
    // an identity, and a later loss of its controller log is noticed
    // (`data_dir::check_controller_log`).
    let (serving_gate, identity_recorded) = flume::bounded::<()>(0);
    let mut executors = Vec::with_capacity(usize::from(shard_count));
    for (id, inbox) in (0..shard_count).zip(inboxes) {
        let placement = if config.pin {
            Placement::Fixed(usize::from(id))
        } else {
            Placement::Unbound
        };
        let config = config.clone();
        let metrics = metrics.clone();
        let peers = senders.clone();
        let started = started.clone();
        let listening = listening.clone();
        let edge = edge.clone();
        let shard_ports = shard_ports.clone();
        let kept_ports = kept_ports.clone();
        let topic_deletions = topic_deletions.clone();
        let tls = tls.clone();
        let producer_ids = producer_ids.clone();
        let identity_recorded = identity_recorded.clone();
        let executor = LocalExecutorBuilder::new(placement)
            .name(&format!("shard-{id}"))
            .io_memory(config.io_memory_bytes)
            .spawn(move || async move {
                let shard_metrics = metrics.for_shard(id);
                match start_shard(
                    ShardId(id),
                    config,
                    shard_metrics,
                    peers,
                    inbox,
                    metrics,
                    ShardShared {
                        open_files_per_shard,
                        edge,
                        shard_ports,
                        kept_ports,
                        topic_deletions,
                        listening,
                        tls,
                        producer_ids,
                        identity_recorded,
                    },
                )
                .await
                {
                    Ok(shard) => {
                        let _reported = started.send(Ok(id));
                        shard.run_inbox().await;
                    }
                    Err(message) => {
                        let _reported =
                            started.send(Err(RunError::ShardStart { shard: id, message }));
                    }
                }
            })
            .map_err(|error| RunError::Executor(error.to_string()))?;
        executors.push(executor);
    }
    drop(started);
    drop(listening);
    drop(identity_recorded);
    let mut failure = first_failure(&start_reports, shard_count);
    if failure.is_none()
        && let Decision::Record(identity) = &identity
    {
        // Only now: a voter's controller log exists (see
        // `data_dir::check_controller_log`).
        failure = crate::identity::record(&config.data_dir, identity)
            .err()
            .map(RunError::Identity);
    }
    if failure.is_none() {
        drop(serving_gate);
        // A single node listens once it serves: after its partitions
        // opened and lead, which the shards log as they go.
        failure = first_failure(&listen_reports, shard_count);
    }
    if let Some(error) = failure {
        invoke::stop_all(&senders);
        join_all(executors);
        return Err(error);
    }
    if !kept_ports_unused(&config)
        && let Err(error) = kept_ports::store(&config.data_dir, &shard_ports.ports())
    {
        tracing::warn!(%error, "cannot record the shards' ports; the next start takes new ones");
    }
    Ok(RunningBroker {
        config,
        tls,
        shard_ports,
        senders,
        executors,
    })
}

/// Raises the open file limit to its hard limit and divides it (see
/// [`crate::descriptors`]), logging the outcome.
fn descriptor_budget(config: &BrokerConfig) -> Result<DescriptorBudget, RunError> {
    let raised = raise_soft_limit().map_err(RunError::Configuration)?;
    let budget = DescriptorBudget::plan(raised.after, config.shards, config.max_connections)
        .map_err(RunError::Configuration)?;
    tracing::info!(
        limit = budget.limit,
        raised_from = (raised.before != raised.after).then_some(raised.before),
        connections = budget.connections,
        open_files_per_shard = budget.open_files_per_shard,
        "file descriptors: the open file limit and how it is divided"
    );
    if budget.connections < config.max_connections {
        tracing::warn!(
            configured = config.max_connections,
            allowed = budget.connections,
            limit = budget.limit,
            "the open file limit cannot hold --max-connections: accepting fewer connections; raise the limit (LimitNOFILE=) to accept more"
        );
    }
    Ok(budget)
}

fn join_all(executors: Vec<glommio::ExecutorJoinHandle<()>>) {
    for executor in executors {
        if let Err(error) = executor.join() {
            tracing::error!(%error, "an executor ended abnormally");
        }
    }
}

/// Logs the certificate the listener presents, warning when it has
/// expired or expires within two weeks.
fn log_certificate(what: &str, certificate: &crate::tls::CertificateInfo) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| {
            i64::try_from(since.as_secs()).unwrap_or(i64::MAX)
        });
    let days_left = certificate.days_left(now);
    let subject = certificate.subject.as_str();
    let not_after = certificate.not_after.as_str();
    if days_left < 0 {
        tracing::error!(
            subject,
            not_after,
            "{what}; it has EXPIRED: clients refuse it; renew it and send SIGHUP"
        );
    } else if days_left < 14 {
        tracing::warn!(
            subject,
            not_after,
            days_left,
            "{what}; it expires soon: renew it and send SIGHUP"
        );
    } else {
        tracing::info!(subject, not_after, days_left, "{what}");
    }
}

/// Waits for SIGTERM or SIGINT. SIGHUP reloads the TLS certificate and
/// key, if TLS is on: new connections get them, open ones keep theirs.
fn wait_for_signal(tls: Option<&BrokerTls>) -> Result<(), RunError> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGTERM, SIGINT, SIGHUP])
        .map_err(RunError::Signals)?;
    for signal in signals.forever() {
        if signal != SIGHUP {
            tracing::info!(signal, "signal received");
            break;
        }
        match tls.map(BrokerTls::reload) {
            None => tracing::info!("SIGHUP: TLS is off, nothing to reload"),
            Some(Ok(certificate)) => {
                log_certificate("SIGHUP: reloaded the TLS certificate and key", &certificate);
            }
            Some(Err(error)) => {
                tracing::error!(%error, "SIGHUP: TLS reload failed; the previous certificate stays in use");
            }
        }
    }
    Ok(())
}

/// The first failure among `count` shards' reports, if any.
fn first_failure(reports: &mpsc::Receiver<Result<u16, RunError>>, count: u16) -> Option<RunError> {
    let mut failure = None;
    for _ in 0..count {
        match reports.recv() {
            Ok(Ok(_)) => {}
            Ok(Err(error)) => {
                failure.get_or_insert(error);
            }
            Err(_) => {
                failure.get_or_insert(RunError::Executor("an executor thread exited".to_owned()));
            }
        }
    }
    failure
}

/// What a shard's listeners share with the other shards'.
struct ShardShared {
    /// Segment files the shard's cache keeps open (its share of the
    /// descriptor budget).
    open_files_per_shard: usize,
    /// What every shard's client connections share: connection counts,
    /// quota buckets, failed logins.
    edge: Arc<Edge>,
    /// The port each shard accepts on alone.
    shard_ports: Arc<ShardPortTable>,
    /// Under `auto`, the port each shard had at the last start, by shard,
    /// to take again.
    kept_ports: Arc<BTreeMap<u16, u16>>,
    /// Deleted topics whose files the shards are still removing.
    topic_deletions: Arc<TopicDeletions>,
    /// Told once the shard accepts connections.
    listening: mpsc::Sender<Result<u16, RunError>>,
    /// TLS for the listeners and connections to peers, when on.
    tls: Option<Arc<BrokerTls>>,
    /// The key binding idempotent producer ids to principals.
    producer_ids: ProducerIdKey,
    /// Disconnects once the data directory's identity is recorded: the
    /// shard accepts connections only after.
    identity_recorded: flume::Receiver<()>,
}

/// Brings one shard up: disk, storage resources, listeners, the cluster
/// role and the migration of a standalone data directory (shard 0), then
/// its loops. Returns once its loops run; it accepts connections once it
/// serves (see `MetadataSnapshot::serving`).
async fn start_shard(
    id: ShardId,
    config: BrokerConfig,
    shard_metrics: ShardMetrics,
    peers: Vec<Address>,
    inbox: Mailbox,
    metrics: Arc<BrokerMetrics>,
    listeners: ShardShared,
) -> Result<Rc<Shard>, String> {
    crate::peer::bind_outbound_to(config.listen.ip());
    if let Some(secret) = &config.cluster_secret {
        crate::peer::prove_cluster_secret(config.node_id, secret.clone());
    }
    if let Some(connector) = listeners.tls.as_ref().and_then(|tls| tls.peer_connector()) {
        crate::peer::connect_with_tls(connector);
    }
    let data_dir = config.data_dir.clone();
    let disk = GlommioDisk::for_shard(&data_dir, listeners.open_files_per_shard)
        .await
        .map_err(|error| format!("cannot use data directory {}: {error}", data_dir.display()))?;
    let mut storage = shard_storage(&disk, &data_dir, &config, &shard_metrics);
    if config.storage_journal {
        storage.journal = Some(open_shard_journal(id, &disk, &data_dir, &config, &storage).await?);
    }
    // A cluster member listens at once (its peers reach the controller
    // through the same port); a single node once it serves (see `Port`).
    let listen_now = !config.is_single_node();
    let listener = Port::bind(config.listen, listen_now).map_err(|error| {
        format!(
            "cannot listen on {}: {error}; is another broker running there?",
            config.listen
        )
    })?;
    // Shard-aware clients connect here to reach this shard alone.
    let own_listener = match config
        .shard_ports
        .address(config.listen, config.shards, id.0)
    {
        Some(addr) => {
            let kept = listeners.kept_ports.get(&id.0).copied();
            let own = bind_shard_port(addr, kept, listen_now).map_err(|error| {
                format!("cannot listen on {addr} for shard {id}: {error}; pick other --shard-ports or set them off")
            })?;
            let port = own
                .local_addr()
                .map_err(|error| {
                    format!("cannot read the address of shard {id}'s listener: {error}")
                })?
                .port();
            listeners.shard_ports.record(id, port);
            Some(own)
        }
        None => None,
    };
    let shard_zero = id == ShardId(0);
    let metrics_listener = if shard_zero {
        Some(TcpListener::bind(config.metrics_listen).map_err(|error| {
            format!("cannot serve metrics on {}: {error}", config.metrics_listen)
        })?)
    } else {
        None
    };
    let config = Rc::new(config);
    let cluster_disk = disk.clone();
    let shard = Shard::new(ShardParts {
        id,
        config,
        metrics: shard_metrics,
        disk,
        storage,
        peers,
        inbox,
        topic_deletions: listeners.topic_deletions,
        producer_ids: listeners.producer_ids,
    });
    // Calls this broker makes to itself run the handlers in-process.
    crate::peer::serve_locally(
        shard.config.node_id,
        Rc::new(Loopback::new(&shard, listeners.shard_ports.clone())),
    );
    if shard_zero {
        start_cluster_role(&shard, cluster_disk).await?;
    }
    glommio::spawn_local(shard.clone().run_maintenance()).detach();
    glommio::spawn_local(shard.clone().run_segment_flusher()).detach();
    glommio::spawn_local(shard.clone().run_deleter()).detach();
    glommio::spawn_local(shard.clone().run_group_maintenance()).detach();
    glommio::spawn_local(shard.clone().run_replication_timers()).detach();
    let ports: Vec<Port> = std::iter::once(listener).chain(own_listener).collect();
    let front = Front::new(shard.clone(), listeners.edge, listeners.shard_ports);
    glommio::spawn_local(async move {
        front.shard.wait_ready().await;
        // Nothing is ever sent: the sender's drop is the signal, and a
        // start that fails stops the shard before it.
        let _recorded = listeners.identity_recorded.recv_async().await;
        let report = ports
            .into_iter()
            .map(|port| {
                let addr = port
                    .local_addr()
                    .map_or_else(|_| "a client port".to_owned(), |addr| addr.to_string());
                port.listen().map_err(|error| {
                    format!("cannot listen on {addr} once serving: {error}; is another process using it?")
                })
            })
            .collect::<Result<Vec<_>, _>>()
            .map(|bound| {
                serve_listeners(&front, bound, listeners.tls.as_deref());
            })
            .map(|()| id.0)
            .map_err(|message| RunError::ShardStart { shard: id.0, message });
        let _reported = listeners.listening.send(report);
    })
    .detach();
    if let Some(metrics_listener) = metrics_listener {
        let settings = crate::metrics::http::Settings::of(&shard.config);
        glommio::spawn_local(crate::metrics::http::serve(
            metrics_listener,
            metrics,
            settings,
        ))
        .detach();
    }
    Ok(shard)
}

fn serve_listeners(front: &Rc<Front>, bound: Vec<TcpListener>, tls: Option<&BrokerTls>) {
    for listener in bound {
        glommio::spawn_local(listener::accept_loop(
            front.clone(),
            listener,
            tls.map(BrokerTls::listener),
        ))
        .detach();
    }
}

/// The topics the cluster creates for itself: group state and audit
/// records, kept forever (compaction by snapshot bounds `__groups`).
fn internal_topics(config: &BrokerConfig) -> Vec<InternalTopicSpec> {
    let kept_forever = TopicConfig {
        retention_ms: None,
        retention_bytes: None,
        // Small segments: compaction by snapshot deletes whole segments.
        segment_bytes: 8 << 20,
        ..config.topic_defaults
    };
    vec![
        InternalTopicSpec {
            name: GROUPS_TOPIC.to_owned(),
            partitions: config.group_topic_partitions,
            config: kept_forever.entries(),
        },
        InternalTopicSpec {
            name: AUDIT_TOPIC.to_owned(),
            partitions: 1,
            config: kept_forever.entries(),
        },
    ]
}

/// Shard 0: the controller role (on voters: every single node is one) and
/// the membership that registers this broker and follows metadata; then,
/// for a data directory a standalone broker wrote, its migration; then
/// the internal topics, which the controller creates where they are
/// missing.
async fn start_cluster_role(shard: &Rc<Shard>, disk: GlommioDisk) -> Result<(), String> {
    let config = shard.config.clone();
    let clock: Rc<dyn Clock> = shard.storage.clock.clone();
    // Fenced until a heartbeat answer says otherwise.
    shard.metrics.broker_fenced.set(1);
    let voters = config.voters();
    let controller = if voters.contains_key(&config.node_id) {
        let (log, recovered) = RaftLogFile::open(disk.clone(), &config.data_dir)
            .await
            .map_err(|error| {
                fatal::on_controller_log_failed(&error);
                error.to_string()
            })?;
        let by_node = voters
            .iter()
            .map(|(id, addr)| (corelog_controller::NodeId(u64::from(*id)), *addr))
            .collect();
        let service = ControllerService::start(
            config.node_id,
            by_node,
            log,
            recovered,
            Duration::from_millis(config.broker_session_timeout_ms),
            config.max_partitions_per_shard,
            clock.clone(),
        )
        .map_err(|error| format!("cannot start the controller role: {error}"))?;
        Some(service)
    } else {
        None
    };
    // Milliseconds since the epoch: grows with every start of the process.
    let incarnation = u64::try_from(clock.now().0).unwrap_or(1).max(1);
    let registration = BrokerRegisterRequest {
        node_id: config.node_id,
        host: config.advertised_host.clone(),
        port: config.listen.port(),
        rack: config.rack.clone(),
        shards: config.shards,
        incarnation,
    };
    let member = ClusterMember::new(
        config.node_id,
        voters,
        registration,
        Duration::from_millis(config.broker_heartbeat_interval_ms),
        config.is_single_node(),
    );
    member.run(shard.clone());
    shard.set_cluster(ClusterRole {
        controller: controller.clone(),
        member: member.clone(),
    });
    if let Some(controller) = &controller {
        migration::migrate_if_standalone(&disk, &config, controller, incarnation).await?;
        if config.rebuild_catalog {
            let internal = internal_topics(&config);
            let internal_config = |name: &str| {
                internal
                    .iter()
                    .find(|topic| topic.name == name)
                    .map(|topic| topic.config.clone())
            };
            migration::rebuild::rebuild_catalog(
                &disk,
                &config,
                internal_config,
                controller,
                incarnation,
                clock.now().0,
            )
            .await?;
        }
        controller.set_internal_topics(internal_topics(&config));
    }
    Ok(())
}

/// Opens shard `id`'s journal and replays what it holds into the partition
/// directories, before any partition of the shard opens.
async fn open_shard_journal(
    id: ShardId,
    disk: &GlommioDisk,
    data_dir: &Path,
    config: &BrokerConfig,
    storage: &ShardStorage,
) -> Result<Rc<dyn Journal>, String> {
    let dir = data_dir.join("journal").join(format!("shard-{}", id.0));
    let failed = |error: StorageError| {
        format!(
            "cannot recover the shard journal in {}: {error}",
            dir.display()
        )
    };
    let (journal, replayed) =
        recover_shard_journal(disk, &dir, JournalConfig::default(), config.log, storage)
            .await
            .map_err(failed)?;
    if replayed.partitions > 0 || replayed.missing > 0 {
        tracing::info!(
            shard = id.0,
            partitions = replayed.partitions,
            batches = replayed.batches,
            deleted_partitions = replayed.missing,
            "shard journal replayed"
        );
    }
    Ok(Rc::new(journal))
}

fn shard_storage(
    disk: &GlommioDisk,
    data_dir: &Path,
    config: &BrokerConfig,
    metrics: &ShardMetrics,
) -> ShardStorage {
    let probe_disk = disk.clone();
    let probe_dir = data_dir.to_path_buf();
    ShardStorage {
        clock: Rc::new(SystemClock),
        space: Rc::new(DiskSpace::new(config.disk_reserve_bytes, move || {
            probe_disk.free_bytes(&probe_dir)
        })),
        cache: TailCache::new(config.tail_cache_bytes),
        observer: Rc::new(ExitOnFence(metrics.clone())),
        journal: None,
    }
}
