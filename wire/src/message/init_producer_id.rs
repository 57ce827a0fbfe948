//! InitProducerId: obtain a producer id and epoch for idempotent produce
//! (C5), or bump the epoch of an existing one to fence older instances.

use rkyv::{Archive, Deserialize, Serialize};

use super::{api, no_raw_section};
use crate::frame::ApiKey;

/// Asks for a producer id and epoch.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct InitProducerIdRequest {
    /// Stable identity across producer restarts, reserved for transactions;
    /// `None` for a plain idempotent producer.
    pub transactional_id: Option<String>,
    /// `-1` for a new producer; else the current id, to bump its epoch.
    pub producer_id: i64,
    /// `-1` for a new producer; else the current epoch.
    pub producer_epoch: i16,
}

/// The producer id and epoch to stamp on batches. Failures come back as a
/// top-level error code.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct InitProducerIdResponse {
    /// The assigned producer id.
    pub producer_id: i64,
    /// The assigned epoch.
    pub producer_epoch: i16,
}

api!(ApiKey::InitProducerId, InitProducerIdRequest => InitProducerIdResponse);
no_raw_section!(
    InitProducerIdRequest,
    ArchivedInitProducerIdRequest,
    InitProducerIdResponse,
    ArchivedInitProducerIdResponse,
);

#[cfg(test)]
pub(crate) mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::message::test_support::{
        arbitrary_bodies_never_panic, noise, optional_name, round_trip_request, round_trip_response,
    };

    pub(crate) fn request() -> impl Strategy<Value = InitProducerIdRequest> {
        (optional_name(), any::<i64>(), any::<i16>()).prop_map(
            |(transactional_id, producer_id, producer_epoch)| InitProducerIdRequest {
                transactional_id,
                producer_id,
                producer_epoch,
            },
        )
    }

    pub(crate) fn response() -> impl Strategy<Value = InitProducerIdResponse> {
        (any::<i64>(), any::<i16>()).prop_map(|(producer_id, producer_epoch)| {
            InitProducerIdResponse {
                producer_id,
                producer_epoch,
            }
        })
    }

    proptest! {
        #[test]
        fn request_round_trips(msg in request()) {
            round_trip_request(&msg, &[])?;
        }

        #[test]
        fn response_round_trips(msg in response()) {
            round_trip_response(&msg, &[])?;
        }

        #[test]
        fn arbitrary_bytes_never_panic(q in request(), s in response(), noise in noise()) {
            arbitrary_bodies_never_panic((&q, &[]), (&s, &[]), &noise);
        }
    }
}
