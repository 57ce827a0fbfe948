//! `corelog-bench`: measures corelog against the disk it runs on.
//!
//! - `storage`: the storage engine alone — group-commit appends of 1 KiB
//!   records in batches of 16 KiB–1 MiB on one shard, next to the raw
//!   O_DIRECT write + fdatasync bandwidth of the same disk measured in the
//!   same run, and a paced run at a target record rate.
//! - `produce`: paced producers against a running broker; append latency
//!   from each record's due time to its acknowledgement.
//! - `e2e`: producers and a consumer together; visibility latency from
//!   acknowledgement to receipt.
//! - `group`: N consumers in one group while producers write at a rate:
//!   consumption throughput, catch-up from a backlog (consume rate, net
//!   catch-up rate, projected and measured time to catch up), and the
//!   rebalance pause when one consumer leaves.
//! - `failover`: kills a partition's leader (through a command such as
//!   `scripts/cluster.sh kill N`) and measures the time to the first append
//!   the new leader acknowledges.
//! - `matrix`: producers × partitions × replication factor on fresh local
//!   clusters, one or more builds side by side (`make bench-matrix`), with
//!   an overload phase per cell on request (`--overload`).

mod e2e;
mod failover;
mod group;
mod in_flight;
mod load;
mod matrix;
mod overload;
mod produce;
mod report;
mod storage;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "corelog-bench",
    version,
    about = "Load generators and reports for corelog"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Storage engine appends versus raw O_DIRECT write + fdatasync.
    Storage(storage::StorageArgs),
    /// Paced producers against a running broker.
    Produce(produce::ProduceArgs),
    /// Producers and a consumer together: visibility latency.
    E2e(e2e::E2eArgs),
    /// A consumer group reading while producers write: throughput,
    /// catch-up from a backlog, rebalance pause.
    Group(group::GroupArgs),
    /// Leader kill -9 to the first append the new leader acknowledges.
    Failover(failover::FailoverArgs),
    /// Producers x partitions x replication factor, builds side by side:
    /// rate, latency, CPU, fdatasyncs, replication RPCs, bytes written.
    Matrix(matrix::MatrixArgs),
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Storage(args) => storage::run(&args),
        Command::Produce(args) => produce::run(&args),
        Command::E2e(args) => e2e::run(&args),
        Command::Group(args) => group::run(&args),
        Command::Failover(args) => failover::run(&args),
        Command::Matrix(args) => matrix::run(&args),
    };
    if let Err(error) = result {
        eprintln!("corelog-bench: {error}");
        std::process::exit(1);
    }
}
