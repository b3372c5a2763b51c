#!/usr/bin/env bash
# Make this machine able to build and test images: Docker Engine, local base
# images (amd64, and arm64 under qemu), a registry for push tests. Idempotent; run as
# root; one line per step.
#
# Why: build machines start with no daemon and cannot pull any image, so the
# engine is installed and started here and the base image is made locally with
# debootstrap (see ../shared/DESIGN.md, "Testing on a machine with no NPU ...").
#
# Environment:
#   ASCEND_BUILD_STATE             state dir for logs and the rootfs cache (default .state)
#   ASCEND_BUILD_SETUP_BASE_IMAGE  name of the base image to make (default local/debian:12)
#   DEBIAN_MIRROR                  debootstrap mirror (default: debootstrap's own)
#   ASCEND_BUILD_SETUP_ARM64       0 skips the arm64 part (qemu, arm64 base images); default 1
#   ASCEND_BUILD_CACHE_KEEP        BuildKit cache kept by a dockerd this script starts (default 20GB)
set -euo pipefail

STATE=${ASCEND_BUILD_STATE:-.state}
BASE_IMAGE=${ASCEND_BUILD_SETUP_BASE_IMAGE:-local/debian:12}
# podman + catatonit: tests/node/test_driver_guard_e2e.py plays a rendered Pod with `podman kube play`
# stargz-snapshotter: its ctr-remote converts the lazy (eStargz) variant (image --lazy, test_lazy_e2e)
# chromium: tests/test_catalogue.py opens the catalogue's pages in it, headless, and takes a screenshot
PACKAGES=(docker.io debootstrap docker-registry apache2-utils skopeo qemu-user-static binfmt-support podman catatonit
          stargz-snapshotter chromium)
ARM64=${ASCEND_BUILD_SETUP_ARM64:-1}
# arm64 bases: name and Debian release (Debian 11 has the Python 3.9 of older closures)
ARM64_BASES=("local/debian:12-arm64 bookworm" "local/debian:11-arm64 bullseye")
DOCKER=/usr/bin/docker
DEFAULT_HOST=unix:///var/run/docker.sock

mkdir -p "$STATE"
STATE=$(cd "$STATE" && pwd)
LOG="$STATE/setup-engine.log"
: >"$LOG"

say() { echo "setup-engine: $*"; }
fail() {
    echo "setup-engine: FAILED: $1" >&2
    [ -n "${2:-}" ] && [ -s "$2" ] && { echo "--- last lines of $2:" >&2; tail -n 20 "$2" >&2; }
    exit 1
}

[ "$(id -u)" = 0 ] || fail "run as root (it installs packages and starts dockerd)"

# 1. Debian packages -------------------------------------------------------------
missing=()
for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
    say "packages: all present (${PACKAGES[*]})"
else
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >>"$LOG" 2>&1 || fail "apt-get update failed" "$LOG"
    apt-get install -y -q --no-install-recommends "${missing[@]}" >>"$LOG" 2>&1 \
        || fail "apt-get install ${missing[*]} failed" "$LOG"
    say "packages: installed ${missing[*]}"
fi

# 2. Docker Engine ---------------------------------------------------------------
if "$DOCKER" info >/dev/null 2>&1; then
    say "engine: running at ${DOCKER_HOST:-$DEFAULT_HOST}"
else
    if [ -n "${DOCKER_HOST:-}" ] && [ "$DOCKER_HOST" != "$DEFAULT_HOST" ]; then
        fail "no engine answers at DOCKER_HOST=$DOCKER_HOST; start that engine or unset DOCKER_HOST"
    fi
    # The build cache is capped: some of each test session's synthetic installers are new
    # bytes (CANN 8.0.RC3's, NNAL's), so their layers are never reused, and an uncapped cache
    # filled this machine's disk.
    printf '{"builder": {"gc": {"enabled": true, "defaultKeepStorage": "%s"}}}\n' \
        "${ASCEND_BUILD_CACHE_KEEP:-20GB}" >"$STATE/daemon.json"
    # setsid: the daemon must outlive this script and its terminal.
    setsid dockerd --config-file "$STATE/daemon.json" >>"$STATE/dockerd.log" 2>&1 </dev/null &
    pid=$!
    for _ in $(seq 60); do
        "$DOCKER" info >/dev/null 2>&1 && break
        kill -0 "$pid" 2>/dev/null || fail "dockerd exited while starting" "$STATE/dockerd.log"
        sleep 1
    done
    "$DOCKER" info >/dev/null 2>&1 || fail "dockerd (pid $pid) did not answer within 60 s" "$STATE/dockerd.log"
    say "engine: started dockerd (pid $pid, log $STATE/dockerd.log)"
