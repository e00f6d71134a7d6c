#!/usr/bin/env bash
# Runs every test of Shoal on a fresh machine: formatting, lints, the Rust suites (engine,
# store conformance, HTTP scenarios, kill -9 restart) and the official Taskcluster Python
# client against a real server. Installs what it needs; needs no running services.
set -euo pipefail
cd "$(dirname "$0")/.."

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/shoal-target}"
venv="${SHOAL_TEST_VENV:-$HOME/.cache/shoal-test-venv}"

echo "== format and lints"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings

echo "== rust tests"
cargo test --workspace --locked

echo "== official Taskcluster Python client against a real server"
cargo build --locked --bin shoal
if [ ! -x "$venv/bin/pytest" ] || ! "$venv/bin/pip" freeze 2>/dev/null | grep -q '^taskcluster==113.2.0$'; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check -r tests/python/requirements.txt
fi
SHOAL_BIN="$CARGO_TARGET_DIR/debug/shoal" "$venv/bin/pytest" -q tests/python
