//! `corelog partition …`: one partition's leadership (`elect-leader`) and
//! replicas (`reassign`).

use clap::Subcommand;
use corelog_client::{Admin, ClientError};
use serde_json::json;

use crate::Global;

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
    /// with `corelog cluster info`. `--cancel` turns a move back.
    Reassign {
        /// The topic.
        topic: String,
        /// The partition.
        partition: u32,
        /// The brokers to hold it, preferred leader first (`2,3,4`).
        #[arg(long, value_delimiter = ',', required_unless_present = "cancel")]
        replicas: Vec<u32>,
        /// Bytes a second each new replica copies at most [default: no
        /// limit].
        #[arg(long, default_value_t = 0)]
        throttle: u64,
        /// Turn the partition's move back to the replicas it started from.
        #[arg(long, conflicts_with_all = ["replicas", "throttle"])]
        cancel: bool,
    },
}

pub(crate) async fn run(global: &Global, command: PartitionCommand) -> Result<(), ClientError> {
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
            Ok(())
        }
        PartitionCommand::Reassign {
            topic,
            partition,
            replicas,
            throttle,
            cancel,
        } => {
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
                    "{topic}/{partition}: moving to brokers {replicas:?}; watch `corelog cluster info`"
                );
            }
            Ok(())
        }
    }
}
