#!/bin/sh
# The cost of the Redis Cluster store path against the single-Redis one:
# redis-benchmark INCR through sluice with one strict store limit (every
# request one EVALSHA, lease off), the store a single redis-server or a
# three-master cluster; rounds interleaved, medians printed. BASE=<path to
# an older build/sluice> adds that binary against the single Redis.
#   tests/bench/cluster_cost.sh [rounds] [requests]
set -e
ROUNDS=${1:-5}
N=${2:-50000}
BIN=${SLUICE_BIN:-build/sluice}
dir=$(mktemp -d /tmp/sluice-cluster-cost.XXXXXX)
pids=""
cleanup() { for p in $pids; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null; rm -rf "$dir"; }
trap cleanup EXIT INT TERM
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
redis() { # port [args]
    p=$1; shift
    redis-server --port "$p" --bind 127.0.0.1 --save '' --appendonly no --daemonize no \
        --protected-mode no --dir "$dir" "$@" >"$dir/redis-$p.log" 2>&1 &
    pids="$pids $!"
    for _ in $(seq 100); do redis-cli -p "$p" ping >/dev/null 2>&1 && return; sleep 0.05; done
    echo "redis $p did not start" >&2; exit 1
}
UP=$(port); ST=$(port); redis "$UP"; redis "$ST"
C=""; for i in 1 2 3; do
    p=$(port); redis "$p" --cluster-enabled yes --cluster-config-file "$dir/nodes-$p.conf" \
        --cluster-port "$(port)"
    C="$C 127.0.0.1:$p"
done
redis-cli --cluster create $C --cluster-replicas 0 --cluster-yes >"$dir/create.log" 2>&1
for _ in $(seq 200); do
    ok=1; for hp in $C; do redis-cli -p "${hp#*:}" cluster info | grep -q cluster_state:ok || ok=0; done
    [ $ok = 1 ] && break; sleep 0.05
done
SEEDS=$(echo $C | tr ' ' ',')
sluice() { # name binary url; sets SPORT (no subshell: the EXIT trap and $pids stay ours)
    p=$(port)
    cat >"$dir/$1.ini" <<INI
[sluice]
admin =
[store]
url = $3
timeout = 250ms
[listener r]
listen = 127.0.0.1:$p
upstream = 127.0.0.1:$UP
identity = client_ip
[limit g]
listener = r
rate = 10000000/s
commands = INCR
INI
    "$2" -c "$dir/$1.ini" -v warn 2>"$dir/$1.log" &
    pids="$pids $!"
    eval PID_$(echo $1 | tr a-z A-Z)=$!
    for _ in $(seq 100); do redis-cli -p "$p" ping >/dev/null 2>&1 && break; sleep 0.05; done
    SPORT=$p
}
sluice single "$BIN" "redis://127.0.0.1:$ST"; P_SINGLE=$SPORT
sluice cluster "$BIN" "redis-cluster://$SEEDS"; P_CLUSTER=$SPORT
names="single cluster"
if [ -n "$BASE" ]; then sluice base "$BASE" "redis://127.0.0.1:$ST"; P_BASE=$SPORT; names="base single cluster"; fi
sleep 1
cpu() { awk '{ print $14 + $15 }' "/proc/$1/stat"; } # user + system, in clock ticks
for n in $names; do eval pid=\$PID_$(echo $n | tr a-z A-Z); eval CPU0_$n=$(cpu "$pid"); done
rps() { redis-benchmark -p "$1" -t incr -n "$N" -c 50 -q 2>/dev/null | tr '\r' '\n' |
        awk '/INCR:/ { for (i = 1; i <= NF; i++) if ($i ~ /^[0-9.]+$/) { print $i; exit } }'; }
for r in $(seq "$ROUNDS"); do
    for n in $names; do
        eval p=\$P_$(echo $n | tr a-z A-Z)
        echo "$n $(rps "$p")" >>"$dir/results"
    done
done
echo "redis-benchmark INCR -c 50 -n $N through sluice, one strict store limit, $ROUNDS rounds interleaved:"
for n in $names; do
    med=$(awk -v n="$n" '$1 == n { print $2 }' "$dir/results" | sort -n |
          awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }')
    all=$(awk -v n="$n" '$1 == n { printf "%s ", $2 }' "$dir/results")
    eval pid=\$PID_$(echo $n | tr a-z A-Z); eval c0=\$CPU0_$n
    us=$(awk -v a="$c0" -v b="$(cpu "$pid")" -v n="$((ROUNDS * N))" -v hz="$(getconf CLK_TCK)" \
         'BEGIN { printf "%.1f", (b - a) / hz * 1e6 / n }')
    printf "  %-8s median %10s req/s, sluice CPU %s us/request   (%s)\n" "$n" "$med" "$us" "$all"
done
