//! The metadata authority of a single node, run by shard 0: it changes the
//! topic catalog, persists it before anyone sees the change, builds the
//! next snapshot and hands out producer ids. The replicated controller
//! takes this role in a cluster.

use std::cell::{Cell, RefCell};
use std::path::PathBuf;
use std::sync::Arc;

use corelog_wire::error::ErrorCode;

use super::command::{TopicOutcome, TopicToCreate};
use crate::metadata::store::{self, NodeMetadata};
use crate::metadata::{CatalogError, MetadataSnapshot};
use crate::partition::PartitionError;
use crate::storage::StorageError;
use crate::storage::glommio_disk::GlommioDisk;

/// Producer ids reserved per metadata write: ids below the persisted block
/// end may have been handed out, so a restart starts after it.
const PRODUCER_ID_BLOCK: i64 = 1024;

/// A topic the broker itself creates at start-up.
#[derive(Clone, Copy, Debug)]
pub struct InternalTopic {
    /// Its name (starting with `__`).
    pub name: &'static str,
    /// Partitions, fixed at creation.
    pub partitions: u32,
    /// Settings.
    pub config: crate::metadata::TopicConfig,
}

/// Shard 0's metadata authority.
#[derive(Debug)]
pub struct MetadataAuthority {
    disk: GlommioDisk,
    data_dir: PathBuf,
    shard_count: u16,
    metadata: RefCell<NodeMetadata>,
    snapshot: RefCell<Arc<MetadataSnapshot>>,
    next_producer_id: Cell<i64>,
    /// Serialises changes: each is persisted before the next starts.
    changing: async_lock::Mutex<()>,
}

impl From<CatalogError> for PartitionError {
    fn from(error: CatalogError) -> Self {
        let code = match &error {
            CatalogError::InvalidName { .. } => ErrorCode::InvalidTopicName,
            CatalogError::AlreadyExists(_) => ErrorCode::TopicAlreadyExists,
            CatalogError::Unknown(_) => ErrorCode::UnknownTopicOrPartition,
            CatalogError::InvalidPartitions(_) => ErrorCode::InvalidPartitions,
            CatalogError::InvalidReplicationFactor { .. } => ErrorCode::InvalidReplicationFactor,
        };
        PartitionError::new(code, error.to_string())
    }
}

impl MetadataAuthority {
    /// Loads the node's metadata from `data_dir`.
    ///
    /// # Errors
    /// [`StorageError`] when the metadata file is damaged or unreadable.
    pub async fn load(
        disk: GlommioDisk,
        data_dir: PathBuf,
        shard_count: u16,
        internal: &[InternalTopic],
        now_ms: i64,
    ) -> Result<Self, StorageError> {
        let mut metadata = store::load(&disk, &data_dir).await?;
        let mut created = false;
        for topic in internal {
            created |= metadata.catalog.ensure_internal_topic(
                topic.name,
                topic.partitions,
                topic.config,
                now_ms,
            );
        }
        if created {
            store::store(&disk, &data_dir, &metadata).await?;
        }
        let snapshot =
            MetadataSnapshot::build(&metadata.catalog, shard_count, &MetadataSnapshot::default());
        Ok(MetadataAuthority {
            disk,
            data_dir,
            shard_count,
            next_producer_id: Cell::new(metadata.producer_id_block_end),
            metadata: RefCell::new(metadata),
            snapshot: RefCell::new(Arc::new(snapshot)),
            changing: async_lock::Mutex::new(()),
        })
    }

    /// The current snapshot.
    #[must_use]
    pub fn snapshot(&self) -> Arc<MetadataSnapshot> {
        self.snapshot.borrow().clone()
    }

