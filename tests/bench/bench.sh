#!/usr/bin/env bash
# sluice benchmark: `make bench` (run from the repository root).
#
# Measures, on this machine, in one run:
#   * redis-benchmark -c 50 -t get,set at -P 1 and -P 16 against Redis directly,
#     through sluice (resp listener), HAProxy (mode tcp) and nutcracker;
#   * one 1 GiB TCP transfer directly, through sluice (tcp listener) and through
#     nginx's stream module;
#   * RSS per idle connection with 5,000 idle clients (sluice; HAProxy, nutcracker
#     and Redis itself for reference);
#   * HTTP: wrk -t2 -c50 (keep-alive) against nginx directly, through sluice
#     (no limit; an always-allowing limit, local and in a quota store with a
#     lease), HAProxy (mode http) and nginx proxy_pass: requests/s, p99 latency,
#     proxy CPU time per request (tests/bench/http.sh). BENCH_ONLY=http runs
#     only these rows;
#   * HTTP one-request connections (wrk -H 'Connection: close'): sluice vs
#     nginx proxy_pass with an upstream keepalive block, with the connections
#     the upstream accepted per request (tests/bench/http.sh);
#   * pooling (tests/bench/pool.sh): redis-benchmark -P 1 with 50 and 400
#     clients and -P 16 against Redis, sluice 1:1, sluice pooled (when the
#     build accepts `upstream_pool`), HAProxy, nginx stream and twemproxy,
#     with p99 and the upstream Redis's and the proxy's CPU per request; the
#     upstream connections with 400 active and 5,000 idle clients; 10,000
#     clients in front of a Redis with maxclients 1000. BENCH_ONLY=pool runs
#     only these rows;
#   * TLS: redis-benchmark --tls at -P 1 and -P 16 against Redis's TLS port,
#     through sluice and HAProxy (TLS in, TLS out), and RSS per idle TLS
#     connection (tests/bench/tls.sh). BENCH_ONLY=tls runs only these rows.
# Rounds are interleaved (every target once per round), the table shows medians
# and ratios to direct. See docs/benchmarks.md for the methodology and knobs.
#
# Everything listens on 127.0.0.1 only; every process started here is stopped
# on exit, also on failure or Ctrl-C.

set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT" || exit 2

SLUICE_BIN=${SLUICE_BIN:-build/sluice}
ROUNDS=${BENCH_ROUNDS:-5}
TCP_ROUNDS=${BENCH_TCP_ROUNDS:-3}
CLIENTS=${BENCH_CLIENTS:-50}
N_P1=${BENCH_N_P1:-50000}
N_P16=${BENCH_N_P16:-500000}
TCP_BYTES=${BENCH_TCP_BYTES:-1073741824}
IDLE_CONNS=${BENCH_IDLE_CONNS:-5000}
RUN_TIMEOUT=${BENCH_RUN_TIMEOUT:-120}
NGINX_WORKERS=${BENCH_NGINX_WORKERS:-1}
HAPROXY_NBTHREAD=${BENCH_HAPROXY_NBTHREAD:-}
SLUICE_LIMIT=${BENCH_SLUICE_LIMIT:-0}
SLUICE_WORKERS=${BENCH_SLUICE_WORKERS:-$(nproc)}
STRICT=${BENCH_STRICT:-0}
RESULTS_OUT=${BENCH_OUT:-build/bench/results.txt}
ONLY=${BENCH_ONLY:-}
case "$ONLY" in ""|all|http|tls|pool) ;; *) echo "bench: BENCH_ONLY must be http, tls or pool (or empty: everything)" >&2; exit 2 ;; esac

BENCH_BIN=build/bench
N_STRICT=${BENCH_N_STRICT:-300000}
TARGETS_RESP=(direct sluice haproxy nutcracker relay)
# sluice with workers (one loop per process): a second sluice, measured in the
# same rounds, reported in its own rows
[ "$SLUICE_WORKERS" -gt 1 ] 2>/dev/null && TARGETS_RESP=(direct sluice sluicew haproxy nutcracker relay)
# relay (tests/bench/relay.c): a 1:1 proxy that only reads and writes, in as
# many processes as sluice has workers: the floor of any 1:1 proxy here
TARGETS_TCP=(direct sluice nginx)
NGINX_STREAM_SO=/usr/lib/nginx/modules/ngx_stream_module.so

