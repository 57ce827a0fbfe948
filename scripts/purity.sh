#!/usr/bin/env bash
# The pure crates' contract (their crate docs): no async runtime in their
# dependency tree, and no I/O, clock, process or thread in their code, so
# that the broker's shells and the simulator drive them alike. Checked by
# `make lint`; each crate's test code (from a file's first `#[cfg(test)]`
# on, and files only tests compile) may do what it likes.
#
# Usage: scripts/purity.sh CRATE_DIR...   (a crate's folder, e.g. wire)
set -euo pipefail
cd "$(dirname "$0")/.."

# What pure code never names.
forbidden='std::fs|std::net|std::process|std::thread|Instant::now|SystemTime::now|tokio|glommio'
# Test-only modules kept in their own files.
test_only='wire/src/message/fuzz_seeds.rs|wire/src/message/test_support.rs'

failed=0
for dir in "$@"; do
    crate=$(sed -n 's/^name = "\(.*\)"/\1/p' "$dir/Cargo.toml" | head -1)
    if cargo tree -p "$crate" -e normal --prefix none | grep -qE '^(glommio|tokio|async-std|smol) '; then
        echo "$crate must not depend on an async runtime:"
        cargo tree -p "$crate" -e normal -i glommio 2>/dev/null || true
        failed=1
    fi
    while IFS= read -r file; do
        if [[ $file =~ ^($test_only)$ || $file == */tests/* || $file == *_tests.rs || $file == */tests.rs ]]; then
            continue
        fi
        # Lines before the file's test module, numbered, that name I/O.
        hits=$(awk '/^[[:space:]]*#\[cfg\(test\)\]/ { exit } { print FILENAME ":" FNR ": " $0 }' "$file" |
            grep -E "$forbidden" | grep -vE '^[^:]*:[0-9]+: *//' || true)
        if [ -n "$hits" ]; then
            echo "$crate is pure (no I/O, clock, process or thread outside tests), but:"
            echo "$hits"
            failed=1
        fi
    done < <(find "$dir/src" -name '*.rs' | sort)
done
if [ "$failed" -ne 0 ]; then
    exit 1
fi
echo "pure crates: $* (no async runtime, no I/O, clock, process or thread)"
