#!/usr/bin/env bash
# Mutation check of the lease and conformance tests: breaks, one at a time,
# an owner check or a validity bound the backends rely on, runs the tests
# that should notice, and says whether they did. A mutant that survives is
# a hole in the tests (or a check the code does not need; say why).
#
#   scripts/mutants.sh [NAME...]
#
# Runs every mutant below, or only those named. Each mutant is a small perl
# substitution applied to a copy of this checkout's files (as they are,
# committed or not; ignored ones left out) in a temporary directory; the original file is restored before
# the next one. Prints `caught` or `SURVIVED` per mutant, and exits 1 if
# any survived, failed to apply or failed to build.
#
# First, each test set the chosen mutants use runs once unmutated: a set
# that fails there makes its mutants' results meaningless, and the script
# stops (MUTANTS_BASELINE=0 skips this).
#
# Environment: MUTANTS_TARGET_DIR is the cargo target directory (default:
# target/mutants, seeded from target/debug so dependencies are not built
# again; never target/ itself: cargo names a workspace crate's artifacts
# the same in every copy of the workspace, so a mutated build would replace
# this checkout's); MUTANTS_KEEP=1
# keeps the copy and the logs; MUTANTS_LIST=1 only lists the mutants.
# Not part of CI: it runs real servers and takes a while (each mutant
# rebuilds one crate and runs its conformance and lease tests).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

names=() files=() edits=() tests=() descriptions=()

# mutant NAME FILE PERL-SUBSTITUTION TEST-ARGS DESCRIPTION
# (in the substitution, \x27 is a single quote)
mutant() {
    names+=("$1") files+=("$2") edits+=("$3") tests+=("$4") descriptions+=("$5")
}

redis_tests="-p distlock-redis --test conformance --test lease_lifecycle"
mutant redis-renew-owner lock-redis/src/scripts.rs \
    's/(const RENEW: &str = r#"\n)if redis\.call\(\x27GET\x27, KEYS\[1\]\) ~= ARGV\[1\] then/${1}if redis.call(\x27EXISTS\x27, KEYS[1]) == 0 then/' \
    "$redis_tests" \
    "Redis RENEW checks only that the lock key exists, not that it is ours"
mutant redis-release-owner lock-redis/src/scripts.rs \
    's/(local freed = 0\n)if redis\.call\(\x27GET\x27, KEYS\[1\]\) == ARGV\[1\] then/${1}if redis.call(\x27EXISTS\x27, KEYS[1]) == 1 then/' \
    "$redis_tests" \
    "Redis RELEASE deletes the lock key whoever owns it"

mutant core-validity-ttl lock-core/src/validity.rs \
    's/sent \+ ttl\.saturating_sub\(drift_allowance\(ttl\)\)/sent + ttl + ttl.saturating_sub(drift_allowance(ttl))/' \
    "-p distlock-core --features testing --lib --test conformance --test lease_lifecycle" \
    "distlock-core's validity runs one TTL past the server's lease"

etcd_tests="-p distlock-etcd --test conformance --test lease_loss --test late_writes --test keepalive"
mutant etcd-release-owner lock-etcd/src/held.rs \
    's/\n\s*\.when\(\[self\.is_ours\(\)\]\)\n(\s*\.and_then\(\[TxnOp::delete)/\n$1/' \
    "$etcd_tests" \
    "etcd release deletes the guard's key without comparing its create revision"
# Survives: every way an etcd lease ends deletes the lock key attached to
# it, and the guard's watch on that key fires the lost signal on its own;
# the TTL-0 check is a second line behind the watch, which only a test that
# loses the watch's delete event while keepalives still flow could reach.
mutant etcd-keepalive-gone lock-etcd/src/keepalive.rs \
    's/Ok\(ttl\) if ttl > 0 => return Ok\(\(\)\),/Ok(_) => return Ok(()),/' \
    "$etcd_tests" \
    "etcd keepalive takes a TTL-0 answer (lease not found) as renewed"

# Survives: the node's watch fires the lost signal as soon as the session
# sees the delete (ZooKeeper sends the watch event before the reply to any
# later request of the session), so a renewal meets a deleted node only in
# a narrow race with that event; the check is a second line behind it.
mutant zk-renew-node-gone lock-zk/src/held.rs \
    's/Ok\(None\) => Err\(self\.node_deleted\(&action\)\),/Ok(None) => Ok(()),/' \
    "-p distlock-zk --test conformance --test lapsed" \
    "ZooKeeper renewal takes a deleted node as still ours"

pg_tests="-p distlock-postgres --test conformance --test lease_lifecycle"
mutant pg-renew-owner lock-postgres/src/sql.rs \
    's/WHERE e\.owner = \$1::text::uuid AND e\.granted\n(\s*)AND e\.expires_at/WHERE e.granted\n${1}AND e.expires_at/' \
    "$pg_tests" \
    "PostgreSQL renew extends every live grant, not only the caller's"
