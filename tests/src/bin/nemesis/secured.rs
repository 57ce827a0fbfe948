//! `--secured`: the rig with the trust boundary on. Every connection is
//! TLS (the brokers' certificate names their own and their proxies'
//! addresses, and they verify each other against the test CA); brokers
//! require a login and decide by ACLs. An administrator whose client
//! certificate makes it a super user creates the workload's SCRAM user and
//! grants it exactly what the `corelog verify` workload needs, and the
//! workload then runs as that user, over TLS, under those ACLs.

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use corelog_client::admin::AclRule;
use corelog_client::{
    Admin, ClientConfig, ClientError, ClientTls, Operation, PatternType, Permission, ResourceType,
    SaslCredentials, ScramMechanism,
};
use corelog_tests::tls::{Issued, TestCa, Validity, secured_broker_args};

/// The administrator's name: its certificate's common name.
const ADMIN: &str = "nemesis-admin";
/// The workload's SCRAM user.
const WORKLOAD_USER: &str = "nemesis-workload";

/// Certificates and credentials of a secured rig.
pub struct Secured {
    ca: TestCa,
    broker: Issued,
    admin: Issued,
    password: String,
}

impl Secured {
    /// A CA, a broker certificate for `hosts`, an administrator's client
    /// certificate and a fresh workload password.
    pub fn new(hosts: &[Ipv4Addr]) -> Secured {
        let ca = TestCa::new("corelog nemesis CA");
        let names: Vec<String> = hosts.iter().map(ToString::to_string).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let broker = ca.issue("broker", &names, Validity::Now);
        let admin = ca.issue("admin", &[ADMIN], Validity::Now);
        // A test rig's password: unguessable enough from the clock.
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| since.as_nanos());
        let password = format!("nemesis-{nanos:x}-{}", std::process::id());
        Secured {
            ca,
            broker,
            admin,
            password,
        }
    }

    /// The brokers' security flags.
    pub fn broker_args(&self) -> Vec<String> {
        secured_broker_args(&self.broker, &self.ca, ADMIN)
    }

    /// Creates the workload's user and ACLs as the administrator, retrying
    /// while the cluster comes up; the workload's client settings.
    ///
    /// # Errors
    /// The last failure, once `patience` is spent.
    pub async fn enrol_workload(
        &self,
        client: &ClientConfig,
        topic: &str,
        group: &str,
        patience: Duration,
    ) -> Result<ClientConfig, ClientError> {
        let admin_config = ClientConfig {
            tls: Some(ClientTls::from_files(
                &self.ca.ca_file(),
                Some((&self.admin.cert, &self.admin.key)),
            )?),
            ..client.clone()
        };
        let deadline = Instant::now() + patience;
        loop {
            match self.grant(&admin_config, topic, group).await {
                Ok(()) => break,
                Err(error) if Instant::now() >= deadline => return Err(error),
                Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
        Ok(ClientConfig {
            tls: Some(ClientTls::from_files(&self.ca.ca_file(), None)?),
            sasl: Some(SaslCredentials::scram(
                ScramMechanism::Sha512,
                WORKLOAD_USER,
                &self.password,
            )?),
            ..client.clone()
        })
    }

    async fn grant(
        &self,
        admin: &ClientConfig,
        topic: &str,
        group: &str,
    ) -> Result<(), ClientError> {
        let admin = Admin::connect(admin.clone()).await?;
        admin
            .put_user(
                WORKLOAD_USER,
                &self.password,
                &[ScramMechanism::Sha512],
                corelog_client::admin::DEFAULT_ITERATIONS,
            )
            .await?;
        let rule = |operation, resource_type, name: &str| AclRule {
            principal: WORKLOAD_USER.to_owned(),
            permission: Permission::Allow,
            operation,
            resource_type,
            pattern: PatternType::Literal,
            name: name.to_owned(),
        };
        for rule in [
            rule(Operation::Create, ResourceType::Topic, topic),
            rule(Operation::Produce, ResourceType::Topic, topic),
            rule(Operation::Fetch, ResourceType::Topic, topic),
            rule(Operation::GroupRead, ResourceType::Group, group),
        ] {
            admin.add_acl(&rule).await?;
        }
        Ok(())
    }
}
