use proptest::prelude::*;

use super::*;

fn entry(index: u64, term: u64, data: &str) -> LogEntry {
    LogEntry {
        index,
        term,
        kind: EntryKind::Normal,
        data: Bytes::copy_from_slice(data.as_bytes()),
        context: Bytes::new(),
    }
}

fn snapshot(index: u64, term: u64, resets_log: bool) -> SnapshotRecord {
    SnapshotRecord {
        index,
        term,
        voters: vec![NodeId(1), NodeId(2), NodeId(3)],
        resets_log,
        state: Bytes::from_static(b"state"),
    }
}

/// A new file with `records` appended; only the header is marked synced.
fn file(records: &[LogRecord]) -> (Vec<u8>, Vec<usize>) {
    let mut bytes = new_log_file();
    let mut ends = Vec::new();
    for record in records {
        encode_record(record, &mut bytes);
        ends.push(bytes.len());
    }
    (bytes, ends)
}

/// Records the `sequence`-th slot write, as the broker does after a sync.
fn mark_synced(bytes: &mut [u8], sequence: u64, len: usize) {
    let slot = synced_length_slot(sequence, len as u64);
    let at = slot.position as usize;
    bytes[at..at + SLOT_BYTES].copy_from_slice(&slot.bytes);
}

/// The same records in the first format (no slots).
fn file_v1(records: &[LogRecord]) -> Vec<u8> {
    let mut bytes = PREAMBLE_V1.to_vec();
    for record in records {
        encode_record(record, &mut bytes);
    }
    bytes
}

fn sample_records() -> Vec<LogRecord> {
    vec![
        LogRecord::Entry(entry(1, 1, "a")),
        LogRecord::Entry(entry(2, 1, "b")),
        LogRecord::HardState(HardState {
            term: 1,
            vote: 1,
            commit: 1,
        }),
        LogRecord::Entry(entry(3, 1, "c")),
        LogRecord::Snapshot(snapshot(2, 1, false)),
        LogRecord::HardState(HardState {
            term: 2,
            vote: 3,
            commit: 3,
        }),
        LogRecord::Entry(entry(4, 2, "d")),
    ]
}

#[test]
fn records_round_trip_through_a_file() {
    let records = sample_records();
    let (bytes, _) = file(&records);
    let scan = scan(&bytes).unwrap();
    assert_eq!(scan.torn_tail, None);
    assert_eq!(scan.valid_len, bytes.len() as u64);
    let decoded: Vec<LogRecord> = scan.records.into_iter().map(|(_, record)| record).collect();
    assert_eq!(decoded, records);
}

#[test]
fn recovery_replays_truncations_snapshots_and_hard_states() {
    let (bytes, _) = file(&sample_records());
    let recovery = recover(&bytes).unwrap();
    assert_eq!(recovery.log.snapshot, Some(snapshot(2, 1, false)));
    assert_eq!(
        recovery.log.entries,
        vec![entry(3, 1, "c"), entry(4, 2, "d")]
    );
    assert_eq!(
        recovery.log.hard_state,
        HardState {
            term: 2,
            vote: 3,
            commit: 3
        }
    );

    let (bytes, _) = file(&[
        LogRecord::Entry(entry(1, 1, "a")),
        LogRecord::Entry(entry(2, 1, "b")),
        LogRecord::Entry(entry(3, 1, "c")),
        LogRecord::Entry(entry(2, 2, "B")),
        LogRecord::Snapshot(snapshot(5, 3, true)),
        LogRecord::Entry(entry(6, 3, "f")),
    ]);
    let log = recover(&bytes).unwrap().log;
    assert_eq!(log.entries, vec![entry(6, 3, "f")]);
    assert_eq!(log.hard_state.commit, 5, "a snapshot's index is committed");
}

#[test]
fn a_compacted_rewrite_recovers_the_same_log() {
    let (bytes, _) = file(&sample_records());
    let log = recover(&bytes).unwrap().log;
    let rewritten = recover(&encode_log(&log)).unwrap().log;
    assert_eq!(rewritten.entries, log.entries);
    assert_eq!(rewritten.hard_state, log.hard_state);
    let snapshot = rewritten.snapshot.unwrap();
    assert!(snapshot.resets_log);
    assert_eq!(snapshot.index, 2);
}

