#!/usr/bin/env bash
# The pure code's contract (the pure crates' docs): no I/O, clock, process,
# thread or async runtime, so that the broker's shells and the simulator
# drive it alike. Checked by `make lint` (PURE_PATHS in the Makefile).
#
# Usage: scripts/purity.sh PATH...
#   PATH is a pure crate's folder (e.g. wire): its dependency tree must hold
#   no async runtime and its code must name no I/O; or a file or folder
#   inside another crate (a pure module of an I/O crate, e.g. a storage
#   planner or codec): its code must name no I/O.
#
# The code check is scripts/purity (corelog-purity): it parses each file and
# leaves out exactly the `#[cfg(test)]` items and the files only they
# declare, so every other item is checked wherever it is in its file.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ $# -eq 0 ]; then
    echo "usage: scripts/purity.sh PATH...   (see the Makefile's PURE_PATHS)" >&2
    exit 2
fi

checker() {
    cargo run -q -p corelog-purity -- "$@"
}

# Self-test: a fixture that names std::fs after its test module must be
# caught (the line-based check this replaced stopped at the first
# `#[cfg(test)]` of each file and passed it).
fixture=scripts/purity/fixtures/io_after_tests
if found=$(checker "$fixture" 2>&1) || ! grep -q "^$fixture/src/lib.rs:19: " <<<"$found"; then
    echo "purity: the checker did not flag line 19 of $fixture/src/lib.rs (std::fs after the test module):" >&2
    echo "$found" >&2
    exit 1
fi

failed=0
for path in "$@"; do
    [ -f "$path/Cargo.toml" ] || continue
    crate=$(sed -n 's/^name = "\(.*\)"/\1/p' "$path/Cargo.toml" | head -1)
    if cargo tree -p "$crate" -e normal --prefix none | grep -qE '^(glommio|tokio|async-std|smol) '; then
        echo "$crate must not depend on an async runtime:"
        cargo tree -p "$crate" -e normal -i glommio 2>/dev/null || true
        failed=1
    fi
done
checker "$@" || failed=1
if [ "$failed" -ne 0 ]; then
    exit 1
fi
echo "pure: $* (no async runtime, no I/O, clock, process or thread outside tests)"
