//! Node metadata as shards see it: immutable snapshots of the controller's
//! metadata, and the storage settings a topic's settings produce. The
//! metadata itself (topics, replica sets, leaders) lives in the controller
//! (`corelog_controller`), on a single node as in a cluster.

pub mod snapshot;
pub mod topic_config;

pub use corelog_controller::{CleanupPolicy, TopicConfig};
pub use snapshot::{
    ClusterView, MetadataSnapshot, PartitionView, ReplicationView, ShardId, TopicRecord, TopicView,
};

/// Directory of one topic: `<data_dir>/topics/<name>.<id>`. The id keeps a
/// re-created topic from ever reading its predecessor's files.
#[must_use]
pub fn topic_dir(data_dir: &std::path::Path, name: &str, topic_id: u64) -> std::path::PathBuf {
    data_dir.join("topics").join(format!("{name}.{topic_id}"))
}
