#!/usr/bin/env bash
# What the operator-facing features cost on the bench's RESP and HTTP rows:
# one sluice binary, several configurations side by side, interleaved rounds;
# prints each run and the medians, with the ratio to the first variant.
#
#   tests/bench/ab_features.sh [ROUNDS]        # default 7
#
# Variants (each its own sluice process, same binary, same upstreams):
#   base    a limit that matches every request and never binds (decided in
#           process: scope = connection), decision_log = off (what "on" is
#           measured against)
#   dlog    the same with decision_log = all (a line per decision, at most
#           decision_log_rate a second, the rest counted)
#   usage   the same with [usage] export = store (a local quota Redis), when
#           the binary knows [usage]
#   alog    HTTP only: access_log = FILE, access_log_format = json
# Rows: redis-benchmark SET -c 50 at -P 1 and -P 16 (RESP), wrk -t2 -c50
# keep-alive GET (HTTP, upstream nginx). Per run: requests/s and the proxy's
# CPU per request (schedstat runtime of all its threads, before and after).
# On a shared machine CPU per request is the steadier figure.
# Ports from AB_PORT (default 19480) on. AB_WORKERS (default 1) workers each.
set -u
R=${1:-7}
BIN=${SLUICE_BIN:-build/sluice}
W=${AB_WORKERS:-1}; P0=${AB_PORT:-19480}
N_P1=${AB_N_P1:-100000}; N_P16=${AB_N_P16:-1000000}; D=${AB_SECONDS:-5}
DIR=$(mktemp -d /tmp/sluice-abf.XXXXXX)
REDIS=$P0; STORE=$((P0 + 1)); UP=$((P0 + 2))
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
    redis-cli -p "$REDIS" shutdown nosave >/dev/null 2>&1
    redis-cli -p "$STORE" shutdown nosave >/dev/null 2>&1
    wait 2>/dev/null; rm -rf "$DIR"
}
trap cleanup EXIT INT TERM

redis-server --port "$REDIS" --save '' --appendonly no --daemonize yes >/dev/null
redis-server --port "$STORE" --save '' --appendonly no --daemonize yes >/dev/null
mkdir -p "$DIR/up/logs" "$DIR/up/tmp"
cat > "$DIR/up/nginx.conf" <<EOF
worker_processes 1;
pid $DIR/up/nginx.pid;
error_log $DIR/up/logs/error.log;
events { worker_connections 4096; }
http {
 access_log off;
 client_body_temp_path $DIR/up/tmp/body;
 keepalive_requests 10000000;
 keepalive_timeout 300s;
 server { listen 127.0.0.1:$UP;
  location = /small { default_type text/plain; return 200 "hello\n"; } }
}
EOF
nginx -p "$DIR/up" -c "$DIR/up/nginx.conf" -g 'daemon off;' & PIDS+=($!)

VARIANTS=(base dlog)
declare -A RPORT HPORT PID
slconf() { # variant resp_port http_port
    {
        printf '[sluice]\nadmin =\nworkers = %s\n' "$W"
        printf 'decision_log = %s\n' "$([ "$1" = dlog ] && echo all || echo off)"
        # the usage variant adds to the quota Redis through [store]; the
        # limit below is decided in process in every variant (scope =
        # connection), so the store carries only the usage deliveries
        if [ "$1" = usage ]; then
            printf '[store]\nurl = redis://127.0.0.1:%s\n[usage]\nexport = store\n' "$STORE"
        else
            printf '[store]\nurl = local\n'
        fi
        printf '[listener r]\nlisten = 127.0.0.1:%s\nupstream = 127.0.0.1:%s\nmax_connections = 20000\n' "$2" "$REDIS"
        printf '[listener h]\nlisten = 127.0.0.1:%s\nupstream = 127.0.0.1:%s\nprotocol = http\n' "$3" "$UP"
        printf 'max_connections = 20000\nupstream_keepalive = 32\n'
        if [ "$1" = alog ]; then
            printf 'access_log = %s/access.log\naccess_log_format = json\n' "$DIR"
        fi
        # matches every request, never binds: the cost of enforcement is in
        # every variant, so the difference is the feature's alone
        printf '[limit all]\nlistener = *\nmetric = requests\nrate = 1000000000/s\nscope = connection\n'
    } > "$DIR/$1.ini"
}
# the usage variant only where the binary knows [usage]
slconf usage 1 2
if "$BIN" -t -c "$DIR/usage.ini" >/dev/null 2>&1; then VARIANTS+=(usage)
else echo "(this binary has no [usage] export, or its keys differ: usage variant left out)"; fi
VARIANTS+=(alog)
i=3
for v in "${VARIANTS[@]}"; do
    RPORT[$v]=$((P0 + i)); HPORT[$v]=$((P0 + i + 1)); i=$((i + 2))
    slconf "$v" "${RPORT[$v]}" "${HPORT[$v]}"
    "$BIN" -c "$DIR/$v.ini" > "$DIR/$v.log" 2>&1 & PID[$v]=$!; PIDS+=($!)
