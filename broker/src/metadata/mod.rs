//! Node metadata: the topic catalog (the single-node metadata authority
//! until the replicated controller takes over), its persistence, topic
//! settings, and the immutable snapshots shards work from.

pub mod catalog;
pub mod snapshot;
pub mod store;
pub mod topic_config;

pub use catalog::{Catalog, CatalogError, TopicRecord};
pub use snapshot::{MetadataSnapshot, PartitionView, ShardId, TopicView};
pub use topic_config::{CleanupPolicy, TopicConfig};
