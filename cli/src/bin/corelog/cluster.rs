//! `corelog cluster …`: the brokers and controller (`info`), whether
//! anything is wrong (`health`, which exits non-zero when it is), a broker's
//! maintenance, decommissioning a broker (and recommissioning it), and
//! giving every partition back to its preferred leader
//! (`rebalance-leaders`).

use std::time::Duration;

use clap::Subcommand;
use corelog_client::admin::{BrokerState, ClusterStatus, DEFAULT_DECOMMISSION_MOVES, Problem};
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
    /// Moves every replica off a broker, live or dead for good, to the
    /// other brokers (rack-aware, the least loaded first), a few partitions
    /// at a time; the broker then takes no new replica. `--wait` shows the
    /// progress until it holds nothing.
    Decommission {
        /// The broker.
        broker: u32,
        /// Bytes a second each new replica copies at most [default: no
        /// limit].
        #[arg(long, default_value_t = 0)]
        throttle: u64,
        /// Partitions moving off the broker at once.
        #[arg(long, default_value_t = DEFAULT_DECOMMISSION_MOVES)]
        max_moves: u16,
        /// Wait until the broker holds no replica, printing progress.
        #[arg(long)]
        wait: bool,
    },
    /// Stops a broker's decommission: it takes replicas again, and the
    /// moves still running off it turn back (finished ones stay).
    Recommission {
        /// The broker.
        broker: u32,
    },
}

/// How often `cluster decommission --wait` looks at the progress.
const DECOMMISSION_POLL: Duration = Duration::from_secs(2);
/// How long `cluster decommission --wait` waits for the broker it asks to
/// show the decommission.
const DECOMMISSION_SHOW_TIMEOUT: Duration = Duration::from_secs(30);

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
        ClusterCommand::Decommission {
            broker,
            throttle,
            max_moves,
            wait,
        } => {
            let left = admin
                .decommission_broker(broker, throttle, max_moves)
                .await?;
            if global.json {
                println!(
                    "{}",
                    json!({"broker": broker, "decommissioning": true, "partitions_left": left})
                );
            } else {
                println!(
                    "broker {broker} is being decommissioned: {left} partition(s) hold a replica on it; they move {max_moves} at a time"
                );
            }
            if wait {
                wait_decommissioned(global, &admin, broker).await?;
            }
            Ok(true)
        }
        ClusterCommand::Recommission { broker } => {
            let turned_back = admin.recommission_broker(broker).await?;
            if global.json {
                println!(
                    "{}",
                    json!({"broker": broker, "decommissioning": false, "moves_turned_back": turned_back})
                );
            } else {
                println!(
                    "broker {broker} is recommissioned: it takes replicas again; {turned_back} move(s) off it turned back"
                );
            }
            Ok(true)
        }
    }
}

/// Polls until `broker` holds no replica, printing each change of the
/// count; fails if the broker is recommissioned meanwhile. The broker that
/// answers may lag the one that took the decommission by a moment, so a
/// view without the mark counts only after one with it, or after
/// [`DECOMMISSION_SHOW_TIMEOUT`].
async fn wait_decommissioned(
    global: &Global,
    admin: &Admin,
    broker: u32,
) -> Result<(), ClientError> {
    let started = std::time::Instant::now();
    let mut seen_marked = false;
    let mut shown = None;
    loop {
        let status = admin.describe_cluster(None).await?;
        let marked = status
            .brokers
            .iter()
            .any(|state| state.node_id == broker && state.decommission.is_some());
        if !marked {
            if seen_marked || started.elapsed() > DECOMMISSION_SHOW_TIMEOUT {
                return Err(ClientError::InvalidArgument(format!(
                    "broker {broker} is not being decommissioned any more (recommissioned meanwhile?)"
                )));
            }
            tokio::time::sleep(DECOMMISSION_POLL).await;
            continue;
        }
        seen_marked = true;
        let left = status.replicas_on(broker);
        let moving = moves_off(&status, broker);
        if shown != Some((left, moving)) {
            shown = Some((left, moving));
            if global.json {
                println!(
                    "{}",
                    json!({"broker": broker, "partitions_left": left, "moving": moving})
                );
            } else if left > 0 {
                println!("broker {broker}: {left} partition(s) left, {moving} moving");
            }
        }
        if left == 0 {
            if !global.json {
                println!("broker {broker} holds no replica: it can be shut down and removed");
            }
            return Ok(());
        }
        tokio::time::sleep(DECOMMISSION_POLL).await;
    }
}

/// Partitions of `status` moving a replica off `broker`.
fn moves_off(status: &ClusterStatus, broker: u32) -> usize {
    status
        .topics
        .iter()
        .flat_map(|topic| &topic.partitions)
        .filter_map(|partition| partition.moving.as_ref())
        .filter(|moving| {
            !moving.cancelled
                && moving.original.contains(&broker)
                && !moving.target.contains(&broker)
        })
        .count()
}

/// The brokers being decommissioned, if any: one line each.
fn decommissions_text(status: &ClusterStatus) -> String {
    status
        .brokers
        .iter()
        .filter(|broker| broker.decommission.is_some())
        .map(|broker| {
            let left = status.replicas_on(broker.node_id);
            if left == 0 {
                format!(
                    "decommissioned: broker {} holds no replica (recommission it to use it again)\n",
                    broker.node_id
                )
            } else {
                format!(
                    "decommissioning: broker {}: {left} partition(s) left, {} moving\n",
                    broker.node_id,
                    moves_off(status, broker.node_id)
                )
            }
        })
        .collect()
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
                broker_state(broker),
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
    text.push_str(&decommissions_text(status));
    text.push_str(&moves_text(status));
    text
}

/// `alive` or `fenced`, and whether in maintenance or decommissioning.
fn broker_state(broker: &BrokerState) -> String {
    let mut state = if broker.fenced { "fenced" } else { "alive" }.to_owned();
    if broker.maintenance {
        state.push_str(", maintenance");
    }
    if broker.decommission.is_some() {
        state.push_str(", decommissioning");
    }
    state
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
            status
                .brokers
                .iter()
                .filter(|broker| !broker.fenced)
                .count(),
            if partitions == 1 { "" } else { "s" }
        ));
        if unknown > 0 {
            text.push_str(&format!(
                "; in-sync replicas of {unknown} not reported yet (leaders report every second)"
            ));
        }
        text.push('\n');
        text.push_str(&decommissions_text(status));
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
        text.push_str(&decommissions_text(status));
        text.push_str(&moves_text(status));
    }
    text
}
