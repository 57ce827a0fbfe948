//! The group id rule, in one place: the broker checks it on every group
//! API (a group is created by whichever of them first names it, so every
//! one of them is a way in), and clients run the same check before they
//! send anything.
//!
//! Control characters are refused because group ids are printed: in
//! `corelog group list`, in logs and in `/metrics` labels, and an escape
//! sequence in a name would act on the terminal of whoever lists them.

/// Longest group id, in bytes.
pub const GROUP_ID_BYTES_MAX: usize = 255;

/// Why a group id is refused; the `Display` form says what to use instead.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid group id {shown:?}: {reason}")]
pub struct InvalidGroupId {
    /// The id as given, cut to its first 64 characters (an id can be as
    /// long as a frame, and the refusal is sent back and logged).
    pub shown: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

/// Checks a group id: 1 to [`GROUP_ID_BYTES_MAX`] bytes without control
/// characters (Unicode category Cc).
///
/// # Errors
/// [`InvalidGroupId`] with the reason.
pub fn check_group_id(group: &str) -> Result<(), InvalidGroupId> {
    let invalid = |reason| {
        Err(InvalidGroupId {
            shown: group.chars().take(64).collect(),
            reason,
        })
    };
    if group.is_empty() || group.len() > GROUP_ID_BYTES_MAX {
        return invalid("use 1 to 255 bytes");
    }
    if group.chars().any(char::is_control) {
        return invalid("control characters are not allowed");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_of_1_to_255_bytes_without_control_characters_pass() {
        for good in ["g", "tenant-a.readers", "süße gruppe", &"g".repeat(255)] {
            assert_eq!(check_group_id(good), Ok(()), "{good}");
        }
        for bad in ["", "\u{1b}[2J", "a\tb", "a\nb", "\u{7f}", "\u{9b}x"] {
            assert!(check_group_id(bad).is_err(), "{bad:?}");
        }
        let long = check_group_id(&"g".repeat(5_009)).unwrap_err();
        assert_eq!(long.shown.len(), 64);
        assert!(long.to_string().contains("1 to 255 bytes"), "{long}");
    }
}
