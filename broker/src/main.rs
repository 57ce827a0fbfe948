//! `corelogd`: the corelog broker.

use clap::Parser;
use corelog_broker::config::{BrokerConfig, Flags};
use corelog_broker::runtime::startup;

fn main() {
    let flags = Flags::parse();
    let config = match BrokerConfig::resolve(&flags) {
        Ok(config) => config,
        Err(error) => {
            eprintln!("corelogd: {error}");
            std::process::exit(2);
        }
    };
    let filter = tracing_subscriber::EnvFilter::try_new(&config.log_level)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    if let Err(error) = startup::run(config) {
        eprintln!("corelogd: {error}");
        std::process::exit(1);
    }
}
