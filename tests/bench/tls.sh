# sluice benchmark, TLS rows: sourced by tests/bench/bench.sh (uses its
# spawn/stop/free_port/median/cpu_ticks/... helpers and $WORK, $RAW, $FAILS).
#
# A throwaway CA and a server certificate (ECDSA P-256, made here with the
# openssl command) serve every TLS end. redis-server listens with
# --tls-port only; in interleaved rounds, redis-benchmark --tls -c 50
# -t get,set at -P 1 and -P 16 runs against:
#   direct    the Redis TLS port itself
#   sluice    a resp listener with tls_cert/tls_key, upstream_tls = on
#             (verified against the CA, SNI localhost), workers = $SLUICE_WORKERS
#   sluicetcp the same as a tcp listener: bytes relayed without RESP framing,
#             which is what haproxy's mode tcp does (the TLS transport alone)
#   haproxy   mode tcp, `bind ... ssl crt`, `server ... ssl verify required`
#             (one thread per CPU, as sluice has one process per CPU)
# Per run: requests/s and the proxy's CPU time per request (utime + stime,
# /proc/PID/stat, before and after). Then the RSS per idle TLS connection
# pair: $IDLE_CONNS clients (tests/bench/idle_tls.c: handshake, one PING
# each, then idle) on a fresh sluice and a fresh HAProxy.
# BENCH_ONLY=tls runs only these rows.

TLS_ROUNDS=${BENCH_TLS_ROUNDS:-3}
TLS_N_P1=${BENCH_TLS_N_P1:-50000}
TLS_N_P16=${BENCH_TLS_N_P16:-300000}
TLS_TARGETS=(direct sluice sluicetcp haproxy)
declare -A TLS_PORT=() TLS_PID_NAME=()
TLS_DIR=

tls_certs() { # dir: ca.crt, server.crt, server.key, server.pem (cert + key)
    local d=$1
    (
        cd "$d" || exit 1
        openssl ecparam -name prime256v1 -genkey -noout -out ca.key &&
        openssl req -x509 -new -key ca.key -subj /CN=sluice-bench-ca -days 2 -out ca.crt &&
        openssl ecparam -name prime256v1 -genkey -noout -out server.key &&
        openssl req -new -key server.key -subj /CN=localhost -out server.csr &&
        printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\n' > server.ext &&
        openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 \
            -extfile server.ext -out server.crt &&
        cat server.crt server.key > server.pem
    ) >"$d/openssl.log" 2>&1
}

tls_ping() { # port: one PING over TLS
    [ "$(timeout 2 redis-cli --tls --cacert "$TLS_DIR/ca.crt" --sni localhost -h 127.0.0.1 \
          -p "$1" ping 2>/dev/null)" = PONG ]
}

tls_wait() { # port [pid]
    for _ in $(seq 1 50); do
        tls_ping "$1" && return 0
        [ -n "${2:-}" ] && ! kill -0 "$2" 2>/dev/null && return 1
        sleep 0.1
    done
    return 1
}

tls_sluice_conf() { # file port [protocol]
    {
        printf '[sluice]\nadmin =\nworkers = %s\n\n[store]\nurl = local\n\n' "$SLUICE_WORKERS"
        printf '[listener r]\nlisten = 127.0.0.1:%s\nupstream = 127.0.0.1:%s\nprotocol = %s\n' \
            "$2" "$TLS_REDIS_PORT" "${3:-resp}"
        printf 'max_connections = 20000\ntls_cert = %s/server.crt\ntls_key = %s/server.key\n' \
            "$TLS_DIR" "$TLS_DIR"
        printf 'upstream_tls = on\nupstream_tls_ca = %s/ca.crt\nupstream_tls_sni = localhost\n' \
            "$TLS_DIR"
    } > "$1"
}

tls_haproxy_conf() { # file port
    {
        printf 'global\n    maxconn %s\n' "$HAPROXY_MAXCONN"
        [ -n "$HAPROXY_NBTHREAD" ] && printf '    nbthread %s\n' "$HAPROXY_NBTHREAD"
        printf 'defaults\n    mode tcp\n    timeout connect 5s\n    timeout client 10m\n    timeout server 10m\n'
        printf 'frontend f\n    bind 127.0.0.1:%s ssl crt %s/server.pem\n    default_backend b\n' \
            "$2" "$TLS_DIR"
        printf 'backend b\n    server r 127.0.0.1:%s ssl verify required ca-file %s/ca.crt sni str(localhost)\n' \
            "$TLS_REDIS_PORT" "$TLS_DIR"
    } > "$1"
}

