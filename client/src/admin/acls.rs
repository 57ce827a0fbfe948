//! Access rules (ACLs): add one ([`Admin::add_acl`]), remove one, list
//! them. Managing them needs `cluster-admin` (a super user, at first).

use std::time::Duration;

use corelog_wire::acl::{Operation, PatternType, Permission, ResourceType};
use corelog_wire::message::alter_acls::{AclChange, AlterAclsRequest};
use corelog_wire::message::describe_acls::{AclEntry, ArchivedAclEntry, DescribeAclsRequest};

use super::Admin;
use crate::error::ClientError;

/// How long the broker may take to commit a rule change.
const ACL_CHANGE_TIMEOUT: Duration = Duration::from_secs(20);

/// One access rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AclRule {
    /// A principal's name, or `*` for every connection.
    pub principal: String,
    /// Allow or deny.
    pub permission: Permission,
    /// The operation.
    pub operation: Operation,
    /// The resource type.
    pub resource_type: ResourceType,
    /// Literal name or prefix.
    pub pattern: PatternType,
    /// The resource name or prefix (`*` for the cluster).
    pub name: String,
}

impl AclRule {
    fn entry(&self) -> AclEntry {
        AclEntry {
            principal: self.principal.clone(),
            resource_type: self.resource_type.code(),
            pattern: self.pattern.code(),
            name: self.name.clone(),
            operation: self.operation.code(),
            permission: self.permission.code(),
        }
    }

    /// The rule of a listed entry; an error names a code this client does
    /// not know.
    fn from_entry(entry: &ArchivedAclEntry) -> Result<AclRule, String> {
        let unknown = |what: &str, code: u8| {
            format!("an ACL with {what} code {code}, which this client does not know (upgrade it)")
        };
        Ok(AclRule {
            principal: entry.principal.to_string(),
            permission: Permission::from_code(entry.permission)
                .ok_or_else(|| unknown("permission", entry.permission))?,
            operation: Operation::from_code(entry.operation)
                .ok_or_else(|| unknown("operation", entry.operation))?,
            resource_type: ResourceType::from_code(entry.resource_type)
                .ok_or_else(|| unknown("resource type", entry.resource_type))?,
            pattern: PatternType::from_code(entry.pattern)
                .ok_or_else(|| unknown("pattern", entry.pattern))?,
            name: entry.name.to_string(),
        })
    }
}

impl std::fmt::Display for AclRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {} {} on {} {}:{}",
            self.permission,
            self.principal,
            self.operation,
            self.resource_type,
            self.pattern,
            self.name
        )
    }
}

/// Which rules to list; `None` fields match every rule.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AclFilter {
    /// Only this principal's rules (`*`: the rules for everyone).
    pub principal: Option<String>,
    /// Only rules on this resource type.
    pub resource_type: Option<ResourceType>,
    /// Only rules with this resource name or prefix.
    pub name: Option<String>,
}

impl Admin {
    /// Adds `rule`; whether it is new. Every broker applies it to its open
    /// connections' next requests within a second.
    ///
    /// # Errors
    /// `CLUSTER_ADMIN_REQUIRED`, `INVALID_REQUEST` for a malformed rule;
    /// connection errors.
    pub async fn add_acl(&self, rule: &AclRule) -> Result<bool, ClientError> {
        self.alter_acl(rule, AclChange::Add).await
    }

    /// Removes `rule`, which must stand exactly as given.
    ///
    /// # Errors
    /// `ACL_NOT_FOUND`, `CLUSTER_ADMIN_REQUIRED`; connection errors.
    pub async fn remove_acl(&self, rule: &AclRule) -> Result<(), ClientError> {
        self.alter_acl(rule, AclChange::Remove).await.map(drop)
    }

    async fn alter_acl(&self, rule: &AclRule, change: AclChange) -> Result<bool, ClientError> {
        let request = AlterAclsRequest {
            change,
            acl: rule.entry(),
        };
        let connection = self.cluster.any_connection().await?;
        let reply = connection
            .call(&request, Vec::new(), ACL_CHANGE_TIMEOUT)
            .await?;
        let (response, _) = reply.decode()?;
        let detail = response.error_message.as_ref().map(|m| m.to_string());
        match ClientError::from_wire(
            response.error_code.to_native(),
            || format!("ACL {rule}"),
            detail,
        ) {
            Some(error) => Err(error),
            None => Ok(response.created),
        }
    }

    /// The rules that match `filter`.
    ///
    /// # Errors
    /// `CLUSTER_ADMIN_REQUIRED`; connection errors.
    pub async fn list_acls(&self, filter: &AclFilter) -> Result<Vec<AclRule>, ClientError> {
        let connection = self.cluster.any_connection().await?;
        let request = DescribeAclsRequest {
            principal: filter.principal.clone(),
            resource_type: filter.resource_type.map(ResourceType::code),
            name: filter.name.clone(),
        };
        let reply = connection
            .call(&request, Vec::new(), Duration::ZERO)
            .await?;
        let (response, _) = reply.decode()?;
        if let Some(error) =
            ClientError::from_wire(response.error_code.to_native(), || "ACLs".to_owned(), None)
        {
            return Err(error);
        }
        response
            .acls
            .iter()
            .map(AclRule::from_entry)
            .collect::<Result<_, _>>()
            .map_err(|detail| ClientError::Protocol {
                addr: connection.addr().to_owned(),
                detail,
            })
    }
}
