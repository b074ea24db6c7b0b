#!/usr/bin/env bash
# Head to head: a pooled sluice listener (workers = W, upstream_pool = N)
# against twemproxy (server_connections TW), each in front of a Redis of its
# own (SHARED=1: both in front of one Redis, as the make bench rows are), in
# interleaved rounds of redis-benchmark -P 1 whose order rotates.
# Per run: req/s, p50 and p99 (redis-benchmark --csv), the proxy's and its
# Redis's CPU time per request (runtime from schedstat, every thread and
# worker process), and the requests Redis served per read of a socket
# (INFO stats total_commands_processed / total_reads_processed: the batch
# size the proxy achieves). Prints medians, spreads (min-max) and the median
# of the per-round ratios. Also how often the proxy and Redis slept per
# request (voluntary context switches) and how long the proxy waited for a
# CPU while runnable (schedstat): other work on the machine shows there;
# and the load generator's own CPU per request (bash's time).
# Ports 7490-7496 (POOL_H2H_BASE).
#
#   tests/bench/pool_vs_twem.sh                      # 9 rounds, 400 clients, N = 4
#   ROUNDS=5 C=50 N=2 tests/bench/pool_vs_twem.sh
#   PIN=1 tests/bench/pool_vs_twem.sh                # the pinned placement below
#   PIN=b0,p1,r1 tests/bench/pool_vs_twem.sh         # bench on CPU 0, proxies and Redis on 1
#   N=1 ...            # like for like: one upstream connection each
#   SYSCALLS=1 ...     # afterwards one run per proxy under perf stat: system calls per request
#   SLUICE_BIN2=/tmp/old/sluice ...   # a second sluice build beside (A/B), Redis of its own
#   SLUICE_BIN2=build/sluice WORKERS2=2 ...  # the second with other workers / N (N2=)
#   BATCH_WAIT=0 BATCH_WAIT2=100us ...  # upstream_pool_batch_wait of the first / second
#
# Pinning (PIN=bX,pY,rZ: taskset CPU lists for the load generator, the
# proxies and the Redis servers; PIN=1 is b0,p0,r1): on a 2-core VM
# unpinned throughput swings with where the scheduler puts the proxy. With
# the load generator and the proxy on one CPU and Redis alone on the other,
# runs repeated within about 10 % in one series (the proxy's CPU per
# request then decides), not in others; no placement holds while much other
# work loads the machine: read the CPU, batch, sleep and run-queue columns
# (docs/benchmarks.md, "Pooled against twemproxy, head to head").
set -u
B=${POOL_H2H_BASE:-7490}
BIN=${SLUICE_BIN:-build/sluice}
ROUNDS=${ROUNDS:-9}; C=${C:-400}; N=${N:-4}; NREQ=${NREQ:-200000}
W_SL=${WORKERS:-1}; TW=${TW:-1}; TESTS=${TESTS:-get set}
SHARED=${SHARED:-0}; PIN=${PIN:-}; SYSCALLS=${SYSCALLS:-0}
[ "$PIN" = 1 ] && PIN=b0,p0,r1
PB=""; PP=""; PR=""
if [ -n "$PIN" ]; then
    for f in ${PIN//,/ }; do
        case "$f" in
            b*) PB="taskset -c ${f#b}" ;;
            p*) PP="taskset -c ${f#p}" ;;
            r*) PR="taskset -c ${f#r}" ;;
            *) echo "PIN: b<cpus>,p<cpus>,r<cpus>" >&2; exit 2 ;;
        esac
    done
fi
RS=$B; RT=$((B+1)); [ "$SHARED" = 1 ] && RT=$B
BIN2=${SLUICE_BIN2:-}; R2=$((B+5)); [ "$SHARED" = 1 ] && R2=$B
W=$(mktemp -d /tmp/sluice-h2h.XXXXXX)
SP=""; SP2=""
cleanup() {
    kill $SP $SP2 $(cat $W/nut.pid 2>/dev/null) 2>/dev/null
    for p in $B $((B+1)) $((B+5)); do redis-cli -p $p shutdown nosave >/dev/null 2>&1; done
    [ -n "${SLUICE_LOG:-}" ] && cat $W/s.log > "$SLUICE_LOG"
    rm -rf $W
}
trap cleanup EXIT
for p in $RS $RT $([ -n "$BIN2" ] && echo $R2); do
    $PR redis-server --port $p --save '' --appendonly no --maxclients 20000 \
        --pidfile $W/redis.$p.pid --daemonize yes >/dev/null
done
printf '[sluice]\nworkers = %s\nlog_level = %s\nadmin = off\n[store]\nurl = local\n[listener p]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nupstream_pool = %d\nmax_connections = 20000\n' \
    "$W_SL" "${LOG_LEVEL:-info}" $((B+2)) $RS "$N" > $W/s.ini
