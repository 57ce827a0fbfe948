//! Idempotent producer ids belong to the principal that initialised them
//! (issue 35, item 12). Before, one tenant bumped another's producer epoch
//! to 32767 with InitProducerId (fencing it for good) and appended under
//! its id, so that the genuine next record was refused as a duplicate
//! sequence.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use corelog_tests::batch;
use corelog_tests::tenants::Tenants;
use corelog_tests::wire_client::{Body, Client};
use corelog_wire::batch::ProducerIdentity;
use corelog_wire::error::ErrorCode;
use corelog_wire::message::init_producer_id::{InitProducerIdRequest, InitProducerIdResponse};

/// The top-level error code of a response body (`NONE` for an answer).
fn top_level_code(body: &Body) -> u16 {
    u16::from_be_bytes([body.bytes[0], body.bytes[1]])
}

/// InitProducerId: the id and epoch given, or the refusal.
fn init(
    client: &mut Client,
    producer_id: i64,
    producer_epoch: i16,
) -> Result<(i64, i16), ErrorCode> {
    let body = client
        .call(
            &InitProducerIdRequest {
                transactional_id: None,
                producer_id,
                producer_epoch,
            },
            &[],
        )
        .unwrap();
    let code = top_level_code(&body);
    if code != 0 {
        return Err(ErrorCode::from_code(code).unwrap());
    }
    let (archived, _) =
        corelog_wire::message::decode_response::<InitProducerIdResponse>(&body.bytes).unwrap();
    Ok((
        archived.producer_id.to_native(),
        archived.producer_epoch.to_native(),
    ))
}

fn idempotent(producer_id: i64, producer_epoch: i16, base_sequence: i32) -> ProducerIdentity {
    ProducerIdentity {
        producer_id,
        producer_epoch,
        base_sequence,
    }
}

/// Alice and bob may both produce to `shared.events`. Bob knows alice's
/// producer id (they are sequential, and easy to guess): he can neither
/// bump its epoch nor append under it, and alice's producer carries on.
#[test]
fn a_producer_id_serves_only_the_principal_that_initialised_it() {
    let tenants = Tenants::start(&["alice", "bob"], &[("shared.events", 1)], &[]);
    for user in ["alice", "bob"] {
        tenants.grant(&[
            "--allow",
            user,
            "--operation",
            "produce",
            "--topic",
            "shared.events",
        ]);
    }
    let mut alice = tenants.client_as("alice");
    let mut bob = tenants.client_as("bob");
    let (producer_id, epoch) = init(&mut alice, -1, -1).unwrap();
    let (error, _) = alice.produce(
        "shared.events",
        0,
        &batch("alice", "k", 1, idempotent(producer_id, epoch, 0)),
    );
    assert_eq!(error, ErrorCode::None);

    // Bob's own id is his: it works for him.
    let (bobs_id, bobs_epoch) = init(&mut bob, -1, -1).unwrap();
    assert_ne!(bobs_id, producer_id);
    let (error, _) = bob.produce(
        "shared.events",
        0,
        &batch("bob", "k", 1, idempotent(bobs_id, bobs_epoch, 0)),
    );
    assert_eq!(error, ErrorCode::None);

    // Alice's is not: no epoch bump (to the last epoch, or the next)...
    assert_eq!(
        init(&mut bob, producer_id, i16::MAX - 1),
        Err(ErrorCode::ProducerIdNotOwned)
    );
    assert_eq!(
        init(&mut bob, producer_id, epoch),
        Err(ErrorCode::ProducerIdNotOwned)
    );
    // ...and no record slipped into her sequence, with her epoch or any.
    for (bump, sequence) in [(0, 1), (1, 0), (i16::MAX - epoch, 0)] {
        let (error, _) = bob.produce(
            "shared.events",
            0,
            &batch(
                "bob",
                "k",
                1,
                idempotent(producer_id, epoch + bump, sequence),
            ),
        );
        assert_eq!(error, ErrorCode::ProducerIdNotOwned, "epoch +{bump}");
    }

    // Alice's next record is appended in sequence, under her epoch.
    let (error, _) = alice.produce(
        "shared.events",
        0,
        &batch("alice", "k", 1, idempotent(producer_id, epoch, 1)),
    );
    assert_eq!(error, ErrorCode::None);
    // She can still bump her own epoch, once she restarts.
    assert_eq!(
        init(&mut alice, producer_id, epoch),
        Ok((producer_id, epoch + 1))
    );
}
