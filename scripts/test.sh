#!/usr/bin/env bash
# Runs every test of Shoal on a fresh machine: formatting, lints, the Rust suites (engine,
# store conformance, HTTP scenarios, kill -9 restart, events through a private RabbitMQ) and
# the official Taskcluster Python client and the web UI in headless Chromium against a real
# server. Installs what it needs (RabbitMQ, PostgreSQL, Chromium and ChromeDriver from Debian's
# packages, moto's S3 server and taskgraph from PyPI; the tests start and stop their own broker, database
# clusters, S3 server and browser on 127.0.0.1); needs no running services.
set -euo pipefail
cd "$(dirname "$0")/.."

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/shoal-target}"
venv="${SHOAL_TEST_VENV:-$HOME/.cache/shoal-test-venv}"

echo "== format and lints"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings

if [ ! -x /usr/lib/rabbitmq/bin/rabbitmq-server ]; then
    echo "== installing rabbitmq-server (Debian package; not started as a service)"
    sudo=""
    if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
    $sudo apt-get update -qq
    # If the package starts a system-wide broker, it is left alone: the tests use their own ports.
    DEBIAN_FRONTEND=noninteractive RUNLEVEL=1 $sudo apt-get install -y -qq --no-install-recommends rabbitmq-server > /dev/null
fi

if ! ls /usr/lib/postgresql/*/bin/pg_ctl > /dev/null 2>&1; then
    echo "== installing postgresql (Debian package; not started as a service)"
    sudo=""
    if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive RUNLEVEL=1 $sudo apt-get install -y -qq --no-install-recommends postgresql > /dev/null
fi

if ! command -v bwrap > /dev/null; then
    echo "== installing bubblewrap (Debian package; the worker's sandbox)"
    sudo=""
    if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends bubblewrap > /dev/null
fi

if [ ! -x /bin/busybox ] || [ ! -x /usr/bin/docker-registry ] || [ ! -x /usr/bin/zstd ]; then
    echo "== installing busybox-static, docker-registry and zstd (Debian packages; the images tests build, serve and compress)"
    sudo=""
    if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends busybox-static docker-registry zstd > /dev/null
    # The package starts a registry on :5000; the tests start their own on loopback.
    ($sudo systemctl disable --now docker-registry || $sudo service docker-registry stop) > /dev/null 2>&1 || true
fi

if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; then
    echo "== installing chromium and chromium-driver (Debian packages, for the browser tests)"
    sudo=""
    if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends chromium chromium-driver > /dev/null
fi

echo "== Python packages (PyPI): Taskcluster's client and the browser driver, and moto's S3 server"
# (Re)install when a pinned requirement is missing from the venv (extras are not in pip freeze).
missing=$(comm -23 <(grep -v '^#' tests/python/requirements.txt | sed 's/\[[a-z,]*\]//' | sort) \
    <("$venv/bin/pip" freeze 2>/dev/null | sort))
if [ ! -x "$venv/bin/pytest" ] || [ -n "$missing" ]; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check -r tests/python/requirements.txt
fi
# The blob suite starts its own S3-compatible server on 127.0.0.1 from this program.
export SHOAL_MOTO_SERVER="$venv/bin/moto_server"

# The example CI project's tasks run taskgraph from here (the worker shows it to them with
# --sandbox-path): the system's Python, so a sandboxed task can run it, readable by every user.
taskgraph_venv=/var/tmp/shoal-taskgraph
if ! "$taskgraph_venv/bin/pip" freeze 2>/dev/null | grep -qx 'taskcluster-taskgraph==24.5.1'; then
    echo "== taskgraph (PyPI) for the example CI project, in $taskgraph_venv"
    if ! /usr/bin/python3 -c 'import ensurepip' 2>/dev/null; then
        sudo=""
        if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
        $sudo apt-get update -qq
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends python3-venv > /dev/null
    fi
    rm -rf "$taskgraph_venv"
    /usr/bin/python3 -m venv "$taskgraph_venv"
    "$taskgraph_venv/bin/pip" install --quiet --disable-pip-version-check taskcluster-taskgraph==24.5.1
    chmod -R a+rX "$taskgraph_venv"
fi

echo "== rust tests"
cargo test --workspace --locked

echo "== HTTP scenarios on PostgreSQL"
SHOAL_TEST_BACKEND=postgres cargo test --locked -p shoal-api --test it

echo "== official Taskcluster Python client and the web UI in headless Chromium, against a real server"
cargo build --locked --bin shoal
SHOAL_BIN="$CARGO_TARGET_DIR/debug/shoal" "$venv/bin/pytest" -q tests/python