[ -n "${BATCH_WAIT:-}" ] && echo "upstream_pool_batch_wait = $BATCH_WAIT" >> $W/s.ini
$PP "$BIN" -c $W/s.ini 2>$W/s.log & SP=$!
if [ -n "$BIN2" ]; then
    sed -e "s/^listen = .*/listen = 127.0.0.1:$((B+6))/" -e "s/^upstream = .*/upstream = 127.0.0.1:$R2/" \
        -e "s/^workers = .*/workers = ${WORKERS2:-$W_SL}/" -e "s/^upstream_pool = .*/upstream_pool = ${N2:-$N}/" \
        $W/s.ini > $W/s2.ini
    [ -n "${BATCH_WAIT2:-}" ] && { grep -v '^upstream_pool_batch_wait' $W/s2.ini > $W/s2.tmp
        echo "upstream_pool_batch_wait = $BATCH_WAIT2" >> $W/s2.tmp; mv $W/s2.tmp $W/s2.ini; }
    $PP "$BIN2" -c $W/s2.ini 2>$W/s2.log & SP2=$!
fi
cat > $W/nut.yml <<Y
bench:
  listen: 127.0.0.1:$((B+3))
  hash: fnv1a_64
  distribution: ketama
  redis: true
  auto_eject_hosts: false
  timeout: 60000
  server_connections: $TW
  servers:
   - 127.0.0.1:$RT:1
Y
$PP nutcracker -c $W/nut.yml -s $((B+4)) -a 127.0.0.1 -o $W/nut.out -p $W/nut.pid -d
for _ in $(seq 1 50); do
    [ -s $W/nut.pid ] && [ -s $W/redis.$RS.pid ] && [ -s $W/redis.$RT.pid ] &&
        redis-cli -p $((B+2)) ping >/dev/null 2>&1 && redis-cli -p $((B+3)) ping >/dev/null 2>&1 &&
        { [ -z "$BIN2" ] || redis-cli -p $((B+6)) ping >/dev/null 2>&1; } && break
    sleep 0.1
done
NP=$(cat $W/nut.pid); RSP=$(cat $W/redis.$RS.pid); RTP=$(cat $W/redis.$RT.pid)
# the targets: name port proxy-pid redis-port redis-pid
TG=("sluice $((B+2)) $SP $RS $RSP" "twem $((B+3)) $NP $RT $RTP")
[ -n "$BIN2" ] && TG+=("sluice2 $((B+6)) $SP2 $R2 $(cat $W/redis.$R2.pid)")

