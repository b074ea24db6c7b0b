#!/usr/bin/env bash
# A/B of two sluice binaries on the HTTP rows, beside nginx proxy_pass with an
# upstream `keepalive 32` block (the one-request target's peer), in interleaved
# rounds; prints each run and the medians.
#
#   tests/bench/ab_http.sh OLD_BINARY NEW_BINARY [close|ka] [ROUNDS] [SECONDS]
#
# close: wrk -t2 -c50 -H 'Connection: close' (a new client connection per
# request); ka: the same with keep-alive clients. Both sluices and nginx run 2
# workers (AB_WORKERS) in front of one upstream nginx (1 worker, GET /small);
# sluice with upstream_keepalive = 32, no limit (as the bench's "sluice" row).
# Per run: requests/s, CPU per request of the proxy (utime + stime of it and
# its children, from /proc, before and after) and the connections the
# upstream accepted per request (its stub_status). On a shared machine the
# CPU per request is the steadier figure; the order of targets in a round is
# AB_ORDER (default "nginxk A B"). Ports from AB_PORT (default 19380) on.
set -u
A=${1:?old sluice binary}; B=${2:?new sluice binary}
MODE=${3:-close}; R=${4:-5}; D=${5:-5}
W=${AB_WORKERS:-2}; P0=${AB_PORT:-19380}
read -r -a ORDER <<< "${AB_ORDER:-nginxk A B}"
DIR=$(mktemp -d /tmp/sluice-ab.XXXXXX)
UP=$P0; PK=$((P0 + 1)); PA=$((P0 + 2)); PB=$((P0 + 3))
TCK=$(getconf CLK_TCK)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; rm -rf "$DIR"; }
trap cleanup EXIT INT TERM

ngconf() { # dir port workers [upstream port]
    mkdir -p "$1/logs" "$1/tmp"
    {
        printf 'worker_processes %s;\npid %s/nginx.pid;\nerror_log %s/logs/error.log;\n' "$3" "$1" "$1"
        printf 'events { worker_connections 4096; }\nhttp {\n access_log off;\n'
        printf ' client_body_temp_path %s/tmp/body;\n proxy_temp_path %s/tmp/proxy;\n' "$1" "$1"
        printf ' keepalive_requests 10000000;\n keepalive_timeout 300s;\n'
        if [ -n "${4:-}" ]; then
            printf ' upstream up { server 127.0.0.1:%s; keepalive 32; }\n' "$4"
            printf ' server { listen 127.0.0.1:%s; location / { proxy_pass http://up;\n' "$2"
            printf '  proxy_http_version 1.1; proxy_set_header Connection ""; } }\n'
        else
            printf ' server { listen 127.0.0.1:%s;\n' "$2"
            printf '  location = /small { default_type text/plain; return 200 "hello\\n"; }\n'
            printf '  location = /st { stub_status; } }\n'
        fi
        printf '}\n'
    } > "$1/nginx.conf"
}
slconf() { # file port
    printf '[sluice]\nadmin =\nworkers = %s\n[store]\nurl = local\n' "$W" > "$1"
    printf '[listener h]\nlisten = 127.0.0.1:%s\nupstream = 127.0.0.1:%s\nprotocol = http\n' "$2" "$UP" >> "$1"
    printf 'max_connections = 20000\nupstream_keepalive = 32\n' >> "$1"
}
ngconf "$DIR/up" "$UP" 1
ngconf "$DIR/pk" "$PK" "$W" "$UP"
slconf "$DIR/a.ini" "$PA"
slconf "$DIR/b.ini" "$PB"
nginx -p "$DIR/up" -c "$DIR/up/nginx.conf" -g 'daemon off;' & PIDS+=($!)
nginx -p "$DIR/pk" -c "$DIR/pk/nginx.conf" -g 'daemon off;' & PK_PID=$!; PIDS+=($!)
"$A" -c "$DIR/a.ini" > "$DIR/a.log" 2>&1 & A_PID=$!; PIDS+=($!)
"$B" -c "$DIR/b.ini" > "$DIR/b.log" 2>&1 & B_PID=$!; PIDS+=($!)
declare -A PORT=([nginxk]=$PK [A]=$PA [B]=$PB) PID=([nginxk]=$PK_PID [A]=$A_PID [B]=$B_PID)
for t in "${ORDER[@]}"; do # until each answers
    for _ in $(seq 1 50); do
        curl -sf -o /dev/null --max-time 1 "http://127.0.0.1:${PORT[$t]}/small" && break
        sleep 0.1
    done
done

ticks() { # pid -> clock ticks of it and its children
    local t=0 p v
    for p in "$1" $(pgrep -P "$1"); do
        v=$(awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "/proc/$p/stat" 2>/dev/null)
        t=$((t + ${v:-0}))
    done
    echo "$t"
}
accepts() { curl -s "http://127.0.0.1:$UP/st" | awk 'p { print $1; exit } /server accepts/ { p = 1 }'; }
hdr=(); [ "$MODE" = close ] && hdr=(-H 'Connection: close')
for t in "${ORDER[@]}"; do wrk -t1 -c10 -d1s "${hdr[@]}" "http://127.0.0.1:${PORT[$t]}/small" > /dev/null; done
for r in $(seq 1 "$R"); do
    for t in "${ORDER[@]}"; do
        a0=$(accepts); c0=$(ticks "${PID[$t]}")
        out=$(wrk -t2 -c50 -d"${D}s" "${hdr[@]}" "http://127.0.0.1:${PORT[$t]}/small")
        c1=$(ticks "${PID[$t]}"); a1=$(accepts)
        n=$(awk '/requests in/ { print $1 }' <<< "$out")
        rps=$(awk '/^Requests\/sec/ { print $2 }' <<< "$out")
        err=$(grep -E 'Socket errors|Non-2xx' <<< "$out" | tr -s ' ' | tr '\n' ' ')
        awk -v m="$MODE" -v r="$r" -v t="$t" -v rps="$rps" -v a="$c0" -v b="$c1" -v n="$n" \
            -v hz="$TCK" -v u0="$a0" -v u1="$a1" -v e="$err" \
            'BEGIN { printf "%s r%s %-6s rps=%s us=%.2f upconn=%.3f %s\n", m, r, t, rps,
                     (b - a) / hz * 1e6 / n, (u1 - u0 - 1) / n, e }'
    done
done | tee "$DIR/runs.txt"
for t in "${ORDER[@]}"; do
    med() { awk -v t="$t" -v k="$1" '$3 == t { for (i = 4; i <= NF; i++) if (index($i, k "=") == 1)
                print substr($i, length(k) + 2) }' "$DIR/runs.txt" | sort -g |
            awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
    echo "median $MODE $t: $(med rps) req/s, $(med us) us CPU/request, $(med upconn) upstream connects/request"
done
