//! Access rules between their wire form (`AlterAcls`, `DescribeAcls`,
//! `ControllerOperation`) and the metadata's ([`corelog_controller::acls`]).

use corelog_controller::acls::{AclBinding, Operation, PatternType, Permission, ResourceType};
use corelog_wire::error::ErrorCode;
use corelog_wire::message::describe_acls::AclEntry;

/// The metadata form of `entry`, checked by the metadata's rules.
///
/// # Errors
/// `INVALID_REQUEST` with a message saying what is wrong: an unknown code,
/// or a rule the metadata refuses (say, `group-read` on a topic).
pub fn binding(entry: &AclEntry) -> Result<AclBinding, (ErrorCode, String)> {
    fn code<T>(
        what: &str,
        code: u8,
        from_code: fn(u8) -> Option<T>,
    ) -> Result<T, (ErrorCode, String)> {
        from_code(code).ok_or_else(|| {
            (
                ErrorCode::InvalidRequest,
                format!("unknown {what} code {code}"),
            )
        })
    }
    let binding = AclBinding {
        principal: entry.principal.clone(),
        resource_type: code(
            "resource type",
            entry.resource_type,
            ResourceType::from_code,
        )?,
        pattern: code("pattern type", entry.pattern, PatternType::from_code)?,
        name: entry.name.clone(),
        operation: code("operation", entry.operation, Operation::from_code)?,
        permission: code("permission", entry.permission, Permission::from_code)?,
    };
    binding
        .check()
        .map_err(|reason| (ErrorCode::InvalidRequest, reason))?;
    Ok(binding)
}

/// The wire form of `binding`.
#[must_use]
pub fn entry(binding: &AclBinding) -> AclEntry {
    AclEntry {
        principal: binding.principal.clone(),
        resource_type: binding.resource_type.code(),
        pattern: binding.pattern.code(),
        name: binding.name.clone(),
        operation: binding.operation.code(),
        permission: binding.permission.code(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rule_round_trips_and_unknown_codes_are_named() {
        let rule = AclBinding {
            principal: "alice".to_owned(),
            resource_type: ResourceType::Group,
            pattern: PatternType::Prefix,
            name: "team-".to_owned(),
            operation: Operation::GroupRead,
            permission: Permission::Allow,
        };
        assert_eq!(binding(&entry(&rule)), Ok(rule.clone()));
        let unknown = AclEntry {
            operation: 42,
            ..entry(&rule)
        };
        assert_eq!(
            binding(&unknown),
            Err((
                ErrorCode::InvalidRequest,
                "unknown operation code 42".to_owned()
            ))
        );
        let misplaced = AclEntry {
            resource_type: ResourceType::Topic.code(),
            ..entry(&rule)
        };
        assert_eq!(
            binding(&misplaced).unwrap_err().0,
            ErrorCode::InvalidRequest
        );
    }
}
