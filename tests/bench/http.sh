# sluice benchmark, HTTP rows: sourced by tests/bench/bench.sh (uses its
# spawn/stop/free_port/median/... helpers and $WORK, $RAW, $FAILS).
#
# wrk -t2 -c50 -d$HTTP_DURATION --latency (keep-alive) for GET /small, a
# 6-byte response from nginx, in interleaved rounds against:
#   direct    nginx itself (worker_processes 1)
#   sluice    protocol = http, workers = $SLUICE_WORKERS, no limit, upstream_keepalive = 32
#   sluicel   one process (workers = 1: with url = local, workers would
#             each count alone, and sluice refuses that) with a limit that
#             always allows
#   sluicer   workers = $SLUICE_WORKERS, the same limit decided in a
#             quota-store Redis with lease = auto (the target's row)
#   haproxy   mode http, keep-alive, http-reuse always
#   nginxp    nginx proxy_pass with upstream keepalive, worker_processes
#             $SLUICE_WORKERS
# Per run: requests/s, p99 latency, and the proxy's CPU time per request
# (utime + stime of the process and its children, from /proc/PID/stat,
# read before and after the run; for direct: nginx's own).
#
# One-request connections: the same wrk with -H 'Connection: close' (every
# request on a new client connection) against direct, sluice (no limit) and
#   nginxk    nginx proxy_pass with an upstream `keepalive $HTTP_CLOSE_KEEPALIVE`
#             block (proxy_http_version 1.1, Connection ""), worker_processes
#             $SLUICE_WORKERS
# with, beside the figures above, the connections the upstream nginx accepted
# during the run per request (its stub_status `accepts`, read before and after).

HTTP_ROUNDS=${BENCH_HTTP_ROUNDS:-3}
HTTP_DURATION=${BENCH_HTTP_DURATION:-5}
HTTP_CONNS=${BENCH_HTTP_CONNS:-50}
HTTP_TARGETS=(direct sluice sluicel sluicer haproxy nginxp)
HTTP_CLOSE_ROUNDS=${BENCH_HTTP_CLOSE_ROUNDS:-$HTTP_ROUNDS}
HTTP_CLOSE_KEEPALIVE=${BENCH_HTTP_CLOSE_KEEPALIVE:-32}
HTTP_CLOSE_TARGETS=(direct sluice nginxk)
CLK_TCK=$(getconf CLK_TCK 2>/dev/null || echo 100)
declare -A HTTP_PORT=() HTTP_PID_NAME=()

cpu_ticks() { # pid -> utime + stime of it and its direct children, in clock ticks
    local p t=0 v
    for p in "$1" $(pgrep -P "$1" 2>/dev/null); do
        # the command name may hold blanks: count fields after its ')'
        v=$(awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "/proc/$p/stat" 2>/dev/null)
        t=$((t + ${v:-0}))
    done
    echo "$t"
}

wait_http() { # port [pid]: until GET /small answers 200
    for _ in $(seq 1 50); do
        curl -sf -o /dev/null --max-time 1 "http://127.0.0.1:$1/small" 2>/dev/null && return 0
        [ -n "${2:-}" ] && ! kill -0 "$2" 2>/dev/null && return 1
        sleep 0.1
    done
    return 1
}

http_nginx_conf() { # dir port workers [upstream port: proxy_pass [keepalive]]
    mkdir -p "$1/logs" "$1/tmp"
    {
        printf 'worker_processes %s;\npid %s/nginx.pid;\nerror_log %s/logs/error.log;\n' "$3" "$1" "$1"
        printf 'events { worker_connections 4096; }\n'
        printf 'http {\n    access_log off;\n    client_body_temp_path %s/tmp/body;\n' "$1"
        printf '    proxy_temp_path %s/tmp/proxy;\n' "$1"
        printf '    keepalive_requests 10000000;\n    keepalive_timeout 300s;\n'
        if [ -n "${4:-}" ]; then
            printf '    upstream up {\n        server 127.0.0.1:%s;\n        keepalive %s;\n    }\n' "$4" "${5:-128}"
            printf '    server {\n        listen 127.0.0.1:%s;\n        location / {\n' "$2"
            printf '            proxy_pass http://up;\n            proxy_http_version 1.1;\n'
            printf '            proxy_set_header Connection "";\n        }\n    }\n'
        else
            printf '    server {\n        listen 127.0.0.1:%s;\n' "$2"
            printf '        location = /small { default_type text/plain; return 200 "hello\\n"; }\n'
            # the connections it accepted: read by the one-request rows
            # (when this nginx has the module: else that column is n/a)
            if "${HTTP_NGINX_BIN:-nginx}" -V 2>&1 | grep -q stub_status; then
                printf '        location = /sluice-bench-status { stub_status; }\n'
            fi
            printf '    }\n'
        fi
        printf '}\n'
    } > "$1/nginx.conf"
}

