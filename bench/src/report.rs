//! Latency summaries and the printed/JSON report rows.

use hdrhistogram::Histogram;
use serde::Serialize;
use serde_json::Value;

/// Latency percentiles in microseconds.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Latency {
    pub p50_us: u64,
    pub p95_us: u64,
    pub p99_us: u64,
    pub p999_us: u64,
    pub max_us: u64,
}

impl Latency {
    pub fn of(histogram: &Histogram<u64>) -> Self {
        Latency {
            p50_us: histogram.value_at_quantile(0.50),
            p95_us: histogram.value_at_quantile(0.95),
            p99_us: histogram.value_at_quantile(0.99),
            p999_us: histogram.value_at_quantile(0.999),
            max_us: histogram.max(),
        }
    }
}

/// A histogram of microseconds from 1 µs to 60 s with 3 significant digits.
pub fn latency_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000, 3).expect("valid histogram bounds")
}

pub fn millis(micros: u64) -> String {
    format!("{:.2}", micros as f64 / 1000.0)
}

/// The number at `path` in a JSON report (a `produce --json` run's), or
/// NaN where there is none, so that a missing figure shows as such.
#[must_use]
pub fn number_at(report: &Value, path: &[&str]) -> f64 {
    path.iter()
        .try_fold(report, |value, key| value.get(key))
        .and_then(Value::as_f64)
        .unwrap_or(f64::NAN)
}
