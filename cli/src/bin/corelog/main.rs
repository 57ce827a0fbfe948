//! `corelog`: the command-line client.
//!
//! ```text
//! corelog [--bootstrap HOST:PORT[,HOST:PORT...]] [--json] [--tls-ca FILE [--tls-cert FILE --tls-key FILE]] topic create NAME --partitions N [--config k=v ...]
//! corelog topic list | topic describe NAME... | topic delete NAME
//! corelog cluster info | cluster health
//! corelog produce --topic T [--key-separator SEP] [--partition P] [--schema V]
//!     [--header NAME=VALUE ...] [--timestamp T]                                   (lines from stdin)
//! corelog consume --topic T [--partition P ... | --group G] [--from-beginning | --offset N | --time T]
//!     [--follow] [--max N] [--print-key | --format TEMPLATE]
//! corelog group list | group describe GROUP [--watch [SECONDS]] | group audit [--group G] | group delete GROUP
//! corelog group reset-offsets GROUP --topic T [--partition P ...]
//!     (--to-earliest | --to-latest | --to-offset N | --to-time T | --by-duration D | --shift-by N
//!      | --to-group OTHER) --reason TEXT [--dry-run]
//! corelog user create NAME --password-stdin [--mechanism M ...] | user delete NAME | user list
//! corelog acl add|remove --allow|--deny PRINCIPAL --operation OP --topic|--group NAME [--prefix] | --cluster
//! corelog acl list [--principal P] [--topic N | --group N | --cluster]
//! corelog quota set ENTITY [--produce-rate R] [--fetch-rate R] [--request-percent P] [--connections N] [--topics N] [--partitions N] [--groups N] | quota describe [ENTITY] | quota remove ENTITY
//! corelog verify [--topic T] [--duration 10m] [--rate N] [--producers N] [--history FILE]
//! ```
//!
//! Output is a readable table or text for people, and JSON with `--json`
//! for scripts. Errors go to stderr with what to do, and the exit code is
//! non-zero: 1 for a failure or an unhealthy `cluster health`, 2 for a
//! usage error, 3 when `verify` found violations.

mod acl;
mod cluster;
mod consume;
mod format;
mod group;
mod lines;
mod numbers;
mod output;
mod partition;
mod produce;
mod quota;
mod reset;
mod settings;
mod time;
mod topic;
mod user;
mod verify;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use corelog_client::{
    ClientConfig, ClientError, ClientTls, DEFAULT_BOOTSTRAP, ErrorCode, SaslCredentials,
};

/// The corelog command-line client: manage topics, produce and consume
/// records.
#[derive(Debug, Parser)]
#[command(name = "corelog", version)]
struct Cli {
    /// The brokers to connect to first, HOST:PORT or several separated by
    /// commas (tried in order) [default: 127.0.0.1:7100].
    #[arg(
        long,
        global = true,
        value_name = "HOST:PORT[,HOST:PORT...]",
        env = "CORELOG_BOOTSTRAP"
    )]
    bootstrap: Option<String>,
    /// TOML file with any of the connection settings (bootstrap, tls_ca,
    /// tls_cert, tls_key, sasl_user, sasl_password_file, sasl_mechanism);
    /// flags and environment variables win over it.
    #[arg(
        long,
        global = true,
        value_name = "FILE",
        env = "CORELOG_CLIENT_CONFIG"
    )]
    client_config: Option<PathBuf>,
    /// Print JSON for scripts instead of tables and text.
    #[arg(long, global = true)]
    json: bool,
    /// Connect with TLS, trusting the CA certificates of this PEM file
    /// (the CA that signed the brokers' certificates).
    #[arg(long, global = true, value_name = "FILE", env = "CORELOG_TLS_CA")]
    tls_ca: Option<PathBuf>,
    /// PEM certificate chain to present to brokers that ask for one
    /// (needs --tls-ca and --tls-key).
    #[arg(long, global = true, value_name = "FILE", env = "CORELOG_TLS_CERT")]
    tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert.
    #[arg(long, global = true, value_name = "FILE", env = "CORELOG_TLS_KEY")]
    tls_key: Option<PathBuf>,
    /// Log in as this user (SCRAM; needs --sasl-password-file).
    #[arg(long, global = true, value_name = "USER", env = "CORELOG_SASL_USER")]
    sasl_user: Option<String>,
    /// File whose first line is the password of --sasl-user.
    #[arg(
        long,
        global = true,
        value_name = "FILE",
        env = "CORELOG_SASL_PASSWORD_FILE"
    )]
    sasl_password_file: Option<PathBuf>,
    /// SCRAM mechanism of the login [default: SCRAM-SHA-256].
    #[arg(long, global = true, value_enum, env = "CORELOG_SASL_MECHANISM")]
    sasl_mechanism: Option<user::Mechanism>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Create, list, describe and delete topics.
    #[command(subcommand)]
    Topic(topic::TopicCommand),
    /// Append lines from stdin to a topic, one record per line.
    Produce(produce::ProduceArgs),
    /// Print records of a topic. Without a start option it reads from the
    /// beginning and stops at the end; with --follow it prints only new
    /// records and keeps waiting.
    Consume(consume::ConsumeArgs),
    /// List, describe and delete consumer groups, reset their offsets (with
    /// an audit reason) and read the audit log.
    #[command(subcommand)]
    Group(group::GroupCommand),
    /// Produce unique checksummed records, consume them with a group, and
    /// check from the recorded history that nothing acknowledged was lost.
    Verify(verify::VerifyArgs),
    /// The brokers and the controller, whether anything is wrong, and
    /// moving leaderships (maintenance, preferred leaders).
    #[command(subcommand)]
    Cluster(cluster::ClusterCommand),
    /// One partition's leadership.
    #[command(subcommand)]
    Partition(partition::PartitionCommand),
    /// Create, delete and list users (SCRAM credentials).
    #[command(subcommand)]
    User(user::UserCommand),
    /// Add, remove and list access rules (ACLs).
    #[command(subcommand)]
    Acl(acl::AclCommand),
    /// Set, describe and remove quotas (bytes per second, request time,
    /// connections).
    #[command(subcommand)]
    Quota(quota::QuotaCommand),
}