http_sluice_conf() { # file port upstream variant(plain|local|lease) [store port]
    {
        # url = local counts in one process only: one worker there
        printf '[sluice]\nadmin =\nworkers = %s\n\n' "$([ "$4" = local ] && echo 1 || echo "$SLUICE_WORKERS")"
        if [ "$4" = lease ]; then
            printf '[store]\nurl = redis://127.0.0.1:%s\ntimeout = 200ms\nlease = auto\n\n' "$5"
        else
            printf '[store]\nurl = local\n\n'
        fi
        printf '[listener h]\nlisten = 127.0.0.1:%s\nupstream = 127.0.0.1:%s\nprotocol = http\n' "$2" "$3"
        # kept upstream connections, as the nginx peer's `keepalive 32`: the
        # one-request rows open no upstream connection per client
        printf 'max_connections = 20000\nupstream_keepalive = %s\n\n' "${BENCH_HTTP_KEEPALIVE:-32}"
        if [ "$4" != plain ]; then
            # matches every request, never triggers: the cost of enforcement
            printf '[limit always]\nlistener = h\nmetric = requests\nrate = 1000000000/s\nscope = global\n'
        fi
    } > "$1"
}

http_setup() {
    HTTP_OK=0
    have wrk || { log "warning: wrk not installed: HTTP rows n/a"; echo "http: wrk not installed" >> "$FAILS"; return 1; }
    have nginx || [ -x /usr/sbin/nginx ] || { log "warning: nginx not installed: HTTP rows n/a"; return 1; }
    have curl || { log "warning: curl not installed: HTTP rows n/a"; return 1; }
    local ngx=nginx
    have nginx || ngx=/usr/sbin/nginx
    HTTP_NGINX_BIN=$ngx
    local up
    up=$(free_port)
    http_nginx_conf "$WORK/http-up" "$up" 1
    spawn http_up "$WORK/http-up.log" "$ngx" -p "$WORK/http-up" -e "$WORK/http-up/logs/error.log" \
        -c "$WORK/http-up/nginx.conf" -g 'daemon off;'
    wait_http "$up" "${PID_OF[http_up]}" || { log "warning: the nginx upstream did not start"; cat "$WORK/http-up/logs/error.log" >&2; return 1; }
    HTTP_PORT[direct]=$up; HTTP_PID_NAME[direct]=http_up
    HTTP_OK=1

    local t p
    if [ "$HAVE_SLUICE" = 1 ]; then
        HTTP_STORE_PORT=$(free_port)
        spawn http_store "$WORK/http-store.log" redis-server --port "$HTTP_STORE_PORT" --bind 127.0.0.1 \
            --save '' --appendonly no --daemonize no
        wait_ping "$HTTP_STORE_PORT" 50 || log "warning: the quota store for the HTTP lease row did not start"
        for t in sluice:plain sluicel:local sluicer:lease; do
            p=$(free_port)
            http_sluice_conf "$WORK/http-${t%%:*}.ini" "$p" "$up" "${t#*:}" "$HTTP_STORE_PORT"
            spawn "http_${t%%:*}" "$WORK/http-${t%%:*}.log" "$SLUICE_BIN" -c "$WORK/http-${t%%:*}.ini"
            if wait_http "$p" "${PID_OF[http_${t%%:*}]}"; then
                HTTP_PORT[${t%%:*}]=$p; HTTP_PID_NAME[${t%%:*}]=http_${t%%:*}
            else
                log "warning: sluice (${t#*:}) for HTTP did not start:"; tail -n 10 "$WORK/http-${t%%:*}.log" >&2
                echo "http: sluice (${t#*:}) did not start" >> "$FAILS"
            fi
        done
    fi
    if [ "$HAVE_HAPROXY" = 1 ]; then
        p=$(free_port)
        {
            printf 'global\n    maxconn %s\n' "$HAPROXY_MAXCONN"
            [ -n "$HAPROXY_NBTHREAD" ] && printf '    nbthread %s\n' "$HAPROXY_NBTHREAD"
            printf 'defaults\n    mode http\n    option http-keep-alive\n    http-reuse always\n'
            printf '    timeout connect 5s\n    timeout client 1m\n    timeout server 1m\n'
            printf 'frontend fe\n    bind 127.0.0.1:%s\n    default_backend be\n' "$p"
            printf 'backend be\n    server ng 127.0.0.1:%s\n' "$up"
        } > "$WORK/http-haproxy.cfg"
        spawn http_haproxy "$WORK/http-haproxy.log" haproxy -db -f "$WORK/http-haproxy.cfg"
        if wait_http "$p" "${PID_OF[http_haproxy]}"; then
            HTTP_PORT[haproxy]=$p; HTTP_PID_NAME[haproxy]=http_haproxy
        else
            log "warning: haproxy (mode http) did not start"; tail -n 5 "$WORK/http-haproxy.log" >&2
        fi
    fi
    p=$(free_port)
    http_nginx_conf "$WORK/http-px" "$p" "$SLUICE_WORKERS" "$up"
    spawn http_nginxp "$WORK/http-px.log" "$ngx" -p "$WORK/http-px" -e "$WORK/http-px/logs/error.log" \
        -c "$WORK/http-px/nginx.conf" -g 'daemon off;'
    if wait_http "$p" "${PID_OF[http_nginxp]}"; then
        HTTP_PORT[nginxp]=$p; HTTP_PID_NAME[nginxp]=http_nginxp
    else
        log "warning: nginx proxy_pass did not start"; cat "$WORK/http-px/logs/error.log" >&2
    fi
    p=$(free_port)
    http_nginx_conf "$WORK/http-pk" "$p" "$SLUICE_WORKERS" "$up" "$HTTP_CLOSE_KEEPALIVE"
    spawn http_nginxk "$WORK/http-pk.log" "$ngx" -p "$WORK/http-pk" -e "$WORK/http-pk/logs/error.log" \
        -c "$WORK/http-pk/nginx.conf" -g 'daemon off;'
    if wait_http "$p" "${PID_OF[http_nginxk]}"; then
        HTTP_PORT[nginxk]=$p; HTTP_PID_NAME[nginxk]=http_nginxk
    else
        log "warning: nginx proxy_pass (keepalive $HTTP_CLOSE_KEEPALIVE) did not start"; cat "$WORK/http-pk/logs/error.log" >&2
    fi
}

