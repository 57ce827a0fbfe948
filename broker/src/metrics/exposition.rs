//! The registry in Prometheus's text exposition format (version 0.0.4),
//! the format `/metrics` declares and `promtool check metrics` lints.
//!
//! prometheus-client writes OpenMetrics text. The two agree on gauges and
//! histograms, but OpenMetrics names a counter family without the `_total`
//! its samples carry (`# TYPE corelog_records_in counter` over
//! `corelog_records_in_total 5`), adds `# UNIT` lines and ends with
//! `# EOF`. Read as Prometheus text, such a counter has no help and no
//! type, and promtool rejects every one. So the family lines of counters
//! are renamed to their samples' name, and the OpenMetrics-only lines are
//! left out; the samples, which dashboards and alerts query, are
//! unchanged.

use std::collections::BTreeSet;

/// `open_metrics` (prometheus-client's text) as Prometheus text.
pub(super) fn to_prometheus_text(open_metrics: &str) -> String {
    let counters: BTreeSet<&str> = open_metrics
        .lines()
        .filter_map(|line| family_line(line, "# TYPE "))
        .filter(|(_, rest)| rest.trim() == "counter")
        .map(|(name, _)| name)
        .collect();
    let mut text = String::with_capacity(open_metrics.len() + 16 * counters.len());
    for line in open_metrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let renamed = ["# HELP ", "# TYPE "].iter().find_map(|prefix| {
            family_line(line, prefix)
                .filter(|(name, _)| counters.contains(name) && !name.ends_with("_total"))
                .map(|(name, rest)| format!("{prefix}{name}_total {rest}"))
        });
        match renamed {
            Some(renamed) => text.push_str(&renamed),
            None => text.push_str(line),
        }
        text.push('\n');
    }
    text
}

/// The family name and the rest of a `# HELP`/`# TYPE` line.
fn family_line<'a>(line: &'a str, prefix: &str) -> Option<(&'a str, &'a str)> {
    let rest = line.strip_prefix(prefix)?;
    Some(rest.split_once(' ').unwrap_or((rest, "")))
}

#[cfg(test)]
mod tests {
    use super::super::BrokerMetrics;
    use super::*;

    #[test]
    fn counter_families_take_their_samples_name_and_openmetrics_lines_go() {
        let open_metrics = "# HELP corelog_records_in Records appended.\n\
                            # TYPE corelog_records_in counter\n\
                            corelog_records_in_total{shard=\"0\"} 5\n\
                            # HELP corelog_disk_free_bytes Free bytes.\n\
                            # TYPE corelog_disk_free_bytes gauge\n\
                            # UNIT corelog_disk_free_bytes bytes\n\
                            corelog_disk_free_bytes{shard=\"0\"} 7\n\
                            # EOF\n";
        assert_eq!(
            to_prometheus_text(open_metrics),
            "# HELP corelog_records_in_total Records appended.\n\
             # TYPE corelog_records_in_total counter\n\
             corelog_records_in_total{shard=\"0\"} 5\n\
             # HELP corelog_disk_free_bytes Free bytes.\n\
             # TYPE corelog_disk_free_bytes gauge\n\
             corelog_disk_free_bytes{shard=\"0\"} 7\n"
        );
    }

    /// Every counter the broker registers is typed and described under
    /// the name its samples carry (issue 35, item 23): the families
    /// promtool rejected as having no help text.
    #[test]
    fn every_counter_is_described_under_its_sample_name() {
        let metrics = BrokerMetrics::new();
        let shard = metrics.for_shard(0);
        shard.records_in.inc();
        let text = metrics.encode();
        let counters: Vec<&str> = text
            .lines()
            .filter_map(|line| family_line(line, "# TYPE "))
            .filter(|(_, rest)| *rest == "counter")
            .map(|(name, _)| name)
            .collect();
        assert!(counters.len() >= 10, "{text}");
        for name in counters {
            assert!(name.ends_with("_total"), "counter family {name}:\n{text}");
            assert!(
                text.contains(&format!("# HELP {name} ")),
                "no help for {name}:\n{text}"
            );
        }
        assert!(!text.contains("# EOF"), "{text}");
    }
}
