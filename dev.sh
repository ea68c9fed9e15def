#!/usr/bin/env bash
# The two commands a fresh machine needs (see README.md):
#   ./dev.sh demo [demo options]   a whole simulated table, live, end to end
#   ./dev.sh test [pytest options] ruff, mypy --strict, then the whole test suite
# and, for a controller:
#   ./dev.sh deb [--out DIR]       the Debian package, into dist/ (systemd/README.md)
# Each creates .venv (Python 3.11 or newer) and installs tableside into it, editable, first.
set -euo pipefail
cd "$(dirname "$0")"

pick_python() {
    for candidate in "${PYTHON:-}" python3 python3.13 python3.12 python3.11; do
        [ -n "$candidate" ] || continue
        if command -v "$candidate" >/dev/null 2>&1 &&
            "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
            echo "$candidate"
            return
        fi
    done
    echo "dev.sh: need Python 3.11 or newer (set PYTHON=/path/to/python3.11)" >&2
    exit 1
}

if [ ! -x .venv/bin/python ]; then
    "$(pick_python)" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet --editable '.[test,demo,floor]'

# apt_install WHAT PACKAGE CHECK...: true when CHECK (a command) succeeds, or once PACKAGE is
# installed with apt (as root, saying so); false, having said how to install it, otherwise.
apt_install() {
    local what="$1" package="$2"
    shift 2
    if "$@" >/dev/null 2>&1; then
        return 0
    fi
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "dev.sh: installing $package ($what)" >&2
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$package" \
            >/dev/null && return 0
        echo "dev.sh: $package did not install ($what)" >&2
    else
        echo "dev.sh: $what: sudo apt-get install $package" >&2
    fi
    return 1
}

# need WHAT PACKAGE CHECK...: the tests cannot run without it
need() {
    apt_install "$@" || exit 1
}

# want WHAT PACKAGE CHECK...: the tests that use it skip, saying why, without it
want() {
    apt_install "$@" || echo "dev.sh: without it, those tests skip" >&2
}

# The broker matrix (tests/test_broker_matrix.py) runs aedes on Node.js (20 or newer), the
# version tests/aedes/package-lock.json pins, installed into tests/aedes; without node and npm
# (or the registry) its aedes tests skip, saying why.
want_aedes() {
    if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
        echo "dev.sh: the broker matrix's aedes needs Node.js 20+ with npm (its tests skip)" >&2
        return
    fi
    # installed already, at the pinned version: nothing to do
    if node -e 'const pin = require("./tests/aedes/package.json").dependencies.aedes;
        const has = require("./tests/aedes/node_modules/aedes/package.json").version;
        process.exit(has === pin ? 0 : 1)' >/dev/null 2>&1; then
        return
    fi
    echo "dev.sh: installing aedes into tests/aedes (the broker matrix)" >&2
    npm ci --prefix tests/aedes --no-audit --no-fund --silent ||
        echo "dev.sh: npm could not install aedes: its tests skip" >&2
}

need_tools() {
    need "the tests start their own broker" mosquitto \
        sh -c 'command -v mosquitto || [ -x /usr/sbin/mosquitto ]'
    # the broker matrix starts its own RabbitMQ node and NATS server on free ports
    # (tests/brokers.py), never the machine's
    want "the broker matrix runs RabbitMQ's MQTT plugin" rabbitmq-server \
        sh -c 'ls /usr/lib/rabbitmq/lib/rabbitmq_server-*/plugins/rabbitmq_mqtt-*'
    want "the broker matrix runs NATS's MQTT" nats-server \
        sh -c 'command -v nats-server || [ -x /usr/sbin/nats-server ]'
    want_aedes
    # the floor's store tests start their own server from Debian's initdb and pg_ctl, in a
    # temporary directory on a free port (tests/postgres.py), never a cluster of the machine's
    need "the floor's store tests start their own server" postgresql \
        sh -c 'ls /usr/lib/postgresql/*/bin/initdb'
    # the floor's browser tests drive Debian's chromium through Playwright (no browser download)
    need "the floor's browser tests drive it headless" chromium \
        sh -c 'command -v chromium || [ -x /usr/bin/chromium ]'
}

command="${1:-}"
[ $# -gt 0 ] && shift
case "$command" in
    demo)
        exec .venv/bin/tableside demo --rounds 10 "$@"
        ;;
    test)
        need_tools
        .venv/bin/ruff check .
        .venv/bin/ruff format --check .
        .venv/bin/mypy -p tableside
        .venv/bin/mypy tests bench deb
        # pytest exits 5 when it ran no test; that fails here like any other non-zero status.
        # In parallel (pytest-xdist): the suite mostly waits on brokers, daemons and devices,
        # and every test starts its own on free ports. TABLESIDE_TEST_WORKERS=0 runs it serially.
        # loadgroup: the tests marked xdist_group (the broker matrix: one group per broker) run
        # on one worker each, which starts that broker once; the others are spread as usual.
        exec .venv/bin/pytest -n "${TABLESIDE_TEST_WORKERS:-4}" --dist loadgroup "$@"
        ;;
    deb)
        # tableside and its runtime dependencies as wheels, at the versions in .venv, in a .deb
        # whose install needs no network (deb/build_deb.py says how)
        exec .venv/bin/python deb/build_deb.py "$@"
        ;;
    *)
        echo "usage: ./dev.sh demo [options] | ./dev.sh test [pytest options] | ./dev.sh deb [--out DIR]" >&2
        exit 2
        ;;
esac
