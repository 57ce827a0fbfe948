//! Administration: topics (create, delete, describe, list) here, and
//! groups (list, describe with lag, delete, audited offset resets, manual
//! offsets, the audit log) in [`groups`](self#groups).
//!
//! ```no_run
//! use corelog_client::{Admin, ClientConfig, NewTopic};
//!
//! # async fn example() -> Result<(), corelog_client::ClientError> {
//! let admin = Admin::connect(ClientConfig::new("127.0.0.1:7100")).await?;
//! admin
//!     .create_topic(NewTopic::new("orders", 3).config("retention.ms", "604800000"))
//!     .await?;
//! let description = admin.describe_topic("orders").await?;
//! for state in &description.partition_states {
//!     println!("partition {} holds {}..{}", state.partition, state.log_start_offset, state.high_watermark);
//! }
//! admin.delete_topic("orders").await?;
//! # Ok(())
//! # }
//! ```
//!
//! Topic requests go to any broker; with replication they will go to the
//! controller (the metadata names it). Group requests go to the group's
//! coordinator.
//!
//! # Groups
//!
//! See the methods [`Admin::list_groups`], [`Admin::describe_group`],
//! [`Admin::delete_group`], [`Admin::reset_offsets`],
//! [`Admin::fetch_offsets`], [`Admin::commit_offsets`] and
//! [`Admin::read_audit`].

mod acls;
mod cluster_status;
mod groups;
mod leadership;
mod offset_deletion;
mod quotas;
mod reassignment;
mod users;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use corelog_wire::message::ConfigEntry;
use corelog_wire::message::create_topics::{CreatableTopic, CreateTopicsRequest};
use corelog_wire::message::delete_topics::DeleteTopicsRequest;
use corelog_wire::message::describe_topics::{ArchivedTopicDescription, DescribeTopicsRequest};
use corelog_wire::message::list_offsets::OffsetSpec;
use corelog_wire::topic::check_topic_name;
use corelog_wire::types::Offset;
use serde::Serialize;

use crate::cluster::Cluster;
use crate::config::ClientConfig;
use crate::error::ClientError;
use crate::metadata::{ClusterMetadata, TopicMetadata};

pub use self::acls::{AclFilter, AclRule};
pub use self::cluster_status::{
    BrokerState, ClusterStatus, ControllerState, DecommissionState, PartitionHealth, PartitionMove,
    PartitionStatus, Problem, TopicStatus,
};
pub use self::groups::{
    AUDIT_READ_MAX, AuditLogEntry, GroupDescription, GroupList, GroupListing, MemberDescription,
    PartitionLag, PartitionOffset, PartitionReset, ResetOffsets, ResetOutcome, ResetTarget,
    UnansweredBroker,
};
pub use self::leadership::{LEADERSHIP_CHANGE_TIMEOUT, Leadership};
pub use self::offset_deletion::{DeleteOffsets, DeleteOffsetsOutcome, OffsetDeleted};
pub use self::quotas::Quota;
pub use self::reassignment::{DEFAULT_DECOMMISSION_MOVES, LearnerProgress, ReassignmentProgress};
pub use self::users::{DEFAULT_ITERATIONS, UserListing};

/// How long the broker may take to commit a topic creation or deletion
/// before answering `REQUEST_TIMED_OUT` (sent in the request).
const ADMIN_TIMEOUT: Duration = Duration::from_secs(20);

/// Longest topic name, as the broker enforces it.
pub use corelog_wire::topic::TOPIC_NAME_BYTES_MAX;

/// Checks the name of a topic to create (or to write to) by the broker's
/// own rule, [`corelog_wire::topic::check_topic_name`]: 1 to 249
/// characters from `[a-zA-Z0-9._-]`, neither `.` nor `..`, and not starting
/// with `__` (reserved for the broker's internal topics, which no client
/// creates or writes). A bad name fails here, before anything is sent,
/// with the reason the controller would give.
///
/// # Errors
/// [`ClientError::InvalidArgument`] saying what is wrong.
pub fn validate_topic_name(name: &str) -> Result<(), ClientError> {
    check_topic_name(name, false).map_err(|error| ClientError::InvalidArgument(error.to_string()))
}

/// A topic to create.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewTopic {
    /// Name.
    pub name: String,
    /// Partition count, at least 1.
    pub partitions: u32,
    /// Replicas per partition; 0 (the default) lets the broker choose: 1 on
    /// a single node, 3 in a cluster of three or more brokers.
    pub replication_factor: u16,
    /// Settings that differ from the broker's defaults: `retention.ms`,
    /// `retention.bytes` (-1 = unlimited), `segment.bytes`, `segment.ms`,
    /// `max.message.bytes`, `cleanup.policy`.
    pub configs: BTreeMap<String, String>,
}

