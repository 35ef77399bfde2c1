#!/usr/bin/env bash
# Runs the fault matrix: every backend (etcd 1 and 3 nodes, Redis, Redis
# Cluster of 3 masters with a replica each, Redlock over 3 servers,
# ZooKeeper standalone and 3 servers, PostgreSQL in its table and advisory
# layouts, MySQL on MariaDB in its table and named layouts, file), the
# broken row and four
# mutants under every fault, several seeded trials per cell, with separate
# client processes and a checking resource, and prints the verdicts and
# tables. It starts its own servers on loopback. See docs/safety.md.
#
#   scripts/fault-matrix.sh [--quick] [--json FILE] [--svg FILE] [--markdown FILE]
#                           [--backends etcd,etcd-3,redis,redis-cluster,redlock,zk,zk-3,postgres,
#                                       postgres-advisory,mysql,mysql-named,file,broken,
#                                       mutant-no-exclusion,mutant-silent-loss,
#                                       mutant-long-validity,mutant-unconfirmed-turn]
#                           [--faults 1,2,...,14] [--clients N] [--seed N] [--trials N]
#                           [--flip-trials N]
#                           [--contend lock,rwlock-write,semaphore-1,many-names]
#                           [--histories DIR]
#
# Every trial's history is judged by the project's checker and by a second
# one (porcupine-rs); a trial on which they disagree fails the run.
# --histories DIR writes each history there as JSON (ROW-FAULT-SEED.json,
# with an SVG timeline beside a failing one); see docs/safety.md,
# "Reading a history file".
#
# The full plan (no --trials): 20 trials for each cell whose verdict can
# flip (faults 2, 3, 6, 7, 8, 11, 13 on the strong-token rows), 5 for the
# others; `--trials 5 --flip-trials 20` asks for the same explicitly. It
# also runs the rows etcd-3/semaphore-1 and zk-3/rwlock-write (the same
# faults on a semaphore's permit and a read-write lock's write side) and
# etcd-3/many-names (each client holding 6 of 50 names at once, under the
# faults that stall or cut its renewals), at the ordinary trial count;
# --contend runs the listed primitives instead, and --backends
# etcd-3/many-names one such row alone.
# Faults: 1 none, 2 holder paused, 3 holder partitioned, 4 slow network,
# 5 server killed (Redis Cluster: failover), 6 leader killed, 7 member
# frozen, 8 follower cut off, 9 lock broken, 10 client killed, 11 server
# paused (the one the victim talks to), 12 every server down < TTL,
# 13 waiter paused past its TTL while a grant to it is in flight,
# 14 a waiter's turn read on a member cut off from its peers (etcd-3).
#
# --quick (CI): faults 1 and 2 everywhere, 3 and 8 on etcd-3 and zk-3, 14 on
# etcd-3, 13 on
# postgres, postgres-advisory and mysql, the broken row and the mutants on the
# faults that show them; 3 trials where a verdict can flip, else 1.
# Fails when a cell cannot run, when a verdict fails (an overlap with no
# fault; on the strong-token rows (etcd, ZooKeeper, PostgreSQL, MySQL's
# table layout) a fenced violation, a token regression, a
# vouched stale write or a late lost signal; a crashed or hung client), or
# when the broken row or a mutant goes undetected. Faults 8 and 14 on etcd need
# root and `ip` (network namespaces).
#
# Regenerate the page from the JSON:
#   target/debug/fault-matrix --from-json docs/safety.json --splice docs/safety.md
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-servers.sh >/dev/null
# The same features as the test suite, so its build is reused.
cargo build --locked --workspace --all-features --bins
# mutant-unconfirmed-turn runs a client built with a deliberate defect in
# lock-etcd, in a profile of its own so that no other build has it. Only
# a --backends list without that row skips it.
needs_mutant_client=yes
for ((i = 1; i <= $#; i++)); do
    if [[ ${!i} == --backends ]]; then
        next=$((i + 1))
        [[ ${!next:-} == *mutant-unconfirmed-turn* ]] || needs_mutant_client=no
    elif [[ ${!i} == --from-json ]]; then
        needs_mutant_client=no
    fi
done
if [[ $needs_mutant_client == yes ]]; then
    DISTLOCK_MUTANT_UNCONFIRMED_TURN=1 cargo build --locked --profile mutant -p fault-matrix \
        --bin fault-matrix-client
fi
target_dir=$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
exec "${target_dir:-target}/debug/fault-matrix" "$@"
