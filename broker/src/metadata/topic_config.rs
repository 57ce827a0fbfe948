//! Per-topic settings: what `CreateTopics` accepts as `key=value` entries,
//! their defaults, and the storage configuration they produce.

use serde::{Deserialize, Serialize};

use crate::storage::{LogConfig, RetentionPolicy};

/// What happens to old records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CleanupPolicy {
    /// Delete whole segments past the retention time or size.
    Delete,
}

/// A topic's settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicConfig {
    /// `retention.ms`: keep records at least this long; `None` forever.
    pub retention_ms: Option<i64>,
    /// `retention.bytes`: per-partition size bound; `None` unbounded.
    pub retention_bytes: Option<u64>,
    /// `segment.bytes`: roll segments at this size.
    pub segment_bytes: u64,
    /// `segment.ms`: roll segments at this age.
    pub segment_ms: i64,
    /// `max.message.bytes`: largest batch accepted.
    pub max_message_bytes: u32,
    /// `cleanup.policy`.
    pub cleanup_policy: CleanupPolicy,
}

/// Keys `CreateTopics` understands, in the order `entries` lists them.
pub const KEYS: [&str; 6] = [
    "retention.ms",
    "retention.bytes",
    "segment.bytes",
    "segment.ms",
    "max.message.bytes",
    "cleanup.policy",
];

/// Smallest segment size a topic may ask for.
pub const SEGMENT_BYTES_MIN: u64 = 1 << 20;

impl TopicConfig {
    /// `defaults` overridden by `entries`.
    ///
    /// # Errors
    /// A message naming the key and the accepted values, for `INVALID_CONFIG`.
    pub fn with_entries<'a>(
        defaults: &TopicConfig,
        entries: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<TopicConfig, String> {
        let mut config = *defaults;
        for (key, value) in entries {
            let number = |value: &str| {
                value
                    .trim()
                    .parse::<i64>()
                    .map_err(|_| format!("{key} must be an integer, got {value:?}"))
            };
            match key {
                "retention.ms" => config.retention_ms = optional_positive(key, number(value)?)?,
                "retention.bytes" => {
                    config.retention_bytes =
                        optional_positive(key, number(value)?)?.map(|bytes| bytes as u64);
                }
                "segment.bytes" => {
                    let bytes = number(value)?;
                    if bytes < SEGMENT_BYTES_MIN as i64 || bytes > i64::from(u32::MAX) {
                        return Err(format!(
                            "segment.bytes must be between {SEGMENT_BYTES_MIN} and {}",
                            u32::MAX
                        ));
                    }
                    config.segment_bytes = bytes as u64;
                }
                "segment.ms" => {
                    let ms = number(value)?;
                    if ms <= 0 {
                        return Err("segment.ms must be positive".to_owned());
                    }
                    config.segment_ms = ms;
                }
                "max.message.bytes" => {
                    let bytes = number(value)?;
                    if bytes < 64 || bytes > i64::from(u32::MAX) {
                        return Err("max.message.bytes must be at least 64".to_owned());
                    }
                    config.max_message_bytes = bytes as u32;
                }
                "cleanup.policy" => match value.trim() {
                    "delete" => config.cleanup_policy = CleanupPolicy::Delete,
                    "compact" => {
                        return Err(
                            "cleanup.policy=compact is not supported yet; use delete".to_owned()
                        );
                    }
                    other => return Err(format!("cleanup.policy must be delete, got {other:?}")),
                },
                other => {
                    return Err(format!(
                        "unknown config {other:?}; known keys: {}",
                        KEYS.join(", ")
                    ));
                }
            }
        }
        if u64::from(config.max_message_bytes) > config.segment_bytes {
            return Err("max.message.bytes must not exceed segment.bytes".to_owned());
        }
        Ok(config)
    }

    /// The settings as `key=value` entries (-1 for unlimited).
    #[must_use]
    pub fn entries(&self) -> Vec<(String, String)> {
        let unlimited =
            |value: Option<i64>| value.map_or_else(|| "-1".to_owned(), |value| value.to_string());
        vec![
            ("retention.ms".to_owned(), unlimited(self.retention_ms)),
            (
                "retention.bytes".to_owned(),
                unlimited(self.retention_bytes.map(|bytes| bytes as i64)),
            ),
            ("segment.bytes".to_owned(), self.segment_bytes.to_string()),
            ("segment.ms".to_owned(), self.segment_ms.to_string()),
            (
                "max.message.bytes".to_owned(),
                self.max_message_bytes.to_string(),
            ),
            ("cleanup.policy".to_owned(), "delete".to_owned()),
        ]
    }

    /// The storage configuration of this topic's partitions; the broker
    /// supplies what is not per-topic.
    #[must_use]
    pub fn log_config(&self, broker: &LogConfig) -> LogConfig {
        let mut limits = broker.batch_limits;
        limits.batch_bytes_max = limits.batch_bytes_max.min(self.max_message_bytes as usize);
        LogConfig {
            segment_bytes: self.segment_bytes,
            segment_ms: self.segment_ms,
            retention: RetentionPolicy {
                retention_ms: self.retention_ms,
                retention_bytes: self.retention_bytes,
            },
            batch_limits: limits,
            ..*broker
        }
    }
}

fn optional_positive(key: &str, value: i64) -> Result<Option<i64>, String> {
    match value {
        -1 => Ok(None),
        value if value > 0 => Ok(Some(value)),
        _ => Err(format!("{key} must be positive, or -1 for unlimited")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn defaults() -> TopicConfig {
        TopicConfig {
            retention_ms: Some(604_800_000),
            retention_bytes: None,
            segment_bytes: 1 << 30,
            segment_ms: 604_800_000,
            max_message_bytes: 1 << 20,
            cleanup_policy: CleanupPolicy::Delete,
        }
    }

    #[test]
    fn entries_override_defaults_and_round_trip() {
        let config = TopicConfig::with_entries(
            &defaults(),
            [
                ("retention.ms", "60000"),
                ("retention.bytes", "1048576"),
                ("segment.bytes", "2097152"),
            ],
        )
        .unwrap();
        assert_eq!(config.retention_ms, Some(60_000));
        assert_eq!(config.retention_bytes, Some(1 << 20));
        let entries = config.entries();
        let again = TopicConfig::with_entries(
            &defaults(),
            entries
                .iter()
                .map(|(key, value)| (key.as_str(), value.as_str())),
        )
        .unwrap();
        assert_eq!(again, config);
    }

    #[test]
    fn bad_entries_name_the_key() {
        for (key, value) in [
            ("retention.ms", "soon"),
            ("retention.ms", "0"),
            ("segment.bytes", "10"),
            ("cleanup.policy", "compact"),
            ("colour", "blue"),
        ] {
            let error = TopicConfig::with_entries(&defaults(), [(key, value)]).unwrap_err();
            assert!(
                error.contains(key.split('.').next().unwrap_or(key)),
                "{error}"
            );
        }
    }
}
