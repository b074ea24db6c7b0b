#!/usr/bin/env bash
# `make install` into a scratch directory: PREFIX=<scratch>/usr/local with
# SYSCONFDIR=<scratch>/etc (so the unit's paths point into the scratch tree
# and systemd-analyze can verify it), then checks the files, that a second
# install keeps an edited sluice.ini, that the documents and examples are in
# share/doc/sluice (the examples pass -t), that the man page renders (man -l, else
# groff, else skipped with a message), and `systemd-analyze verify` on the
# installed unit (skipped with a message when the unit or the tool is absent).
# Usage: tests/deploy/install.sh BUILD_DIR   (from anywhere). Exit 0 = ok.
set -u
build=$(realpath "$1")
cd "$(dirname "$0")/../.."
s=$(mktemp -d /tmp/sluice-install.XXXXXX)
trap 'rm -rf "$s"' EXIT
fail=0
err() { echo "install.sh: $*" >&2; fail=1; }
inst() { make --no-print-directory -s install BUILD="$build" PREFIX="$s/usr/local" SYSCONFDIR="$s/etc" "$@"; }

inst > "$s/out" 2>&1 || { cat "$s/out" >&2; err "make install failed"; exit 1; }
[ -x "$s/usr/local/bin/sluice" ] || err "no bin/sluice"
[ -f "$s/usr/local/share/man/man8/sluice.8" ] || err "no share/man/man8/sluice.8"
[ -f "$s/etc/sluice/sluice.ini" ] || err "no etc/sluice/sluice.ini"
"$s/usr/local/bin/sluice" -t -c "$s/etc/sluice/sluice.ini" >/dev/null || err "installed sluice -t fails on the installed example"
# What sluice.ini's comments and the man page point to.
d=$s/usr/local/share/doc/sluice
for f in README.md docs/configuration.md docs/operations.md docs/limits.md examples/demo.ini; do
    [ -f "$d/$f" ] || err "no share/doc/sluice/$f"
done
for f in "$d"/examples/*.ini; do
    "$s/usr/local/bin/sluice" -t --no-resolve -c "$f" >/dev/null 2>&1 || err "installed sluice -t fails on $f"
done

echo "; edited" >> "$s/etc/sluice/sluice.ini"
inst > "$s/out" 2>&1 || err "second make install failed"
grep -q '^; edited' "$s/etc/sluice/sluice.ini" || err "a second install overwrote sluice.ini"
[ -f "$s/etc/sluice/sluice.ini.example" ] || err "a second install left no sluice.ini.example"

page=$s/usr/local/share/man/man8/sluice.8
if command -v man >/dev/null; then
    out=$(MANWIDTH=80 man -l --warnings "$page" 2>&1 >/dev/null)
    [ -z "$out" ] || err "man -l warns: $out"
    MANWIDTH=80 man -l "$page" 2>/dev/null | grep -q 'SIGNALS' || err "man -l renders no SIGNALS section"
    echo "install.sh: man -l renders sluice.8"
elif command -v groff >/dev/null; then
    out=$(groff -man -Tutf8 -ww -z "$page" 2>&1)
    [ -z "$out" ] || err "groff warns: $out"
    echo "install.sh: groff checks sluice.8 (man is not installed)"
else
    echo "install.sh: SKIP man page rendering: neither man nor groff is installed"
fi

unit=$s/usr/local/lib/systemd/system/sluice.service
if [ ! -f deploy/systemd/sluice.service ]; then
    echo "install.sh: SKIP unit: deploy/systemd/sluice.service is not in this tree"
elif [ ! -f "$unit" ]; then
    err "deploy/systemd/sluice.service exists but make install did not install it"
elif ! command -v systemd-analyze >/dev/null; then
    echo "install.sh: SKIP systemd-analyze verify: systemd-analyze is not installed"
else
    grep -q "$s/usr/local/bin/sluice" "$unit" || err "the installed unit does not run PREFIX/bin/sluice"
    # --man=no: Documentation=man:sluice(8) points at the system's man path,
    # which a scratch install does not reach (the page is checked above)
    out=$(systemd-analyze verify --man=no "$unit" 2>&1) || err "systemd-analyze verify: $out"
    [ -z "$out" ] || echo "install.sh: systemd-analyze verify says: $out"
    [ "$fail" = 0 ] && echo "install.sh: systemd-analyze verify passes on the installed unit"
fi
[ "$fail" = 0 ] && echo "install.sh: ok"
exit "$fail"
