//! `corelog partition …`: one partition's leadership (`elect-leader`).

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
    }
}
