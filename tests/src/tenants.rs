//! A secured broker with tenants, for tests of what one tenant can learn
//! or do to another: users `admin` (a super user) and the tenants asked
//! for, each with the password `<user>-password`, made while security is
//! off, then the broker restarted with authentication required and
//! authorization on (the documented way to bring one up). Each tenant
//! starts with no rights; [`Tenants::grant`] adds ACLs as `admin`.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Output;

use corelog_wire::message::authenticate::AuthenticateResponse;
use corelog_wire::message::{self, authenticate::AuthenticateRequest};

use crate::cli::{corelog, text};
use crate::{Broker, Client};

/// The password every test user has: `<user>-password`.
#[must_use]
pub fn password_of(user: &str) -> String {
    format!("{user}-password")
}

/// A secured single broker with users (see the module docs).
#[derive(Debug)]
pub struct Tenants {
    /// The broker.
    pub broker: Broker,
    files: BTreeMap<String, String>,
    _temp: tempfile::TempDir,
}

impl Tenants {
    /// Starts a broker with `admin` and `users`, creates `topics`
    /// (name, partitions) as an unrestricted client, then restarts it
    /// secured with `extra_args` added.
    ///
    /// # Panics
    /// If a user or topic cannot be created.
    #[must_use]
    pub fn start(users: &[&str], topics: &[(&str, u32)], extra_args: &[&str]) -> Tenants {
        let temp = tempfile::tempdir().unwrap();
        let mut broker = Broker::start(&[]);
        let addr = broker.addr.to_string();
        let mut files = BTreeMap::new();
        for user in std::iter::once(&"admin").chain(users) {
            let password = password_of(user);
            let created = corelog(
                &addr,
                &["user", "create", user, "--password-stdin"],
                Some(&password),
            );
            assert!(created.status.success(), "{}", text(&created.stderr));
            let file = temp.path().join(format!("{user}.password"));
            std::fs::write(&file, format!("{password}\n")).unwrap();
            files.insert((*user).to_owned(), path(&file));
        }
        for (topic, partitions) in topics {
            let created = corelog(
                &addr,
                &[
                    "topic",
                    "create",
                    topic,
                    "--partitions",
                    &partitions.to_string(),
                ],
                None,
            );
            assert!(created.status.success(), "{}", text(&created.stderr));
        }
        broker.terminate();
        broker.extra_args.extend(
            [
                "--authentication",
                "required",
                "--authorization",
                "on",
                "--super-users",
                "admin",
            ]
            .map(str::to_owned),
        );
        broker
            .extra_args
            .extend(extra_args.iter().map(|arg| (*arg).to_owned()));
        broker.spawn();
        Tenants {
            broker,
            files,
            _temp: temp,
        }
    }

    /// `corelog` logged in as `user`.
    #[must_use]
    pub fn run(&self, user: &str, args: &[&str], stdin: Option<&str>) -> Output {
        let login = [
            "--sasl-user",
            user,
            "--sasl-password-file",
            &self.files[user],
        ];
        let all: Vec<&str> = login.iter().chain(args).copied().collect();
        corelog(&self.broker.addr.to_string(), &all, stdin)
    }

    /// As [`Tenants::run`], asserting success; its stdout.
    #[track_caller]
    #[must_use]
    pub fn ok(&self, user: &str, args: &[&str], stdin: Option<&str>) -> String {
        let output = self.run(user, args, stdin);
        assert!(
            output.status.success(),
            "{user} {args:?}: {}",
            text(&output.stderr)
        );
        text(&output.stdout)
    }

    /// As [`Tenants::run`], asserting failure; its stderr.
    #[track_caller]
    #[must_use]
    pub fn refused(&self, user: &str, args: &[&str], stdin: Option<&str>) -> String {
        let output = self.run(user, args, stdin);
        assert!(
            !output.status.success(),
            "{user} {args:?} was served: {}",
            text(&output.stdout)
        );
        text(&output.stderr)
    }

    /// `admin` adds a rule: `acl add` followed by `args`.
    #[track_caller]
    pub fn grant(&self, args: &[&str]) {
        let said = self.ok("admin", &[&["acl", "add"], args].concat(), None);
        assert!(said.contains("added"), "{said}");
    }

    /// Allows `user` `operations` on every topic and group starting with
    /// `prefix`: its tenant's namespace.
    #[track_caller]
    pub fn grant_prefix(&self, user: &str, prefix: &str, operations: &[&str]) {
        for operation in operations {
            let resource = if operation.starts_with("group-") {
                "--group"
            } else {
                "--topic"
            };
            self.grant(&[
                "--allow",
                user,
                "--operation",
                operation,
                resource,
                prefix,
                "--prefix",
            ]);
        }
    }

    /// A raw protocol client logged in as `user`.
    #[must_use]
    pub fn client_as(&self, user: &str) -> Client {
        let mut client = self.broker.client();
        scram_login(&mut client, user, &password_of(user));
        client
    }
}

fn path(file: &Path) -> String {
    file.display().to_string()
}

/// Logs `client` in as `user` with SCRAM-SHA-256 (on the raw wire).
///
/// # Panics
/// If the login fails.
pub fn scram_login(client: &mut Client, user: &str, password: &str) {
    use corelog_wire::sasl::scram::{ScramClient, ScramMechanism};

    let mut scram =
        ScramClient::new(ScramMechanism::Sha256, user, password, "raw-client-nonce").unwrap();
    let mut step = |payload: Vec<u8>| {
        let request = AuthenticateRequest {
            mechanism: ScramMechanism::Sha256.name().to_owned(),
            payload,
        };
        let body = client.call(&request, &[]).unwrap();
        let (archived, _) = message::decode_response::<AuthenticateResponse>(&body.bytes).unwrap();
        rkyv::deserialize::<AuthenticateResponse, rkyv::rancor::Error>(archived).unwrap()
    };
    let server_first = step(scram.first());
    assert_eq!(server_first.error_code, 0, "{server_first:?}");
    let server_final = step(scram.answer(&server_first.payload).unwrap());
    assert!(server_final.complete, "{server_final:?}");
    scram.verify(&server_final.payload).unwrap();
}
