# sluice benchmark, pooling rows: sourced by tests/bench/bench.sh (uses its
# spawn/stop/free_port/median/... helpers, cpu_ticks from http.sh, and $WORK,
# $RAW, $FAILS). BENCH_ONLY=pool runs only these rows.
#
# The rows the targets of upstream pooling are read from, against one
# upstream redis-server of their own, in interleaved rounds:
#   direct      Redis itself
#   one         sluice, protocol = resp, workers = auto, 1:1 (today's sessions)
#   tcp         the same with protocol = tcp (bytes relayed, no framing, no
#               counting of requests): at -P 16 only, to tell what the RESP
#               framing costs from what the rest of a 1:1 session costs
#   pooled      the same with $POOL_CONF in its [listener] section and
#               workers = $POOL_WORKERS; started only
#               when `sluice -t` accepts that configuration, else n/a
#   haproxy     mode tcp, nbthread $POOL_HAPROXY_NBTHREAD
#   nginx       nginx stream proxy_pass, worker_processes $SLUICE_WORKERS
#   nutcracker  twemproxy, one upstream connection
# Per run (redis-benchmark -t CMD, one command per run so that CPU time is per
# command): requests/s and p99 from --csv; the upstream redis-server's CPU time
# (its threads' runtime from schedstat, before and after) per request; the same
# for the proxy, its worker processes and threads included (cpu_ns); and the
# load generator's own CPU (bash's time), per request and as the share of a
# CPU it takes at the rate it reported.
# Then upstream connection counts (INFO clients) with 400 active and
# $POOL_IDLE idle clients, and $POOL_FANIN clients each sending one GET
# through the listener to a Redis with maxclients $POOL_FANIN_MAXCLIENTS.

POOL_ROUNDS=${BENCH_POOL_ROUNDS:-3}
POOL_CLIENTS=${BENCH_POOL_CLIENTS:-50 400}
POOL_N_PER_CLIENT=${BENCH_POOL_N_PER_CLIENT:-250}   # -n = clients x this, at least 50000
POOL_N_P16=${BENCH_POOL_N_P16:-400000}
POOL_SIZE=${BENCH_POOL_SIZE:-4}
# The pooled target's workers: one, as twemproxy is one process. On these
# 2-core machines the load generator and Redis share the cores, and one
# worker writes every client's requests to one connection per key, so Redis
# reads them in batches of 12-14 (2 workers: 3-4, and 3.5x Redis's CPU per
# request); `workers = auto` still rules the 1:1 target.
POOL_WORKERS=${BENCH_POOL_WORKERS:-1}
# The line that makes a listener pooled; phase 2 of issue 22 adds the key.
POOL_CONF=${BENCH_POOL_CONF:-upstream_pool = $POOL_SIZE}
POOL_HAPROXY_NBTHREAD=${BENCH_POOL_HAPROXY_NBTHREAD:-2}
POOL_IDLE=${BENCH_POOL_IDLE:-5000}
POOL_ACTIVE=${BENCH_POOL_ACTIVE:-400}
POOL_FANIN=${BENCH_POOL_FANIN:-10000}
POOL_FANIN_MAXCLIENTS=${BENCH_POOL_FANIN_MAXCLIENTS:-1000}
POOL_TARGETS=(direct one pooled haproxy nginx nutcracker)
POOL_TARGETS_P16=(direct one tcp pooled nginx)
declare -A POOL_PORT=() POOL_PORT2=() POOL_PID_NAME=() POOL_ROUND_RPS=()

pool_label() {
    case "$1" in
        direct) echo "direct" ;;
        one) echo "sluice 1:1" ;;
        tcp) echo "sluice 1:1 tcp" ;;
        pooled) echo "sluice pooled" ;;
        haproxy) echo "haproxy" ;;
        nginx) echo "nginx stream" ;;
        nutcracker) echo "twemproxy" ;;
    esac
}

# pool_sluice_conf file workers port upstream port2 upstream2 [pool line] [protocol]
pool_sluice_conf() {
    local proto=${8:-resp}
    {
        printf '[sluice]\nadmin =\nworkers = %s\n\n[store]\nurl = local\n\n' "$2"
        printf '[listener r]\nlisten = 127.0.0.1:%s\nupstream = 127.0.0.1:%s\nprotocol = %s\n' "$3" "$4" "$proto"
        printf 'max_connections = 20000\n%s\n\n' "${7:-}"
        # the same in front of the Redis with few maxclients (fan-in row)
        printf '[listener f]\nlisten = 127.0.0.1:%s\nupstream = 127.0.0.1:%s\nprotocol = %s\n' "$5" "$6" "$proto"
        printf 'max_connections = 20000\n%s\n' "${7:-}"
    } > "$1"
}