/// Exit code of `verify` when the checker found violations.
const EXIT_VIOLATIONS: u8 = 3;

/// Options every command shares.
#[derive(Clone, Debug)]
pub(crate) struct Global {
    pub client: ClientConfig,
    pub json: bool,
}

fn main() -> ExitCode {
    let mut cli = Cli::parse();
    if let Err(message) = merge_client_config(&mut cli) {
        eprintln!("error: {message}");
        return ExitCode::from(2);
    }
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let (tls, sasl) = match client_tls(&cli).and_then(|tls| Ok((tls, client_sasl(&cli)?))) {
        Ok(security) => security,
        Err(message) => {
            eprintln!("error: {message}");
            return ExitCode::from(2);
        }
    };
    let global = Global {
        client: ClientConfig {
            client_name: "corelog-cli".to_owned(),
            tls,
            sasl,
            ..ClientConfig::new(
                cli.bootstrap
                    .unwrap_or_else(|| DEFAULT_BOOTSTRAP.to_owned()),
            )
        },
        json: cli.json,
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Topic(command) => match topic::run(&global, command).await? {
                topic::Outcome::Done => Ok(()),
                // Already reported, topic by topic.
                topic::Outcome::Incomplete => return Ok(ExitCode::FAILURE),
            },
            Command::Produce(args) => match produce::run(&global, args).await? {
                produce::Outcome::AllStored => Ok(()),
                // Already reported, line by line.
                produce::Outcome::Incomplete => return Ok(ExitCode::FAILURE),
            },
            Command::Consume(args) => consume::run(&global, args).await,
            Command::Group(command) => group::run(&global, command).await,
            Command::Cluster(command) => {
                if !cluster::run(&global, command).await? {
                    return Ok(ExitCode::FAILURE);
                }
                Ok(())
            }
            Command::Partition(command) => {
                if !partition::run(&global, command).await? {
                    return Ok(ExitCode::FAILURE);
                }
                Ok(())
            }
            Command::User(command) => user::run(&global, command).await,
            Command::Acl(command) => acl::run(&global, command).await,
            Command::Quota(command) => quota::run(&global, command).await,
            Command::Verify(args) => match verify::run(&global, args).await? {
                verify::Verdict::Clean => Ok(()),
                verify::Verdict::Violations(count) => {
                    eprintln!("verify: {count} violations; see the report above");
                    return Ok(ExitCode::from(EXIT_VIOLATIONS));
                }
            },
        }
        .map(|()| ExitCode::SUCCESS)
    });
    match result {
        Ok(code) => code,
        Err(error) => {
            report(&error);
            ExitCode::FAILURE
        }
    }
}

