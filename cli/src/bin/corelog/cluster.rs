//! `corelog cluster …`: the brokers and controller (`info`), whether
//! anything is wrong (`health`, which exits non-zero when it is), a broker's
//! maintenance, and giving every partition back to its preferred leader
//! (`rebalance-leaders`).

use clap::Subcommand;
use corelog_client::admin::{ClusterStatus, Problem};
use corelog_client::{Admin, ClientError};
use serde_json::json;

use crate::Global;
use crate::output::table;

#[derive(Debug, Subcommand)]
pub(crate) enum ClusterCommand {
    /// Brokers (address, rack, fenced, controller voter, last heartbeat)
    /// and the controller (leader, term, commit index).
    Info,
    /// Checks the controller quorum, the brokers and every partition;
    /// lists what is wrong and exits with 1 if anything is.
    Health,
    /// Puts a broker in maintenance (its leaderships move to other
    /// replicas and it takes none, across restarts, while it still
    /// replicates) or takes it out. One broker at a time. `enable` waits
    /// until the broker leads nothing.
    Maintenance {
        /// `enable` or `disable`.
        #[arg(value_enum)]
        action: MaintenanceAction,
        /// The broker.
        broker: u32,
    },
    /// Moves every partition not led by its preferred replica (the first)
    /// back to it, one at a time; exits with 1 if any could not move.
    RebalanceLeaders,
}

/// What `cluster maintenance` does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum MaintenanceAction {
    /// Put the broker in maintenance.
    Enable,
    /// Take it out.
    Disable,
}

/// Runs `command`; `Ok(false)` when `health` found problems.
pub(crate) async fn run(global: &Global, command: ClusterCommand) -> Result<bool, ClientError> {
    let admin = Admin::connect(global.client.clone()).await?;
    match command {
        ClusterCommand::Info => {
            // Every topic: the partitions moving are listed too.
            let (status, unreachable) = admin.describe_cluster_with_reach(None).await?;
            if global.json {
                println!(
                    "{}",
                    json!({"cluster": status, "controller_unreachable": unreachable})
                );
            } else {
                print!("{}", info_text(&status, unreachable.as_ref()));
            }
            Ok(true)
        }
        ClusterCommand::Health => {
            let (status, unreachable) = admin.describe_cluster_with_reach(None).await?;
            let mut problems: Vec<Problem> = unreachable.into_iter().collect();
            problems.extend(status.problems());
            if global.json {
                println!(
                    "{}",
                    json!({"healthy": problems.is_empty(), "problems": problems, "cluster": status})
                );
            } else {
                print!("{}", health_text(&status, &problems));
            }
            Ok(problems.is_empty())
        }
        ClusterCommand::Maintenance { action, broker } => {
            let enabled = action == MaintenanceAction::Enable;
            let still_led = admin.set_maintenance(broker, enabled).await?;
            if global.json {
                println!(
                    "{}",
                    json!({"broker": broker, "maintenance": enabled, "still_leads": still_led})
                );
            } else if !enabled {
                println!(
                    "broker {broker} is out of maintenance; preferred leaderships return to it once it is in sync"
                );
            } else if still_led == 0 {
                println!("broker {broker} is in maintenance and leads nothing");
            } else {
                println!(
                    "broker {broker} is in maintenance but still leads {still_led} partition(s): their other replicas are no majority"
                );
            }
            Ok(true)
        }
        ClusterCommand::RebalanceLeaders => rebalance_leaders(global, &admin).await,
    }
}

/// Elects the preferred replica of every partition led by another one.
async fn rebalance_leaders(global: &Global, admin: &Admin) -> Result<bool, ClientError> {
    let status = admin.describe_cluster(None).await?;
    let mut moved = Vec::new();
    let mut failed = Vec::new();
    for topic in &status.topics {
        for partition in &topic.partitions {
            let Some(&preferred) = partition.replicas.first() else {
                continue;
            };
            if partition.leader == Some(preferred) {
                continue;
            }
            let name = format!("{}/{}", topic.name, partition.partition);
            match admin
                .elect_leader(&topic.name, partition.partition, None)
                .await
            {
                Ok(leadership) => moved.push((name, leadership.leader)),
                Err(error) => failed.push((name, error.to_string())),
            }
        }
    }
    if global.json {
        let moved: Vec<_> = moved
            .iter()
            .map(|(name, leader)| json!({"partition": name, "leader": leader}))
            .collect();
        let failed: Vec<_> = failed
            .iter()
            .map(|(name, error)| json!({"partition": name, "error": error}))
            .collect();
        println!("{}", json!({"moved": moved, "failed": failed}));
    } else {
        for (name, leader) in &moved {
            println!("{name}: led by broker {leader}");
        }
        for (name, error) in &failed {
            println!("{name}: not moved: {error}");
        }
        println!(
            "{} partition(s) moved to their preferred leader, {} not moved",
            moved.len(),
            failed.len()
        );
    }
    Ok(failed.is_empty())
}

