//! The recorded history: what the workload's clients did and saw, one
//! [`Event`] per step, in the order the recorder observed them.
//!
//! The order of [`History::events`] *is* the real-time order the checker
//! reasons with: an event recorded before another one happened before it.
//! `at_ms` must therefore not decrease along the history (the checker
//! reports it if it does); it is only compared with itself and with the
//! [`EventKind::NoQuorum`] intervals, so it may count from any origin as
//! long as the fault injector uses the same clock.
//!
//! On disk a history is JSON lines, one event per line, flat:
//!
//! ```text
//! {"at_ms":12,"client":1,"op":"produce_invoke","value_id":7,"key":"k7","topic":"t","partition":0,"producer":{"producer_id":4,"epoch":0,"sequence":3}}
//! {"at_ms":15,"client":1,"op":"produce_ok","value_id":7,"partition":0,"offset":41}
//! ```

use std::fmt;

use serde::{Deserialize, Serialize};

/// Identity of one record sent by the workload: unique per record, carried
/// in the record's value so that a reader can tell which send it sees.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ValueId(pub u64);

impl fmt::Display for ValueId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "value {}", self.0)
    }
}

/// Which workload client (or the injector, or the final reader) recorded an
/// event. Only used to match a commit's completion with its invocation and
/// to make examples readable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ClientId(pub u32);

impl fmt::Display for ClientId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "client {}", self.0)
    }
}

/// A record's key as the workload chose it. In JSON a bare number or a
/// string.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Key {
    /// A numeric key.
    Int(u64),
    /// A text key.
    Str(String),
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Key::Int(key) => write!(f, "{key}"),
            Key::Str(key) => write!(f, "{key:?}"),
        }
    }
}

impl From<u64> for Key {
    fn from(key: u64) -> Key {
        Key::Int(key)
    }
}

impl From<&str> for Key {
    fn from(key: &str) -> Key {
        Key::Str(key.to_owned())
    }
}

impl From<String> for Key {
    fn from(key: String) -> Key {
        Key::Str(key)
    }
}

/// The idempotent producer's stamp on a record: its identity, its epoch
/// and the record's sequence number on its partition.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ProducerStamp {
    /// Producer id given by the broker.
    pub producer_id: i64,
    /// Producer epoch; a new epoch starts a new sequence space.
    pub epoch: i16,
    /// Sequence of the record within (producer id, epoch, partition).
    pub sequence: i32,
}

/// One recorded step.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// When the recorder saw it, in milliseconds on the run's clock.
    /// Non-decreasing along the history.
    pub at_ms: u64,
    /// Who recorded it.
    pub client: ClientId,
    /// What happened.
    #[serde(flatten)]
    pub kind: EventKind,
}

impl Event {
    /// An event of `kind` recorded by `client` at `at_ms`.
    #[must_use]
    pub fn new(at_ms: u64, client: ClientId, kind: EventKind) -> Event {
        Event {
            at_ms,
            client,
            kind,
        }
    }
}

