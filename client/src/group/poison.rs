//! Poison records (C8): what a group does when its handler keeps failing on
//! one record.
//!
//! A [`PoisonPolicy`] is bounded retries with exponential backoff, then one
//! terminal [`PoisonAction`]:
//!
//! - [`PoisonAction::Stop`] — the partition stops being consumed, the error
//!   is surfaced ([`ClientError::PoisonStopped`]), and the group's offset
//!   stays at the record, so that nothing after it is committed until an
//!   operator fixes the handler or moves the group with an audited
//!   `corelog group reset-offsets`. The stop is written to the audit log.
//! - [`PoisonAction::Quarantine`] — the record is produced to a dead-letter
//!   topic with headers `origin-topic`, `origin-partition`, `origin-offset`,
//!   `origin-group` and `error` (key, value, schema and its own headers
//!   kept), then an audit record `quarantine` naming the dead-letter
//!   position is written, and only then is the record marked complete so
//!   the group moves past it. If either write fails the record is not
//!   skipped: the partition stops instead.
//! - [`PoisonAction::Skip`] — an audit record `skip` is written, then the
//!   record is marked complete. The record stays in its own topic for its
//!   retention; the audit record says where.
//!
//! Every record the group moves past without processing is an audit record
//! (group, topic, partition, offset, reason, principal, time), and nothing
//! is skipped silently.
//!
//! The decisions are pure ([`RetryPolicy::after_failure`]); the sequence of
//! writes is [`apply_policy`], generic over its effects so that it is
//! tested without a broker.

use std::fmt;
use std::future::Future;
use std::time::Duration;

use bytes::Bytes;
use corelog_wire::batch::Header;
use corelog_wire::topic::check_topic_name;
use corelog_wire::types::Offset;

use crate::consumer::ConsumerRecord;
use crate::error::ClientError;

/// Longest error text kept in a dead-letter header or an audit reason, in
/// bytes: enough to diagnose, small enough that a handler returning a huge
/// error cannot bloat the audit log.
pub const ERROR_TEXT_BYTES_MAX: usize = 1024;

/// Bounded retries with exponential backoff.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts after the first failure; 0 gives up at once.
    pub retries: u32,
    /// Wait before the first retry; doubles per retry.
    pub backoff: Duration,
    /// Longest wait between two attempts.
    pub backoff_max: Duration,
}

impl Default for RetryPolicy {
    /// Three retries after 100 ms, 200 ms and 400 ms.
    fn default() -> RetryPolicy {
        RetryPolicy {
            retries: 3,
            backoff: Duration::from_millis(100),
            backoff_max: Duration::from_secs(10),
        }
    }
}

/// What to do after a failed attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Try again after this wait.
    RetryAfter(Duration),
    /// Retries are spent: apply the policy's [`PoisonAction`].
    GiveUp,
}

impl RetryPolicy {
    /// The decision after `failures` failed attempts (at least 1).
    #[must_use]
    pub fn after_failure(&self, failures: u32) -> Verdict {
        debug_assert!(failures >= 1, "called after a failure");
        if failures > self.retries {
            return Verdict::GiveUp;
        }
        let doublings = failures.saturating_sub(1).min(31);
        let wait = self
            .backoff
            .checked_mul(1 << doublings)
            .unwrap_or(self.backoff_max);
        Verdict::RetryAfter(wait.min(self.backoff_max))
    }
}

/// The terminal action once retries are spent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PoisonAction {
    /// Stop consuming the partition; the offset stays at the record.
    Stop,
    /// Move past the record, leaving an audit record.
    Skip,
    /// Copy the record to a dead-letter topic, audit, and move past it.
    Quarantine {
        /// The topic that receives poison records. It must exist.
        dead_letter_topic: String,
    },
}