# runtime in ns of <pid>, its threads and its child processes (schedstat);
# with <2> the time they were runnable but waited for a CPU instead
cpu_ns() {
    local t=0 v w p f
    for p in "$1" $(pgrep -P "$1" 2>/dev/null); do
        for f in /proc/"$p"/task/*/schedstat; do
            v=0; w=0; read -r v w _ < "$f" 2>/dev/null
            [ "${2:-}" = wait ] && v=$w
            t=$((t + ${v:-0}))
        done
    done
    echo $t
}
# times <pid> (its threads, its child processes) went to sleep: each costs a
# wake-up on the way back, across CPUs an interrupt to another (virtual) CPU
sleeps() {
    local t=0 v p f
    for p in "$1" $(pgrep -P "$1" 2>/dev/null); do
        for f in /proc/"$p"/task/*/status; do
            v=$(awk '$1 == "voluntary_ctxt_switches:" { print $2 }' "$f" 2>/dev/null)
            t=$((t + ${v:-0}))
        done
    done
    echo $t
}
# "commands reads" served so far by the Redis at port <p>
rstats() {
    redis-cli -p "$1" info stats | tr -d '\r' |
        awk -F: '$1 == "total_commands_processed" { c = $2 } $1 == "total_reads_processed" { r = $2 }
                 END { print c, r }'
}
# one run: name port proxy-pid redis-port redis-pid test
run() {
    local c0 c1 r0 r1 s0 s1 out w0 w1 v0 v1 up q0 q1
    echo "# $(date +%T.%N | cut -c1-12) $1"
    w0=$(sleeps "$3"); v0=$(sleeps "$5"); q0=$(cpu_ns "$3" wait)
    c0=$(cpu_ns "$3"); r0=$(cpu_ns "$5"); s0=$(rstats "$4")
    # the load generator's own CPU (user + system, ms) from bash's time
    local TIMEFORMAT='%3U %3S' bt
    bt=$( { time $PB redis-benchmark -p "$2" -c "$C" -n "$NREQ" -t "$6" -P 1 --csv \
            >$W/bench.csv 2>/dev/null; } 2>&1 )
    out=$(cat $W/bench.csv)
    c1=$(cpu_ns "$3"); r1=$(cpu_ns "$5"); s1=$(rstats "$4")
    w1=$(sleeps "$3"); v1=$(sleeps "$5"); q1=$(cpu_ns "$3" wait)
    # the proxy's upstream connections (less this one; SHARED=1: every proxy's)
    up=$(redis-cli -p "$4" info clients | tr -d '\r' | awk -F: '$1 == "connected_clients" { print $2 - 1 }')
    # "test","rps","avg","min","p50","p95","p99","max"
    echo "$out" | awk -F, -v n="$1" -v t="$6" -v c0="$c0" -v c1="$c1" -v r0="$r0" -v r1="$r1" \
        -v s0="$s0" -v s1="$s1" -v nreq="$NREQ" -v w="$((w1 - w0))" -v v="$((v1 - v0))" -v up="$up" -v q="$((q1 - q0))" -v bt="$bt" 'NR == 2 {
            gsub(/"/, ""); split(s0, a, " "); split(s1, b, " ")
            split(bt, u, " ")
            printf "%s %s %d %s %s %.3f %.3f %.2f %.3f %.3f %d %.3f %.3f\n", n, t, $2, $5, $7,
                (c1 - c0) / 1e3 / nreq, (r1 - r0) / 1e3 / nreq,
                ((b[2] - a[2]) > 0 ? (b[1] - a[1]) / (b[2] - a[2]) : 0), w / nreq, v / nreq, up, q / 1e3 / nreq, (u[1] + u[2]) * 1e6 / nreq }'
}
echo "# C=$C N=$N workers=$W_SL twemproxy server_connections=$TW SHARED=$SHARED PIN=${PIN:-none} NREQ=$NREQ ROUNDS=$ROUNDS" >&2
echo "# name test req/s p50_ms p99_ms proxy_us/req redis_us/req req/redis_read proxy_sleeps/req redis_sleeps/req upstream_conns proxy_runq_us/req bench_us/req" >&2
# the order rotates each round (and reverses every other): whoever runs
# first may find the scheduler's placement better or worse
nt=${#TG[@]}
for r in $(seq 1 "$ROUNDS"); do
    for t in $TESTS; do
        for i in $(seq 0 $((nt - 1))); do
            j=$(( (i + r) % nt )); [ $((r % 2)) -eq 0 ] && j=$(( nt - 1 - j ))
            run ${TG[$j]} $t
        done
    done
done | tee $W/out >&2
python3 - "$W/out" "$C" "$N" "$W_SL" "$TW" <<'PY'
import statistics as st, sys
rows = [l.split() for l in open(sys.argv[1]) if len(l.split()) == 13]
C, N, WS, TW = sys.argv[2:6]
def col(name, t, i):
    return [float(x[i]) for x in rows if x[0] == name and x[1] == t]
names = [n for n in ("sluice", "sluice2", "twem") if any(x[0] == n for x in rows)]
for t in ("get", "set"):
    if not col("sluice", t, 2) or not col("twem", t, 2):
        continue
    print("-c %s %s (%d rounds): sluice pooled (workers %s, N %s) vs twemproxy (%s conn)"
          % (C, t, len(col("sluice", t, 2)), WS, N, TW))
    for i, what, fmt in ((2, "req/s", "%.0f"), (3, "p50 ms", "%.3f"), (4, "p99 ms", "%.3f"),
                         (5, "proxy us/req", "%.2f"), (6, "redis us/req", "%.2f"),
                         (7, "req/redis read", "%.1f"), (8, "proxy sleeps/r", "%.3f"),
                         (9, "redis sleeps/r", "%.3f"), (10, "upstream conns", "%.0f"),
                         (11, "proxy runq us/r", "%.2f"), (12, "bench us/req", "%.2f")):
        out = "  %-15s" % what
        for n in names:
            a = col(n, t, i)
            out += ("  %s " + fmt + " [" + fmt + "-" + fmt + "]") % (n, st.median(a), min(a), max(a))
        print(out)
    for n in names[:-1]:
        rat = [a / b for a, b in zip(col(n, t, 2), col("twem", t, 2))]
        print("  %s/twem req/s median %.2fx [%.2f-%.2f], ahead in %d of %d"
              % (n, st.median(rat), min(rat), max(rat), sum(1 for x in rat if x > 1), len(rat)))
    if "sluice2" in names:
        rat = [a / b for a, b in zip(col("sluice", t, 2), col("sluice2", t, 2))]
        print("  sluice/sluice2 req/s median %.2fx [%.2f-%.2f]" % (st.median(rat), min(rat), max(rat)))
PY
if [ "$SYSCALLS" = 1 ]; then
    ev=syscalls:sys_enter_read,syscalls:sys_enter_write,syscalls:sys_enter_readv,syscalls:sys_enter_writev,syscalls:sys_enter_epoll_wait,syscalls:sys_enter_epoll_ctl
    for x in "sluice $((B+2)) $SP" "twem $((B+3)) $NP"; do
        set -- $x
        pids=$(echo $3 $(pgrep -P $3) | tr ' ' ,)
        # counts <pids> for as long as the benchmark runs
        perf stat -x, -e $ev -p $pids -o $W/perf.$1 -- \
            $PB redis-benchmark -p $2 -c "$C" -n "$NREQ" -t get -P 1 -q >/dev/null 2>&1
        awk -F, -v n="$1" -v nreq="$NREQ" '$3 ~ /syscalls/ { sub("syscalls:sys_enter_", "", $3); s = s sprintf(" %s %.3f", $3, $1 / nreq) }
            END { print n " syscalls per GET:" s }' $W/perf.$1
    done
fi
