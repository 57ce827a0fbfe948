//! `corelog-bench`: measures corelog against the disk it runs on.
//!
//! - `storage`: the storage engine alone — group-commit appends of 1 KiB
//!   records in batches of 16 KiB–1 MiB on one shard, next to the raw
//!   O_DIRECT write + fdatasync bandwidth of the same disk measured in the
//!   same run, and a paced run at a target record rate.

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
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Storage(args) => storage::run(&args),
    };
    if let Err(error) = result {
        eprintln!("corelog-bench: {error}");
        std::process::exit(1);
    }
}
