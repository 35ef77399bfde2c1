#!/usr/bin/env bash
# Runs every test whose name matches FILTER N times and counts failures,
# so that a timing defect cannot pass as a flake: a test that fails once
# in N has found something.
#
#   scripts/stress.sh [FILTER] [N]
#
# FILTER is an extended regular expression matched against
# `package/target::test_name` (for example `lock-core/renewer::` or
# `lease|renew|lost`); default: the lease, renewal, clock and lost-signal
# tests of every crate. N defaults to 30. Each run is one test alone, in its
# package's directory, as `cargo test` runs it. Prints the failures of each
# test (and the first failure's output), and exits 1 if any test failed.
#
# Environment: STRESS_LIST=1 only lists the matching tests; CARGO_ARGS (default `--workspace --all-features`) chooses
# what is built; STRESS_LOG keeps every failing run's output in that
# directory (default: a temporary one, removed at exit).
set -euo pipefail
cd "$(dirname "$0")/.."

# `lease` but not `release`.
filter=${1:-'(^|[^e])lease|renew|lost|clock|validity|deadline|suspend|health|runtime'}
runs=${2:-30}
read -r -a cargo_args <<<"${CARGO_ARGS:---workspace --all-features}"

log_dir=${STRESS_LOG:-$(mktemp -d /tmp/distlock-stress.XXXX)}
[ -n "${STRESS_LOG:-}" ] || trap 'rm -rf "$log_dir"' EXIT
mkdir -p "$log_dir"

scripts/install-servers.sh >/dev/null

echo "==> building tests (cargo test ${cargo_args[*]} --no-run)"
# Each test binary as `package<TAB>target<TAB>package dir<TAB>executable`.
mapfile -t binaries < <(
    cargo test "${cargo_args[@]}" --locked --no-run --message-format=json 2>/dev/null |
        python3 -c '
import json, os, sys
for line in sys.stdin:
    msg = json.loads(line)
    if msg.get("reason") != "compiler-artifact" or not msg.get("executable"):
        continue
    if not msg.get("profile", {}).get("test"):
        continue
    source, _, fragment = msg["package_id"].partition("#")
    package = fragment.split("@")[0] if "@" in fragment else source.rstrip("/").rsplit("/", 1)[-1]
    print("\t".join([package, msg["target"]["name"], os.path.dirname(msg["manifest_path"]), msg["executable"]]))
'
)
[ ${#binaries[@]} -gt 0 ] || { echo "error: no test binaries were built" >&2; exit 2; }

tests=()
for entry in "${binaries[@]}"; do
    IFS=$'\t' read -r package target dir exe <<<"$entry"
    while IFS= read -r name; do
        id="$package/$target::$name"
        if [[ $id =~ $filter ]]; then
            tests+=("$dir"$'\t'"$exe"$'\t'"$name"$'\t'"$id")
        fi
    done < <(cd "$dir" && "$exe" --list --format terse 2>/dev/null | sed -n 's/: test$//p')
done
[ ${#tests[@]} -gt 0 ] || { echo "error: no test matches /$filter/" >&2; exit 2; }

if [ -n "${STRESS_LIST:-}" ]; then
    printf '%s\n' "${tests[@]}" | cut -f4
    exit 0
fi
echo "==> ${#tests[@]} tests matching /$filter/, $runs runs each"
failed_tests=0
for entry in "${tests[@]}"; do
    IFS=$'\t' read -r dir exe name id <<<"$entry"
    failures=0
    start=$(date +%s)
    for run in $(seq 1 "$runs"); do
        out="$log_dir/$(echo "$id" | tr '/:' '__').$run.log"
        if (cd "$dir" && "$exe" --exact "$name" --test-threads 1) >"$out" 2>&1; then
            rm -f "$out"
        else
            failures=$((failures + 1))
        fi
    done
    printf '%3d/%d failed  %4ds  %s\n' "$failures" "$runs" "$(( $(date +%s) - start ))" "$id"
    if [ "$failures" -gt 0 ]; then
        failed_tests=$((failed_tests + 1))
        first=$(ls "$log_dir"/"$(echo "$id" | tr '/:' '__')".*.log | head -n 1)
        sed -n '/panicked at/,+6p' "$first" | head -n 12 | sed 's/^/      /'
    fi
done

if [ "$failed_tests" -gt 0 ]; then
    echo "==> $failed_tests of ${#tests[@]} tests failed at least once"
    exit 1
fi
echo "==> all ${#tests[@]} tests passed $runs of $runs runs"
