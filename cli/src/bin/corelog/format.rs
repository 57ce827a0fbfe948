//! `consume --format`: each record printed through a template, in the
//! spirit of kcat's `-f`.
//!
//! | token | prints |
//! |-------|--------|
//! | `%t`  | topic |
//! | `%p`  | partition |
//! | `%o`  | offset |
//! | `%T`  | timestamp, milliseconds since the Unix epoch |
//! | `%k`  | key (empty when there is none) |
//! | `%s`  | value (empty when there is none) |
//! | `%h`  | headers as `name=value` joined by `,` (`name` alone for a header without a value) |
//! | `%v`  | schema version (empty when there is none) |
//! | `%%`  | a percent sign |
//!
//! Escapes: `\n`, `\t`, `\r`, `\0` and `\\`. Every record's text is followed
//! by a newline. Keys, values and headers that are not UTF-8 are printed
//! with U+FFFD in place of the bad bytes; `--json` has them exactly, in
//! base64.

use corelog_client::ConsumerRecord;

use crate::output::unescape;

/// The tokens, for the error message of an unknown one.
const TOKENS_HELP: &str = "%t topic, %p partition, %o offset, %T timestamp (ms since the epoch), %k key, %s value, %h headers, %v schema version, %% a percent sign; escapes \\n \\t \\r \\0 \\\\";

/// One piece of a template.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Piece {
    Text(String),
    Topic,
    Partition,
    Offset,
    Timestamp,
    Key,
    Value,
    Headers,
    Schema,
}

/// A parsed `--format` template.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RecordFormat {
    pieces: Vec<Piece>,
}

impl RecordFormat {
    /// Parses a template (a clap value parser).
    ///
    /// # Errors
    /// A sentence naming the unknown token and listing the valid ones.
    pub(crate) fn parse(template: &str) -> Result<RecordFormat, String> {
        let mut pieces = Vec::new();
        let mut text = String::new();
        let mut chars = unescape(template).chars().collect::<Vec<_>>().into_iter();
        while let Some(c) = chars.next() {
            if c != '%' {
                text.push(c);
                continue;
            }
            let piece = match chars.next() {
                Some('%') => {
                    text.push('%');
                    continue;
                }
                Some('t') => Piece::Topic,
                Some('p') => Piece::Partition,
                Some('o') => Piece::Offset,
                Some('T') => Piece::Timestamp,
                Some('k') => Piece::Key,
                Some('s') => Piece::Value,
                Some('h') => Piece::Headers,
                Some('v') => Piece::Schema,
                Some(other) => {
                    return Err(format!(
                        "\"%{other}\" is not a format token; the tokens are {TOKENS_HELP}"
                    ));
                }
                None => {
                    return Err(format!(
                        "the format ends with a lone \"%\": write %% for a percent sign; the tokens are {TOKENS_HELP}"
                    ));
                }
            };
            if !text.is_empty() {
                pieces.push(Piece::Text(std::mem::take(&mut text)));
            }
            pieces.push(piece);
        }
        if !text.is_empty() {
            pieces.push(Piece::Text(text));
        }
        Ok(RecordFormat { pieces })
    }

    /// The value alone: what `consume` prints by default.
    pub(crate) fn value() -> RecordFormat {
        RecordFormat {
            pieces: vec![Piece::Value],
        }
    }

    /// Key, separator, value: what `consume --print-key` prints.
    pub(crate) fn key_and_value(separator: &str) -> RecordFormat {
        RecordFormat {
            pieces: vec![Piece::Key, Piece::Text(separator.to_owned()), Piece::Value],
        }
    }

    /// A record through the template (without the newline after it).
    pub(crate) fn render(&self, record: &ConsumerRecord) -> String {
        let lossy = |bytes: Option<&[u8]>| {
            bytes
                .map(String::from_utf8_lossy)
                .unwrap_or_default()
                .into_owned()
        };
        let mut out = String::new();
        for piece in &self.pieces {
            match piece {
                Piece::Text(text) => out.push_str(text),
                Piece::Topic => out.push_str(&record.topic),
                Piece::Partition => out.push_str(&record.partition.to_string()),
                Piece::Offset => out.push_str(&record.offset.0.to_string()),
                Piece::Timestamp => out.push_str(&record.timestamp.0.to_string()),
                Piece::Key => out.push_str(&lossy(record.key.as_deref())),
                Piece::Value => out.push_str(&lossy(record.value.as_deref())),
                Piece::Headers => {
                    let headers: Vec<String> = record
                        .headers
                        .iter()
                        .map(|header| match header.value.as_deref() {
                            Some(value) => format!("{}={}", header.key, lossy(Some(value))),
                            None => header.key.clone(),
                        })
                        .collect();
                    out.push_str(&headers.join(","));
                }
                Piece::Schema => {
                    if let Some(schema) = record.schema {
                        out.push_str(&schema.0.to_string());
                    }
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use bytes::Bytes;
    use corelog_client::{Header, Offset, SchemaVersion, TimestampMs};

    use super::*;

    fn record() -> ConsumerRecord {
        ConsumerRecord {
            topic: Arc::from("orders"),
            partition: 2,
            offset: Offset(41),
            timestamp: TimestampMs(1_700_000_000_000),
            key: Some(Bytes::from_static(b"customer42")),
            value: Some(Bytes::from_static(b"paid")),
            headers: vec![
                Header {
                    key: "source".to_owned(),
                    value: Some(Bytes::from_static(b"web")),
                },
                Header {
                    key: "flag".to_owned(),
                    value: None,
                },
            ],
            schema: Some(SchemaVersion(3)),
        }
    }

    fn render(template: &str, record: &ConsumerRecord) -> String {
        RecordFormat::parse(template).unwrap().render(record)
    }

    #[test]
    fn every_token_prints_its_field() {
        assert_eq!(
            render("%t %p %o %k %T %h %s v%v", &record()),
            "orders 2 41 customer42 1700000000000 source=web,flag paid v3"
        );
    }

    #[test]
    fn escapes_and_percent_signs_are_literal_text() {
        assert_eq!(render("%o\\t%s\\n100%%", &record()), "41\tpaid\n100%");
        assert_eq!(render("no tokens", &record()), "no tokens");
        assert_eq!(render("", &record()), "");
    }

    #[test]
    fn missing_fields_print_as_nothing() {
        let mut bare = record();
        bare.key = None;
        bare.value = None;
        bare.headers.clear();
        bare.schema = None;
        assert_eq!(render("[%k][%s][%h][%v]", &bare), "[][][][]");
    }

    #[test]
    fn bytes_that_are_not_utf8_do_not_break_the_line() {
        let mut binary = record();
        binary.value = Some(Bytes::from_static(&[b'a', 0xFF, b'b']));
        assert_eq!(render("%s", &binary), "a\u{FFFD}b");
    }

    #[test]
    fn unknown_tokens_and_a_lone_percent_are_refused_with_the_list() {
        let error = RecordFormat::parse("%o %x").unwrap_err();
        assert!(error.starts_with("\"%x\" is not a format token"), "{error}");
        assert!(error.contains("%h headers"), "{error}");
        let error = RecordFormat::parse("50%").unwrap_err();
        assert!(error.contains("lone"), "{error}");
    }

    #[test]
    fn the_default_styles_are_templates_too() {
        assert_eq!(RecordFormat::value().render(&record()), "paid");
        assert_eq!(
            RecordFormat::key_and_value("\t").render(&record()),
            "customer42\tpaid"
        );
    }
}
