#!/usr/bin/env bash
# Checks deploy/docker/Dockerfile without a Docker engine (none runs on the
# project's machines):
#   - every instruction line parses: continuations joined, each RUN is valid
#     bash (bash -n);
#   - every COPY source (from the build context, the repository root) exists
#     and is not excluded by .dockerignore;
#   - every package an apt-get install names is one Debian knows (apt-cache);
#   - the build stage's COPY + make step runs in a scratch directory holding
#     only what the COPY lines copy (so nothing the build needs is left out);
#   - the binary it built needs no library beyond libc and the runtime
#     stage's packages;
#   - the HEALTHCHECK command, run as written against that binary started
#     with the image's default configuration, passes (and fails once it stops);
#   - every `docker run` example in its comments publishes (-p) only ports
#     that the configuration that run uses (the directory it mounts at
#     /etc/sluice, else the image's deploy/docker/sluice.ini) listens on at a
#     wildcard address (*, 0.0.0.0, [::]): 127.0.0.1 in a container is the
#     container's own loopback, which a published port never reaches.
# Usage: tests/deploy/docker-steps.sh   (from the repository root). Exit 0 = ok.
set -u
cd "$(dirname "$0")/../.."
df=deploy/docker/Dockerfile
fail=0
err() { echo "docker-steps: $*" >&2; fail=1; }

scratch=$(mktemp -d /tmp/sluice-docker-steps.XXXXXX)
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; rm -rf "$scratch"; }
trap cleanup EXIT

# One instruction a line: join "\"-continued lines, drop comments.
awk '/^[[:space:]]*#/ { next }
     { line = line $0 }
     /\\$/ { sub(/\\$/, "", line); next }
     { if (line ~ /[^[:space:]]/) print line; line = "" }' "$df" > "$scratch/instr"

stage=0 build_pkgs= run_pkgs=
while IFS= read -r ins; do
    kw=${ins%% *} rest=${ins#* }
    case "$kw" in
    FROM)
        stage=$((stage + 1))
        case "$rest" in debian:bookworm-slim*) ;; *) err "stage $stage is not FROM debian:bookworm-slim: $rest" ;; esac ;;
    RUN)
        printf '%s\n' "$rest" > "$scratch/run.sh"
        bash -n "$scratch/run.sh" || err "RUN is not valid bash: $rest"
        if [[ $rest == *"apt-get install"* ]]; then
            pkgs=$(printf '%s\n' "$rest" | sed -n 's/.*apt-get install[^&]*--no-install-recommends\([^&]*\).*/\1/p')
            [ -n "$pkgs" ] || err "apt-get install without --no-install-recommends: $rest"
            if [ "$stage" -eq 1 ]; then build_pkgs=$pkgs; else run_pkgs=$pkgs; fi
        fi ;;
    COPY)
        case "$rest" in --from=*) continue ;; esac
        read -r -a words <<< "$rest"
        dest=${words[${#words[@]}-1]}
        for src in "${words[@]:0:${#words[@]}-1}"; do
            [ -e "$src" ] || { err "COPY source missing: $src"; continue; }
            grep -qx "${src%%/*}" .dockerignore 2>/dev/null && err "COPY source excluded by .dockerignore: $src"
            # The build stage's context, as the image would have it (WORKDIR /src).
            if [ "$stage" -eq 1 ]; then
                d=$scratch/ctx/$dest
                [[ $dest == */ ]] && d=$d${src##*/}
                mkdir -p "$(dirname "$d")" && cp -r "$src" "$d"
            fi
        done ;;
    HEALTHCHECK) health=$rest ;;
    STOPSIGNAL) [ "$rest" = SIGTERM ] || err "STOPSIGNAL is $rest, not SIGTERM" ;;
    USER) user=$rest ;;
    esac
done < "$scratch/instr"

[ -n "${user:-}" ] && [ "${user%%:*}" != root ] && [ "${user%%:*}" != 0 ] || err "no USER (or USER root) in the runtime stage"
[ -n "${health:-}" ] || err "no HEALTHCHECK"
[ -n "$build_pkgs" ] && [ -n "$run_pkgs" ] || err "no apt-get install in one of the stages"

for p in $build_pkgs $run_pkgs; do
    apt-cache show "$p" >/dev/null 2>&1 || err "Debian has no package $p (apt-cache show)"
done

# The build stage's make, in the scratch copy of the context.
step=$(grep -m1 '^RUN make' "$scratch/instr" | sed 's/^RUN //')
[ -n "$step" ] || err "no RUN make in the build stage"
if [ -n "$step" ] && ! (cd "$scratch/ctx" && bash -c "$step") > "$scratch/make.log" 2>&1; then
    tail -20 "$scratch/make.log" >&2
    err "the build stage's step failed: $step"
fi
bin=$scratch/ctx/build/sluice
[ -x "$bin" ] || { err "the build stage made no build/sluice"; exit 1; }

# Every shared library the binary loads comes from libc6 or a runtime package.
for lib in $(ldd "$bin" | awk '$3 ~ /^\// { print $3 }'); do
    real=$(readlink -f "$lib")
    pkg=$(dpkg -S "$lib" 2>/dev/null || dpkg -S "$real" 2>/dev/null || dpkg -S "/usr$real" 2>/dev/null)
    pkg=${pkg%%:*}
    case " libc6 $run_pkgs " in *" $pkg "*) ;; *) err "$lib (package ${pkg:-unknown}) is not in the runtime stage" ;; esac