log() { printf '%s bench: %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 2; }

# ------------------------------------------------------------ processes ----

WORK=$(mktemp -d /tmp/sluice-bench.XXXXXX) || exit 2
declare -A PID_OF=()     # name -> pid
declare -a ALL_PIDS=()

stop_pid() { # pid: TERM, wait up to 3 s, then KILL
    local p=$1
    [ -n "$p" ] || return 0
    kill "$p" 2>/dev/null || { wait "$p" 2>/dev/null; return 0; }
    for _ in $(seq 1 30); do
        kill -0 "$p" 2>/dev/null || break
        sleep 0.1
    done
    kill -9 "$p" 2>/dev/null
    wait "$p" 2>/dev/null
    return 0
}

stop() { # name
    local p=${PID_OF[$1]:-}
    unset "PID_OF[$1]"
    stop_pid "$p"
}

cleanup() {
    local p
    for p in "${ALL_PIDS[@]}"; do
        kill "$p" 2>/dev/null
    done
    for p in "${ALL_PIDS[@]}"; do
        stop_pid "$p"
    done
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'log "interrupted"; exit 130' INT TERM HUP

alive() { local p=${PID_OF[$1]:-}; [ -n "$p" ] && kill -0 "$p" 2>/dev/null; }

spawn() { # name logfile cmd... (runs in the background, stdin /dev/null)
    local name=$1 logf=$2
    shift 2
    "$@" </dev/null >"$logf" 2>&1 &
    PID_OF[$name]=$!
    ALL_PIDS+=($!)
}

declare -A USED_PORT=()
# A port that nothing uses, as a listener or as the local end of a connection,
# picked below the kernel's ephemeral range (so that the many client
# connections of a run cannot take it between the check and the bind).
port_in_use() {
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    command -v ss >/dev/null && [ -n "$(ss -Htan "sport = :$1" 2>/dev/null)" ] && return 0
    return 1
}
free_port() {
    local lo=10000 hi eph_lo eph_hi p
    read -r eph_lo eph_hi < /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || { eph_lo=32768; eph_hi=60999; }
    hi=$((eph_lo - 1))
    if [ "$hi" -lt $((lo + 1000)) ]; then lo=$((eph_hi + 1)); hi=65535; fi
    for _ in $(seq 1 500); do
        p=$(( lo + (RANDOM * 32768 + RANDOM) % (hi - lo + 1) ))
        [ -n "${USED_PORT[$p]:-}" ] && continue
        if ! port_in_use "$p"; then
            USED_PORT[$p]=1
            echo "$p"
            return 0
        fi
    done
    die "no free port"
}

wait_ping() { # port [tenths] [pid: give up as soon as it exits]
    for _ in $(seq 1 "${2:-50}"); do
        [ "$(timeout 2 redis-cli -h 127.0.0.1 -p "$1" ping 2>/dev/null)" = PONG ] && return 0
        [ -n "${3:-}" ] && ! kill -0 "$3" 2>/dev/null && return 1
        sleep 0.1
    done
    return 1
}

wait_tcp() { # port [tenths]
    for _ in $(seq 1 "${2:-50}"); do
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
        sleep 0.1
    done
    return 1
}

rss_bytes() { # pid -> VmRSS in bytes (sum over the process only)
    awk '/^VmRSS:/ { print $2 * 1024; found = 1 } END { if (!found) print "" }' "/proc/$1/status" 2>/dev/null
}

have() { command -v "$1" >/dev/null 2>&1; }

RAW="$WORK/raw.tsv"   # key <TAB> value, one line per successful measurement
: > "$RAW"
FAILS="$WORK/fails.txt"
: > "$FAILS"

# ---------------------------------------------------------------- table ----

median() { # key -> median of the values recorded for it ("" if none)
    awk -F'\t' -v k="$1" '$1 == k { print $2 }' "$RAW" | sort -g |
        awk '{ a[NR] = $1 } END { if (NR == 0) exit; if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2 }'
}
count() { awk -F'\t' -v k="$1" '$1 == k' "$RAW" | wc -l; }
ratio() { # a b -> a/b with 2 decimals, or ""
    [ -n "$1" ] && [ -n "$2" ] && awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b }'
}
fmt() { # value decimals -> formatted or n/a
    if [ -z "$1" ]; then echo "n/a"; else awk -v v="$1" -v d="$2" 'BEGIN { printf "%.*f", d, v }'; fi
}
ge() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a + 0 >= b + 0) }'; }

mark() { # condition result (0 met / 1 not met / empty: not measured) -> PASS/MISS/n/a
    case "$1" in
        0) echo PASS ;;
        1) echo MISS ;;
        *) echo "n/a" ;;
    esac
}

resp_target() { # P ratio-to-direct ratio-to-haproxy -> the RESP target column
    local res=""
    if [ "$1" = 1 ]; then
        [ -n "$2" ] && { ge "$2" 0.70; res=$?; }
        echo ">=0.70x direct: $(mark "$res")"
    else
        if [ -n "$2" ] && [ -n "$3" ]; then
            res=1; ge "$2" 0.75 && ge "$3" 1.10 && res=0
        fi
        echo ">=0.75x direct, >=1.1x haproxy: $(mark "$res")"
    fi
}


# ---------------------------------------------------------------- setup ----

ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)" 2>/dev/null
NOFILE=$(ulimit -n)
[ "$NOFILE" = unlimited ] && NOFILE=1048576
if [ "$NOFILE" -lt $((IDLE_CONNS * 2 + 200)) ]; then
    log "warning: open-file limit $NOFILE is low for $IDLE_CONNS idle connections"
fi
# HAProxy needs about 2 descriptors per connection and refuses to start when
# maxconn does not fit the limit: 20000, or what the limit allows.
HAPROXY_MAXCONN=$(( (NOFILE - 100) / 2 ))
[ "$HAPROXY_MAXCONN" -gt 20000 ] && HAPROXY_MAXCONN=20000

have redis-server || die "redis-server is not installed"
have redis-benchmark || die "redis-benchmark is not installed (redis-tools)"
have redis-cli || die "redis-cli is not installed (redis-tools)"
have cc || die "a C compiler (cc) is needed for the helpers"

mkdir -p "$BENCH_BIN"
for h in pump idle relay; do
    if [ ! -x "$BENCH_BIN/$h" ] || [ "tests/bench/$h.c" -nt "$BENCH_BIN/$h" ]; then
        cc -O2 -Wall -Wextra -o "$BENCH_BIN/$h" "tests/bench/$h.c" || die "cannot compile tests/bench/$h.c"
    fi
done

HAVE_SLUICE=1
[ -x "$SLUICE_BIN" ] || { log "warning: $SLUICE_BIN not found: sluice column will be n/a"; HAVE_SLUICE=0; }
HAVE_HAPROXY=1; have haproxy || { log "warning: haproxy not installed: n/a"; HAVE_HAPROXY=0; }
HAVE_NUTCRACKER=1; have nutcracker || { log "warning: nutcracker not installed: n/a"; HAVE_NUTCRACKER=0; }
HAVE_NGINX=1
{ have nginx && [ -e "$NGINX_STREAM_SO" ]; } || { log "warning: nginx or its stream module not installed: n/a"; HAVE_NGINX=0; }

# --- the report's end, shared by every kind of run
fails_notes() { # the runs left out of the medians, if any
    [ -s "$FAILS" ] || return 0
    echo "failed runs / notes (left out of the medians):"
    sed 's/^/  /' "$FAILS"
}

report_save() { # stdin: the report: shown, and kept with the raw figures in $RESULTS_OUT
    tee "$WORK/report.txt"
    mkdir -p "$(dirname "$RESULTS_OUT")"
    cp "$WORK/report.txt" "$RESULTS_OUT" 2>/dev/null
    cp "$RAW" "${RESULTS_OUT%.txt}.raw.tsv" 2>/dev/null
}

