#!/usr/bin/env bash
# The quota store's capacity: how many decisions a second one redis-server
# core makes running sluice's decide script (`make bench-store`, from the
# repository root). Results feed docs/algorithms.md#capacity.
#
# 1. The script alone: redis-benchmark sends EVALSHA <decide> with one limit
#    per call (the `ARGV` sluice sends: now = -1, so the store's TIME), pipelined
#    (-P 32, 50 clients) so that the store's one core is the bottleneck, for
#    each algorithm:
#      - strict: cost 1, per identity (100,000 identities, a 1000/s limit that
#        every call fits: admissions write state, the costlier path);
#      - lease:  cost 1 + lease (what a leasing instance asks: one call per
#        lease + 1 admissions; lease = 20, and 10 for `lease = auto` at 1000/s);
#      - global: cost 1 on one key (a global limit, 10^6/s: every call fits).
#    For each: calls/s, decisions/s, and the store's CPU over the run (% of one
#    core, from /proc: ~100 % says the store was the bottleneck).
# 2. Through one sluice: redis-benchmark SET through a sluice whose limit
#    (per key prefix, 1000 identities, 10^6/s each: never refuses) is decided
#    by the store, strict and with lease = 20: requests/s, the store's EVALSHA
#    calls/s (INFO commandstats), CPU of sluice and of the store.
#
# Knobs: STORE_N (calls per script run, default 1000000), STORE_SLUICE_N
# (requests per sluice run, default 2000000), STORE_ONLY=script|sluice.
# Every process started here listens on 127.0.0.1 and is stopped on exit.

set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT" || exit 2
SLUICE_BIN=${SLUICE_BIN:-build/sluice}
N=${STORE_N:-1000000}
SN=${STORE_SLUICE_N:-2000000}
ONLY=${STORE_ONLY:-}
DIR=$(mktemp -d /tmp/sluice-bench-store.XXXXXX)
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
    wait 2>/dev/null
    rm -rf "$DIR"
}
trap cleanup EXIT INT TERM

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# Starts a redis-server on a free port; prints "PORT PID".
redis_start() {
    local port pid
    port=$(free_port)
    redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
        --logfile "$DIR/redis-$port.log" >/dev/null 2>&1 &
    pid=$!
    PIDS+=("$pid")
    for _ in $(seq 100); do
        redis-cli -p "$port" ping >/dev/null 2>&1 && break
        sleep 0.05
    done
    echo "$port $pid"
}

# CPU seconds (user + system) used by <pid>.
cpu() { awk -v t="$(getconf CLK_TCK)" '{ sub(/^.*\) /, ""); print ($12 + $13) / t }' "/proc/$1/stat"; }

# The decide script as lua/embed.sh builds it (the algorithm files without
# their standalone tails, then decide.lua).
decide_text() {
    for a in token_bucket gcra sliding_window sliding_log fixed_window; do
        sed '/^-- standalone/,$d' "lua/$a.lua"
    done
    cat lua/decide.lua
}

# bench PORT PID LABEL DECISIONS_PER_CALL N ARGS...: redis-benchmark ARGS
# against the store; prints one row.
bench() {
    local port=$1 pid=$2 label=$3 per=$4 n=$5
    shift 5
    redis-cli -p "$port" flushall >/dev/null
    local c0 t0 t1 c1 rps
    c0=$(cpu "$pid")
    t0=$(date +%s.%N)
    rps=$(redis-benchmark -p "$port" -c 50 -P 32 -n "$n" -r 100000 --csv "$@" 2>/dev/null |
          tail -n 1 | awk -F'","' '{ print $2 }')
    t1=$(date +%s.%N)
    c1=$(cpu "$pid")
    awk -v l="$label" -v r="$rps" -v p="$per" -v c0="$c0" -v c1="$c1" -v t0="$t0" -v t1="$t1" \
        'BEGIN { printf "%-30s %10.0f %12.0f %9.0f\n", l, r, r * p, 100 * (c1 - c0) / (t1 - t0) }'
}