pool_start_sluice() { # target [pool line] [protocol]
    local t=$1 p p2 conf="$WORK/pool-$1.ini"
    p=$(free_port); p2=$(free_port)
    local w=auto
    [ -n "${2:-}" ] && w=$POOL_WORKERS
    pool_sluice_conf "$conf" "$w" "$p" "$POOL_REDIS_PORT" "$p2" "$POOL_SMALL_PORT" "${2:-}" "${3:-resp}"
    if ! "$SLUICE_BIN" -t -c "$conf" >"$WORK/pool-$t.check" 2>&1; then
        log "  $(pool_label "$t"): n/a: sluice -t refuses the configuration: $(tail -n 1 "$WORK/pool-$t.check")"
        echo "pool: $(pool_label "$t") not measured: sluice -t: $(tail -n 1 "$WORK/pool-$t.check")" >> "$FAILS"
        return 1
    fi
    spawn "pool_$t" "$WORK/pool-$t.log" "$SLUICE_BIN" -c "$conf"
    if wait_ping "$p" 50 "${PID_OF[pool_$t]}" && wait_ping "$p2" 50 "${PID_OF[pool_$t]}"; then
        POOL_PORT[$t]=$p; POOL_PORT2[$t]=$p2; POOL_PID_NAME[$t]=pool_$t
    else
        log "warning: $(pool_label "$t") did not start:"; tail -n 10 "$WORK/pool-$t.log" >&2
        echo "pool: $(pool_label "$t") did not start" >> "$FAILS"
        stop "pool_$t"
        return 1
    fi
}