impl NewTopic {
    /// A topic with `partitions` partitions, the broker's default
    /// replication factor and default settings.
    #[must_use]
    pub fn new(name: impl Into<String>, partitions: u32) -> NewTopic {
        NewTopic {
            name: name.into(),
            partitions,
            replication_factor: 0,
            configs: BTreeMap::new(),
        }
    }

    /// Sets one configuration value.
    #[must_use]
    pub fn config(mut self, key: impl Into<String>, value: impl Into<String>) -> NewTopic {
        self.configs.insert(key.into(), value.into());
        self
    }

    /// Sets the replication factor.
    #[must_use]
    pub fn replication_factor(mut self, replication_factor: u16) -> NewTopic {
        self.replication_factor = replication_factor;
        self
    }
}

/// Log positions of one partition, as its leader sees them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PartitionState {
    /// Partition index.
    pub partition: u32,
    /// First offset still stored.
    pub log_start_offset: u64,
    /// One past the last committed offset: what readers can see.
    pub high_watermark: u64,
    /// One past the last offset written to the leader's log.
    pub log_end_offset: u64,
    /// Bytes stored.
    pub size_bytes: u64,
    /// Segments stored.
    pub segment_count: u32,
}

/// A topic's configuration and log positions.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TopicDescription {
    /// Name.
    pub name: String,
    /// Partition count.
    pub partitions: u32,
    /// Replicas per partition.
    pub replication_factor: u16,
    /// Effective settings.
    pub configs: BTreeMap<String, String>,
    /// Per-partition positions.
    pub partition_states: Vec<PartitionState>,
}

impl TopicDescription {
    fn from_archived(topic: &ArchivedTopicDescription) -> TopicDescription {
        let mut partition_states: Vec<PartitionState> = topic
            .partition_states
            .iter()
            .map(|state| PartitionState {
                partition: state.partition.to_native(),
                log_start_offset: state.log_start_offset.to_native(),
                high_watermark: state.high_watermark.to_native(),
                log_end_offset: state.log_end_offset.to_native(),
                size_bytes: state.size_bytes.to_native(),
                segment_count: state.segment_count.to_native(),
            })
            .collect();
        partition_states.sort_by_key(|state| state.partition);
        TopicDescription {
            name: topic.name.to_string(),
            partitions: topic.partitions.to_native(),
            replication_factor: topic.replication_factor.to_native(),
            configs: topic
                .configs
                .iter()
                .map(|entry| (entry.key.to_string(), entry.value.to_string()))
                .collect(),
            partition_states,
        }
    }
}

/// The administrative client.
#[derive(Clone)]
pub struct Admin {
    cluster: Arc<Cluster>,
}

impl std::fmt::Debug for Admin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admin").finish_non_exhaustive()
    }
}

impl Admin {
    /// Connects to the cluster.
    ///
    /// # Errors
    /// [`ClientError::InvalidConfig`] or connection errors.
    pub async fn connect(config: ClientConfig) -> Result<Admin, ClientError> {
        Ok(Admin {
            cluster: Cluster::connect(config).await?,
        })
    }

    /// Creates one topic.
    ///
    /// # Errors
    /// [`ClientError::InvalidArgument`] for a bad name or partition count;
    /// the broker's refusal (`TOPIC_ALREADY_EXISTS`, `INVALID_CONFIG`, …).
    pub async fn create_topic(&self, topic: NewTopic) -> Result<(), ClientError> {
        let name = topic.name.clone();
        self.create_topics(vec![topic], false)
            .await?
            .into_iter()
            .next()
            .map_or_else(
                || Err(missing_result("CreateTopics", &name)),
                |(_, result)| result,
            )
    }

