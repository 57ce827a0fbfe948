//! One release build serves `make run`, the CLI, `make cluster` and the
//! nemesis (issue 35, item 26). Cargo unifies dependency features over
//! the packages a command selects, so `cargo build --release -p
//! corelog-broker --bin corelogd` after `cargo build --release
//! --workspace` rebuilt dozens of crates (79 s) with another feature set.
//! Every release build of the Makefile and the scripts must therefore be
//! the same command: this test reads them (`make -n`, and the scripts'
//! text) and fails naming any that drifted.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The `cargo build --release ...` lines `make -n TARGET` would run.
fn make_release_builds(target: &str) -> Vec<String> {
    let output = Command::new("make")
        .arg("-n")
        .arg("-C")
        .arg(workspace())
        .arg(target)
        .env("CARGO", "cargo")
        .output()
        .unwrap_or_else(|error| panic!("cannot run make ({error})"));
    assert!(
        output.status.success(),
        "make -n {target}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    release_builds(&String::from_utf8_lossy(&output.stdout))
}

/// The lines of `text` that build in release mode, whitespace normalised.
fn release_builds(text: &str) -> Vec<String> {
    text.lines()
        .map(|line| line.split_whitespace().collect::<Vec<_>>().join(" "))
        .filter(|line| line.contains("cargo build") && line.contains("--release"))
        .collect()
}

#[test]
fn every_release_build_is_the_one_make_build_runs() {
    let reference = make_release_builds("build");
    assert_eq!(reference.len(), 1, "make build: {reference:?}");
    let reference = &reference[0];
    let mut drifted = Vec::new();
    for target in [
        "run",
        "cluster",
        "nemesis",
        "soak",
        "bench-storage",
        "bench-matrix",
    ] {
        let builds = make_release_builds(target);
        if builds.is_empty() {
            drifted.push(format!("make {target}: no release build"));
        }
        drifted.extend(
            builds
                .into_iter()
                .filter(|build| build != reference)
                .map(|build| format!("make {target}: {build}")),
        );
    }
    for script in [
        "scripts/cluster.sh",
        "scripts/bench-broker.sh",
        "scripts/bench-cluster.sh",
    ] {
        let text = std::fs::read_to_string(workspace().join(script)).unwrap();
        drifted.extend(
            release_builds(&text)
                .into_iter()
                .filter(|build| !build.ends_with(reference.trim_start_matches("cargo ")))
                .map(|build| format!("{script}: {build}")),
        );
    }
    assert!(
        drifted.is_empty(),
        "release builds that are not `{reference}` (each recompiles the workspace with another feature set):\n{}",
        drifted.join("\n")
    );
}

/// The Quickstart uses the CLI that `make run` built, by an absolute path,
/// so the alias works from any directory; it builds nothing of its own.
#[test]
fn the_quickstart_needs_no_second_build_for_the_cli() {
    let readme = std::fs::read_to_string(workspace().join("README.md")).unwrap();
    let quickstart = readme
        .split("## Quickstart")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .unwrap();
    assert!(
        release_builds(quickstart).is_empty(),
        "the Quickstart builds again:\n{quickstart}"
    );
    let alias = quickstart
        .lines()
        .find(|line| line.trim_start().starts_with("alias corelog="))
        .expect("the Quickstart's alias");
    assert!(
        alias.contains("$PWD/target/release/corelog") || alias.contains("\"$PWD\""),
        "an alias by a relative path works only from the checkout: {alias}"
    );
}
