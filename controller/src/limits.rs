//! Per-principal limits on what a tenant may create: topics and
//! partitions (counted here, over the topics the metadata records as the
//! principal's) and consumer groups (counted by each group coordinator).
//! They bound what one tenant can add to the cluster's metadata and to
//! every broker's `/metrics`.
//!
//! A limit comes from the principal's own quota entry (`user:NAME`), else
//! from the default entry (`user:*`), else from the built-in default below;
//! each of the three limits falls back on its own, so an entry that only
//! raises a principal's topic count keeps the default partition and group
//! limits. The built-in defaults are generous for one application and
//! finite for an attacker.
//!
//! Who is counted: the broker records a topic's owner only for a
//! logged-in principal that is not a super user; super users, the
//! cluster's own internal topics, clusters without authentication (no
//! principal to key a budget to) and topics created before owners were
//! recorded count for nobody.

use crate::quotas::{QuotaEntity, QuotaLimits, Quotas};
use crate::state::TopicRecord;

/// Topics a principal may own without a quota entry.
pub const DEFAULT_TOPICS_PER_PRINCIPAL: u32 = 1_000;
/// Partitions (over all its topics) a principal may own without a quota
/// entry.
pub const DEFAULT_PARTITIONS_PER_PRINCIPAL: u32 = 10_000;
/// Consumer groups a principal may create on one group coordinator
/// without a quota entry.
pub const DEFAULT_GROUPS_PER_PRINCIPAL: u32 = 1_000;

/// The limits that apply to one principal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ObjectLimits {
    /// Topics it may own.
    pub topics: u32,
    /// Partitions it may own, over all its topics.
    pub partitions: u32,
    /// Groups it may create per coordinator.
    pub groups: u32,
}

impl ObjectLimits {
    /// The limits of `principal` under `quotas` (see the module docs).
    #[must_use]
    pub fn of(quotas: &Quotas, principal: &str) -> ObjectLimits {
        let own = quotas.get(&QuotaEntity::User(principal.to_owned()));
        let default = quotas.get(&QuotaEntity::DefaultUser);
        let pick = |field: fn(&QuotaLimits) -> Option<u32>, built_in: u32| {
            own.and_then(field)
                .or_else(|| default.and_then(field))
                .unwrap_or(built_in)
        };
        ObjectLimits {
            topics: pick(|limits| limits.topics, DEFAULT_TOPICS_PER_PRINCIPAL),
            partitions: pick(|limits| limits.partitions, DEFAULT_PARTITIONS_PER_PRINCIPAL),
            groups: pick(|limits| limits.groups, DEFAULT_GROUPS_PER_PRINCIPAL),
        }
    }
}

/// What a principal owns now.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// Topics.
    pub topics: u32,
    /// Partitions over those topics.
    pub partitions: u32,
}

impl Usage {
    /// What `principal` owns among `topics`.
    pub fn of<'a>(topics: impl Iterator<Item = &'a TopicRecord>, principal: &str) -> Usage {
        topics
            .filter(|topic| topic.owner.as_deref() == Some(principal))
            .fold(Usage::default(), |usage, topic| Usage {
                topics: usage.topics.saturating_add(1),
                partitions: usage.partitions.saturating_add(topic.partition_count()),
            })
    }
}

/// Which limit a creation would break.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "principal {principal:?} may own {allowed} {what} and owns {used}; this creation needs {asked} more. Delete some, or ask an administrator to raise the limit (`corelog quota set user:{principal} --{what} N`)"
)]
pub struct LimitExceeded {
    /// The principal.
    pub principal: String,
    /// `topics`, `partitions` or `groups`.
    pub what: &'static str,
    /// Its limit.
    pub allowed: u32,
    /// What it owns.
    pub used: u32,
    /// What the creation adds.
    pub asked: u32,
}