impl PoisonAction {
    /// The action's name as the audit log shows it.
    #[must_use]
    pub fn name(&self) -> &'static str {
        match self {
            PoisonAction::Stop => "stop",
            PoisonAction::Skip => "skip",
            PoisonAction::Quarantine { .. } => "quarantine",
        }
    }
}

/// A group's policy for poison records; see the module docs. The default
/// retries three times and then stops: nothing is skipped unless the
/// application chose to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoisonPolicy {
    /// Retries before giving up.
    pub retry: RetryPolicy,
    /// What giving up means.
    pub then: PoisonAction,
}

impl Default for PoisonPolicy {
    fn default() -> PoisonPolicy {
        PoisonPolicy::stop()
    }
}

impl PoisonPolicy {
    /// Default retries, then stop the partition.
    #[must_use]
    pub fn stop() -> PoisonPolicy {
        PoisonPolicy {
            retry: RetryPolicy::default(),
            then: PoisonAction::Stop,
        }
    }

    /// Default retries, then skip with an audit record.
    #[must_use]
    pub fn skip() -> PoisonPolicy {
        PoisonPolicy {
            retry: RetryPolicy::default(),
            then: PoisonAction::Skip,
        }
    }

    /// Default retries, then quarantine to `dead_letter_topic`.
    #[must_use]
    pub fn quarantine(dead_letter_topic: impl Into<String>) -> PoisonPolicy {
        PoisonPolicy {
            retry: RetryPolicy::default(),
            then: PoisonAction::Quarantine {
                dead_letter_topic: dead_letter_topic.into(),
            },
        }
    }

    /// Sets the retries and the first backoff.
    #[must_use]
    pub fn with_retries(mut self, retries: u32, backoff: Duration) -> PoisonPolicy {
        self.retry.retries = retries;
        self.retry.backoff = backoff;
        self.retry.backoff_max = self.retry.backoff_max.max(backoff);
        self
    }

    /// Checks the policy.
    ///
    /// # Errors
    /// [`ClientError::InvalidConfig`] for a backoff above its maximum or an
    /// invalid dead-letter topic name.
    pub fn validate(&self) -> Result<(), ClientError> {
        if self.retry.backoff > self.retry.backoff_max {
            return Err(ClientError::InvalidConfig(
                "poison retry backoff must be at most backoff_max".to_owned(),
            ));
        }
        if let PoisonAction::Quarantine { dead_letter_topic } = &self.then {
            // A topic the client writes: the broker's rule for user topics,
            // so an internal (`__`) one is refused here, not at the produce.
            check_topic_name(dead_letter_topic, false).map_err(|error| {
                ClientError::InvalidConfig(format!("dead_letter_topic: {error}"))
            })?;
        }
        Ok(())
    }
}

/// An audit record the policy writes, as sent with WriteAudit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuditEntry {
    /// The action taken.
    pub action: PoisonAction,
    /// Topic of the record.
    pub topic: String,
    /// Partition of the record.
    pub partition: u32,
    /// Offset of the record.
    pub offset: Offset,
    /// Why: the handler's last error.
    pub reason: String,
    /// Where the dead-letter copy is, for a quarantine.
    pub dead_letter_offset: Option<Offset>,
}

/// The writes a policy needs, so that [`apply_policy`] can be tested
/// without a broker. Both must return only once the write is durable.
pub trait PoisonEffects {
    /// Produces `record` to `topic` with `headers` added; returns its
    /// offset once acknowledged.
    fn dead_letter(
        &self,
        topic: &str,
        record: &ConsumerRecord,
        headers: Vec<Header>,
    ) -> impl Future<Output = Result<Offset, ClientError>>;

    /// Writes an audit record; returns its offset in `__audit` once
    /// acknowledged.
    fn audit(&self, entry: AuditEntry) -> impl Future<Output = Result<Offset, ClientError>>;
}