    /// Creates topics (or only checks the request, with `validate_only`),
    /// and returns each topic's outcome in request order.
    ///
    /// # Errors
    /// [`ClientError::InvalidArgument`] before sending anything if a name
    /// or partition count is invalid; connection errors and top-level
    /// refusals.
    pub async fn create_topics(
        &self,
        topics: Vec<NewTopic>,
        validate_only: bool,
    ) -> Result<Vec<(String, Result<(), ClientError>)>, ClientError> {
        for topic in &topics {
            validate_topic_name(&topic.name)?;
            if topic.partitions == 0 {
                return Err(ClientError::InvalidArgument(format!(
                    "topic {} needs at least one partition",
                    topic.name
                )));
            }
        }
        let names: Vec<String> = topics.iter().map(|topic| topic.name.clone()).collect();
        let request = CreateTopicsRequest {
            topics: topics
                .into_iter()
                .map(|topic| CreatableTopic {
                    name: topic.name,
                    partitions: topic.partitions,
                    replication_factor: topic.replication_factor,
                    configs: topic
                        .configs
                        .into_iter()
                        .map(|(key, value)| ConfigEntry { key, value })
                        .collect(),
                })
                .collect(),
            timeout_ms: timeout_ms(),
            validate_only,
        };
        let connection = self.cluster.any_connection().await?;
        let reply = connection.call(&request, Vec::new(), ADMIN_TIMEOUT).await?;
        let (response, _) = reply.decode()?;
        let results: Vec<(String, u16, Option<String>)> = response
            .results
            .iter()
            .map(|result| {
                (
                    result.name.to_string(),
                    result.error_code.to_native(),
                    result.message.as_ref().map(|m| m.to_string()),
                )
            })
            .collect();
        Ok(per_topic(&names, &results, "create topic"))
    }

    /// Deletes one topic and its data.
    ///
    /// # Errors
    /// The broker's refusal (`UNKNOWN_TOPIC_OR_PARTITION`, …); connection
    /// errors.
    pub async fn delete_topic(&self, name: &str) -> Result<(), ClientError> {
        self.delete_topics(&[name.to_owned()])
            .await?
            .into_iter()
            .next()
            .map_or_else(
                || Err(missing_result("DeleteTopics", name)),
                |(_, result)| result,
            )
    }

    /// Deletes topics and returns each topic's outcome in request order.
    ///
    /// # Errors
    /// Connection errors and top-level refusals.
    pub async fn delete_topics(
        &self,
        names: &[String],
    ) -> Result<Vec<(String, Result<(), ClientError>)>, ClientError> {
        let request = DeleteTopicsRequest {
            names: names.to_vec(),
            timeout_ms: timeout_ms(),
        };
        let connection = self.cluster.any_connection().await?;
        let reply = connection.call(&request, Vec::new(), ADMIN_TIMEOUT).await?;
        let (response, _) = reply.decode()?;
        let results: Vec<(String, u16, Option<String>)> = response
            .results
            .iter()
            .map(|result| {
                (
                    result.name.to_string(),
                    result.error_code.to_native(),
                    result.message.as_ref().map(|m| m.to_string()),
                )
            })
            .collect();
        Ok(per_topic(names, &results, "delete topic"))
    }

    /// Describes one topic.
    ///
    /// # Errors
    /// `UNKNOWN_TOPIC_OR_PARTITION` if it does not exist; connection errors.
    pub async fn describe_topic(&self, name: &str) -> Result<TopicDescription, ClientError> {
        self.describe_topics(&[name.to_owned()])
            .await?
            .into_iter()
            .find(|(topic, _)| topic == name)
            .map_or_else(
                || Err(missing_result("DescribeTopics", name)),
                |(_, result)| result,
            )
    }

    /// Describes topics (every topic, for an empty list), each with its own
    /// outcome.
    ///
    /// # Errors
    /// Connection errors and top-level refusals.
    pub async fn describe_topics(
        &self,
        names: &[String],
    ) -> Result<Vec<(String, Result<TopicDescription, ClientError>)>, ClientError> {
        let connection = self.cluster.any_connection().await?;
        describe_topics_on(&connection, names).await
    }

    /// Describes `topic` as broker `node` holds it: its own replica's log
    /// when it has one, else the leader's bounds.
    ///
    /// # Errors
    /// As [`Admin::describe_topic`]; connection errors to `node`.
    pub(crate) async fn describe_topic_on(
        &self,
        node: u32,
        topic: &str,
    ) -> Result<TopicDescription, ClientError> {
        let connection = self.cluster.connection_to(node).await?;
        describe_topics_on(&connection, &[topic.to_owned()])
            .await?
            .into_iter()
            .find(|(name, _)| name == topic)
            .map_or_else(
                || Err(missing_result("DescribeTopics", topic)),
                |(_, result)| result,
            )
    }

    /// Every topic, with its partitions and leaders, sorted by name.
    ///
    /// # Errors
    /// Connection errors.
    pub async fn list_topics(&self) -> Result<Vec<TopicMetadata>, ClientError> {
        Ok(self.metadata().await?.topics.into_values().collect())
    }

    /// The cluster's brokers and every topic.
    ///
    /// # Errors
    /// Connection errors.
    pub async fn metadata(&self) -> Result<ClusterMetadata, ClientError> {
        self.cluster.fetch_metadata(None).await
    }