# connections the upstream nginx has accepted so far (stub_status), or ""
http_up_accepts() {
    curl -s --max-time 2 "http://127.0.0.1:${HTTP_PORT[direct]}/sluice-bench-status" 2>/dev/null |
        awk 'prev { print $1; exit } /server accepts/ { prev = 1 }'
}

# wrk's "1.23ms" / "456.00us" / "1.02s" -> ms
to_ms() {
    awk -v v="$1" 'BEGIN { n = v + 0; if (v ~ /us$/) n /= 1000; else if (v ~ /ms$/) n += 0;
        else if (v ~ /s$/) n *= 1000; printf "%.3f", n }'
}

http_run() { # target round [close: one request per connection]
    local t=$1 port name pid out c0 c1 rps p99 reqs rc a0 a1 kp=http hdr=()
    [ "${3:-}" = close ] && { kp=httpc; hdr=(-H 'Connection: close'); }
    port=${HTTP_PORT[$t]:-}
    [ -n "$port" ] || return 0
    name=${HTTP_PID_NAME[$t]}
    pid=${PID_OF[$name]:-}
    if [ -z "$pid" ] || ! kill -0 "$pid" 2>/dev/null; then
        echo "round $2: http via $t: the process is gone" >> "$FAILS"
        unset "HTTP_PORT[$t]"
        return 0
    fi
    out="$WORK/wrk.$kp.$t.$2.txt"
    [ "$kp" = httpc ] && a0=$(http_up_accepts)
    c0=$(cpu_ticks "$pid")
    timeout -k 5 "$RUN_TIMEOUT" wrk -t2 -c"$HTTP_CONNS" -d"${HTTP_DURATION}s" --latency "${hdr[@]}" \
        "http://127.0.0.1:$port/small" >"$out" 2>&1 </dev/null
    rc=$?
    c1=$(cpu_ticks "$pid")
    [ "$kp" = httpc ] && a1=$(http_up_accepts)
    rps=$(awk '/^Requests\/sec:/ { print $2 }' "$out")
    p99=$(awk '$1 == "99%" { print $2 }' "$out")
    reqs=$(awk '/requests in/ { print $1 }' "$out")
    if [ "$rc" -ne 0 ] || [ -z "$rps" ] || [ -z "$p99" ] || [ -z "$reqs" ] || [ "$reqs" -eq 0 ] ||
        grep -q 'Non-2xx' "$out"; then
        echo "round $2: wrk ${hdr[*]} via $t failed (rc=$rc): $(grep -E 'Non-2xx|errors|unable' "$out" | head -n 2 | tr '\n' ' ')" >> "$FAILS"
        log "  $t: FAILED (rc=$rc)"
        return 0
    fi
    local us
    us=$(awk -v a="$c0" -v b="$c1" -v n="$reqs" -v hz="$CLK_TCK" 'BEGIN { printf "%.2f", (b - a) / hz * 1e6 / n }')
    p99=$(to_ms "$p99")
    printf '%s:rps:%s\t%s\n%s:p99:%s\t%s\n%s:cpu:%s\t%s\n' "$kp" "$t" "$rps" "$kp" "$t" "$p99" "$kp" "$t" "$us" >> "$RAW"
    local acc=""
    if [ -n "${a0:-}" ] && [ -n "${a1:-}" ]; then
        # less the status request that read a1
        acc=$(awk -v a="$a0" -v b="$a1" -v n="$reqs" 'BEGIN { printf "%.3f", (b - a - 1) / n }')
        printf '%s:acc:%s\t%s\n' "$kp" "$t" "$acc" >> "$RAW"
    fi
    grep -q "Socket errors" "$out" && echo "note: round $2: wrk ${hdr[*]} via $t: $(grep 'Socket errors' "$out" | sed 's/^ *//')" >> "$FAILS"
    log "  $t${hdr[*]:+ (close)}: $rps req/s, p99 $p99 ms, $us us CPU/request${acc:+, $acc upstream connections/request}"
}

