use super::*;
use proptest::prelude::*;

fn history(entries: &[(u32, u64)]) -> EpochHistory {
    EpochHistory::from_entries(
        entries
            .iter()
            .map(|&(epoch, start)| EpochEntry {
                epoch: LeaderEpoch(epoch),
                start_offset: Offset(start),
            })
            .collect(),
    )
    .unwrap()
}

#[test]
fn epoch_of_follows_the_last_run_starting_at_or_before() {
    let h = history(&[(1, 0), (3, 10), (4, 10), (7, 25)]);
    assert_eq!(h.epoch_of(Offset(0)), Some(LeaderEpoch(1)));
    assert_eq!(h.epoch_of(Offset(9)), Some(LeaderEpoch(1)));
    // Epoch 3 wrote nothing that survived: offset 10 belongs to epoch 4.
    assert_eq!(h.epoch_of(Offset(10)), Some(LeaderEpoch(4)));
    assert_eq!(h.epoch_of(Offset(24)), Some(LeaderEpoch(4)));
    assert_eq!(h.epoch_of(Offset(1000)), Some(LeaderEpoch(7)));
    assert_eq!(history(&[(2, 5)]).epoch_of(Offset(4)), None);
    assert_eq!(h.epoch_before(Offset(0)), None);
    assert_eq!(h.epoch_before(Offset(10)), Some(LeaderEpoch(1)));
}

#[test]
fn end_of_answers_the_largest_epoch_at_or_below() {
    let h = history(&[(1, 0), (3, 10), (7, 25)]);
    let end = |epoch| h.end_of(LeaderEpoch(epoch), Offset(40));
    assert_eq!(end(0), None);
    assert_eq!(
        end(1),
        Some(EpochEnd {
            epoch: LeaderEpoch(1),
            end_offset: Offset(10)
        })
    );
    // The follower's epoch 2 never existed here: epoch 1 is the answer.
    assert_eq!(
        end(2),
        Some(EpochEnd {
            epoch: LeaderEpoch(1),
            end_offset: Offset(10)
        })
    );
    assert_eq!(
        end(5),
        Some(EpochEnd {
            epoch: LeaderEpoch(3),
            end_offset: Offset(25)
        })
    );
    // The last run ends at the log end.
    assert_eq!(
        end(9),
        Some(EpochEnd {
            epoch: LeaderEpoch(7),
            end_offset: Offset(40)
        })
    );
}

#[test]
fn append_refuses_out_of_order_entries() {
    let mut h = history(&[(2, 10)]);
    assert_eq!(
        h.append(LeaderEpoch(2), Offset(12)),
        Err(HistoryError::EpochNotIncreasing {
            last: LeaderEpoch(2),
            epoch: LeaderEpoch(2)
        })
    );
    assert_eq!(
        h.append(LeaderEpoch(3), Offset(9)),
        Err(HistoryError::StartDecreasing {
            last_start: Offset(10),
            start: Offset(9)
        })
    );
    assert_eq!(h, history(&[(2, 10)]));
    h.append(LeaderEpoch(3), Offset(10)).unwrap();
}

#[test]
fn truncate_from_drops_runs_starting_at_or_after() {
    let mut h = history(&[(1, 0), (3, 10), (7, 25)]);
    assert!(!h.truncate_from(Offset(30)));
    assert!(h.truncate_from(Offset(25)));
    assert_eq!(h, history(&[(1, 0), (3, 10)]));
    assert!(h.truncate_from(Offset(3)));
    assert_eq!(h, history(&[(1, 0)]));
    assert!(h.truncate_from(Offset(0)));
    assert!(h.entries().is_empty());
}

#[test]
fn retain_from_keeps_the_run_covering_the_record_before_the_log_start() {
    let mut h = history(&[(1, 0), (3, 10), (7, 25)]);
    assert!(!h.retain_from(Offset(10)));
    assert!(h.retain_from(Offset(12)));
    assert_eq!(h, history(&[(3, 10), (7, 25)]));
    assert!(!h.retain_from(Offset(25)));
    assert!(h.retain_from(Offset(27)));
    assert_eq!(h, history(&[(7, 25)]));
}

