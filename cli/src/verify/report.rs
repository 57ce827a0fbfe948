//! The checker's verdict: a count and examples per check, informational
//! counts, and problems with the history itself.

use std::collections::BTreeMap;
use std::fmt;

use serde::Serialize;

/// Examples of each failing check that [`Report`]'s `Display` prints (the
/// report itself holds up to the checker's limit).
pub const DISPLAY_EXAMPLES: usize = 5;

/// One of the contracts the checker verifies. The order of the variants is
/// the order of the report.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckKind {
    /// An acknowledged record is not in the final read (C1).
    AcknowledgedLost,
    /// An acknowledged record is in the final read, but not at the
    /// partition and offset its acknowledgement gave.
    AcknowledgedOffsetChanged,
    /// A record whose write was never acknowledged was served to a reader
    /// (so it was committed), and is not in the final read.
    ReadThenLost,
    /// A record was read that the workload never sent, or that is not a
    /// workload record at all.
    PhantomRead,
    /// A record was read whose write definitely failed.
    FailedWriteVisible,
    /// A record sent by an idempotent producer is in the final read at more
    /// than one offset (C5).
    Duplicate,
    /// Within one producer id and epoch on one partition, acknowledged
    /// offsets do not increase with the sequence.
    ProducerOrder,
    /// The final read of a partition does not have strictly increasing
    /// offsets.
    FinalReadOrder,
    /// Two reads of the same partition and offset saw different records.
    DivergentRead,
    /// A group's committed offset went backwards without an operator reset.
    CommitRegression,
    /// A commit in a generation older than one already seen for the group
    /// was accepted.
    StaleGenerationCommit,
    /// A record was served whose value fails its checksum.
    CorruptRead,
    /// An append was acknowledged while its partition had no quorum.
    AckWithoutQuorum,
}

impl CheckKind {
    /// Every check, in report order.
    pub const ALL: [CheckKind; 13] = [
        CheckKind::AcknowledgedLost,
        CheckKind::AcknowledgedOffsetChanged,
        CheckKind::ReadThenLost,
        CheckKind::PhantomRead,
        CheckKind::FailedWriteVisible,
        CheckKind::Duplicate,
        CheckKind::ProducerOrder,
        CheckKind::FinalReadOrder,
        CheckKind::DivergentRead,
        CheckKind::CommitRegression,
        CheckKind::StaleGenerationCommit,
        CheckKind::CorruptRead,
        CheckKind::AckWithoutQuorum,
    ];

    /// A short human label, as printed in the summary table.
    #[must_use]
    pub fn label(self) -> &'static str {
        match self {
            CheckKind::AcknowledgedLost => "acknowledged records lost",
            CheckKind::AcknowledgedOffsetChanged => "acknowledged offset changed",
            CheckKind::ReadThenLost => "read records lost",
            CheckKind::PhantomRead => "phantom reads",
            CheckKind::FailedWriteVisible => "failed write visible",
            CheckKind::Duplicate => "duplicates (idempotent)",
            CheckKind::ProducerOrder => "producer order",
            CheckKind::FinalReadOrder => "final read order",
            CheckKind::DivergentRead => "divergent reads",
            CheckKind::CommitRegression => "committed offset regressions",
            CheckKind::StaleGenerationCommit => "stale-generation commits",
            CheckKind::CorruptRead => "checksum failures served",
            CheckKind::AckWithoutQuorum => "acks without quorum",
        }
    }
}

impl fmt::Display for CheckKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// The result of one check.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Check {
    /// How many violations; `None` when the history holds no evidence for
    /// this check (no final read, no reads, no commits, no quorum data, …),
    /// which is not the same as `Some(0)`.
    pub violations: Option<u64>,
    /// The first violations, in history order, as sentences; at most the
    /// checker's example limit.
    pub examples: Vec<String>,
}

impl Check {
    /// A check the history gives no evidence for.
    #[must_use]
    pub fn not_applicable() -> Check {
        Check::default()
    }

    /// Whether the check ran and found at least one violation.
    #[must_use]
    pub fn failed(&self) -> bool {
        self.violations.is_some_and(|count| count > 0)
    }
}

/// Inconsistencies in the history itself (an outcome without an
/// invocation, two outcomes for one record, time going backwards, an
/// acknowledgement on a partition the final read did not cover, …). They
/// are not log violations, but they make the verdict unreliable, so a
/// report with any is not clean.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct HistoryProblems {
    /// How many.
    pub count: u64,
    /// The first ones, in the order found.
    pub examples: Vec<String>,
}

/// Records of one partition in the final read.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PartitionRecords {
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: u32,
    /// Records the final read returned.
    pub records: u64,
}

