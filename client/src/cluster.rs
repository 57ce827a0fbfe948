//! What the producer, the consumer and the admin client share: a pool of
//! connections (one per broker address) and the metadata cache.
//!
//! A shard-aware client also connects to the port each broker shard
//! accepts on alone (DESIGN §3), learned from the broker with
//! `DescribeShards` once per connection to its shared port, so that a
//! partition's requests reach the core that owns it without a hop.
//!
//! Connections are opened on demand and replaced when they close. A broker
//! that just refused a connection is not retried before
//! `reconnect_backoff`, so a client whose broker is down fails fast instead
//! of hammering it. Metadata refreshes are coalesced: callers that ask while
//! a refresh is running get its result, and refreshes are at least
//! `metadata_refresh_backoff` apart.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use corelog_wire::message::describe_shards::{
    ArchivedDescribeShardsResponse, DescribeShardsRequest,
};
use corelog_wire::message::list_offsets::{
    ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic, OffsetSpec,
};
use corelog_wire::message::metadata::MetadataRequest;
use corelog_wire::types::Offset;
use tokio::time::Instant;

use crate::config::ClientConfig;
use crate::connection::Connection;
use crate::error::ClientError;
use crate::metadata::ClusterMetadata;

/// The most shards a broker's DescribeShards answer is taken for.
const SHARDS_MAX: u16 = 1024;

/// One broker address's connection, or the last failure to open one.
#[derive(Default)]
struct Slot {
    connection: Option<Connection>,
    failure: Option<(Instant, ClientError)>,
}

/// Where a broker's shards accept connections alone, as the broker told
/// on one connection to its shared port. They hold while that connection
/// does: a broker may pick new ports when it restarts, which closes it.
struct ShardRoutes {
    learned_on: Connection,
    /// `host:port` by shard index; `None` for a shard without a port of
    /// its own. Resolved once, so that a request only looks it up.
    addrs: Vec<Option<String>>,
}

/// Connections and metadata, shared by every handle of one client.
pub(crate) struct Cluster {
    config: ClientConfig,
    /// Host of the first bootstrap address, for brokers that advertise a
    /// wildcard host.
    bootstrap_host: String,
    slots: Mutex<HashMap<String, Arc<tokio::sync::Mutex<Slot>>>>,
    /// Per broker address (its shared port): its shards' own ports.
    shard_routes: Mutex<HashMap<String, ShardRoutes>>,
    metadata: RwLock<Arc<ClusterMetadata>>,
    /// Topics this client cares about; each refresh asks for all of them.
    interest: Mutex<BTreeSet<String>>,
    refresh: tokio::sync::Mutex<Option<Instant>>,
    refresh_count: AtomicU64,
    /// Quota throttles the brokers asked for.
    pub(crate) throttles: crate::throttle::Throttles,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("bootstrap", &self.config.bootstrap)
            .finish_non_exhaustive()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Nothing here panics while holding a lock; recover rather than
    // propagate a poison that cannot mean inconsistent state.
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The ports of a DescribeShards answer by shard index, or none if the
/// answer is not about `node_id` (the address now belongs to another
/// broker: its shards would not own this broker's partitions).
fn shard_ports(node_id: u32, response: &ArchivedDescribeShardsResponse) -> Vec<u16> {
    if response.node_id.to_native() != node_id {
        return Vec::new();
    }
    let mut ports = Vec::new();
    for endpoint in response.shards.iter() {
        let shard = usize::from(endpoint.shard.to_native());
        // Shards beyond any real broker's are not worth a table entry.
        if shard >= usize::from(SHARDS_MAX) {
            continue;
        }
        if ports.len() <= shard {
            ports.resize(shard + 1, 0);
        }
        ports[shard] = endpoint.port.to_native();
    }
    ports
}

impl Cluster {
    /// Checks the configuration and opens a first connection, so that a
    /// wrong address or a stopped broker is reported at once.
    ///
    /// # Errors
    /// [`ClientError::InvalidConfig`], or the error of the last bootstrap
    /// address tried.
    pub(crate) async fn connect(config: ClientConfig) -> Result<Arc<Cluster>, ClientError> {
        config.validate()?;
        let bootstrap_host = config.bootstrap[0]
            .rsplit_once(':')
            .map(|(host, _)| host.trim_start_matches('[').trim_end_matches(']'))
            .unwrap_or("127.0.0.1")
            .to_owned();
        let cluster = Arc::new(Cluster {
            config,
            bootstrap_host,
            slots: Mutex::new(HashMap::new()),
            shard_routes: Mutex::new(HashMap::new()),
            metadata: RwLock::new(Arc::new(ClusterMetadata::default())),
            interest: Mutex::new(BTreeSet::new()),
            refresh: tokio::sync::Mutex::new(None),
            refresh_count: AtomicU64::new(0),
            throttles: crate::throttle::Throttles::default(),
        });
        cluster.any_connection().await?;
        Ok(cluster)
    }

