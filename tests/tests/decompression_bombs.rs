//! Decompression bombs toward consumers (issue 35, item 6). A batch of a
//! few hundred bytes that inflates to megabytes is bounded twice: at
//! produce time by the topic's `max.uncompressed.message.bytes` (itself
//! bounded by the broker's limit), and in the client library by how much
//! one fetch may decompress, so that a consumer's memory does not follow
//! the inflation of what a producer stored.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use bytes::Bytes;
use corelog_client::{Consumer, ConsumerConfig, StartFrom};
use corelog_tests::Broker;
use corelog_tests::cluster_client::client_runtime;
use corelog_wire::batch::{BatchBuilder, Compression, NewRecord};
use corelog_wire::error::ErrorCode;

/// One record of `size` zero bytes, compressed with zstd: a bomb.
fn zeros(size: usize) -> Vec<u8> {
    let mut builder = BatchBuilder::new(Compression::Zstd);
    builder
        .push(&NewRecord {
            value: Some(Bytes::from(vec![0u8; size])),
            ..NewRecord::default()
        })
        .unwrap();
    builder.build().unwrap().to_vec()
}

#[test]
fn a_small_batch_inflating_past_the_topic_limit_is_refused_at_produce() {
    let broker = Broker::start(&[]);
    let mut client = broker.client();
    assert_eq!(client.create_topic("bombs", 1, &[]), ErrorCode::None);

    // The attack's batch: about 600 bytes that inflate to 15.9 MiB, under
    // the broker's own 16 MiB bound on one batch.
    let bomb = zeros(15_900_000);
    assert!(bomb.len() < 1024, "a bomb of {} bytes", bomb.len());
    assert_eq!(
        client.produce("bombs", 0, &bomb).0,
        ErrorCode::DecompressedTooLarge,
        "a {}-byte batch inflating to 15.9 MiB, on a topic with default settings",
        bomb.len()
    );
    // Within the default (4 MiB): accepted, so the refusal was the bound.
    assert_eq!(
        client.produce("bombs", 0, &zeros(3 << 20)).0,
        ErrorCode::None
    );

    // The topic's own setting decides, within the broker's limit.
    let tight = [("max.uncompressed.message.bytes", "1048576")];
    assert_eq!(client.create_topic("tight", 1, &tight), ErrorCode::None);
    assert_eq!(
        client.produce("tight", 0, &zeros(2 << 20)).0,
        ErrorCode::DecompressedTooLarge
    );
    assert_eq!(
        client.produce("tight", 0, &zeros(512 << 10)).0,
        ErrorCode::None
    );
    for (value, why) in [
        ("10", "below the smallest batch"),
        ("33554432", "above the broker's 16 MiB limit"),
        ("lots", "not a number"),
    ] {
        assert_eq!(
            client.create_topic(
                &format!("refused-{}", value.len()),
                1,
                &[("max.uncompressed.message.bytes", value)]
            ),
            ErrorCode::InvalidConfig,
            "max.uncompressed.message.bytes={value} ({why})"
        );
    }
}

/// The client library's default per-fetch decompression budget (64 MiB)
/// plus one batch at the client's per-batch bound (16 MiB): the most one
/// poll may hold decompressed.
const POLL_BYTES_MAX: usize = (64 << 20) + (16 << 20);

#[test]
fn a_consumer_decompresses_a_bounded_amount_per_fetch_and_reads_everything() {
    let broker = Broker::start(&[]);
    let mut client = broker.client();
    assert_eq!(client.create_topic("inflating", 1, &[]), ErrorCode::None);
    // Forty batches of a few hundred bytes each, 3.5 MiB each inflated:
    // 140 MiB from about 12 KiB, all within one fetch's byte limits.
    let count = 40u64;
    let size = 3_500_000usize;
    let bomb = zeros(size);
    for expected in 0..count {
        let (code, offset) = client.produce("inflating", 0, &bomb);
        assert_eq!((code, offset), (ErrorCode::None, expected as i64));
    }

    let runtime = client_runtime();
    let polls = runtime.block_on(async {
        let mut consumer = Consumer::connect(ConsumerConfig::new(broker.addr.to_string()))
            .await
            .unwrap();
        consumer
            .assign_topic("inflating", StartFrom::Earliest)
            .await
            .unwrap();
        let mut offsets = Vec::new();
        let mut polls = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        while (offsets.len() as u64) < count {
            assert!(
                Instant::now() < deadline,
                "read {} of {count}",
                offsets.len()
            );
            let polled = consumer.poll().await.unwrap();
            let inflated: usize = polled
                .records
                .iter()
                .map(|record| record.value.as_ref().map_or(0, Bytes::len))
                .sum();
            assert!(
                inflated <= POLL_BYTES_MAX,
                "one poll decompressed {inflated} bytes ({} records), more than {POLL_BYTES_MAX}",
                polled.records.len()
            );
            for record in polled.records {
                let value = record.value.unwrap();
                assert_eq!(value.len(), size);
                assert!(value.iter().all(|byte| *byte == 0));
                offsets.push(record.offset.0);
            }
            if inflated > 0 {
                polls.push(inflated);
            }
        }
        assert_eq!(
            offsets,
            (0..count).collect::<Vec<_>>(),
            "every record, in order"
        );
        polls
    });
    assert!(
        polls.len() >= 2,
        "140 MiB inflated arrived over {} polls",
        polls.len()
    );
}
