#!/usr/bin/env bash
# Run the test suite while every core is busy, as on a loaded CI machine.
#
# CI runs on a shared 2-core machine; a test that decides from how fast the machine ran passes on
# a quiet laptop and fails there at random. This script makes that load on purpose: it starts one
# busy process per core (a Python `while True: pass`, at the tests' own priority), runs the tests,
# stops the busy processes on any exit (normal, error, Ctrl-C, SIGTERM) and exits with the tests'
# status.
#
#   scripts/test-under-load.sh                                   # the README's test command: python -m pytest
#   scripts/test-under-load.sh --ignore=tests/integration -q -p no:cacheprovider
#   scripts/test-under-load.sh -m vllm tests/integration        # arguments go to pytest unchanged
#
# Environment:
#   PYTHON        the interpreter that runs pytest (default: python, as in the README; else python3)
#   LOAD_PROCS    how many busy processes (default: the number of cores, from nproc)
#   LOAD_PYTHON   the interpreter of the busy processes (default: python3)
set -euo pipefail
cd "$(dirname "$0")/.."

python=${PYTHON:-$(command -v python || command -v python3)}
load_python=${LOAD_PYTHON:-python3}
procs=${LOAD_PROCS:-$(nproc 2>/dev/null || echo 2)}

busy=()
stop_load() {
    local pid
    for pid in "${busy[@]}"; do
        kill "$pid" 2>/dev/null || true
    done
    for pid in "${busy[@]}"; do
        wait "$pid" 2>/dev/null || true
    done
    busy=()
}
trap stop_load EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

for _ in $(seq "$procs"); do
    "$load_python" -c 'while True: pass' &
    busy+=("$!")
done
echo "test-under-load: $procs busy process(es) (pids ${busy[*]}) on $(nproc 2>/dev/null || echo '?') core(s)" >&2

status=0
"$python" -m pytest "$@" || status=$?
echo "test-under-load: pytest exited $status" >&2
exit "$status"