http_bench() {
    http_setup || { http_stop; return 0; }
    log "HTTP: $HTTP_ROUNDS rounds x ${#HTTP_TARGETS[@]} targets x wrk -t2 -c$HTTP_CONNS -d${HTTP_DURATION}s (GET /small, keep-alive)"
    local round t
    # one short warm-up each (connections, lazy allocations, lease fill)
    for t in "${HTTP_TARGETS[@]}"; do
        [ -n "${HTTP_PORT[$t]:-}" ] && timeout 10 wrk -t1 -c10 -d1s "http://127.0.0.1:${HTTP_PORT[$t]}/small" >/dev/null 2>&1
    done
    for round in $(seq 1 "$HTTP_ROUNDS"); do
        log "HTTP round $round/$HTTP_ROUNDS"
        for t in "${HTTP_TARGETS[@]}"; do
            http_run "$t" "$round"
        done
    done
    log "HTTP one-request connections: $HTTP_CLOSE_ROUNDS rounds x ${#HTTP_CLOSE_TARGETS[@]} targets x wrk -H 'Connection: close'"
    for round in $(seq 1 "$HTTP_CLOSE_ROUNDS"); do
        log "HTTP close round $round/$HTTP_CLOSE_ROUNDS"
        for t in "${HTTP_CLOSE_TARGETS[@]}"; do
            http_run "$t" "$round" close
        done
    done
    http_stop
}

http_stop() {
    local n
    for n in http_sluice http_sluicel http_sluicer http_haproxy http_nginxp http_nginxk http_up http_store; do
        stop "$n"
    done
}

http_label() {
    case "$1" in
        direct) echo "direct (nginx)" ;;
        sluice) echo "sluice, no limit" ;;
        sluicel) echo "sluice x1, limit (url = local)" ;;
        sluicer) echo "sluice, limit (store, lease)" ;;
        haproxy) echo "haproxy mode http" ;;
        nginxp) echo "nginx proxy_pass keepalive" ;;
        nginxk) echo "nginx proxy_pass keepalive $HTTP_CLOSE_KEEPALIVE" ;;
    esac
}