pool_setup() {
    POOL_OK=0
    POOL_REDIS_PORT=$(free_port)
    spawn pool_redis "$WORK/pool-redis.log" redis-server --port "$POOL_REDIS_PORT" --bind 127.0.0.1 \
        --save '' --appendonly no --maxclients 20000 --daemonize no --dir "$WORK" \
        --logfile "$WORK/pool-redis-server.log"
    wait_ping "$POOL_REDIS_PORT" 50 "${PID_OF[pool_redis]}" || { log "warning: pool: redis-server did not start"; return 1; }
    POOL_SMALL_PORT=$(free_port)
    spawn pool_small "$WORK/pool-small.log" redis-server --port "$POOL_SMALL_PORT" --bind 127.0.0.1 \
        --save '' --appendonly no --maxclients "$POOL_FANIN_MAXCLIENTS" --daemonize no --dir "$WORK" \
        --logfile "$WORK/pool-small-server.log"
    wait_ping "$POOL_SMALL_PORT" 50 "${PID_OF[pool_small]}" || log "warning: pool: the small redis-server did not start"
    POOL_PORT[direct]=$POOL_REDIS_PORT; POOL_PORT2[direct]=$POOL_SMALL_PORT; POOL_PID_NAME[direct]=""
    POOL_OK=1

    local p
    if [ "$HAVE_SLUICE" = 1 ]; then
        pool_start_sluice one
        pool_start_sluice tcp "" tcp
        pool_start_sluice pooled "$POOL_CONF"
    fi
    if [ "$HAVE_HAPROXY" = 1 ]; then
        p=$(free_port)
        {
            printf 'global\n    maxconn %s\n    nbthread %s\n' "$HAPROXY_MAXCONN" "$POOL_HAPROXY_NBTHREAD"
            printf 'defaults\n    mode tcp\n    timeout connect 5s\n    timeout client 1m\n    timeout server 1m\n'
            printf 'frontend fe\n    bind 127.0.0.1:%s\n    default_backend be\n' "$p"
            printf 'backend be\n    server redis 127.0.0.1:%s\n' "$POOL_REDIS_PORT"
        } > "$WORK/pool-haproxy.cfg"
        spawn pool_haproxy "$WORK/pool-haproxy.log" haproxy -db -f "$WORK/pool-haproxy.cfg"
        if wait_ping "$p" 50 "${PID_OF[pool_haproxy]}"; then
            POOL_PORT[haproxy]=$p; POOL_PID_NAME[haproxy]=pool_haproxy
        else
            log "warning: pool: haproxy did not start"; tail -n 5 "$WORK/pool-haproxy.log" >&2
        fi
    fi
    if [ "$HAVE_NGINX" = 1 ]; then
        p=$(free_port)
        mkdir -p "$WORK/pool-nginx/logs"
        cat > "$WORK/pool-nginx/nginx.conf" <<EOF
load_module $NGINX_STREAM_SO;
worker_processes $SLUICE_WORKERS;
worker_rlimit_nofile 20000;
pid $WORK/pool-nginx/nginx.pid;
error_log $WORK/pool-nginx/logs/error.log;
events { worker_connections 10000; }
stream {
    server {
        listen 127.0.0.1:$p;
        proxy_pass 127.0.0.1:$POOL_REDIS_PORT;
    }
}
EOF
        spawn pool_nginx "$WORK/pool-nginx.log" nginx -p "$WORK/pool-nginx" -c "$WORK/pool-nginx/nginx.conf" -g 'daemon off;'
        if wait_ping "$p" 50 "${PID_OF[pool_nginx]}"; then
            POOL_PORT[nginx]=$p; POOL_PID_NAME[nginx]=pool_nginx
        else
            log "warning: pool: nginx stream did not start"; cat "$WORK/pool-nginx/logs/error.log" >&2
        fi
    fi
    if [ "$HAVE_NUTCRACKER" = 1 ]; then
        local t
        for t in nutcracker:"$POOL_REDIS_PORT" nutsmall:"$POOL_SMALL_PORT"; do
            p=$(free_port)
            cat > "$WORK/pool-${t%%:*}.yml" <<EOF
bench:
  listen: 127.0.0.1:$p
  hash: fnv1a_64
  distribution: ketama
  redis: true
  auto_eject_hosts: false
  timeout: 60000
  server_connections: 1
  servers:
   - 127.0.0.1:${t#*:}:1
EOF
            spawn "pool_${t%%:*}" "$WORK/pool-${t%%:*}.log" nutcracker -c "$WORK/pool-${t%%:*}.yml" \
                -s "$(free_port)" -a 127.0.0.1 -o "$WORK/pool-${t%%:*}.out" -p "$WORK/pool-${t%%:*}.pid"
            if wait_ping "$p" 50 "${PID_OF[pool_${t%%:*}]}"; then
                if [ "${t%%:*}" = nutcracker ]; then POOL_PORT[nutcracker]=$p; POOL_PID_NAME[nutcracker]=pool_nutcracker
                else POOL_PORT2[nutcracker]=$p; fi
            else
                log "warning: pool: nutcracker did not start"; tail -n 5 "$WORK/pool-${t%%:*}.out" >&2
            fi
        done
    fi
}

pool_stop() {
    local n
    for n in pool_one pool_tcp pool_pooled pool_haproxy pool_nginx pool_nutcracker pool_nutsmall pool_redis pool_small; do
        stop "$n"
    done
}

# CPU time of <pid>, its threads and its direct children (worker processes),
# in ns: the scheduler's runtime (/proc/PID/task/TID/schedstat), exact where
# utime + stime come in 10 ms ticks (at -P 16 a run is some 30 ticks, so a
# tick is 3 % of the figure); ticks where schedstat is missing.
cpu_ns() {
    local p f t=0 v
    if [ ! -r "/proc/$1/schedstat" ]; then
        echo $(( $(cpu_ticks "$1") * 1000000000 / CLK_TCK ))
        return
    fi
    for p in "$1" $(pgrep -P "$1" 2>/dev/null); do
        for f in /proc/"$p"/task/*/schedstat; do
            v=0
            read -r v _ < "$f" 2>/dev/null # a thread may be gone meanwhile
            t=$((t + ${v:-0}))
        done
    done
    echo "$t"
}

# pool_run target clients cmd P round
pool_run() {
    local t=$1 c=$2 cmd=$3 p=$4 port name pid rpid out n r0 r1 c0 c1 rc rps p99 k
    port=${POOL_PORT[$t]:-}
    [ -n "$port" ] || return 0
    name=${POOL_PID_NAME[$t]}
    pid=""; [ -n "$name" ] && pid=${PID_OF[$name]:-}
    rpid=${PID_OF[pool_redis]:-}
    if { [ -n "$name" ] && { [ -z "$pid" ] || ! kill -0 "$pid" 2>/dev/null; }; } ||
        [ -z "$rpid" ] || ! kill -0 "$rpid" 2>/dev/null; then
        echo "round $5: pool: $(pool_label "$t") (or its redis) is gone" >> "$FAILS"
        unset "POOL_PORT[$t]"
        return 0
    fi
    n=$((c * POOL_N_PER_CLIENT)); [ "$n" -lt 50000 ] && n=50000
    [ "$p" -gt 1 ] && n=$POOL_N_P16
    out="$WORK/pool.$t.$c.$cmd.$p.$5.csv"
    r0=$(cpu_ns "$rpid"); c0=0; [ -n "$pid" ] && c0=$(cpu_ns "$pid")
    # bash's time: the load generator's own user and system CPU (timeout
    # waits for redis-benchmark, so its CPU counts here)
    local TIMEFORMAT='%3U %3S' gu gs
    { time timeout -k 5 "$RUN_TIMEOUT" redis-benchmark -h 127.0.0.1 -p "$port" -c "$c" -n "$n" \
        -t "$cmd" -P "$p" --csv >"$out" 2>"$out.err" </dev/null; } 2>"$out.time"
    rc=$?
    read -r gu gs < "$out.time"
    r1=$(cpu_ns "$rpid"); c1=0; [ -n "$pid" ] && c1=$(cpu_ns "$pid")
    # "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms",...
    read -r rps p99 < <(awk -F'","' 'NR > 1 && NF >= 7 { r = $2; l = $7; gsub(/"/, "", r); gsub(/"/, "", l); print r, l; exit }' "$out")
    if [ "$rc" -ne 0 ] || [ -z "${rps:-}" ] || [ -z "${p99:-}" ] || ! ge "$rps" 1; then
        echo "round $5: pool: redis-benchmark -c $c -P $p -t $cmd via $(pool_label "$t") failed (rc=$rc): $(head -c 200 "$out.err" | tr '\n' ' ')" >> "$FAILS"
        log "  $(pool_label "$t") -c $c -P $p $cmd: FAILED (rc=$rc)"
        return 0
    fi
    k="$p:$c:$cmd:$t"
    {
        printf 'pool:rps:%s\t%s\npool:p99:%s\t%s\n' "$k" "$rps" "$k" "$p99"
        awk -v a="$r0" -v b="$r1" -v n="$n" -v k="$k" \
            'BEGIN { printf "pool:rcpu:%s\t%.3f\n", k, (b - a) / 1e3 / n }'
        [ -n "$pid" ] && awk -v a="$c0" -v b="$c1" -v n="$n" -v k="$k" \
            'BEGIN { printf "pool:pcpu:%s\t%.3f\n", k, (b - a) / 1e3 / n }'
        # the load generator: its CPU per request, and the share of one CPU
        # that takes at the rate it reported (near 1: it is the ceiling,
        # whatever it runs against). Not its CPU over the wall time: at 400
        # clients that includes some 0.3 s outside the timed part, setting
        # up and closing the connections.
        [ -n "${gu:-}" ] && awk -v u="$gu" -v s="$gs" -v n="$n" -v r="$rps" -v k="$k" \
            'BEGIN { c = (u + s) * 1e6 / n; printf "pool:gcpu:%s\t%.3f\npool:gbusy:%s\t%.3f\n", k, c, k, c * r / 1e6 }'
        # the pooled / twemproxy ratio within this round (the two runs a
        # few seconds apart, mostly under one placement of the processes)
        if [ "$t" = pooled ]; then
            POOL_ROUND_RPS[$p:$c:$cmd]=$rps
        elif [ "$t" = nutcracker ] && [ -n "${POOL_ROUND_RPS[$p:$c:$cmd]:-}" ]; then
            awk -v a="${POOL_ROUND_RPS[$p:$c:$cmd]}" -v b="$rps" -v k="$p:$c:$cmd" \
                'BEGIN { if (b > 0) printf "pool:twpair:%s\t%.4f\n", k, a / b }'
        fi
    } >> "$RAW"
    log "  $(pool_label "$t") -c $c -P $p $cmd: $rps req/s, p99 $p99 ms, redis $(awk -v a="$r0" -v b="$r1" -v n="$n" 'BEGIN { printf "%.2f", (b - a) / 1e3 / n }') us/req"
}

# connected_clients of the Redis at port, less the asking connection itself
upstream_clients() {
    timeout 5 redis-cli -h 127.0.0.1 -p "$1" info clients 2>/dev/null |
        awk -F: '$1 == "connected_clients" { print $2 - 1 }' | tr -d '\r'
}

# idle_hold name port n mode -> the idle helper's pid in IDLE_PID once it is
# ready (its "ready" line in $WORK/pool-idle.NAME.out), "" if it failed
idle_hold() {
    local out="$WORK/pool-idle.$1.out"
    IDLE_PID=""
    "$BENCH_BIN/idle" 127.0.0.1 "$2" "$3" "$4" </dev/null >"$out" 2>&1 &
    local ipid=$!
    ALL_PIDS+=("$ipid")
    for _ in $(seq 1 $((RUN_TIMEOUT * 10))); do
        grep -q '^ready' "$out" 2>/dev/null && { IDLE_PID=$ipid; return 0; }
        kill -0 "$ipid" 2>/dev/null || break
        sleep 0.1
    done
    echo "pool: $1: the idle clients failed: $(grep -v '^ready' "$out" | tail -n 1)" >> "$FAILS"
    stop_pid "$ipid"
    return 1
}

# Connections to the upstream Redis that process <pid> (or its workers) holds,
# from ss's owner column: the other targets' own do not count (a pooled sluice
# keeps its shared connections open, twemproxy its server connection).
target_conns() { # pid
    local pids
    pids=$( { echo "$1"; pgrep -P "$1"; } | paste -sd'|')
    ss -tnpH state established "( dport = :$POOL_REDIS_PORT )" 2>/dev/null |
        grep -cE "pid=($pids),"
}

# Upstream connections with POOL_ACTIVE active and POOL_IDLE idle clients:
# the most the target held while redis-benchmark runs (Redis's
# connected_clients, less the asking connection, when the target's pid is
# not known).
pool_conns() { # target
    local t=$1 port bpid max=0 v name pid
    port=${POOL_PORT[$t]:-}
    [ -n "$port" ] || return 0
    name=${POOL_PID_NAME[$t]:-}
    pid=""; [ -n "$name" ] && pid=${PID_OF[$name]:-}
    idle_hold "conns.$t" "$port" "$POOL_IDLE" ping || return 0
    timeout -k 5 "$RUN_TIMEOUT" redis-benchmark -h 127.0.0.1 -p "$port" -c "$POOL_ACTIVE" \
        -n $((POOL_ACTIVE * 500)) -t get --csv >"$WORK/pool-conns.$t.csv" 2>&1 </dev/null &
    bpid=$!
    ALL_PIDS+=("$bpid")
    while kill -0 "$bpid" 2>/dev/null; do
        if [ -n "$pid" ]; then v=$(target_conns "$pid"); else v=$(upstream_clients "$POOL_REDIS_PORT"); fi
        [ -n "$v" ] && [ "$v" -gt "$max" ] && max=$v
        sleep 0.2
    done
    wait "$bpid"
    local rc=$?
    stop_pid "$IDLE_PID"
    if [ "$rc" -ne 0 ]; then
        echo "pool: conns via $(pool_label "$t"): redis-benchmark -c $POOL_ACTIVE failed (rc=$rc)" >> "$FAILS"
        return 0
    fi
    echo -e "pool:conns:$t\t$max" >> "$RAW"
    log "  $(pool_label "$t"): at most $max upstream connections"
}

# POOL_FANIN clients, each one GET, through the listener in front of the
# Redis with maxclients POOL_FANIN_MAXCLIENTS: how many were served.
pool_fanin() { # target
    local t=$1 port ok failed up
    port=${POOL_PORT2[$t]:-}
    [ -n "$port" ] || return 0
    [ -n "${PID_OF[pool_small]:-}" ] || return 0
    idle_hold "fanin.$t" "$port" "$POOL_FANIN" get || return 0
    read -r ok failed < <(awk '/^ready/ { print $4, $6 }' "$WORK/pool-idle.fanin.$t.out")
    up=$(upstream_clients "$POOL_SMALL_PORT")
    # a Redis at maxclients refuses the asking connection too: count the
    # established connections to it instead
    [ -z "$up" ] && have ss && up=$(ss -Htn state established "dport = :$POOL_SMALL_PORT" 2>/dev/null | wc -l)
    stop_pid "$IDLE_PID"
    printf 'pool:fanin:ok:%s\t%s\npool:fanin:failed:%s\t%s\n' "$t" "$ok" "$t" "$failed" >> "$RAW"
    [ -n "$up" ] && echo -e "pool:fanin:up:$t\t$up" >> "$RAW"
    log "  $(pool_label "$t"): $ok of $POOL_FANIN served, $failed failed, ${up:-?} upstream connections"
    [ "$failed" -gt 0 ] 2>/dev/null && echo "note: pool: fan-in via $(pool_label "$t"): $(grep -v '^ready' "$WORK/pool-idle.fanin.$t.out" | head -n 1)" >> "$FAILS"
    sleep 1 # let the refused connections' teardown finish before the next target
}

pool_bench() {
    pool_setup || { pool_stop; return 0; }
    local round t c cmd
    log "pool: $POOL_ROUNDS rounds x ${#POOL_TARGETS[@]} targets x -c {$POOL_CLIENTS} x {set,get} at -P 1," \
        "then ${#POOL_TARGETS_P16[@]} targets at -P 16 -c $CLIENTS"
    for t in "${POOL_TARGETS[@]}" tcp; do # warm-up: connections, lazy allocations
        [ -n "${POOL_PORT[$t]:-}" ] && timeout 20 redis-benchmark -h 127.0.0.1 -p "${POOL_PORT[$t]}" \
            -c 50 -n 5000 -t set,get -q >/dev/null 2>&1 </dev/null
    done
    for round in $(seq 1 "$POOL_ROUNDS"); do
        log "pool round $round/$POOL_ROUNDS"
        for c in $POOL_CLIENTS; do
            for cmd in set get; do
                unset "POOL_ROUND_RPS[1:$c:$cmd]" # a pooled run that failed pairs with nothing
                for t in "${POOL_TARGETS[@]}"; do
                    pool_run "$t" "$c" "$cmd" 1 "$round"
                done
            done
        done
        for cmd in set get; do
            for t in "${POOL_TARGETS_P16[@]}"; do
                pool_run "$t" "$CLIENTS" "$cmd" 16 "$round"
            done
        done
    done
    log "pool: upstream connections with $POOL_ACTIVE active and $POOL_IDLE idle clients"
    for t in one pooled nutcracker; do
        pool_conns "$t"
    done
    log "pool: $POOL_FANIN clients, one GET each, Redis maxclients $POOL_FANIN_MAXCLIENTS"
    for t in one pooled nutcracker; do
        pool_fanin "$t"
    done
    pool_stop
}

# best of two medians (either may be empty) -> "value name"
pool_best() {
    local a=$1 an=$2 b=$3 bn=$4
    if [ -n "$a" ] && { [ -z "$b" ] || ge "$a" "$b"; }; then echo "$a $an"; return; fi
    [ -n "$b" ] && echo "$b $bn"
}

# The twemproxy target as proposed for restating (docs/benchmarks.md,
# "seventh round"):
# where both runs hold the load generator at its ceiling (gen busy >= 0.95
# each), no proxy can be ahead, so parity: the median of the per-round
# ratios >= 0.97x and no more proxy + Redis CPU per request; elsewhere
# pooled >= 1.0x twemproxy as the medians say.
pool_twem_restated() { # key pooled_rps twem_rps cpu_ratio
    local k=$1 gp gt pair res="" why
    gp=$(median "pool:gbusy:$k:pooled"); gt=$(median "pool:gbusy:$k:nutcracker")
    pair=$(median "pool:twpair:$k")
    if [ -n "$gp" ] && [ -n "$gt" ] && ge "$gp" 0.95 && ge "$gt" 0.95; then
        why="generator the ceiling: per-round >=0.97x, CPU <=1.0x"
        [ -n "$pair" ] && [ -n "$4" ] && { ge "$pair" 0.97 && ge 1.0 "$4"; res=$?; }
    else
        why="generator has headroom: >=1.0x"
        [ -n "$2" ] && [ -n "$3" ] && { ge "$(ratio "$2" "$3")" 1.0; res=$?; }
    fi
    printf '  %-42s %s\n' "  ... proposed target ($why)" "$(mark "$res")"
}

pool_table() { # the pooling rows of the report
    local F='%-26s %9s %8s %9s %9s %9s\n' c cmd t k rps p99 rc pc
    echo "pooling rows: redis-benchmark -P 1, medians of $POOL_ROUNDS interleaved rounds"
    echo "  (CPU = runtime per request, from schedstat: redis = the upstream redis-server, proxy = all its processes/threads;"
    echo "   gen busy = redis-benchmark's own CPU per request x its requests/s: the share of one CPU it needs at that rate;"
    echo "   near 1.00 the load generator is the ceiling, whatever it runs against)"
    for c in $POOL_CLIENTS; do
        for cmd in set get; do
            printf "$F" "-P1 -c$c $cmd" "req/s" "p99 ms" "redis us" "proxy us" "gen busy"
            for t in "${POOL_TARGETS[@]}"; do
                k="1:$c:$cmd:$t"
                rps=$(median "pool:rps:$k"); p99=$(median "pool:p99:$k")
                rc=$(median "pool:rcpu:$k"); pc=$(median "pool:pcpu:$k")
                printf "$F" "  $(pool_label "$t")" "$(fmt "$rps" 0)" "$(fmt "$p99" 2)" "$(fmt "$rc" 2)" \
                    "$([ "$t" = direct ] && echo - || fmt "$pc" 2)" "$(fmt "$(median "pool:gbusy:$k")" 2)"
            done
            local pr best bn tw r1 r2 r3 res
            k="1:$c:$cmd"
            pr=$(median "pool:rps:$k:pooled")
            read -r best bn < <(pool_best "$(median "pool:rps:$k:haproxy")" haproxy "$(median "pool:rps:$k:nginx")" nginx)
            tw=$(median "pool:rps:$k:nutcracker")
            r1=$(ratio "$pr" "${best:-}"); r2=$(ratio "$pr" "$tw")
            r3=$(ratio "$(median "pool:rcpu:$k:pooled")" "$(median "pool:rcpu:$k:direct")")
            res=""; [ -n "$r1" ] && { ge "$r1" 1.3; res=$?; }
            printf '  %-42s %s\n' "pooled / best of haproxy, nginx (${bn:-none})" "${r1:-n/a}${r1:+x}  >=1.3x: $(mark "$res")"
            res=""; [ -n "$r2" ] && { ge "$r2" 1.0; res=$?; }
            printf '  %-42s %s\n' "pooled / twemproxy" "${r2:-n/a}${r2:+x}  >=1.0x: $(mark "$res")"
            # the same two paired round by round, and what each costs the
            # machine per request (docs/benchmarks.md, "seventh round")
            r2=$(median "pool:twpair:$k")
            printf '  %-42s %s\n' "  ... median of the per-round ratios" "$(fmt "$r2" 2)${r2:+x} ($(count "pool:twpair:$k") rounds)"
            r2=$(ratio "$(awk -v a="$(median "pool:pcpu:$k:pooled")" -v b="$(median "pool:rcpu:$k:pooled")" 'BEGIN { if (a != "" && b != "") print a + b }')" \
                "$(awk -v a="$(median "pool:pcpu:$k:nutcracker")" -v b="$(median "pool:rcpu:$k:nutcracker")" 'BEGIN { if (a != "" && b != "") print a + b }')")
            printf '  %-42s %s\n' "  ... proxy + redis CPU/req pooled / twem" "${r2:-n/a}${r2:+x}"
            pool_twem_restated "$k" "$pr" "$tw" "$r2"
            res=""; [ -n "$r3" ] && { ge 0.35 "$r3"; res=$?; }
            printf '  %-42s %s\n' "redis CPU/req pooled / direct" "${r3:-n/a}${r3:+x}  <=0.35x: $(mark "$res")"
        done
    done
    echo
    echo "pooling rows: redis-benchmark -P 16 -c $CLIENTS"
    for cmd in set get; do
        printf "$F" "-P16 $cmd" "req/s" "p99 ms" "redis us" "proxy us" "gen busy"
        for t in "${POOL_TARGETS_P16[@]}"; do
            k="16:$CLIENTS:$cmd:$t"
            rps=$(median "pool:rps:$k"); p99=$(median "pool:p99:$k")
            rc=$(median "pool:rcpu:$k"); pc=$(median "pool:pcpu:$k")
            printf "$F" "  $(pool_label "$t")" "$(fmt "$rps" 0)" "$(fmt "$p99" 2)" "$(fmt "$rc" 2)" \
                "$([ "$t" = direct ] && echo - || fmt "$pc" 2)" "$(fmt "$(median "pool:gbusy:$k")" 2)"
        done
        k="16:$CLIENTS:$cmd"
        r1=$(ratio "$(median "pool:rps:$k:pooled")" "$(median "pool:rps:$k:one")")
        r2=$(ratio "$(median "pool:pcpu:$k:one")" "$(median "pool:pcpu:$k:nginx")")
        res=""; [ -n "$r1" ] && { ge "$r1" 1.0; res=$?; }
        printf '  %-42s %s\n' "pooled / 1:1 req/s" "${r1:-n/a}${r1:+x}  >=1.0x: $(mark "$res")"
        res=""; [ -n "$r2" ] && { ge 1.0 "$r2"; res=$?; }
        printf '  %-42s %s\n' "1:1 proxy CPU/req / nginx stream's" "${r2:-n/a}${r2:+x}  <=1.0x: $(mark "$res")"
        # the same split in two (docs/benchmarks.md, "seventh round"): the
        # session without the framing against nginx, and what framing adds
        r2=$(ratio "$(median "pool:pcpu:$k:tcp")" "$(median "pool:pcpu:$k:nginx")")
        res=""; [ -n "$r2" ] && { ge 1.0 "$r2"; res=$?; }
        printf '  %-42s %s\n' "  ... 1:1 tcp CPU/req / nginx stream's" "${r2:-n/a}${r2:+x}  <=1.0x: $(mark "$res")"
        r2=$(ratio "$(median "pool:pcpu:$k:one")" "$(median "pool:pcpu:$k:tcp")")
        printf '  %-42s %s\n' "  ... 1:1 resp / 1:1 tcp (the framing)" "${r2:-n/a}${r2:+x}"
    done
    echo
    echo "upstream connections (Redis's connected_clients, highest seen)"
    local one pooled nut okv fv up
    one=$(median pool:conns:one); pooled=$(median pool:conns:pooled); nut=$(median pool:conns:nutcracker)
    printf '  %-42s %s\n' "$POOL_ACTIVE active + $POOL_IDLE idle clients" \
        "sluice 1:1 $(fmt "$one" 0), sluice pooled $(fmt "$pooled" 0), twemproxy $(fmt "$nut" 0)"
    res=""
    if [ -n "$pooled" ]; then
        # workers x N (plus the pinned ones: none in this load)
        [ "$pooled" -le $(( POOL_WORKERS * POOL_SIZE )) ]; res=$?
    fi
    printf '  %-42s %s\n' "" "pooled <= workers x $POOL_SIZE = $(( POOL_WORKERS * POOL_SIZE )): $(mark "$res")"
    for t in one pooled nutcracker; do
        okv=$(median "pool:fanin:ok:$t"); fv=$(median "pool:fanin:failed:$t"); up=$(median "pool:fanin:up:$t")
        res=""; [ -n "$okv" ] && { [ "$okv" -eq "$POOL_FANIN" ]; res=$?; }
        printf '  %-42s %s\n' "$POOL_FANIN clients, maxclients $POOL_FANIN_MAXCLIENTS: $(pool_label "$t")" \
            "$(fmt "$okv" 0) served, $(fmt "$fv" 0) failed, upstream $(fmt "$up" 0)$([ "$t" = pooled ] && echo "; all served: $(mark "$res")")"
    done
}

pool_report_only() { # BENCH_ONLY=pool: the pooling rows alone
    {
        echo "sluice benchmark (pooling rows only) — $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, $(uname -r)"
        echo "sluice: workers = auto ($(nproc)), pooled: '$POOL_CONF' with workers = $POOL_WORKERS; haproxy: nbthread $POOL_HAPROXY_NBTHREAD;" \
            "nginx stream: worker_processes $SLUICE_WORKERS; twemproxy: server_connections 1"
        pool_table
        echo "samples (-P1 -c$(echo "$POOL_CLIENTS" | awk '{print $1}') get): $(for t in "${POOL_TARGETS[@]}"; do printf '%s=%s ' "$t" "$(count "pool:rps:1:$(echo "$POOL_CLIENTS" | awk '{print $1}'):get:$t")"; done)"
        fails_notes
    } | report_save
}
