#!/usr/bin/env bash
# A/B of two sluice binaries on the RESP 1:1 rows, beside nginx stream, in
# interleaved rounds: the CPU per request of make bench's pooling rows
# (redis-benchmark -c 50, GET and SET, -P 16 and -P 1), read the same way
# (schedstat runtime of the proxy, its workers and threads), and optionally
# the system calls per request; prints each run and the medians.
#
#   tests/bench/ab_p16.sh OLD_BINARY NEW_BINARY [ROUNDS]
#
# Both sluices (resp listener, workers = AB_WORKERS, default 2, url = local,
# no limit: make bench's "sluice 1:1") and nginx stream (worker_processes
# AB_WORKERS, proxy_pass) sit in front of one redis-server. The order of the
# targets rotates each round. AB_P (default "16 1"): pipeline depths;
# AB_N16 / AB_N1 (400000 / 100000): -n per run; AB_CMDS (default "get set").
# AB_SYSCALLS=1: each run under `perf stat` with the syscall tracepoints
# (reads, writes, epoll_wait, epoll_ctl, all syscalls, context switches),
# per request (perf's own cost shows in the CPU figure of those runs: compare
# counts, not CPU, then). AB_TCP=1 adds a target "tcp": binary B with
# protocol = tcp (bytes relayed, no framing or counting), to tell what the
# RESP framing costs from what the rest of a session costs. AB_RELAY=1 adds
# tests/bench/relay.c (compiled here, AB_WORKERS processes) twice: "lt",
# level-triggered epoll as libuv uses it, and "et", edge-triggered as nginx
# (RELAY_EPOLLET=1): what level-triggered costs a proxy that does nothing
# else. Ports from
# AB_PORT (default 19480) on.
set -u
A=${1:?old sluice binary}; B=${2:?new sluice binary}; R=${3:-5}
W=${AB_WORKERS:-2}; P0=${AB_PORT:-19480}
read -r -a PS <<< "${AB_P:-16 1}"
read -r -a CMDS <<< "${AB_CMDS:-get set}"
N16=${AB_N16:-400000}; N1=${AB_N1:-100000}
DIR=$(mktemp -d /tmp/sluice-ab16.XXXXXX)
RP=$P0; NP=$((P0 + 1)); PA=$((P0 + 2)); PB=$((P0 + 3)); PT=$((P0 + 4)); PL=$((P0 + 5)); PE=$((P0 + 6))
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; rm -rf "$DIR"; }
trap cleanup EXIT INT TERM

redis-server --port "$RP" --bind 127.0.0.1 --save '' --appendonly no --maxclients 20000 \
    --daemonize no --dir "$DIR" --logfile "$DIR/redis.log" & PIDS+=($!)
slconf() { # file port [protocol]
    printf '[sluice]\nadmin =\nworkers = %s\n\n[store]\nurl = local\n\n' "$W" > "$1"
    printf '[listener r]\nlisten = 127.0.0.1:%s\nupstream = 127.0.0.1:%s\nprotocol = %s\n' "$2" "$RP" "${3:-resp}" >> "$1"
    printf 'max_connections = 20000\n' >> "$1"
}
slconf "$DIR/a.ini" "$PA"
slconf "$DIR/b.ini" "$PB"
mkdir -p "$DIR/ngx/logs"
cat > "$DIR/ngx/nginx.conf" <<EOF
load_module /usr/lib/nginx/modules/ngx_stream_module.so;
worker_processes $W;
worker_rlimit_nofile 20000;
pid $DIR/ngx/nginx.pid;
error_log $DIR/ngx/logs/error.log;
events { worker_connections 10000; }
stream { server { listen 127.0.0.1:$NP; proxy_pass 127.0.0.1:$RP; } }
EOF
"$A" -c "$DIR/a.ini" > "$DIR/a.log" 2>&1 & A_PID=$!; PIDS+=($!)
"$B" -c "$DIR/b.ini" > "$DIR/b.log" 2>&1 & B_PID=$!; PIDS+=($!)
nginx -p "$DIR/ngx" -c "$DIR/ngx/nginx.conf" -g 'daemon off;' & N_PID=$!; PIDS+=($!)
declare -A PORT=([A]=$PA [B]=$PB [nginx]=$NP) PID=([A]=$A_PID [B]=$B_PID [nginx]=$N_PID)
TARGETS=(A B nginx)
if [ "${AB_TCP:-0}" = 1 ]; then
    slconf "$DIR/t.ini" "$PT" tcp
    "$B" -c "$DIR/t.ini" > "$DIR/t.log" 2>&1 & PIDS+=($!)
    PORT[tcp]=$PT; PID[tcp]=$!; TARGETS+=(tcp)
fi
if [ "${AB_RELAY:-0}" = 1 ]; then
    cc -O2 -o "$DIR/relay" "$(dirname "$0")/relay.c" || exit 2
    "$DIR/relay" "$PL" "$RP" "$W" & PIDS+=($!)
    PORT[lt]=$PL; PID[lt]=$!
    RELAY_EPOLLET=1 "$DIR/relay" "$PE" "$RP" "$W" & PIDS+=($!)
    PORT[et]=$PE; PID[et]=$!; TARGETS+=(lt et)
