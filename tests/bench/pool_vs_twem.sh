#!/usr/bin/env bash
# Head to head: a pooled sluice listener (workers = 1, upstream_pool = N)
# against twemproxy (server_connections 1), each in front of a Redis of its
# own, in interleaved rounds of redis-benchmark -P 1; prints the medians and
# the median of the per-round ratios. Ports 7490-7494 (POOL_H2H_BASE).
#   tests/bench/pool_vs_twem.sh            # 9 rounds, 400 clients, N = 4
#   ROUNDS=5 C=50 N=2 tests/bench/pool_vs_twem.sh
set -u
B=${POOL_H2H_BASE:-7490}
BIN=${SLUICE_BIN:-build/sluice}
ROUNDS=${ROUNDS:-9}; C=${C:-400}; N=${N:-4}; NREQ=${NREQ:-200000}
W=$(mktemp -d /tmp/sluice-h2h.XXXXXX)
trap 'kill $SP $(cat $W/nut.pid 2>/dev/null) 2>/dev/null; redis-cli -p $B shutdown nosave >/dev/null 2>&1; redis-cli -p $((B+1)) shutdown nosave >/dev/null 2>&1; rm -rf $W' EXIT
redis-server --port $B --save '' --appendonly no --daemonize yes >/dev/null
redis-server --port $((B+1)) --save '' --appendonly no --daemonize yes >/dev/null
printf '[sluice]\nworkers = 1\nadmin = off\n[store]\nurl = local\n[listener p]\nlisten = 127.0.0.1:%d\nupstream = 127.0.0.1:%d\nupstream_pool = %d\n' \
    $((B+2)) $B "$N" > $W/s.ini
"$BIN" -c $W/s.ini 2>$W/s.log & SP=$!
cat > $W/nut.yml <<Y
bench:
  listen: 127.0.0.1:$((B+3))
  redis: true
  auto_eject_hosts: false
  timeout: 60000
  server_connections: 1
  servers:
   - 127.0.0.1:$((B+1)):1
Y
nutcracker -c $W/nut.yml -s $((B+4)) -a 127.0.0.1 -o $W/nut.out -p $W/nut.pid -d
sleep 1
# the order alternates each round: on a shared 2-core machine whoever runs
# first may find the scheduler's placement better or worse
for r in $(seq 1 "$ROUNDS"); do
    order="$((B+2)) $((B+3))"; [ $((r % 2)) -eq 0 ] && order="$((B+3)) $((B+2))"
    for t in get set; do for p in $order; do
    rps=$(redis-benchmark -p $p -c "$C" -n "$NREQ" -t $t -P 1 --csv 2>/dev/null |
          awk -F'","' 'NR==2 { gsub(/"/, "", $2); print int($2) }')
    echo "$p $t $rps"
done; done; done > $W/out
python3 - "$W/out" $((B+2)) $((B+3)) "$C" "$N" <<'PY'
import statistics as st, sys
rows = [l.split() for l in open(sys.argv[1]) if len(l.split()) == 3]
for t in ("get", "set"):
    s = [float(x[2]) for x in rows if x[0] == sys.argv[2] and x[1] == t]
    w = [float(x[2]) for x in rows if x[0] == sys.argv[3] and x[1] == t]
    if s and w:
        print("-c %s %s: sluice pooled (N=%s) %.0f, twemproxy %.0f req/s; median of ratios %.2fx"
              % (sys.argv[4], t, sys.argv[5], st.median(s), st.median(w),
                 st.median([a / b for a, b in zip(s, w)])))
PY