/// Informational counts: what the history contains, not verdicts.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Stats {
    /// Events in the history.
    pub events: u64,
    /// Records sent (produce invocations).
    pub sent: u64,
    /// Records acknowledged.
    pub acknowledged: u64,
    /// Records whose write definitely failed.
    pub failed: u64,
    /// Records whose write outcome is indeterminate.
    pub unknown: u64,
    /// Records sent without any outcome recorded (treated as unknown).
    pub unresolved: u64,
    /// Unknown or unresolved records that a read or the final read shows,
    /// so they were written after all.
    pub unknown_in_log: u64,
    /// Reads (records served by fetches), the final read excluded.
    pub reads: u64,
    /// Commits invoked.
    pub commits_invoked: u64,
    /// Commits accepted.
    pub commits_ok: u64,
    /// Commits refused.
    pub commits_failed: u64,
    /// Operator resets of a group's offsets.
    pub group_resets: u64,
    /// No-quorum intervals supplied by the fault injector.
    pub no_quorum_intervals: u64,
    /// Acknowledgements received inside a no-quorum interval whose send
    /// started before it: the append may have been committed just before
    /// quorum was lost, so they are not violations.
    pub acks_straddling_no_quorum: u64,
    /// Records of producers without idempotence that the final read shows
    /// more than once (allowed: at-least-once).
    pub duplicates_without_idempotence: u64,
    /// Final-read records per partition, by topic and partition; empty
    /// without a final read.
    pub final_read: Vec<PartitionRecords>,
}

/// What [`check`](super::check) found.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Report {
    /// Every check of [`CheckKind::ALL`], in that order.
    pub checks: BTreeMap<CheckKind, Check>,
    /// Problems with the history itself.
    pub history_problems: HistoryProblems,
    /// Informational counts.
    pub stats: Stats,
}

impl Report {
    /// The result of one check.
    #[must_use]
    pub fn check(&self, kind: CheckKind) -> &Check {
        static NOT_APPLICABLE: Check = Check {
            violations: None,
            examples: Vec::new(),
        };
        self.checks.get(&kind).unwrap_or(&NOT_APPLICABLE)
    }

    /// Violations of one check; 0 when not applicable.
    #[must_use]
    pub fn count(&self, kind: CheckKind) -> u64 {
        self.check(kind).violations.unwrap_or(0)
    }

    /// Violations of all checks together.
    #[must_use]
    pub fn violations(&self) -> u64 {
        self.checks
            .values()
            .filter_map(|check| check.violations)
            .sum()
    }

    /// No violation and no problem with the history: the history proves
    /// the contracts held (as far as the applicable checks go).
    #[must_use]
    pub fn is_clean(&self) -> bool {
        self.violations() == 0 && self.history_problems.count == 0
    }

    /// The report as pretty JSON, with `clean` and `violations` computed
    /// and added at the top.
    ///
    /// # Errors
    /// Only if serde_json fails to serialize the report, which these types
    /// do not provoke.
    pub fn to_json(&self) -> Result<String, serde_json::Error> {
        #[derive(Serialize)]
        struct Verdict<'a> {
            clean: bool,
            violations: u64,
            #[serde(flatten)]
            report: &'a Report,
        }
        serde_json::to_string_pretty(&Verdict {
            clean: self.is_clean(),
            violations: self.violations(),
            report: self,
        })
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const WIDTH: usize = 30;
        writeln!(f, "{:<WIDTH$} {:>9}  result", "check", "count")?;
        for kind in CheckKind::ALL {
            let check = self.check(kind);
            let (count, result) = match check.violations {
                None => ("-".to_owned(), "n/a"),
                Some(0) => ("0".to_owned(), "ok"),
                Some(count) => (count.to_string(), "VIOLATION"),
            };
            writeln!(f, "{:<WIDTH$} {count:>9}  {result}", kind.label())?;
        }
        let problems = self.history_problems.count;
        let result = if problems == 0 { "ok" } else { "PROBLEM" };
        writeln!(f, "{:<WIDTH$} {problems:>9}  {result}", "history problems")?;

        let s = &self.stats;
        writeln!(f)?;
        writeln!(
            f,
            "events {}; sent {}, acknowledged {}, failed {}, unknown {}, unresolved {} \
             ({} of the unknown or unresolved are in the log)",
            s.events, s.sent, s.acknowledged, s.failed, s.unknown, s.unresolved, s.unknown_in_log
        )?;
        writeln!(
            f,
            "reads {}; commits invoked {}, ok {}, failed {}; group resets {}",
            s.reads, s.commits_invoked, s.commits_ok, s.commits_failed, s.group_resets
        )?;
        writeln!(
            f,
            "no-quorum intervals {} ({} acks straddle one); duplicates without idempotence {}",
            s.no_quorum_intervals, s.acks_straddling_no_quorum, s.duplicates_without_idempotence
        )?;
        if s.final_read.is_empty() {
            writeln!(f, "final read: none")?;
        } else {
            let partitions: Vec<String> = s
                .final_read
                .iter()
                .map(|p| format!("{}/{} {}", p.topic, p.partition, p.records))
                .collect();
            writeln!(f, "final read records: {}", partitions.join(", "))?;
        }

        for kind in CheckKind::ALL {
            let check = self.check(kind);
            if let Some(count) = check.violations.filter(|&count| count > 0) {
                writeln!(f)?;
                writeln!(f, "VIOLATION {} ({count}):", kind.label())?;
                write_examples(f, &check.examples, count)?;
            }
        }
        if problems > 0 {
            writeln!(f)?;
            writeln!(f, "PROBLEM history ({problems}):")?;
            write_examples(f, &self.history_problems.examples, problems)?;
        }