# Starts proxy <kind> (sluice|sluicetcp|haproxy) as process <name> on <port>.
tls_start_proxy() { # kind name port
    case $1 in
    sluice|sluicetcp)
        tls_sluice_conf "$WORK/$2.ini" "$3" "$([ "$1" = sluicetcp ] && echo tcp || echo resp)"
        "$SLUICE_BIN" -t -c "$WORK/$2.ini" >"$WORK/$2.check" 2>&1 || {
            echo "tls: sluice does not take the TLS keys: $(head -n 1 "$WORK/$2.check")" >> "$FAILS"
            return 1
        }
        spawn "$2" "$WORK/$2.log" "$SLUICE_BIN" -c "$WORK/$2.ini" ;;
    haproxy)
        tls_haproxy_conf "$WORK/$2.cfg" "$3"
        spawn "$2" "$WORK/$2.log" haproxy -db -f "$WORK/$2.cfg" ;;
    esac
    tls_wait "$3" "${PID_OF[$2]}" && return 0
    echo "tls: $1 did not answer PING over TLS: $(tail -n 1 "$WORK/$2.log")" >> "$FAILS"
    stop "$2"
    return 1
}

tls_setup() {
    TLS_DIR=$WORK/tls
    mkdir -p "$TLS_DIR"
    tls_certs "$TLS_DIR" || { echo "tls: openssl could not make the certificates" >> "$FAILS"; return 1; }
    TLS_REDIS_PORT=$(free_port)
    spawn tls_redis "$WORK/tls_redis.log" redis-server --port 0 --tls-port "$TLS_REDIS_PORT" \
        --tls-cert-file "$TLS_DIR/server.crt" --tls-key-file "$TLS_DIR/server.key" \
        --tls-ca-cert-file "$TLS_DIR/ca.crt" --tls-auth-clients no --save "" --appendonly no
    tls_wait "$TLS_REDIS_PORT" "${PID_OF[tls_redis]}" ||
        { echo "tls: redis-server --tls-port did not start (built without TLS?)" >> "$FAILS"; return 1; }
    TLS_PORT[direct]=$TLS_REDIS_PORT
    TLS_PID_NAME[direct]=tls_redis
    if [ "$HAVE_SLUICE" = 1 ]; then
        TLS_PORT[sluice]=$(free_port)
        tls_start_proxy sluice tls_sluice "${TLS_PORT[sluice]}" && TLS_PID_NAME[sluice]=tls_sluice
        TLS_PORT[sluicetcp]=$(free_port)
        tls_start_proxy sluicetcp tls_sluicetcp "${TLS_PORT[sluicetcp]}" &&
            TLS_PID_NAME[sluicetcp]=tls_sluicetcp
    fi
    if [ "$HAVE_HAPROXY" = 1 ]; then
        TLS_PORT[haproxy]=$(free_port)
        tls_start_proxy haproxy tls_haproxy "${TLS_PORT[haproxy]}" && TLS_PID_NAME[haproxy]=tls_haproxy
    fi
    return 0
}

tls_run() { # target P n
    local t=$1 p=$2 n=$3 name=${TLS_PID_NAME[$1]:-} out c0 c1 set get
    [ -n "$name" ] && alive "$name" || return 0
    out=$WORK/tls.$t.$p.csv
    c0=$(cpu_ticks "${PID_OF[$name]}")
    timeout "$RUN_TIMEOUT" redis-benchmark --tls --cacert "$TLS_DIR/ca.crt" --sni localhost \
        -h 127.0.0.1 -p "${TLS_PORT[$t]}" -c "$CLIENTS" -P "$p" -n "$n" -t get,set --csv \
        >"$out" 2>/dev/null || { echo "tls: redis-benchmark against $t at -P $p failed" >> "$FAILS"; return 0; }
    c1=$(cpu_ticks "${PID_OF[$name]}")
    set=$(awk -F'"' '$2 == "SET" { print $4 }' "$out")
    get=$(awk -F'"' '$2 == "GET" { print $4 }' "$out")
    [ -n "$set" ] && [ -n "$get" ] || { echo "tls: no figures from $t at -P $p" >> "$FAILS"; return 0; }
    printf 'tls:%s:P%s:set\t%s\ntls:%s:P%s:get\t%s\n' "$t" "$p" "$set" "$t" "$p" "$get" >> "$RAW"
    # CPU per request over both tests (2n requests), in microseconds
    awk -v a="$c0" -v b="$c1" -v hz="$CLK_TCK" -v n="$n" -v k="tls:$t:P$p:cpu" \
        'BEGIN { printf "%s\t%.3f\n", k, (b - a) / hz * 1e6 / (2 * n) }' >> "$RAW"
}