/// TLS as the flags (or their environment variables) ask: none without
/// `--tls-ca`; a client certificate needs its key and a CA.
fn client_tls(cli: &Cli) -> Result<Option<ClientTls>, String> {
    let identity = match (&cli.tls_cert, &cli.tls_key) {
        (Some(cert), Some(key)) => Some((cert.as_path(), key.as_path())),
        (None, None) => None,
        (Some(_), None) => return Err("--tls-cert needs --tls-key, its private key".to_owned()),
        (None, Some(_)) => return Err("--tls-key needs --tls-cert, its certificate".to_owned()),
    };
    match (&cli.tls_ca, identity) {
        (Some(ca), identity) => ClientTls::from_files(ca, identity)
            .map(Some)
            .map_err(|error| error.to_string()),
        (None, Some(_)) => Err(
            "--tls-cert and --tls-key need --tls-ca, the CA that signed the brokers' certificates"
                .to_owned(),
        ),
        (None, None) => Ok(None),
    }
}

/// Fills the connection settings no flag or environment variable gave from
/// the `--client-config` file, if there is one.
fn merge_client_config(cli: &mut Cli) -> Result<(), String> {
    use clap::ValueEnum;
    let Some(path) = &cli.client_config else {
        return Ok(());
    };
    let file = settings::ClientSettings::read(path)?;
    cli.bootstrap = cli.bootstrap.take().or(file.bootstrap);
    cli.tls_ca = cli.tls_ca.take().or(file.tls_ca);
    cli.tls_cert = cli.tls_cert.take().or(file.tls_cert);
    cli.tls_key = cli.tls_key.take().or(file.tls_key);
    cli.sasl_user = cli.sasl_user.take().or(file.sasl_user);
    cli.sasl_password_file = cli.sasl_password_file.take().or(file.sasl_password_file);
    if cli.sasl_mechanism.is_none()
        && let Some(name) = file.sasl_mechanism
    {
        cli.sasl_mechanism = Some(user::Mechanism::from_str(&name, false).map_err(|_| {
            format!(
                "client config {}: sasl_mechanism {name:?} is not SCRAM-SHA-256 or SCRAM-SHA-512",
                path.display()
            )
        })?);
    }
    Ok(())
}

/// The login the flags (or their environment variables) ask for: none
/// without `--sasl-user`, which needs a password file.
fn client_sasl(cli: &Cli) -> Result<Option<SaslCredentials>, String> {
    match (&cli.sasl_user, &cli.sasl_password_file) {
        (Some(user), Some(file)) => {
            let mechanism = cli.sasl_mechanism.unwrap_or(user::Mechanism::Sha256);
            SaslCredentials::scram_from_file(mechanism.into(), user, file)
                .map(Some)
                .map_err(|error| error.to_string())
        }
        (Some(_), None) => Err(
            "--sasl-user needs --sasl-password-file, a file whose first line is the password"
                .to_owned(),
        ),
        (None, Some(_)) => Err("--sasl-password-file needs --sasl-user".to_owned()),
        (None, None) => Ok(None),
    }
}

/// Prints an error and, where the error alone does not say it, what to do.
pub(crate) fn report(error: &ClientError) {
    report_with("", error);
}

/// Prints an error after `prefix` (for example `line 3: `), and the hint.
pub(crate) fn report_with(prefix: &str, error: &ClientError) {
    // The error may quote names another tenant chose (a broker's message
    // about a group, say): never pass their control characters through.
    let said = format!("{prefix}{error}");
    let lines: Vec<_> = said.split('\n').map(crate::output::printable).collect();
    eprintln!("error: {}", lines.join("\n"));
    if let Some(hint) = hint(error) {
        eprintln!("hint: {hint}");
    }
}

fn hint(error: &ClientError) -> Option<&'static str> {
    match error {
        ClientError::OffsetOutOfRange { gap, .. } if gap.is_past_end() => Some(
            "start at an offset up to the end with --offset, or read only new records with --follow",
        ),
        ClientError::OffsetOutOfRange { .. } => Some(
            "the records were deleted by retention; pass --on-gap reset to continue from the log start, or --from-beginning",
        ),
        ClientError::Broker {
            code: ErrorCode::UnknownTopicOrPartition,
            ..
        } => Some("list topics with `corelog topic list`, create one with `corelog topic create`"),
        ClientError::Broker {
            code: ErrorCode::GroupNotEmpty,
            ..
        } => Some(
            "stop the group's consumers first (see `corelog group describe GROUP`); static members leave after their session timeout",
        ),
        ClientError::Broker {
            code: ErrorCode::UnknownGroup,
            ..
        } => Some("list groups with `corelog group list`"),
        ClientError::Broker {
            code: ErrorCode::NotController,
            ..
        } => Some(
            "the cluster's controller has no leader: a majority of its voters must be running; see `corelog cluster health`",
        ),
        ClientError::UnsupportedApi { .. } => {
            Some("rebuild both with `make build` so that corelog and corelogd match")
        }
        _ => None,
    }
}
