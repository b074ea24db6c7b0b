#!/usr/bin/env bash
# Runs Redis's own Tcl test suite (the Debian source of the installed
# redis-server) against a throwaway redis-server, first directly and then
# through a sluice RESP listener, and compares the two.
#
# Success (exit 0) = no test that passes directly fails through sluice.
#
#   tests/redis-suite.sh                 # fetch (once), run both halves, compare
#   tests/redis-suite.sh --fetch-only    # only download/unpack the suite
#   tests/redis-suite.sh --direct-only   # only the direct half (no sluice needed)
#   tests/redis-suite.sh --sluice-only   # only the sluice half, reusing the last
#                                        # direct results in build/redis-suite/
#
# Environment:
#   SLUICE_BIN          sluice binary (default build/sluice)
#   REDIS_SUITE_UNITS   space-separated units (default: see UNITS below)
#   REDIS_SUITE_TIMEOUT per-unit wall-clock limit in seconds (default 600)
#   REDIS_SUITE_TEST_TIMEOUT  the suite's own --timeout per test (default 120)
#   REDIS_SUITE_BUDGET  wall-clock seconds for each half; units left when it is
#                       spent are not run and count as failed (default 3600)
#   REDIS_SUITE_DIR     where the source lives (default build/redis-src)
#   REDIS_SUITE_SKIP    test names to skip (one a line, the suite's --skiptest),
#                       e.g. one that hangs and would end its unit early
#   SUITE_POOL          N: the sluice half goes through a pooled listener
#                       (`upstream_pool = N`, docs/resp.md "Pooled listeners");
#                       its results are build/redis-suite/pooled.* instead of
#                       sluice.* (so both halves can be kept and compared)
#
# Everything started here listens on 127.0.0.1 only and is stopped on exit.

set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 2

SLUICE_BIN=${SLUICE_BIN:-build/sluice}
SRC_BASE=${REDIS_SUITE_DIR:-build/redis-src}
UNIT_TIMEOUT=${REDIS_SUITE_TIMEOUT:-600}
TEST_TIMEOUT=${REDIS_SUITE_TEST_TIMEOUT:-120}
BUDGET=${REDIS_SUITE_BUDGET:-3600}
POOL=${SUITE_POOL:-}
case "$POOL" in
    ""|off|0) POOL= ; LABEL=sluice; VIA="through sluice" ;;
    *[!0-9]*) echo "SUITE_POOL must be a count" >&2; exit 2 ;;
    *) LABEL=pooled; VIA="pooled ($POOL)" ;;
esac
MODE=all
case "${1:-}" in
    --fetch-only) MODE=fetch ;;
    --direct-only) MODE=direct ;;
    --sluice-only) MODE=sluice ;;
    "") ;;
    *) echo "usage: $0 [--fetch-only|--direct-only|--sluice-only]" >&2; exit 2 ;;
esac

# Tags that need a server the suite started itself, or features a proxy in
# front of a shared server cannot offer (replication, DEBUG, SAVE, ...).
# `external:skip` is skipped by the suite itself whenever --host is given.
DENY_TAGS="needs:repl needs:debug needs:pfdebug needs:config-maxmemory needs:save
needs:reset needs:config-resetstat needs:latency needs:local-process external:skip"