http_table() { # the HTTP rows of the report
    local H_FMT='%-34s %11s %9s %12s %8s  %s\n' t rps p99 cpu d hap ngx best bname bcpu res tgt
    d=$(median http:rps:direct)
    printf "$H_FMT" "http GET /small, wrk -c$HTTP_CONNS" "req/s" "p99 ms" "CPU us/req" "x dir" ""
    for t in "${HTTP_TARGETS[@]}"; do
        rps=$(median "http:rps:$t"); p99=$(median "http:p99:$t"); cpu=$(median "http:cpu:$t")
        printf "$H_FMT" "$(http_label "$t")" "$(fmt "$rps" 0)" "$(fmt "$p99" 2)" "$(fmt "$cpu" 1)" \
            "$(ratio "$rps" "$d")" "$([ "$t" = direct ] && echo '(CPU: the upstream nginx itself)')"
    done
    hap=$(median http:rps:haproxy); ngx=$(median http:rps:nginxp)
    best=""; bname=""
    if [ -n "$hap" ] && { [ -z "$ngx" ] || ge "$hap" "$ngx"; }; then best=$hap; bname=haproxy; fi
    if [ -n "$ngx" ] && { [ -z "$best" ] || ge "$ngx" "$best"; }; then best=$ngx; bname=nginxp; fi
    res=""
    rps=$(median http:rps:sluicer); cpu=$(median http:cpu:sluicer)
    if [ -n "$best" ] && [ -n "$rps" ]; then
        bcpu=$(median "http:cpu:$bname")
        res=1
        ge "$rps" "$best" && [ -n "$cpu" ] && [ -n "$bcpu" ] && ge "$bcpu" "$cpu" && res=0
        tgt="sluice+limit (lease) $(ratio "$rps" "$best")x $bname req/s, CPU/req $(fmt "$cpu" 1) vs $(fmt "$bcpu" 1) us"
    else
        tgt="not measured"
    fi
    printf '%-34s %s\n' "http target" "$tgt; >=1.0x best peer, CPU/req <= peer: $(mark "$res")"
    http_close_table
}

http_close_table() { # one request per connection: sluice vs nginx with upstream keepalive
    local H_FMT='%-34s %11s %9s %12s %10s\n' t rps p99 cpu acc s n sc nc res
    echo
    printf "$H_FMT" "http one-request conns (close)" "req/s" "p99 ms" "CPU us/req" "up conn/req"
    for t in "${HTTP_CLOSE_TARGETS[@]}"; do
        rps=$(median "httpc:rps:$t"); p99=$(median "httpc:p99:$t"); cpu=$(median "httpc:cpu:$t")
        acc=$(median "httpc:acc:$t")
        printf "$H_FMT" "$(http_label "$t")" "$(fmt "$rps" 0)" "$(fmt "$p99" 2)" "$(fmt "$cpu" 1)" "$(fmt "$acc" 2)"
    done
    s=$(median httpc:rps:sluice); n=$(median httpc:rps:nginxk)
    sc=$(median httpc:cpu:sluice); nc=$(median httpc:cpu:nginxk)
    res=""
    if [ -n "$s" ] && [ -n "$n" ] && [ -n "$sc" ] && [ -n "$nc" ]; then
        res=1; ge "$s" "$n" && ge "$nc" "$sc" && res=0
    fi
    printf '%-34s %s\n' "http close target" "sluice $(ratio "$s" "$n")x nginx keepalive req/s, CPU/req $(fmt "$sc" 1) vs $(fmt "$nc" 1) us; >=1.0x, CPU/req <= nginx: $(mark "$res")"
}

http_report_only() { # BENCH_ONLY=http: the HTTP rows alone
    {
        echo "sluice benchmark (HTTP rows only) — $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, $(uname -r)"
        echo "medians of $HTTP_ROUNDS interleaved rounds of wrk -t2 -c$HTTP_CONNS -d${HTTP_DURATION}s --latency (keep-alive;" \
            "one-request rows: $HTTP_CLOSE_ROUNDS rounds with -H 'Connection: close')"
        echo "sluice: workers = $SLUICE_WORKERS (x1: one process); haproxy: nbthread ${HAPROXY_NBTHREAD:-default}; nginx proxy: worker_processes $SLUICE_WORKERS; upstream nginx: 1 worker"
        http_table
        echo "samples: $(for t in "${HTTP_TARGETS[@]}"; do printf '%s=%s ' "$t" "$(count "http:rps:$t")"; done)close: $(for t in "${HTTP_CLOSE_TARGETS[@]}"; do printf '%s=%s ' "$t" "$(count "httpc:rps:$t")"; done)"
        fails_notes
    } | report_save
}
