//! The native corelog client: a producer, a consumer, consumer groups and an
//! admin client on tokio. The `corelog` command-line tool and the `verify`
//! history checker are built on it in their own crate, `corelog-cli`.
//!
//! ```no_run
//! use corelog_client::{
//!     Admin, ClientConfig, Consumer, ConsumerConfig, NewTopic, Producer, ProducerConfig,
//!     ProducerRecord, StartFrom,
//! };
//!
//! # async fn example() -> Result<(), corelog_client::ClientError> {
//! let bootstrap = "127.0.0.1:7100";
//! Admin::connect(ClientConfig::new(bootstrap))
//!     .await?
//!     .create_topic(NewTopic::new("orders", 3))
//!     .await?;
//!
//! let producer = Producer::connect(ProducerConfig::new(bootstrap)).await?;
//! let delivery = producer
//!     .send(ProducerRecord::new("orders", "paid").key("customer42"))
//!     .await?
//!     .await?;
//! println!("partition {} offset {}", delivery.partition, delivery.offset);
//! producer.close().await?;
//!
//! let mut consumer = Consumer::connect(ConsumerConfig::new(bootstrap)).await?;
//! consumer.assign_topic("orders", StartFrom::Earliest).await?;
//! let polled = consumer.poll().await?;
//! for record in polled.records {
//!     println!("{}@{}: {:?}", record.partition, record.offset, record.value);
//! }
//! # Ok(())
//! # }
//! ```
//!
//! # What the client promises
//!
//! - A delivery resolves only after the broker acknowledged the record
//!   under the requested `acks` (C1); the offset it carries is the record's.
//! - Keyed records go to `xxh3_64(key) % partition_count`
//!   ([`partition_for_key`], frozen forever: C3), and records sent from one
//!   task to one partition keep their order, retries included.
//! - With idempotence (the default) a retry never duplicates a record (C5):
//!   it resends the same batch bytes under the same sequence.
//! - Memory is bounded (C9): the producer's buffer by `buffer_bytes`,
//!   requests in flight per connection, fetch sizes, and response frames
//!   (refused from their header when too large).
//! - A consumer never skips records silently: batches failing their CRC are
//!   errors, and a position deleted by retention is either an error or an
//!   explicit [`Notice::OffsetReset`] (C7).
//! - Every record carries its payload schema version (C12).
//!
//! # Modules
//!
//! - [`producer`] — batching, partitioning, idempotent retries.
//! - [`consumer`] — assignment, positions, long-poll fetch, gap policy.
//! - [`group`] — consumer groups: membership, committed offsets, the
//!   offset tracker, the poison policy.
//! - [`admin`] — topics, groups, offset resets and the audit log.
//! - [`error`] — [`ClientError`].
//!
//! Network code is in `connection` (one broker connection with pipelining)
//! and `cluster` (connection pool and metadata cache, shared by the three
//! clients).

pub mod admin;
mod cluster;
mod config;
mod connection;
pub mod consumer;
pub mod error;
mod gap;
pub mod group;
mod metadata;
pub mod producer;
mod sasl;
mod throttle;
mod tls;

pub use corelog_wire::acl::{Operation, PatternType, Permission, ResourceType};
pub use corelog_wire::batch::{Compression, Header, SchemaVersion};
pub use corelog_wire::error::ErrorCode;
pub use corelog_wire::message::list_offsets::OffsetSpec;
pub use corelog_wire::message::produce::Acks;
pub use corelog_wire::types::{Offset, TimestampMs};

pub use self::admin::{Admin, NewTopic, PartitionState, TopicDescription, validate_topic_name};
pub use self::config::{ClientConfig, DEFAULT_BOOTSTRAP};
pub use self::consumer::{
    Consumer, ConsumerConfig, ConsumerRecord, DeletedRange, DeletionCause, GapInfo, Notice,
    OffsetOutOfRangePolicy, Polled, StartFrom,
};
pub use self::error::ClientError;
pub use self::group::{
    Completer, GroupConfig, GroupConsumer, GroupEvent, GroupPolled, OffsetTracker, PoisonAction,
    PoisonPolicy, TopicPartition,
};
pub use self::metadata::{BrokerMetadata, ClusterMetadata, PartitionMetadata, TopicMetadata};
pub use self::producer::{
    Delivery, DeliveryFuture, Producer, ProducerConfig, ProducerRecord, partition_for_key,
};
pub use self::sasl::{SaslCredentials, ScramMechanism};
pub use self::throttle::ThrottleStats;
pub use self::tls::ClientTls;
