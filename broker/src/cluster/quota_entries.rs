//! Quotas between their wire form (`AlterQuotas`, `DescribeQuotas`,
//! `ControllerOperation`) and the metadata's
//! ([`corelog_controller::quotas`]).

use corelog_controller::quotas::{QuotaEntity, QuotaLimits};
use corelog_wire::error::ErrorCode;
use corelog_wire::message::describe_quotas::{QuotaEntry, QuotaEntryV1};

/// The metadata form of `entry`, checked by the metadata's rules.
///
/// # Errors
/// `INVALID_REQUEST` with a message saying what is wrong.
pub fn quota(entry: &QuotaEntry) -> Result<(QuotaEntity, QuotaLimits), (ErrorCode, String)> {
    quota_v1(&QuotaEntryV1 {
        quota: entry.clone(),
        topics: None,
        partitions: None,
        groups: None,
    })
}

/// The metadata form of a version 1 entry (with topic, partition and
/// group limits), checked by the metadata's rules.
///
/// # Errors
/// `INVALID_REQUEST` with a message saying what is wrong.
pub fn quota_v1(entry: &QuotaEntryV1) -> Result<(QuotaEntity, QuotaLimits), (ErrorCode, String)> {
    let entity = entity(&entry.quota.entity)?;
    let limits = QuotaLimits {
        produce_bytes_per_second: entry.quota.produce_bytes_per_second,
        fetch_bytes_per_second: entry.quota.fetch_bytes_per_second,
        request_percent: entry.quota.request_percent,
        connections: entry.quota.connections,
        topics: entry.topics,
        partitions: entry.partitions,
        groups: entry.groups,
    };
    limits
        .check(&entity)
        .map_err(|reason| (ErrorCode::InvalidRequest, reason))?;
    Ok((entity, limits))
}

/// The version 1 wire form of a quota.
#[must_use]
pub fn entry_v1(entity: &QuotaEntity, limits: &QuotaLimits) -> QuotaEntryV1 {
    QuotaEntryV1 {
        quota: entry(entity, limits),
        topics: limits.topics,
        partitions: limits.partitions,
        groups: limits.groups,
    }
}

/// The entity named `text`.
///
/// # Errors
/// `INVALID_REQUEST` saying what an entity looks like.
pub fn entity(text: &str) -> Result<QuotaEntity, (ErrorCode, String)> {
    QuotaEntity::parse(text).map_err(|reason| (ErrorCode::InvalidRequest, reason))
}

/// The wire form of a quota.
#[must_use]
pub fn entry(entity: &QuotaEntity, limits: &QuotaLimits) -> QuotaEntry {
    QuotaEntry {
        entity: entity.to_string(),
        produce_bytes_per_second: limits.produce_bytes_per_second,
        fetch_bytes_per_second: limits.fetch_bytes_per_second,
        request_percent: limits.request_percent,
        connections: limits.connections,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quota_round_trips_and_a_bad_one_is_named() {
        let entity = QuotaEntity::User("tenant-a".to_owned());
        let limits = QuotaLimits {
            produce_bytes_per_second: Some(1 << 20),
            connections: Some(4),
            ..QuotaLimits::default()
        };
        assert_eq!(quota(&entry(&entity, &limits)), Ok((entity, limits)));
        let on_an_address = QuotaEntry {
            entity: "ip:*".to_owned(),
            ..entry(&QuotaEntity::DefaultUser, &limits)
        };
        let (code, reason) = quota(&on_an_address).unwrap_err();
        assert_eq!(code, ErrorCode::InvalidRequest);
        assert!(reason.contains("connections only"), "{reason}");
    }
}
