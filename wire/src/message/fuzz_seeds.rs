//! Writes seed inputs for the fuzz targets in `wire/fuzz/`: valid bodies of
//! every message, so that the fuzzer starts from archives that validate
//! instead of having to discover rkyv's layout from nothing.
//!
//! The seeds are checked in under `wire/fuzz/seeds`; a test regenerates
//! them (deterministically) and fails if the checked-in ones differ, so a
//! change to the encoding cannot leave the fuzzers starting from stale
//! bodies. To regenerate after such a change:
//!
//! ```text
//! CORELOG_FUZZ_SEEDS=wire/fuzz/seeds cargo test -p corelog-wire fuzz_seeds
//! ```
//!
//! Each message seed is the target's control byte (0: request body, 1:
//! response body; see `wire/fuzz/fuzz_targets/common.rs`) followed by the
//! body. Batch seeds (`batch_decode`) are control byte 1 (fix up the CRC)
//! followed by two consecutive batches, one per compression codec. Stored
//! record seeds (`audit_record`, `group_record`) are record values as the
//! broker stores them, without a control byte.

use std::path::{Path, PathBuf};

use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::TestRunner;

use super::{Request, Response, encode_request, encode_response};

/// Seeds per message type.
const SEEDS_PER_MESSAGE: usize = 8;

fn write_seeds<Q, S>(
    dir: &Path,
    target: &str,
    requests: impl Strategy<Value = (Q, Vec<u8>)>,
    responses: impl Strategy<Value = (S, Vec<u8>)>,
) where
    Q: Request,
    S: Response,
{
    let dir = dir.join(target);
    std::fs::create_dir_all(&dir).unwrap();
    let mut runner = TestRunner::deterministic();
    for index in 0..SEEDS_PER_MESSAGE {
        let (request, raw) = requests.new_tree(&mut runner).unwrap().current();
        let mut seed = vec![0_u8];
        seed.extend(encode_request(&request, &raw).unwrap());
        std::fs::write(dir.join(format!("request-{index}")), seed).unwrap();
        let (response, raw) = responses.new_tree(&mut runner).unwrap().current();
        let mut seed = vec![1_u8];
        seed.extend(encode_response(&response, &raw).unwrap());
        std::fs::write(dir.join(format!("response-{index}")), seed).unwrap();
    }
}

/// A few record batches for `batch_decode`, built with the batch module's
/// own builder.
fn write_batch_seeds(dir: &Path) {
    use bytes::Bytes;

    use crate::batch::{BatchBuilder, Compression, Header, NewRecord, SchemaVersion};
    use crate::types::TimestampMs;

    let dir = dir.join("batch_decode");
    std::fs::create_dir_all(&dir).unwrap();
    let record = NewRecord {
        key: Some(Bytes::from_static(b"customer42")),
        value: Some(Bytes::from_static(b"order O51 paid")),
        headers: vec![Header {
            key: "trace".to_owned(),
            value: Some(Bytes::from_static(b"abc")),
        }],
        timestamp: TimestampMs(1_700_000_000_000),
        schema: Some(SchemaVersion(3)),
    };
    let tombstone = NewRecord {
        key: Some(Bytes::from_static(b"customer42")),
        ..NewRecord::default()
    };
    for (name, compression) in [
        ("none", Compression::None),
        ("lz4", Compression::Lz4),
        ("zstd", Compression::Zstd),
    ] {
        let mut seed = vec![1_u8];
        for records in [
            vec![record.clone(), tombstone.clone()],
            vec![record.clone()],
        ] {
            let mut builder = BatchBuilder::new(compression);
            for record in &records {
                builder.push(record).unwrap();
            }
            seed.extend_from_slice(&builder.build().unwrap());
        }
        std::fs::write(dir.join(name), seed).unwrap();
    }
}

/// Stored record values for `audit_record` and `group_record`.
fn write_record_seeds<T>(
    dir: &Path,
    target: &str,
    records: impl Strategy<Value = T>,
    encode: fn(&T) -> Vec<u8>,
) where
    T: std::fmt::Debug,
{
    let dir = dir.join(target);
    std::fs::create_dir_all(&dir).unwrap();
    let mut runner = TestRunner::deterministic();
    for index in 0..SEEDS_PER_MESSAGE {
        let record = records.new_tree(&mut runner).unwrap().current();
        std::fs::write(dir.join(format!("record-{index}")), encode(&record)).unwrap();
    }
}

fn no_raw<T: std::fmt::Debug>(
    strategy: impl Strategy<Value = T>,
) -> impl Strategy<Value = (T, Vec<u8>)> {
    strategy.prop_map(|message| (message, Vec::new()))
}

