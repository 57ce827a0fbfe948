//! `corelogd`: the corelog broker.

use clap::Parser;
use corelog_broker::config::{BrokerConfig, Flags};
use corelog_broker::server;
use corelog_storage::fault_hooks;

/// Exit code of a broker one of whose threads panicked (a bug).
const PANIC_EXIT_CODE: i32 = 5;

fn main() {
    // A panicking shard thread would otherwise die alone and leave the
    // process up, holding its sockets and leaderships but answering
    // nothing. Exiting lets leaderships move and a supervisor restart it.
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        report(info);
        eprintln!("corelogd: a thread panicked (a bug); exiting with code {PANIC_EXIT_CODE}");
        std::process::exit(PANIC_EXIT_CODE);
    }));
    let flags = Flags::parse();
    let allowed = std::env::var_os(fault_hooks::ALLOW_ENV).is_some();
    if let Err(refusal) = fault_hooks::refuse_unless_allowed(allowed) {
        eprintln!("corelogd: {refusal}");
        std::process::exit(2);
    }
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
    if let Err(error) = server::run(config) {
        eprintln!("corelogd: {error}");
        std::process::exit(error.exit_code());
    }
}
