#!/usr/bin/env bash
# `make run`: sluice in the foreground with the given configuration. For each
# resp upstream nothing answers on, a throwaway redis-server is started there
# (no persistence) and stopped again when sluice exits.
set -u
bin=$1 conf=$2
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
}
trap cleanup EXIT

"$bin" -t -c "$conf" >/dev/null || exit 1
# The effective configuration names every listener's protocol and upstream.
proto=
while IFS= read -r line; do
    case "$line" in
        "[listener "*) proto=resp ;;
        protocol*=*) proto=$(echo "${line#*=}" | tr -d ' ') ;;
        upstream*=*)
            up=$(echo "${line#*=}" | tr -d ' ')
            host=${up%:*} port=${up##*:}
            [ "$host" = localhost ] && host=127.0.0.1
            ups+=("$proto $host $port") ;;
    esac
done < <("$bin" -T -c "$conf")
for u in "${ups[@]:-}"; do
    [ -n "$u" ] || continue
    set -- $u
    [ "$1" = resp ] || continue
    if ! redis-cli -h "$2" -p "$3" ping >/dev/null 2>&1; then
        echo "run: nothing answers on $2:$3: starting a throwaway redis-server there" >&2
        redis-server --bind "$2" --port "$3" --save '' --appendonly no --daemonize no \
            --logfile /dev/null &
        pids+=($!)
        for _ in $(seq 50); do redis-cli -h "$2" -p "$3" ping >/dev/null 2>&1 && break; sleep 0.1; done
    fi
done
"$bin" -c "$conf" &
sl=$!
trap 'kill -TERM $sl 2>/dev/null' INT TERM
wait $sl; rc=$?
# a trapped signal interrupts the first wait: wait for the drain to finish
kill -0 $sl 2>/dev/null && wait $sl && rc=$?
exit $rc
