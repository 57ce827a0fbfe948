//! The matrix's overload phase (issue 37): does a cell keep its goodput
//! past its capacity, fail nothing, and recover?
//!
//! 1. **Capacity**: probes of `--probe-seconds` each, from `--rate`
//!    doubling up or halving down, then bisected twice: the highest
//!    offered rate with at least 99% achieved, p99 under 1 s and no failed
//!    record, in two probes out of two. A rate near the edge passes one
//!    probe in four on this box (600,000/s at RF 1 4×16 where 500,000/s
//!    passes every time), so the best pass is probed again, and a failed
//!    second probe falls back to the next best rate. Each probe is a plain
//!    `corelog-bench produce` run of the build's own load generator, and
//!    starts once no follower lags: a probe far past capacity leaves a
//!    follower behind, and the next probe would measure its catch-up (at
//!    RF 3 4×16, 200,000/s passed at 99.8% before a 400,000/s probe and
//!    reached 71.8% after it). The overload run waits for the same.
//! 2. **Overload**: one run offering half the capacity for 10 s, twice it
//!    for `--overload-seconds`, then half of it for as long again
//!    (`--schedule`), with `--shed`: a record that finds its producer's
//!    buffer full (`--overload-buffer-bytes`) is dropped and counted as
//!    shed, so the offered load stays open loop, as an application that
//!    cannot wait would offer it. A build whose load generator has no
//!    `--schedule` (older than this phase) is driven by this one's, and
//!    the row says so.
//!
//! Reported: goodput while overloaded (records acknowledged per second
//! during the overload, by acknowledgement time) as a fraction of the
//! capacity, failed and shed records, p99 of the records due during the
//! overload, and the seconds after it until the p99 of every 10 s window
//! stays within twice the unloaded p99 (the first half-capacity step, 10 s
//! too). A single second's p99 is no yardstick: at half capacity, with no
//! overload before, one second in three has a p99 over twice the step's
//! (an fsync stall fills a second's top percent).

use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::Value;

use crate::report::number_at;

/// One probe of the capacity search.
#[derive(Clone, Debug, Serialize)]
pub struct Probe {
    pub rate: u64,
    pub achieved: f64,
    pub p99_ms: f64,
    pub errors: u64,
    pub passed: bool,
}

impl Probe {
    /// A probe from a `corelog-bench produce --json` report.
    pub fn of(rate: u64, report: &Value) -> Probe {
        let number = |path: &[&str]| number_at(report, path);
        let achieved = number(&["records_per_second"]) / rate as f64;
        let p99_ms = number(&["append_latency", "p99_us"]) / 1000.0;
        let errors = number(&["errors"]) as u64;
        Probe {
            rate,
            achieved,
            p99_ms,
            errors,
            passed: achieved >= 0.99 && p99_ms < 1000.0 && errors == 0,
        }
    }
}

/// The rates a capacity search tries, given the probes so far: `None`
/// once it is done. Up by doubling from the first rate while probes pass
/// (at most 64x), down by halving while they fail (at most /16), then two
/// bisections between the best pass and the lowest fail, then the best
/// rate that no probe failed again until one has passed twice (a refuted
/// pass is a fail, and buys one more bisection).
pub fn next_probe(first: u64, probes: &[Probe]) -> Option<u64> {
    search_probe(first, probes).or_else(|| {
        let best = best_unrefuted(probes)?;
        (probes.iter().filter(|p| p.rate == best).count() < 2).then_some(best)
    })
}

/// The highest rate that passed every probe at it.
fn best_unrefuted(probes: &[Probe]) -> Option<u64> {
    probes
        .iter()
        .map(|p| p.rate)
        .filter(|&rate| probes.iter().all(|p| p.rate != rate || p.passed))
        .max()
}

