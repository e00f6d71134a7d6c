#!/usr/bin/env bash
# Builds Shoal in release mode and runs every benchmark against a real server process over
# loopback, on durable storage under $TMPDIR. Pass a subcommand to run one (see --help).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/shoal-target}"
cargo build --release --locked --bins
exec "$CARGO_TARGET_DIR/release/shoal-bench" "$@"