#[test]
fn contradictory_records_are_inconsistent() {
    for records in [
        vec![LogRecord::Entry(entry(2, 1, "gap"))],
        vec![
            LogRecord::Entry(entry(1, 2, "a")),
            LogRecord::Entry(entry(2, 1, "term goes back")),
        ],
        vec![
            LogRecord::Entry(entry(1, 1, "a")),
            LogRecord::HardState(HardState {
                term: 1,
                vote: 0,
                commit: 2,
            }),
        ],
        vec![LogRecord::Snapshot(snapshot(3, 1, false))],
    ] {
        let (bytes, _) = file(&records);
        assert!(
            matches!(recover(&bytes), Err(DurableError::Inconsistent { .. })),
            "{records:?}"
        );
    }
}

#[test]
fn a_log_cut_at_any_byte_recovers_exactly_the_whole_records() {
    let records = sample_records();
    let (bytes, ends) = file(&records);
    for cut in 0..=bytes.len() {
        let result = scan(&bytes[..cut]);
        if cut == 0 {
            assert_eq!(result.unwrap().header, None, "an empty file is a new node");
            continue;
        }
        if cut < LOG_HEADER_BYTES {
            // A new file is renamed into place whole: never a crash.
            assert!(
                matches!(result, Err(DurableError::Corrupt { position: 0, .. })),
                "cut at {cut}: {result:?}"
            );
            continue;
        }
        let scan = result.unwrap();
        let whole = ends.iter().filter(|end| **end <= cut).count();
        assert_eq!(scan.records.len(), whole, "cut at {cut}");
        let valid_len = ends[..whole].last().copied().unwrap_or(LOG_HEADER_BYTES);
        assert_eq!(scan.valid_len, valid_len as u64, "cut at {cut}");
        assert_eq!(scan.torn_tail.is_some(), cut != valid_len, "cut at {cut}");
    }
}

#[test]
fn losing_synced_bytes_is_refused_and_losing_unsynced_ones_is_a_torn_tail() {
    let records = sample_records();
    let (mut bytes, ends) = file(&records);
    // Synced through the fifth record; the last two were appended after.
    let synced = ends[4];
    mark_synced(&mut bytes, 1, synced);
    for cut in LOG_HEADER_BYTES..=bytes.len() {
        let result = recover(&bytes[..cut]);
        if cut < synced {
            let intact = ends.iter().copied().filter(|end| *end <= cut).max();
            assert_eq!(
                result,
                Err(DurableError::Truncated {
                    intact_len: intact.unwrap_or(LOG_HEADER_BYTES) as u64,
                    synced_len: synced as u64,
                    sequence: 1,
                }),
                "cut at {cut}"
            );
        } else {
            let recovery = result.unwrap_or_else(|error| panic!("cut at {cut}: {error}"));
            assert!(recovery.valid_len >= synced as u64, "cut at {cut}");
        }
    }
    // A bit flip in the last synced record cannot pass for a torn append.
    let mut flipped = bytes[..synced].to_vec();
    flipped[synced - 1] ^= 0x01;
    assert!(matches!(
        recover(&flipped),
        Err(DurableError::Truncated { .. })
    ));
    // Beyond the synced length it can, and is cut.
    let mut flipped = bytes.clone();
    let last = bytes.len() - 1;
    flipped[last] ^= 0x01;
    let recovery = recover(&flipped).unwrap();
    assert_eq!(recovery.valid_len, ends[5] as u64);
    assert!(recovery.torn_tail.is_some());
}

#[test]
fn the_newer_valid_slot_wins_and_one_damaged_slot_is_survivable() {
    let (mut bytes, ends) = file(&sample_records());
    mark_synced(&mut bytes, 1, ends[1]);
    mark_synced(&mut bytes, 2, ends[3]);
    let expect = |bytes: &[u8], sequence: u64, len: usize, damaged_slot: bool| {
        assert_eq!(
            scan(bytes).unwrap().header,
            Some(Header::Current {
                synced: SyncedLength {
                    sequence,
                    len: len as u64,
                },
                damaged_slot,
            })
        );
    };
    expect(&bytes, 2, ends[3], false);
    assert_eq!(
        synced_length(&bytes),
        Some(SyncedLength {
            sequence: 2,
            len: ends[3] as u64
        })
    );
    // A torn write of slot 2 (slot 0) leaves slot 1, a lower bound.
    let slot_two = synced_length_slot(2, 0).position as usize;
    let mut torn = bytes.clone();
    torn[slot_two + 3] ^= 0xff;
    expect(&torn, 1, ends[1], true);
    assert!(recover(&torn).is_ok());
    // Both damaged: nothing says what was durable.
    let slot_one = synced_length_slot(1, 0).position as usize;
    torn[slot_one + 9] ^= 0x01;
    assert!(matches!(
        scan(&torn),
        Err(DurableError::Corrupt { position: 0, .. })
    ));
}