log() { printf '%s redis-suite: %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "$*"; exit 2; }

# ---------------------------------------------------------------- fetch ----

APT_GET="env DEBIAN_FRONTEND=noninteractive apt-get"

has_deb_src() {
    grep -rqsE '^[[:space:]]*deb-src[[:space:]]|^Types:.*deb-src' \
        /etc/apt/sources.list /etc/apt/sources.list.d/ 2>/dev/null
}

# Writes /etc/apt/sources.list.d/sluice-src.list mirroring the Debian `deb`
# entries already configured (one-line and deb822 formats), same mirror hosts.
add_deb_src() {
    local out=/etc/apt/sources.list.d/sluice-src.list tmp
    tmp=$(mktemp)
    {
        # one-line format
        cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
            awk '$1 == "deb" && /debian/ { $1 = "deb-src"; print }'
        # deb822 format
        for f in /etc/apt/sources.list.d/*.sources; do
            [ -f "$f" ] || continue
            awk '
                function flush() {
                    if (types ~ /(^|[ \t])deb([ \t]|$)/ && uris ~ /debian/ && enabled !~ /^[Nn]o/) {
                        n = split(uris, u, /[ \t]+/)
                        m = split(suites, s, /[ \t]+/)
                        opt = signed != "" ? "[signed-by=" signed "] " : ""
                        for (i = 1; i <= n; i++) for (j = 1; j <= m; j++)
                            if (u[i] != "" && s[j] != "")
                                print "deb-src " opt u[i] " " s[j] " " comps
                    }
                    types = uris = suites = comps = signed = enabled = ""
                }
                /^[ \t]*$/ { flush(); next }
                /^#/ { next }
                {
                    key = $1; sub(/:$/, "", key); val = $0; sub(/^[^:]*:[ \t]*/, "", val)
                    k = tolower(key)
                    if (k == "types") types = val
                    else if (k == "uris") uris = val
                    else if (k == "suites") suites = val
                    else if (k == "components") comps = val
                    else if (k == "signed-by") signed = val
                    else if (k == "enabled") enabled = val
                }
                END { flush() }' "$f"
        done
    } | sort -u > "$tmp"
    if [ ! -s "$tmp" ]; then
        # Nothing to mirror: fall back to the official mirror.
        echo "deb-src http://deb.debian.org/debian bookworm main" > "$tmp"
    fi
    log "adding deb-src entries in $out:"
    sed 's/^/    /' "$tmp" >&2
    install -m 0644 "$tmp" "$out" || { rm -f "$tmp"; die "cannot write $out (root needed)"; }
    rm -f "$tmp"
}

suite_dir() {
    local d
    for d in "$SRC_BASE"/redis-*/; do
        [ -x "$d/runtest" ] && { echo "${d%/}"; return 0; }
    done
    return 1
}

fetch_suite() {
    if suite_dir >/dev/null; then return 0; fi
    command -v tclsh >/dev/null || {
        log "installing tcl"
        $APT_GET update -qq && $APT_GET install -y -qq tcl >/dev/null || die "cannot install tcl"
    }
    command -v dpkg-source >/dev/null || {
        log "installing dpkg-dev (for apt-get source)"
        $APT_GET install -y -qq dpkg-dev >/dev/null || die "cannot install dpkg-dev"
    }
    if ! has_deb_src; then
        add_deb_src
    fi
    log "apt-get update"
    $APT_GET update -qq || die "apt-get update failed"
    mkdir -p "$SRC_BASE"
    log "apt-get source redis -> $SRC_BASE"
    (cd "$SRC_BASE" && $APT_GET source -qq redis) >"$SRC_BASE/fetch.log" 2>&1 || {
        cat "$SRC_BASE/fetch.log" >&2
        die "apt-get source redis failed"
    }
    suite_dir >/dev/null || die "no runtest found under $SRC_BASE"
}

fetch_suite
SUITE=$(suite_dir)
log "suite: $SUITE"
[ "$MODE" = fetch ] && exit 0

command -v tclsh >/dev/null || die "tclsh missing"
command -v redis-server >/dev/null || die "redis-server missing"
command -v redis-cli >/dev/null || die "redis-cli missing"

# ---------------------------------------------------------------- units ----

