//! Output helpers: aligned tables for people, base64 for bytes that are not
//! UTF-8 in JSON, and escape sequences in separators.

/// A name (of a group, topic, user, member, …) as it may be printed to a
/// terminal: unchanged unless it holds a control character or a
/// bidirectional override, in which case those are written as Rust escapes
/// (`\u{1b}`) and a backslash as `\\`, so that nothing another tenant chose
/// can move the cursor, retitle the window or reorder what is shown.
/// JSON output needs none of this: serde escapes control characters.
pub(crate) fn printable(name: &str) -> std::borrow::Cow<'_, str> {
    if !name.chars().any(is_unprintable) {
        return std::borrow::Cow::Borrowed(name);
    }
    let mut shown = String::with_capacity(name.len() + 8);
    for c in name.chars() {
        if c == '\\' {
            shown.push_str("\\\\");
        } else if is_unprintable(c) {
            shown.push_str(&format!("\\u{{{:x}}}", u32::from(c)));
        } else {
            shown.push(c);
        }
    }
    std::borrow::Cow::Owned(shown)
}

/// Control characters (C0, DEL, C1) and the bidirectional controls that
/// reorder what a terminal shows ("Trojan Source", CVE-2021-42574).
fn is_unprintable(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'
        )
}

/// Renders rows under headers, each column as wide as its widest cell, two
/// spaces apart, without trailing spaces. Cells are made
/// [`printable`]: tables list names other tenants chose.
pub(crate) fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|row| {
            row.iter()
                .map(|cell| printable(cell).into_owned())
                .collect()
        })
        .collect();
    let rows = rows.as_slice();
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut text = String::new();
        for (index, (cell, width)) in cells.zip(&widths).enumerate() {
            if index > 0 {
                text.push_str("  ");
            }
            text.push_str(cell);
            let pad = width.saturating_sub(cell.chars().count());
            text.extend(std::iter::repeat_n(' ', pad));
        }
        out.push_str(text.trim_end());
        out.push('\n');
    };
    line(&mut headers.iter().copied());
    for row in rows {
        line(&mut row.iter().map(String::as_str));
    }
    out
}

const BASE64_ALPHABET: &[u8; 64] =
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Standard base64 with padding (RFC 4648 §4). Twenty lines do not justify a
/// dependency.
pub(crate) fn base64(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for (index, shift) in [18, 12, 6, 0].into_iter().enumerate() {
            if index <= chunk.len() {
                out.push(char::from(BASE64_ALPHABET[((n >> shift) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// A byte field for JSON: the text if it is UTF-8, else base64, with the
/// encoding named so a script never has to guess.
pub(crate) fn json_bytes(bytes: Option<&[u8]>) -> (serde_json::Value, Option<&'static str>) {
    match bytes {
        None => (serde_json::Value::Null, None),
        Some(bytes) => match std::str::from_utf8(bytes) {
            Ok(text) => (serde_json::Value::String(text.to_owned()), Some("utf-8")),
            Err(_) => (serde_json::Value::String(base64(bytes)), Some("base64")),
        },
    }
}

/// Interprets `\t`, `\n`, `\r`, `\0` and `\\` in a separator given on the
/// command line (shells pass `'\t'` as two characters).
pub(crate) fn unescape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('t') => out.push('\t'),
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some('0') => out.push('\0'),
            Some('\\') => out.push('\\'),
            Some(other) => {
                out.push('\\');
                out.push(other);
            }
            None => out.push('\\'),
        }
    }
    out
}

/// A count with its noun in the right number: `1 record`, `0 records`,
/// `2 records`.
pub(crate) fn plural(count: impl Into<u64>, one: &str, many: &str) -> String {
    let count = count.into();
    if count == 1 {
        format!("1 {one}")
    } else {
        format!("{count} {many}")
    }
}

/// Bytes as a person reads them: 1023 B, 1.5 KiB, 3.2 MiB, …
pub(crate) fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_rfc_4648_test_vectors() {
        let vectors = [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ];
        for (plain, encoded) in vectors {
            assert_eq!(base64(plain.as_bytes()), encoded, "{plain:?}");
        }
        assert_eq!(base64(&[0xFF, 0xFE, 0x00]), "//4A");
    }

    #[test]
    fn json_bytes_names_the_encoding() {
        assert_eq!(
            json_bytes(Some(b"caf\xc3\xa9")),
            (serde_json::json!("café"), Some("utf-8"))
        );
        assert_eq!(
            json_bytes(Some(&[0xC3, 0x28])),
            (serde_json::json!("wyg="), Some("base64"))
        );
        assert_eq!(json_bytes(None), (serde_json::Value::Null, None));
    }

    #[test]
    fn separators_are_unescaped() {
        assert_eq!(unescape("\\t"), "\t");
        assert_eq!(unescape("::"), "::");
        assert_eq!(unescape("a\\\\b\\x"), "a\\b\\x");
        assert_eq!(unescape("\t"), "\t");
    }

    #[test]
    fn tables_align_columns_without_trailing_spaces() {
        let text = table(
            &["NAME", "PARTITIONS"],
            &[
                vec!["orders".to_owned(), "3".to_owned()],
                vec!["a".to_owned(), "12".to_owned()],
            ],
        );
        assert_eq!(text, "NAME    PARTITIONS\norders  3\na       12\n");
    }

    #[test]
    fn names_with_control_characters_are_escaped_and_others_kept() {
        assert_eq!(printable("tenant-a.orders"), "tenant-a.orders");
        assert_eq!(printable("süße"), "süße");
        assert_eq!(printable("a\u{1b}[2Jb"), "a\\u{1b}[2Jb");
        assert_eq!(printable("back\\slash\n"), "back\\\\slash\\u{a}");
        assert_eq!(printable("x\u{202e}y"), "x\\u{202e}y");
        let text = table(&["NAME"], &[vec!["\u{9b}31m".to_owned()]]);
        assert_eq!(text, "NAME\n\\u{9b}31m\n");
    }

    #[test]
    fn counts_agree_with_their_nouns() {
        assert_eq!(plural(1_u64, "record", "records"), "1 record");
        assert_eq!(plural(0_u64, "record", "records"), "0 records");
        assert_eq!(plural(2_u32, "partition", "partitions"), "2 partitions");
    }

    #[test]
    fn bytes_are_human_readable() {
        assert_eq!(human_bytes(0), "0 B");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(5 << 30), "5.0 GiB");
    }
}
