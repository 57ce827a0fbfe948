//! raft-rs logs through `slog`; corelog logs through `tracing`. This drain
//! forwards one to the other, under the target `corelog_controller::raft`,
//! and formats nothing unless a subscriber wants the event.
//!
//! Levels are shifted down one step: raft-rs logs every election and
//! every rejected append at `info`, which is a debug detail for a broker.

use std::fmt::{self, Write as _};

use slog::{Drain, KV, Key, Level, OwnedKVList, Record, Serializer};

/// The target raft-rs events appear under.
pub const RAFT_TARGET: &str = "corelog_controller::raft";

/// A `slog` drain that forwards to `tracing`.
#[derive(Clone, Copy, Debug, Default)]
pub struct TracingDrain;

impl Drain for TracingDrain {
    type Ok = ();
    type Err = slog::Never;

    fn log(&self, record: &Record<'_>, values: &OwnedKVList) -> Result<(), slog::Never> {
        macro_rules! forward {
            ($level:expr) => {
                if tracing::enabled!(target: RAFT_TARGET, $level) {
                    let message = render(record, values);
                    tracing::event!(target: RAFT_TARGET, $level, "{message}");
                }
            };
        }
        match record.level() {
            Level::Critical | Level::Error => forward!(tracing::Level::ERROR),
            Level::Warning => forward!(tracing::Level::INFO),
            Level::Info => forward!(tracing::Level::DEBUG),
            Level::Debug | Level::Trace => forward!(tracing::Level::TRACE),
        }
        Ok(())
    }
}

/// The logger handed to raft-rs.
pub fn raft_logger() -> slog::Logger {
    slog::Logger::root(TracingDrain.fuse(), slog::o!())
}

fn render(record: &Record<'_>, values: &OwnedKVList) -> String {
    let mut line = KeyValues(record.msg().to_string());
    // A failing serialiser only loses key-values from a log line; say so
    // in the line rather than drop them silently.
    let serialized = record
        .kv()
        .serialize(record, &mut line)
        .and_then(|()| values.serialize(record, &mut line));
    if let Err(error) = serialized {
        line.0.push_str(&format!(" (key-values lost: {error})"));
    }
    line.0
}

struct KeyValues(String);

impl Serializer for KeyValues {
    fn emit_arguments(&mut self, key: Key, value: &fmt::Arguments<'_>) -> slog::Result {
        write!(self.0, " {key}={value}")?;
        Ok(())
    }
}
