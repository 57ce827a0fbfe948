//! What one request may do: the connection's principal against the
//! cluster's ACLs ([`corelog_controller::acls`]), as of the metadata the
//! request sees. A new ACL therefore holds for the next request of every
//! open connection, as soon as this broker applied it.
//!
//! With `--authorization off` (the default), this broker's own calls, the
//! brokers of the cluster and the `--super-users` may do everything.
//! Otherwise a request is served only where an ACL allows it.
//!
//! A refusal on a topic reads the same whether the topic exists or not
//! (`TOPIC_AUTHORIZATION_FAILED`), so that guessing names reveals nothing.

use std::sync::Arc;

use corelog_controller::acls::{Operation, ResourceType};
use corelog_wire::error::ErrorCode;

use super::session::Principal;
use crate::config::{Authorization, BrokerConfig};
use crate::metadata::MetadataSnapshot;
use crate::partition::PartitionError;

/// The decision for one request.
#[derive(Clone, Debug)]
pub struct Access {
    /// The name ACLs match; `None` for a connection that did not log in
    /// (only `*` rules match it).
    principal: Option<String>,
    /// The metadata whose ACLs decide; `None`: everything is allowed.
    restricted_by: Option<Arc<MetadataSnapshot>>,
    /// A broker of the cluster (this one, or a peer that proved the
    /// cluster secret): it may also write the internal topics.
    broker: bool,
    /// Whether the principal's topic, partition and group limits apply:
    /// it logged in and is not a super user.
    limited: bool,
}

impl Access {
    /// Everything allowed: this broker's own calls.
    #[must_use]
    pub fn unrestricted() -> Access {
        Access {
            principal: None,
            restricted_by: None,
            broker: true,
            limited: false,
        }
    }

    /// What `principal` may do under `config`, by the ACLs of `metadata`.
    #[must_use]
    pub fn of(
        config: &BrokerConfig,
        principal: Option<&Principal>,
        metadata: Arc<MetadataSnapshot>,
    ) -> Access {
        if let Some(Principal::Broker(_)) = principal {
            return Access::unrestricted();
        }
        let name = principal.and_then(Principal::name);
        let super_user =
            name.is_some_and(|name| config.super_users.iter().any(|user| user == name));
        let everything = config.authorization == Authorization::Off || super_user;
        Access {
            principal: name.map(str::to_owned),
            restricted_by: (!everything).then_some(metadata),
            broker: false,
            limited: name.is_some() && !super_user,
        }
    }

    /// Whether a broker of the cluster asks (this one, or a peer that
    /// proved the cluster secret): only brokers write internal topics
    /// (`__audit` records of a group whose coordinator does not lead it).
    #[must_use]
    pub fn is_broker(&self) -> bool {
        self.broker
    }

    /// The authenticated principal's name, if the connection logged in
    /// (what audit records name).
    #[must_use]
    pub fn principal(&self) -> Option<&str> {
        self.principal.as_deref()
    }

    /// The principal whose topic, partition and group limits a creation
    /// counts against ([`corelog_controller::limits`]): a logged-in
    /// principal that is not a super user. `None` for super users, the
    /// brokers, and connections that did not log in (a cluster without
    /// authentication has no principal to key a budget to).
    #[must_use]
    pub fn limited_principal(&self) -> Option<&str> {
        self.principal.as_deref().filter(|_| self.limited)
    }

    /// Whether anything is refused at all (else the checks can be skipped).
    #[must_use]
    pub fn restricts(&self) -> bool {
        self.restricted_by.is_some()
    }

    /// Whether the ACLs that decide are not known yet: a cluster member
    /// that has just started has no metadata until the controller
    /// answers, and would refuse everything by default (for good, as far
    /// as the client can tell). Such requests are answered
    /// `BROKER_NOT_READY`, which clients retry.
    #[must_use]
    pub fn is_undecided(&self) -> bool {
        self.restricted_by
            .as_ref()
            .is_some_and(|metadata| !metadata.is_loaded())
    }

    /// Whether the request may do `operation` to the named resource.
    #[must_use]
    pub fn allows(&self, operation: Operation, resource_type: ResourceType, name: &str) -> bool {
        self.restricted_by.as_ref().is_none_or(|metadata| {
            metadata.cluster.state.acls().authorize(
                self.principal.as_deref(),
                operation,
                resource_type,
                name,
            )
        })
    }

    /// Whether the request may do `operation` to some resource of the type
    /// (for requests that name none, such as asking for a producer id).
    #[must_use]
    pub fn allows_any(&self, operation: Operation, resource_type: ResourceType) -> bool {
        self.restricted_by.as_ref().is_none_or(|metadata| {
            metadata.cluster.state.acls().allows_any(
                self.principal.as_deref(),
                operation,
                resource_type,
            )
        })
    }

    /// `operation` on topic `name`, or the refusal that a missing topic
    /// would get as well.
    ///
    /// # Errors
    /// `TOPIC_AUTHORIZATION_FAILED`.
    pub fn topic(&self, operation: Operation, name: &str) -> Result<(), PartitionError> {
        if self.allows(operation, ResourceType::Topic, name) {
            return Ok(());
        }
        Err(PartitionError::new(
            ErrorCode::TopicAuthorizationFailed,
            format!(
                "not authorized to {operation} topic {name:?}, or it does not exist{}",
                self.who()
            ),
        ))
    }

    /// `operation` on group `group`.
    ///
    /// # Errors
    /// `GROUP_AUTHORIZATION_FAILED`.
    pub fn group(&self, operation: Operation, group: &str) -> Result<(), PartitionError> {
        if self.allows(operation, ResourceType::Group, group) {
            return Ok(());
        }
        Err(PartitionError::new(
            ErrorCode::GroupAuthorizationFailed,
            format!(
                "not authorized to {operation} group {group:?}{}",
                self.who()
            ),
        ))
    }

    /// `cluster-admin`: managing users, ACLs and quotas.
    ///
    /// # Errors
    /// `CLUSTER_ADMIN_REQUIRED`.
    pub fn cluster_admin(&self) -> Result<(), PartitionError> {
        if self.allows(Operation::ClusterAdmin, ResourceType::Cluster, "*") {
            return Ok(());
        }
        Err(PartitionError::new(
            ErrorCode::ClusterAdminRequired,
            format!(
                "managing users, ACLs and quotas needs cluster-admin{}",
                self.who()
            ),
        ))
    }

    fn who(&self) -> String {
        match &self.principal {
            Some(name) => format!(" (as {name:?})"),
            None => " (as an unauthenticated connection)".to_owned(),
        }
    }
}
