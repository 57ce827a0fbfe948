//! Records inside a batch: Kafka's varint record layout, and the `schema`
//! header surfaced as a typed field (C12).
//!
//! ```text
//! length          varint  bytes after this field
//! attributes      int8    unused, 0
//! timestamp_delta varlong relative to the batch's base_timestamp
//! offset_delta    varint  relative to the batch's base_offset
//! key             varint length (-1 = null) + bytes
//! value           varint length (-1 = null) + bytes
//! header_count    varint
//! headers         (varint key length + UTF-8 key, varint value length (-1 = null) + bytes)*
//! ```

use bytes::Bytes;

use super::BatchError;
use super::varint::{Cursor, put_varint, put_varlong, varint_len, varlong_len};
use crate::types::{Offset, TimestampMs};

/// Name of the record header that carries the payload schema version.
pub const SCHEMA_HEADER: &str = "schema";

/// Version of the schema a record's payload was encoded with (C12), so that
/// replaying an old segment does not make today's consumer guess.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SchemaVersion(pub u32);

/// A record header other than `schema`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    /// Header name, UTF-8.
    pub key: String,
    /// Header value; `None` is distinct from empty.
    pub value: Option<Bytes>,
}

/// A record as a producer hands it over: the broker assigns its offset.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NewRecord {
    /// Routing key; records with equal keys go to one partition (C3).
    pub key: Option<Bytes>,
    /// Payload.
    pub value: Option<Bytes>,
    /// Application headers; `schema` is reserved for [`NewRecord::schema`].
    pub headers: Vec<Header>,
    /// Creation time.
    pub timestamp: TimestampMs,
    /// Schema version of `value`, carried as the `schema` header.
    pub schema: Option<SchemaVersion>,
}

/// A record read from a batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// Position in the partition.
    pub offset: Offset,
    /// Creation time (or append time, if the batch says so).
    pub timestamp: TimestampMs,
    /// Routing key.
    pub key: Option<Bytes>,
    /// Payload.
    pub value: Option<Bytes>,
    /// Application headers, `schema` excluded.
    pub headers: Vec<Header>,
    /// Schema version of `value`, from the `schema` header.
    pub schema: Option<SchemaVersion>,
}

/// Appends one encoded record. It is sized first and then written straight
/// into `out`, so a record costs no buffer of its own; on error nothing is
/// written.
pub(super) fn encode_record(
    out: &mut Vec<u8>,
    record: &NewRecord,
    base_timestamp: TimestampMs,
    offset_delta: i32,
) -> Result<(), BatchError> {
    let timestamp_delta = record.timestamp.0.wrapping_sub(base_timestamp.0);
    let mut digits = [0u8; U32_DIGITS_MAX];
    let schema_value = record.schema.map(|version| decimal(version.0, &mut digits));
    let header_count = length_i32(record.headers.len() + usize::from(schema_value.is_some()))?;
    let mut body_len = 1
        + varlong_len(timestamp_delta)
        + varint_len(offset_delta)
        + nullable_len(record.key.as_deref())?
        + nullable_len(record.value.as_deref())?
        + varint_len(header_count);
    for header in &record.headers {
        if header.key == SCHEMA_HEADER {
            return Err(BatchError::ReservedHeader(SCHEMA_HEADER));
        }
        body_len += nullable_len(Some(header.key.as_bytes()))?;
        body_len += nullable_len(header.value.as_deref())?;
    }
    if let Some(schema_value) = schema_value {
        body_len +=
            nullable_len(Some(SCHEMA_HEADER.as_bytes()))? + nullable_len(Some(schema_value))?;
    }
    let length = length_i32(body_len)?;
    out.reserve(varint_len(length) + body_len);
    put_varint(out, length);
    let body_start = out.len();
    out.push(0); // attributes
    put_varlong(out, timestamp_delta);
    put_varint(out, offset_delta);
    put_nullable(out, record.key.as_deref());
    put_nullable(out, record.value.as_deref());
    put_varint(out, header_count);
    for header in &record.headers {
        put_nullable(out, Some(header.key.as_bytes()));
        put_nullable(out, header.value.as_deref());
    }
    if let Some(schema_value) = schema_value {
        put_nullable(out, Some(SCHEMA_HEADER.as_bytes()));
        put_nullable(out, Some(schema_value));
    }
    debug_assert_eq!(out.len() - body_start, body_len, "record sized wrong");
    Ok(())
}

/// Digits of the largest `u32`.
const U32_DIGITS_MAX: usize = 10;

/// `value` in decimal ASCII, written into `digits`.
fn decimal(mut value: u32, digits: &mut [u8; U32_DIGITS_MAX]) -> &[u8] {
    let mut start = U32_DIGITS_MAX;
    loop {
        start -= 1;
        digits[start] = b'0' + (value % 10) as u8;
        value /= 10;
        if value == 0 {
            return &digits[start..];
        }
    }
}

/// Bytes [`put_nullable`] appends; refuses a field longer than 2 GiB.
fn nullable_len(bytes: Option<&[u8]>) -> Result<usize, BatchError> {
    match bytes {
        None => Ok(varint_len(-1)),
        Some(bytes) => Ok(varint_len(length_i32(bytes.len())?) + bytes.len()),
    }
}

/// Appends a length-prefixed field; [`nullable_len`] checked its length.
fn put_nullable(out: &mut Vec<u8>, bytes: Option<&[u8]>) {
    match bytes {
        None => put_varint(out, -1),
        Some(bytes) => {
            put_varint(out, bytes.len() as i32);
            out.extend_from_slice(bytes);
        }
    }
}

