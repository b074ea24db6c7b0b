#!/bin/sh
# Builds sluice_VERSION_ARCH.deb with dpkg-deb from what Debian 12 has (no
# debhelper): `make install` into a staging root with PREFIX=/usr, then
#   /usr/bin/sluice, /usr/share/man/man8/sluice.8.gz,
#   /etc/sluice/sluice.ini (a conffile: an edited one survives upgrades),
#   /usr/lib/systemd/system/sluice.service when deploy/systemd/sluice.service
#   exists at build time.
# No maintainer scripts: after installing, `systemctl daemon-reload` and
# `systemctl enable --now sluice` are the operator's call.
#
# Usage: deploy/debian/build-deb.sh BUILD_DIR VERSION OUT_DIR   (from the
# repository root; `make deb` runs it). Prints the path of the .deb.
set -eu
build=$1 version=$2 out=$3
arch=$(dpkg --print-architecture)
stage=$out/stage
rm -rf "$stage"
mkdir -p "$stage/DEBIAN"
make --no-print-directory -s install BUILD="$build" DESTDIR="$stage" PREFIX=/usr SYSCONFDIR=/etc >/dev/null
strip --strip-unneeded "$stage/usr/bin/sluice"
gzip -9n "$stage/usr/share/man/man8/sluice.8"
find "$stage/etc" -type f | sed "s|^$stage||" > "$stage/DEBIAN/conffiles"
size=$(du -sk --exclude=DEBIAN "$stage" | cut -f1)
sed -e "s/@VERSION@/$version/" -e "s/@ARCH@/$arch/" -e "s/@SIZE@/$size/" \
    deploy/debian/control.in > "$stage/DEBIAN/control"
find "$stage" -type d -exec chmod 0755 {} +
deb=$out/sluice_${version}_$arch.deb
dpkg-deb --root-owner-group -Zxz --build "$stage" "$deb" >/dev/null
echo "$deb"
