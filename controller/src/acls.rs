//! Access control lists: who may do what to which resource, kept in cluster
//! metadata so that every broker decides alike, and the pure decision
//! ([`Acls::authorize`]) each broker makes per request.
//!
//! A binding is `principal · resource type · pattern · name · operation ·
//! permission`. The principal is a user name (or a certificate's mapped
//! name), or `*` for every connection, logged in or not. A literal pattern
//! matches the one resource of that name (`*` matches all of its type); a
//! prefix pattern matches the names that begin with it, so `tenant-a.`
//! covers `tenant-a.orders` but never `tenant-ab.orders`.
//!
//! The decision: a matching deny refuses; otherwise a matching allow
//! grants; otherwise the request is refused (default deny). An allow of
//! `produce`, `fetch`, `create`, `delete` or `alter` on a topic implies
//! `describe` of it, and `group-admin` implies `group-read` (so a consumer
//! needs one binding, not two). A deny refuses just its own operation: a
//! deny of `fetch` leaves the `describe` an allow of `fetch` implied, and a
//! deny of `describe` refuses it whatever implies it (as in Kafka).
//!
//! Encoding of one binding (in [`crate::command::Command::PutAcl`],
//! [`crate::command::Command::DeleteAcl`] and the metadata snapshot):
//!
//! ```text
//! principal str · resource type u8 · pattern u8 · name str · operation u8 · permission u8
//! ```

use std::collections::BTreeSet;

use crate::codec::{DecodeError, Reader, Writer};

pub use corelog_wire::acl::{Operation, PatternType, Permission, ResourceType};

/// Most bindings a cluster holds: every broker checks requests against
/// them.
pub const ACLS_MAX: usize = 100_000;
/// Longest principal or resource name in a binding.
pub const ACL_NAME_BYTES_MAX: usize = 255;

/// One rule.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AclBinding {
    /// A principal's name, or `*` for every connection.
    pub principal: String,
    /// What kind of resource it guards.
    pub resource_type: ResourceType,
    /// How `name` matches.
    pub pattern: PatternType,
    /// The resource name or prefix.
    pub name: String,
    /// The operation.
    pub operation: Operation,
    /// Allow or deny.
    pub permission: Permission,
}

/// Every principal.
pub const ANY_PRINCIPAL: &str = "*";

impl AclBinding {
    /// Checks the binding: names of 1 to [`ACL_NAME_BYTES_MAX`] printable
    /// bytes, an operation that applies to its resource type, and `*` as
    /// the cluster's name.
    ///
    /// # Errors
    /// What is wrong with it, as a sentence.
    pub fn check(&self) -> Result<(), String> {
        for (what, name) in [
            ("principal", &self.principal),
            ("resource name", &self.name),
        ] {
            if name.is_empty() || name.len() > ACL_NAME_BYTES_MAX {
                return Err(format!(
                    "a {what} has 1 to {ACL_NAME_BYTES_MAX} bytes, not {}",
                    name.len()
                ));
            }
            if name.chars().any(|c| c.is_whitespace() || c.is_control()) {
                return Err(format!(
                    "{what} {name:?} holds a space or control character"
                ));
            }
        }
        if let Some(applies_to) = self.operation.resource_type()
            && applies_to != self.resource_type
        {
            return Err(format!(
                "{} applies to a {applies_to}, not a {}",
                self.operation, self.resource_type
            ));
        }
        if self.operation == Operation::Describe && self.resource_type == ResourceType::Cluster {
            return Err("describe applies to a topic or a group, not the cluster".to_owned());
        }
        if self.resource_type == ResourceType::Cluster
            && (self.name != "*" || self.pattern != PatternType::Literal)
        {
            return Err("the cluster resource is named '*' (literal)".to_owned());
        }
        Ok(())
    }

    fn matches(&self, principal: Option<&str>, resource_type: ResourceType, name: &str) -> bool {
        let principal_matches =
            self.principal == ANY_PRINCIPAL || principal == Some(self.principal.as_str());
        principal_matches
            && self.resource_type == resource_type
            && match self.pattern {
                PatternType::Literal => self.name == "*" || self.name == name,
                PatternType::Prefix => name.starts_with(self.name.as_str()),
            }
    }

    pub(crate) fn write(&self, writer: &mut Writer) {
        writer.str(&self.principal);
        writer.u8(self.resource_type.code());
        writer.u8(self.pattern.code());
        writer.str(&self.name);
        writer.u8(self.operation.code());
        writer.u8(self.permission.code());
    }

