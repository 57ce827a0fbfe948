//! The vocabulary of access rules, shared by the controller (which keeps
//! and decides them, `corelog_controller::acls`), the broker and the
//! client: resource types, patterns, operations and permissions, each with
//! a stable code for encodings and the name the CLI and README use.

/// What a binding guards.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ResourceType {
    /// A topic, by name.
    Topic,
    /// A consumer group, by id.
    Group,
    /// The cluster itself (users, ACLs, quotas); its name is `*`.
    Cluster,
}

/// How a binding's name matches resources.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PatternType {
    /// The resource of exactly that name (`*`: every one of its type).
    Literal,
    /// Every resource whose name begins with it.
    Prefix,
}

/// What a request does to a resource (the README's table maps each API to
/// one).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Operation {
    /// Append records to a topic.
    Produce,
    /// Read a topic's records.
    Fetch,
    /// See that a topic or group exists and its state.
    Describe,
    /// Create a topic.
    Create,
    /// Delete a topic.
    Delete,
    /// Change a topic's settings.
    Alter,
    /// Join a group, commit and read its offsets.
    GroupRead,
    /// Reset a group's offsets, skip poison records, delete the group.
    GroupAdmin,
    /// Manage users, ACLs and quotas.
    ClusterAdmin,
}

/// Whether a binding grants or refuses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Permission {
    /// Grants, unless a deny matches too.
    Allow,
    /// Refuses, whatever allows match.
    Deny,
}

macro_rules! codes {
    ($type:ident, $what:literal, $( $variant:ident = $code:literal, $name:literal ),+ $(,)?) => {
        impl $type {
            /// Every value, in code order.
            pub const ALL: &'static [$type] = &[$($type::$variant),+];

            /// Its code in encodings.
            #[must_use]
            pub fn code(self) -> u8 {
                match self { $($type::$variant => $code),+ }
            }

            /// The value of `code`, if it names one.
            #[must_use]
            pub fn from_code(code: u8) -> Option<$type> {
                match code { $($code => Some($type::$variant),)+ _ => None }
            }

            /// Its name, as the CLI and the README spell it.
            #[must_use]
            pub fn name(self) -> &'static str {
                match self { $($type::$variant => $name),+ }
            }

            /// The value named `name`.
            ///
            /// # Errors
            /// A sentence listing the names there are.
            pub fn parse(name: &str) -> Result<$type, String> {
                match name {
                    $($name => Ok($type::$variant),)+
                    other => Err(format!(
                        concat!("unknown ", $what, " {:?}: use one of {}"),
                        other,
                        [$($name),+].join(", ")
                    )),
                }
            }
        }

        impl std::fmt::Display for $type {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}

codes!(
    ResourceType,
    "resource type",
    Topic = 1,
    "topic",
    Group = 2,
    "group",
    Cluster = 3,
    "cluster",
);
codes!(
    PatternType,
    "pattern type",
    Literal = 1,
    "literal",
    Prefix = 2,
    "prefix",
);
codes!(
    Operation,
    "operation",
    Produce = 1,
    "produce",
    Fetch = 2,
    "fetch",
    Describe = 3,
    "describe",
    Create = 4,
    "create",
    Delete = 5,
    "delete",
    Alter = 6,
    "alter",
    GroupRead = 7,
    "group-read",
    GroupAdmin = 8,
    "group-admin",
    ClusterAdmin = 9,
    "cluster-admin",
);
codes!(
    Permission,
    "permission",
    Allow = 1,
    "allow",
    Deny = 2,
    "deny",
);

impl Operation {
    /// The resource type the operation applies to.
    #[must_use]
    pub fn resource_type(self) -> Option<ResourceType> {
        match self {
            Operation::Produce
            | Operation::Fetch
            | Operation::Create
            | Operation::Delete
            | Operation::Alter => Some(ResourceType::Topic),
            Operation::GroupRead | Operation::GroupAdmin => Some(ResourceType::Group),
            Operation::ClusterAdmin => Some(ResourceType::Cluster),
            // Topics and groups alike.
            Operation::Describe => None,
        }
    }
}