# --- HTTP rows: tests/bench/http.sh; alone with BENCH_ONLY=http
. tests/bench/http.sh
# --- TLS rows: tests/bench/tls.sh; alone with BENCH_ONLY=tls
. tests/bench/tls.sh
# --- pooling rows: tests/bench/pool.sh; alone with BENCH_ONLY=pool
. tests/bench/pool.sh
if [ "$ONLY" = pool ]; then
    pool_bench
    pool_report_only
    [ "$HAVE_SLUICE" = 1 ] || exit 1
    exit 0
fi
if [ "$ONLY" = tls ]; then
    tls_bench
    tls_report_only
    [ "$HAVE_SLUICE" = 1 ] || exit 1
    exit 0
fi
if [ "$ONLY" = http ]; then
    http_bench
    http_report_only
    [ "$HAVE_SLUICE" = 1 ] || exit 1
    exit 0
fi

# --- upstream Redis
REDIS_PORT=$(free_port)
start_redis() {
    spawn redis "$WORK/redis.log" redis-server --port "$REDIS_PORT" --bind 127.0.0.1 \
        --save '' --appendonly no --maxclients 20000 --daemonize no --dir "$WORK" \
        --logfile "$WORK/redis-server.log"
    wait_ping "$REDIS_PORT" 50 "${PID_OF[redis]}" || die "redis-server did not start (see its log)"
}
start_redis

# --- TCP sink (upstream of the TCP transfers)
spawn sink "$WORK/sink.out" "$BENCH_BIN/pump" sink 0
for _ in $(seq 1 50); do [ -s "$WORK/sink.out" ] && break; sleep 0.1; done
SINK_PORT=$(head -n1 "$WORK/sink.out")
[ -n "$SINK_PORT" ] || die "pump sink did not start"

# --- sluice
SLUICE_RESP_PORT=$(free_port)
SLUICE_TCP_PORT=$(free_port)
SLUICE_RESTARTS=0
write_sluice_conf() { # file resp_port [tcp_port [workers]]
    {
        printf '[sluice]\nadmin =\nworkers = %s\n\n[store]\nurl = local\n\n' "${4:-1}"
        printf '[listener r]\nlisten = 127.0.0.1:%s\nupstream = 127.0.0.1:%s\nprotocol = resp\nmax_connections = 20000\n\n' \
            "$2" "$REDIS_PORT"
        if [ -n "${3:-}" ]; then
            printf '[listener t]\nlisten = 127.0.0.1:%s\nupstream = 127.0.0.1:%s\nprotocol = tcp\nmax_connections = 20000\n\n' \
                "$3" "$SINK_PORT"
        fi
        if [ "$SLUICE_LIMIT" = 1 ]; then
            # A limit that matches every request but never triggers: measures
            # the cost of enforcement rather than of plain forwarding.
            printf '[limit bench]\nlistener = *\nmetric = requests\nrate = 1000000000/s\nscope = identity\n\n'
        fi
    } > "$1"
}
start_sluice() {
    write_sluice_conf "$WORK/sluice.ini" "$SLUICE_RESP_PORT" "$SLUICE_TCP_PORT"
    spawn sluice "$WORK/sluice.log" "$SLUICE_BIN" -c "$WORK/sluice.ini"
    if ! wait_ping "$SLUICE_RESP_PORT" 50 "${PID_OF[sluice]}"; then
        log "warning: sluice did not become ready; last log lines:"
        tail -n 15 "$WORK/sluice.log" >&2
        stop sluice
        return 1
    fi
}
ensure_sluice() { # restart sluice if it died (counts restarts)
    [ "$HAVE_SLUICE" = 1 ] || return 1
    alive sluice && return 0
    if [ -n "${SLUICE_STARTED:-}" ]; then
        SLUICE_RESTARTS=$((SLUICE_RESTARTS + 1))
        log "warning: sluice is not running (restart #$SLUICE_RESTARTS); last log lines:"
        tail -n 10 "$WORK/sluice.log" >&2
        cp "$WORK/sluice.log" "$WORK/sluice.log.$SLUICE_RESTARTS" 2>/dev/null
        [ "$SLUICE_RESTARTS" -gt 3 ] && { log "sluice keeps dying; giving up on it"; HAVE_SLUICE=0; return 1; }
    fi
    SLUICE_STARTED=1
    start_sluice
}
if [ "$HAVE_SLUICE" = 1 ]; then
    ensure_sluice || log "warning: sluice failed to start; will retry each round"
fi
HAVE_SLUICEW=0
SLUICEW_PORT=$(free_port)
if [ "$HAVE_SLUICE" = 1 ] && [ "${#TARGETS_RESP[@]}" = 6 ]; then
    write_sluice_conf "$WORK/sluicew.ini" "$SLUICEW_PORT" "" "$SLUICE_WORKERS"
    spawn sluicew "$WORK/sluicew.log" "$SLUICE_BIN" -c "$WORK/sluicew.ini"
    if wait_ping "$SLUICEW_PORT" 50 "${PID_OF[sluicew]}"; then
        HAVE_SLUICEW=1
    else
        log "warning: sluice with $SLUICE_WORKERS workers did not start:"
        tail -n 15 "$WORK/sluicew.log" >&2
        stop sluicew
    fi
fi

# --- relay: read and write only, the floor
RELAY_PORT=$(free_port)
RELAY_PROCS=$SLUICE_WORKERS
[ "$RELAY_PROCS" -ge 1 ] 2>/dev/null || RELAY_PROCS=1
HAVE_RELAY=1
spawn relay "$WORK/relay.log" "$BENCH_BIN/relay" "$RELAY_PORT" "$REDIS_PORT" "$RELAY_PROCS"
wait_ping "$RELAY_PORT" 50 "${PID_OF[relay]}" || { log "warning: relay did not start"; tail -n 5 "$WORK/relay.log" >&2; stop relay; HAVE_RELAY=0; }