    /// The current metadata snapshot (possibly empty before the first
    /// refresh).
    pub(crate) fn metadata(&self) -> Arc<ClusterMetadata> {
        Arc::clone(
            &self
                .metadata
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }

    /// A live connection to `addr`, opened if needed.
    ///
    /// # Errors
    /// The connect or handshake error; within `reconnect_backoff` of a
    /// failure, that same failure again without trying.
    pub(crate) async fn connection_at(&self, addr: &str) -> Result<Connection, ClientError> {
        let slot = {
            let mut slots = lock(&self.slots);
            // A hit, every request's case, allocates no key.
            match slots.get(addr) {
                Some(slot) => Arc::clone(slot),
                None => Arc::clone(slots.entry(addr.to_owned()).or_default()),
            }
        };
        let mut slot = slot.lock().await;
        if let Some(connection) = &slot.connection {
            if !connection.is_closed() {
                return Ok(connection.clone());
            }
            slot.connection = None;
        }
        if let Some((at, error)) = &slot.failure
            && at.elapsed() < self.config.reconnect_backoff
        {
            return Err(error.clone());
        }
        match Connection::open(addr, &self.config).await {
            Ok(connection) => {
                slot.connection = Some(connection.clone());
                slot.failure = None;
                Ok(connection)
            }
            Err(error) => {
                slot.failure = Some((Instant::now(), error.clone()));
                Err(error)
            }
        }
    }

    /// The address to connect to for a host and port a broker advertised
    /// (a wildcard host means the bootstrap host).
    pub(crate) fn advertised_addr(&self, host: &str, port: u16) -> String {
        crate::metadata::connect_addr(host, port, &self.bootstrap_host)
    }

    /// The client settings.
    pub(crate) fn config(&self) -> &ClientConfig {
        &self.config
    }

    /// A live connection to broker `node_id`, by the current metadata.
    ///
    /// # Errors
    /// [`ClientError::Broker`] with `LEADER_NOT_AVAILABLE` if the metadata
    /// does not know the broker; the connect error otherwise.
    pub(crate) async fn connection_to(&self, node_id: u32) -> Result<Connection, ClientError> {
        let addr = self
            .metadata()
            .broker_addr(node_id, &self.bootstrap_host)
            .ok_or_else(|| ClientError::Broker {
                code: corelog_wire::error::ErrorCode::LeaderNotAvailable,
                context: format!("broker {node_id} is not in the metadata"),
                detail: None,
            })?;
        self.connection_at(&addr).await
    }

    /// A live connection to shard `shard` of broker `node_id` on the port
    /// it accepts on alone, or to the broker's shared port when the client
    /// is not shard-aware, the broker lists no such port, or it cannot be
    /// reached (the broker then forwards to the shard).
    ///
    /// # Errors
    /// As [`Cluster::connection_to`], for the shared port.
    pub(crate) async fn connection_to_shard(
        &self,
        node_id: u32,
        shard: u16,
    ) -> Result<Connection, ClientError> {
        let shared = self.connection_to(node_id).await?;
        if !self.config.shard_aware {
            return Ok(shared);
        }
        let Some(addr) = self.shard_addr(node_id, &shared, shard).await else {
            return Ok(shared);
        };
        match self.connection_at(&addr).await {
            Ok(connection) => Ok(connection),
            Err(error) => {
                tracing::debug!(node_id, shard, %addr, %error, "cannot reach the shard's own port; using the shared port");
                Ok(shared)
            }
        }
    }

    /// The address where shard `shard` of broker `node_id` accepts alone,
    /// asking the broker on `shared` (its shared port) the first time.
    async fn shard_addr(&self, node_id: u32, shared: &Connection, shard: u16) -> Option<String> {
        let known = |routes: &HashMap<String, ShardRoutes>| {
            routes
                .get(shared.addr())
                .filter(|known| known.learned_on.same_as(shared))
                .map(|known| known.addrs.get(usize::from(shard)).cloned().flatten())
        };
        if let Some(addr) = known(&lock(&self.shard_routes)) {
            return addr;
        }
        let ports = match shared
            .call(
                &DescribeShardsRequest { shards: None },
                Vec::new(),
                Duration::ZERO,
            )
            .await
            .and_then(|reply| {
                let (response, _) = reply.decode()?;
                Ok(shard_ports(node_id, response))
            }) {
            Ok(ports) => ports,
            // A broker older than the API: the shared port it is.
            Err(ClientError::UnsupportedApi { .. }) => Vec::new(),
            Err(error) => {
                tracing::debug!(node_id, %error, "DescribeShards failed; using the shared port");
                return None;
            }
        };
        let host = self
            .metadata()
            .brokers
            .get(&node_id)
            .map(|broker| broker.host.clone());
        let addrs: Vec<Option<String>> = ports
            .into_iter()
            .map(|port| {
                let host = host.as_deref().filter(|_| port != 0)?;
                Some(self.advertised_addr(host, port))
            })
            .collect();
        let addr = addrs.get(usize::from(shard)).cloned().flatten();
        lock(&self.shard_routes).insert(
            shared.addr().to_owned(),
            ShardRoutes {
                learned_on: shared.clone(),
                addrs,
            },
        );
        addr
    }

    /// A live connection to any broker: an open one if there is one, else
    /// the bootstrap addresses, then the known brokers, in order.
    ///
    /// # Errors
    /// The error of the last address tried.
    pub(crate) async fn any_connection(&self) -> Result<Connection, ClientError> {
        let open: Vec<Arc<tokio::sync::Mutex<Slot>>> =
            lock(&self.slots).values().cloned().collect();
        for slot in open {
            if let Ok(slot) = slot.try_lock()
                && let Some(connection) = &slot.connection
                && !connection.is_closed()
            {
                return Ok(connection.clone());
            }
        }
        let metadata = self.metadata();
        let known = metadata
            .brokers
            .keys()
            .filter_map(|&node| metadata.broker_addr(node, &self.bootstrap_host));
        let mut candidates: Vec<String> = self.config.bootstrap.clone();
        candidates.extend(known);
        let mut last_error = None;
        for addr in &candidates {
            match self.connection_at(addr).await {
                Ok(connection) => return Ok(connection),
                Err(error) => last_error = Some(error),
            }
        }
        Err(last_error.unwrap_or_else(|| {
            ClientError::InvalidConfig("no bootstrap address to connect to".to_owned())
        }))
    }

    /// Asks any broker for metadata about `topics` (`None`: every topic),
    /// without touching the cache.
    ///
    /// # Errors
    /// Connection errors, or the broker's refusal.
    pub(crate) async fn fetch_metadata(
        &self,
        topics: Option<Vec<String>>,
    ) -> Result<ClusterMetadata, ClientError> {
        let connection = self.any_connection().await?;
        let reply = connection
            .call(&MetadataRequest { topics }, Vec::new(), Duration::ZERO)
            .await?;
        let (response, _) = reply.decode()?;
        Ok(ClusterMetadata::from_archived(response))
    }

    /// Refreshes the cached metadata for every topic of interest plus
    /// `topics`, and returns the new snapshot. Concurrent callers share one
    /// refresh; refreshes are at least `metadata_refresh_backoff` apart.
    ///
    /// # Errors
    /// As [`Cluster::fetch_metadata`]; the cache is left as it was.
    pub(crate) async fn refresh_metadata(
        &self,
        topics: &[&str],
    ) -> Result<Arc<ClusterMetadata>, ClientError> {
        let wanted_before = {
            let mut interest = lock(&self.interest);
            let before = interest.len();
            interest.extend(topics.iter().map(|topic| (*topic).to_owned()));
            before != interest.len()
        };
        let seen = self.refresh_count.load(Ordering::Acquire);
        let mut last = self.refresh.lock().await;
        // Someone refreshed while this caller waited for the lock, and no
        // new topic was added since: their snapshot is as fresh as ours
        // would be.
        if !wanted_before && self.refresh_count.load(Ordering::Acquire) != seen {
            return Ok(self.metadata());
        }
        if let Some(at) = *last {
            let ready = at + self.config.metadata_refresh_backoff;
            tokio::time::sleep_until(ready).await;
        }
        let interest: Vec<String> = lock(&self.interest).iter().cloned().collect();
        let result = self.fetch_metadata(Some(interest)).await;
        *last = Some(Instant::now());
        let snapshot = Arc::new(result?);
        *self
            .metadata
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::clone(&snapshot);
        self.refresh_count.fetch_add(1, Ordering::Release);
        Ok(snapshot)
    }

    /// Cached metadata for `topic`, refreshed first if the cache does not
    /// have it.
    ///
    /// # Errors
    /// `UNKNOWN_TOPIC_OR_PARTITION` if the topic does not exist; refresh
    /// errors.
    pub(crate) async fn topic_metadata(
        &self,
        topic: &str,
    ) -> Result<Arc<ClusterMetadata>, ClientError> {
        let cached = self.metadata();
        if cached.topic(topic).is_ok() && lock(&self.interest).contains(topic) {
            return Ok(cached);
        }
        let refreshed = self.refresh_metadata(&[topic]).await?;
        refreshed.topic(topic)?;
        Ok(refreshed)
    }

    /// Looks up one offset of a partition on its leader. `Ok(None)` when a
    /// timestamp lookup finds no record at or after the time.
    ///
    /// # Errors
    /// Leader, connection and broker errors.
    pub(crate) async fn list_offset(
        &self,
        topic: &str,
        partition: u32,
        spec: OffsetSpec,
    ) -> Result<Option<Offset>, ClientError> {
        let metadata = self.topic_metadata(topic).await?;
        let leader = metadata
            .leader(topic, partition)
            .ok_or_else(|| ClientError::Broker {
                code: corelog_wire::error::ErrorCode::LeaderNotAvailable,
                context: format!("list offsets of {topic}/{partition}"),
                detail: None,
            })?;
        let connection = self.connection_to(leader).await?;
        let request = ListOffsetsRequest {
            topics: vec![ListOffsetsTopic {
                name: topic.to_owned(),
                partitions: vec![ListOffsetsPartition { partition, spec }],
            }],
        };
        let reply = connection
            .call(&request, Vec::new(), Duration::ZERO)
            .await?;
        let (response, _) = reply.decode()?;
        let answer = response
            .topics
            .iter()
            .filter(|t| t.name == topic)
            .flat_map(|t| t.partitions.iter())
            .find(|p| p.partition.to_native() == partition)
            .ok_or_else(|| ClientError::Protocol {
                addr: reply.addr().to_owned(),
                detail: format!("ListOffsets response has no entry for {topic}/{partition}"),
            })?;
        if let Some(error) = ClientError::from_wire(
            answer.error_code.to_native(),
            || format!("list offsets of {topic}/{partition}"),
            None,
        ) {
            return Err(error);
        }
        let offset = answer.offset.to_native();
        Ok(u64::try_from(offset).ok().map(Offset))
    }
}
