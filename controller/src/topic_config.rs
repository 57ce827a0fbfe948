//! Per-topic settings: the `key=value` entries a topic is created with, the
//! values they may take, and their documented defaults.
//!
//! The rules live here, in the controller, because the controller's state
//! machine is where they are enforced: every topic the metadata log holds
//! passed [`TopicConfig::with_entries`] when its creation applied, so a
//! broker parsing a published topic's entries cannot meet a bad value.
//! Brokers merge their own defaults (`--retention-ms` and friends) into the
//! entries before they ask for a topic; entries missing from a stored topic
//! (a key added by a later release) take [`TopicConfig::DEFAULT`], the same
//! on every broker.

use std::collections::BTreeMap;

/// Seven days, in milliseconds: the default of `retention.ms` and
/// `segment.ms`.
pub const SEVEN_DAYS_MS: i64 = 7 * 24 * 60 * 60 * 1000;

/// Smallest `segment.bytes` a topic may have.
pub const SEGMENT_BYTES_MIN: u64 = 1 << 20;

/// Smallest `max.message.bytes` a topic may have: a batch header and a record.
pub const MAX_MESSAGE_BYTES_MIN: u32 = 64;

/// Default `max.uncompressed.message.bytes`: 4 MiB, four times the default
/// `max.message.bytes` (room for a 4:1 compression ratio) and the largest
/// batch the broker accepts on the wire. A batch of a few hundred bytes
/// that inflates past it (a decompression bomb) is refused at produce, so
/// a consumer never receives it.
pub const MAX_UNCOMPRESSED_MESSAGE_BYTES_DEFAULT: u32 = 4 << 20;

/// What happens to old records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CleanupPolicy {
    /// Delete whole segments past the retention time or size.
    Delete,
}

/// A topic's settings, parsed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TopicConfig {
    /// `retention.ms`: keep records at least this long; `None` forever.
    pub retention_ms: Option<i64>,
    /// `retention.bytes`: per-partition size bound; `None` unbounded.
    pub retention_bytes: Option<u64>,
    /// `segment.bytes`: roll segments at this size.
    pub segment_bytes: u64,
    /// `segment.ms`: roll segments at this age.
    pub segment_ms: i64,
    /// `max.message.bytes`: largest batch accepted, as sent (compressed).
    pub max_message_bytes: u32,
    /// `max.uncompressed.message.bytes`: largest records section of a
    /// compressed batch once decompressed. An uncompressed batch is bounded
    /// by `max.message.bytes` already.
    pub max_uncompressed_message_bytes: u32,
    /// `cleanup.policy`.
    pub cleanup_policy: CleanupPolicy,
}

/// Keys a topic understands, in the order [`TopicConfig::entries`] lists them.
pub const KEYS: [&str; 7] = [
    "retention.ms",
    "retention.bytes",
    "segment.bytes",
    "segment.ms",
    "max.message.bytes",
    "max.uncompressed.message.bytes",
    "cleanup.policy",
];

impl Default for TopicConfig {
    fn default() -> Self {
        Self::DEFAULT
    }
}

impl TopicConfig {
    /// The documented defaults: seven days of retention, unbounded size,
    /// 1 GiB segments rolled weekly, 1 MiB batches inflating to at most
    /// 4 MiB, delete policy.
    pub const DEFAULT: TopicConfig = TopicConfig {
        retention_ms: Some(SEVEN_DAYS_MS),
        retention_bytes: None,
        segment_bytes: 1 << 30,
        segment_ms: SEVEN_DAYS_MS,
        max_message_bytes: 1 << 20,
        max_uncompressed_message_bytes: MAX_UNCOMPRESSED_MESSAGE_BYTES_DEFAULT,
        cleanup_policy: CleanupPolicy::Delete,
    };

    /// `base` overridden by `entries`.
    ///
    /// # Errors
    /// A message naming the key and the accepted values, for `INVALID_CONFIG`.
    pub fn with_entries<'a>(
        base: &TopicConfig,
        entries: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<TopicConfig, String> {
        let mut config = *base;
        for (key, value) in entries {
            config.set(key, value)?;
        }
        if u64::from(config.max_message_bytes) > config.segment_bytes {
            return Err("max.message.bytes must not exceed segment.bytes".to_owned());
        }
        Ok(config)
    }

    /// The settings of stored `entries`: over [`TopicConfig::DEFAULT`], as
    /// the state machine checked them and every broker reads them.
    ///
    /// # Errors
    /// As [`TopicConfig::with_entries`].
    pub fn from_stored(entries: &BTreeMap<String, String>) -> Result<TopicConfig, String> {
        Self::with_entries(
            &Self::DEFAULT,
            entries
                .iter()
                .map(|(key, value)| (key.as_str(), value.as_str())),
        )
    }

    fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        let number = |value: &str| {
            value
                .trim()
                .parse::<i64>()
                .map_err(|_| format!("{key} must be an integer, got {value:?}"))
        };
        match key {
            "retention.ms" => self.retention_ms = optional_positive(key, number(value)?)?,
            "retention.bytes" => {
                self.retention_bytes = optional_positive(key, number(value)?)?
                    .map(|bytes| u64::try_from(bytes).unwrap_or(u64::MAX));
            }
            "segment.bytes" => {
                let bytes = number(value)?;
                let allowed =
                    i64::try_from(SEGMENT_BYTES_MIN).unwrap_or(i64::MAX)..=i64::from(u32::MAX);
                if !allowed.contains(&bytes) {
                    return Err(format!(
                        "segment.bytes must be between {SEGMENT_BYTES_MIN} and {}",
                        u32::MAX
                    ));
                }
                self.segment_bytes = u64::try_from(bytes).unwrap_or(u64::MAX);
            }
            "segment.ms" => {
                let ms = number(value)?;
                if ms <= 0 {
                    return Err("segment.ms must be positive".to_owned());
                }
                self.segment_ms = ms;
            }
            "max.message.bytes" => {
                let bytes = number(value)?;
                self.max_message_bytes = u32::try_from(bytes)
                    .ok()
                    .filter(|bytes| *bytes >= MAX_MESSAGE_BYTES_MIN)
                    .ok_or_else(|| {
                        format!(
                            "max.message.bytes must be between {MAX_MESSAGE_BYTES_MIN} and {}",
                            u32::MAX
                        )
                    })?;
            }
            "max.uncompressed.message.bytes" => {
                let bytes = number(value)?;
                self.max_uncompressed_message_bytes = u32::try_from(bytes)
                    .ok()
                    .filter(|bytes| *bytes >= MAX_MESSAGE_BYTES_MIN)
                    .ok_or_else(|| {
                        format!(
                            "max.uncompressed.message.bytes must be between {MAX_MESSAGE_BYTES_MIN} and {} (and within the broker's limit)",
                            u32::MAX
                        )
                    })?;
            }
            "cleanup.policy" => match value.trim() {
                "delete" => self.cleanup_policy = CleanupPolicy::Delete,
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
        Ok(())
    }

    /// The settings as `key=value` entries (-1 for unlimited).
    #[must_use]
    pub fn entries(&self) -> BTreeMap<String, String> {
        let unlimited =
            |value: Option<i64>| value.map_or_else(|| "-1".to_owned(), |value| value.to_string());
        let policy = match self.cleanup_policy {
            CleanupPolicy::Delete => "delete",
        };
        [
            ("retention.ms", unlimited(self.retention_ms)),
            (
                "retention.bytes",
                unlimited(
                    self.retention_bytes
                        .map(|bytes| i64::try_from(bytes).unwrap_or(i64::MAX)),
                ),
            ),
            ("segment.bytes", self.segment_bytes.to_string()),
            ("segment.ms", self.segment_ms.to_string()),
            ("max.message.bytes", self.max_message_bytes.to_string()),
            (
                "max.uncompressed.message.bytes",
                self.max_uncompressed_message_bytes.to_string(),
            ),
            ("cleanup.policy", policy.to_owned()),
        ]
        .into_iter()
        .map(|(key, value)| (key.to_owned(), value))
        .collect()
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

    #[test]
    fn entries_override_the_base_and_round_trip() {
        let config = TopicConfig::with_entries(
            &TopicConfig::DEFAULT,
            [
                ("retention.ms", "60000"),
                ("retention.bytes", "1048576"),
                ("segment.bytes", "2097152"),
            ],
        )
        .unwrap();
        assert_eq!(config.retention_ms, Some(60_000));
        assert_eq!(config.retention_bytes, Some(1 << 20));
        assert_eq!(config.segment_ms, SEVEN_DAYS_MS);
        assert_eq!(TopicConfig::from_stored(&config.entries()), Ok(config));
        assert_eq!(
            TopicConfig::from_stored(&BTreeMap::new()),
            Ok(TopicConfig::DEFAULT)
        );
    }

    #[test]
    fn bad_entries_name_the_key() {
        for (key, value) in [
            ("retention.ms", "soon"),
            ("retention.ms", "0"),
            ("retention.bytes", "-2"),
            ("segment.bytes", "10"),
            ("segment.ms", "0"),
            ("max.message.bytes", "63"),
            ("max.uncompressed.message.bytes", "63"),
            ("max.uncompressed.message.bytes", "-1"),
            ("cleanup.policy", "compact"),
            ("colour", "blue"),
        ] {
            let error =
                TopicConfig::with_entries(&TopicConfig::DEFAULT, [(key, value)]).unwrap_err();
            assert!(
                error.contains(key.split('.').next().unwrap_or(key)),
                "{error}"
            );
        }
        let error = TopicConfig::with_entries(
            &TopicConfig::DEFAULT,
            [
                ("segment.bytes", "1048576"),
                ("max.message.bytes", "2097152"),
            ],
        )
        .unwrap_err();
        assert!(error.contains("must not exceed segment.bytes"), "{error}");
    }
}
