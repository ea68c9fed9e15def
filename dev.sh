#!/usr/bin/env bash
# The two commands a fresh machine needs (see README.md):
#   ./dev.sh demo [demo options]   a whole simulated table, live, end to end
#   ./dev.sh test [pytest options] ruff, mypy --strict, then the whole test suite
# Both create .venv (Python 3.11 or newer) and install tableside into it, editable, first.
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

# need WHAT PACKAGE CHECK...: CHECK (a command) must succeed, else install PACKAGE with apt when
# root, else say what to install.
need() {
    local what="$1" package="$2"
    shift 2
    if "$@" >/dev/null 2>&1; then
        return
    fi
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "dev.sh: installing $package ($what)" >&2
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$package" >/dev/null
    else
        echo "dev.sh: $what: sudo apt-get install $package" >&2
        exit 1
    fi
}

need_tools() {
    need "the tests start their own broker" mosquitto \
        sh -c 'command -v mosquitto || [ -x /usr/sbin/mosquitto ]'
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
        .venv/bin/mypy tests bench
        # pytest exits 5 when it ran no test; that fails here like any other non-zero status.
        # In parallel (pytest-xdist): the suite mostly waits on brokers, daemons and devices,
        # and every test starts its own on free ports. TABLESIDE_TEST_WORKERS=0 runs it serially.
        exec .venv/bin/pytest -n "${TABLESIDE_TEST_WORKERS:-4}" "$@"
        ;;
    *)
        echo "usage: ./dev.sh demo [options] | ./dev.sh test [pytest options]" >&2
        exit 2
        ;;
esac