/// What an [`Event`] records. In JSON the variant is the `op` field, in
/// snake case (`produce_invoke`, `commit_ok`, `final_read`, …).
///
/// Offsets are plain `u64`s: record offsets for produce and read events,
/// the *next offset to read* for commit and reset events.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum EventKind {
    /// The workload hands a record to the producer. Exactly one per
    /// [`ValueId`], before its outcome.
    ProduceInvoke {
        /// The record's identity.
        value_id: ValueId,
        /// The record's key; `None` for an unkeyed record.
        key: Option<Key>,
        /// Topic it is sent to.
        topic: String,
        /// Partition it is sent to; `None` when the producer's partitioner
        /// chooses (the acknowledgement then says where it went).
        partition: Option<u32>,
        /// The idempotent producer's stamp; `None` without idempotence
        /// (duplicates are then allowed in the log).
        producer: Option<ProducerStamp>,
    },
    /// The record was acknowledged: it is durably in the log at
    /// `partition`/`offset`. The event's `at_ms` is the acknowledgement
    /// time.
    ProduceOk {
        /// The record's identity.
        value_id: ValueId,
        /// Partition of the topic named in the invocation.
        partition: u32,
        /// Offset the acknowledgement gave.
        offset: u64,
    },
    /// The record was definitely not written (for example refused before
    /// it was sent). Record a failure only when that is certain; anything
    /// else is [`EventKind::ProduceUnknown`].
    ProduceFail {
        /// The record's identity.
        value_id: ValueId,
        /// The error, for the report.
        error: String,
    },
    /// The outcome is indeterminate (timeout, connection lost): the record
    /// may or may not be in the log.
    ProduceUnknown {
        /// The record's identity.
        value_id: ValueId,
        /// The error, for the report.
        error: String,
    },
    /// A fetch served a record.
    Read {
        /// The consumer group reading, if any.
        group: Option<String>,
        /// The reader's generation in that group, if any.
        generation: Option<i32>,
        /// Topic read.
        topic: String,
        /// Partition read.
        partition: u32,
        /// The record's offset.
        offset: u64,
        /// The record's identity; `None` when the value could not be
        /// parsed as a workload record.
        value_id: Option<ValueId>,
        /// The record's key as served.
        key: Option<Key>,
        /// Whether the value's checksum (computed by the workload when it
        /// built the value) matched on reading.
        checksum_ok: bool,
    },
    /// A group member asks to commit `offset` as the next offset to read.
    CommitInvoke {
        /// Group id.
        group: String,
        /// The member's generation; negative for a commit without
        /// membership (manual offsets of an empty group).
        generation: i32,
        /// Topic.
        topic: String,
        /// Partition.
        partition: u32,
        /// Next offset to read.
        offset: u64,
    },
    /// The coordinator accepted the commit. Fields repeat the invocation's,
    /// which is how the two are matched (with the client).
    CommitOk {
        /// Group id.
        group: String,
        /// The member's generation.
        generation: i32,
        /// Topic.
        topic: String,
        /// Partition.
        partition: u32,
        /// Next offset to read.
        offset: u64,
    },
    /// The coordinator refused the commit (or its outcome is unknown: an
    /// unacknowledged commit never counts as committed for the checker).
    CommitFail {
        /// Group id.
        group: String,
        /// The member's generation.
        generation: i32,
        /// Topic.
        topic: String,
        /// Partition.
        partition: u32,
        /// Next offset to read.
        offset: u64,
        /// The error, for the report.
        error: String,
    },
    /// An operator reset the group's committed offset (which may move it
    /// backwards). Record it once the reset is acknowledged.
    GroupReset {
        /// Group id.
        group: String,
        /// Topic.
        topic: String,
        /// Partition.
        partition: u32,
        /// The new next offset to read.
        offset: u64,
    },
    /// From the fault injector: during `from_ms..=to_ms` the partition
    /// certainly had no quorum, so nothing could be committed to it. May be
    /// recorded anywhere in the history (typically at the end).
    NoQuorum {
        /// Topic.
        topic: String,
        /// Partition.
        partition: u32,
        /// First millisecond without quorum.
        from_ms: u64,
        /// Last millisecond without quorum.
        to_ms: u64,
    },
    /// At the end of the run, a fresh reader read the partition from the
    /// log start to its end: `(offset, value id)` in the order served. A
    /// partition read in several chunks may be recorded as several events;
    /// they are concatenated in history order.
    FinalRead {
        /// Topic.
        topic: String,
        /// Partition.
        partition: u32,
        /// The records, `None` for one that is not a workload record.
        records: Vec<(u64, Option<ValueId>)>,
    },
}

/// A recorded history: events in the order they happened.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct History {
    events: Vec<Event>,
}

/// A line of a JSON-lines history that is not an [`Event`].
#[derive(Debug, thiserror::Error)]
#[error("history line {line}: {source}")]
pub struct HistoryParseError {
    /// 1-based line number.
    pub line: usize,
    /// What serde_json said.
    #[source]
    pub source: serde_json::Error,
}

impl History {
    /// An empty history.
    #[must_use]
    pub fn new() -> History {
        History::default()
    }

    /// Appends an event; it happened after every event already recorded.
    pub fn push(&mut self, event: Event) {
        self.events.push(event);
    }

    /// Appends an event of `kind` recorded by `client` at `at_ms`.
    pub fn record(&mut self, at_ms: u64, client: ClientId, kind: EventKind) {
        self.push(Event::new(at_ms, client, kind));
    }

