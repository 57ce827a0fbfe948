//! The request-handler fuzz target's checks in the normal test suite: every
//! seed (`broker/fuzz/seeds/handler`) and every input that once broke an
//! invariant (`broker/fuzz/regressions/handler`, one file per bug, named
//! after it) runs against a real in-process broker through the same driver
//! as the fuzz target (`broker/fuzz/fuzz_targets/harness.rs`): every frame
//! answered once with its correlation id and a well-formed body, no hang, no
//! panic, and the broker still answers afterwards.

#![allow(clippy::unwrap_used)]

#[path = "../fuzz/fuzz_targets/harness.rs"]
mod harness;

use std::path::{Path, PathBuf};

use corelog_wire::frame::ApiKey;
use corelog_wire::message::join_group::JoinGroupRequest;
use harness::Harness;

/// The inputs in a corpus directory (hidden files skipped), in name order
/// so that runs repeat.
fn inputs(dir: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|error| panic!("cannot list {}: {error}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|path| {
            path.is_file()
                && !path
                    .file_name()
                    .is_some_and(|name| name.to_string_lossy().starts_with('.'))
        })
        .collect();
    files.sort();
    files
}

/// Runs every input of `dir` on one broker; returns how many ran.
fn replay(dir: &str) -> usize {
    let files = inputs(dir);
    let mut harness = Harness::start();
    for file in &files {
        let data = std::fs::read(file).unwrap();
        eprintln!("replaying {}", file.display());
        harness.run(&data);
    }
    files.len()
}

#[test]
fn handler_fuzz_seeds_are_answered_well_formed() {
    let count = replay("fuzz/seeds/handler");
    assert!(
        count > 27,
        "expected a seed per API and sessions, found {count}"
    );
}

#[test]
fn handler_fuzz_regressions_stay_fixed() {
    replay("fuzz/regressions/handler");
}

/// One framed item of a handler fuzz input: API index, options 0 (the
/// payload is the whole body, newest version), length, body.
fn framed<T: corelog_wire::message::Request>(api_key: ApiKey, request: &T) -> Vec<u8> {
    let index = ApiKey::ALL.iter().position(|key| *key == api_key).unwrap();
    let body = corelog_wire::message::encode_request(request, &[]).unwrap();
    let mut item = vec![index as u8, 0];
    item.extend_from_slice(&u16::try_from(body.len()).unwrap().to_be_bytes());
    item.extend_from_slice(&body);
    item
}

fn join(group: &str, session_timeout_ms: u32, rebalance_timeout_ms: u32) -> JoinGroupRequest {
    JoinGroupRequest {
        group: group.to_owned(),
        member_id: None,
        instance_id: None,
        client_id: "regression".to_owned(),
        topics: Vec::new(),
        session_timeout_ms,
        rebalance_timeout_ms,
        owned: Vec::new(),
    }
}

/// Found by the handler fuzz target: JoinGroup accepted any session and
/// rebalance timeout up to `u32::MAX` ms (49 days). A member that joined so
/// and went away stayed in its group, and every later join of that group
/// waited for it to rejoin for the member's whole rebalance timeout: one
/// client could stall a group for weeks. Now both timeouts are capped by
/// `group_timeout_max_ms` (the harness sets 2 s) and a join over it is
/// refused, so the second join below completes at once instead of hanging.
#[test]
fn join_with_huge_timeouts_cannot_stall_the_group() {
    let mut input = vec![0];
    input.extend(framed(
        ApiKey::JoinGroup,
        &join("stalled", u32::MAX, u32::MAX),
    ));
    input.extend(framed(ApiKey::JoinGroup, &join("stalled", 10_000, 1_000)));
    let mut harness = Harness::start();
    harness.run(&input);
}
