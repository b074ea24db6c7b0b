#!/usr/bin/env bash
# The adaptive concurrency benchmark (docs/adaptive.md, issue 24): the
# overload table, on and off, one and two sluice instances, VIP and others.
#
#   HTTP: build/bench/capsrv, 8 slots of 10 ms: capacity C = 800/s
#   RESP: redis-server running an EVAL that spins 5 ms: C = 200/s
#   load: build/bench/aload, open loop (arrivals do not wait for answers),
#         10% of requests from a VIP identity (a limit's match_identity)
#
# Rows: unloaded (0.5 C, sluice off) for the reference p99; 3 C off; 3 C on;
# 3 C on through two instances (1.5 C each); 0.5 C on for LONG seconds
# (nothing may be refused); RESP -P 16 throughput on vs off (redis-benchmark,
# A/B interleaved, medians). Figures on a shared machine vary: run it on a
# quiet one for numbers to quote.
#
# POOL=N puts the RESP listeners on `upstream_pool = N` (the clients'
# requests share N upstream connections per worker; docs/adaptive.md,
# "Pooled listeners").
#
#   tests/bench/adaptive.sh            (DUR=10 WARM=3 LONG=60 ROUNDS=3 ONLY="http resp p16" POOL=)
#
# STORE=1 (the default) gives the instances a quota store (a redis-server
# of its own, not the slowed one): two instances then share their
# baselines through it (adaptive_share, docs/adaptive.md "The fleet's
# baseline"); STORE=0 runs them without one, as before. The two-instance
# rows print each one's own baseline, the fleet's and the latency (means
# of one sample a second).
#
# CASES picks the rows of the http and resp tables (default all: "ref off
# on two long"); SLUICE is the binary to run (default build/sluice), for
# A/B rounds against another build, e.g. the two-instance RESP row of the
# previous one:  SLUICE=/tmp/old/build/sluice ONLY=resp CASES="ref two" ...
set -euo pipefail
cd "$(dirname "$0")/../.."
DUR=${DUR:-10}
WARM=${WARM:-3}
LONG=${LONG:-60}
ROUNDS=${ROUNDS:-3}
ONLY=${ONLY:-http resp p16}  # which parts: http, resp, p16
POOL=${POOL:-}               # resp: upstream_pool = POOL when set
CASES=${CASES:-ref off on two long}
SLUICE=${SLUICE:-build/sluice}
STORE=${STORE:-1}
has() { case " $CASES " in *" $1 "*) return 0 ;; esac; return 1; }
make -s build/sluice build/bench/capsrv build/bench/aload >/dev/null

T=$(mktemp -d)
PIDS=()
cleanup() {
    for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$T"
}
trap cleanup EXIT

port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
wait_port() { for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null && return 0; sleep 0.05; done; return 1; }

CAP=$(port); RED=$(port)
build/bench/capsrv -p "$CAP" -n 8 -t 10 >/dev/null 2>&1 & PIDS+=($!)
redis-server --port "$RED" --save '' --appendonly no >/dev/null 2>&1 & PIDS+=($!)
wait_port "$CAP"; wait_port "$RED"
STO=
if [ "$STORE" = 1 ]; then
    STO=$(port)
    redis-server --port "$STO" --save '' --appendonly no >/dev/null 2>&1 & PIDS+=($!)
    wait_port "$STO"
fi