/// The ladder and the bisections of [`next_probe`]. Second probes of a
/// rate come after it, and do not restart it: a refuted pass is also a
/// fail, so the best pass is no longer below the lowest fail.
fn search_probe(first: u64, probes: &[Probe]) -> Option<u64> {
    let Some(last) = probes.last() else {
        return Some(first);
    };
    let best_pass = probes.iter().filter(|p| p.passed).map(|p| p.rate).max();
    let lowest_fail = probes.iter().filter(|p| !p.passed).map(|p| p.rate).min();
    match (best_pass, lowest_fail) {
        (Some(_), None) => (last.rate < first * 64).then(|| last.rate * 2),
        (None, Some(_)) => (last.rate > first / 16).then(|| (last.rate / 2).max(1)),
        (Some(_), Some(fail)) => {
            // Probes after the ladder first had a pass and a fail.
            let ladder_end = (1..=probes.len())
                .find(|&len| {
                    let seen = &probes[..len];
                    seen.iter().any(|p| p.passed) && seen.iter().any(|p| !p.passed)
                })
                .unwrap_or(probes.len());
            let bisections = (ladder_end..probes.len())
                .filter(|&at| probes[..at].iter().all(|p| p.rate != probes[at].rate))
                .count();
            // A refuted pass reopens the gap below it: one more bisection.
            let refuted = probes
                .iter()
                .filter(|p| p.passed && probes.iter().any(|q| q.rate == p.rate && !q.passed))
                .count();
            let pass = best_unrefuted(probes)?;
            let mid = u64::midpoint(pass, fail);
            (pass < fail && bisections < 2 + refuted && mid > pass && mid < fail).then_some(mid)
        }
        (None, None) => None,
    }
}

/// The highest rate that passed two probes and failed none; 0 when none
/// did.
pub fn capacity(probes: &[Probe]) -> u64 {
    probes
        .iter()
        .map(|p| p.rate)
        .filter(|&rate| {
            let at_rate = || probes.iter().filter(move |p| p.rate == rate);
            at_rate().count() >= 2 && at_rate().all(|p| p.passed)
        })
        .max()
        .unwrap_or(0)
}

/// Seconds of the overload run's first, unloaded step: its p99 is the one
/// recovery is measured against, with windows as long.
pub const UNLOADED_SECONDS: u64 = crate::load::WINDOW_SECONDS as u64;

/// Half, twice, half: the overload run's schedule for `capacity`.
pub fn schedule(capacity: u64, overload_seconds: u64) -> String {
    let half = (capacity / 2).max(1);
    format!(
        "{half}:{UNLOADED_SECONDS},{}:{overload_seconds},{half}:{overload_seconds}",
        capacity * 2
    )
}

/// What the overload run showed.
#[derive(Clone, Debug, Serialize)]
pub struct Overload {
    pub goodput_fraction: f64,
    pub failed: u64,
    /// The first failed record's error, as the producer reported it.
    pub first_error: Option<String>,
    pub shed: u64,
    pub unloaded_p99_ms: f64,
    pub overload_p99_ms: f64,
    /// Seconds after the overload until every 10 s window's p99 stays
    /// within twice the unloaded p99 (each second's, from a load
    /// generator that reports no windows). `None`: not back within the
    /// recovery step.
    pub recovery_seconds: Option<u64>,
    /// Each second of the run: records acknowledged in it.
    pub acknowledged_per_second: Vec<f64>,
    /// Each second of the run: p99 of the records due in it, ms.
    pub p99_ms_per_second: Vec<f64>,
}