fn controller_line(status: &ClusterStatus) -> String {
    let controller = &status.controller;
    let voters = controller
        .voters
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let leader = controller.leader.map_or_else(
        || "none (no quorum)".to_owned(),
        |leader| leader.to_string(),
    );
    let answered = if status.authoritative {
        format!("answered by broker {}, the leader", status.answered_by)
    } else {
        format!("broker {}'s view", status.answered_by)
    };
    format!(
        "controller: leader {leader}, term {}, commit index {}, voters {voters} ({answered})\n",
        controller.term, controller.commit_index
    )
}

fn info_text(status: &ClusterStatus, unreachable: Option<&Problem>) -> String {
    let mut text = controller_line(status);
    if let Some(problem) = unreachable {
        text.push_str(&format!("note: {problem}\n"));
    }
    let rows: Vec<Vec<String>> = status
        .brokers
        .iter()
        .map(|broker| {
            vec![
                broker.node_id.to_string(),
                broker.address.clone(),
                broker.rack.clone().unwrap_or_else(|| "-".to_owned()),
                match (broker.fenced, broker.maintenance) {
                    (true, false) => "fenced",
                    (true, true) => "fenced, maintenance",
                    (false, false) => "alive",
                    (false, true) => "alive, maintenance",
                }
                .to_owned(),
                if broker.voter { "yes" } else { "no" }.to_owned(),
                broker.heartbeat_age_ms.map_or_else(
                    || "-".to_owned(),
                    |age| format!("{:.1} s ago", age as f64 / 1000.0),
                ),
            ]
        })
        .collect();
    text.push_str(&table(
        &[
            "BROKER",
            "ADDRESS",
            "RACK",
            "STATE",
            "VOTER",
            "LAST-HEARTBEAT",
        ],
        &rows,
    ));
    text.push_str(&moves_text(status));
    text
}

/// The partitions moving to other brokers, if any: one line each.
fn moves_text(status: &ClusterStatus) -> String {
    let brokers = |ids: &[u32]| ids.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
    let mut lines = Vec::new();
    for topic in &status.topics {
        for partition in &topic.partitions {
            let Some(moving) = &partition.moving else {
                continue;
            };
            let (goal, note) = if moving.cancelled {
                (&moving.original, " (cancelled)")
            } else {
                (&moving.target, "")
            };
            let copying = if moving.learners.is_empty() {
                String::new()
            } else {
                format!(", copying to {}", brokers(&moving.learners))
            };
            lines.push(format!(
                "  {}/{}: {} -> {}{note}{copying}\n",
                topic.name,
                partition.partition,
                brokers(&partition.replicas),
                brokers(goal)
            ));
        }
    }
    if lines.is_empty() {
        return String::new();
    }
    format!(
        "moving: {} partition{} (progress: corelog partition reassignments)\n{}",
        lines.len(),
        if lines.len() == 1 { "" } else { "s" },
        lines.concat()
    )
}

fn health_text(status: &ClusterStatus, problems: &[Problem]) -> String {
    let partitions: usize = status
        .topics
        .iter()
        .map(|topic| topic.partitions.len())
        .sum();
    let mut text = controller_line(status);
    if problems.is_empty() {
        let unknown = status
            .topics
            .iter()
            .flat_map(|topic| &topic.partitions)
            .filter(|partition| partition.in_sync.is_none())
            .count();
        text.push_str(&format!(
            "healthy: {} brokers alive, {partitions} partition{} led",
            status.brokers.len(),
            if partitions == 1 { "" } else { "s" }
        ));
        if unknown > 0 {
            text.push_str(&format!(
                "; in-sync replicas of {unknown} not reported yet (leaders report every second)"
            ));
        }
        text.push('\n');
        text.push_str(&moves_text(status));
    } else {
        // Only what cannot be known yet (a controller leader that was not
        // reached, or that has not heard every broker since it took over)
        // is "unknown", not "unhealthy"; either way not healthy (exit 1).
        let unknown = problems.iter().all(|problem| {
            matches!(
                problem,
                Problem::LivenessUnknown { .. } | Problem::ControllerUnreachable { .. }
            )
        });
        text.push_str(&format!(
            "{}: {} problem{}\n",
            if unknown { "unknown" } else { "unhealthy" },
            problems.len(),
            if problems.len() == 1 { "" } else { "s" }
        ));
        for problem in problems {
            text.push_str(&format!("  - {problem}\n"));
        }
        text.push_str(&moves_text(status));
    }
    text
}