script_runs() {
    read -r port pid < <(redis_start)
    local sha
    sha=$(decide_text | redis-cli -p "$port" -x SCRIPT LOAD)
    echo "== the decide script on one redis-server ($(redis-server --version | awk '{print $3}')), $(nproc) cores, $(uname -m)"
    echo "   redis-benchmark -c 50 -P 32 -n $N -r 100000 EVALSHA <decide> 1 KEY -1 1 ALGO 1000 1000000 BURST COST 0 0"
    printf "%-30s %10s %12s %9s\n" "case" "calls/s" "decisions/s" "store CPU%"
    for a in token_bucket gcra sliding_window sliding_log fixed_window; do
        bench "$port" "$pid" "$a strict" 1 "$N" \
            EVALSHA "$sha" 1 'sluice:{b:id:__rand_int__}' -1 1 "$a" 1000 1000000 1000 1 0 0
        # a lease of 20 (cost 21 per call): 1000 of burst holds it
        bench "$port" "$pid" "$a lease 20" 21 "$N" \
            EVALSHA "$sha" 1 'sluice:{b:id:__rand_int__}' -1 1 "$a" 1000 1000000 1000 21 0 0
        bench "$port" "$pid" "$a lease auto (10)" 11 "$N" \
            EVALSHA "$sha" 1 'sluice:{b:id:__rand_int__}' -1 1 "$a" 1000 1000000 1000 11 0 0
        # one key: sliding_log's bound is 100,000 a period
        local amount=1000000
        [ "$a" = sliding_log ] && amount=100000
        bench "$port" "$pid" "$a global (one key)" 1 "$N" \
            EVALSHA "$sha" 1 'sluice:{b:*}' -1 1 "$a" "$amount" 1000000 "$amount" 1 0 0
    done
}

# sluice_run STORE_PORT STORE_PID UP_PORT LABEL LEASE
sluice_run() {
    local sport=$1 spid=$2 uport=$3 label=$4 lease=$5
    local lport admin
    lport=$(free_port)
    admin=$(free_port)
    cat > "$DIR/sluice-$label.ini" <<EOF
[sluice]
admin = 127.0.0.1:$admin
log_level = warn
[store]
url = redis://127.0.0.1:$sport
timeout = 1s
lease = $lease
[listener r]
listen = 127.0.0.1:$lport
upstream = 127.0.0.1:$uport
identity = key_prefix
[limit per-prefix]
listener = r
rate = 1000000/s
EOF
    "$SLUICE_BIN" -c "$DIR/sluice-$label.ini" 2>"$DIR/sluice-$label.log" &
    local sl=$!
    PIDS+=("$sl")
    for _ in $(seq 100); do redis-cli -p "$lport" ping >/dev/null 2>&1 && break; sleep 0.05; done
    redis-cli -p "$sport" flushall >/dev/null
    redis-cli -p "$sport" config resetstat >/dev/null
    local c0 s0 t0 t1 c1 s1 rps calls
    c0=$(cpu "$sl"); s0=$(cpu "$spid"); t0=$(date +%s.%N)
    rps=$(redis-benchmark -p "$lport" -c 50 -P 16 -n "$SN" -r 1000 --csv \
          SET '__rand_int__:k' v 2>/dev/null | tail -n 1 | awk -F'","' '{ print $2 }')
    t1=$(date +%s.%N); c1=$(cpu "$sl"); s1=$(cpu "$spid")
    calls=$(redis-cli -p "$sport" info commandstats | sed -n 's/^cmdstat_evalsha:calls=\([0-9]*\),.*/\1/p')
    kill "$sl"; wait "$sl" 2>/dev/null
    awk -v l="$label" -v r="$rps" -v k="${calls:-0}" -v c0="$c0" -v c1="$c1" -v s0="$s0" -v s1="$s1" \
        -v t0="$t0" -v t1="$t1" 'BEGIN { d = t1 - t0; printf "%-30s %10.0f %12.0f %10.1f %9.0f %9.0f\n",
        l, r, k / d, r * d / (k > 0 ? k : 1), 100 * (c1 - c0) / d, 100 * (s1 - s0) / d }'
}

sluice_runs() {
    [ -x "$SLUICE_BIN" ] || { echo "no $SLUICE_BIN: run make first" >&2; exit 2; }
    local sport spid uport upid
    read -r sport spid < <(redis_start)
    read -r uport upid < <(redis_start)
    echo "== through one sluice: redis-benchmark -c 50 -P 16 -n $SN -r 1000 SET __rand_int__:k v"
    echo "   (identity = key_prefix: 1000 identities; one store-backed limit of 10^6/s each, never refusing)"
    printf "%-30s %10s %12s %10s %9s %9s\n" "mode" "req/s" "store call/s" "req/call" "sluice%" "store%"
    sluice_run "$sport" "$spid" "$uport" strict off
    sluice_run "$sport" "$spid" "$uport" lease-20 20
}

[ "$ONLY" = sluice ] || script_runs
[ "$ONLY" = script ] || sluice_runs