done
for v in "${VARIANTS[@]}"; do
    for _ in $(seq 1 50); do
        redis-cli -p "${RPORT[$v]}" ping >/dev/null 2>&1 &&
            curl -sf -o /dev/null --max-time 1 "http://127.0.0.1:${HPORT[$v]}/small" && break
        sleep 0.1
    done
done

cpu_ns() { # pid -> runtime of all its threads and child processes, ns
    local p f t=0 v
    for p in "$1" $(pgrep -P "$1" 2>/dev/null); do
        for f in /proc/"$p"/task/*/schedstat; do
            v=0; read -r v _ < "$f" 2>/dev/null; t=$((t + ${v:-0}))
        done
    done
    echo "$t"
}
run() { # row variant -> "rps n"
    case $1 in
    p1|p16)
        local P=1 n=$N_P1; [ "$1" = p16 ] && { P=16; n=$N_P16; }
        redis-benchmark -p "${RPORT[$2]}" -c 50 -n "$n" -t set -P "$P" --csv 2>/dev/null |
            awk -F'","' -v n="$n" 'NR == 2 { gsub(/"/, "", $2); print $2, n }' ;;
    http)
        wrk -t2 -c50 -d"${D}s" "http://127.0.0.1:${HPORT[$2]}/small" |
            awk '/requests in/ { n = $1 } /^Requests\/sec/ { r = $2 } END { print r, n }' ;;
    esac
}
for v in "${VARIANTS[@]}"; do run p1 "$v" > /dev/null; done # warm up
for r in $(seq 1 "$R"); do
    # rotate the order each round: on a shared machine who runs first matters
    ord=("${VARIANTS[@]:$((r % ${#VARIANTS[@]}))}" "${VARIANTS[@]:0:$((r % ${#VARIANTS[@]}))}")
    for row in p1 p16 http; do
        for v in "${ord[@]}"; do
            [ "$v" = alog ] && [ "$row" != http ] && continue
            c0=$(cpu_ns "${PID[$v]}")
            read -r rps n <<< "$(run "$row" "$v")"
            c1=$(cpu_ns "${PID[$v]}")
            awk -v row="$row" -v v="$v" -v r="$r" -v rps="$rps" -v n="$n" -v a="$c0" -v b="$c1" \
                'BEGIN { printf "%s r%s %-5s rps=%s us=%.3f\n", row, r, v, rps, (b - a) / 1000 / (n ? n : 1) }'
        done
    done
done | tee "$DIR/runs.txt"
med() { # row variant key
    awk -v row="$1" -v v="$2" -v k="$3" '$1 == row && $3 == v { for (i = 4; i <= NF; i++)
        if (index($i, k "=") == 1) print substr($i, length(k) + 2) }' "$DIR/runs.txt" |
        sort -g | awk '{ x[NR] = $1 } END { if (NR) print x[int((NR + 1) / 2)] }'
}
echo
for row in p1 p16 http; do
    b_rps=$(med "$row" base rps); b_us=$(med "$row" base us)
    for v in "${VARIANTS[@]}"; do
        [ "$v" = alog ] && [ "$row" != http ] && continue
        rps=$(med "$row" "$v" rps); us=$(med "$row" "$v" us)
        awk -v row="$row" -v v="$v" -v rps="$rps" -v us="$us" -v br="$b_rps" -v bu="$b_us" \
            'BEGIN { printf "median %-4s %-5s %9.0f req/s (%.2fx base)  %.3f us CPU/request (%.2fx base)\n",
                     row, v, rps, rps / br, us, us / bu }'
    done
done
for v in "${VARIANTS[@]}"; do
    grep -qi "fatal\|error" "$DIR/$v.log" && { echo "--- $v log:"; tail -5 "$DIR/$v.log"; }
done
exit 0