#[test]
fn checked_in_fuzz_seeds_match_the_current_encoding() {
    if let Some(dir) = std::env::var_os("CORELOG_FUZZ_SEEDS") {
        // Tests run in the crate's directory; a relative path is meant from
        // the workspace root, where the documented command is typed.
        let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        write_all_seeds(&workspace.join(PathBuf::from(dir)));
        return;
    }
    let checked_in = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz")
        .join("seeds");
    let fresh = std::env::temp_dir().join(format!("corelog-fuzz-seeds-{}", std::process::id()));
    write_all_seeds(&fresh);
    let mut compared = 0;
    for target in std::fs::read_dir(&fresh).unwrap() {
        let target = target.unwrap().path();
        for seed in std::fs::read_dir(&target).unwrap() {
            let seed = seed.unwrap().path();
            let relative = seed.strip_prefix(&fresh).unwrap();
            let stored = std::fs::read(checked_in.join(relative)).unwrap_or_default();
            assert!(
                stored == std::fs::read(&seed).unwrap(),
                "fuzz seed {} is stale; regenerate with CORELOG_FUZZ_SEEDS=wire/fuzz/seeds \
                 cargo test -p corelog-wire fuzz_seeds",
                relative.display()
            );
            compared += 1;
        }
    }
    std::fs::remove_dir_all(&fresh).unwrap();
    assert!(compared > 100, "only {compared} seeds compared");
}

fn write_all_seeds(dir: &Path) {
    use super::{
        alter_acls, alter_cluster, alter_quotas, alter_users, api_versions, audit, authenticate,
        broker_heartbeat, broker_register, controller_operation, controller_raft, create_topics,
        delete_groups, delete_offsets, delete_topics, describe_acls, describe_cluster,
        describe_groups, describe_quotas, describe_shards, describe_topics, describe_users, fetch,
        find_coordinator, group_records, heartbeat, init_producer_id, join_group, leave_group,
        list_groups, list_offsets, metadata, metadata_fetch, offset_commit, offset_fetch,
        partition_report, produce, replica_push, replica_query, replica_stream, reset_offsets,
        write_audit,
    };
    write_seeds(
        dir,
        "api_versions",
        no_raw(api_versions::tests::request()),
        no_raw(api_versions::tests::response()),
    );
    write_seeds(
        dir,
        "metadata",
        no_raw(metadata::tests::request()),
        no_raw(metadata::tests::response()),
    );
    write_seeds(
        dir,
        "create_topics",
        no_raw(create_topics::tests::request()),
        no_raw(create_topics::tests::response()),
    );
    write_seeds(
        dir,
        "delete_topics",
        no_raw(delete_topics::tests::request()),
        no_raw(delete_topics::tests::response()),
    );
    write_seeds(
        dir,
        "describe_topics",
        no_raw(describe_topics::tests::request()),
        no_raw(describe_topics::tests::response()),
    );
    write_seeds(
        dir,
        "produce",
        produce::tests::request(),
        no_raw(produce::tests::response()),
    );
    write_seeds(
        dir,
        "fetch",
        no_raw(fetch::tests::request()),
        fetch::tests::response(),
    );
    write_seeds(
        dir,
        "list_offsets",
        no_raw(list_offsets::tests::request()),
        no_raw(list_offsets::tests::response()),
    );
    write_batch_seeds(dir);
    write_seeds(
        dir,
        "init_producer_id",
        no_raw(init_producer_id::tests::request()),
        no_raw(init_producer_id::tests::response()),
    );
    macro_rules! no_raw_seeds {
        ($($module:ident),* $(,)?) => {
            $(
                write_seeds(
                    dir,
                    stringify!($module),
                    no_raw($module::tests::request()),
                    no_raw($module::tests::response()),
                );
            )*
        };
    }
    no_raw_seeds!(
        describe_shards,
        find_coordinator,
        join_group,
        heartbeat,
        leave_group,
        offset_commit,
        offset_fetch,
        list_groups,
        describe_groups,
        delete_groups,
        reset_offsets,
        write_audit,
        delete_offsets,
    );
    write_seeds(
        dir,
        "describe_groups_v1",
        no_raw(describe_groups::tests::request_v1()),
        no_raw(describe_groups::tests::response_v1()),
    );
    write_seeds(
        dir,
        "describe_cluster_v1",
        no_raw(describe_cluster::tests::request_v1()),
        no_raw(describe_cluster::tests::response_v1()),
    );
    write_seeds(
        dir,
        "describe_cluster_v2",
        no_raw(describe_cluster::tests::request_v2()),
        no_raw(describe_cluster::tests::response_v2()),
    );
    write_seeds(
        dir,
        "partition_report_v1",
        no_raw(partition_report::tests::request_v1()),
        no_raw(partition_report::tests::response_v1()),
    );
    write_seeds(
        dir,
        "controller_raft",
        controller_raft::tests::request(),
        no_raw(controller_raft::tests::response()),
    );
    write_seeds(
        dir,
        "metadata_fetch",
        no_raw(metadata_fetch::tests::request()),
        metadata_fetch::tests::response(),
    );
    write_seeds(
        dir,
        "replica_push",
        replica_push::tests::request(),
        no_raw(replica_push::tests::response()),
    );
    write_seeds(
        dir,
        "replica_stream",
        replica_stream::tests::request(),
        no_raw(replica_stream::tests::response()),
    );
    no_raw_seeds!(
        broker_register,
        broker_heartbeat,
        controller_operation,
        replica_query,
        partition_report,
        describe_cluster,
        authenticate,
        describe_users,
        alter_users,
        describe_acls,
        alter_acls,
        describe_quotas,
        alter_quotas,
        alter_cluster,
    );
    write_record_seeds(
        dir,
        "audit_record",
        audit::tests::record(),
        audit::AuditRecord::encode,
    );
    write_record_seeds(
        dir,
        "group_record",
        group_records::tests::record(),
        group_records::GroupRecord::encode,
    );
}