    /// The events, in order.
    #[must_use]
    pub fn events(&self) -> &[Event] {
        &self.events
    }

    /// Number of events.
    #[must_use]
    pub fn len(&self) -> usize {
        self.events.len()
    }

    /// Whether nothing was recorded.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    /// The history as JSON lines: one event per line, each line ending in
    /// `\n`.
    ///
    /// # Errors
    /// Only if serde_json fails to serialize an event, which these types
    /// do not provoke.
    pub fn to_json_lines(&self) -> Result<String, serde_json::Error> {
        let mut out = String::new();
        for event in &self.events {
            out.push_str(&serde_json::to_string(event)?);
            out.push('\n');
        }
        Ok(out)
    }

    /// Parses JSON lines as written by [`History::to_json_lines`]. Blank
    /// lines are skipped.
    ///
    /// # Errors
    /// The first line that is not an event, with its number.
    pub fn from_json_lines(text: &str) -> Result<History, HistoryParseError> {
        let mut history = History::new();
        for (index, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let event = serde_json::from_str(line).map_err(|source| HistoryParseError {
                line: index + 1,
                source,
            })?;
            history.push(event);
        }
        Ok(history)
    }
}

impl From<Vec<Event>> for History {
    fn from(events: Vec<Event>) -> History {
        History { events }
    }
}

impl FromIterator<Event> for History {
    fn from_iter<I: IntoIterator<Item = Event>>(events: I) -> History {
        History {
            events: events.into_iter().collect(),
        }
    }
}

impl Extend<Event> for History {
    fn extend<I: IntoIterator<Item = Event>>(&mut self, events: I) {
        self.events.extend(events);
    }
}

impl<'a> IntoIterator for &'a History {
    type Item = &'a Event;
    type IntoIter = std::slice::Iter<'a, Event>;