tls_idle() { # kind: RSS per idle TLS connection on a fresh proxy
    local kind=$1 name=tls_idle_$1 port before after ok=0
    port=$(free_port)
    tls_start_proxy "$kind" "$name" "$port" || return 0
    before=$(rss_bytes "${PID_OF[$name]}")
    "$BENCH_BIN/idle_tls" 127.0.0.1 "$port" "$IDLE_CONNS" "$TLS_DIR/ca.crt" >"$WORK/$name.out" 2>&1 &
    local ip=$!
    ALL_PIDS+=($ip)
    for _ in $(seq 1 600); do
        grep -q '^ready' "$WORK/$name.out" 2>/dev/null && { ok=1; break; }
        kill -0 "$ip" 2>/dev/null || break
        sleep 0.1
    done
    if [ "$ok" = 1 ]; then
        sleep 1
        after=$(rss_bytes "${PID_OF[$name]}")
        for p in $(pgrep -P "${PID_OF[$name]}" 2>/dev/null); do # workers
            after=$((after + $(rss_bytes "$p")))
        done
        printf 'tls:idle:%s\t%s\n' "$kind" $(( (after - before) / IDLE_CONNS )) >> "$RAW"
    else
        echo "tls: idle $kind: $(tail -n 1 "$WORK/$name.out")" >> "$FAILS"
    fi
    stop_pid "$ip"
    stop "$name"
}

tls_bench() {
    have openssl || { echo "tls: openssl not installed: TLS rows n/a" >> "$FAILS"; return 0; }
    if [ ! -x "$BENCH_BIN/idle_tls" ] || [ tests/bench/idle_tls.c -nt "$BENCH_BIN/idle_tls" ]; then
        cc -O2 -Wall -Wextra -o "$BENCH_BIN/idle_tls" tests/bench/idle_tls.c -lssl -lcrypto ||
            { echo "tls: cannot compile tests/bench/idle_tls.c" >> "$FAILS"; return 0; }
    fi
    log "TLS: redis-benchmark --tls, $TLS_ROUNDS interleaved rounds (direct, sluice, sluicetcp, haproxy)"
    tls_setup || return 0
    local r t
    for r in $(seq 1 "$TLS_ROUNDS"); do
        for t in "${TLS_TARGETS[@]}"; do
            tls_run "$t" 1 "$TLS_N_P1"
            tls_run "$t" 16 "$TLS_N_P16"
        done
    done
    stop tls_sluice
    stop tls_sluicetcp
    stop tls_haproxy
    log "TLS: RSS per idle connection, $IDLE_CONNS TLS clients each (fresh proxies)"
    [ "$HAVE_SLUICE" = 1 ] && tls_idle sluice
    [ "$HAVE_HAPROXY" = 1 ] && tls_idle haproxy
    stop tls_redis
}

tls_table() { # the TLS rows of the report
    local p t set get cpu hset hget hcpu
    echo
    echo "TLS (redis-benchmark --tls -c $CLIENTS -t get,set; TLS in and TLS out; medians of $TLS_ROUNDS rounds)"
    printf '%-22s %12s %12s %10s %14s %12s\n' "row" "SET req/s" "GET req/s" "CPU us/req" "x haproxy" "target"
    for p in 1 16; do
        hset=$(median "tls:haproxy:P$p:set"); hget=$(median "tls:haproxy:P$p:get")
        hcpu=$(median "tls:haproxy:P$p:cpu")
        for t in "${TLS_TARGETS[@]}"; do
            set=$(median "tls:$t:P$p:set"); get=$(median "tls:$t:P$p:get"); cpu=$(median "tls:$t:P$p:cpu")
            local x="" tgt=""
            if [ "${t#sluice}" != "$t" ] && [ -n "$set" ] && [ -n "$hset" ]; then
                x="$(ratio "$set" "$hset")/$(ratio "$get" "$hget")"
                # at least 1.0x haproxy both ways, with no more CPU per request
                if ge "$(ratio "$set" "$hset")" 1 && ge "$(ratio "$get" "$hget")" 1 && ge "$hcpu" "$cpu"; then
                    tgt=PASS
                elif [ -n "$cpu" ]; then
                    tgt=MISS
                fi
            fi
            printf '%-22s %12s %12s %10s %14s %12s\n' "$t -P $p" "$(fmt "$set" 0)" "$(fmt "$get" 0)" \
                "$(fmt "$cpu" 2)" "$x" "$tgt"
        done
    done
    printf 'RSS per idle TLS connection pair (%s clients): sluice %s bytes, haproxy %s bytes\n' \
        "$IDLE_CONNS" "$(fmt "$(median tls:idle:sluice)" 0)" "$(fmt "$(median tls:idle:haproxy)" 0)"
}

tls_report_only() { # BENCH_ONLY=tls: the TLS rows alone
    {
        echo "sluice benchmark (TLS rows only) — $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, $(uname -r)"
        echo "sluice: workers = $SLUICE_WORKERS; haproxy: nbthread ${HAPROXY_NBTHREAD:-default (one per CPU)}"
        tls_table
        fails_notes
    } | report_save
}
