#!/usr/bin/env bash
# Run the test suite while every core is busy, as on a loaded CI machine.
#
# CI runs on a shared 2-core machine; a test that decides from how fast the machine ran passes on
# a quiet laptop and fails there at random. This script makes that load on purpose: it starts one
# busy process per core (a pure-Python loop, at the tests' own priority), runs the tests, stops the
# busy processes however it ends (normally, on an error, on Ctrl-C or SIGTERM, which are passed on
# to pytest) and exits with pytest's status. A busy process also ends by itself if this script is
# killed outright (SIGKILL), so none is ever left spinning.
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
set -m  # each child in its own process group: Ctrl-C reaches this script, which passes it on to pytest
cd "$(dirname "$0")/.."

python=${PYTHON:-$(command -v python || command -v python3)}
load_python=${LOAD_PYTHON:-python3}
procs=${LOAD_PROCS:-$(nproc 2>/dev/null || echo 2)}

# Pure-Python work, checking now and then (every ~30 ms) that this script is still its parent.
busy_loop='import os
parent = os.getppid()
while os.getppid() == parent:
    for _ in range(1_000_000):
        pass'

busy=()
tests=""
signalled=0
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
pass_on() {  # a signal for this script goes to pytest, which ends its run and reports
    if [[ -n "$tests" ]]; then
        signalled=1
        kill "-$1" "$tests" 2>/dev/null || true
    else
        exit $((128 + $2))
    fi
}
trap stop_load EXIT
trap 'pass_on INT 2' INT
trap 'pass_on TERM 15' TERM

for _ in $(seq "$procs"); do
    "$load_python" -c "$busy_loop" &
    busy+=("$!")
done
echo "test-under-load: $procs busy process(es) (pids ${busy[*]}) on $(nproc 2>/dev/null || echo '?') core(s)" >&2

"$python" -m pytest "$@" <&0 &
tests=$!
status=0
while :; do
    signalled=0
    if wait "$tests"; then status=0; else status=$?; fi
    [[ $signalled == 1 ]] || break  # else a signal cut the wait short: wait again for pytest's own status
done
echo "test-under-load: pytest exited $status" >&2
exit "$status"
