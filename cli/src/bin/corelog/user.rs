//! `corelog user …`: create a user or change its password (`create`, the
//! password read from stdin), delete one, list them. The salted keys are
//! derived here; the password never leaves this process.

use std::io::BufRead;

use clap::{Args, Subcommand, ValueEnum};
use corelog_client::admin::DEFAULT_ITERATIONS;
use corelog_client::{Admin, ClientError, ScramMechanism};
use serde_json::json;

use crate::Global;
use crate::output::table;

#[derive(Debug, Subcommand)]
pub(crate) enum UserCommand {
    /// Creates a user, or gives an existing one a new password (closing
    /// its open connections).
    Create(CreateArgs),
    /// Deletes a user; its open connections are closed.
    Delete {
        /// The user.
        name: String,
    },
    /// Lists the users and their credentials' mechanisms.
    List,
}

#[derive(Debug, Args)]
pub(crate) struct CreateArgs {
    /// The user name (letters, digits and punctuation but ',' and '=').
    name: String,
    /// Read the password from the first line of stdin (required: a
    /// password never goes on the command line, where `ps` shows it).
    #[arg(long, required = true)]
    password_stdin: bool,
    /// Mechanisms to make credentials for [default: both].
    #[arg(long = "mechanism", value_enum)]
    mechanisms: Vec<Mechanism>,
    /// PBKDF2 iterations, at least 4096.
    #[arg(long, default_value_t = DEFAULT_ITERATIONS)]
    iterations: u32,
}

/// A SCRAM mechanism as the flags spell it.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub(crate) enum Mechanism {
    #[value(name = "SCRAM-SHA-256")]
    Sha256,
    #[value(name = "SCRAM-SHA-512")]
    Sha512,
}

impl From<Mechanism> for ScramMechanism {
    fn from(mechanism: Mechanism) -> Self {
        match mechanism {
            Mechanism::Sha256 => ScramMechanism::Sha256,
            Mechanism::Sha512 => ScramMechanism::Sha512,
        }
    }
}

pub(crate) async fn run(global: &Global, command: UserCommand) -> Result<(), ClientError> {
    let admin = Admin::connect(global.client.clone()).await?;
    match command {
        UserCommand::Create(args) => {
            let password = read_password()?;
            let mechanisms: Vec<ScramMechanism> = if args.mechanisms.is_empty() {
                vec![ScramMechanism::Sha256, ScramMechanism::Sha512]
            } else {
                args.mechanisms.iter().map(|m| (*m).into()).collect()
            };
            let created = admin
                .put_user(&args.name, &password, &mechanisms, args.iterations)
                .await?;
            if global.json {
                println!("{}", json!({"user": args.name, "created": created}));
            } else if created {
                println!("created user {}", args.name);
            } else {
                println!(
                    "changed the password of user {}; its open connections are closed",
                    args.name
                );
            }
        }
        UserCommand::Delete { name } => {
            admin.delete_user(&name).await?;
            if global.json {
                println!("{}", json!({"user": name, "deleted": true}));
            } else {
                println!("deleted user {name}; its open connections are closed");
            }
        }
        UserCommand::List => {
            let users = admin.list_users().await?;
            if global.json {
                println!("{}", json!({ "users": users }));
            } else {
                let rows: Vec<Vec<String>> = users
                    .iter()
                    .map(|user| {
                        let credentials = user
                            .credentials
                            .iter()
                            .map(|(mechanism, iterations)| format!("{mechanism} ({iterations})"))
                            .collect::<Vec<_>>()
                            .join(", ");
                        vec![user.name.clone(), credentials]
                    })
                    .collect();
                print!("{}", table(&["USER", "CREDENTIALS (ITERATIONS)"], &rows));
            }
        }
    }
    Ok(())
}

/// The first line of stdin, without its line ending.
fn read_password() -> Result<String, ClientError> {
    let mut line = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut line)
        .map_err(|error| ClientError::InvalidArgument(format!("cannot read stdin: {error}")))?;
    let password = line.trim_end_matches(['\n', '\r']).to_owned();
    if password.is_empty() {
        return Err(ClientError::InvalidArgument(
            "no password on stdin: pipe it in, e.g. `corelog user create NAME --password-stdin < file`"
                .to_owned(),
        ));
    }
    Ok(password)
}
