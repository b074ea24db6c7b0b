#!/usr/bin/env bash
# A reload under load: clients send GETs through a listener with an
# in-process limit that binds (rate RATE/s, burst BURST) while sluice gets
# SIGHUP every second, alternately with the same file and with a file whose
# only change is another limit. /metrics is read before, every 0.3 s during
# and after; the script checks that
#   - no counter ever goes back (every *_total series, scrape to scrape),
#   - every reload succeeded (sluice_reloads_total{result="success"}),
#   - the requests allowed stay within what the bucket allows over the run
#     (RATE x seconds + BURST, plus a margin of one second's rate): a reload
#     that refilled the bucket would let BURST more through each time,
#   - the clients saw no error other than the limit's.
# Prints the counters before and after.
#
#   tests/bench/reload_load.sh [SECONDS] [RELOADS_PER_SECOND]   # 10, 1
set -u
T=${1:-10}; HZ=${2:-1}
BIN=${SLUICE_BIN:-build/sluice}
RATE=${RATE:-2000}; BURST=${BURST:-4000}
P0=${RL_PORT:-19560}
UP=$P0; LP=$((P0 + 1)); AP=$((P0 + 2))
DIR=$(mktemp -d /tmp/sluice-rl.XXXXXX)
cleanup() {
    kill "${SP:-}" "${LOADS[@]:-}" 2>/dev/null
    redis-cli -p "$UP" shutdown nosave >/dev/null 2>&1
    wait 2>/dev/null; rm -rf "$DIR"
}
trap cleanup EXIT INT TERM
redis-server --port "$UP" --save '' --appendonly no --daemonize yes >/dev/null
conf() { # extra-limit(0|1)
    printf '[sluice]\nworkers = 1\nadmin = 127.0.0.1:%s\n[store]\nurl = local\n' "$AP"
    printf '[listener r]\nlisten = 127.0.0.1:%s\nupstream = 127.0.0.1:%s\n' "$LP" "$UP"
    printf '[limit gets]\nlistener = r\ncommands = GET\nrate = %s/s\nburst = %s\nscope = global\n' "$RATE" "$BURST"
    [ "$1" = 1 ] && printf '[limit other]\nlistener = r\ncommands = SET\nrate = 5/s\n'
    return 0
}
conf 0 > "$DIR/a.ini"; conf 1 > "$DIR/b.ini"; cp "$DIR/a.ini" "$DIR/s.ini"
"$BIN" -c "$DIR/s.ini" > "$DIR/s.log" 2>&1 & SP=$!
for _ in $(seq 1 50); do redis-cli -p "$LP" ping >/dev/null 2>&1 && break; sleep 0.1; done
scrape() { curl -s "http://127.0.0.1:$AP/metrics"; }
scrape > "$DIR/m.0"
# load: redis-cli repeating GET (it goes on past error replies, where
# redis-benchmark stops at the first); what it printed is tallied at the end
LOADS=()
for i in 1 2 3; do
    timeout $((T + 5)) redis-cli -p "$LP" -r 1000000000 GET k > "$DIR/load.$i" 2>&1 & LOADS+=($!)
done
t0=$(date +%s.%N); k=0; s=1; next=$(echo "$t0 + 1 / $HZ" | bc -l)
while :; do
    now=$(date +%s.%N)
    (( $(echo "$now - $t0 >= $T" | bc) )) && break
    if (( $(echo "$now >= $next" | bc) )); then
        k=$((k + 1)); next=$(echo "$next + 1 / $HZ" | bc -l)
        if [ $((k % 2)) = 1 ]; then cp "$DIR/b.ini" "$DIR/s.ini"; else cp "$DIR/a.ini" "$DIR/s.ini"; fi
        kill -HUP "$SP"
    fi
    scrape > "$DIR/m.$s"; s=$((s + 1))
    sleep 0.3
done
kill "${LOADS[@]}" 2>/dev/null; wait "${LOADS[@]}" 2>/dev/null
t1=$(date +%s.%N)
sleep 0.5; scrape > "$DIR/m.$s"
python3 - "$DIR" "$s" "$k" "$RATE" "$BURST" "$t0" "$t1" <<'PY'
import sys, re
d, n, k, rate, burst, t0, t1 = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), float(sys.argv[6]), float(sys.argv[7])
def load(i):
    m = {}
    for l in open("%s/m.%d" % (d, i)):
        if l.startswith("#") or not l.strip():
            continue
        k_, v = l.rsplit(" ", 1)
        m[k_] = float(v)
    return m
snaps = [load(i) for i in range(n + 1)]
bad = []
for i in range(1, len(snaps)):
    for key, v in snaps[i - 1].items():
        name = key.split("{")[0]
        if name.endswith("_total") and key in snaps[i] and snaps[i][key] < v:
            bad.append("%s: %g -> %g (scrape %d)" % (key, v, snaps[i][key], i))
a, b = snaps[0], snaps[-1]
def get(m, name, **lab):
    s = 0
    for key, v in m.items():
        if key.split("{")[0] == name and all('%s="%s"' % kv in key for kv in lab.items()):
            s += v
    return s
ok_reloads = get(b, "sluice_reloads_total", result="success") - get(a, "sluice_reloads_total", result="success")
failed = get(b, "sluice_reloads_total", result="failure") - get(a, "sluice_reloads_total", result="failure")
allowed = get(b, "sluice_limit_decisions_total", limit="gets", outcome="allowed") - get(a, "sluice_limit_decisions_total", limit="gets", outcome="allowed")
rejected = get(b, "sluice_limit_decisions_total", limit="gets", outcome="rejected") - get(a, "sluice_limit_decisions_total", limit="gets", outcome="rejected")
secs = t1 - t0 + 0.5
bound = rate * secs + burst + rate
print("reloads sent %d, ok %d, failed %d over %.1f s, %d scrapes" % (k, ok_reloads, failed, t1 - t0, n + 1))
for name in ("sluice_requests_total", "sluice_requests_rejected_total", "sluice_limit_decisions_total", "sluice_reloads_total"):
    print("  %-36s before %12.0f  after %12.0f" % (name, get(a, name), get(b, name)))
print("limit gets: allowed %d, rejected %d; bucket bound %.0f (rate x s + burst + 1 s); a refill per reload would allow up to %.0f"
      % (allowed, rejected, bound, bound + k * burst))
fail = False
if bad:
    print("COUNTERS WENT BACK:"); [print("  " + x) for x in bad[:20]]; fail = True
if ok_reloads < k or failed:
    print("RELOADS: %d sent, %d ok, %d failed" % (k, ok_reloads, failed)); fail = True
if allowed > bound:
    print("ALLOWED %d > bound %.0f: the bucket was refilled" % (allowed, bound)); fail = True
if rejected == 0:
    print("the limit never bound: raise the load or lower RATE"); fail = True
print("FAIL" if fail else "PASS: no counter went back, every reload ok, the bucket kept across reloads")
sys.exit(1 if fail else 0)
PY
rc=$?
# what the clients saw: redis-cli prints a line per reply (empty for the nil
# of GET k, k never set) and the error text of a refusal on stderr besides:
# THROTTLED is the limit; anything else is an error a reload caused
cat "$DIR"/load.* | awk '$0 == "" { nil++; next } /^THROTTLED/ { thr++; next } { other++; if (other <= 5) print "client saw: " $0 }
    END { printf "clients: %d replies, %d of them THROTTLED, %d other errors\n", nil, thr, other; exit other > 0 }' || rc=1
exit $rc
