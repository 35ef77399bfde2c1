#!/usr/bin/env bash
# The whole test suite against real servers, from a fresh machine:
# installs what is missing (Debian packages), then runs every test of every
# crate with every backend compiled in. The tests start their own etcd, Redis
# and ZooKeeper servers on loopback ports with temporary data directories.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-servers.sh

# Static checks first: they fail in minutes, the tests take a quarter hour.
echo "==> cargo fmt --all --check"
cargo fmt --all --check

echo "==> cargo clippy --workspace --all-targets --all-features"
cargo clippy --workspace --all-targets --all-features --locked -- -D warnings

echo "==> cargo doc --workspace --no-deps --all-features (warnings are errors)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --all-features --locked

echo "==> scripts/public-api.sh (the public API matches its snapshot)"
scripts/public-api.sh

# Each feature of the facade on its own, and each library crate alone, so
# that a missing feature gate or dependency does not hide behind
# --all-features unification.
for features in "" etcd redis zk postgres mysql full testing; do
    echo "==> cargo check -p distlock --no-default-features --features '$features'"
    cargo check -p distlock --no-default-features --features "$features" --locked
done
for crate in distlock-core distlock-file distlock-etcd distlock-redis distlock-zk distlock-postgres distlock-mysql distlock-workload distlock-testkit; do
    echo "==> cargo check -p $crate"
    cargo check -p "$crate" --locked
done
echo "==> cargo check -p distlock-cli --no-default-features"
cargo check -p distlock-cli --no-default-features --locked

# The minimum supported Rust version (`rust-version` in Cargo.toml) is
# checked with that toolchain, installed by rustup if missing: the library
# and binary code every user compiles (tests and benches are ours alone).
msrv=$(sed -n 's/^rust-version = "\(.*\)"$/\1/p' Cargo.toml)
echo "==> cargo +$msrv check --workspace --all-features --lib --bins (the MSRV)"
rustup toolchain install "$msrv" --profile minimal --no-self-update >/dev/null
cargo +"$msrv" check --workspace --all-features --locked --lib --bins

# Every crate packages as `cargo publish` would upload it
# (tests/release_metadata.rs checks the publishable ones' metadata).
# Offline, from the index cache the builds above filled, and without
# building each package again, which verifying takes minutes for.
echo "==> cargo package --workspace --no-verify"
cargo package --workspace --allow-dirty --no-verify --offline

echo "==> docker/check-offline.py (docker/compose.yml, checked without Docker)"
python3 docker/check-offline.py

echo "==> cargo test --workspace --all-features"
cargo test --workspace --all-features --locked "$@"

echo "==> scripts/fault-matrix.sh --quick"
matrix_json=$(mktemp /tmp/distlock-fault-matrix.XXXX.json)
trap 'rm -f "$matrix_json"' EXIT
scripts/fault-matrix.sh --quick --json "$matrix_json"
