//! Parsing `--time`: milliseconds since the Unix epoch, or an RFC 3339
//! timestamp such as `2024-05-01T12:00:00Z` or `2024-05-01T14:00:00.250+02:00`.
//! About sixty lines here beat a date-time dependency for one parser. Also
//! durations (`--duration 10m`, `--by-duration 2h`) and the clock.

use std::time::Duration;

/// Parses milliseconds or RFC 3339 into milliseconds since the Unix epoch.
///
/// # Errors
/// A sentence saying which form is expected.
pub(crate) fn parse_time_ms(text: &str) -> Result<i64, String> {
    let text = text.trim();
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        return text
            .parse::<i64>()
            .map_err(|_| format!("{text:?} is too large for milliseconds since the epoch"));
    }
    parse_rfc3339(text).ok_or_else(|| {
        format!(
            "{text:?} is not a time: give milliseconds since the Unix epoch or RFC 3339, like 2024-05-01T12:00:00Z"
        )
    })
}

/// Parses a duration as people write it: `500ms`, `90s`, `10m`, `2h`,
/// `7d`, or plain seconds.
///
/// # Errors
/// A sentence showing the forms expected.
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let expected = || format!("{text:?} is not a duration: write it like 90s, 10m, 2h or 7d");
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let value: u64 = number.parse().map_err(|_| expected())?;
    let millis = match unit {
        "ms" => Some(value),
        "" | "s" => value.checked_mul(1_000),
        "m" => value.checked_mul(60_000),
        "h" => value.checked_mul(3_600_000),
        "d" => value.checked_mul(86_400_000),
        _ => None,
    }
    .ok_or_else(expected)?;
    Ok(Duration::from_millis(millis))
}

/// Milliseconds since the Unix epoch by this machine's clock.
pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| {
            i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
        })
}

fn digits(text: &str, range: std::ops::Range<usize>) -> Option<i64> {
    let part = text.get(range)?;
    if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    part.parse().ok()
}