fi
for t in "${TARGETS[@]}"; do
    for _ in $(seq 1 50); do
        [ "$(redis-cli -p "${PORT[$t]}" ping 2>/dev/null)" = PONG ] && break
        sleep 0.1
    done
done

procs() { echo "$1"; pgrep -P "$1"; }
cpu_ns() { # pid -> runtime (ns) of it, its threads and its children's
    local t=0 p f v
    for p in $(procs "$1"); do
        for f in /proc/"$p"/task/*/schedstat; do
            v=0; read -r v _ < "$f" 2>/dev/null; t=$((t + ${v:-0}))
        done
    done
    echo "$t"
}
EV=raw_syscalls:sys_enter,syscalls:sys_enter_read,syscalls:sys_enter_recvfrom
EV=$EV,syscalls:sys_enter_write,syscalls:sys_enter_writev,syscalls:sys_enter_epoll_wait
EV=$EV,syscalls:sys_enter_epoll_ctl,context-switches

for t in "${TARGETS[@]}"; do # warm-up
    redis-benchmark -p "${PORT[$t]}" -c 50 -n 50000 -t set,get -P 16 -q > /dev/null 2>&1
done
for r in $(seq 1 "$R"); do
    k=$(( (r - 1) % ${#TARGETS[@]} ))
    order=("${TARGETS[@]:k}" "${TARGETS[@]:0:k}")
    for p in "${PS[@]}"; do
        n=$N16; [ "$p" = 1 ] && n=$N1
        for cmd in "${CMDS[@]}"; do
            for t in "${order[@]}"; do
                sc=""
                c0=$(cpu_ns "${PID[$t]}")
                if [ "${AB_SYSCALLS:-0}" = 1 ]; then
                    perf stat -x, -e "$EV" -p "$(procs "${PID[$t]}" | paste -sd,)" -o "$DIR/perf.out" -- \
                        redis-benchmark -p "${PORT[$t]}" -c 50 -n "$n" -P "$p" -t "$cmd" --csv > "$DIR/rb.csv" 2>&1
                    sc=$(awk -F, -v n="$n" '/^[0-9]/ { e = $3; sub(/^.*:sys_enter_?/, "", e); if (e == "") e = "sys";
                        if (e == "context-switches") e = "cs"; printf " %s=%.4f", e, $1 / n }' "$DIR/perf.out")
                else
                    redis-benchmark -p "${PORT[$t]}" -c 50 -n "$n" -P "$p" -t "$cmd" --csv > "$DIR/rb.csv" 2>&1
                fi
                c1=$(cpu_ns "${PID[$t]}")
                rps=$(awk -F'","' 'NR > 1 && NF >= 7 { r = $2; gsub(/"/, "", r); print r; exit }' "$DIR/rb.csv")
                awk -v r="$r" -v p="$p" -v c="$cmd" -v t="$t" -v rps="${rps:-0}" -v a="$c0" -v b="$c1" \
                    -v n="$n" -v sc="$sc" \
                    'BEGIN { printf "r%s P%s %s %-5s rps=%s us=%.4f%s\n", r, p, c, t, rps, (b - a) / 1e3 / n, sc }'
            done
        done
    done
done | tee "$DIR/runs.txt"
med() { # P cmd target key
    awk -v p="P$1" -v c="$2" -v t="$3" -v k="$4" '$2 == p && $3 == c && $4 == t {
            for (i = 5; i <= NF; i++) if (index($i, k "=") == 1) print substr($i, length(k) + 2) }' "$DIR/runs.txt" |
        sort -g | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)] }'
}
echo "medians of $R rounds (us = proxy CPU per request, schedstat; A = $A, B = $B)"
for p in "${PS[@]}"; do
    for cmd in "${CMDS[@]}"; do
        ua=$(med "$p" "$cmd" A us); ub=$(med "$p" "$cmd" B us); un=$(med "$p" "$cmd" nginx us)
        line=$(awk -v a="$ua" -v b="$ub" -v n="$un" \
            'BEGIN { printf "A %.4f  B %.4f  nginx %.4f  A/ngx %.3f  B/ngx %.3f  B/A %.3f", a, b, n, a / n, b / n, b / a }')
        echo "-P $p $cmd: $line; req/s A $(med "$p" "$cmd" A rps) B $(med "$p" "$cmd" B rps) nginx $(med "$p" "$cmd" nginx rps)"
        for t in tcp lt et; do
            [ -n "${PORT[$t]:-}" ] || continue
            ut=$(med "$p" "$cmd" "$t" us)
            case $t in tcp) lb="tcp (B, protocol = tcp)" ;; lt) lb="relay, level-triggered" ;; et) lb="relay, edge-triggered" ;; esac
            echo "   $lb $ut us, $(awk -v a="$ut" -v n="$un" 'BEGIN { printf "%.3f", a / n }')x nginx; req/s $(med "$p" "$cmd" "$t" rps)"
        done
        if [ "${AB_SYSCALLS:-0}" = 1 ]; then
            for t in "${TARGETS[@]}"; do
                printf '   %-5s' "$t"
                for key in sys read recvfrom write writev epoll_wait epoll_ctl cs; do
                    printf ' %s=%s' "$key" "$(med "$p" "$cmd" "$t" "$key")"
                done
                echo
            done
        fi
    done
done
