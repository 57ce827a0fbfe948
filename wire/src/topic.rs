//! The topic name rule, in one place: the controller's state machine
//! enforces it on every topic it creates, and clients run the same check
//! before they send anything, so that a bad name fails fast with the
//! same reason the controller would give.

/// Longest topic name, in bytes.
pub const TOPIC_NAME_BYTES_MAX: usize = 249;

/// Prefix reserved for the broker's internal topics (`__groups`, `__audit`).
pub const INTERNAL_TOPIC_PREFIX: &str = "__";

/// Why a topic name is refused; the `Display` form says what to use instead
/// and, for a character outside the set, which one it was (in a long name
/// it is not obvious).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid topic name {name:?}: {reason}{}", found_clause(*.found))]
pub struct InvalidTopicName {
    /// The name as given.
    pub name: String,
    /// What is wrong with it.
    pub reason: &'static str,
    /// The first character outside `[a-zA-Z0-9._-]`, when that is the reason.
    pub found: Option<char>,
}

fn found_clause(found: Option<char>) -> String {
    found.map_or_else(String::new, |found| format!(" (it contains {found:?})"))
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
            found: None,
        })
    };
    if name.is_empty() || name.len() > TOPIC_NAME_BYTES_MAX {
        return invalid("use 1 to 249 characters");
    }
    if name == "." || name == ".." {
        return invalid("must not be . or ..");
    }
    if let Some(found) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Err(InvalidTopicName {
            name: name.to_owned(),
            reason: "use only letters, digits, '.', '_' and '-'",
            found: Some(found),
        });
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

    #[test]
    fn a_character_outside_the_set_is_named() {
        let refused = check_topic_name("orders/eu", false).unwrap_err();
        assert_eq!(refused.found, Some('/'));
        assert_eq!(
            refused.to_string(),
            "invalid topic name \"orders/eu\": use only letters, digits, '.', '_' and '-' (it contains '/')"
        );
        assert_eq!(check_topic_name("é", false).unwrap_err().found, Some('é'));
        let empty = check_topic_name("", false).unwrap_err();
        assert_eq!(empty.found, None);
        assert_eq!(
            empty.to_string(),
            "invalid topic name \"\": use 1 to 249 characters"
        );
    }
}
