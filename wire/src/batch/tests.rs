//! Property tests for the batch codec: round trips, in-place stamping,
//! corruption detection, and arbitrary bytes never panicking.

use bytes::Bytes;
use proptest::prelude::*;

use super::*;
use crate::types::{LeaderEpoch, Offset, TimestampMs};

fn arbitrary_bytes(max: usize) -> impl Strategy<Value = Option<Bytes>> {
    proptest::option::of(proptest::collection::vec(any::<u8>(), 0..max).prop_map(Bytes::from))
}

fn arbitrary_record() -> impl Strategy<Value = NewRecord> {
    (
        arbitrary_bytes(32),
        arbitrary_bytes(256),
        proptest::collection::vec(("[a-z]{0,8}", arbitrary_bytes(16)), 0..3),
        any::<i64>(),
        proptest::option::of(any::<u32>()),
    )
        .prop_map(|(key, value, headers, timestamp, schema)| NewRecord {
            key,
            value,
            headers: headers
                .into_iter()
                .filter(|(name, _)| name != SCHEMA_HEADER)
                .map(|(key, value)| Header { key, value })
                .collect(),
            timestamp: TimestampMs(timestamp),
            schema: schema.map(SchemaVersion),
        })
}

fn arbitrary_compression() -> impl Strategy<Value = Compression> {
    prop_oneof![
        Just(Compression::None),
        Just(Compression::Lz4),
        Just(Compression::Zstd)
    ]
}

fn build(records: &[NewRecord], compression: Compression, producer: ProducerIdentity) -> Bytes {
    let mut builder = BatchBuilder::new(compression).producer(producer);
    for record in records {
        builder.push(record).unwrap();
    }
    builder.build().unwrap()
}

fn sample_batch() -> Bytes {
    let record = NewRecord {
        key: Some(Bytes::from_static(b"customer42")),
        value: Some(Bytes::from_static(b"order O51 paid")),
        timestamp: TimestampMs(1_700_000_000_000),
        schema: Some(SchemaVersion(3)),
        ..NewRecord::default()
    };
    build(
        &[record.clone(), record],
        Compression::None,
        ProducerIdentity::NONE,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn batches_round_trip(
        records in proptest::collection::vec(arbitrary_record(), 1..20),
        compression in arbitrary_compression(),
        producer_id in -1i64..1000,
        base_offset in 0u64..(1 << 40),
        epoch in 0u32..1000,
    ) {
        let producer = ProducerIdentity { producer_id, producer_epoch: 2, base_sequence: 7 };
        let mut bytes = build(&records, compression, producer).to_vec();
        set_base_offset(&mut bytes, Offset(base_offset));
        set_leader_epoch(&mut bytes, LeaderEpoch(epoch));
        let limits = BatchLimits::default();
        let header = validate(&bytes, &limits).unwrap();
        prop_assert_eq!(header.base_offset, Offset(base_offset));
        prop_assert_eq!(header.leader_epoch(), Some(LeaderEpoch(epoch)));
        prop_assert_eq!(header.record_count as usize, records.len());
        prop_assert_eq!(header.producer, producer);
        prop_assert_eq!(header.compression().unwrap(), compression);
        prop_assert_eq!(
            header.max_timestamp,
            records.iter().map(|record| record.timestamp).max().unwrap()
        );
        validate_records(&bytes, &header, &limits).unwrap();
        let decoded = decode_records(&Bytes::from(bytes), &limits).unwrap();
        prop_assert_eq!(decoded.len(), records.len());
        for (index, (sent, read)) in records.iter().zip(&decoded).enumerate() {
            prop_assert_eq!(read.offset, Offset(base_offset + index as u64));
            prop_assert_eq!(&read.key, &sent.key);
            prop_assert_eq!(&read.value, &sent.value);
            prop_assert_eq!(&read.headers, &sent.headers);
            prop_assert_eq!(read.timestamp, sent.timestamp);
            prop_assert_eq!(read.schema, sent.schema);
        }
    }

    #[test]
    fn any_single_bit_flip_is_detected(bit in 0usize..(1 << 16)) {
        let mut bytes = sample_batch().to_vec();
        let bit = bit % ((bytes.len() - header::CRC_AT) * 8);
        // Flips inside base_offset, batch_length or the epoch are not covered
        // by the CRC by design; start at the CRC field.
        let byte = header::CRC_AT + bit / 8;
        bytes[byte] ^= 1 << (bit % 8);
        prop_assert!(validate(&bytes, &BatchLimits::default()).is_err());
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let limits = BatchLimits::default();
        let _ = validate(&bytes, &limits);
        let _ = decode_records(&Bytes::from(bytes.clone()), &limits);
        for found in batches(&bytes, &limits).flatten() {
            let _ = validate_records(found.bytes, &found.header, &limits);
        }
    }

    #[test]
    fn mutated_valid_batches_never_panic(
        mutations in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..8),
        compression in arbitrary_compression(),
    ) {
        let record = NewRecord { value: Some(Bytes::from_static(b"hello")), ..NewRecord::default() };
        let mut bytes = build(&[record.clone(), record], compression, ProducerIdentity::NONE).to_vec();
        for (position, value) in mutations {
            let position = position % bytes.len();
            bytes[position] = value;
        }
        // Recompute the CRC so that the mutation reaches the record decoder.
        if bytes.len() >= HEADER_BYTES {
            let crc = compute_crc(&bytes);
            bytes[header::CRC_AT..header::CRC_AT + 4].copy_from_slice(&crc.to_be_bytes());
        }
        let limits = BatchLimits::default();
        if let Ok(header) = validate(&bytes, &limits) {
            let _ = validate_records(&bytes, &header, &limits);
        }
        let _ = decode_records(&Bytes::from(bytes), &limits);
    }
}

