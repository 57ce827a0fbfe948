//! The duplicate-safe sink of the seed's search projection (§13): order
//! events applied to a SQLite view so that a replayed event has no second
//! effect.
//!
//! ```text
//! apply(event M17, order O51, version 3, status paid):
//!   begin transaction
//!   insert processed(M17, fingerprint) if absent
//!   if already present: verify the fingerprint; return the saved result
//!   update O51 only if incoming version > stored version
//!   commit
//! then commit the group's next offset
//! ```
//!
//! The processed-event row and the order update commit together or not at
//! all, in the sink's own database: the broker cannot reach into it. The
//! group offset is committed only after this transaction (the caller's
//! job), so a crash in between replays the event, and the processed row
//! turns the replay into a no-op. The version check is a separate guard: it
//! keeps a delayed older event from overwriting a newer view.
//!
//! Shared by the example (`main.rs`) and the multi-process tests
//! (`tests/tests/groups.rs`), which include this file by path.

#![allow(dead_code)]

use std::fmt;
use std::path::Path;

use rusqlite::{Connection, OptionalExtension, params};

/// One order event, as the example's producer writes it: the text
/// `event_id,order_id,version,status`, for example `M17,O51,3,paid`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OrderEvent {
    /// The application's event identity: what deduplicates.
    pub event_id: String,
    /// The order the event is about.
    pub order_id: String,
    /// The order's version after this event; newer wins.
    pub version: u64,
    /// The order's status after this event.
    pub status: String,
}

/// Why an event was not applied.
#[derive(Debug)]
pub enum SinkError {
    /// The payload is not an order event.
    Malformed(String),
    /// The event id was processed before with different content: two
    /// producers reused an id, or the payload was corrupted. Never applied
    /// silently.
    FingerprintMismatch {
        /// The event id.
        event_id: String,
        /// The fingerprint saved when it was first processed.
        saved: String,
        /// This payload's fingerprint.
        incoming: String,
    },
    /// The database failed; nothing of the event was saved.
    Database(rusqlite::Error),
}

impl fmt::Display for SinkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SinkError::Malformed(why) => write!(f, "not an order event: {why}"),
            SinkError::FingerprintMismatch {
                event_id,
                saved,
                incoming,
            } => write!(
                f,
                "event {event_id} was processed before with fingerprint {saved}, this one has {incoming}: an event id was reused"
            ),
            SinkError::Database(error) => write!(f, "projection database: {error}"),
        }
    }
}

impl std::error::Error for SinkError {}

impl From<rusqlite::Error> for SinkError {
    fn from(error: rusqlite::Error) -> SinkError {
        SinkError::Database(error)
    }
}

impl OrderEvent {
    /// Parses `event_id,order_id,version,status`.
    ///
    /// # Errors
    /// [`SinkError::Malformed`] saying what is wrong.
    pub fn parse(payload: &[u8]) -> Result<OrderEvent, SinkError> {
        let text = std::str::from_utf8(payload)
            .map_err(|_| SinkError::Malformed("payload is not UTF-8".to_owned()))?;
        let fields: Vec<&str> = text.trim().split(',').map(str::trim).collect();
        let [event_id, order_id, version, status] = fields[..] else {
            return Err(SinkError::Malformed(format!(
                "{text:?} does not have 4 comma-separated fields (event_id,order_id,version,status)"
            )));
        };
        if event_id.is_empty() || order_id.is_empty() || status.is_empty() {
            return Err(SinkError::Malformed(format!("{text:?} has an empty field")));
        }
        let version = version
            .parse()
            .map_err(|_| SinkError::Malformed(format!("version {version:?} is not a number")))?;
        Ok(OrderEvent {
            event_id: event_id.to_owned(),
            order_id: order_id.to_owned(),
            version,
            status: status.to_owned(),
        })
    }

    /// The payload text of this event.
    #[must_use]
    pub fn encode(&self) -> String {
        format!(
            "{},{},{},{}",
            self.event_id, self.order_id, self.version, self.status
        )
    }

