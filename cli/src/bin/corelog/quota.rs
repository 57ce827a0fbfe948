//! `corelog quota …`: set, describe and remove quotas. An entity is
//! `user:NAME`, `user:*` (every principal without its own quota), `ip:ADDRESS`
//! or `ip:*`.

use clap::{Args, Subcommand};
use corelog_client::admin::Quota;
use corelog_client::{Admin, ClientError};
use serde_json::json;

use crate::Global;
use crate::numbers::bytes_per_second;
use crate::output::table;

#[derive(Debug, Subcommand)]
pub(crate) enum QuotaCommand {
    /// Sets an entity's limits, replacing the ones it had; every broker
    /// enforces them within a second.
    Set(SetArgs),
    /// Lists the quotas, or one entity's.
    Describe {
        /// Only this entity.
        entity: Option<String>,
    },
    /// Removes an entity's quota: the default applies to it again.
    Remove {
        /// The entity.
        entity: String,
    },
}

#[derive(Debug, Args)]
pub(crate) struct SetArgs {
    /// `user:NAME`, `user:*`, `ip:ADDRESS` or `ip:*`.
    entity: String,
    /// Produce bytes per second over the whole broker (1048576, 512KiB, 10MiB, …).
    #[arg(long, value_parser = bytes_per_second)]
    produce_rate: Option<u64>,
    /// Fetch bytes per second over the whole broker.
    #[arg(long, value_parser = bytes_per_second)]
    fetch_rate: Option<u64>,
    /// Percent (1–100) of each shard's time its requests may take.
    #[arg(long)]
    request_percent: Option<u32>,
    /// Open connections to one broker.
    #[arg(long)]
    connections: Option<u32>,
    /// Topics the principal may own (default: the user:* entry's, else 1000).
    #[arg(long)]
    topics: Option<u32>,
    /// Partitions the principal may own over all its topics (default: the
    /// user:* entry's, else 10000).
    #[arg(long)]
    partitions: Option<u32>,
    /// Consumer groups the principal may create on each group coordinator
    /// (default: the user:* entry's, else 1000).
    #[arg(long)]
    groups: Option<u32>,
}

pub(crate) async fn run(global: &Global, command: QuotaCommand) -> Result<(), ClientError> {
    let admin = Admin::connect(global.client.clone()).await?;
    match command {
        QuotaCommand::Set(args) => {
            let quota = Quota {
                entity: args.entity,
                produce_bytes_per_second: args.produce_rate,
                fetch_bytes_per_second: args.fetch_rate,
                request_percent: args.request_percent,
                connections: args.connections,
                topics: args.topics,
                partitions: args.partitions,
                groups: args.groups,
            };
            let created = admin.set_quota(&quota).await?;
            if global.json {
                println!("{}", json!({"quota": quota, "created": created}));
            } else {
                println!("set the quota of {}", quota.entity);
            }
        }
        QuotaCommand::Describe { entity } => {
            let quotas = admin.describe_quotas(entity.as_deref()).await?;
            if global.json {
                println!("{}", json!({ "quotas": quotas }));
            } else {
                let limit =
                    |value: Option<u64>| value.map_or_else(|| "-".to_owned(), |v| v.to_string());
                let rows: Vec<Vec<String>> = quotas
                    .iter()
                    .map(|quota| {
                        vec![
                            quota.entity.clone(),
                            limit(quota.produce_bytes_per_second),
                            limit(quota.fetch_bytes_per_second),
                            limit(quota.request_percent.map(u64::from)),
                            limit(quota.connections.map(u64::from)),
                            limit(quota.topics.map(u64::from)),
                            limit(quota.partitions.map(u64::from)),
                            limit(quota.groups.map(u64::from)),
                        ]
                    })
                    .collect();
                print!(
                    "{}",
                    table(
                        &[
                            "ENTITY",
                            "PRODUCE-B/S",
                            "FETCH-B/S",
                            "REQUEST-%",
                            "CONNECTIONS",
                            "TOPICS",
                            "PARTITIONS",
                            "GROUPS"
                        ],
                        &rows
                    )
                );
            }
        }
        QuotaCommand::Remove { entity } => {
            admin.remove_quota(&entity).await?;
            if global.json {
                println!("{}", json!({"entity": entity, "removed": true}));
            } else {
                println!("removed the quota of {entity}");
            }
        }
    }
    Ok(())
}
