//! The topic name rule, in one place: the controller's state machine
//! enforces it on every topic it creates, and clients run the same check
//! before they send anything, so that a bad name fails fast with the
//! same reason the controller would give.

/// Longest topic name, in bytes.
pub const TOPIC_NAME_BYTES_MAX: usize = 249;

/// Prefix reserved for the broker's internal topics (`__groups`, `__audit`).
pub const INTERNAL_TOPIC_PREFIX: &str = "__";

/// Why a topic name is refused; the `Display` form says what to use instead.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid topic name {name:?}: {reason}")]
pub struct InvalidTopicName {
    /// The name as given.
    pub name: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

/// Checks a topic name: 1 to 249 bytes of `[a-zA-Z0-9._-]`, neither `.`
/// nor `..`, and starting with `__` exactly when it names an internal
/// topic.
///
/// # Errors
/// [`InvalidTopicName`] with the reason.
pub fn check_topic_name(name: &str, internal: bool) -> Result<(), InvalidTopicName> {
    let invalid = |reason| {
        Err(InvalidTopicName {
            name: name.to_owned(),
            reason,
        })
    };
    if name.is_empty() || name.len() > TOPIC_NAME_BYTES_MAX {
        return invalid("use 1 to 249 characters");
    }
    if name == "." || name == ".." {
        return invalid("must not be . or ..");
    }
    if !name
        .bytes()
        .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'_' | b'-'))
    {
        return invalid("use only letters, digits, '.', '_' and '-'");
    }
    match (name.starts_with(INTERNAL_TOPIC_PREFIX), internal) {
        (true, false) => invalid("names starting with __ are reserved for internal topics"),
        (false, true) => invalid("internal topic names start with __"),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn good_names_pass_and_bad_ones_say_why() {
        for name in ["orders", "a", "orders.dlq", "A-b_c.9", &"x".repeat(249)] {
            assert_eq!(check_topic_name(name, false), Ok(()), "{name}");
        }
        assert_eq!(check_topic_name("__groups", true), Ok(()));
        for (name, reason) in [
            ("", "use 1 to 249 characters"),
            (&"x".repeat(250), "use 1 to 249 characters"),
            (".", "must not be . or .."),
            ("..", "must not be . or .."),
            ("a/b", "use only letters, digits, '.', '_' and '-'"),
            ("é", "use only letters, digits, '.', '_' and '-'"),
            (
                "__groups",
                "names starting with __ are reserved for internal topics",
            ),
        ] {
            assert_eq!(
                check_topic_name(name, false).map_err(|error| error.reason),
                Err(reason),
                "{name:?}"
            );
        }
        assert!(check_topic_name("groups", true).is_err());
    }
}
