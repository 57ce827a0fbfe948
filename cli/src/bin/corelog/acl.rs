//! `corelog acl …`: add, remove and list access rules. A rule is
//! `--allow|--deny PRINCIPAL --operation OP` on `--topic NAME`, `--group
//! NAME` or `--cluster`, the name literal or (with `--prefix`) a prefix.

use clap::{Args, Subcommand};
use corelog_client::admin::{AclFilter, AclRule};
use corelog_client::{Admin, ClientError, Operation, PatternType, Permission, ResourceType};
use serde_json::json;

use crate::Global;
use crate::output::table;

#[derive(Debug, Subcommand)]
pub(crate) enum AclCommand {
    /// Adds a rule; every broker applies it to open connections within a
    /// second.
    Add(RuleArgs),
    /// Removes a rule, given exactly as it was added.
    Remove(RuleArgs),
    /// Lists the rules, or those of a principal or resource.
    List(ListArgs),
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("permission").required(true).args(["allow", "deny"])))]
#[command(group(clap::ArgGroup::new("resource").required(true).args(["topic", "group", "cluster"])))]
pub(crate) struct RuleArgs {
    /// Grant to this principal (a user name, a certificate's name, or '*'
    /// for every connection).
    #[arg(long, value_name = "PRINCIPAL")]
    allow: Option<String>,
    /// Refuse to this principal; a deny wins over every allow.
    #[arg(long, value_name = "PRINCIPAL")]
    deny: Option<String>,
    /// produce, fetch, describe, create, delete, alter (topics);
    /// group-read, group-admin, describe (groups); cluster-admin.
    #[arg(long, value_parser = Operation::parse)]
    operation: Operation,
    /// The topic (or, with --prefix, topic name prefix); '*' for all.
    #[arg(long)]
    topic: Option<String>,
    /// The consumer group (or, with --prefix, group id prefix); '*' for all.
    #[arg(long)]
    group: Option<String>,
    /// The cluster: users, ACLs and quotas (with cluster-admin).
    #[arg(long)]
    cluster: bool,
    /// The name is a prefix: `tenant-a.` covers `tenant-a.orders`, never
    /// `tenant-ab.orders`.
    #[arg(long)]
    prefix: bool,
}

#[derive(Debug, Args)]
pub(crate) struct ListArgs {
    /// Only this principal's rules ('*': the rules for everyone).
    #[arg(long)]
    principal: Option<String>,
    /// Only rules on this topic name or prefix.
    #[arg(long, conflicts_with_all = ["group", "cluster"])]
    topic: Option<String>,
    /// Only rules on this group id or prefix.
    #[arg(long, conflicts_with = "cluster")]
    group: Option<String>,
    /// Only rules on the cluster.
    #[arg(long)]
    cluster: bool,
}

impl RuleArgs {
    fn rule(&self) -> AclRule {
        let (permission, principal) = match (&self.allow, &self.deny) {
            (Some(principal), _) => (Permission::Allow, principal.clone()),
            (None, Some(principal)) => (Permission::Deny, principal.clone()),
            // clap requires one of the two.
            (None, None) => (Permission::Deny, String::new()),
        };
        let (resource_type, name) = match (&self.topic, &self.group) {
            (Some(topic), _) => (ResourceType::Topic, topic.clone()),
            (None, Some(group)) => (ResourceType::Group, group.clone()),
            (None, None) => (ResourceType::Cluster, "*".to_owned()),
        };
        AclRule {
            principal,
            permission,
            operation: self.operation,
            resource_type,
            pattern: if self.prefix {
                PatternType::Prefix
            } else {
                PatternType::Literal
            },
            name,
        }
    }
}

pub(crate) async fn run(global: &Global, command: AclCommand) -> Result<(), ClientError> {
    let admin = Admin::connect(global.client.clone()).await?;
    match command {
        AclCommand::Add(args) => {
            let rule = args.rule();
            let created = admin.add_acl(&rule).await?;
            if global.json {
                println!("{}", json!({"acl": rule_json(&rule), "created": created}));
            } else if created {
                println!("added: {rule}");
            } else {
                println!("already there: {rule}");
            }
        }
        AclCommand::Remove(args) => {
            let rule = args.rule();
            admin.remove_acl(&rule).await?;
            if global.json {
                println!("{}", json!({"acl": rule_json(&rule), "removed": true}));
            } else {
                println!("removed: {rule}");
            }
        }
        AclCommand::List(args) => {
            let filter = AclFilter {
                principal: args.principal,
                resource_type: match (&args.topic, &args.group, args.cluster) {
                    (Some(_), _, _) => Some(ResourceType::Topic),
                    (None, Some(_), _) => Some(ResourceType::Group),
                    (None, None, true) => Some(ResourceType::Cluster),
                    (None, None, false) => None,
                },
                name: args.topic.or(args.group),
            };
            let rules = admin.list_acls(&filter).await?;
            if global.json {
                let rules: Vec<_> = rules.iter().map(rule_json).collect();
                println!("{}", json!({ "acls": rules }));
            } else {
                let rows: Vec<Vec<String>> = rules
                    .iter()
                    .map(|rule| {
                        vec![
                            rule.permission.to_string(),
                            rule.principal.clone(),
                            rule.operation.to_string(),
                            rule.resource_type.to_string(),
                            rule.pattern.to_string(),
                            rule.name.clone(),
                        ]
                    })
                    .collect();
                print!(
                    "{}",
                    table(
                        &[
                            "PERMISSION",
                            "PRINCIPAL",
                            "OPERATION",
                            "RESOURCE",
                            "PATTERN",
                            "NAME"
                        ],
                        &rows
                    )
                );
            }
        }
    }
    Ok(())
}

fn rule_json(rule: &AclRule) -> serde_json::Value {
    json!({
        "permission": rule.permission.name(),
        "principal": rule.principal,
        "operation": rule.operation.name(),
        "resource": rule.resource_type.name(),
        "pattern": rule.pattern.name(),
        "name": rule.name,
    })
}
