#!/usr/bin/env bash
# Runs each cmocka test binary given, prints its output, and ends with one
# line "N passed, N failed" summed over all of them. A binary that dies
# without its own summary counts as one failure. Exits 1 if anything failed.
set -u
passed=0 failed=0
for bin in "$@"; do
    echo "== $bin"
    out=$("$bin" 2>&1); rc=$?
    printf '%s\n' "$out"
    p=$(printf '%s\n' "$out" | sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' | awk '{s+=$1} END {print s+0}')
    f=$(printf '%s\n' "$out" | sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' | awk '{s+=$1} END {print s+0}')
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        echo "!! $bin exited with status $rc"
        f=1
    fi
    passed=$((passed + p)) failed=$((failed + f))
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
