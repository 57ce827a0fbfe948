//! DescribeShards: the answering broker's shards and the port on which
//! each one accepts connections of its own, for shard-aware clients.
//!
//! Every shard accepts on the broker's shared client port, where the
//! kernel spreads connections over the shards, so a request for a
//! partition owned by another shard is forwarded there (DESIGN §3). A
//! client that connects to the owning shard's own port skips that hop.
//! The answer describes only the broker that gives it, and only for as
//! long as its process runs: ports may be chosen anew at each start, so a
//! client learns them again whenever its connection to the shared port is
//! replaced.

use rkyv::{Archive, Deserialize, Serialize};

use super::{api, no_raw_section};
use crate::frame::ApiKey;

/// Asks the broker for its shards' own ports.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct DescribeShardsRequest {
    /// Only these shards; `None` for every shard.
    pub shards: Option<Vec<u16>>,
}

/// One shard's own listener.
#[derive(Archive, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct ShardEndpoint {
    /// The shard, as in [`PartitionMetadata::owner_shard`](super::metadata::PartitionMetadata::owner_shard).
    pub shard: u16,
    /// The port on the broker's advertised host where only this shard
    /// accepts; `0` while it has none (the client uses the shared port).
    pub port: u16,
}

/// The broker's shards.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct DescribeShardsResponse {
    /// Node id of the answering broker.
    pub node_id: u32,
    /// One entry per shard asked for (that exists), in shard order; empty
    /// when the broker has no per-shard listeners (`--shard-ports off`, or
    /// one shard).
    pub shards: Vec<ShardEndpoint>,
}

api!(ApiKey::DescribeShards, DescribeShardsRequest => DescribeShardsResponse);
no_raw_section!(
    DescribeShardsRequest,
    ArchivedDescribeShardsRequest,
    DescribeShardsResponse,
    ArchivedDescribeShardsResponse,
);

#[cfg(test)]
pub(crate) mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::message::test_support::{
        arbitrary_bodies_never_panic, few, noise, round_trip_request, round_trip_response,
    };

    pub(crate) fn request() -> impl Strategy<Value = DescribeShardsRequest> {
        prop::option::of(few(any::<u16>())).prop_map(|shards| DescribeShardsRequest { shards })
    }

    pub(crate) fn response() -> impl Strategy<Value = DescribeShardsResponse> {
        let endpoint =
            (any::<u16>(), any::<u16>()).prop_map(|(shard, port)| ShardEndpoint { shard, port });
        (any::<u32>(), few(endpoint))
            .prop_map(|(node_id, shards)| DescribeShardsResponse { node_id, shards })
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
