#!/bin/sh
# Builds sluice_VERSION_ARCH.deb with dpkg-deb from what Debian 12 has (no
# debhelper): `make install` into a staging root with PREFIX=/usr, then
#   /usr/bin/sluice, /usr/share/man/man8/sluice.8.gz,
#   /etc/sluice/sluice.ini (a conffile: an edited one survives upgrades),
#   /usr/lib/systemd/system/sluice.service when deploy/systemd/sluice.service
#   exists at build time,
#   /usr/share/doc/sluice: README.md, docs/*.md, examples/*.ini (what the
#   configuration's comments and the man page point to), copyright and
#   changelog.gz (deploy/debian/; Debian policy 12.5 and 12.7), text over
#   4 KiB gzip-compressed as policy 12.3 asks (zless reads it).
# No maintainer scripts: after installing, `systemctl daemon-reload` and
# `systemctl enable --now sluice` are the operator's call.
set -eu
usage() {
    cat <<USAGE
usage: deploy/debian/build-deb.sh BUILD_DIR VERSION OUT_DIR
  BUILD_DIR  where the sluice binary was built (build: its build/sluice)
  VERSION    the package version (the Makefile's VERSION; deploy/debian/changelog
             must have it as its first entry)
  OUT_DIR    where the .deb is written (OUT_DIR/stage is scratch)
Run from the repository root; \`make deb\` runs it. Prints the path of the .deb.
USAGE
}
case "${1:-}" in -h|--help) usage; exit 0 ;; esac
if [ $# -ne 3 ]; then
    usage >&2
    exit 2
fi
build=$1 version=$2 out=$3
# The changelog's newest entry is the package's version (dpkg-deb does not check).
top=$(sed -n '1s/^sluice (\([^)]*\)).*/\1/p' deploy/debian/changelog)
if [ "$top" != "$version" ]; then
    echo "build-deb.sh: deploy/debian/changelog starts with version '$top', not $version: add an entry" >&2
    exit 1
fi
arch=$(dpkg --print-architecture)
stage=$out/stage
rm -rf "$stage"
mkdir -p "$stage/DEBIAN"
make --no-print-directory -s install BUILD="$build" DESTDIR="$stage" PREFIX=/usr SYSCONFDIR=/etc >/dev/null
strip --strip-unneeded "$stage/usr/bin/sluice"
gzip -9n "$stage/usr/share/man/man8/sluice.8"
doc=$stage/usr/share/doc/sluice
install -m 0644 deploy/debian/copyright "$doc/copyright"
gzip -9nc deploy/debian/changelog > "$doc/changelog.gz"
chmod 0644 "$doc/changelog.gz"
find "$doc" -type f -name '*.md' -size +4k -exec gzip -9n {} +
find "$stage/etc" -type f | sed "s|^$stage||" > "$stage/DEBIAN/conffiles"
size=$(du -sk --exclude=DEBIAN "$stage" | cut -f1)
sed -e "s/@VERSION@/$version/" -e "s/@ARCH@/$arch/" -e "s/@SIZE@/$size/" \
    deploy/debian/control.in > "$stage/DEBIAN/control"
find "$stage" -type d -exec chmod 0755 {} +
deb=$out/sluice_${version}_$arch.deb
dpkg-deb --root-owner-group -Zxz --build "$stage" "$deb" >/dev/null
echo "$deb"
