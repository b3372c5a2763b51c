#!/bin/sh
# Unpack one CANN installer as the vendor ships it; leaves the .run to execute in DIR.
#
#   sh unpack-cann.sh FILE RUN DIR
#
# FILE is either RUN itself, or a signed bundle (.zip) holding a payload P, P.cms (its
# CMS signature) and a .crl (the revocation list), as Huawei's own offline installer
# (ascend-deployer, handle_zip_pkg) expects; P is RUN or another zip holding RUN.
# A bundle without its signature files, or without the payload they name, is refused
# here, before any installer runs. The CMS signature itself is NOT verified: that needs
# Huawei's root certificate, which no package here carries; FILE's sha256 was checked
# against the knowledge base or the lock before this script runs.
set -eu
file=$1 run=$2 dir=$3
name=${file##*/}
case "$name" in
  "$run") [ "$file" = "$dir/$run" ] || cp "$file" "$dir/$run"; exit 0 ;;
  *.zip) ;;
  *) echo "$name: neither $run nor a .zip bundle" >&2; exit 1 ;;
esac
unpacked="$dir/$name.d"
rm -rf "$unpacked" && mkdir -p "$unpacked"
unzip -q -o -d "$unpacked" "$file"
cms=$(find "$unpacked" -maxdepth 1 -name '*.cms' | sort | head -n 1)
[ -n "$cms" ] || { echo "$name: no .cms signature beside the payload: not a signed CANN bundle" >&2; exit 1; }
find "$unpacked" -maxdepth 1 -name '*.crl' | grep -q . || { echo "$name: no .crl revocation list beside the payload" >&2; exit 1; }
payload=${cms%.cms}
[ -f "$payload" ] || { echo "$name: its payload ${payload##*/} (named by ${cms##*/}) is missing" >&2; exit 1; }
case "$payload" in
  *.zip) unzip -q -o -d "$unpacked" "$payload" ;;
esac
[ -f "$unpacked/$run" ] || { echo "$name: $run is not in the bundle" >&2; exit 1; }
mv "$unpacked/$run" "$dir/$run"
rm -rf "$unpacked"