/// `YYYY-MM-DD(T|t| )HH:MM:SS[.fraction](Z|z|±HH:MM)`.
fn parse_rfc3339(text: &str) -> Option<i64> {
    let bytes = text.as_bytes();
    if bytes.len() < 20
        || bytes[4] != b'-'
        || bytes[7] != b'-'
        || !matches!(bytes[10], b'T' | b't' | b' ')
        || bytes[13] != b':'
        || bytes[16] != b':'
    {
        return None;
    }
    let year = digits(text, 0..4)?;
    let month = digits(text, 5..7)?;
    let day = digits(text, 8..10)?;
    let hour = digits(text, 11..13)?;
    let minute = digits(text, 14..16)?;
    let second = digits(text, 17..19)?;
    if !(1..=12).contains(&month)
        || day < 1
        || day > days_in_month(year, month)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    let mut at = 19;
    let mut millis = 0;
    if bytes[at] == b'.' {
        let start = at + 1;
        let end = start
            + bytes[start..]
                .iter()
                .take_while(|b| b.is_ascii_digit())
                .count();
        if end == start {
            return None;
        }
        // Milliseconds: the first three digits, right-padded.
        let fraction = &text[start..end.min(start + 3)];
        millis = fraction.parse::<i64>().ok()? * 10_i64.pow(3 - fraction.len() as u32);
        at = end;
    }
    let offset_minutes = match bytes.get(at)? {
        b'Z' | b'z' if at + 1 == bytes.len() => 0,
        sign @ (b'+' | b'-') if at + 6 == bytes.len() && bytes[at + 3] == b':' => {
            let hours = digits(text, at + 1..at + 3)?;
            let minutes = digits(text, at + 4..at + 6)?;
            if hours > 23 || minutes > 59 {
                return None;
            }
            let total = hours * 60 + minutes;
            if *sign == b'+' { total } else { -total }
        }
        _ => return None,
    };
    let days = days_from_civil(year, month, day);
    let seconds = days * 86_400 + hour * 3_600 + minute * 60 + second - offset_minutes * 60;
    Some(seconds * 1_000 + millis)
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
/// `days_from_civil`).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month_index = (month + 9) % 12;
    let day_of_year = (153 * month_index + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// Milliseconds since the Unix epoch as RFC 3339 in UTC with milliseconds,
/// for example `2023-11-14T22:13:20.000Z`.
pub(crate) fn format_time_ms(ms: i64) -> String {
    let seconds = ms.div_euclid(1_000);
    let millis = ms.rem_euclid(1_000);
    let days = seconds.div_euclid(86_400);
    let of_day = seconds.rem_euclid(86_400);
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        of_day / 3_600,
        of_day % 3_600 / 60,
        of_day % 60
    )
}

/// A duration in milliseconds as a person reads it: `850ms`, `12s`,
/// `3m12s`, `5h04m`, `2d03h`.
pub(crate) fn format_duration_ms(ms: i64) -> String {
    if ms < 0 {
        return format!("-{}", format_duration_ms(ms.saturating_neg()));
    }
    let seconds = ms / 1_000;
    match seconds {
        0 => format!("{ms}ms"),
        1..60 => format!("{seconds}s"),
        60..3_600 => format!("{}m{:02}s", seconds / 60, seconds % 60),
        3_600..86_400 => format!("{}h{:02}m", seconds / 3_600, seconds % 3_600 / 60),
        _ => format!("{}d{:02}h", seconds / 86_400, seconds % 86_400 / 3_600),
    }
}

/// The date of a day count since 1970-01-01 (Howard Hinnant's
/// `civil_from_days`, the inverse of [`days_from_civil`]).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z - era * 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1_460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_format_as_rfc3339_and_parse_back() {
        assert_eq!(format_time_ms(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            format_time_ms(1_700_000_000_123),
            "2023-11-14T22:13:20.123Z"
        );
        assert_eq!(
            format_time_ms(1_709_164_800_000),
            "2024-02-29T00:00:00.000Z"
        );
        assert_eq!(format_time_ms(-1_000), "1969-12-31T23:59:59.000Z");
        for ms in [0, 1_700_000_000_123, 951_782_400_000, -86_400_000 * 400] {
            assert_eq!(parse_time_ms(&format_time_ms(ms)), Ok(ms));
        }
    }

    #[test]
    fn durations_read_like_a_person_writes_them() {
        assert_eq!(format_duration_ms(850), "850ms");
        assert_eq!(format_duration_ms(12_000), "12s");
        assert_eq!(format_duration_ms(192_000), "3m12s");
        assert_eq!(format_duration_ms(5 * 3_600_000 + 4 * 60_000), "5h04m");
        assert_eq!(format_duration_ms(2 * 86_400_000 + 3 * 3_600_000), "2d03h");
        assert_eq!(format_duration_ms(-12_000), "-12s");
    }

    #[test]
    fn durations_parse_as_people_write_them() {
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("7d"), Ok(Duration::from_secs(7 * 86_400)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("30"), Ok(Duration::from_secs(30)));
        for bad in ["ten minutes", "-5m", "5w", "", "99999999999999999999d"] {
            let error = parse_duration(bad).unwrap_err();
            assert!(error.contains("90s, 10m, 2h or 7d"), "{bad}: {error}");
        }
    }

    #[test]
    fn milliseconds_pass_through() {
        assert_eq!(parse_time_ms("1700000000000"), Ok(1_700_000_000_000));
        assert_eq!(parse_time_ms("0"), Ok(0));
    }

    #[test]
    fn rfc3339_in_utc_and_with_offsets() {
        assert_eq!(parse_time_ms("1970-01-01T00:00:00Z"), Ok(0));
        // date -d 2023-11-14T22:13:20Z +%s → 1700000000
        assert_eq!(parse_time_ms("2023-11-14T22:13:20Z"), Ok(1_700_000_000_000));
        assert_eq!(
            parse_time_ms("2023-11-14T23:13:20.5+01:00"),
            Ok(1_700_000_000_500)
        );
        assert_eq!(
            parse_time_ms("2023-11-14t21:13:20.123456-01:00"),
            Ok(1_700_000_000_123)
        );
        // A leap day.
        assert_eq!(parse_time_ms("2024-02-29T00:00:00Z"), Ok(1_709_164_800_000));
        assert_eq!(parse_time_ms("1969-12-31T23:59:59Z"), Ok(-1_000));
    }

    #[test]
    fn malformed_times_are_refused_with_the_expected_forms() {
        for bad in [
            "",
            "yesterday",
            "2023-11-14",
            "2023-11-14T22:13:20",
            "2023-02-29T00:00:00Z",
            "2023-13-01T00:00:00Z",
            "2023-11-14T22:13:20+0100",
            "2023-11-14T22:13:20.Z",
        ] {
            let error = parse_time_ms(bad).unwrap_err();
            assert!(error.contains("RFC 3339"), "{bad}: {error}");
        }
    }
}