    /// Creates topics; returns one outcome per topic and, if anything
    /// changed, the new snapshot to broadcast (already persisted).
    pub async fn create_topics(
        &self,
        topics: Vec<TopicToCreate>,
        validate_only: bool,
        now_ms: i64,
    ) -> (Vec<TopicOutcome>, Option<Arc<MetadataSnapshot>>) {
        let _changing = self.changing.lock().await;
        let mut next = self.metadata.borrow().clone();
        let outcomes: Vec<TopicOutcome> = topics
            .into_iter()
            .map(|topic| {
                let result = next
                    .catalog
                    .create_topic(
                        &topic.name,
                        topic.partitions,
                        topic.replication_factor,
                        1,
                        topic.config,
                        now_ms,
                    )
                    .map(drop)
                    .map_err(PartitionError::from);
                TopicOutcome {
                    name: topic.name,
                    result,
                }
            })
            .collect();
        let changed = outcomes.iter().any(|outcome| outcome.result.is_ok());
        if validate_only || !changed {
            return (outcomes, None);
        }
        match self.commit(next).await {
            Ok(snapshot) => (outcomes, Some(snapshot)),
            Err(error) => (fail_all(outcomes, &error), None),
        }
    }

    /// Deletes topics; as [`MetadataAuthority::create_topics`].
    pub async fn delete_topics(
        &self,
        names: Vec<String>,
    ) -> (Vec<TopicOutcome>, Option<Arc<MetadataSnapshot>>) {
        let _changing = self.changing.lock().await;
        let mut next = self.metadata.borrow().clone();
        let outcomes: Vec<TopicOutcome> = names
            .into_iter()
            .map(|name| {
                let result = next
                    .catalog
                    .delete_topic(&name)
                    .map(drop)
                    .map_err(PartitionError::from);
                TopicOutcome { name, result }
            })
            .collect();
        if !outcomes.iter().any(|outcome| outcome.result.is_ok()) {
            return (outcomes, None);
        }
        match self.commit(next).await {
            Ok(snapshot) => (outcomes, Some(snapshot)),
            Err(error) => (fail_all(outcomes, &error), None),
        }
    }

    /// Persists `next`, then makes it current and returns its snapshot.
    async fn commit(&self, next: NodeMetadata) -> Result<Arc<MetadataSnapshot>, StorageError> {
        store::store(&self.disk, &self.data_dir, &next).await?;
        let snapshot = Arc::new(MetadataSnapshot::build(
            &next.catalog,
            self.shard_count,
            &self.snapshot.borrow(),
        ));
        *self.metadata.borrow_mut() = next;
        *self.snapshot.borrow_mut() = snapshot.clone();
        Ok(snapshot)
    }

    /// A new producer id with epoch 0, or the same id with the next epoch.
    ///
    /// # Errors
    /// `STORAGE_ERROR` when the next id block cannot be persisted.
    pub async fn init_producer_id(
        &self,
        producer_id: i64,
        producer_epoch: i16,
    ) -> Result<(i64, i16), PartitionError> {
        if (0..self.next_producer_id.get()).contains(&producer_id)
            && (0..i16::MAX).contains(&producer_epoch)
        {
            return Ok((producer_id, producer_epoch + 1));
        }
        let _changing = self.changing.lock().await;
        let id = self.next_producer_id.get();
        if id >= self.metadata.borrow().producer_id_block_end {
            let mut next = self.metadata.borrow().clone();
            next.producer_id_block_end = id + PRODUCER_ID_BLOCK;
            store::store(&self.disk, &self.data_dir, &next)
                .await
                .map_err(PartitionError::from)?;
            *self.metadata.borrow_mut() = next;
        }
        self.next_producer_id.set(id + 1);
        Ok((id, 0))
    }

    /// The data directory.
    #[must_use]
    pub fn data_dir(&self) -> &PathBuf {
        &self.data_dir
    }
}

fn fail_all(outcomes: Vec<TopicOutcome>, error: &StorageError) -> Vec<TopicOutcome> {
    outcomes
        .into_iter()
        .map(|outcome| TopicOutcome {
            result: outcome.result.and(Err(PartitionError::new(
                ErrorCode::StorageError,
                error.to_string(),
            ))),
            ..outcome
        })
        .collect()
}
