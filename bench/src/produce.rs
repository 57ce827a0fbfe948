//! `produce` mode: paced producers against a running broker.

use clap::Args;

use crate::load::{LoadArgs, ensure_topic, print_produce, run_producers};

#[derive(Debug, Args)]
pub struct ProduceArgs {
    #[command(flatten)]
    load: LoadArgs,
}

pub fn run(args: &ProduceArgs) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|error| error.to_string())?;
    runtime.block_on(async {
        ensure_topic(&args.load).await?;
        let report = run_producers(&args.load, "produce", None).await?;
        if args.load.json {
            println!(
                "{}",
                serde_json::to_string_pretty(&report).map_err(|error| error.to_string())?
            );
        } else {
            print_produce(
                &format!(
                    "produce: {} B records to {} over {} keys, acks={}",
                    args.load.record_bytes, args.load.topic, args.load.keys, args.load.acks
                ),
                &report,
            );
        }
        if report.errors > 0 {
            Err(format!("{} records failed", report.errors))
        } else {
            Ok(())
        }
    })
}