default_units() {
    local f
    for f in "$SUITE"/tests/unit/type/*.tcl; do
        case $f in *-common.tcl) continue ;; esac  # helpers, not units
        f=${f#"$SUITE"/tests/}
        echo "${f%.tcl}"
    done
    for f in keyspace expire scan protocol multi pubsub scripting bitops hyperloglog dump quit; do
        [ -f "$SUITE/tests/unit/$f.tcl" ] && echo "unit/$f"
    done
}
# shellcheck disable=SC2206
UNITS=(${REDIS_SUITE_UNITS:-$(default_units)})

# ------------------------------------------------------------ processes ----

OUTDIR="$ROOT/build/redis-suite"
WORK=$(mktemp -d /tmp/sluice-redis-suite.XXXXXX) || exit 2
REDIS_PID=
SLUICE_PID=
RUNPID=

stop_pid() { # pid: TERM, up to 3 s, then KILL
    [ -n "$1" ] || return 0
    kill "$1" 2>/dev/null
    for _ in $(seq 1 30); do kill -0 "$1" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$1" 2>/dev/null
    wait "$1" 2>/dev/null
    return 0
}

cleanup() {
    if [ -n "$RUNPID" ]; then        # the suite's whole process group
        kill -- "-$RUNPID" 2>/dev/null
        sleep 0.5
        kill -9 -- "-$RUNPID" 2>/dev/null
        wait "$RUNPID" 2>/dev/null
        RUNPID=
    fi
    stop_pid "$SLUICE_PID"; SLUICE_PID=
    stop_pid "$REDIS_PID"; REDIS_PID=
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'log interrupted; exit 130' INT TERM HUP

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
        if ! port_in_use "$p"; then
            echo "$p"; return 0
        fi
    done
    return 1
}

wait_ping() { # port [tenths of a second]
    for _ in $(seq 1 "${2:-50}"); do
        [ "$(timeout 2 redis-cli -h 127.0.0.1 -p "$1" ping 2>/dev/null)" = PONG ] && return 0
        sleep 0.1
    done
    return 1
}

# A fresh redis-server for every unit, configured like the suite's own servers
# (tests/assets/default.conf): units change the configuration (e.g.
# proto-max-bulk-len, encodings) and external mode does not restore it.
start_redis() { # port dir
    stop_pid "$REDIS_PID"
    rm -rf "$2"; mkdir -p "$2"
    redis-server "$SUITE/tests/assets/default.conf" --port "$1" --bind 127.0.0.1 \
        --save '' --appendonly no --dir "$2" --pidfile "$2/redis.pid" \
        --logfile "$2/redis.log" --daemonize no --loglevel notice \
        --always-show-logo no >/dev/null 2>&1 </dev/null &
    REDIS_PID=$!
    wait_ping "$1" 50 || die "redis-server on $1 did not start ($(tail -n 3 "$2/redis.log" 2>/dev/null))"
}

start_sluice() { # port upstream dir
    mkdir -p "$3"
    cat > "$3/sluice.ini" <<EOF
[sluice]
admin =

[store]
url = local

[listener r]
listen = 127.0.0.1:$1
upstream = 127.0.0.1:$2
protocol = resp
max_connections = 20000
${POOL:+upstream_pool = $POOL}
EOF
    "$SLUICE_BIN" -c "$3/sluice.ini" </dev/null >>"$3/sluice.log" 2>&1 &
    SLUICE_PID=$!
    wait_ping "$1" 50 || { tail -n 20 "$3/sluice.log" >&2; die "sluice on $1 did not start"; }
}

# ---------------------------------------------------------------- run ------

# run_units LABEL PORT REDISPORT -> $OUTDIR/LABEL.results, one line per test:
# "ok|err|exception|timeout|skip <TAB> unit <TAB> test name"
run_units() {
    local label=$1 port=$2 rport=$3 unit out rc start t args=() tag nok nerr
    local res="$OUTDIR/$label.results"
    : > "$res"
    for tag in $DENY_TAGS; do args+=(--tags "-$tag"); done
    while IFS= read -r tag; do
        [ -n "$tag" ] && args+=(--skiptest "$tag")
    done <<< "${REDIS_SUITE_SKIP:-}"
    local half_start
    half_start=$(date +%s)
    for unit in "${UNITS[@]}"; do
        out="$OUTDIR/$label.$(echo "$unit" | tr / _).log"
        if [ $(( $(date +%s) - half_start )) -ge "$BUDGET" ]; then
            echo -e "timeout\t$unit\t(not run: the ${BUDGET}s budget was spent)" >> "$res"
            log "[$label] $unit: not run (time budget of ${BUDGET}s spent)"
            continue
        fi
        start_redis "$rport" "$WORK/redis"
        if [ "$label" != direct ] && ! kill -0 "$SLUICE_PID" 2>/dev/null; then
            log "sluice died; last log lines:"
            tail -n 10 "$WORK/sluice/sluice.log" >&2
            log "restarting sluice"
            start_sluice "$port" "$rport" "$WORK/sluice"
        fi
        start=$(date +%s)
        # In its own process group (setsid) so that everything the suite
        # spawns can be stopped at once, here or in cleanup.
        (cd "$SUITE" && exec setsid timeout -k 10 "$UNIT_TIMEOUT" ./runtest --host 127.0.0.1 \
            --port "$port" --singledb --clients 1 --timeout "$TEST_TIMEOUT" --durable \
            "${args[@]}" --single "$unit") >"$out" 2>&1 </dev/null &
        RUNPID=$!
        wait "$RUNPID"
        rc=$?
        kill -- "-$RUNPID" 2>/dev/null
        RUNPID=
        t=$(( $(date +%s) - start ))
        # [ok]: name (N ms) / [err]: name in tests/unit/x.tcl / [exception]: ... / [skip]: ...
        sed 's/\x1b\[[0-9;]*m//g' "$out" | awk -v u="$unit" '
            /^\[ok\]: /        { s = $0; sub(/^\[ok\]: /, "", s); sub(/ \([0-9]+ ms\)$/, "", s); print "ok\t" u "\t" s; next }
            /^\[err\]: /       { s = $0; sub(/^\[err\]: /, "", s); sub(/ in tests\/.*$/, "", s); print "err\t" u "\t" s; next }
            /^\[exception\]: / { s = $0; sub(/^\[exception\]: /, "", s); print "exception\t" u "\t" s; next }
            /^\[(skip|ignore)\]: / { s = $0; sub(/^\[[a-z]+\]: /, "", s); print "skip\t" u "\t" s; next }
        ' >> "$res"
        nok=$(awk -F'\t' -v u="$unit" '$1=="ok" && $2==u' "$res" | wc -l)
        nerr=$(awk -F'\t' -v u="$unit" '($1=="err"||$1=="exception") && $2==u' "$res" | wc -l)
        if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
            echo -e "timeout\t$unit\t(unit timed out after ${UNIT_TIMEOUT}s)" >> "$res"
            nerr=$((nerr + 1))
        elif [ "$rc" -ne 0 ] && [ "$nerr" -eq 0 ]; then
            # The suite stopped without naming a failing test (e.g. the server
            # went away): count the unit itself as a failure.
            echo -e "exception\t$unit\t(runtest exited $rc: $(sed 's/\x1b\[[0-9;]*m//g' "$out" | grep -m1 -iE 'exception|error|killed|closed' | cut -c1-120))" >> "$res"
            nerr=$((nerr + 1))
        fi
        printf '%s redis-suite: [%s] %-28s %4d ok %3d failed  (%ss)\n' \
            "$(date +%H:%M:%S)" "$label" "$unit" "$nok" "$nerr" "$t" >&2
    done
    stop_pid "$REDIS_PID"; REDIS_PID=
}

summary() { # label -> "passed failed" (over the units of this run only)
    awk -F'\t' 'NR == FNR { u[$1] = 1; next } !($2 in u) { next }
                $1 == "ok" { ok++ } $1 == "err" || $1 == "exception" || $1 == "timeout" { err++ }
                END { print ok + 0, err + 0 }' "$WORK/units.txt" "$OUTDIR/$1.results"
}

mkdir -p "$OUTDIR"
printf '%s\n' "${UNITS[@]}" > "$WORK/units.txt"
log "units: ${UNITS[*]}"
log "results and logs: build/redis-suite/"
RP=$(free_port) || die "no free port"

if [ "$MODE" = sluice ] && [ -s "$OUTDIR/direct.results" ]; then
    log "reusing the direct results in build/redis-suite/direct.results"
else
    log "direct: redis-server on 127.0.0.1:$RP (fresh for every unit)"
    run_units direct "$RP" "$RP"
fi
read -r D_OK D_ERR < <(summary direct)

if [ "$MODE" = direct ]; then
    echo "direct: $D_OK passed, $D_ERR failed"
    echo "$D_OK passed, $D_ERR failed"
    [ "$D_ERR" -eq 0 ]
    exit
fi

[ -x "$SLUICE_BIN" ] || die "$SLUICE_BIN not built (make)"
SP=$(free_port) || die "no free port"
while [ "$SP" = "$RP" ]; do SP=$(free_port); done
start_redis "$RP" "$WORK/redis"
start_sluice "$SP" "$RP" "$WORK/sluice"
log "$VIA: 127.0.0.1:$SP -> redis-server 127.0.0.1:$RP (fresh for every unit)"
run_units "$LABEL" "$SP" "$RP"
read -r S_OK S_ERR < <(summary "$LABEL")
if ! kill -0 "$SLUICE_PID" 2>/dev/null; then
    log "sluice is no longer running; last log lines:"
    tail -n 20 "$WORK/sluice/sluice.log" >&2
fi
cp "$WORK/sluice/sluice.log" "$OUTDIR/$LABEL.log" 2>/dev/null

# Tests that pass directly but not through sluice (counted per name: a name
# can occur more than once in a unit).
D="$OUTDIR/direct.results"
S="$OUTDIR/$LABEL.results"
REGRESS="$OUTDIR/regressions${POOL:+-pooled}.txt"
# Lines: unit <TAB> name <TAB> how many of its runs regressed.
awk -F'\t' 'FILENAME == ARGV[1] { u[$1] = 1; next } !($2 in u) { next }
            FILENAME == ARGV[2] { if ($1 == "ok") okd[$2 "\t" $3]++; next }
            $1 == "ok" { oks[$2 "\t" $3]++ }
            END { for (k in okd) if (okd[k] > oks[k] + 0) print k "\t" okd[k] - oks[k] }' \
    "$WORK/units.txt" "$D" "$S" | sort > "$REGRESS"
# and the reverse, for information
awk -F'\t' 'NR == FNR { if ($1 == "ok") okd[$2 "\t" $3] = 1; next }
            $1 == "ok" && !(($2 "\t" $3) in okd) { print $2 "\t" $3 }' "$D" "$S" | sort -u \
    > "$OUTDIR/only-through-$LABEL.txt"

N=$(awk -F'\t' '{ n += $3 } END { print n + 0 }' "$REGRESS")
echo
echo "Redis $(redis-server --version | sed -n 's/.*v=\([^ ]*\).*/\1/p') test suite (external mode, --singledb), ${#UNITS[@]} units: ${UNITS[*]}"
echo "denied tags: $(echo $DENY_TAGS)"
printf '%-16s %8s %8s\n' "" passed failed
printf '%-16s %8d %8d\n' direct "$D_OK" "$D_ERR"
printf '%-16s %8d %8d\n' "$VIA" "$S_OK" "$S_ERR"
if [ "$N" -eq 0 ]; then
    echo "tests passing directly but failing $VIA: none"
else
    echo "tests passing directly but failing $VIA: $N"
    while IFS=$'\t' read -r unit name times; do
        [ "$times" -gt 1 ] && name="$name (x$times)"
        echo "  $unit: $name"
        # the suite's message for it, from the sluice half's log
        sed 's/\x1b\[[0-9;]*m//g' "$OUTDIR/$LABEL.$(echo "$unit" | tr / _).log" 2>/dev/null |
            awk -v n="[err]: ${name% (x*)} in " 'index($0, n) == 1 { getline; print "      " substr($0, 1, 160); exit }'
    done < "$REGRESS"
    echo "(all messages: grep -A3 '\[err\]' build/redis-suite/$LABEL.*.log; sluice's log: build/redis-suite/$LABEL.log)"
fi
if [ -s "$OUTDIR/only-through-$LABEL.txt" ]; then
    echo "passing $VIA only: $(wc -l < "$OUTDIR/only-through-$LABEL.txt") (see build/redis-suite/only-through-$LABEL.txt)"
fi
echo "$((D_OK - N)) passed, $N failed"
[ "$N" -eq 0 ]