# --- HAProxy (mode tcp)
HAPROXY_PORT=$(free_port)
write_haproxy_conf() { # file port
    {
        printf 'global\n    maxconn %s\n' "$HAPROXY_MAXCONN"
        [ -n "$HAPROXY_NBTHREAD" ] && printf '    nbthread %s\n' "$HAPROXY_NBTHREAD"
        printf 'defaults\n    mode tcp\n    timeout connect 5s\n    timeout client 1m\n    timeout server 1m\n'
        printf 'frontend fe\n    bind 127.0.0.1:%s\n    default_backend be\n' "$2"
        printf 'backend be\n    server redis 127.0.0.1:%s\n' "$REDIS_PORT"
    } > "$1"
}
start_haproxy() { # name port
    write_haproxy_conf "$WORK/$1.cfg" "$2"
    spawn "$1" "$WORK/$1.log" haproxy -db -f "$WORK/$1.cfg"
    wait_ping "$2" 50 "${PID_OF[$1]}" || { log "warning: $1 did not start"; tail -n 5 "$WORK/$1.log" >&2; stop "$1"; return 1; }
}
if [ "$HAVE_HAPROXY" = 1 ]; then
    start_haproxy haproxy "$HAPROXY_PORT" || HAVE_HAPROXY=0
fi

# --- nutcracker (twemproxy)
NUT_PORT=$(free_port)
start_nutcracker() { # name port
    local stats
    stats=$(free_port)
    cat > "$WORK/$1.yml" <<EOF
bench:
  listen: 127.0.0.1:$2
  hash: fnv1a_64
  distribution: ketama
  redis: true
  auto_eject_hosts: false
  timeout: 60000
  server_connections: 1
  servers:
   - 127.0.0.1:$REDIS_PORT:1
EOF
    spawn "$1" "$WORK/$1.log" nutcracker -c "$WORK/$1.yml" -s "$stats" -a 127.0.0.1 \
        -o "$WORK/$1.out" -p "$WORK/$1.pid"
    wait_ping "$2" 50 "${PID_OF[$1]}" || { log "warning: $1 did not start"; tail -n 5 "$WORK/$1.out" >&2; stop "$1"; return 1; }
}
if [ "$HAVE_NUTCRACKER" = 1 ]; then
    start_nutcracker nutcracker "$NUT_PORT" || HAVE_NUTCRACKER=0
fi

# --- nginx stream
NGINX_PORT=$(free_port)
start_nginx() {
    mkdir -p "$WORK/nginx/logs"
    cat > "$WORK/nginx/nginx.conf" <<EOF
load_module $NGINX_STREAM_SO;
worker_processes $NGINX_WORKERS;
pid $WORK/nginx/nginx.pid;
error_log $WORK/nginx/logs/error.log;
events { worker_connections 4096; }
stream {
    server {
        listen 127.0.0.1:$NGINX_PORT;
        proxy_pass 127.0.0.1:$SINK_PORT;
    }
}
EOF
    spawn nginx "$WORK/nginx.log" nginx -p "$WORK/nginx" -c "$WORK/nginx/nginx.conf" -g 'daemon off;'
    wait_tcp_quiet "$NGINX_PORT" || { log "warning: nginx did not start"; cat "$WORK/nginx.log" "$WORK/nginx/logs/error.log" >&2; stop nginx; return 1; }
}
# The sink counts every connection it sees, so probing nginx's port with a
# connect would show up as a 0-byte transfer: probe with ss instead.
wait_tcp_quiet() {
    for _ in $(seq 1 50); do
        ss -Hltn "sport = :$1" 2>/dev/null | grep -q . && return 0
        alive nginx || return 1
        sleep 0.1
    done
    return 1
}
if [ "$HAVE_NGINX" = 1 ]; then
    start_nginx || HAVE_NGINX=0
fi

port_of() { # target kind -> port ("" = not available)
    case "$1:$2" in
        direct:resp) echo "$REDIS_PORT" ;;
        direct:tcp) echo "$SINK_PORT" ;;
        sluice:resp) [ "$HAVE_SLUICE" = 1 ] && echo "$SLUICE_RESP_PORT" ;;
        sluice:tcp) [ "$HAVE_SLUICE" = 1 ] && echo "$SLUICE_TCP_PORT" ;;
        sluicew:resp) [ "$HAVE_SLUICEW" = 1 ] && echo "$SLUICEW_PORT" ;;
        haproxy:resp) [ "$HAVE_HAPROXY" = 1 ] && echo "$HAPROXY_PORT" ;;
        nutcracker:resp) [ "$HAVE_NUTCRACKER" = 1 ] && echo "$NUT_PORT" ;;
        relay:resp) [ "$HAVE_RELAY" = 1 ] && echo "$RELAY_PORT" ;;
        nginx:tcp) [ "$HAVE_NGINX" = 1 ] && echo "$NGINX_PORT" ;;
    esac
}

ensure_target() { # target: the process behind it is still up (sluice: restart)
    case "$1" in
        direct) alive redis ;;
        sluice) ensure_sluice ;;
        sluicew) alive sluicew || { log "warning: sluice with workers died"; HAVE_SLUICEW=0; return 1; } ;;
        haproxy) alive haproxy || { log "warning: haproxy died"; HAVE_HAPROXY=0; return 1; } ;;
        nutcracker) alive nutcracker || { log "warning: nutcracker died"; HAVE_NUTCRACKER=0; return 1; } ;;
        nginx) alive nginx || { log "warning: nginx died"; HAVE_NGINX=0; return 1; } ;;
        relay) alive relay || { log "warning: relay died"; HAVE_RELAY=0; return 1; } ;;
    esac
}

# ----------------------------------------------------------------- RESP ----

