#!/usr/bin/env bash
# Pins the public API of distlock-core and the distlock facade: lists every
# public item from rustdoc's JSON (scripts/public-api.py) and compares it
# with the snapshot in scripts/public-api/. A difference fails, so that
# nothing implementor-only leaks out of `distlock_core::raw` by accident.
#
#   scripts/public-api.sh           check
#   scripts/public-api.sh --bless   write the snapshots anew
#
# rustdoc's JSON output is unstable: RUSTC_BOOTSTRAP lets the stable
# toolchain write it. Its own target directory keeps it from invalidating
# the test build.
set -euo pipefail
cd "$(dirname "$0")/.."
target=${CARGO_TARGET_DIR:-target}/public-api
status=0
for spec in "distlock-core:distlock_core:" "distlock:distlock:full"; do
    IFS=: read -r package crate features <<<"$spec"
    RUSTC_BOOTSTRAP=1 RUSTDOCFLAGS="-Z unstable-options --output-format json" \
        cargo doc --quiet --locked --no-deps -p "$package" --features "$features" --target-dir "$target"
    listed=$(python3 scripts/public-api.py "$target/doc/$crate.json")
    snapshot=scripts/public-api/$package.txt
    if [ "${1:-}" = --bless ]; then
        printf '%s\n' "$listed" >"$snapshot"
        echo "wrote $snapshot"
    elif ! diff -u "$snapshot" <(printf '%s\n' "$listed"); then
        echo "error: the public API of $package differs from $snapshot (lines above)." >&2
        echo "If the change is intended, run scripts/public-api.sh --bless and commit the snapshot." >&2
        status=1
    fi
done
exit $status