    pub(crate) fn read(reader: &mut Reader<'_>) -> Result<AclBinding, DecodeError> {
        fn code<T>(
            reader: &mut Reader<'_>,
            what: &'static str,
            from_code: fn(u8) -> Option<T>,
        ) -> Result<T, DecodeError> {
            let at = reader.position();
            let code = reader.u8(what)?;
            from_code(code)
                .ok_or_else(|| reader.invalid_at(what, at, format!("unknown code {code}")))
        }
        Ok(AclBinding {
            principal: reader.str("acl principal", ACL_NAME_BYTES_MAX)?,
            resource_type: code(reader, "resource type", ResourceType::from_code)?,
            pattern: code(reader, "pattern type", PatternType::from_code)?,
            name: reader.str("resource name", ACL_NAME_BYTES_MAX)?,
            operation: code(reader, "operation", Operation::from_code)?,
            permission: code(reader, "permission", Permission::from_code)?,
        })
    }
}

impl std::fmt::Display for AclBinding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {} {} {} {}:{}",
            self.permission,
            self.principal,
            self.operation,
            self.resource_type,
            self.pattern,
            self.name
        )
    }
}

/// The bindings of a cluster, in a canonical order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Acls {
    bindings: BTreeSet<AclBinding>,
}

impl Acls {
    /// Every binding, in order.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &AclBinding> {
        self.bindings.iter()
    }

    /// How many bindings there are.
    #[must_use]
    pub fn len(&self) -> usize {
        self.bindings.len()
    }

    /// Whether there are none.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.bindings.is_empty()
    }

    /// Whether the binding is there.
    #[must_use]
    pub fn contains(&self, binding: &AclBinding) -> bool {
        self.bindings.contains(binding)
    }

    /// Adds a binding; false if it was there.
    pub(crate) fn insert(&mut self, binding: AclBinding) -> bool {
        self.bindings.insert(binding)
    }

    /// Removes a binding; false if it was not there.
    pub(crate) fn remove(&mut self, binding: &AclBinding) -> bool {
        self.bindings.remove(binding)
    }

    /// Whether `principal` (`None`: a connection that did not log in,
    /// which only `*` bindings match) may do `operation` to the resource.
    /// See the module docs for the rule.
    #[must_use]
    pub fn authorize(
        &self,
        principal: Option<&str>,
        operation: Operation,
        resource_type: ResourceType,
        name: &str,
    ) -> bool {
        let mut allowed = false;
        for binding in &self.bindings {
            if !binding.matches(principal, resource_type, name) {
                continue;
            }
            match binding.permission {
                Permission::Deny if binding.operation == operation => return false,
                Permission::Allow if grants(binding.operation, operation) => allowed = true,
                _ => {}
            }
        }
        allowed
    }

    /// Whether some binding could let `principal` do `operation` to some
    /// resource of the type (a coarse check for requests that name none,
    /// such as asking for a producer id).
    #[must_use]
    pub fn allows_any(
        &self,
        principal: Option<&str>,
        operation: Operation,
        resource_type: ResourceType,
    ) -> bool {
        self.bindings.iter().any(|binding| {
            binding.permission == Permission::Allow
                && binding.resource_type == resource_type
                && grants(binding.operation, operation)
                && (binding.principal == ANY_PRINCIPAL
                    || principal == Some(binding.principal.as_str()))
        })
    }
}

impl FromIterator<AclBinding> for Acls {
    fn from_iter<I: IntoIterator<Item = AclBinding>>(iter: I) -> Acls {
        Acls {
            bindings: iter.into_iter().collect(),
        }
    }
}

