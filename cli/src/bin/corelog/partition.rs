//! `corelog partition …`: one partition's leadership (`elect-leader`),
//! replicas (`reassign`), and the moves in progress (`reassignments`).

use std::path::PathBuf;

use clap::Subcommand;
use corelog_client::admin::ReassignmentProgress;
use corelog_client::{Admin, ClientError};
use serde::Deserialize;
use serde_json::json;

use crate::Global;
use crate::output::{human_bytes, table};
use crate::time::format_duration_ms;

#[derive(Debug, Subcommand)]
pub(crate) enum PartitionCommand {
    /// Moves a partition's leadership to one of its replicas: a majority of
    /// the other replicas elects it, so nothing acknowledged is lost, and
    /// producers retry their appends in flight. Refused for a replica that
    /// is down, in maintenance or not in sync.
    ElectLeader {
        /// The topic.
        topic: String,
        /// The partition.
        partition: u32,
        /// The broker to lead [default: the preferred replica, the first].
        #[arg(long)]
        to: Option<u32>,
    },
    /// Moves a partition to other brokers: each new replica copies the log
    /// outside the commit quorum, then the replica set changes one broker
    /// at a time, each change an election, so nothing acknowledged is lost
    /// and producers only retry. Returns once the move started; watch it
    /// with `corelog cluster info`. `--cancel` turns a move back. `--plan
    /// FILE` starts the moves a JSON file lists (Kafka's shape:
    /// `{"partitions": [{"topic": "orders", "partition": 0, "replicas":
    /// [4, 1, 3]}]}`) and exits with 1 if any was refused.
    Reassign {
        /// The topic.
        #[arg(required_unless_present = "plan")]
        topic: Option<String>,
        /// The partition.
        #[arg(required_unless_present = "plan")]
        partition: Option<u32>,
        /// The brokers to hold it, preferred leader first (`2,3,4`).
        #[arg(
            long,
            value_delimiter = ',',
            required_unless_present_any = ["cancel", "plan"]
        )]
        replicas: Vec<u32>,
        /// A JSON file of moves, instead of one topic and partition.
        #[arg(long, conflicts_with_all = ["topic", "partition", "replicas", "cancel"])]
        plan: Option<PathBuf>,
        /// Bytes a second each new replica copies at most [default: no
        /// limit].
        #[arg(long, default_value_t = 0)]
        throttle: u64,
        /// Turn the partition's move back to the replicas it started from.
        #[arg(long, conflicts_with_all = ["replicas", "throttle"])]
        cancel: bool,
    },
    /// Lists the moves in progress: where each goes, the bytes each new
    /// replica copied and has left, and an ETA at its average rate so far.
    Reassignments,
}

/// A `--plan` file: Kafka's reassignment JSON (its `version` is ignored).
#[derive(Debug, Deserialize)]
struct Plan {
    partitions: Vec<PlannedMove>,
}

#[derive(Debug, Deserialize)]
struct PlannedMove {
    topic: String,
    partition: u32,
    replicas: Vec<u32>,
}

/// Runs `command`; `Ok(false)` when a move of a plan was refused (each is
/// reported).
pub(crate) async fn run(global: &Global, command: PartitionCommand) -> Result<bool, ClientError> {
    let admin = Admin::connect(global.client.clone()).await?;
    match command {
        PartitionCommand::ElectLeader {
            topic,
            partition,
            to,
        } => {
            let leadership = admin.elect_leader(&topic, partition, to).await?;
            if global.json {
                println!(
                    "{}",
                    json!({
                        "topic": topic,
                        "partition": partition,
                        "leader": leadership.leader,
                        "leader_epoch": leadership.epoch,
                    })
                );
            } else {
                println!(
                    "{topic}/{partition}: led by broker {} (epoch {})",
                    leadership.leader, leadership.epoch
                );
            }
            Ok(true)
        }
        PartitionCommand::Reassignments => {
            let moves = admin.reassignments().await?;
            if global.json {
                println!("{}", json!({ "reassignments": moves }));
            } else if moves.is_empty() {
                println!("no partition is moving");
            } else {
                print!("{}", moves_table(&moves));
            }
            Ok(true)
        }
        PartitionCommand::Reassign {
            plan: Some(plan),
            throttle,
            ..
        } => run_plan(global, &admin, &plan, throttle).await,
        PartitionCommand::Reassign {
            topic,
            partition,
            replicas,
            throttle,
            cancel,
            ..
        } => {
            let (Some(topic), Some(partition)) = (topic, partition) else {
                return Err(ClientError::InvalidArgument(
                    "name a topic and a partition, or give --plan FILE".to_owned(),
                ));
            };
            if cancel {
                admin.cancel_reassignment(&topic, partition).await?;
            } else {
                admin
                    .reassign_partition(&topic, partition, &replicas, throttle)
                    .await?;
            }
            if global.json {
                println!(
                    "{}",
                    json!({
                        "topic": topic,
                        "partition": partition,
                        "cancelled": cancel,
                        "replicas": replicas,
                    })
                );
            } else if cancel {
                println!("{topic}/{partition}: moving back to its original replicas");
            } else {
                println!(
                    "{topic}/{partition}: moving to brokers {replicas:?}; watch `corelog partition reassignments`"
                );
            }
            Ok(true)
        }
    }
}