impl Overload {
    /// From the run's report; the overload is seconds [`UNLOADED_SECONDS`]
    /// to `UNLOADED_SECONDS + overload_seconds`.
    pub fn of(report: &Value, capacity: u64, overload_seconds: u64) -> Overload {
        let list = |key: &str| -> Vec<f64> {
            report
                .get(key)
                .and_then(Value::as_array)
                .map(|values| values.iter().filter_map(Value::as_f64).collect())
                .unwrap_or_default()
        };
        let step = |index: usize, path: &[&str]| {
            report
                .get("steps")
                .and_then(|steps| steps.get(index))
                .map_or(f64::NAN, |step| number_at(step, path))
        };
        let acknowledged = list("acknowledged_per_second");
        let p99s = list("p99_us_per_second");
        let start = UNLOADED_SECONDS as usize;
        let end = start + overload_seconds as usize;
        let overloaded: f64 = acknowledged.iter().skip(start).take(end - start).sum();
        let unloaded_p99_us = step(0, &["append_latency", "p99_us"]);
        let schedule_end = end + overload_seconds as usize;
        let windows = list("p99_us_per_window");
        // Each series from its first second that may count to the last.
        let (series, last) = if windows.is_empty() {
            (&p99s, schedule_end.min(p99s.len()).saturating_sub(1))
        } else {
            let last = schedule_end.saturating_sub(UNLOADED_SECONDS as usize);
            (&windows, last.min(windows.len().saturating_sub(1)))
        };
        let recovery = (end..=last).find(|&second| {
            series[second..=last]
                .iter()
                .all(|p99| *p99 <= 2.0 * unloaded_p99_us)
        });
        Overload {
            goodput_fraction: overloaded / overload_seconds as f64 / capacity as f64,
            failed: report.get("errors").and_then(Value::as_u64).unwrap_or(0),
            first_error: report
                .get("first_error")
                .and_then(Value::as_str)
                .map(str::to_owned),
            shed: report.get("shed").and_then(Value::as_u64).unwrap_or(0),
            unloaded_p99_ms: unloaded_p99_us / 1000.0,
            overload_p99_ms: step(1, &["append_latency", "p99_us"]) / 1000.0,
            recovery_seconds: recovery.map(|second| (second - end) as u64),
            p99_ms_per_second: p99s.iter().map(|p99| p99 / 1000.0).collect(),
            acknowledged_per_second: acknowledged,
        }
    }
}