resp_run() { # target P round
    local target=$1 p=$2 port n out
    port=$(port_of "$target" resp)
    [ -n "$port" ] || return 0
    ensure_target "$target" || return 0
    port=$(port_of "$target" resp)
    [ -n "$port" ] || return 0
    n=$N_P1; [ "$p" -gt 1 ] && n=$N_P16
    out="$WORK/rb.$target.$p.$3.csv"
    timeout -k 5 "$RUN_TIMEOUT" redis-benchmark -h 127.0.0.1 -p "$port" -c "$CLIENTS" -n "$n" \
        -t get,set -P "$p" --csv -q >"$out" 2>"$out.err" </dev/null
    local rc=$?
    local got
    got=$(awk -F'","' -v t="$target" -v p="$p" '
        NR > 1 && NF >= 2 {
            cmd = tolower($1); gsub(/"/, "", cmd); rps = $2; gsub(/"/, "", rps)
            if ((cmd == "get" || cmd == "set") && rps + 0 > 0) { print "resp:" cmd ":" p ":" t "\t" rps; n++ }
        }
        END { exit n == 2 ? 0 : 1 }' "$out")
    if [ $? -ne 0 ] || [ "$rc" -ne 0 ]; then
        echo "round $3: redis-benchmark -P $p via $target failed (rc=$rc): $(head -c 200 "$out.err" | tr '\n' ' ')" >> "$FAILS"
        log "  $target -P $p: FAILED (rc=$rc)"
        return 0
    fi
    echo "$got" >> "$RAW"
    log "  $target -P $p: $(echo "$got" | awk -F'\t' '{ split($1, k, ":"); printf "%s %.0f  ", k[2], $2 }')"
}

log "upstream redis 127.0.0.1:$REDIS_PORT, sluice resp :$SLUICE_RESP_PORT tcp :$SLUICE_TCP_PORT," \
    "haproxy :$HAPROXY_PORT, nutcracker :$NUT_PORT, nginx :$NGINX_PORT, sink :$SINK_PORT"
log "RESP: $ROUNDS rounds x ${#TARGETS_RESP[@]} targets x (-P 1: $N_P1, -P 16: $N_P16 requests per command), -c $CLIENTS"
for round in $(seq 1 "$ROUNDS"); do
    log "RESP round $round/$ROUNDS"
    for target in "${TARGETS_RESP[@]}"; do
        for p in 1 16; do
            resp_run "$target" "$p" "$round"
        done
    done
done

# ------------------------------------------------------------------ TCP ----

tcp_run() { # target round
    local target=$1 port out before
    port=$(port_of "$target" tcp)
    [ -n "$port" ] || return 0
    ensure_target "$target" || return 0
    port=$(port_of "$target" tcp)
    [ -n "$port" ] || return 0
    before=$(wc -l < "$WORK/sink.out")
    out=$(timeout -k 5 "$RUN_TIMEOUT" "$BENCH_BIN/pump" send 127.0.0.1 "$port" "$TCP_BYTES" 2>"$WORK/pump.err" </dev/null)
    local rc=$?
    # The sink prints one line per connection with the bytes it received.
    local got=""
    for _ in $(seq 1 50); do
        [ "$(wc -l < "$WORK/sink.out")" -gt "$before" ] && { got=$(tail -n1 "$WORK/sink.out"); break; }
        sleep 0.1
    done
    if [ "$rc" -ne 0 ] || [ -z "$out" ] || [ "$got" != "$TCP_BYTES" ]; then
        echo "round $2: tcp via $target failed (rc=$rc, sink received ${got:-?} of $TCP_BYTES bytes): $(head -c 200 "$WORK/pump.err")" >> "$FAILS"
        log "  $target: FAILED (rc=$rc, sink got ${got:-?} bytes)"
        return 0
    fi
    local mbs
    mbs=$(echo "$out" | awk '{ print $3 }')
    echo -e "tcp:$target\t$mbs" >> "$RAW"
    log "  $target: $mbs MB/s"
}

log "TCP: $TCP_ROUNDS rounds x ${#TARGETS_TCP[@]} targets x $TCP_BYTES bytes"
for round in $(seq 1 "$TCP_ROUNDS"); do
    log "TCP round $round/$TCP_ROUNDS"
    for target in "${TARGETS_TCP[@]}"; do
        tcp_run "$target" "$round"
    done
done

# The throughput part is done: stop what only it needed.
stop nginx
stop sink

# -------------------------------------------------------------- pooling ----
# Its own upstream Redis and proxies, started and stopped there.
pool_bench

# ----------------------------------------------------------------- HTTP ----
# Its own upstream (nginx) and proxies, started and stopped here.
http_bench
tls_bench

# ---------------------------------------------------------- strict mode ----
# A limit that always allows, decided in a quota-store Redis: every request
# costs one store decision. Against the store's own ceiling, measured in the
# same rounds: redis-benchmark driving EVALSHA of the same script at -P 16.
# Then the latency a decision adds at -P 1: plain sluice vs strict sluice.

STRICT_STORE_PORT=$(free_port)
STRICT_PORT=$(free_port)
STRICT_ADMIN=$(free_port)
LEASE_PORT=$(free_port)
LEASE_ADMIN=$(free_port)
strict_ok=0
lease_ok=0
if [ "$HAVE_SLUICE" = 1 ]; then
    spawn store "$WORK/store.log" redis-server --port "$STRICT_STORE_PORT" --bind 127.0.0.1 \
        --save '' --appendonly no --daemonize no
    if wait_ping "$STRICT_STORE_PORT" 50; then
        printf '[sluice]\nadmin = 127.0.0.1:%s\n[store]\nurl = redis://127.0.0.1:%s\ntimeout = 200ms\n' \
            "$STRICT_ADMIN" "$STRICT_STORE_PORT" > "$WORK/strict.ini"
        printf '[listener s]\nlisten = 127.0.0.1:%s\nupstream = 127.0.0.1:%s\nmax_connections = 20000\n' \
            "$STRICT_PORT" "$REDIS_PORT" >> "$WORK/strict.ini"
        printf '[limit always]\nlistener = s\nrate = 1000000000/s\nscope = global\n' >> "$WORK/strict.ini"
        spawn strict "$WORK/strict.log" "$SLUICE_BIN" -c "$WORK/strict.ini"
        # the same limit with [store] lease = 1000: most decisions in process
        sed -e "s/^admin = .*/admin = 127.0.0.1:$LEASE_ADMIN/" -e "s/^listen = .*/listen = 127.0.0.1:$LEASE_PORT/" \
            -e 's/^timeout = 200ms$/timeout = 200ms\nlease = 1000/' "$WORK/strict.ini" > "$WORK/lease.ini"
        spawn lease "$WORK/lease.log" "$SLUICE_BIN" -c "$WORK/lease.ini"
        wait_ping "$LEASE_PORT" 50 "${PID_OF[lease]}" && lease_ok=1
        # the same text sluice embeds (lua/embed.sh): the algorithms, then decide.lua
        STRICT_SCRIPT=$(for a in token_bucket gcra sliding_window sliding_log fixed_window; do
            sed '/^-- standalone/,$d' "lua/$a.lua"; done; cat lua/decide.lua)
        STRICT_SHA=$(redis-cli -p "$STRICT_STORE_PORT" script load "$STRICT_SCRIPT" 2>/dev/null)
        if wait_ping "$STRICT_PORT" 50 "${PID_OF[strict]}" && [ ${#STRICT_SHA} = 40 ]; then
            strict_ok=1
        else
            echo "strict: sluice with a store did not start" >> "$FAILS"
        fi
    else
        echo "strict: the store redis did not start" >> "$FAILS"
    fi
fi

# rps of one redis-benchmark --csv run (first command), or ""
bench_rps() {
    awk -F'","' 'NR > 1 && NF >= 2 { r = $2; gsub(/"/, "", r); print r; exit }'
}
# "p50 p99" (ms) of one redis-benchmark run's latency summary
bench_lat() {
    awk '/latency summary/ { getline; getline; print $3, $5; exit }'
}

if [ "$strict_ok" = 1 ]; then
    log "strict mode: $ROUNDS rounds of (store EVALSHA ceiling, sluice strict) at -P 16, then latency at -P 1"
    STRICT_KEY='sluice:{always:*}'
    for round in $(seq 1 "$ROUNDS"); do
        ceil=$(timeout -k 5 "$RUN_TIMEOUT" redis-benchmark -h 127.0.0.1 -p "$STRICT_STORE_PORT" -c "$CLIENTS" \
            -n "$N_STRICT" -P 16 --csv evalsha "$STRICT_SHA" 1 "$STRICT_KEY" -1 1 token_bucket \
            1000000000 1000000 1000000000 1 0 0 2>/dev/null </dev/null | bench_rps)
        strict=$(timeout -k 5 "$RUN_TIMEOUT" redis-benchmark -h 127.0.0.1 -p "$STRICT_PORT" -c "$CLIENTS" \
            -n "$N_STRICT" -P 16 -t get --csv 2>/dev/null </dev/null | bench_rps)
        [ -n "$ceil" ] && echo -e "strict:ceiling\t$ceil" >> "$RAW"
        [ -z "$ceil" ] && echo "strict: round $round: the store's EVALSHA run failed (decide.lua arguments?)" >> "$FAILS"
        [ -n "$strict" ] && echo -e "strict:sluice\t$strict" >> "$RAW"
        leased=""
        if [ "$lease_ok" = 1 ]; then
            leased=$(timeout -k 5 "$RUN_TIMEOUT" redis-benchmark -h 127.0.0.1 -p "$LEASE_PORT" -c "$CLIENTS" \
                -n "$N_STRICT" -P 16 -t get --csv 2>/dev/null </dev/null | bench_rps)
            [ -n "$leased" ] && echo -e "strict:lease\t$leased" >> "$RAW"
        fi
        log "  round $round: store ceiling ${ceil:-?}, sluice strict ${strict:-?}, lease 1000 ${leased:-?}"
        if ensure_target sluice; then
            plain=$(timeout -k 5 "$RUN_TIMEOUT" redis-benchmark -h 127.0.0.1 -p "$SLUICE_RESP_PORT" -c "$CLIENTS" \
                -n "$N_P1" -t get 2>/dev/null </dev/null | bench_lat)
            lat=$(timeout -k 5 "$RUN_TIMEOUT" redis-benchmark -h 127.0.0.1 -p "$STRICT_PORT" -c "$CLIENTS" \
                -n "$N_P1" -t get 2>/dev/null </dev/null | bench_lat)
            if [ -n "$plain" ] && [ -n "$lat" ]; then
                set -- $plain $lat
                echo -e "lat:p50:plain\t$1\nlat:p99:plain\t$2\nlat:p50:strict\t$3\nlat:p99:strict\t$4" >> "$RAW"
                echo -e "lat:p50:added\t$(awk -v a="$3" -v b="$1" 'BEGIN{print a - b}')" >> "$RAW"
                echo -e "lat:p99:added\t$(awk -v a="$4" -v b="$2" 'BEGIN{print a - b}')" >> "$RAW"
            fi
        fi
    done
    # store calls per admitted request, from sluice's own counters
    STRICT_METRICS=$(exec 3<>/dev/tcp/127.0.0.1/$STRICT_ADMIN &&
        printf 'GET /metrics HTTP/1.0\r\n\r\n' >&3 && cat <&3)
    STRICT_CALLS=$(echo "$STRICT_METRICS" | awk '$1 == "sluice_store_requests_total" { print $2 }')
    STRICT_REQS=$(echo "$STRICT_METRICS" | awk '$1 ~ /^sluice_requests_total\{listener="s"\}/ { print $2 }')
    STRICT_ERRS=$(echo "$STRICT_METRICS" | awk '$1 == "sluice_store_errors_total" { print $2 }')
    if [ "$lease_ok" = 1 ]; then
        LEASE_METRICS=$(exec 3<>/dev/tcp/127.0.0.1/$LEASE_ADMIN &&
            printf 'GET /metrics HTTP/1.0\r\n\r\n' >&3 && cat <&3)
        LEASE_CALLS=$(echo "$LEASE_METRICS" | awk '$1 == "sluice_store_requests_total" { print $2 }')
        LEASE_REQS=$(echo "$LEASE_METRICS" | awk '$1 ~ /^sluice_requests_total\{listener="s"\}/ { print $2 }')
    fi
fi
stop lease
stop strict
stop store

# -------------------------------------------------------------- idle RSS ---

# idle_rss NAME PID PORT: RSS of PID before and after IDLE_CONNS idle clients
# (each sends one PING and reads its PONG) -> bytes per connection into RAW.
idle_rss() {
    local name=$1 pid=$2 port=$3 before after ipid extra=""
    sleep 0.5
    before=$(rss_bytes "$pid")
    [ -n "$before" ] || { echo "idle: $name is not running" >> "$FAILS"; return 0; }
    "$BENCH_BIN/idle" 127.0.0.1 "$port" "$IDLE_CONNS" ping </dev/null >"$WORK/idle.$name.out" 2>&1 &
    ipid=$!
    ALL_PIDS+=("$ipid")
    local ok=0
    for _ in $(seq 1 $((RUN_TIMEOUT * 10))); do
        grep -q '^ready' "$WORK/idle.$name.out" 2>/dev/null && { ok=1; break; }
        kill -0 "$ipid" 2>/dev/null || break
        sleep 0.1
    done
    if [ "$ok" = 1 ]; then
        sleep 1 # let the proxy settle (lazy allocations, pending reads)
        after=$(rss_bytes "$pid")
        if [ -n "$after" ]; then
            echo -e "idle:$name\t$(( (after - before) / IDLE_CONNS ))" >> "$RAW"
            extra=" (RSS $((before / 1024)) KiB -> $((after / 1024)) KiB)"
        else
            echo "idle: $name died while holding $IDLE_CONNS connections" >> "$FAILS"
        fi
    else
        echo "idle: $name: $(tail -n1 "$WORK/idle.$name.out")" >> "$FAILS"
    fi
    stop_pid "$ipid"
    if [ "$ok" = 1 ]; then log "  $name: done$extra"; else log "  $name: FAILED"; fi
}

log "idle RSS: $IDLE_CONNS idle connections each (fresh proxy processes)"
# Redis itself (direct), for reference: what the server spends per client.
idle_rss direct "${PID_OF[redis]}" "$REDIS_PORT"

stop sluice
stop sluicew
if [ "$HAVE_SLUICE" = 1 ]; then
    IDLE_SLUICE_PORT=$(free_port)
    write_sluice_conf "$WORK/sluice-idle.ini" "$IDLE_SLUICE_PORT"
    spawn sluice_idle "$WORK/sluice-idle.log" "$SLUICE_BIN" -c "$WORK/sluice-idle.ini"
    if wait_ping "$IDLE_SLUICE_PORT" 50 "${PID_OF[sluice_idle]}"; then
        idle_rss sluice "${PID_OF[sluice_idle]}" "$IDLE_SLUICE_PORT"
    else
        echo "idle: sluice did not start" >> "$FAILS"
    fi
    stop sluice_idle
fi
stop haproxy
if [ "$HAVE_HAPROXY" = 1 ]; then
    IDLE_HAPROXY_PORT=$(free_port)
    if start_haproxy haproxy_idle "$IDLE_HAPROXY_PORT"; then
        idle_rss haproxy "${PID_OF[haproxy_idle]}" "$IDLE_HAPROXY_PORT"
    fi
    stop haproxy_idle
fi
stop nutcracker
if [ "$HAVE_NUTCRACKER" = 1 ]; then
    IDLE_NUT_PORT=$(free_port)
    if start_nutcracker nutcracker_idle "$IDLE_NUT_PORT"; then
        idle_rss nutcracker "${PID_OF[nutcracker_idle]}" "$IDLE_NUT_PORT"
    fi
    stop nutcracker_idle
fi
stop redis

# ---------------------------------------------------------------- table ----

TABLE="$WORK/table.txt"
ROW_FMT='%-30s %11s %11s %11s %11s %11s %8s %8s %8s  %s\n'
{
    printf "$ROW_FMT" benchmark direct sluice haproxy nutcracker nginx "sl/dir" "sl/hap" "sl/ngx" target
    for p in 1 16; do
        for cmd in get set; do
            d=$(median "resp:$cmd:$p:direct"); s=$(median "resp:$cmd:$p:sluice")
            h=$(median "resp:$cmd:$p:haproxy"); t=$(median "resp:$cmd:$p:nutcracker")
            rd=$(ratio "$s" "$d"); rh=$(ratio "$s" "$h")
            tgt=$(resp_target "$p" "$rd" "$rh")
            printf "$ROW_FMT" "resp $cmd -P$p (req/s)" "$(fmt "$d" 0)" "$(fmt "$s" 0)" "$(fmt "$h" 0)" \
                "$(fmt "$t" 0)" "n/a" "${rd:-n/a}" "${rh:-n/a}" "" "$tgt"
        done
    done
    d=$(median tcp:direct); s=$(median tcp:sluice); x=$(median tcp:nginx)
    rd=$(ratio "$s" "$d"); rx=$(ratio "$s" "$x")
    res=""; [ -n "$rx" ] && { ge "$rx" 1.10; res=$?; }
    printf "$ROW_FMT" "tcp $(awk -v b="$TCP_BYTES" 'BEGIN { if (b % 1073741824 == 0) printf "%dGiB", b / 1073741824; else if (b % 1048576 == 0) printf "%dMiB", b / 1048576; else printf "%dB", b }') (MB/s)" \
        "$(fmt "$d" 0)" "$(fmt "$s" 0)" "n/a" "n/a" "$(fmt "$x" 0)" "${rd:-n/a}" "" "${rx:-n/a}" \
        ">=1.1x nginx: $(mark "$res")"
    d=$(median idle:direct); s=$(median idle:sluice); h=$(median idle:haproxy); t=$(median idle:nutcracker)
    res=""; [ -n "$s" ] && { [ "$s" -le 2048 ]; res=$?; }
    printf "$ROW_FMT" "idle RSS/conn (B, $IDLE_CONNS)" "$(fmt "$d" 0)" "$(fmt "$s" 0)" "$(fmt "$h" 0)" "$(fmt "$t" 0)" \
        "n/a" "" "$(ratio "$s" "$h")" "" "<=2048 B incl. upstream: $(mark "$res")"
} > "$TABLE"

if [ "$HAVE_SLUICEW" = 1 ] || [ "$(count resp:get:16:sluicew)" -gt 0 ]; then
    W_FMT='%-30s %11s %11s %11s %11s %8s %8s %8s  %s\n'
    {
        echo
        printf "$W_FMT" "sluice, workers = $SLUICE_WORKERS" direct sluice "sluice x$SLUICE_WORKERS" haproxy "w/dir" "w/hap" "w/sl" target
        for p in 1 16; do
            for cmd in get set; do
                d=$(median "resp:$cmd:$p:direct"); s=$(median "resp:$cmd:$p:sluice")
                w=$(median "resp:$cmd:$p:sluicew"); h=$(median "resp:$cmd:$p:haproxy")
                rd=$(ratio "$w" "$d"); rh=$(ratio "$w" "$h")
                tgt=$(resp_target "$p" "$rd" "$rh")
                printf "$W_FMT" "resp $cmd -P$p (req/s)" "$(fmt "$d" 0)" "$(fmt "$s" 0)" "$(fmt "$w" 0)" \
                    "$(fmt "$h" 0)" "${rd:-n/a}" "${rh:-n/a}" "$(ratio "$w" "$s")" "$tgt"
            done
        done
    } >> "$TABLE"
fi

if [ "$(count resp:get:16:relay)" -gt 0 ]; then
    # sluice as the operator would run it here: with workers when measured
    sw=sluice; sname="sluice"
    [ "$(count resp:get:16:sluicew)" -gt 0 ] && { sw=sluicew; sname="sluice x$SLUICE_WORKERS"; }
    F_FMT='%-30s %11s %11s %11s %11s %8s %8s %8s\n'
    {
        echo
        printf "$F_FMT" "1:1 floor: relay x$RELAY_PROCS" direct relay "$sname" haproxy "rel/dir" "sl/rel" "hap/rel"
        for p in 1 16; do
            for cmd in get set; do
                d=$(median "resp:$cmd:$p:direct"); r=$(median "resp:$cmd:$p:relay")
                w=$(median "resp:$cmd:$p:$sw"); h=$(median "resp:$cmd:$p:haproxy")
                printf "$F_FMT" "resp $cmd -P$p (req/s)" "$(fmt "$d" 0)" "$(fmt "$r" 0)" "$(fmt "$w" 0)" \
                    "$(fmt "$h" 0)" "$(ratio "$r" "$d")" "$(ratio "$w" "$r")" "$(ratio "$h" "$r")"
            done
        done
    } >> "$TABLE"
fi

{
    c=$(median strict:ceiling); st=$(median strict:sluice); r=$(ratio "$st" "$c")
    res=""; [ -n "$r" ] && { ge "$r" 0.80; res=$?; }
    echo
    printf '%-30s %14s %14s %8s  %s\n' "strict mode (every request: one store decision)" "store ceiling" "sluice strict" "ratio" target
    printf '%-30s %14s %14s %8s  %s\n' "resp get -P16 (req/s)" "$(fmt "$c" 0)" "$(fmt "$st" 0)" "${r:-n/a}" \
        ">=0.8x store ceiling: $(mark "$res")"
    calls=""; [ -n "${STRICT_CALLS:-}" ] && [ -n "${STRICT_REQS:-}" ] && calls=$(ratio "$STRICT_CALLS" "$STRICT_REQS")
    printf '%-30s %14s\n' "store calls per request" "${calls:-n/a} (${STRICT_CALLS:-?} calls, ${STRICT_REQS:-?} requests, ${STRICT_ERRS:-?} errors)"
    l=$(median strict:lease); lc=""
    [ -n "${LEASE_CALLS:-}" ] && [ -n "${LEASE_REQS:-}" ] && lc=$(awk -v a="$LEASE_CALLS" -v b="$LEASE_REQS" 'BEGIN { if (b > 0) printf "%.4f", a / b }')
    printf '%-30s %14s %14s %8s  %s\n' "with [store] lease = 1000" "" "$(fmt "$l" 0)" "$(ratio "$l" "$st")" \
        "x strict; store calls per request ${lc:-n/a} (${LEASE_CALLS:-?} calls, ${LEASE_REQS:-?} requests)"
    for q in p50 p99; do
        printf '%-30s %14s %14s %8s\n' "latency -P1 $q (ms): plain/strict" "$(fmt "$(median lat:$q:plain)" 3)" \
            "$(fmt "$(median lat:$q:strict)" 3)" "+$(fmt "$(median lat:$q:added)" 3)"
    done
} >> "$TABLE"

{
    echo
    http_table
    echo
    pool_table
    tls_table
} >> "$TABLE"

TARGETS_TOTAL=$(grep -cE ': (PASS|MISS|n/a)$' "$TABLE")
TARGETS_MET=$(grep -c 'PASS$' "$TABLE")

{
    echo
    echo "sluice benchmark — $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, $(uname -r)"
    echo "medians of $ROUNDS interleaved rounds (RESP: redis-benchmark -c $CLIENTS -t get,set," \
        "-n $N_P1 at -P1, -n $N_P16 at -P16), $TCP_ROUNDS for TCP, 1 for idle RSS"
    echo "direct = Redis itself (idle row: Redis's own RSS per client); every process shares the same $(nproc) cores"
    cat "$TABLE"
    echo "sl/dir = sluice/direct, sl/hap = sluice/haproxy, sl/ngx = sluice/nginx;" \
        "nutcracker multiplexes all clients onto one upstream connection"
    echo "haproxy: mode tcp, maxconn $HAPROXY_MAXCONN, nbthread ${HAPROXY_NBTHREAD:-default (one per CPU)}; nginx stream: worker_processes $NGINX_WORKERS;" \
        "sluice: no limits configured$([ "$SLUICE_LIMIT" = 1 ] && echo ' (BENCH_SLUICE_LIMIT=1: one non-binding limit)')"
    echo "samples: $(for k in resp:get:1 resp:get:16; do for t in "${TARGETS_RESP[@]}"; do printf '%s/%s=%s ' "${k#resp:get:}" "$t" "$(count "$k:$t")"; done; done)tcp: $(for t in direct sluice nginx; do printf '%s=%s ' "$t" "$(count "tcp:$t")"; done)"
    [ "$SLUICE_RESTARTS" -gt 0 ] && echo "WARNING: sluice died and was restarted $SLUICE_RESTARTS time(s) during the run"
    fails_notes
    echo "targets met: $TARGETS_MET of $TARGETS_TOTAL"
} | report_save

if [ "$HAVE_SLUICE" != 1 ] && [ -x "$SLUICE_BIN" ]; then
    exit 1 # sluice could not be measured at all
fi
if [ "$STRICT" = 1 ] && [ "$TARGETS_MET" -lt "$TARGETS_TOTAL" ]; then
    exit 1
fi
exit 0