#[test]
fn a_first_format_file_is_read_and_its_rewrite_is_current() {
    let records = sample_records();
    let v1 = file_v1(&records);
    let recovery = recover(&v1).unwrap();
    assert_eq!(recovery.header, Some(Header::V1));
    let (current, _) = file(&records);
    assert_eq!(recovery.log, recover(&current).unwrap().log);
    // A torn tail of a first-format file is still cut.
    let recovery = recover(&v1[..v1.len() - 3]).unwrap();
    assert!(recovery.torn_tail.is_some());
    let rewritten = encode_log(&recovery.log);
    assert_eq!(
        synced_length(&rewritten).map(|synced| synced.len),
        Some(rewritten.len() as u64),
        "a rewritten file is durable whole"
    );
}

#[test]
fn damage_before_the_last_record_is_corruption_naming_the_record() {
    let records = sample_records();
    let (bytes, ends) = file(&records);
    let starts: Vec<usize> = std::iter::once(LOG_HEADER_BYTES)
        .chain(ends.iter().copied())
        .collect();
    for record in 0..records.len() {
        for offset in starts[record]..ends[record] {
            let mut damaged = bytes.clone();
            damaged[offset] ^= 0x10;
            let result = scan(&damaged);
            if record + 1 == records.len() {
                let scan = result.unwrap();
                assert_eq!(scan.valid_len, starts[record] as u64, "byte {offset}");
            } else {
                assert!(
                    matches!(
                        result,
                        Err(DurableError::Corrupt { position, .. }) if position == starts[record] as u64
                    ),
                    "byte {offset}: {result:?}"
                );
            }
        }
    }
    let mut bad_header = bytes.clone();
    bad_header[0] = b'X';
    assert!(matches!(
        scan(&bad_header),
        Err(DurableError::Corrupt { position: 0, .. })
    ));
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
        let _ = recover(&bytes);
        let mut with_header = new_log_file();
        with_header.extend_from_slice(&bytes);
        let _ = recover(&with_header);
        let mut with_v1_header = PREAMBLE_V1.to_vec();
        with_v1_header.extend_from_slice(&bytes);
        let _ = recover(&with_v1_header);
    }

    #[test]
    fn records_round_trip(
        index in any::<u64>(),
        term in any::<u64>(),
        data in proptest::collection::vec(any::<u8>(), 0..100),
        resets_log in any::<bool>(),
    ) {
        let records = vec![
            LogRecord::Entry(LogEntry {
                index,
                term,
                kind: EntryKind::ConfChangeV2,
                data: Bytes::from(data.clone()),
                context: Bytes::from(data.clone()),
            }),
            LogRecord::HardState(HardState { term, vote: index, commit: term }),
            LogRecord::Snapshot(SnapshotRecord {
                index,
                term,
                voters: vec![NodeId(index)],
                resets_log,
                state: Bytes::from(data),
            }),
        ];
        let (bytes, _) = file(&records);
        let decoded: Vec<LogRecord> =
            scan(&bytes).unwrap().records.into_iter().map(|(_, record)| record).collect();
        prop_assert_eq!(decoded, records);
    }

    #[test]
    fn garbage_appended_after_valid_records_is_a_torn_tail(
        garbage in proptest::collection::vec(any::<u8>(), 1..200),
    ) {
        let (mut bytes, ends) = file(&sample_records());
        bytes.extend_from_slice(&garbage);
        // Garbage could by chance hold a valid record; it never does in
        // practice, and then the scan would call it corruption, not panic.
        if let Ok(scan) = scan(&bytes) {
            prop_assert_eq!(scan.valid_len as usize, *ends.last().unwrap());
        }
    }
}
