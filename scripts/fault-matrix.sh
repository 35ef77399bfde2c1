#!/usr/bin/env bash
# Runs the fault matrix: every backend (etcd 1 and 3 nodes, Redis, Redis
# Cluster of 3 masters with a replica each, Redlock over 3 servers,
# ZooKeeper standalone and 3 servers, file) under every fault, with
# separate client processes and a checking resource, and prints the table.
# It starts its own servers on loopback. See docs/safety.md.
#
#   scripts/fault-matrix.sh [--quick] [--json FILE] [--svg FILE] [--markdown FILE]
#                           [--backends etcd,etcd-3,redis,redis-cluster,redlock,zk,zk-3,file,broken]
#                           [--faults 1,2,...,9] [--clients N]
#                           [--contend lock,rwlock-write,semaphore-1]
#
# --quick: faults 1, 2 and 5 on every backend with short windows (CI).
# Fails when a cell cannot run, or when an etcd or ZooKeeper cell shows a
# fenced violation or a token regression. Fault 8 on etcd needs root and
# `ip` (network namespaces).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-servers.sh >/dev/null
# The same features as the test suite, so its build is reused.
cargo build --locked --workspace --all-features --bins
target_dir=$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
exec "${target_dir:-target}/debug/fault-matrix" "$@"