#[test]
fn stamping_offset_and_epoch_keeps_the_crc_valid() {
    let mut bytes = sample_batch().to_vec();
    let before = validate(&bytes, &BatchLimits::default()).unwrap();
    set_base_offset(&mut bytes, Offset(117));
    set_leader_epoch(&mut bytes, LeaderEpoch(9));
    let after = validate(&bytes, &BatchLimits::default()).unwrap();
    assert_eq!(after.crc, before.crc);
    assert_eq!(after.base_offset, Offset(117));
    assert_eq!(after.last_offset(), Offset(118));
    assert_eq!(after.next_offset(), Offset(119));
}

/// The CRC does not cover `base_offset` (the leader stamps it), so a flipped
/// or forged one must be refused by its value: offsets are Kafka's signed
/// 64-bit numbers, and the batch's last offset must stay below `i64::MAX`
/// so that the offset after it exists (issue 35, item 19).
#[test]
fn a_negative_or_overflowing_base_offset_is_refused_when_parsed() {
    let limits = BatchLimits::default();
    for raw in [u64::MAX, 1 << 63, i64::MAX as u64, i64::MAX as u64 - 1] {
        let mut bytes = sample_batch().to_vec();
        set_base_offset(&mut bytes, Offset(raw));
        let parsed = BatchHeader::parse(&bytes, &limits);
        assert!(
            parsed
                .as_ref()
                .is_err_and(|error| error.to_string().contains("base offset")),
            "base offset {raw:#x} (last offset delta 1) was parsed: {parsed:?}"
        );
        assert!(validate(&bytes, &limits).is_err());
        assert!(decode_records(&Bytes::from(bytes.clone()), &limits).is_err());
        assert!(batches_trusted(&bytes, &limits).all(|found| found.is_err()));
    }
    // The largest base offset whose batch still has a next offset.
    let mut bytes = sample_batch().to_vec();
    set_base_offset(&mut bytes, Offset(i64::MAX as u64 - 2));
    let header = validate(&bytes, &limits).expect("the largest valid base offset");
    assert_eq!(header.next_offset(), Offset(i64::MAX as u64));
}

#[test]
fn oversized_batch_is_refused_from_its_header() {
    let bytes = sample_batch();
    let limits = BatchLimits {
        batch_bytes_max: bytes.len() - 1,
        ..BatchLimits::default()
    };
    // Only the header is offered: the size decision needs nothing more.
    let error = BatchHeader::parse(&bytes[..HEADER_BYTES], &limits).unwrap_err();
    assert!(matches!(error, BatchError::TooLarge { .. }), "{error:?}");
}

#[test]
fn truncated_and_padded_batches_are_errors() {
    let bytes = sample_batch();
    let limits = BatchLimits::default();
    for cut in 0..bytes.len() {
        assert!(validate(&bytes[..cut], &limits).is_err(), "cut at {cut}");
    }
    let mut padded = bytes.to_vec();
    padded.push(0);
    assert_eq!(
        validate(&padded, &limits),
        Err(BatchError::TrailingBytes { extra: 1 })
    );
}

#[test]
fn iteration_stops_at_a_torn_tail_and_reports_the_valid_prefix() {
    let one = sample_batch();
    let mut log = Vec::new();
    for base in [0u64, 2, 4] {
        let mut batch = one.to_vec();
        set_base_offset(&mut batch, Offset(base));
        log.extend_from_slice(&batch);
    }
    let whole = log.len();
    log.truncate(whole - 5);
    let limits = BatchLimits::default();
    let mut iterator = batches(&log, &limits);
    let found: Vec<_> = iterator.by_ref().collect();
    assert_eq!(found.len(), 3);
    assert!(found[0].is_ok() && found[1].is_ok() && found[2].is_err());
    assert_eq!(iterator.position(), one.len() * 2);
}