fi

# 3. Base image (nothing can be pulled here) ---------------------------------------
if "$DOCKER" image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
    say "base image: $BASE_IMAGE present"
else
    tarball="$STATE/rootfs-$(echo "$BASE_IMAGE" | tr '/:' '__').tar"
    made=cached
    if [ ! -s "$tarball" ]; then
        rootfs=$(mktemp -d "$STATE/rootfs.XXXXXX")
        trap 'rm -rf "$rootfs" "$tarball.part"' EXIT
        debootstrap --variant=minbase bookworm "$rootfs" ${DEBIAN_MIRROR:+"$DEBIAN_MIRROR"} >>"$LOG" 2>&1 \
            || fail "debootstrap bookworm failed (set DEBIAN_MIRROR to a reachable mirror?)" "$LOG"
        tar -C "$rootfs" -c . >"$tarball.part" 2>>"$LOG" || fail "packing the rootfs failed" "$LOG"
        mv "$tarball.part" "$tarball"
        rm -rf "$rootfs"
        trap - EXIT
        made=debootstrap
    fi
    "$DOCKER" import - "$BASE_IMAGE" <"$tarball" >>"$LOG" 2>&1 || fail "docker import failed" "$LOG"
    say "base image: $BASE_IMAGE imported ($made rootfs $tarball)"
fi

# 4. arm64 under emulation (x86_64 hosts) ------------------------------------------------
# qemu-aarch64 registered with flag F runs arm64 containers and BuildKit's arm64 steps.
# The registration does not survive a reboot here (no init runs binfmt-support), so it
# is checked every time. An imported rootfs is labelled with the host's arch whatever
# --platform says, and BuildKit then looks for an arm64 base in a registry; a
# `FROM scratch` + `ADD rootfs.tar` build with --platform linux/arm64 labels it arm64.
if [ "$ARM64" = 0 ]; then
    say "arm64: skipped (ASCEND_BUILD_SETUP_ARM64=0)"
elif [ "$(uname -m)" = aarch64 ]; then
    say "arm64: native host, no emulation needed"
else
    [ -e /proc/sys/fs/binfmt_misc/register ] || mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc >>"$LOG" 2>&1 \
        || fail "cannot mount binfmt_misc: arm64 images cannot run here (set ASCEND_BUILD_SETUP_ARM64=0 to skip)" "$LOG"
    [ -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ] || update-binfmts --enable qemu-aarch64 >>"$LOG" 2>&1 \
        || fail "cannot register qemu-aarch64 with binfmt_misc" "$LOG"
    grep -q '^flags: .*F' /proc/sys/fs/binfmt_misc/qemu-aarch64 && grep -q '^enabled' /proc/sys/fs/binfmt_misc/qemu-aarch64 \
        || fail "qemu-aarch64 is registered without flag F or disabled: see /proc/sys/fs/binfmt_misc/qemu-aarch64"
    say "arm64: qemu-aarch64 registered (flag F)"
    for entry in "${ARM64_BASES[@]}"; do
        read -r name release <<<"$entry"
        if [ "$("$DOCKER" image inspect -f '{{.Architecture}}' "$name" 2>/dev/null)" = arm64 ]; then
            say "arm64 base image: $name present"
            continue
        fi
        context="$STATE/base-$release-arm64"
        made=cached
        if [ ! -s "$context/rootfs.tar" ]; then
            rootfs=$(mktemp -d "$STATE/rootfs.XXXXXX")
            trap 'rm -rf "$rootfs"' EXIT
            debootstrap --arch=arm64 --variant=minbase "$release" "$rootfs" ${DEBIAN_MIRROR:+"$DEBIAN_MIRROR"} >>"$LOG" 2>&1 \
                || fail "debootstrap --arch=arm64 $release failed (set DEBIAN_MIRROR to a reachable mirror?)" "$LOG"
            rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*
            mkdir -p "$context"
            tar -C "$rootfs" -cf "$context/rootfs.tar.part" . 2>>"$LOG" || fail "packing the arm64 rootfs failed" "$LOG"
            mv "$context/rootfs.tar.part" "$context/rootfs.tar"
            rm -rf "$rootfs"
            trap - EXIT
            made=debootstrap
        fi
        printf 'FROM scratch\nADD rootfs.tar /\nCMD ["bash"]\n' >"$context/Dockerfile"
        DOCKER_BUILDKIT=1 "$DOCKER" build --platform linux/arm64 -t "$name" "$context" >>"$LOG" 2>&1 \
            || fail "building the arm64 base image $name failed" "$LOG"
        say "arm64 base image: $name made ($made rootfs, $release)"
    done
fi