done

# The image's default configuration, on free ports; then the HEALTHCHECK.
ports=$(python3 -c 'import socket
ss=[socket.socket() for _ in range(2)]
[s.bind(("127.0.0.1",0)) for s in ss]
print(" ".join(str(s.getsockname()[1]) for s in ss))')
read -r admin_port resp_port <<< "$ports"
sed -e "s/\*:9121/127.0.0.1:$admin_port/" -e "s/\*:6380/127.0.0.1:$resp_port/" \
    deploy/docker/sluice.ini > "$scratch/sluice.ini"
"$bin" -t -c "$scratch/sluice.ini" >/dev/null || err "sluice -t rejects deploy/docker/sluice.ini"
"$bin" -c "$scratch/sluice.ini" 2> "$scratch/sluice.log" &
pid=$!
json=$(printf '%s\n' "$health" | sed 's/^.*CMD \[/[/')
cmd=$(python3 -c 'import json,sys; a=json.loads(sys.argv[1]); print(a[2])' "$json" 2>/dev/null) \
    || err "HEALTHCHECK is not exec form CMD [\"bash\", \"-c\", \"...\"]: $health"
cmd=${cmd//9121/$admin_port}
ok=0
for _ in $(seq 50); do
    if bash -c "$cmd" 2>/dev/null; then ok=1; break; fi
    sleep 0.1
done
[ "$ok" = 1 ] || { cat "$scratch/sluice.log" >&2; err "the HEALTHCHECK command never passed against a running sluice"; }
kill "$pid"; wait "$pid" 2>/dev/null; pid=
bash -c "$cmd" 2>/dev/null && err "the HEALTHCHECK command passes with sluice stopped"

# The run examples: published ports against the addresses of the file used.
runs=0
while IFS= read -r line; do
    runs=$((runs + 1))
    ini=deploy/docker/sluice.ini
    vol=$(printf '%s\n' "$line" | sed -n 's/.*-v "\{0,1\}\$PWD\/\([^:"]*\):\/etc\/sluice.*/\1/p')
    [ -n "$vol" ] && ini=$vol/sluice.ini
    [ -f "$ini" ] || { err "docker run example mounts $vol, which has no sluice.ini: $line"; continue; }
    ports=$(printf '%s\n' "$line" | grep -o -- '-p [0-9:.]*' | sed 's/.*://')
    [ -n "$ports" ] || err "docker run example publishes no port: $line"
    for p in $ports; do
        addrs=$(sed -n 's/;.*//; s/^[[:space:]]*\(listen\|admin\)[[:space:]]*=[[:space:]]*\([^[:space:]]*\).*/\2/p' "$ini" | grep ":$p\$")
        [ -n "$addrs" ] || { err "docker run example publishes $p, which $ini does not listen on"; continue; }
        for a in $addrs; do
            case "$a" in \*:*|0.0.0.0:*|\[::\]:*) ;;
                *) err "docker run example publishes $p but $ini listens on $a (the container's own address: the published port reaches nothing)" ;; esac
        done
    done
done < <(grep -E '^#[[:space:]]+docker run ' "$df")
[ "$runs" -gt 0 ] || err "no docker run example in $df"

[ "$fail" = 0 ] && echo "docker-steps: ok ($df: $(wc -l < "$scratch/instr") instructions)"
exit "$fail"