/// Starts every move of the plan in `path`, in order; reports each, and
/// whether all started.
async fn run_plan(
    global: &Global,
    admin: &Admin,
    path: &std::path::Path,
    throttle: u64,
) -> Result<bool, ClientError> {
    let text = std::fs::read_to_string(path).map_err(|error| {
        ClientError::InvalidArgument(format!("cannot read the plan {}: {error}", path.display()))
    })?;
    let plan: Plan = serde_json::from_str(&text).map_err(|error| {
        ClientError::InvalidArgument(format!(
            "the plan {} is not a reassignment plan ({{\"partitions\": [{{\"topic\", \"partition\", \"replicas\"}}]}}): {error}",
            path.display()
        ))
    })?;
    let mut started = Vec::new();
    let mut refused = Vec::new();
    for planned in &plan.partitions {
        let name = format!("{}/{}", planned.topic, planned.partition);
        match admin
            .reassign_partition(
                &planned.topic,
                planned.partition,
                &planned.replicas,
                throttle,
            )
            .await
        {
            Ok(()) => started.push((name, planned.replicas.clone())),
            Err(error) => refused.push((name, error.to_string())),
        }
    }
    if global.json {
        let started: Vec<_> = started
            .iter()
            .map(|(name, replicas)| json!({"partition": name, "replicas": replicas}))
            .collect();
        let refused: Vec<_> = refused
            .iter()
            .map(|(name, error)| json!({"partition": name, "error": error}))
            .collect();
        println!("{}", json!({"started": started, "refused": refused}));
    } else {
        for (name, replicas) in &started {
            println!("{name}: moving to brokers {replicas:?}");
        }
        for (name, error) in &refused {
            println!("{name}: not started: {error}");
        }
        println!(
            "{} move(s) started, {} refused; watch `corelog partition reassignments`",
            started.len(),
            refused.len()
        );
    }
    Ok(refused.is_empty())
}

/// The moves in progress, one row each.
fn moves_table(moves: &[ReassignmentProgress]) -> String {
    let brokers = |ids: &[u32]| ids.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
    let rows: Vec<Vec<String>> = moves
        .iter()
        .map(|moving| {
            let goal = if moving.moving.cancelled {
                format!("{} (cancelled)", brokers(&moving.moving.original))
            } else {
                brokers(&moving.moving.target)
            };
            let copying = if moving.learners.is_empty() {
                "-".to_owned()
            } else {
                moving
                    .learners
                    .iter()
                    .map(|learner| match (learner.bytes_copied, learner.bytes_left) {
                        (Some(copied), Some(left)) => format!(
                            "{}: {} copied, {} left",
                            learner.broker,
                            human_bytes(copied),
                            human_bytes(left)
                        ),
                        _ => format!(
                            "{}: unknown ({})",
                            learner.broker,
                            learner.unknown.as_deref().unwrap_or("not asked")
                        ),
                    })
                    .collect::<Vec<_>>()
                    .join("; ")
            };
            let throttle = match moving.moving.throttle_bytes_per_s {
                0 => "none".to_owned(),
                rate => format!("{}/s", human_bytes(rate)),
            };
            let eta = moving.eta_ms.map_or_else(
                || "unknown".to_owned(),
                |ms| format_duration_ms(i64::try_from(ms).unwrap_or(i64::MAX)),
            );
            vec![
                format!("{}/{}", moving.topic, moving.partition),
                brokers(&moving.replicas),
                goal,
                copying,
                throttle,
                eta,
            ]
        })
        .collect();
    table(
        &[
            "PARTITION",
            "REPLICAS",
            "GOING TO",
            "COPYING",
            "THROTTLE",
            "ETA",
        ],
        &rows,
    )
}
