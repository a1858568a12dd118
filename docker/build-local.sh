#!/usr/bin/env bash
# Builds the agenteval image on a machine that reaches no image registry (only Debian's mirror
# and the crate registry): starts a Docker engine if none runs, makes a Debian bookworm base
# image with debootstrap from the mirror apt already uses, and builds docker/Dockerfile with it
# as both builder and runtime base. Prints the image's size. Usage: docker/build-local.sh [TAG]
# `docker/build-local.sh --base-only` stops once the engine runs and the base image exists (what
# task environments need: `environment.base_image: agenteval-local/debian:bookworm`).
set -euo pipefail
cd "$(dirname "$0")/.."
BASE_ONLY=
if [ "${1:-}" = --base-only ]; then BASE_ONLY=1; shift; fi
TAG=${1:-agenteval:dev}
BASE=agenteval-local/debian:bookworm

if ! command -v dockerd >/dev/null 2>&1 || ! command -v debootstrap >/dev/null 2>&1; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io debootstrap >/dev/null
fi
if ! docker info >/dev/null 2>&1; then
  nohup dockerd >/tmp/agenteval-dockerd.log 2>&1 &
  for _ in $(seq 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
  docker info >/dev/null 2>&1 || { echo "dockerd did not start; see /tmp/agenteval-dockerd.log" >&2; exit 1; }
fi

if ! docker image inspect "$BASE" >/dev/null 2>&1; then
  mirror=$(grep -hoE '^(URIs:|deb) +https?://[^ ]+' /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null \
    | grep -v security | head -1 | awk '{print $2}' || true)
  mirror=${mirror:-http://deb.debian.org/debian}
  rootfs=$(mktemp -d)
  debootstrap --variant=minbase bookworm "$rootfs" "$mirror" >/tmp/agenteval-debootstrap.log 2>&1 \
    || { echo "debootstrap failed; see /tmp/agenteval-debootstrap.log" >&2; exit 1; }
  # apt inside the image reaches the same mirror the host uses.
  cp -r /etc/apt/sources.list.d/. "$rootfs/etc/apt/sources.list.d/"
  cp -r /etc/apt/apt.conf.d/. "$rootfs/etc/apt/apt.conf.d/" 2>/dev/null || true
  [ -f /etc/apt/sources.list ] && cp /etc/apt/sources.list "$rootfs/etc/apt/sources.list"
  rm -rf "$rootfs"/usr/share/{doc,man,locale}/* "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
  tar -C "$rootfs" -c . | docker import - "$BASE" >/dev/null
  rm -rf "$rootfs"
fi

[ -n "$BASE_ONLY" ] && { echo "base image $BASE ready"; exit 0; }

# The host's extra CA certificates (a proxy in front of the crate registry), for the build only.
cp /usr/local/share/ca-certificates/*.crt docker/ca-certificates/ 2>/dev/null || true

# The Docker client of Debian's docker.io speaks BuildKit (the Dockerfile's cache mounts) when
# asked; a newer client elsewhere on PATH may lack its buildx plugin.
DOCKER=docker
[ -x /usr/bin/docker ] && DOCKER=/usr/bin/docker
start=$(date +%s)
DOCKER_BUILDKIT=1 "$DOCKER" build -q -f docker/Dockerfile \
  --build-arg BUILDER_IMAGE="$BASE" --build-arg RUNTIME_IMAGE="$BASE" \
  --build-arg VERSION="$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)" \
  --build-arg REVISION="$(git rev-parse HEAD 2>/dev/null || echo unknown)" \
  -t "$TAG" . >/dev/null
size=$(docker image inspect --format '{{.Size}}' "$TAG")
echo "built $TAG in $(( $(date +%s) - start )) s: $(( size / 1000000 )) MB"
