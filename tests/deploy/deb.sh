#!/usr/bin/env bash
# `make deb`'s script into a scratch directory, then installs the .deb with
# dpkg into a scratch root (its own dpkg database; --force-depends because
# that root has no libc) and checks: the files and the conffile are there,
# /usr/share/doc/sluice holds copyright, changelog.gz, README, docs and the
# examples (which pass -t); build-deb.sh without arguments prints its usage;
# every library the binary loads belongs to a package its Depends names, and
# the installed `sluice -t -c` passes on the installed example configuration.
# Usage: tests/deploy/deb.sh BUILD_DIR. Exit 0 = ok.
set -u
build=$(realpath "$1")
cd "$(dirname "$0")/../.."
s=$(mktemp -d /tmp/sluice-deb.XXXXXX)
trap 'rm -rf "$s"' EXIT
fail=0
err() { echo "deb.sh: $*" >&2; fail=1; }
version=$(sed -n 's/^VERSION *:= *//p' Makefile)

# Without its arguments it says how to call it, on stderr, and fails.
usage=$(deploy/debian/build-deb.sh 2>&1 >/dev/null); rc=$?
[ "$rc" = 2 ] || err "build-deb.sh without arguments exits $rc, not 2"
case "$usage" in "usage: deploy/debian/build-deb.sh BUILD_DIR VERSION OUT_DIR"*) ;;
    *) err "build-deb.sh without arguments prints no usage: '$usage'" ;; esac
deploy/debian/build-deb.sh --help | grep -q '^usage: ' || err "build-deb.sh --help prints no usage"

deb=$(deploy/debian/build-deb.sh "$build" "$version" "$s/out") || { err "build-deb.sh failed"; exit 1; }
root=$s/root
mkdir -p "$root/var/lib/dpkg/updates" "$root/var/lib/dpkg/info"
touch "$root/var/lib/dpkg/status"
dpkg --root="$root" --force-depends --force-not-root -i "$deb" > "$s/dpkg.log" 2>&1 \
    || { cat "$s/dpkg.log" >&2; err "dpkg -i into a scratch root failed"; exit 1; }
dpkg --root="$root" -s sluice 2>/dev/null | grep -q '^Status: install ok installed' || err "dpkg does not list sluice as installed"

for f in usr/bin/sluice usr/share/man/man8/sluice.8.gz etc/sluice/sluice.ini; do
    [ -e "$root/$f" ] || err "the package has no /$f"
done
# /usr/share/doc/sluice: what the configuration and the man page point to,
# and the two files Debian policy asks of every package.
doc=usr/share/doc/sluice
for f in copyright changelog.gz README.md.gz docs/configuration.md.gz docs/operations.md.gz \
         docs/limits.md.gz examples/demo.ini examples/shared-store.ini; do
    [ -f "$root/$doc/$f" ] || err "the package has no /$doc/$f"
done
zcat "$root/$doc/changelog.gz" 2>/dev/null | head -1 | grep -q "^sluice ($version) " \
    || err "/$doc/changelog.gz does not start with sluice ($version)"
for f in "$root/$doc"/examples/*.ini; do
    out=$("$root/usr/bin/sluice" -t --no-resolve -c "$f" 2>&1) || err "installed sluice -t on $f: $out"
done
grep -qx /etc/sluice/sluice.ini "$root/var/lib/dpkg/info/sluice.conffiles" 2>/dev/null \
    || err "/etc/sluice/sluice.ini is not a conffile"
if [ -f deploy/systemd/sluice.service ]; then
    [ -f "$root/usr/lib/systemd/system/sluice.service" ] || err "the unit is in the tree but not in the package"
else
    echo "deb.sh: no deploy/systemd/sluice.service in this tree: package without a unit"
fi

# A sanitizer build (make check) also loads libasan and friends: not the
# package's libraries, so the check below is for a plain build only.
if ldd "$root/usr/bin/sluice" | grep -q 'libasan\|libubsan'; then
    echo "deb.sh: sanitizer build: the libraries are not compared with Depends"
    sanitized=1
fi
depends=$(dpkg-deb -f "$deb" Depends | sed 's/([^)]*)//g; s/,/ /g')
[ -n "${sanitized:-}" ] || for lib in $(ldd "$root/usr/bin/sluice" | awk '$3 ~ /^\// { print $3 }'); do
    pkg=$(dpkg -S "$(readlink -f "$lib")" 2>/dev/null || dpkg -S "$lib" 2>/dev/null)
    pkg=${pkg%%:*}
    case " $depends " in *" $pkg "*) ;; *) err "$lib comes from ${pkg:-an unknown package}, not in Depends ($depends)" ;; esac
done

out=$("$root/usr/bin/sluice" -t -c "$root/etc/sluice/sluice.ini" 2>&1) || err "installed sluice -t: $out"
[ "$fail" = 0 ] && echo "deb.sh: ok ($(basename "$deb"), $(du -k "$deb" | cut -f1) KiB; installed sluice -t: $out)"
exit "$fail"