fn length_i32(length: usize) -> Result<i32, BatchError> {
    i32::try_from(length).map_err(|_| BatchError::MalformedRecord("field longer than 2 GiB"))
}

/// Where a field sits in the records section: (start, length).
pub(super) type FieldSpan = (usize, usize);

/// Positions of one record's fields inside the records section.
#[derive(Clone, Debug)]
pub(super) struct RecordSpan {
    pub timestamp_delta: i64,
    pub offset_delta: i32,
    pub key: Option<FieldSpan>,
    pub value: Option<FieldSpan>,
    /// (name, value) of each header.
    pub headers: Vec<(FieldSpan, Option<FieldSpan>)>,
}

/// Walks every record of a records section, checking lengths, offset deltas
/// and header names, and calls `visit` with each. Allocates nothing sized
/// from the input beyond the header list of one record, itself bounded by
/// the record's length.
pub(super) fn walk_records(
    section: &[u8],
    record_count: u32,
    last_offset_delta: u32,
    mut visit: impl FnMut(RecordSpan) -> Result<(), BatchError>,
) -> Result<(), BatchError> {
    let mut cursor = Cursor::new(section);
    let mut previous_delta: Option<i32> = None;
    for _ in 0..record_count {
        let length = cursor.varint()?;
        let length = usize::try_from(length)
            .map_err(|_| BatchError::MalformedRecord("negative record length"))?;
        let start = cursor.position();
        if length > cursor.remaining() {
            return Err(BatchError::MalformedRecord("record longer than its batch"));
        }
        let _attributes = cursor.u8()?;
        let timestamp_delta = cursor.varlong()?;
        let offset_delta = cursor.varint()?;
        if offset_delta < 0
            || offset_delta as u32 > last_offset_delta
            || previous_delta.is_some_and(|previous| offset_delta <= previous)
        {
            return Err(BatchError::MalformedRecord("offset deltas out of order"));
        }
        previous_delta = Some(offset_delta);
        let key = cursor.nullable_bytes()?;
        let value = cursor.nullable_bytes()?;
        let header_count = cursor.varint()?;
        let header_count = usize::try_from(header_count)
            .map_err(|_| BatchError::MalformedRecord("negative header count"))?;
        // Each header takes at least two bytes, which bounds the allocation.
        if header_count > cursor.remaining() / 2 {
            return Err(BatchError::MalformedRecord("more headers than bytes"));
        }
        let mut headers = Vec::with_capacity(header_count);
        for _ in 0..header_count {
            let name = cursor
                .nullable_bytes()?
                .ok_or(BatchError::MalformedRecord("null header name"))?;
            let value = cursor.nullable_bytes()?;
            headers.push((name, value));
        }
        if cursor.position() - start != length {
            return Err(BatchError::MalformedRecord(
                "record length disagrees with its fields",
            ));
        }
        visit(RecordSpan {
            timestamp_delta,
            offset_delta,
            key,
            value,
            headers,
        })?;
    }
    if cursor.remaining() != 0 {
        return Err(BatchError::MalformedRecord("bytes after the last record"));
    }
    Ok(())
}

/// Checks what [`walk_records`] leaves to the record: UTF-8 header names and
/// at most one `schema` header holding a decimal version.
pub(super) fn check_headers(section: &[u8], span: &RecordSpan) -> Result<(), BatchError> {
    let mut schema_seen = false;
    for (name, value) in &span.headers {
        let name = std::str::from_utf8(&section[name.0..name.0 + name.1])
            .map_err(|_| BatchError::MalformedRecord("header name is not UTF-8"))?;
        if name == SCHEMA_HEADER {
            if schema_seen {
                return Err(BatchError::MalformedRecord("two schema headers"));
            }
            schema_seen = true;
            parse_schema(value.map(|(start, length)| &section[start..start + length]))?;
        }
    }
    Ok(())
}

/// Builds the typed record from a span over `section`.
pub(super) fn record_from_span(
    section: &Bytes,
    span: RecordSpan,
    base_offset: Offset,
    base_timestamp: TimestampMs,
) -> Result<Record, BatchError> {
    let slice = |(start, length): (usize, usize)| section.slice(start..start + length);
    let mut headers = Vec::with_capacity(span.headers.len());
    let mut schema = None;
    for (name, value) in span.headers {
        let name = std::str::from_utf8(&section[name.0..name.0 + name.1])
            .map_err(|_| BatchError::MalformedRecord("header name is not UTF-8"))?;
        if name == SCHEMA_HEADER {
            if schema.is_some() {
                return Err(BatchError::MalformedRecord("two schema headers"));
            }
            schema = Some(parse_schema(
                value.map(|(start, length)| &section[start..start + length]),
            )?);
        } else {
            headers.push(Header {
                key: name.to_owned(),
                value: value.map(slice),
            });
        }
    }
    Ok(Record {
        offset: base_offset.plus(span.offset_delta as u64),
        timestamp: TimestampMs(base_timestamp.0.wrapping_add(span.timestamp_delta)),
        key: span.key.map(slice),
        value: span.value.map(slice),
        headers,
        schema,
    })
}

fn parse_schema(value: Option<&[u8]>) -> Result<SchemaVersion, BatchError> {
    value
        .and_then(|bytes| std::str::from_utf8(bytes).ok())
        .and_then(|text| text.parse::<u32>().ok())
        .map(SchemaVersion)
        .ok_or(BatchError::MalformedRecord(
            "schema header is not a decimal u32",
        ))
}
