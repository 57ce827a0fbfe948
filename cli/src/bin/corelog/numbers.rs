//! Numbers on the command line: counts, indexes and offsets, parsed with
//! messages that say what the valid range is, instead of a parser's
//! "invalid digit found in string" for `-1`.
//!
//! Arguments that use these also set `allow_negative_numbers`, so that
//! `--partitions -1` reaches the parser instead of being taken for a flag.

/// A whole number in `min..=max`; `rule` says in words what is valid.
fn whole_number(text: &str, min: u64, max: u64, rule: &str) -> Result<u64, String> {
    let text = text.trim();
    // i128 holds every u64 and every negative number people type, so that
    // `-5` is reported against the rule rather than as a syntax error.
    match text.parse::<i128>() {
        Ok(value) if value > i128::from(max) => {
            Err(format!("{value} is too large: the most is {max}"))
        }
        Ok(value) => u64::try_from(value)
            .ok()
            .filter(|value| *value >= min)
            .ok_or_else(|| format!("{value} is not valid: {rule}")),
        Err(_) => Err(format!("{text:?} is not a whole number: {rule}")),
    }
}

fn to_u32(value: u64) -> Result<u32, String> {
    u32::try_from(value).map_err(|_| format!("{value} is too large"))
}

/// `topic create --partitions`: at least 1.
pub(crate) fn partition_count(text: &str) -> Result<u32, String> {
    whole_number(
        text,
        1,
        u64::from(u32::MAX),
        "a topic has at least 1 partition",
    )
    .and_then(to_u32)
}

/// `--partition P`: an index from 0.
pub(crate) fn partition_index(text: &str) -> Result<u32, String> {
    whole_number(
        text,
        0,
        u64::from(u32::MAX),
        "partitions are numbered from 0",
    )
    .and_then(to_u32)
}

/// `--offset N`, `--to-offset N`: from 0.
pub(crate) fn offset(text: &str) -> Result<u64, String> {
    whole_number(text, 0, u64::MAX, "offsets start at 0")
}

/// `--replication-factor`: at least 1, when given at all.
pub(crate) fn replication_factor(text: &str) -> Result<u16, String> {
    whole_number(
        text,
        1,
        u64::from(u16::MAX),
        "a topic has at least 1 replica per partition; leave out --replication-factor to let the broker choose (1 on a single node, 3 with three or more brokers)",
    )
    .and_then(|value| u16::try_from(value).map_err(|_| format!("{value} is too large")))
}

/// `--max N` records: 0 or more.
pub(crate) fn record_count(text: &str) -> Result<u64, String> {
    whole_number(text, 0, u64::MAX, "a number of records is 0 or more")
}

/// `--schema VERSION`: 0 or more.
pub(crate) fn schema_version(text: &str) -> Result<u32, String> {
    whole_number(
        text,
        0,
        u64::from(u32::MAX),
        "schema versions are numbered from 0",
    )
    .and_then(to_u32)
}

/// `--watch SECONDS`: at least 1.
pub(crate) fn refresh_seconds(text: &str) -> Result<u64, String> {
    whole_number(
        text,
        1,
        86_400,
        "refresh at most once a second and at least once a day (1 to 86400 seconds)",
    )
}

/// `quota set --produce-rate` and `--fetch-rate`: bytes per second, at
/// least 1, plain or with a binary unit (`512KiB`, `10MiB`, `1GiB`).
pub(crate) fn bytes_per_second(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let (digits, unit) = match text.find(|c: char| !c.is_ascii_digit() && c != '-') {
        Some(at) => text.split_at(at),
        None => (text, ""),
    };
    let scale: u64 = match unit {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        other => {
            return Err(format!(
                "unknown unit {other:?}: give bytes per second, or use KiB, MiB or GiB"
            ));
        }
    };
    let rule = "a rate is at least 1 byte per second";
    let value = whole_number(digits, 1, u64::MAX / scale, rule)?;
    Ok(value * scale)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_take_binary_units() {
        assert_eq!(bytes_per_second("1024"), Ok(1024));
        assert_eq!(bytes_per_second("10MiB"), Ok(10 << 20));
        assert_eq!(bytes_per_second("512KiB"), Ok(512 << 10));
        assert!(bytes_per_second("0").unwrap_err().contains("at least 1"));
        assert!(
            bytes_per_second("10MB")
                .unwrap_err()
                .contains("KiB, MiB or GiB")
        );
        assert!(bytes_per_second("-5").is_err());
    }

    #[test]
    fn negative_numbers_are_told_the_valid_range() {
        let error = partition_count("-1").unwrap_err();
        assert_eq!(error, "-1 is not valid: a topic has at least 1 partition");
        let error = offset("-5").unwrap_err();
        assert_eq!(error, "-5 is not valid: offsets start at 0");
        assert!(
            partition_index("-2")
                .unwrap_err()
                .contains("numbered from 0")
        );
        assert!(partition_count("0").unwrap_err().contains("at least 1"));
        let error = replication_factor("0").unwrap_err();
        assert!(error.contains("leave out --replication-factor"), "{error}");
    }

    #[test]
    fn words_and_overflows_say_what_is_wrong() {
        let error = partition_count("three").unwrap_err();
        assert_eq!(
            error,
            "\"three\" is not a whole number: a topic has at least 1 partition"
        );
        let error = partition_index("4294967296").unwrap_err();
        assert!(
            error.contains("too large") && error.contains("4294967295"),
            "{error}"
        );
        assert!(
            offset("99999999999999999999999")
                .unwrap_err()
                .contains("too large")
        );
    }

    #[test]
    fn valid_numbers_parse() {
        assert_eq!(partition_count(" 16 "), Ok(16));
        assert_eq!(partition_index("0"), Ok(0));
        assert_eq!(offset("18446744073709551615"), Ok(u64::MAX));
        assert_eq!(replication_factor("3"), Ok(3));
        assert_eq!(record_count("0"), Ok(0));
        assert_eq!(refresh_seconds("2"), Ok(2));
        assert!(refresh_seconds("0").is_err());
    }
}