        writeln!(f)?;
        let violations = self.violations();
        if self.is_clean() {
            write!(f, "verdict: clean")
        } else if violations == 0 {
            write!(
                f,
                "verdict: no violation found, but the history has {problems} problem(s)"
            )
        } else {
            write!(f, "verdict: {violations} violation(s)")
        }
    }
}

/// Prints up to [`DISPLAY_EXAMPLES`] examples, then how many more there are.
fn write_examples(f: &mut fmt::Formatter<'_>, examples: &[String], count: u64) -> fmt::Result {
    for example in examples.iter().take(DISPLAY_EXAMPLES) {
        writeln!(f, "  - {example}")?;
    }
    let shown = u64::try_from(examples.len().min(DISPLAY_EXAMPLES)).unwrap_or(u64::MAX);
    if count > shown {
        writeln!(f, "  ... and {} more", count - shown)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(counts: &[(CheckKind, Option<u64>)]) -> Report {
        let mut checks: BTreeMap<CheckKind, Check> = CheckKind::ALL
            .iter()
            .map(|&kind| {
                (
                    kind,
                    Check {
                        violations: Some(0),
                        examples: Vec::new(),
                    },
                )
            })
            .collect();
        for &(kind, violations) in counts {
            let examples = (0..violations.unwrap_or(0))
                .map(|i| format!("example {i} of {kind}"))
                .collect();
            checks.insert(
                kind,
                Check {
                    violations,
                    examples,
                },
            );
        }
        Report {
            checks,
            history_problems: HistoryProblems::default(),
            stats: Stats::default(),
        }
    }

    #[test]
    fn all_lists_every_kind_once_in_order() {
        let mut sorted = CheckKind::ALL.to_vec();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted, CheckKind::ALL.to_vec());
    }

    #[test]
    fn violations_sum_applicable_counts_only() {
        let report = sample(&[
            (CheckKind::AcknowledgedLost, Some(2)),
            (CheckKind::CorruptRead, Some(3)),
            (CheckKind::AckWithoutQuorum, None),
        ]);
        assert_eq!(report.violations(), 5);
        assert!(!report.is_clean());
        assert_eq!(report.count(CheckKind::AckWithoutQuorum), 0);
        assert!(report.check(CheckKind::AcknowledgedLost).failed());
        assert!(!report.check(CheckKind::AckWithoutQuorum).failed());
    }

    #[test]
    fn history_problems_make_a_report_unclean_without_violations() {
        let mut report = sample(&[]);
        assert!(report.is_clean());
        report.history_problems = HistoryProblems {
            count: 1,
            examples: vec!["value 3: ProduceOk without ProduceInvoke".into()],
        };
        assert_eq!(report.violations(), 0);
        assert!(!report.is_clean());
        let text = report.to_string();
        assert!(text.contains("PROBLEM history (1):"), "{text}");
        assert!(text.ends_with("but the history has 1 problem(s)"), "{text}");
    }

    #[test]
    fn display_prints_ok_violation_and_not_applicable() {
        let report = sample(&[
            (CheckKind::Duplicate, Some(7)),
            (CheckKind::AckWithoutQuorum, None),
        ]);
        let text = report.to_string();
        let line = |label: &str| {
            text.lines()
                .find(|line| line.starts_with(label))
                .unwrap()
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
        };
        assert_eq!(
            line("duplicates (idempotent)"),
            "duplicates (idempotent) 7 VIOLATION"
        );
        assert_eq!(line("acks without quorum"), "acks without quorum - n/a");
        assert_eq!(line("phantom reads"), "phantom reads 0 ok");
        assert!(
            text.contains("VIOLATION duplicates (idempotent) (7):"),
            "{text}"
        );
        assert!(
            text.contains("  - example 4 of duplicates (idempotent)"),
            "{text}"
        );
        assert!(!text.contains("example 5 of"), "{text}");
        assert!(text.contains("  ... and 2 more"), "{text}");
        assert!(text.ends_with("verdict: 7 violation(s)"), "{text}");
        assert!(sample(&[]).to_string().ends_with("verdict: clean"));
    }

    #[test]
    fn json_has_the_verdict_and_null_for_not_applicable() {
        let report = sample(&[
            (CheckKind::PhantomRead, Some(1)),
            (CheckKind::AckWithoutQuorum, None),
        ]);
        let json: serde_json::Value = serde_json::from_str(&report.to_json().unwrap()).unwrap();
        assert_eq!(json["clean"], false);
        assert_eq!(json["violations"], 1);
        assert_eq!(json["checks"]["phantom_read"]["violations"], 1);
        assert_eq!(
            json["checks"]["phantom_read"]["examples"][0],
            "example 0 of phantom reads"
        );
        assert!(json["checks"]["ack_without_quorum"]["violations"].is_null());
        assert_eq!(json["history_problems"]["count"], 0);
        assert_eq!(json["stats"]["sent"], 0);
    }
}
