//! The topic catalog: which topics exist, their partitions and settings.
//!
//! On a single node the catalog is the metadata authority, kept by shard 0
//! and persisted by [`super::store`]; the replicated controller replaces it
//! in a cluster. This type is pure: every change is a method that checks
//! its input and returns a typed error.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::topic_config::TopicConfig;

/// Longest topic name.
pub const TOPIC_NAME_BYTES_MAX: usize = 249;
/// Most partitions one topic may have.
pub const PARTITIONS_MAX: u32 = 10_000;

/// One topic.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicRecord {
    /// Never reused, so a re-created topic is distinguishable.
    pub id: u64,
    /// Name.
    pub name: String,
    /// Partition count.
    pub partitions: u32,
    /// Settings.
    pub config: TopicConfig,
    /// Creation time.
    pub created_at_ms: i64,
}

/// All topics, with a version bumped by every change.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Catalog {
    /// Bumped by every change; shards apply snapshots in version order.
    pub version: u64,
    /// Topics by name.
    pub topics: BTreeMap<String, TopicRecord>,
    /// Next topic id.
    pub next_topic_id: u64,
}

/// Why a catalog change was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CatalogError {
    /// The name is not usable.
    #[error("invalid topic name {name:?}: {reason}")]
    InvalidName {
        /// The name.
        name: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A topic with the name exists.
    #[error("topic {0:?} already exists")]
    AlreadyExists(String),
    /// No topic with the name.
    #[error("topic {0:?} does not exist")]
    Unknown(String),
    /// Partition count out of range.
    #[error("partition count {0} must be between 1 and {PARTITIONS_MAX}")]
    InvalidPartitions(u32),
    /// Replication factor not available.
    #[error("replication factor {requested} is not possible with {brokers} broker(s)")]
    InvalidReplicationFactor {
        /// Asked for.
        requested: u16,
        /// Brokers in the cluster.
        brokers: u16,
    },
}

/// Checks a topic name: 1–249 of `[a-zA-Z0-9._-]`, not `.` or `..`, not
/// starting with `__` (reserved for internal topics).
///
/// # Errors
/// [`CatalogError::InvalidName`] with the reason.
pub fn validate_topic_name(name: &str) -> Result<(), CatalogError> {
    let invalid = |reason| {
        Err(CatalogError::InvalidName {
            name: name.to_owned(),
            reason,
        })
    };
    if name.is_empty() || name.len() > TOPIC_NAME_BYTES_MAX {
        return invalid("must be 1 to 249 characters");
    }
    if name == "." || name == ".." {
        return invalid("must not be . or ..");
    }
    if !name
        .bytes()
        .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'_' | b'-'))
    {
        return invalid("may contain only letters, digits, '.', '_' and '-'");
    }
    if name.starts_with("__") {
        return invalid("names starting with __ are reserved for internal topics");
    }
    Ok(())
}

impl Catalog {
    /// Adds a topic.
    ///
    /// # Errors
    /// A [`CatalogError`] when the name, partition count or replication
    /// factor is not acceptable, or the topic exists.
    pub fn create_topic(
        &mut self,
        name: &str,
        partitions: u32,
        replication_factor: u16,
        brokers: u16,
        config: TopicConfig,
        now_ms: i64,
    ) -> Result<&TopicRecord, CatalogError> {
        validate_topic_name(name)?;
        if partitions == 0 || partitions > PARTITIONS_MAX {
            return Err(CatalogError::InvalidPartitions(partitions));
        }
        // 0 asks for the default: one replica on a standalone broker.
        let replication_factor = replication_factor.max(1);
        if replication_factor > brokers {
            return Err(CatalogError::InvalidReplicationFactor {
                requested: replication_factor,
                brokers,
            });
        }
        if self.topics.contains_key(name) {
            return Err(CatalogError::AlreadyExists(name.to_owned()));
        }
        let id = self.next_topic_id;
        self.next_topic_id += 1;
        self.version += 1;
        let record = TopicRecord {
            id,
            name: name.to_owned(),
            partitions,
            config,
            created_at_ms: now_ms,
        };
        Ok(self.topics.entry(name.to_owned()).or_insert(record))
    }

    /// Adds an internal topic (a name starting with `__`), unless it exists.
    /// Returns whether it was added.
    ///
    /// # Panics
    /// If the name is not an internal one: only the broker creates these.
    pub fn ensure_internal_topic(
        &mut self,
        name: &str,
        partitions: u32,
        config: TopicConfig,
        now_ms: i64,
    ) -> bool {
        assert!(name.starts_with("__"), "internal topics start with __");
        if self.topics.contains_key(name) {
            return false;
        }
        let id = self.next_topic_id;
        self.next_topic_id += 1;
        self.version += 1;
        self.topics.insert(
            name.to_owned(),
            TopicRecord {
                id,
                name: name.to_owned(),
                partitions,
                config,
                created_at_ms: now_ms,
            },
        );
        true
    }

    /// Removes a topic.
    ///
    /// # Errors
    /// [`CatalogError::Unknown`] if there is no such topic.
    pub fn delete_topic(&mut self, name: &str) -> Result<TopicRecord, CatalogError> {
        let removed = self
            .topics
            .remove(name)
            .ok_or_else(|| CatalogError::Unknown(name.to_owned()))?;
        self.version += 1;
        Ok(removed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metadata::topic_config::CleanupPolicy;

    fn config() -> TopicConfig {
        TopicConfig {
            retention_ms: None,
            retention_bytes: None,
            segment_bytes: 1 << 30,
            segment_ms: 1000,
            max_message_bytes: 1 << 20,
            cleanup_policy: CleanupPolicy::Delete,
        }
    }

    #[test]
    fn topics_are_created_once_and_ids_never_reused() {
        let mut catalog = Catalog::default();
        let first = catalog
            .create_topic("orders", 16, 1, 1, config(), 0)
            .unwrap()
            .id;
        assert_eq!(
            catalog.create_topic("orders", 16, 1, 1, config(), 0),
            Err(CatalogError::AlreadyExists("orders".to_owned()))
        );
        catalog.delete_topic("orders").unwrap();
        let second = catalog
            .create_topic("orders", 4, 1, 1, config(), 0)
            .unwrap()
            .id;
        assert_ne!(first, second);
        assert_eq!(catalog.version, 3);
    }

    #[test]
    fn bad_requests_are_refused() {
        let mut catalog = Catalog::default();
        for name in ["", ".", "..", "a/b", "__groups", &"x".repeat(250)] {
            assert!(
                catalog.create_topic(name, 1, 1, 1, config(), 0).is_err(),
                "{name:?}"
            );
        }
        assert_eq!(
            catalog.create_topic("t", 0, 1, 1, config(), 0),
            Err(CatalogError::InvalidPartitions(0))
        );
        assert!(matches!(
            catalog.create_topic("t", 1, 3, 1, config(), 0),
            Err(CatalogError::InvalidReplicationFactor { .. })
        ));
        assert_eq!(
            catalog.delete_topic("t"),
            Err(CatalogError::Unknown("t".to_owned()))
        );
    }
}
