#!/usr/bin/env bash
# The whole test suite against real servers, from a fresh machine:
# installs what is missing (Debian packages), then runs every test of every
# crate with every backend compiled in. The tests start their own etcd, Redis
# and ZooKeeper servers on loopback ports with temporary data directories.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-servers.sh

echo "==> cargo test --workspace --all-features"
cargo test --workspace --all-features --locked "$@"

echo "==> scripts/fault-matrix.sh --quick"
matrix_json=$(mktemp /tmp/distlock-fault-matrix.XXXX.json)
trap 'rm -f "$matrix_json"' EXIT
scripts/fault-matrix.sh --quick --json "$matrix_json"