/// What happened to one record under the policy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The handler succeeded (after `attempts` tries). Mark it complete.
    Processed {
        /// Tries, 1 when it succeeded at once.
        attempts: u32,
    },
    /// Retries spent; skipped with an audit record. Mark it complete.
    Skipped {
        /// The audit record's offset in `__audit`.
        audit_offset: Offset,
        /// The handler's last error.
        error: String,
    },
    /// Retries spent; copied to the dead-letter topic and audited. Mark it
    /// complete.
    Quarantined {
        /// The dead-letter topic.
        dead_letter_topic: String,
        /// The copy's offset there.
        dead_letter_offset: Offset,
        /// The audit record's offset in `__audit`.
        audit_offset: Offset,
        /// The handler's last error.
        error: String,
    },
    /// The partition must stop at this record: the policy says so, or a
    /// quarantine or skip could not be written. Do not mark it complete.
    Stopped {
        /// Why, for people.
        error: String,
        /// The audit record of the stop, if it could be written.
        audit_offset: Option<Offset>,
    },
}

impl Outcome {
    /// Whether the record counts as done, so the group may move past it.
    #[must_use]
    pub fn is_complete(&self) -> bool {
        !matches!(self, Outcome::Stopped { .. })
    }
}

/// Cuts `text` to at most [`ERROR_TEXT_BYTES_MAX`] bytes at a character
/// boundary.
#[must_use]
pub fn bounded_error_text(text: &str) -> String {
    if text.len() <= ERROR_TEXT_BYTES_MAX {
        return text.to_owned();
    }
    let mut end = ERROR_TEXT_BYTES_MAX;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// The headers a dead-letter copy carries, after the record's own.
#[must_use]
pub fn dead_letter_headers(group: &str, record: &ConsumerRecord, error: &str) -> Vec<Header> {
    let header = |key: &str, value: String| Header {
        key: key.to_owned(),
        value: Some(Bytes::from(value)),
    };
    vec![
        header("origin-topic", record.topic.to_string()),
        header("origin-partition", record.partition.to_string()),
        header("origin-offset", record.offset.0.to_string()),
        header("origin-group", group.to_owned()),
        header("error", bounded_error_text(error)),
    ]
}

/// Runs `handler` on `record` under `policy`: retries with backoff, then the
/// terminal action, in the order the module docs give. Returns what
/// happened; the caller marks the record complete when
/// [`Outcome::is_complete`].
pub async fn apply_policy<H, Fut, E, X>(
    policy: &PoisonPolicy,
    group: &str,
    record: &ConsumerRecord,
    handler: &H,
    effects: &X,
) -> Outcome
where
    H: Fn(ConsumerRecord) -> Fut,
    Fut: Future<Output = Result<(), E>>,
    E: fmt::Display,
    X: PoisonEffects,
{
    let mut failures = 0_u32;
    let error = loop {
        match handler(record.clone()).await {
            Ok(()) => {
                return Outcome::Processed {
                    attempts: failures + 1,
                };
            }
            Err(error) => {
                failures += 1;
                let error = bounded_error_text(&error.to_string());
                match policy.retry.after_failure(failures) {
                    Verdict::RetryAfter(wait) => {
                        tracing::debug!(topic = %record.topic, partition = record.partition,
                            offset = record.offset.0, failures, %error, "handler failed; retrying");
                        tokio::time::sleep(wait).await;
                    }
                    Verdict::GiveUp => break error,
                }
            }
        }
    };
    tracing::warn!(topic = %record.topic, partition = record.partition, offset = record.offset.0,
        failures, action = policy.then.name(), %error, "poison record");
    let entry = |action: PoisonAction, dead_letter_offset| AuditEntry {
        action,
        topic: record.topic.to_string(),
        partition: record.partition,
        offset: record.offset,
        reason: error.clone(),
        dead_letter_offset,
    };
    match &policy.then {
        PoisonAction::Stop => {
            let audit_offset = match effects.audit(entry(PoisonAction::Stop, None)).await {
                Ok(offset) => Some(offset),
                Err(audit_error) => {
                    tracing::warn!(%audit_error, "the audit record of a stop could not be written");
                    None
                }
            };
            Outcome::Stopped {
                error,
                audit_offset,
            }
        }
        PoisonAction::Skip => match effects.audit(entry(PoisonAction::Skip, None)).await {
            Ok(audit_offset) => Outcome::Skipped {
                audit_offset,
                error,
            },
            Err(audit_error) => Outcome::Stopped {
                error: format!(
                    "{error}; the skip was not done because its audit record could not be written: {audit_error}"
                ),
                audit_offset: None,
            },
        },
        PoisonAction::Quarantine { dead_letter_topic } => {
            let headers = dead_letter_headers(group, record, &error);
            let dead_letter_offset = match effects
                .dead_letter(dead_letter_topic, record, headers)
                .await
            {
                Ok(offset) => offset,
                Err(produce_error) => {
                    return Outcome::Stopped {
                        error: format!(
                            "{error}; quarantine to {dead_letter_topic} failed: {produce_error}"
                        ),
                        audit_offset: None,
                    };
                }
            };
            let action = policy.then.clone();
            match effects.audit(entry(action, Some(dead_letter_offset))).await {
                Ok(audit_offset) => Outcome::Quarantined {
                    dead_letter_topic: dead_letter_topic.clone(),
                    dead_letter_offset,
                    audit_offset,
                    error,
                },
                Err(audit_error) => Outcome::Stopped {
                    error: format!(
                        "{error}; copied to {dead_letter_topic} at offset {dead_letter_offset} but the audit record could not be written: {audit_error}"
                    ),
                    audit_offset: None,
                },
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::sync::Arc;

    use corelog_wire::types::TimestampMs;

    use super::*;

    #[test]
    fn retries_back_off_exponentially_up_to_the_cap_then_give_up() {
        let retry = RetryPolicy {
            retries: 4,
            backoff: Duration::from_millis(100),
            backoff_max: Duration::from_millis(300),
        };
        assert_eq!(
            retry.after_failure(1),
            Verdict::RetryAfter(Duration::from_millis(100))
        );
        assert_eq!(
            retry.after_failure(2),
            Verdict::RetryAfter(Duration::from_millis(200))
        );
        assert_eq!(
            retry.after_failure(3),
            Verdict::RetryAfter(Duration::from_millis(300))
        );
        assert_eq!(
            retry.after_failure(4),
            Verdict::RetryAfter(Duration::from_millis(300))
        );
        assert_eq!(retry.after_failure(5), Verdict::GiveUp);
        let none = RetryPolicy {
            retries: 0,
            ..RetryPolicy::default()
        };
        assert_eq!(none.after_failure(1), Verdict::GiveUp);
        let huge = RetryPolicy {
            retries: u32::MAX,
            backoff: Duration::from_secs(1),
            backoff_max: Duration::from_secs(60),
        };
        assert_eq!(
            huge.after_failure(1000),
            Verdict::RetryAfter(Duration::from_secs(60))
        );
    }

    #[test]
    fn policies_validate_their_settings() {
        PoisonPolicy::default().validate().unwrap();
        PoisonPolicy::quarantine("orders.dlq").validate().unwrap();
        assert!(PoisonPolicy::quarantine("bad name").validate().is_err());
        let mut policy = PoisonPolicy::skip();
        policy.retry.backoff = Duration::from_secs(100);
        assert!(policy.validate().is_err());
        assert!(
            PoisonPolicy::stop()
                .with_retries(1, Duration::from_secs(30))
                .validate()
                .is_ok()
        );
    }

    #[test]
    fn error_text_is_bounded_at_a_character_boundary() {
        let long = "é".repeat(ERROR_TEXT_BYTES_MAX);
        let cut = bounded_error_text(&long);
        assert!(cut.len() <= ERROR_TEXT_BYTES_MAX + '…'.len_utf8());
        assert!(cut.ends_with('…'));
        assert_eq!(bounded_error_text("short"), "short");
    }

    fn record() -> ConsumerRecord {
        ConsumerRecord {
            topic: Arc::from("orders"),
            partition: 2,
            offset: Offset(117),
            timestamp: TimestampMs(1_700_000_000_000),
            key: Some(Bytes::from_static(b"O51")),
            value: Some(Bytes::from_static(b"not json")),
            headers: Vec::new(),
            schema: None,
        }
    }

    /// Records every write in order; fails the ones it is told to.
    #[derive(Default)]
    struct Recorder {
        log: RefCell<Vec<String>>,
        audits: RefCell<Vec<AuditEntry>>,
        headers: RefCell<Vec<Header>>,
        fail_dead_letter: bool,
        fail_audit: bool,
    }

    impl PoisonEffects for Recorder {
        async fn dead_letter(
            &self,
            topic: &str,
            record: &ConsumerRecord,
            headers: Vec<Header>,
        ) -> Result<Offset, ClientError> {
            self.log
                .borrow_mut()
                .push(format!("dead-letter {topic} {}", record.offset));
            *self.headers.borrow_mut() = headers;
            if self.fail_dead_letter {
                return Err(ClientError::InvalidArgument("no such topic".to_owned()));
            }
            Ok(Offset(7))
        }

        async fn audit(&self, entry: AuditEntry) -> Result<Offset, ClientError> {
            self.log
                .borrow_mut()
                .push(format!("audit {}", entry.action.name()));
            self.audits.borrow_mut().push(entry);
            if self.fail_audit {
                return Err(ClientError::InvalidArgument("audit refused".to_owned()));
            }
            Ok(Offset(3))
        }
    }

    /// A handler that fails its first `failures` calls.
    fn flaky(
        failures: u32,
    ) -> (
        impl Fn(ConsumerRecord) -> std::future::Ready<Result<(), String>>,
        Arc<std::sync::atomic::AtomicU32>,
    ) {
        let calls = Arc::new(std::sync::atomic::AtomicU32::new(0));
        let counter = Arc::clone(&calls);
        let handler = move |_record: ConsumerRecord| {
            let call = counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            std::future::ready(if call < failures {
                Err(format!("bad payload (call {call})"))
            } else {
                Ok(())
            })
        };
        (handler, calls)
    }

    fn quick(then: PoisonAction) -> PoisonPolicy {
        PoisonPolicy {
            retry: RetryPolicy {
                retries: 2,
                backoff: Duration::from_millis(10),
                backoff_max: Duration::from_millis(10),
            },
            then,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_record_that_succeeds_on_a_retry_is_processed_without_audit() {
        let (handler, calls) = flaky(2);
        let effects = Recorder::default();
        let outcome = apply_policy(
            &quick(PoisonAction::Stop),
            "g",
            &record(),
            &handler,
            &effects,
        )
        .await;
        assert_eq!(outcome, Outcome::Processed { attempts: 3 });
        assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 3);
        assert!(effects.log.borrow().is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn stop_audits_and_does_not_complete() {
        let (handler, calls) = flaky(u32::MAX);
        let effects = Recorder::default();
        let outcome = apply_policy(
            &quick(PoisonAction::Stop),
            "g",
            &record(),
            &handler,
            &effects,
        )
        .await;
        assert_eq!(
            calls.load(std::sync::atomic::Ordering::SeqCst),
            3,
            "one try and two retries"
        );
        assert!(!outcome.is_complete());
        assert!(
            matches!(&outcome, Outcome::Stopped { audit_offset: Some(Offset(3)), error } if error.contains("bad payload"))
        );
        assert_eq!(*effects.log.borrow(), ["audit stop"]);
        let audit = &effects.audits.borrow()[0];
        assert_eq!((audit.partition, audit.offset), (2, Offset(117)));
    }

    #[tokio::test(start_paused = true)]
    async fn quarantine_copies_then_audits_then_completes() {
        let (handler, _) = flaky(u32::MAX);
        let effects = Recorder::default();
        let policy = quick(PoisonAction::Quarantine {
            dead_letter_topic: "orders.dlq".to_owned(),
        });
        let outcome = apply_policy(&policy, "search", &record(), &handler, &effects).await;
        assert!(outcome.is_complete());
        assert!(matches!(
            &outcome,
            Outcome::Quarantined {
                dead_letter_offset: Offset(7),
                audit_offset: Offset(3),
                ..
            }
        ));
        assert_eq!(
            *effects.log.borrow(),
            ["dead-letter orders.dlq 117", "audit quarantine"],
            "the copy is durable before the audit record, and both before completion"
        );
        let headers: Vec<(String, String)> = effects
            .headers
            .borrow()
            .iter()
            .map(|h| {
                let value = h.value.as_deref().unwrap_or_default();
                (h.key.clone(), String::from_utf8_lossy(value).into_owned())
            })
            .collect();
        assert_eq!(headers[0], ("origin-topic".to_owned(), "orders".to_owned()));
        assert_eq!(headers[1], ("origin-partition".to_owned(), "2".to_owned()));
        assert_eq!(headers[2], ("origin-offset".to_owned(), "117".to_owned()));
        assert_eq!(headers[3], ("origin-group".to_owned(), "search".to_owned()));
        assert_eq!(headers[4].0, "error");
        assert!(headers[4].1.contains("bad payload"));
        assert_eq!(
            effects.audits.borrow()[0].dead_letter_offset,
            Some(Offset(7))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_quarantine_stops_instead_of_skipping() {
        let (handler, _) = flaky(u32::MAX);
        let policy = quick(PoisonAction::Quarantine {
            dead_letter_topic: "orders.dlq".to_owned(),
        });
        let effects = Recorder {
            fail_dead_letter: true,
            ..Recorder::default()
        };
        let outcome = apply_policy(&policy, "g", &record(), &handler, &effects).await;
        assert!(!outcome.is_complete());
        assert_eq!(
            *effects.log.borrow(),
            ["dead-letter orders.dlq 117"],
            "no audit of a skip that did not happen"
        );
        let effects = Recorder {
            fail_audit: true,
            ..Recorder::default()
        };
        let outcome = apply_policy(&policy, "g", &record(), &handler, &effects).await;
        assert!(
            !outcome.is_complete(),
            "a skip without its audit record is no skip"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn skip_audits_then_completes_and_stops_when_the_audit_fails() {
        let (handler, _) = flaky(u32::MAX);
        let effects = Recorder::default();
        let outcome = apply_policy(
            &quick(PoisonAction::Skip),
            "g",
            &record(),
            &handler,
            &effects,
        )
        .await;
        assert!(matches!(
            outcome,
            Outcome::Skipped {
                audit_offset: Offset(3),
                ..
            }
        ));
        assert_eq!(*effects.log.borrow(), ["audit skip"]);
        let effects = Recorder {
            fail_audit: true,
            ..Recorder::default()
        };
        let outcome = apply_policy(
            &quick(PoisonAction::Skip),
            "g",
            &record(),
            &handler,
            &effects,
        )
        .await;
        assert!(!outcome.is_complete());
    }

    #[tokio::test(start_paused = true)]
    async fn backoff_waits_between_attempts() {
        let (handler, _) = flaky(u32::MAX);
        let effects = Recorder::default();
        let policy = PoisonPolicy {
            retry: RetryPolicy {
                retries: 3,
                backoff: Duration::from_secs(1),
                backoff_max: Duration::from_secs(2),
            },
            then: PoisonAction::Skip,
        };
        let start = tokio::time::Instant::now();
        apply_policy(&policy, "g", &record(), &handler, &effects).await;
        // 1 s + 2 s + 2 s (capped).
        assert_eq!(start.elapsed(), Duration::from_secs(5));
    }
}