    /// A stable fingerprint of the event's content (FNV-1a 64 of its
    /// canonical text), saved with the event id so that a reused id with
    /// other content is caught. Stable across builds, unlike std's hasher.
    #[must_use]
    pub fn fingerprint(&self) -> String {
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for byte in self.encode().bytes() {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
        format!("{hash:016x}")
    }
}

/// What applying an event did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Applied {
    /// The order row now shows this event.
    Updated,
    /// The order already had this or a newer version; only the event was
    /// recorded as processed.
    Stale {
        /// The version the order has.
        stored_version: u64,
    },
    /// The event was processed before (a replay); nothing changed. Carries
    /// the saved result of the first time.
    Duplicate {
        /// `updated` or `stale`.
        first_result: String,
    },
}

/// An order as the projection shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OrderView {
    /// Order id.
    pub order_id: String,
    /// Latest version applied.
    pub version: u64,
    /// Status at that version.
    pub status: String,
    /// The event that set it.
    pub last_event: String,
    /// How many times the row was changed: each event's effect counts once.
    pub updates: u64,
}

/// The search projection: a SQLite database with the order view and the
/// processed-event table.
#[derive(Debug)]
pub struct Projection {
    connection: Connection,
}

impl Projection {
    /// Opens (or creates) the projection at `path`.
    ///
    /// # Errors
    /// The database's errors.
    pub fn open(path: &Path) -> Result<Projection, SinkError> {
        Projection::init(Connection::open(path)?)
    }

    /// A projection in memory, for tests.
    ///
    /// # Errors
    /// The database's errors.
    pub fn in_memory() -> Result<Projection, SinkError> {
        Projection::init(Connection::open_in_memory()?)
    }