    /// Looks up an offset of a partition: the log start
    /// ([`OffsetSpec::Earliest`]), the high watermark
    /// ([`OffsetSpec::Latest`]), or the first offset at or after a time
    /// (`None` if there is no such record).
    ///
    /// # Errors
    /// Leader, connection and broker errors.
    pub async fn list_offset(
        &self,
        topic: &str,
        partition: u32,
        spec: OffsetSpec,
    ) -> Result<Option<Offset>, ClientError> {
        self.cluster.list_offset(topic, partition, spec).await
    }
}

fn timeout_ms() -> u32 {
    u32::try_from(ADMIN_TIMEOUT.as_millis()).unwrap_or(u32::MAX)
}

fn missing_result(api: &str, name: &str) -> ClientError {
    ClientError::Protocol {
        addr: String::new(),
        detail: format!("{api} response has no result for topic {name}"),
    }
}

/// Pairs each requested name with the broker's result for it.
fn per_topic(
    names: &[String],
    results: &[(String, u16, Option<String>)],
    action: &str,
) -> Vec<(String, Result<(), ClientError>)> {
    names
        .iter()
        .map(|name| {
            let result = match results.iter().find(|(topic, _, _)| topic == name) {
                None => Err(missing_result(action, name)),
                Some((_, code, message)) => {
                    match ClientError::from_wire(
                        *code,
                        || format!("{action} {name}"),
                        message.clone(),
                    ) {
                        Some(error) => Err(error),
                        None => Ok(()),
                    }
                }
            };
            (name.clone(), result)
        })
        .collect()
}

/// DescribeTopics on `connection`, each topic with its own outcome.
async fn describe_topics_on(
    connection: &crate::connection::Connection,
    names: &[String],
) -> Result<Vec<(String, Result<TopicDescription, ClientError>)>, ClientError> {
    let request = DescribeTopicsRequest {
        names: names.to_vec(),
    };
    let reply = connection
        .call(&request, Vec::new(), Duration::ZERO)
        .await?;
    let (response, _) = reply.decode()?;
    Ok(response
        .topics
        .iter()
        .map(|topic| {
            let name = topic.name.to_string();
            let error = ClientError::from_wire(
                topic.error_code.to_native(),
                || format!("describe topic {name}"),
                topic.message.as_ref().map(|m| m.to_string()),
            );
            let result = match error {
                Some(error) => Err(error),
                None => Ok(TopicDescription::from_archived(topic)),
            };
            (name, result)
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_names_follow_the_broker_rules() {
        for good in ["orders", "a", "A.b_c-9", &"x".repeat(249)] {
            validate_topic_name(good).unwrap();
        }
        for bad in ["", ".", "..", "with space", "slash/", "ü", &"x".repeat(250)] {
            let error = validate_topic_name(bad).unwrap_err();
            assert!(matches!(error, ClientError::InvalidArgument(_)), "{error}");
            // Word for word the controller's reason: one rule, one message.
            let rule = check_topic_name(bad, false).unwrap_err();
            assert_eq!(error.to_string(), format!("invalid argument: {rule}"));
        }
        let error = validate_topic_name("slash/").unwrap_err().to_string();
        assert!(error.contains("letters, digits"), "{error}");
        assert!(error.contains("'/'"), "{error}");
    }

    /// The copy this replaced let `__` names through, which the controller
    /// then refused: creating one now fails before it is sent.
    #[test]
    fn internal_topic_names_are_refused_before_creation() {
        let error = validate_topic_name("__audit").unwrap_err();
        assert!(matches!(error, ClientError::InvalidArgument(_)), "{error}");
        assert!(
            error.to_string().contains("reserved for internal topics"),
            "{error}"
        );
    }

    #[test]
    fn results_are_matched_to_names_and_missing_ones_are_errors() {
        let names = vec!["a".to_owned(), "b".to_owned(), "c".to_owned()];
        let results = vec![
            (
                "b".to_owned(),
                11,
                Some("exists since yesterday".to_owned()),
            ),
            ("a".to_owned(), 0, None),
        ];
        let outcome = per_topic(&names, &results, "create topic");
        assert!(outcome[0].1.is_ok());
        let error = outcome[1].1.as_ref().unwrap_err();
        assert_eq!(
            error.code(),
            Some(corelog_wire::error::ErrorCode::TopicAlreadyExists)
        );
        assert!(error.to_string().contains("exists since yesterday"));
        assert!(matches!(outcome[2].1, Err(ClientError::Protocol { .. })));
    }
}
