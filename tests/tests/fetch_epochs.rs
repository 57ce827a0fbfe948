//! Fetch fences stale leader epochs (C11; issue 35, item 20). A fetch that
//! names the leader epoch its client believes current is answered
//! `FENCED_LEADER_EPOCH` when that epoch is older than the partition's
//! (the client's metadata is stale: a restart or a failover happened
//! since) and `UNKNOWN_LEADER_EPOCH` when it is newer (this broker has not
//! caught up with the controller yet); a fetch without an epoch, as older
//! clients send, is not checked.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use corelog_tests::wire_client::{self as support, ask};
use corelog_tests::{Broker, batch, values};
use corelog_wire::batch::ProducerIdentity;
use corelog_wire::error::ErrorCode;
use corelog_wire::message::metadata::MetadataRequest;

const TOPIC: &str = "epochs";

/// The leader epoch the broker's metadata gives partition 0 of [`TOPIC`].
fn leader_epoch(broker: &Broker) -> u32 {
    let mut client = broker.client();
    let metadata = ask(
        &mut client,
        &MetadataRequest {
            topics: Some(vec![TOPIC.to_owned()]),
        },
    );
    metadata
        .topics
        .iter()
        .find(|topic| topic.name == TOPIC)
        .and_then(|topic| topic.partitions.first())
        .map(|partition| partition.leader_epoch)
        .expect("the topic's partition 0 in metadata")
}

/// Fetches partition 0 of [`TOPIC`] from offset 0, naming `epoch`.
fn fetch_at_epoch(broker: &Broker, epoch: Option<u32>) -> support::FetchResult {
    let mut request = support::fetch_request(TOPIC, 0, 0, 0);
    request.topics[0].partitions[0].current_leader_epoch = epoch;
    let body = broker.client().call(&request, &[]).unwrap();
    support::decode_fetch(&body)
}

#[test]
fn a_fetch_naming_an_older_epoch_is_fenced_and_a_newer_one_unknown() {
    let mut broker = Broker::start(&[]);
    let mut client = broker.client();
    assert_eq!(client.create_topic(TOPIC, 1, &[]), ErrorCode::None);
    let (code, _) = client.produce(TOPIC, 0, &batch("r", "k", 3, ProducerIdentity::NONE));
    assert_eq!(code, ErrorCode::None);
    let before = leader_epoch(&broker);
    let current = fetch_at_epoch(&broker, Some(before));
    assert_eq!(current.code, ErrorCode::None, "the current epoch is served");
    assert_eq!(values(&current.records), ["r-0", "r-1", "r-2"]);

    // A restart elects the single node again, in a new epoch: a client
    // holding the metadata from before it is stale.
    assert!(broker.terminate(), "a clean stop");
    broker.spawn();
    let deadline = Instant::now() + Duration::from_secs(20);
    let after = loop {
        let epoch = leader_epoch(&broker);
        if epoch > before && fetch_at_epoch(&broker, Some(epoch)).code == ErrorCode::None {
            break epoch;
        }
        assert!(Instant::now() < deadline, "no new epoch after the restart");
        std::thread::sleep(Duration::from_millis(50));
    };

    let stale = fetch_at_epoch(&broker, Some(before));
    assert_eq!(
        stale.code,
        ErrorCode::FencedLeaderEpoch,
        "a fetch naming epoch {before} after the leader moved to epoch {after}"
    );
    assert!(
        stale.records.is_empty(),
        "nothing is served to a stale epoch"
    );

    let ahead = fetch_at_epoch(&broker, Some(after + 1));
    assert_eq!(
        ahead.code,
        ErrorCode::UnknownLeaderEpoch,
        "a fetch naming epoch {} when the broker knows {after}",
        after + 1
    );
    assert!(ahead.records.is_empty());

    for epoch in [Some(after), None] {
        let served = fetch_at_epoch(&broker, epoch);
        assert_eq!(served.code, ErrorCode::None, "epoch {epoch:?}");
        assert_eq!(values(&served.records), ["r-0", "r-1", "r-2"]);
    }
}