    fn init(connection: Connection) -> Result<Projection, SinkError> {
        // WAL plus synchronous=FULL: a committed transaction survives a
        // crash of the process or the machine, which the offset commit
        // after it relies on.
        connection.pragma_update(None, "journal_mode", "WAL")?;
        connection.pragma_update(None, "synchronous", "FULL")?;
        connection.execute_batch(
            "CREATE TABLE IF NOT EXISTS processed (
                 event_id TEXT PRIMARY KEY,
                 fingerprint TEXT NOT NULL,
                 result TEXT NOT NULL
             );
             CREATE TABLE IF NOT EXISTS orders (
                 order_id TEXT PRIMARY KEY,
                 version INTEGER NOT NULL,
                 status TEXT NOT NULL,
                 last_event TEXT NOT NULL,
                 updates INTEGER NOT NULL
             );",
        )?;
        Ok(Projection { connection })
    }

    /// Applies one event in one transaction; see the module docs.
    ///
    /// # Errors
    /// [`SinkError::FingerprintMismatch`] for a reused event id,
    /// [`SinkError::Database`]; in both cases nothing was saved.
    pub fn apply(&mut self, event: &OrderEvent) -> Result<Applied, SinkError> {
        let transaction = self.connection.transaction()?;
        let fingerprint = event.fingerprint();
        let saved: Option<(String, String)> = transaction
            .query_row(
                "SELECT fingerprint, result FROM processed WHERE event_id = ?1",
                params![event.event_id],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .optional()?;
        if let Some((saved, first_result)) = saved {
            // Dropping the transaction rolls back: a replay writes nothing.
            if saved != fingerprint {
                return Err(SinkError::FingerprintMismatch {
                    event_id: event.event_id.clone(),
                    saved,
                    incoming: fingerprint,
                });
            }
            return Ok(Applied::Duplicate { first_result });
        }
        let stored: Option<i64> = transaction
            .query_row(
                "SELECT version FROM orders WHERE order_id = ?1",
                params![event.order_id],
                |row| row.get(0),
            )
            .optional()?;
        let stored = stored.map(|version| u64::try_from(version).unwrap_or(0));
        let version = i64::try_from(event.version)
            .map_err(|_| SinkError::Malformed(format!("version {} is too large", event.version)))?;
        let applied = match stored {
            Some(stored_version) if stored_version >= event.version => {
                Applied::Stale { stored_version }
            }
            _ => {
                transaction.execute(
                    "INSERT INTO orders (order_id, version, status, last_event, updates)
                     VALUES (?1, ?2, ?3, ?4, 1)
                     ON CONFLICT (order_id) DO UPDATE SET
                         version = excluded.version, status = excluded.status,
                         last_event = excluded.last_event, updates = updates + 1",
                    params![event.order_id, version, event.status, event.event_id],
                )?;
                Applied::Updated
            }
        };
        let result = match applied {
            Applied::Stale { .. } => "stale",
            _ => "updated",
        };
        transaction.execute(
            "INSERT INTO processed (event_id, fingerprint, result) VALUES (?1, ?2, ?3)",
            params![event.event_id, fingerprint, result],
        )?;
        transaction.commit()?;
        Ok(applied)
    }

    /// One order's view.
    ///
    /// # Errors
    /// The database's errors.
    pub fn order(&self, order_id: &str) -> Result<Option<OrderView>, SinkError> {
        Ok(self
            .connection
            .query_row(
                "SELECT order_id, version, status, last_event, updates FROM orders WHERE order_id = ?1",
                params![order_id],
                |row| {
                    Ok(OrderView {
                        order_id: row.get(0)?,
                        version: u64::try_from(row.get::<_, i64>(1)?).unwrap_or(0),
                        status: row.get(2)?,
                        last_event: row.get(3)?,
                        updates: u64::try_from(row.get::<_, i64>(4)?).unwrap_or(0),
                    })
                },
            )
            .optional()?)
    }

    /// Every order, by id.
    ///
    /// # Errors
    /// The database's errors.
    pub fn orders(&self) -> Result<Vec<OrderView>, SinkError> {
        let mut statement = self.connection.prepare(
            "SELECT order_id, version, status, last_event, updates FROM orders ORDER BY order_id",
        )?;
        let rows = statement.query_map([], |row| {
            Ok(OrderView {
                order_id: row.get(0)?,
                version: u64::try_from(row.get::<_, i64>(1)?).unwrap_or(0),
                status: row.get(2)?,
                last_event: row.get(3)?,
                updates: u64::try_from(row.get::<_, i64>(4)?).unwrap_or(0),
            })
        })?;
        Ok(rows.collect::<Result<Vec<_>, _>>()?)
    }

    /// How many distinct events were processed.
    ///
    /// # Errors
    /// The database's errors.
    pub fn processed_count(&self) -> Result<u64, SinkError> {
        let count: i64 =
            self.connection
                .query_row("SELECT COUNT(*) FROM processed", [], |row| row.get(0))?;
        Ok(u64::try_from(count).unwrap_or(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(text: &str) -> OrderEvent {
        OrderEvent::parse(text.as_bytes()).unwrap()
    }

    #[test]
    fn a_replayed_event_has_no_second_effect() {
        let mut projection = Projection::in_memory().unwrap();
        assert_eq!(
            projection.apply(&event("M17,O51,3,paid")).unwrap(),
            Applied::Updated
        );
        assert_eq!(
            projection.apply(&event("M17,O51,3,paid")).unwrap(),
            Applied::Duplicate {
                first_result: "updated".to_owned()
            }
        );
        let order = projection.order("O51").unwrap().unwrap();
        assert_eq!(
            (order.version, order.status.as_str(), order.updates),
            (3, "paid", 1)
        );
        assert_eq!(projection.processed_count().unwrap(), 1);
    }

    #[test]
    fn an_older_version_never_overwrites_a_newer_view() {
        let mut projection = Projection::in_memory().unwrap();
        projection.apply(&event("M18,O51,4,shipped")).unwrap();
        assert_eq!(
            projection.apply(&event("M17,O51,3,paid")).unwrap(),
            Applied::Stale { stored_version: 4 }
        );
        assert_eq!(projection.order("O51").unwrap().unwrap().status, "shipped");
        assert_eq!(
            projection.processed_count().unwrap(),
            2,
            "the stale event is recorded too"
        );
    }

    #[test]
    fn a_reused_event_id_with_other_content_is_refused_and_saves_nothing() {
        let mut projection = Projection::in_memory().unwrap();
        projection.apply(&event("M17,O51,3,paid")).unwrap();
        let error = projection.apply(&event("M17,O51,5,refunded")).unwrap_err();
        assert!(
            matches!(error, SinkError::FingerprintMismatch { .. }),
            "{error}"
        );
        assert_eq!(projection.order("O51").unwrap().unwrap().version, 3);
    }

    #[test]
    fn malformed_payloads_say_what_is_wrong() {
        for bad in ["", "M1,O1,3", "M1,O1,three,paid", "M1,,3,paid"] {
            let error = OrderEvent::parse(bad.as_bytes()).unwrap_err();
            assert!(matches!(error, SinkError::Malformed(_)), "{bad}: {error}");
        }
        assert_eq!(event(" M1 , O1 , 2 , paid ").encode(), "M1,O1,2,paid");
    }
}
