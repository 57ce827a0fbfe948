//! Per-shard Prometheus metrics (DESIGN §10) and the `/metrics` endpoint.
//!
//! One registry for the process; every metric carries a `shard` label and
//! each shard holds its own labelled instances, so shards never write to the
//! same counter. The endpoint ([`http`]) encodes the registry on request.

mod exposition;
pub mod http;

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use corelog_wire::error::ErrorCode;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::replica::stream::StreamObserver;
use corelog_storage::StorageObserver;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ShardLabel {
    shard: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ShardCodeLabel {
    shard: u16,
    code: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ShardReasonLabel {
    shard: u16,
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct GroupPartitionLabel {
    shard: u16,
    group: String,
    topic: String,
    partition: u32,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NodeLabel {
    node: u32,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VersionLabel {
    version: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FollowerLabel {
    shard: u16,
    topic: String,
    partition: u32,
    follower: u32,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct GroupLabel {
    shard: u16,
    group: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ThrottleLabel {
    shard: u16,
    /// The quota entity whose limits applied: `user:NAME` for a principal
    /// with its own quota, else `user:*` (at most 1,000 such series).
    entity: String,
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ShardApiLabel {
    shard: u16,
    api: &'static str,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

/// Latency buckets from 50 µs to about 6.5 s.
fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.000_05, 2.0, 18))
}

/// The process's metrics.
#[derive(Debug)]
pub struct BrokerMetrics {
    registry: Registry,
    append_latency: HistogramFamily<ShardLabel>,
    fsync_latency: HistogramFamily<ShardLabel>,
    flushed_bytes: Family<ShardLabel, Counter>,
    journal_bytes: Family<ShardLabel, Counter>,
    logs_fenced: Family<ShardLabel, Counter>,
    records_in: Family<ShardLabel, Counter>,
    bytes_in: Family<ShardLabel, Counter>,
    records_out: Family<ShardLabel, Counter>,
    bytes_out: Family<ShardLabel, Counter>,
    requests: Family<ShardApiLabel, Counter>,
    forwarded: Family<ShardApiLabel, Counter>,
    replication_frames: Family<ShardLabel, Counter>,
    replication_frame_pushes: Family<ShardLabel, Counter>,
    replication_pushes_refused: Family<ShardLabel, Counter>,
    errors: Family<ShardCodeLabel, Counter>,
    connections_closed: Family<ShardReasonLabel, Counter>,
    inter_broker_refused: Family<ShardApiLabel, Counter>,
    throttled_ms: Family<ThrottleLabel, Counter>,
    throttled_requests: Family<ThrottleLabel, Counter>,
    authentications: Family<ShardReasonLabel, Counter>,
    connections: Family<ShardLabel, Gauge>,
    in_flight_requests: Family<ShardLabel, Gauge>,
    queue_depth: Family<ShardLabel, Gauge>,
    produce_bytes_in_flight: Family<ShardLabel, Gauge>,
    produce_admission_waits: Family<ShardLabel, Counter>,
    produce_admission_wait_seconds: Family<ShardLabel, Counter<f64, AtomicU64>>,
    disk_free_bytes: Family<ShardLabel, Gauge>,
    disk_reserve_bytes: Family<ShardLabel, Gauge>,
    tail_cache_bytes: Family<ShardLabel, Gauge>,
    partitions: Family<ShardLabel, Gauge>,
    replica_lag_records: Family<ShardLabel, Gauge>,
    replica_leader_partitions: Family<ShardLabel, Gauge>,
    broker_fenced: Family<ShardLabel, Gauge>,
    group_lag_records: Family<GroupPartitionLabel, Gauge>,
    group_lag_bytes: Family<GroupPartitionLabel, Gauge>,
    group_lag_seconds: Family<GroupPartitionLabel, Gauge>,
    group_retention_left_seconds: Family<GroupPartitionLabel, Gauge>,
    group_rebalances: Family<GroupLabel, Counter>,
    group_generation: Family<GroupLabel, Gauge>,
    follower_lag_records: Family<FollowerLabel, Gauge>,
    follower_lag_milliseconds: Family<FollowerLabel, Gauge>,
    follower_lag_bytes: Family<FollowerLabel, Gauge>,
    reassignment_bytes_copied: Family<FollowerLabel, Gauge>,
    reassignment_bytes_left: Family<FollowerLabel, Gauge>,
    controller_is_leader: Family<NodeLabel, Gauge>,
    controller_leader_id: Family<NodeLabel, Gauge>,
    controller_term: Family<NodeLabel, Gauge>,
    controller_commit_index: Family<NodeLabel, Gauge>,
    partitions_offline: Family<NodeLabel, Gauge>,
    partitions_under_replicated: Family<NodeLabel, Gauge>,
    partitions_leaderless: Family<NodeLabel, Gauge>,
    partitions_in_sync_unknown: Family<NodeLabel, Gauge>,
    build_info: Family<VersionLabel, Gauge>,
}

/// The controller as one voter sees it, for the controller series.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ControllerSample {
    /// This voter's node id.
    pub node: u32,
    /// Whether it leads.
    pub is_leader: bool,
    /// The leader it knows.
    pub leader: Option<u32>,
    /// Its Raft term.
    pub term: u64,
    /// Its Raft commit index.
    pub commit_index: u64,
    /// Partition health, from the leader's view; `None` on a follower.
    pub health: Option<crate::cluster::in_sync::PartitionHealth>,
}

/// One follower of a partition this shard leads, for the lag series.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FollowerLagSample {
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: u32,
    /// The follower's node id.
    pub follower: u32,
    /// Offsets it has not acknowledged.
    pub records: u64,
    /// Bytes it has not acknowledged, estimated from the partition's
    /// average record size.
    pub bytes: u64,
    /// How long since it last caught up.
    pub milliseconds: u64,
    /// For a learner (a new replica of a moving partition): the bytes it
    /// holds, estimated like `bytes`; `None` for a replica of the set.
    pub learner_copied_bytes: Option<u64>,
}

impl BrokerMetrics {
    /// A registry with every metric registered.
    #[must_use]
    pub fn new() -> Arc<Self> {
        let mut registry = Registry::with_prefix("corelog");
        let append_latency = HistogramFamily::<ShardLabel>::new_with_constructor(
            latency_histogram as fn() -> Histogram,
        );
        let fsync_latency = HistogramFamily::<ShardLabel>::new_with_constructor(
            latency_histogram as fn() -> Histogram,
        );
        let metrics = BrokerMetrics {
            append_latency,
            fsync_latency,
            flushed_bytes: Family::default(),
            journal_bytes: Family::default(),
            logs_fenced: Family::default(),
            records_in: Family::default(),
            bytes_in: Family::default(),
            records_out: Family::default(),
            bytes_out: Family::default(),
            requests: Family::default(),
            forwarded: Family::default(),
            replication_frames: Family::default(),
            replication_frame_pushes: Family::default(),
            replication_pushes_refused: Family::default(),
            errors: Family::default(),
            connections_closed: Family::default(),
            inter_broker_refused: Family::default(),
            throttled_ms: Family::default(),
            throttled_requests: Family::default(),
            authentications: Family::default(),
            connections: Family::default(),
            in_flight_requests: Family::default(),
            queue_depth: Family::default(),
            produce_bytes_in_flight: Family::default(),
            produce_admission_waits: Family::default(),
            produce_admission_wait_seconds: Family::default(),
            disk_free_bytes: Family::default(),
            disk_reserve_bytes: Family::default(),
            tail_cache_bytes: Family::default(),
            partitions: Family::default(),
            replica_lag_records: Family::default(),
            replica_leader_partitions: Family::default(),
            broker_fenced: Family::default(),
            group_lag_records: Family::default(),
            group_lag_bytes: Family::default(),
            group_lag_seconds: Family::default(),
            group_retention_left_seconds: Family::default(),
            group_rebalances: Family::default(),
            group_generation: Family::default(),
            follower_lag_records: Family::default(),
            follower_lag_milliseconds: Family::default(),
            follower_lag_bytes: Family::default(),
            reassignment_bytes_copied: Family::default(),
            reassignment_bytes_left: Family::default(),
            controller_is_leader: Family::default(),
            controller_leader_id: Family::default(),
            controller_term: Family::default(),
            controller_commit_index: Family::default(),
            partitions_offline: Family::default(),
            partitions_under_replicated: Family::default(),
            partitions_leaderless: Family::default(),
            partitions_in_sync_unknown: Family::default(),
            build_info: Family::default(),
            registry: Registry::default(),
        };
        registry.register(
            "append_latency_seconds",
            "Time from receiving a produced batch to its durable acknowledgement",
            metrics.append_latency.clone(),
        );
        registry.register(
            "fsync_latency_seconds",
            "Time of one fdatasync'd write: a shard journal commit or a segment flush",
            metrics.fsync_latency.clone(),
        );
        registry.register(
            "flushed_bytes",
            "Bytes of batches written and synced into partition segments",
            metrics.flushed_bytes.clone(),
        );
        registry.register(
            "journal_bytes",
            "Bytes written to the shard journal, frame headers and padding included",
            metrics.journal_bytes.clone(),
        );
        registry.register(
            "logs_fenced",
            "Partition logs (or replica metadata) fenced after a failed write or fdatasync",
            metrics.logs_fenced.clone(),
        );
        registry.register("records_in", "Records appended", metrics.records_in.clone());
        registry.register(
            "bytes_in",
            "Bytes of batches appended",
            metrics.bytes_in.clone(),
        );
        registry.register(
            "records_out",
            "Records returned by fetches",
            metrics.records_out.clone(),
        );
        registry.register(
            "bytes_out",
            "Bytes of batches returned by fetches",
            metrics.bytes_out.clone(),
        );
        registry.register(
            "requests",
            "Requests handled, by API",
            metrics.requests.clone(),
        );
        registry.register(
            "forwarded_batches",
            "Partition batches received on a connection to another shard than the partition's owner and forwarded to the owner, by API (shard-aware clients keep this near 0)",
            metrics.forwarded.clone(),
        );
        registry.register(
            "replication_frames",
            "Replication stream frames sent to follower brokers by this shard's leaders (one carries the pushes of many partitions)",
            metrics.replication_frames.clone(),
        );
        registry.register(
            "replication_frame_pushes",
            "Partition pushes carried by those frames (divided by the frames: partitions per frame)",
            metrics.replication_frame_pushes.clone(),
        );
        registry.register(
            "replication_pushes_refused",
            "Pushes failed at once because their follower's stream queue was full (the follower is down or slow); resent after the replication timeout",
            metrics.replication_pushes_refused.clone(),
        );
        registry.register(
            "errors",
            "Errors returned to clients, by code",
            metrics.errors.clone(),
        );
        registry.register(
            "connections",
            "Open client connections",
            metrics.connections.clone(),
        );
        registry.register(
            "group_lag_records",
            "Records a group has yet to consume on a partition (high watermark minus its committed offset), refreshed every 5 s by the group's coordinator",
            metrics.group_lag_records.clone(),
        );
        registry.register(
            "group_lag_bytes",
            "Bytes a group has yet to consume on a partition, estimated from the partition's average record size",
            metrics.group_lag_bytes.clone(),
        );
        registry.register(
            "group_lag_seconds",
            "Age of the oldest record a group has not consumed on a partition (0 when caught up)",
            metrics.group_lag_seconds.clone(),
        );
        registry.register(
            "group_retention_left_seconds",
            "Time before retention may delete the oldest record a group still needs on a partition (absent when retention is unbounded)",
            metrics.group_retention_left_seconds.clone(),
        );
        registry.register(
            "group_rebalances",
            "Rebalances a group went through (a new generation each), counted by its coordinator: churn",
            metrics.group_rebalances.clone(),
        );
        registry.register(
            "group_generation",
            "A group's current generation, on its coordinator",
            metrics.group_generation.clone(),
        );
        registry.register(
            "follower_lag_records",
            "Offsets a follower has not acknowledged, per partition this broker leads and per follower",
            metrics.follower_lag_records.clone(),
        );
        registry.register(
            "follower_lag_milliseconds",
            "Time since a follower last caught up with the leader's log end, per partition this broker leads and per follower (0 when it holds all of it)",
            metrics.follower_lag_milliseconds.clone(),
        );
        registry.register(
            "follower_lag_bytes",
            "Bytes a follower has not acknowledged, estimated from the partition's average record size, per partition this broker leads and per follower",
            metrics.follower_lag_bytes.clone(),
        );
        registry.register(
            "reassignment_bytes_copied",
            "Bytes a new replica of a moving partition holds (a learner, `corelog partition reassign`), estimated from the partition's average record size, per partition this broker leads and per learner",
            metrics.reassignment_bytes_copied.clone(),
        );
        registry.register(
            "reassignment_bytes_left",
            "Bytes a new replica of a moving partition still has to copy, estimated from the partition's average record size, per partition this broker leads and per learner",
            metrics.reassignment_bytes_left.clone(),
        );
        registry.register(
            "controller_is_leader",
            "1 on the controller voter that leads, 0 on the others",
            metrics.controller_is_leader.clone(),
        );
        registry.register(
            "controller_leader_id",
            "The controller leader this voter knows, -1 for none",
            metrics.controller_leader_id.clone(),
        );
        registry.register(
            "controller_term",
            "This voter's Raft term",
            metrics.controller_term.clone(),
        );
        registry.register(
            "controller_commit_index",
            "This voter's Raft commit index",
            metrics.controller_commit_index.clone(),
        );
        registry.register(
            "partitions_offline",
            "Partitions without a leader that can serve (none, or a fenced one), from the controller leader's view; only the leader exports it",
            metrics.partitions_offline.clone(),
        );
        registry.register(
            "partitions_under_replicated",
            "Partitions with fewer in-sync replicas than replicas, from the controller leader's view; only the leader exports it",
            metrics.partitions_under_replicated.clone(),
        );
        registry.register(
            "partitions_leaderless",
            "Partitions with no leader published, from the controller leader's view; only the leader exports it",
            metrics.partitions_leaderless.clone(),
        );
        registry.register(
            "partitions_in_sync_unknown",
            "Led partitions whose leader has not reported its in-sync replicas yet, from the controller leader's view",
            metrics.partitions_in_sync_unknown.clone(),
        );
        registry.register(
            "build_info",
            "Always 1; the broker's version as a label",
            metrics.build_info.clone(),
        );
        registry.register(
            "connections_closed",
            "Connections the broker closed, by reason: idle_timeout (nothing sent or in flight for connection_idle_timeout_ms), frame_timeout (a request frame not whole within frame_read_timeout_ms of its first byte), plaintext_on_tls (a plaintext client on a TLS listener, answered TLS_REQUIRED), tls_handshake_failed (a TLS handshake failed or did not finish within frame_read_timeout_ms), authentication_required (a request before a login, which the broker requires), credential_revoked (its user was deleted or given a new password)",
            metrics.connections_closed.clone(),
        );
        registry.register(
            "inter_broker_refused",
            "Inter-broker requests (Raft, registration, replication) refused because their connection had not proved the cluster secret, by API",
            metrics.inter_broker_refused.clone(),
        );
        registry.register(
            "throttled_milliseconds",
            "Time connections were held back for going over a quota, by the quota entity whose limits applied and kind (produce, fetch, request_time)",
            metrics.throttled_ms.clone(),
        );
        registry.register(
            "throttled_requests",
            "Requests whose principal went over a quota (answered with a throttle), by entity and kind",
            metrics.throttled_requests.clone(),
        );
        registry.register(
            "authentications",
            "Authenticate exchanges that ended, by reason: broker (a broker proved the cluster secret), user (a user logged in with SCRAM), failed (a wrong proof or a malformed message; the connection is closed), unsupported_mechanism, no_secret (this broker has no cluster secret to check against)",
            metrics.authentications.clone(),
        );
        registry.register(
            "in_flight_requests",
            "Requests being handled",
            metrics.in_flight_requests.clone(),
        );
        registry.register(
            "shard_queue_depth",
            "Commands queued for this shard by other shards",
            metrics.queue_depth.clone(),
        );
        registry.register(
            "produce_bytes_in_flight",
            "Produce request bytes this shard admitted and has not answered yet (bounded by produce_bytes_in_flight_max)",
            metrics.produce_bytes_in_flight.clone(),
        );
        registry.register(
            "produce_admission_waits",
            "Produce requests that waited for the shard's produce bytes in flight to fall under its bound (their connection was not read meanwhile)",
            metrics.produce_admission_waits.clone(),
        );
        registry.register(
            "produce_admission_wait_seconds",
            "Seconds produce requests waited for admission, summed",
            metrics.produce_admission_wait_seconds.clone(),
        );
        registry.register(
            "disk_free_bytes",
            "Free disk space as the shard last measured it",
            metrics.disk_free_bytes.clone(),
        );
        registry.register(
            "disk_reserve_bytes",
            "Free space appends never use",
            metrics.disk_reserve_bytes.clone(),
        );
        registry.register(
            "tail_cache_bytes",
            "Bytes of recent batches cached in memory",
            metrics.tail_cache_bytes.clone(),
        );
        registry.register(
            "partitions",
            "Partitions owned by the shard",
            metrics.partitions.clone(),
        );
        registry.register(
            "replica_lag_records",
            "Over the partitions the shard leads: offsets not yet durable on a follower, summed over followers",
            metrics.replica_lag_records.clone(),
        );
        registry.register(
            "replica_leader_partitions",
            "Replicated partitions the shard leads",
            metrics.replica_leader_partitions.clone(),
        );
        registry.register(
            "broker_fenced",
            "Shard 0: 1 while the controller keeps this broker fenced (or it is not registered yet), 0 once unfenced",
            metrics.broker_fenced.clone(),
        );
        metrics
            .build_info
            .get_or_create(&VersionLabel {
                version: env!("CARGO_PKG_VERSION"),
            })
            .set(1);
        Arc::new(BrokerMetrics {
            registry,
            ..metrics
        })
    }

    /// Publishes a controller voter's state; the partition series only
    /// while it leads (the others' view is not the controller's).
    pub fn controller(&self, sample: &ControllerSample) {
        let label = NodeLabel { node: sample.node };
        let as_gauge = |value: u64| i64::try_from(value).unwrap_or(i64::MAX);
        self.controller_is_leader
            .get_or_create(&label)
            .set(i64::from(sample.is_leader));
        self.controller_leader_id
            .get_or_create(&label)
            .set(sample.leader.map_or(-1, i64::from));
        self.controller_term
            .get_or_create(&label)
            .set(as_gauge(sample.term));
        self.controller_commit_index
            .get_or_create(&label)
            .set(as_gauge(sample.commit_index));
        let series = [
            &self.partitions_offline,
            &self.partitions_under_replicated,
            &self.partitions_leaderless,
            &self.partitions_in_sync_unknown,
        ];
        match sample.health {
            Some(health) => {
                let values = [
                    health.offline,
                    health.under_replicated,
                    health.leaderless,
                    health.in_sync_unknown,
                ];
                for (family, value) in series.into_iter().zip(values) {
                    family.get_or_create(&label).set(as_gauge(value));
                }
            }
            None => {
                for family in series {
                    family.remove(&label);
                }
            }
        }
    }

    /// The handles shard `shard` records into.
    #[must_use]
    pub fn for_shard(self: &Arc<Self>, shard: u16) -> ShardMetrics {
        let label = ShardLabel { shard };
        ShardMetrics {
            shard,
            all: self.clone(),
            append_latency: self.append_latency.get_or_create_owned(&label),
            fsync_latency: self.fsync_latency.get_or_create_owned(&label),
            flushed_bytes: self.flushed_bytes.get_or_create_owned(&label),
            journal_bytes: self.journal_bytes.get_or_create_owned(&label),
            logs_fenced: self.logs_fenced.get_or_create_owned(&label),
            records_in: self.records_in.get_or_create_owned(&label),
            bytes_in: self.bytes_in.get_or_create_owned(&label),
            records_out: self.records_out.get_or_create_owned(&label),
            bytes_out: self.bytes_out.get_or_create_owned(&label),
            connections: self.connections.get_or_create_owned(&label),
            in_flight_requests: self.in_flight_requests.get_or_create_owned(&label),
            queue_depth: self.queue_depth.get_or_create_owned(&label),
            produce_bytes_in_flight: self.produce_bytes_in_flight.get_or_create_owned(&label),
            produce_admission_waits: self.produce_admission_waits.get_or_create_owned(&label),
            produce_admission_wait_seconds: self
                .produce_admission_wait_seconds
                .get_or_create_owned(&label),
            disk_free_bytes: self.disk_free_bytes.get_or_create_owned(&label),
            disk_reserve_bytes: self.disk_reserve_bytes.get_or_create_owned(&label),
            tail_cache_bytes: self.tail_cache_bytes.get_or_create_owned(&label),
            partitions: self.partitions.get_or_create_owned(&label),
            replica_lag_records: self.replica_lag_records.get_or_create_owned(&label),
            replica_leader_partitions: self.replica_leader_partitions.get_or_create_owned(&label),
            broker_fenced: self.broker_fenced.get_or_create_owned(&label),
            forwarded_produce: self.forwarded.get_or_create_owned(&ShardApiLabel {
                shard,
                api: "Produce",
            }),
            forwarded_fetch: self.forwarded.get_or_create_owned(&ShardApiLabel {
                shard,
                api: "Fetch",
            }),
            replication_frames: self.replication_frames.get_or_create_owned(&label),
            replication_frame_pushes: self.replication_frame_pushes.get_or_create_owned(&label),
            replication_pushes_refused: self.replication_pushes_refused.get_or_create_owned(&label),
        }
    }

    /// The registry in Prometheus text format (0.0.4; see [`exposition`]).
    #[must_use]
    pub fn encode(&self) -> String {
        let mut text = String::new();
        if prometheus_client::encoding::text::encode(&mut text, &self.registry).is_err() {
            text.clear();
        }
        exposition::to_prometheus_text(&text)
    }
}

/// One shard's metric handles.
#[derive(Clone, Debug)]
pub struct ShardMetrics {
    shard: u16,
    all: Arc<BrokerMetrics>,
    /// Produce: receipt to durable acknowledgement.
    pub append_latency: Histogram,
    /// One fdatasync'd write (journal commit or segment flush).
    pub fsync_latency: Histogram,
    /// Bytes written into segments.
    pub flushed_bytes: Counter,
    /// Bytes written to the shard journal.
    pub journal_bytes: Counter,
    /// Logs fenced after a failed write or fdatasync.
    pub logs_fenced: Counter,
    /// Records appended.
    pub records_in: Counter,
    /// Bytes appended.
    pub bytes_in: Counter,
    /// Records fetched.
    pub records_out: Counter,
    /// Bytes fetched.
    pub bytes_out: Counter,
    /// Open connections.
    pub connections: Gauge,
    /// Requests being handled.
    pub in_flight_requests: Gauge,
    /// Commands queued for this shard.
    pub queue_depth: Gauge,
    /// Produce bytes admitted and not answered yet.
    pub produce_bytes_in_flight: Gauge,
    /// Produce requests that waited for admission.
    pub produce_admission_waits: Counter,
    /// Seconds they waited, summed.
    pub produce_admission_wait_seconds: Counter<f64, AtomicU64>,
    /// Free disk space.
    pub disk_free_bytes: Gauge,
    /// The reserve.
    pub disk_reserve_bytes: Gauge,
    /// Tail cache occupancy.
    pub tail_cache_bytes: Gauge,
    /// Partitions owned.
    pub partitions: Gauge,
    /// Replication lag of the partitions led, in offsets.
    pub replica_lag_records: Gauge,
    /// Replicated partitions led.
    pub replica_leader_partitions: Gauge,
    /// Shard 0: whether the controller fences this broker.
    pub broker_fenced: Gauge,
    /// Produced batches forwarded to their owning shard.
    pub forwarded_produce: Counter,
    /// Fetched partitions forwarded to their owning shard.
    pub forwarded_fetch: Counter,
    /// Replication stream frames sent.
    pub replication_frames: Counter,
    /// Pushes carried by those frames.
    pub replication_frame_pushes: Counter,
    /// Pushes failed at once on a full stream queue.
    pub replication_pushes_refused: Counter,
}

impl ShardMetrics {
    /// The process's metrics, for series that are not per shard.
    #[must_use]
    pub fn all(&self) -> &BrokerMetrics {
        &self.all
    }

    /// Counts an error returned to a client.
    pub fn error(&self, code: ErrorCode) {
        if code != ErrorCode::None {
            self.all
                .errors
                .get_or_create(&ShardCodeLabel {
                    shard: self.shard,
                    code: code.name(),
                })
                .inc();
        }
    }

    /// Counts a connection the broker closed, by why.
    pub fn connection_closed(&self, reason: &'static str) {
        self.all
            .connections_closed
            .get_or_create(&ShardReasonLabel {
                shard: self.shard,
                reason,
            })
            .inc();
    }

    /// Counts an inter-broker request refused for want of the cluster
    /// secret.
    pub fn inter_broker_refused(&self, api: &'static str) {
        self.all
            .inter_broker_refused
            .get_or_create(&ShardApiLabel {
                shard: self.shard,
                api,
            })
            .inc();
    }

    /// Counts a throttle of `throttle` given for going over `entity`'s
    /// `kind` quota.
    pub fn throttled(&self, entity: String, kind: &'static str, throttle: Duration) {
        let label = ThrottleLabel {
            shard: self.shard,
            entity,
            kind,
        };
        self.all.throttled_requests.get_or_create(&label).inc();
        self.all
            .throttled_ms
            .get_or_create(&label)
            .inc_by(u64::try_from(throttle.as_millis()).unwrap_or(u64::MAX));
    }

    /// Counts an authentication exchange that ended, by `reason`.
    pub fn authentication(&self, reason: &'static str) {
        self.all
            .authentications
            .get_or_create(&ShardReasonLabel {
                shard: self.shard,
                reason,
            })
            .inc();
    }

    /// Publishes a group's generation as its coordinator sees it, and
    /// counts the rebalances since the last call (each makes a new
    /// generation). The first sighting on this shard (a coordinator that
    /// just loaded the group) is a baseline, not a rebalance.
    pub fn group_generation(&self, group: &str, generation: i32) {
        let label = GroupLabel {
            shard: self.shard,
            group: group.to_owned(),
        };
        let known = self
            .all
            .group_generation
            .get(&label)
            .map(|gauge| gauge.get());
        if let Some(known) = known {
            let new = i64::from(generation) - known;
            if new > 0 {
                self.all
                    .group_rebalances
                    .get_or_create(&label)
                    .inc_by(new.unsigned_abs());
            }
        } else {
            // Present from the start, so that rate() sees the first one.
            let _created = self.all.group_rebalances.get_or_create(&label);
        }
        self.all
            .group_generation
            .get_or_create(&label)
            .set(i64::from(generation));
    }

    /// Publishes the lag of every follower of the partitions this shard
    /// leads, and removes the series of those in `previous` (the samples
    /// of the last call, which the caller keeps) that are gone: a
    /// leadership that moved, a follower that left the replica set.
    pub fn follower_lags(&self, samples: &[FollowerLagSample], previous: &[FollowerLagSample]) {
        let label = |sample: &FollowerLagSample| FollowerLabel {
            shard: self.shard,
            topic: sample.topic.clone(),
            partition: sample.partition,
            follower: sample.follower,
        };
        let current: ahash::AHashSet<FollowerLabel> = samples.iter().map(label).collect();
        for gone in previous
            .iter()
            .map(label)
            .filter(|old| !current.contains(old))
        {
            self.all.follower_lag_records.remove(&gone);
            self.all.follower_lag_milliseconds.remove(&gone);
            self.all.follower_lag_bytes.remove(&gone);
            self.all.reassignment_bytes_copied.remove(&gone);
            self.all.reassignment_bytes_left.remove(&gone);
        }
        for sample in samples {
            let label = label(sample);
            match sample.learner_copied_bytes {
                Some(copied) => {
                    self.all
                        .reassignment_bytes_copied
                        .get_or_create(&label)
                        .set(i64::try_from(copied).unwrap_or(i64::MAX));
                    self.all
                        .reassignment_bytes_left
                        .get_or_create(&label)
                        .set(i64::try_from(sample.bytes).unwrap_or(i64::MAX));
                }
                // A learner that joined the set: its move's series go.
                None => {
                    self.all.reassignment_bytes_copied.remove(&label);
                    self.all.reassignment_bytes_left.remove(&label);
                }
            }
            self.all
                .follower_lag_records
                .get_or_create(&label)
                .set(i64::try_from(sample.records).unwrap_or(i64::MAX));
            self.all
                .follower_lag_milliseconds
                .get_or_create(&label)
                .set(i64::try_from(sample.milliseconds).unwrap_or(i64::MAX));
            self.all
                .follower_lag_bytes
                .get_or_create(&label)
                .set(i64::try_from(sample.bytes).unwrap_or(i64::MAX));
        }
    }

    /// Removes series of `group` this shard published: the lag of
    /// `partitions`, and with `whole_group` its generation and rebalances.
    /// For a group deleted, a partition whose offset is gone, or a
    /// coordinator that moved away: a series left behind would freeze at
    /// its last value beside the new coordinator's (and a lag alert fire
    /// after the group caught up).
    pub fn forget_group(&self, group: &str, partitions: &[(String, u32)], whole_group: bool) {
        let all = &self.all;
        for (topic, partition) in partitions {
            let label = GroupPartitionLabel {
                shard: self.shard,
                group: group.to_owned(),
                topic: topic.clone(),
                partition: *partition,
            };
            all.group_lag_records.remove(&label);
            all.group_lag_bytes.remove(&label);
            all.group_lag_seconds.remove(&label);
            all.group_retention_left_seconds.remove(&label);
        }
        if whole_group {
            let label = GroupLabel {
                shard: self.shard,
                group: group.to_owned(),
            };
            all.group_generation.remove(&label);
            all.group_rebalances.remove(&label);
        }
    }

    /// Publishes a group's lag on one partition. What is unknown is
    /// absent, never 0: everything when the partition's leader could not
    /// be asked (`known` false), the age when the first unconsumed record
    /// could not be read, retention-left when retention is unbounded.
    pub fn group_lag(
        &self,
        group: &str,
        lag: &corelog_wire::message::describe_groups::PartitionLag,
        known: bool,
    ) {
        let label = GroupPartitionLabel {
            shard: self.shard,
            group: group.to_owned(),
            topic: lag.topic.clone(),
            partition: lag.partition,
        };
        let all = &self.all;
        let set = |family: &Family<GroupPartitionLabel, Gauge>, value: Option<i64>| match value {
            Some(value) => {
                family.get_or_create(&label).set(value);
            }
            None => {
                family.remove(&label);
            }
        };
        let known_then = |value: i64| known.then_some(value);
        set(
            &all.group_lag_records,
            known_then(i64::try_from(lag.lag_records).unwrap_or(i64::MAX)),
        );
        set(
            &all.group_lag_bytes,
            known_then(i64::try_from(lag.lag_bytes).unwrap_or(i64::MAX)),
        );
        // Nothing unconsumed has no age: 0. Otherwise -1 means unread.
        let age_ms = if lag.lag_records == 0 {
            Some(0)
        } else {
            (lag.oldest_unconsumed_age_ms >= 0).then_some(lag.oldest_unconsumed_age_ms)
        };
        set(
            &all.group_lag_seconds,
            age_ms.filter(|_| known).map(|ms| ms / 1000),
        );
        set(
            &all.group_retention_left_seconds,
            (known && lag.retention_left_ms >= 0).then_some(lag.retention_left_ms / 1000),
        );
    }

    /// Counts a request of an API.
    pub fn request(&self, api: &'static str) {
        self.all
            .requests
            .get_or_create(&ShardApiLabel {
                shard: self.shard,
                api,
            })
            .inc();
    }
}

impl StreamObserver for ShardMetrics {
    fn on_frame(&self, pushes: usize, _bytes: usize) {
        self.replication_frames.inc();
        self.replication_frame_pushes.inc_by(pushes as u64);
    }

    fn on_push_refused(&self) {
        self.replication_pushes_refused.inc();
    }
}

impl StorageObserver for ShardMetrics {
    fn on_flush(&self, bytes: u64, elapsed: Duration) {
        self.fsync_latency.observe(elapsed.as_secs_f64());
        self.flushed_bytes.inc_by(bytes);
    }

    fn on_journal_commit(&self, _data_bytes: u64, written_bytes: u64, elapsed: Duration) {
        self.fsync_latency.observe(elapsed.as_secs_f64());
        self.journal_bytes.inc_by(written_bytes);
    }

    fn on_fenced(&self, _dir: &std::path::Path, _error: &corelog_storage::StorageError) {
        self.logs_fenced.inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_record_separately_under_their_label() {
        let metrics = BrokerMetrics::new();
        let zero = metrics.for_shard(0);
        let one = metrics.for_shard(1);
        zero.records_in.inc_by(5);
        one.records_in.inc_by(7);
        one.error(ErrorCode::DiskFull);
        zero.append_latency.observe(0.002);
        let text = metrics.encode();
        assert!(
            text.contains("corelog_records_in_total{shard=\"0\"} 5"),
            "{text}"
        );
        assert!(
            text.contains("corelog_records_in_total{shard=\"1\"} 7"),
            "{text}"
        );
        assert!(
            text.contains("corelog_errors_total{shard=\"1\",code=\"DISK_FULL\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("corelog_append_latency_seconds_count{shard=\"0\"} 1"),
            "{text}"
        );
    }
}