# sluice NAME PROTO UPSTREAM MODE: starts one; its listen and admin ports in
# ${NAME}_P and ${NAME}_A
sluice() {
    local name=$1 proto=$2 up=$3 mode=$4 p a id
    p=$(port); a=$(port)
    id="header:X-Who"; [ "$proto" = resp ] && id="client_name client_ip"
    cat > "$T/$name.ini" <<EOF
[sluice]
admin = 127.0.0.1:$a
${STO:+[store]
url = redis://127.0.0.1:$STO}
[listener l]
protocol = $proto
listen = 127.0.0.1:$p
upstream = 127.0.0.1:$up
identity = $id
adaptive_concurrency = $mode
[limit vip]
listener = l
rate = 1000000/s
match_identity = vip
EOF
    if [ "$proto" = resp ] && [ -n "$POOL" ]; then
        echo "upstream_pool = $POOL" >>"$T/$name.ini.l"
        sed -i "/^adaptive_concurrency = /r $T/$name.ini.l" "$T/$name.ini"
        rm -f "$T/$name.ini.l"
    fi
    "$SLUICE" -c "$T/$name.ini" >"$T/$name.log" 2>&1 & PIDS+=($!)
    eval "${name}_PID=$!"
    wait_port "$p"
    eval "${name}_P=$p ${name}_A=$a"
}
stop() { local v="${1}_PID"; kill "${!v}" 2>/dev/null || true; wait "${!v}" 2>/dev/null || true; }
metric() { curl -s "127.0.0.1:$1/metrics" | awk -v m="$2" '$1 == m { print $2 }'; }
field() { sed -n "s/.*$1=\([^ ]*\).*/\1/p" <<<"$2"; }

row() { # LABEL RESULT [LIMITS]
    printf '| %-34s | %9s | %9s | %8s | %8s | %8s | %8s | %s |\n' "$1" "$(field goodput "$2")" \
        "$(field refused "$2")" "$(field others_p50 "$2")" "$(field others_p99 "$2")" \
        "$(field others_ok "$2")" "$(field vip_ok "$2")" "${3:-}"
}
header() {
    echo
    echo "$1"
    echo
    echo "| case | goodput | refused | p50 | p99 | others ok | VIP ok | limits |"
    echo "|---|---|---|---|---|---|---|---|"
}

run_proto() { # PROTO UPSTREAM C ARGS...
    local proto=$1 up=$2 c=$3; shift 3
    local load=(build/bench/aload -m "$proto" -d "$DUR" -w "$WARM" -c 2048 -v 0.1 "$@")
    header "$proto: C = $c/s, offered 3 C = $((3 * c))/s unless said (${DUR} s after ${WARM} s warm-up)"
    if has ref || has off; then
        sluice off "$proto" "$up" off
        if has ref; then r=$("${load[@]}" -p "$off_P" -r $((c / 2))); row "0.5 C, off (unloaded reference)" "$r"; fi
        if has off; then r=$("${load[@]}" -p "$off_P" -r $((3 * c))); row "3 C, off" "$r"; fi
        stop off
    fi
    if has on; then
        sluice on "$proto" "$up" on
        r=$("${load[@]}" -p "$on_P" -r $((3 * c)))
        row "3 C, on" "$r" "$(metric "$on_A" 'sluice_adaptive_limit{listener="l"}')"
        stop on
    fi
    has two && run_two "$@"
    if has long; then
        sluice on "$proto" "$up" on
        r=$("${load[@]}" -p "$on_P" -r $((c / 2)) -d "$LONG")
        row "0.5 C, on, ${LONG} s" "$r" "$(metric "$on_A" 'sluice_adaptive_limit{listener="l"}')"
        stop on
    fi
}

run_two() { # the two-instance rows (run_proto's locals in scope)
    sluice i1 "$proto" "$up" on
    sluice i2 "$proto" "$up" on
    "${load[@]}" -p "$i1_P" -r $((3 * c / 2)) >"$T/r1" &
    local l1=$!
    # the limits move from window to window: their means over the measured
    # seconds, sampled once a second (a last value says little)
    ( sleep "$WARM"; for _ in $(seq "$DUR"); do
          sleep 1
          local v=() i m x
          for i in "$i1_A" "$i2_A"; do
              for m in limit baseline_seconds fleet_baseline_seconds latency_seconds; do
                  x=$(metric "$i" "sluice_adaptive_$m{listener=\"l\"}")
                  v+=("${x:-0}")
              done
          done
          echo "${v[@]}"
      done >"$T/lims" ) &
    local smp=$!
    r2=$("${load[@]}" -p "$i2_P" -r $((3 * c / 2)))
    wait $l1 $smp
    r1=$(cat "$T/r1")
    local lim1 lim2
    lim1=$(awk '{ s += $1; n++ } END { if (n) printf "%.2f (mean)", s / n }' "$T/lims")
    lim2=$(awk '{ s += $5; n++ } END { if (n) printf "%.2f (mean)", s / n }' "$T/lims")
    row "3 C, on, two instances: first" "$r1" "$lim1"
    row "3 C, on, two instances: second" "$r2" "$lim2"
    # means in ms (an old build prints no fleet figure: 0)
    awk '{ for (i = 2; i <= 8; i++) if (i != 5) s[i] += $i; n++ }
         END { if (n) printf "\nmeans (ms): own baselines %.3f / %.3f, fleet %.3f / %.3f, latency %.3f / %.3f\n",
                             s[2] / n * 1e3, s[6] / n * 1e3, s[3] / n * 1e3, s[7] / n * 1e3,
                             s[4] / n * 1e3, s[8] / n * 1e3 }' "$T/lims"
    stop i1; stop i2
}

echo "# adaptive concurrency benchmark, $(date -u +%FT%TZ), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)${POOL:+, resp with upstream_pool = $POOL}"
case " $ONLY " in *" http "*) run_proto http "$CAP" 800 ;; esac
case " $ONLY " in *" resp "*) run_proto resp "$RED" 200 -s 5 ;; esac
case " $ONLY " in *" p16 "*) ;; *) exit 0 ;; esac

echo
echo "RESP -P 16 throughput (redis-benchmark -c 50 -n 200000 -t get,set -P 16), requests/s, A/B interleaved"
echo
echo "| round | off GET | on GET | off SET | on SET |"
echo "|---|---|---|---|---|"
sluice off resp "$RED" off
sluice on resp "$RED" on
bench() { redis-benchmark -p "$1" -c 50 -n 200000 -t "$2" -P 16 -q 2>/dev/null | tr '\r' '\n' |
          awk '/requests per second/ { print $2 }' | tail -1; }
for i in $(seq "$ROUNDS"); do
    echo "| $i | $(bench "$off_P" get) | $(bench "$on_P" get) | $(bench "$off_P" set) | $(bench "$on_P" set) |"
done
echo
echo "on: refused $(curl -s "127.0.0.1:$on_A/metrics" | awk '/^sluice_adaptive_shed_total/ && !/shadow/ { s += $2 } END { print s + 0 }') during the -P 16 rounds"
