//! The storage settings of a topic's partitions: the topic's own settings
//! (`corelog_controller::TopicConfig`, whose rules the controller enforces)
//! over the broker's storage configuration.

use corelog_controller::TopicConfig;

use corelog_storage::{LogConfig, RetentionPolicy};

/// The storage configuration of `topic`'s partitions; `broker` supplies
/// what is not per topic.
#[must_use]
pub fn log_config(topic: &TopicConfig, broker: &LogConfig) -> LogConfig {
    let mut limits = broker.batch_limits;
    limits.batch_bytes_max = limits
        .batch_bytes_max
        .min(usize::try_from(topic.max_message_bytes).unwrap_or(usize::MAX));
    LogConfig {
        segment_bytes: topic.segment_bytes,
        segment_ms: topic.segment_ms,
        retention: RetentionPolicy {
            retention_ms: topic.retention_ms,
            retention_bytes: topic.retention_bytes,
        },
        batch_limits: limits,
        ..*broker
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_topic_decides_segments_retention_and_batch_size() {
        let topic = TopicConfig {
            retention_ms: Some(60_000),
            retention_bytes: Some(1 << 20),
            segment_bytes: 2 << 20,
            max_message_bytes: 4096,
            max_uncompressed_message_bytes: 8192,
            ..TopicConfig::DEFAULT
        };
        let broker = LogConfig::default();
        let log = log_config(&topic, &broker);
        // The decompressed bound of reads stays the broker's: the topic's
        // applies at produce (`Partition::check_batch`), so that batches
        // stored under an older, larger setting still read back.
        assert_eq!(
            log.batch_limits.decompressed_bytes_max,
            broker.batch_limits.decompressed_bytes_max
        );
        assert_eq!(log.segment_bytes, 2 << 20);
        assert_eq!(log.retention.retention_ms, Some(60_000));
        assert_eq!(log.retention.retention_bytes, Some(1 << 20));
        assert_eq!(log.batch_limits.batch_bytes_max, 4096);
        assert_eq!(log.flush_bytes_max, broker.flush_bytes_max);
    }
}