/// Checks that `principal`, owning `usage`, may create a topic of
/// `partitions` partitions under `limits`.
///
/// # Errors
/// [`LimitExceeded`] naming the first limit the topic would break.
pub fn check_new_topic(
    principal: &str,
    usage: Usage,
    limits: ObjectLimits,
    partitions: u32,
) -> Result<(), LimitExceeded> {
    let exceeded = |what, allowed, used, asked| LimitExceeded {
        principal: principal.to_owned(),
        what,
        allowed,
        used,
        asked,
    };
    if usage.topics.saturating_add(1) > limits.topics {
        return Err(exceeded("topics", limits.topics, usage.topics, 1));
    }
    if usage.partitions.saturating_add(partitions) > limits.partitions {
        return Err(exceeded(
            "partitions",
            limits.partitions,
            usage.partitions,
            partitions,
        ));
    }
    Ok(())
}

/// Checks that `principal`, having created `used` groups on a
/// coordinator, may create one more under `limits`.
///
/// # Errors
/// [`LimitExceeded`] for `groups`.
pub fn check_new_group(
    principal: &str,
    used: u32,
    limits: ObjectLimits,
) -> Result<(), LimitExceeded> {
    if used.saturating_add(1) > limits.groups {
        return Err(LimitExceeded {
            principal: principal.to_owned(),
            what: "groups",
            allowed: limits.groups,
            used,
            asked: 1,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_limit_falls_back_on_its_own() {
        let mut quotas = Quotas::new();
        let built_in = ObjectLimits {
            topics: DEFAULT_TOPICS_PER_PRINCIPAL,
            partitions: DEFAULT_PARTITIONS_PER_PRINCIPAL,
            groups: DEFAULT_GROUPS_PER_PRINCIPAL,
        };
        assert_eq!(ObjectLimits::of(&quotas, "alice"), built_in);
        quotas.insert(
            QuotaEntity::DefaultUser,
            QuotaLimits {
                partitions: Some(50),
                groups: Some(5),
                ..QuotaLimits::default()
            },
        );
        quotas.insert(
            QuotaEntity::User("alice".to_owned()),
            QuotaLimits {
                topics: Some(3),
                groups: Some(7),
                ..QuotaLimits::default()
            },
        );
        let alice = ObjectLimits::of(&quotas, "alice");
        assert_eq!(
            (alice.topics, alice.partitions, alice.groups),
            (3, 50, 7),
            "own entry first, then the default entry, then the built-in"
        );
        let bob = ObjectLimits::of(&quotas, "bob");
        assert_eq!(
            (bob.topics, bob.partitions, bob.groups),
            (DEFAULT_TOPICS_PER_PRINCIPAL, 50, 5)
        );
    }

    #[test]
    fn a_topic_fits_or_names_the_limit_it_breaks() {
        let limits = ObjectLimits {
            topics: 2,
            partitions: 10,
            groups: 1,
        };
        let usage = Usage {
            topics: 1,
            partitions: 8,
        };
        assert_eq!(check_new_topic("alice", usage, limits, 2), Ok(()));
        let error = check_new_topic("alice", usage, limits, 3).unwrap_err();
        assert_eq!(
            (error.what, error.allowed, error.used, error.asked),
            ("partitions", 10, 8, 3)
        );
        let full = Usage {
            topics: 2,
            partitions: 2,
        };
        let error = check_new_topic("alice", full, limits, 1).unwrap_err();
        assert_eq!(error.what, "topics");
        assert!(error.to_string().contains("--topics N"), "{error}");
    }

    #[test]
    fn groups_stop_at_the_limit() {
        let limits = ObjectLimits {
            topics: 1,
            partitions: 1,
            groups: 2,
        };
        assert_eq!(check_new_group("alice", 1, limits), Ok(()));
        assert_eq!(
            check_new_group("alice", 2, limits).unwrap_err().what,
            "groups"
        );
        let none = ObjectLimits {
            groups: 0,
            ..limits
        };
        assert!(check_new_group("alice", 0, none).is_err());
    }
}