/// Whether an allow of `granted` also grants `wanted` on the same resource.
fn grants(granted: Operation, wanted: Operation) -> bool {
    granted == wanted
        || match wanted {
            Operation::Describe => matches!(
                granted,
                Operation::Produce
                    | Operation::Fetch
                    | Operation::Create
                    | Operation::Delete
                    | Operation::Alter
                    | Operation::GroupRead
                    | Operation::GroupAdmin
            ),
            Operation::GroupRead => granted == Operation::GroupAdmin,
            _ => false,
        }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn binding(
        principal: &str,
        permission: Permission,
        operation: Operation,
        pattern: PatternType,
        name: &str,
    ) -> AclBinding {
        AclBinding {
            principal: principal.to_owned(),
            resource_type: operation.resource_type().unwrap_or(ResourceType::Topic),
            pattern,
            name: name.to_owned(),
            operation,
            permission,
        }
    }

    #[test]
    fn nothing_is_allowed_without_a_binding() {
        let acls = Acls::default();
        assert!(!acls.authorize(
            Some("alice"),
            Operation::Fetch,
            ResourceType::Topic,
            "orders"
        ));
        assert!(!acls.allows_any(Some("alice"), Operation::Produce, ResourceType::Topic));
    }

    #[test]
    fn a_prefix_does_not_reach_the_neighbouring_tenant() {
        let acls: Acls = [binding(
            "alice",
            Permission::Allow,
            Operation::Fetch,
            PatternType::Prefix,
            "tenant-a.",
        )]
        .into_iter()
        .collect();
        let fetch =
            |name| acls.authorize(Some("alice"), Operation::Fetch, ResourceType::Topic, name);
        assert!(fetch("tenant-a.orders"));
        assert!(!fetch("tenant-ab.orders"));
        assert!(!fetch("tenant-a"));
        // Another principal, and an anonymous connection, get nothing.
        assert!(!acls.authorize(
            Some("bob"),
            Operation::Fetch,
            ResourceType::Topic,
            "tenant-a.x"
        ));
        assert!(!acls.authorize(None, Operation::Fetch, ResourceType::Topic, "tenant-a.x"));
        // Fetch implies describe, not produce.
        assert!(acls.authorize(
            Some("alice"),
            Operation::Describe,
            ResourceType::Topic,
            "tenant-a.x"
        ));
        assert!(!acls.authorize(
            Some("alice"),
            Operation::Produce,
            ResourceType::Topic,
            "tenant-a.x"
        ));
    }

    #[test]
    fn a_deny_wins_over_any_allow_and_the_wildcards_match_everyone() {
        let acls: Acls = [
            binding(
                "*",
                Permission::Allow,
                Operation::Produce,
                PatternType::Literal,
                "*",
            ),
            binding(
                "mallory",
                Permission::Deny,
                Operation::Produce,
                PatternType::Prefix,
                "pay",
            ),
        ]
        .into_iter()
        .collect();
        let produce =
            |who, name| acls.authorize(who, Operation::Produce, ResourceType::Topic, name);
        assert!(produce(Some("alice"), "payments"));
        assert!(produce(None, "payments"));
        assert!(!produce(Some("mallory"), "payments"));
        assert!(produce(Some("mallory"), "orders"));
    }

    #[test]
    fn group_admin_implies_group_read_and_not_the_other_way() {
        let admin: Acls = [binding(
            "ops",
            Permission::Allow,
            Operation::GroupAdmin,
            PatternType::Literal,
            "billing",
        )]
        .into_iter()
        .collect();
        assert!(admin.authorize(
            Some("ops"),
            Operation::GroupRead,
            ResourceType::Group,
            "billing"
        ));
        let reader: Acls = [binding(
            "app",
            Permission::Allow,
            Operation::GroupRead,
            PatternType::Literal,
            "billing",
        )]
        .into_iter()
        .collect();
        assert!(!reader.authorize(
            Some("app"),
            Operation::GroupAdmin,
            ResourceType::Group,
            "billing"
        ));
        // A group binding never grants a topic of the same name.
        assert!(!reader.authorize(
            Some("app"),
            Operation::Describe,
            ResourceType::Topic,
            "billing"
        ));
    }

    #[test]
    fn bindings_are_checked_and_round_trip() {
        let good = binding(
            "alice",
            Permission::Deny,
            Operation::GroupAdmin,
            PatternType::Prefix,
            "team-",
        );
        good.check().unwrap();
        let mut writer = Writer::default();
        good.write(&mut writer);
        let mut reader = Reader::new(&writer.bytes, 0);
        assert_eq!(AclBinding::read(&mut reader).unwrap(), good);
        reader.finish().unwrap();

        let wrong_type = AclBinding {
            resource_type: ResourceType::Topic,
            ..good.clone()
        };
        assert!(
            wrong_type
                .check()
                .unwrap_err()
                .contains("applies to a group")
        );
        let cluster = binding(
            "ops",
            Permission::Allow,
            Operation::ClusterAdmin,
            PatternType::Prefix,
            "x",
        );
        assert!(cluster.check().unwrap_err().contains("'*'"));
        let spaced = AclBinding {
            principal: "a b".to_owned(),
            ..good
        };
        assert!(spaced.check().is_err());
        assert_eq!(Operation::parse("group-admin"), Ok(Operation::GroupAdmin));
        assert!(
            Operation::parse("write")
                .unwrap_err()
                .contains("produce, fetch")
        );
    }
}