mutant pg-renew-revives lock-postgres/src/sql.rs \
    's/(WHERE e\.owner = \$1::text::uuid AND e\.granted)\n\s*AND e\.expires_at > clock_timestamp\(\)/$1/' \
    "$pg_tests" \
    "PostgreSQL renew revives a lease that already ran out"
mutant pg-release-liveness lock-postgres/src/schema.rs \
    's/RETURNING e\.granted AND e\.expires_at > clock_timestamp\(\), e\.value IS NOT NULL/RETURNING true, e.value IS NOT NULL/' \
    "$pg_tests" \
    "PostgreSQL release reports an expired or waiting entry as released"

mutant file-owner lock-file/src/store.rs \
    's/fn holds\(&self, holder: &str, now: &Now\) -> bool \{\n(\s*)self\.is_held_by\(holder, now\)/fn holds(&self, holder: &str, now: &Now) -> bool {\n${1}let _ = holder;\n${1}self.live_holder(now).is_some()/' \
    "-p distlock-file --features testing --test conformance --test behaviour" \
    "file renew and release of a mutex check that someone holds it, not who"

if [ "${MUTANTS_LIST:-}" = 1 ]; then
    for i in "${!names[@]}"; do
        printf '%-22s %s\n' "${names[$i]}" "${descriptions[$i]}"
    done
    exit 0
fi

chosen=()
if [ $# -eq 0 ]; then
    chosen=("${!names[@]}")
else
    for want in "$@"; do
        found=
        for i in "${!names[@]}"; do
            [ "${names[$i]}" = "$want" ] && chosen+=("$i") && found=1
        done
        [ -n "$found" ] || { echo "no mutant named $want (MUTANTS_LIST=1 lists them)" >&2; exit 2; }
    done
fi

scripts/install-servers.sh >/dev/null

work=$(mktemp -d /tmp/distlock-mutants.XXXX)
if [ "${MUTANTS_KEEP:-}" = 1 ]; then
    echo "==> copy and logs kept in $work"
else
    trap 'rm -rf "$work"' EXIT
fi
mkdir -p "$work/tree" "$work/logs"
git ls-files -z --cached --others --exclude-standard | tar --null -T - -cf - | tar -xf - -C "$work/tree"
export CARGO_TARGET_DIR=${MUTANTS_TARGET_DIR:-$root/target/mutants}
if [ ! -d "$CARGO_TARGET_DIR/debug" ] && [ -d "$root/target/debug" ]; then
    echo "==> seeding $CARGO_TARGET_DIR from target/debug"
    mkdir -p "$CARGO_TARGET_DIR"
    cp -a "$root/target/debug" "$CARGO_TARGET_DIR/"
fi

# run_tests LOG ARGS...: builds, then runs; 0 passed, 1 failed, 2 build failed.
run_tests() {
    local log=$1
    shift
    if ! (cd "$work/tree" && cargo test --locked "$@" --no-run) >"$log" 2>&1; then
        return 2
    fi
    (cd "$work/tree" && cargo test --locked "$@") >>"$log" 2>&1 || return 1
}

if [ "${MUTANTS_BASELINE:-1}" = 1 ]; then
    declare -A baseline_done=()
    for i in "${chosen[@]}"; do
        set_args=${tests[$i]}
        [ -z "${baseline_done[$set_args]:-}" ] || continue
        baseline_done[$set_args]=1
        echo "==> baseline: cargo test $set_args"
        log="$work/logs/baseline-${names[$i]}.log"
        # shellcheck disable=SC2086
        if ! run_tests "$log" $set_args; then
            echo "baseline failed (unmutated tree); see $log:" >&2
            grep -E '^test .*FAILED|panicked|^error' "$log" | head -20 >&2 || true
            MUTANTS_KEEP=1
            trap - EXIT
            exit 1
        fi
    done
fi

survived=0
results=()
for i in "${chosen[@]}"; do
    name=${names[$i]} file=${files[$i]}
    echo "==> $name: ${descriptions[$i]}"
    cp "$root/$file" "$work/tree/$file"
    perl -0pi -e "${edits[$i]}" "$work/tree/$file"
    if cmp -s "$root/$file" "$work/tree/$file"; then
        verdict="NOT APPLIED"
        survived=1
    else
        log="$work/logs/$name.log"
        set +e
        # shellcheck disable=SC2086
        run_tests "$log" ${tests[$i]}
        status=$?
        set -e
        case $status in
        0) verdict=SURVIVED survived=1 ;;
        1)
            verdict=caught
            failed=$(grep -E '^test .* FAILED$' "$log" | sed -E 's/^test (.*) \.\.\. FAILED$/\1/' | tr '\n' ' ')
            [ -z "$failed" ] || verdict="caught by: $failed"
            ;;
        *) verdict="BUILD FAILED ($log)" survived=1 ;;
        esac
    fi
    cp "$root/$file" "$work/tree/$file"
    echo "    $verdict"
    results+=("$(printf '%-22s %s' "$name" "$verdict")")
done

echo
echo "==> mutants"
printf '%s\n' "${results[@]}"
exit "$survived"
