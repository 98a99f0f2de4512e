#!/usr/bin/env bash
# Build the docker backend's image offline: a minimal Debian bookworm rootfs with
# python3-minimal + libpython3.11-stdlib (json, ctypes, decimal... which the zygote and
# typical solutions import), debootstrap --variant=minbase, imported with `docker import`.
# No registry is needed; debootstrap reads a Debian mirror (or a local one via MIRROR).
# Usage: scripts/build_sandbox_image.sh [TAG]   (default codeloop-sandbox:bookworm)
# Needs root, debootstrap and a running docker engine. Idempotent: exits 0 at once when
# the tag exists (set REBUILD=1 to force).
set -euo pipefail
TAG="${1:-codeloop-sandbox:bookworm}"
MIRROR="${MIRROR:-http://deb.debian.org/debian}"
SUITE="${SUITE:-bookworm}"

if [[ "${REBUILD:-0}" != 1 ]] && docker image inspect "$TAG" >/dev/null 2>&1; then
  echo "image $TAG already present"
  exit 0
fi
command -v debootstrap >/dev/null || { echo "debootstrap not installed (apt-get install debootstrap)" >&2; exit 1; }
ROOT="$(mktemp -d /tmp/codeloop-rootfs.XXXXXX)"
trap 'rm -rf "$ROOT"' EXIT
CACHE="${DEBOOTSTRAP_CACHE:-/var/cache/codeloop-debootstrap}"  # re-runs skip the downloads
mkdir -p "$CACHE"
debootstrap --variant=minbase --cache-dir="$CACHE" --include=python3-minimal,libpython3.11-stdlib \
  "$SUITE" "$ROOT" "$MIRROR" >"$ROOT.log" 2>&1 || {
  echo "debootstrap failed; last lines of $ROOT.log:" >&2; tail -20 "$ROOT.log" >&2; exit 1; }
rm -f "$ROOT.log"
# Trim what a sandbox never needs; python3-minimal's stdlib subset stays.
rm -rf "$ROOT"/var/cache/apt/archives/*.deb "$ROOT"/var/lib/apt/lists/* "$ROOT"/usr/share/doc/* \
  "$ROOT"/usr/share/man/* "$ROOT"/usr/share/locale/*
# Check the modules the zygote itself needs are there.
chroot "$ROOT" /usr/bin/python3 -I -S -c "import json, collections, math, decimal, fractions, ctypes, select, resource" \
  || { echo "rootfs python3 lacks a module the zygote needs" >&2; exit 1; }
tar -C "$ROOT" -c . | docker import \
  --change 'USER 65534:65534' --change 'WORKDIR /tmp' --change 'ENV LANG=C.UTF-8' \
  - "$TAG" >/dev/null
echo "built $TAG ($(docker image inspect -f '{{.Size}}' "$TAG") bytes)"