#[test]
fn standalone_encoding_round_trips_and_refuses_damage() {
    let h = history(&[(1, 0), (3, 10), (7, 25)]);
    let bytes = h.encode();
    assert_eq!(EpochHistory::decode(&bytes).unwrap(), h);
    let mut damaged = bytes.clone();
    damaged[6] ^= 0x40;
    assert!(matches!(
        EpochHistory::decode(&damaged),
        Err(DecodeError::Checksum { .. })
    ));
    assert!(EpochHistory::decode(&bytes[..bytes.len() - 1]).is_err());
}

/// A naive model: the epoch of every offset of a log, built from runs
/// (epoch increment, run length; length 0 is an epoch that wrote nothing).
fn model(runs: &[(u32, u64)]) -> (EpochHistory, Vec<LeaderEpoch>, Vec<LeaderEpoch>) {
    let mut h = EpochHistory::new();
    let mut per_offset = Vec::new();
    let mut epochs = Vec::new();
    let mut epoch = 0;
    for &(step, len) in runs {
        epoch += step;
        h.append(LeaderEpoch(epoch), Offset(per_offset.len() as u64))
            .unwrap();
        epochs.push(LeaderEpoch(epoch));
        per_offset.extend(std::iter::repeat_n(LeaderEpoch(epoch), len as usize));
    }
    (h, per_offset, epochs)
}

fn runs() -> impl Strategy<Value = Vec<(u32, u64)>> {
    proptest::collection::vec((1u32..4, 0u64..6), 0..12)
}

proptest! {
    #[test]
    fn epoch_of_matches_the_model(runs in runs()) {
        let (h, per_offset, _) = model(&runs);
        for (offset, epoch) in per_offset.iter().enumerate() {
            prop_assert_eq!(h.epoch_of(Offset(offset as u64)), Some(*epoch));
        }
    }

    #[test]
    fn end_of_matches_the_model(runs in runs(), asked in 0u32..40) {
        let (h, per_offset, epochs) = model(&runs);
        let log_end = Offset(per_offset.len() as u64);
        let expected_epoch = epochs.iter().copied().filter(|e| e.0 <= asked).max();
        let answer = h.end_of(LeaderEpoch(asked), log_end);
        match expected_epoch {
            None => prop_assert_eq!(answer, None),
            Some(epoch) => {
                // The run of `epoch` ends where the first record of a later
                // epoch sits (epochs never decrease along the log).
                let end = per_offset.iter().filter(|e| **e <= epoch).count() as u64;
                prop_assert_eq!(answer, Some(EpochEnd { epoch, end_offset: Offset(end) }));
            }
        }
    }

    #[test]
    fn truncation_matches_the_model(runs in runs(), cut in 0u64..80) {
        let (mut h, per_offset, _) = model(&runs);
        h.truncate_from(Offset(cut));
        for entry in h.entries() {
            prop_assert!(entry.start_offset < Offset(cut));
        }
        for (offset, epoch) in per_offset.iter().enumerate().take(cut as usize) {
            prop_assert_eq!(h.epoch_of(Offset(offset as u64)), Some(*epoch));
        }
    }

    #[test]
    fn retention_keeps_every_answer_from_the_record_before_the_log_start(
        runs in runs(), start in 1u64..80,
    ) {
        let (mut h, per_offset, _) = model(&runs);
        let before = h.clone();
        h.retain_from(Offset(start));
        for offset in (start - 1)..per_offset.len() as u64 {
            prop_assert_eq!(h.epoch_of(Offset(offset)), before.epoch_of(Offset(offset)));
        }
        prop_assert_eq!(h.last(), before.last());
    }
}