/// The load generator of the overload run: the build's own if it knows
/// `--schedule`, else this one.
pub fn load_generator(build_dir: &Path) -> Result<(PathBuf, &'static str), String> {
    let own = build_dir.join("corelog-bench");
    let help = std::process::Command::new(&own)
        .args(["produce", "--help"])
        .output()
        .map_err(|error| format!("cannot run {}: {error}", own.display()))?;
    if String::from_utf8_lossy(&help.stdout).contains("--schedule") {
        Ok((own, "own"))
    } else {
        let current = std::env::current_exe().map_err(|error| error.to_string())?;
        Ok((current, "current"))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;

    use super::*;

    fn probe(rate: u64, passed: bool) -> Probe {
        Probe {
            rate,
            achieved: if passed { 1.0 } else { 0.5 },
            p99_ms: 10.0,
            errors: 0,
            passed,
        }
    }

    #[test]
    fn the_search_doubles_halves_bisects_twice_then_probes_the_best_again() {
        let mut probes = Vec::new();
        // Capacity 250: 100 passes, 200 passes, 400 fails, then 300, 250,
        // and 250 again.
        let capacity_of = |rate: u64| rate <= 250;
        while let Some(rate) = next_probe(100, &probes) {
            probes.push(probe(rate, capacity_of(rate)));
            assert!(probes.len() < 20, "{probes:?}");
        }
        let rates: Vec<u64> = probes.iter().map(|p| p.rate).collect();
        assert_eq!(rates, [100, 200, 400, 300, 250, 250]);
        assert_eq!(capacity(&probes), 250);
        // From above: 100 fails, 50 passes, then 75 and 87 (or 62), and 75
        // again.
        let mut probes = Vec::new();
        while let Some(rate) = next_probe(100, &probes) {
            probes.push(probe(rate, rate <= 80));
        }
        let rates: Vec<u64> = probes.iter().map(|p| p.rate).collect();
        assert_eq!(rates, [100, 50, 75, 87, 75]);
        assert_eq!(capacity(&probes), 75);
    }

    #[test]
    fn a_probe_passes_with_99_percent_achieved_p99_under_a_second_and_no_error() {
        let report = |rps: f64, p99_us: u64, errors: u64| json!({"records_per_second": rps, "append_latency": {"p99_us": p99_us}, "errors": errors});
        assert!(Probe::of(1000, &report(995.0, 900_000, 0)).passed);
        assert!(!Probe::of(1000, &report(980.0, 900_000, 0)).passed);
        assert!(!Probe::of(1000, &report(1000.0, 1_000_000, 0)).passed);
        assert!(!Probe::of(1000, &report(1000.0, 10, 1)).passed);
    }

    #[test]
    fn the_overload_run_is_read_per_second() {
        // 10 s unloaded, 3 s overloaded, 3 s recovering.
        let mut acknowledged = vec![50u64; 10];
        acknowledged.extend([90, 100, 95, 50, 50, 50]);
        let mut p99 = vec![1_000u64; 10];
        p99.extend([50_000, 60_000, 70_000, 30_000, 1_500, 1_900]);
        let report = json!({
            "errors": 0,
            "shed": 42,
            "acknowledged_per_second": acknowledged,
            "p99_us_per_second": p99,
            "steps": [
                {"append_latency": {"p99_us": 1_000}},
                {"append_latency": {"p99_us": 70_000}},
                {"append_latency": {"p99_us": 20_000}},
            ],
        });
        let overload = Overload::of(&report, 100, 3);
        assert!((overload.goodput_fraction - 0.95).abs() < 1e-9);
        assert_eq!((overload.failed, overload.shed), (0, 42));
        assert!((overload.overload_p99_ms - 70.0).abs() < 1e-9);
        assert_eq!(overload.recovery_seconds, Some(1));
        assert_eq!(schedule(100, 30), "50:10,200:30,50:30");
    }

    #[test]
    fn recovery_is_read_from_ten_second_windows_when_the_report_has_them() {
        // 10 s unloaded, 15 s overloaded, 15 s recovering: windows that
        // start in the recovery step's first 5 s end inside it.
        let report = |windows: &[u64]| {
            json!({
                "acknowledged_per_second": vec![50u64; 40],
                // Spiky seconds throughout: this rule would never recover.
                "p99_us_per_second": vec![5_000u64; 40],
                "p99_us_per_window": windows,
                "steps": [{"append_latency": {"p99_us": 1_000}}],
            })
        };
        let mut windows = vec![1_500u64; 25];
        windows.extend([9_000, 9_000, 1_900, 2_000, 1_000, 1_000]);
        windows.extend([50_000; 9]); // past the step: not counted
        assert_eq!(
            Overload::of(&report(&windows), 100, 15).recovery_seconds,
            Some(2)
        );
        windows[29] = 2_100;
        assert_eq!(
            Overload::of(&report(&windows), 100, 15).recovery_seconds,
            Some(5)
        );
        windows[30] = 2_100;
        assert_eq!(
            Overload::of(&report(&windows), 100, 15).recovery_seconds,
            None
        );
        assert_eq!(Overload::of(&report(&[]), 100, 15).recovery_seconds, None);
    }

    #[test]
    fn the_capacity_is_a_rate_that_passed_twice() {
        // 600 passes once in four, 500 always: the search confirms 600,
        // finds it refuted, bisects once more and confirms 500.
        let mut passes_at_600 = [true, false].into_iter();
        let mut probes = Vec::new();
        while let Some(rate) = next_probe(100, &probes) {
            let passed = match rate {
                ..=500 => true,
                600 => passes_at_600.next().unwrap(),
                _ => false,
            };
            probes.push(probe(rate, passed));
            assert!(probes.len() < 20, "{probes:?}");
        }
        let rates: Vec<u64> = probes.iter().map(|p| p.rate).collect();
        assert_eq!(rates, [100, 200, 400, 800, 600, 700, 600, 500, 500]);
        assert_eq!(capacity(&probes), 500);
        // Nothing passes: no capacity, no second probes.
        let mut probes = Vec::new();
        while let Some(rate) = next_probe(100, &probes) {
            probes.push(probe(rate, false));
        }
        assert_eq!(capacity(&probes), 0);
        assert_eq!(probes.len(), 5);
    }
}