#[test]
fn trusted_iteration_skips_only_the_crc_check() {
    let one = sample_batch();
    let mut log = Vec::new();
    for base in [0u64, 2] {
        let mut batch = one.to_vec();
        set_base_offset(&mut batch, Offset(base));
        log.extend_from_slice(&batch);
    }
    // A flipped byte in the second batch's records breaks its CRC only.
    let flipped = one.len() + one.len() - 1;
    log[flipped] ^= 0x40;
    let limits = BatchLimits::default();
    let checked: Vec<_> = batches(&log, &limits).collect();
    assert!(checked[0].is_ok());
    assert!(matches!(checked[1], Err(BatchError::CrcMismatch { .. })));
    let trusted: Vec<_> = batches_trusted(&log, &limits)
        .map(|found| found.map(|found| found.header.base_offset))
        .collect();
    assert_eq!(trusted, [Ok(Offset(0)), Ok(Offset(2))]);
    // The structure is still checked: a torn tail stops it.
    log.truncate(log.len() - 5);
    let torn: Vec<_> = batches_trusted(&log, &limits).collect();
    assert!(torn[0].is_ok() && matches!(torn[1], Err(BatchError::Truncated { .. })));
}

#[test]
fn reserved_schema_header_is_refused_when_building() {
    let record = NewRecord {
        headers: vec![Header {
            key: SCHEMA_HEADER.to_owned(),
            value: None,
        }],
        ..NewRecord::default()
    };
    let mut builder = BatchBuilder::new(Compression::None);
    assert_eq!(
        builder.push(&record),
        Err(BatchError::ReservedHeader(SCHEMA_HEADER))
    );
    // The refused record left nothing behind: the batch is still empty.
    assert_eq!(builder.record_count(), 0);
    assert_eq!(builder.build(), Err(BatchError::Empty));
}

#[test]
fn empty_batch_cannot_be_built() {
    assert_eq!(
        BatchBuilder::new(Compression::None).build(),
        Err(BatchError::Empty)
    );
}

#[test]
fn compressed_bomb_inside_a_batch_is_refused() {
    let record = NewRecord {
        value: Some(Bytes::from(vec![0u8; 8 << 20])),
        ..NewRecord::default()
    };
    let bytes = build(&[record], Compression::Zstd, ProducerIdentity::NONE);
    let limits = BatchLimits {
        decompressed_bytes_max: 1 << 20,
        ..BatchLimits::default()
    };
    let header = validate(&bytes, &limits).unwrap();
    assert_eq!(
        validate_records(&bytes, &header, &limits),
        Err(BatchError::DecompressedTooLarge { max: 1 << 20 })
    );
}

/// Records that exercise every field: null and empty key, a header with and
/// without a value, a schema version, a negative and a multi-byte
/// timestamp delta, and a value long enough for a two-byte length.
fn golden_records() -> Vec<NewRecord> {
    vec![
        NewRecord {
            key: Some(Bytes::from_static(b"k1")),
            value: Some(Bytes::from(vec![7u8; 200])),
            timestamp: TimestampMs(1_700_000_000_000),
            schema: Some(SchemaVersion(4_000_000_000)),
            ..NewRecord::default()
        },
        NewRecord {
            key: None,
            value: Some(Bytes::new()),
            headers: vec![
                Header {
                    key: "trace".to_owned(),
                    value: Some(Bytes::from_static(b"t-1")),
                },
                Header {
                    key: "empty".to_owned(),
                    value: None,
                },
            ],
            timestamp: TimestampMs(1_699_999_999_000),
            schema: None,
        },
        NewRecord {
            key: Some(Bytes::new()),
            value: None,
            timestamp: TimestampMs(1_700_000_100_000),
            schema: Some(SchemaVersion(0)),
            ..NewRecord::default()
        },
    ]
}

#[test]
fn encoding_is_byte_for_byte_stable() {
    let identity = ProducerIdentity {
        producer_id: 77,
        producer_epoch: 2,
        base_sequence: 9,
    };
    let bytes = build(&golden_records(), Compression::None, identity);
    let hash = crc32c::crc32c(&bytes);
    // Pinned from the encoder before it wrote records in place: a change
    // here changes what every broker and client has on disk and the wire.
    assert_eq!(
        (bytes.len(), hash),
        (333, 4_222_009_574),
        "{:02x?}",
        &bytes[..]
    );
    // A capacity hint, short or ample, changes nothing but allocation.
    for capacity in [64, 4096] {
        let mut builder =
            BatchBuilder::with_capacity(Compression::None, capacity).producer(identity);
        for record in golden_records() {
            builder.push(&record).unwrap();
        }
        assert_eq!(builder.build().unwrap(), bytes, "capacity {capacity}");
    }
}