    fn into_iter(self) -> Self::IntoIter {
        self.events.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn every_kind() -> History {
        let c = ClientId(3);
        let mut history = History::new();
        history.record(
            1,
            c,
            EventKind::ProduceInvoke {
                value_id: ValueId(1),
                key: Some(Key::from("k1")),
                topic: "t".into(),
                partition: Some(0),
                producer: Some(ProducerStamp {
                    producer_id: i64::MAX,
                    epoch: -1,
                    sequence: i32::MIN,
                }),
            },
        );
        history.record(
            2,
            c,
            EventKind::ProduceInvoke {
                value_id: ValueId(u64::MAX),
                key: Some(Key::Int(u64::MAX)),
                topic: "t".into(),
                partition: None,
                producer: None,
            },
        );
        history.record(
            3,
            c,
            EventKind::ProduceOk {
                value_id: ValueId(1),
                partition: 0,
                offset: u64::MAX,
            },
        );
        history.record(
            4,
            c,
            EventKind::ProduceFail {
                value_id: ValueId(2),
                error: "refused".into(),
            },
        );
        history.record(
            5,
            c,
            EventKind::ProduceUnknown {
                value_id: ValueId(u64::MAX),
                error: "timed out \"quoted\"\nnewline".into(),
            },
        );
        history.record(
            6,
            c,
            EventKind::Read {
                group: Some("g".into()),
                generation: Some(4),
                topic: "t".into(),
                partition: 0,
                offset: 0,
                value_id: None,
                key: None,
                checksum_ok: false,
            },
        );
        history.record(
            7,
            c,
            EventKind::Read {
                group: None,
                generation: None,
                topic: "t".into(),
                partition: 0,
                offset: 1,
                value_id: Some(ValueId(1)),
                key: Some(Key::from("k1")),
                checksum_ok: true,
            },
        );
        history.record(
            8,
            c,
            EventKind::CommitInvoke {
                group: "g".into(),
                generation: -1,
                topic: "t".into(),
                partition: 0,
                offset: 2,
            },
        );
        history.record(
            9,
            c,
            EventKind::CommitOk {
                group: "g".into(),
                generation: -1,
                topic: "t".into(),
                partition: 0,
                offset: 2,
            },
        );
        history.record(
            10,
            c,
            EventKind::CommitFail {
                group: "g".into(),
                generation: 5,
                topic: "t".into(),
                partition: 0,
                offset: 2,
                error: "ILLEGAL_GENERATION".into(),
            },
        );
        history.record(
            11,
            c,
            EventKind::GroupReset {
                group: "g".into(),
                topic: "t".into(),
                partition: 0,
                offset: 0,
            },
        );
        history.record(
            12,
            c,
            EventKind::NoQuorum {
                topic: "t".into(),
                partition: 1,
                from_ms: 3,
                to_ms: 9,
            },
        );
        history.record(
            13,
            c,
            EventKind::FinalRead {
                topic: "t".into(),
                partition: 0,
                records: vec![(0, None), (1, Some(ValueId(1)))],
            },
        );
        history
    }

    #[test]
    fn json_lines_round_trip_every_event_kind() {
        let history = every_kind();
        let text = history.to_json_lines().unwrap();
        assert_eq!(text.lines().count(), history.len());
        assert_eq!(History::from_json_lines(&text).unwrap(), history);
    }

    #[test]
    fn json_lines_are_flat_and_snake_case() {
        let history = every_kind();
        let text = history.to_json_lines().unwrap();
        let first = text.lines().next().unwrap();
        let value: serde_json::Value = serde_json::from_str(first).unwrap();
        assert_eq!(value["op"], "produce_invoke");
        assert_eq!(value["at_ms"], 1);
        assert_eq!(value["client"], 3);
        assert_eq!(value["value_id"], 1);
        assert_eq!(value["key"], "k1");
        assert_eq!(value["producer"]["epoch"], -1);
        let last = text.lines().last().unwrap();
        let value: serde_json::Value = serde_json::from_str(last).unwrap();
        assert_eq!(value["op"], "final_read");
        assert_eq!(value["records"], serde_json::json!([[0, null], [1, 1]]));
    }

    #[test]
    fn keys_are_bare_numbers_or_strings() {
        assert_eq!(serde_json::to_string(&Key::Int(7)).unwrap(), "7");
        assert_eq!(serde_json::to_string(&Key::from("7")).unwrap(), "\"7\"");
        assert_eq!(serde_json::from_str::<Key>("7").unwrap(), Key::Int(7));
        assert_eq!(
            serde_json::from_str::<Key>("\"7\"").unwrap(),
            Key::Str("7".into())
        );
    }

    #[test]
    fn hand_written_lines_parse_with_optional_fields_missing() {
        let text = "\n{\"at_ms\":1,\"client\":0,\"op\":\"produce_invoke\",\"value_id\":9,\"topic\":\"t\"}\n\n\
                    {\"at_ms\":2,\"client\":0,\"op\":\"produce_ok\",\"value_id\":9,\"partition\":2,\"offset\":5}\n";
        let history = History::from_json_lines(text).unwrap();
        assert_eq!(history.len(), 2);
        assert_eq!(
            history.events()[0].kind,
            EventKind::ProduceInvoke {
                value_id: ValueId(9),
                key: None,
                topic: "t".into(),
                partition: None,
                producer: None,
            }
        );
    }

    #[test]
    fn a_bad_line_is_reported_with_its_number() {
        let text = "{\"at_ms\":1,\"client\":0,\"op\":\"produce_fail\",\"value_id\":9,\"error\":\"x\"}\n\
                    {\"at_ms\":2,\"client\":0,\"op\":\"produce_maybe\",\"value_id\":9}\n";
        let error = History::from_json_lines(text).unwrap_err();
        assert_eq!(error.line, 2);
        assert!(error.to_string().starts_with("history line 2: "), "{error}");
    }

    #[test]
    fn collecting_and_extending_keep_the_order() {
        let events: Vec<Event> = every_kind().events().to_vec();
        let collected: History = events.iter().cloned().collect();
        let mut extended = History::new();
        extended.extend(events.clone());
        assert_eq!(collected, extended);
        assert_eq!(History::from(events.clone()), collected);
        let at: Vec<u64> = (&collected).into_iter().map(|event| event.at_ms).collect();
        assert_eq!(at, (1..=13).collect::<Vec<_>>());
        assert!(!collected.is_empty());
        assert!(History::new().is_empty());
    }
}
