#!/usr/bin/env bash
# Builds and tests the Python SDK:
#   sdk/python/build.sh          install what is missing (into a venv of its own), check that the
#                                committed stubs are what grpcio-tools generates from proto/,
#                                pip-install the package, run the unit tests (pytest: in-process
#                                fake AllocSvrs, the decode vectors of tests/conformance/)
#   sdk/python/build.sh --live   the same, then the live tests against the running cluster of
#                                SEQSVR_DEV_DIR (default data/local: `scripts/dev-cluster.sh up`);
#                                it never starts or stops a cluster itself.
#
# Where it installs: a venv, ${SEQSVR_PY_VENV:-~/.cache/seqsvr/python/venv}, made from
# python3 (3.11 or later: tomllib). A venv rather than the user site because the interpreter's
# own site may be externally managed (PEP 668: Debian's python3 refuses `pip install --user`),
# because the stub generator must be one pinned version (GRPCIO_TOOLS below: its output is
# compared byte for byte) without touching what the user has, and because removing the
# directory undoes it all.
#
# The stubs (src/seqsvr/v1/seq_pb2*.py, .pyi) are committed, so `pip install ./sdk/python` needs
# nothing but grpcio and protobuf from PyPI (no grpcio-tools, no build step of its own). This
# script regenerates them with grpcio-tools $GRPCIO_TOOLS and fails if they differ from the
# committed ones (SEQSVR_PY_REGEN=1: write them instead, after a change of proto/).
set -euo pipefail
SDK=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$SDK/../.." && pwd)
VENV=${SEQSVR_PY_VENV:-$HOME/.cache/seqsvr/python/venv}
GRPCIO_TOOLS=1.85.1
LIVE=0
[ "${1:-}" = --live ] && LIVE=1

as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

PY=${SEQSVR_PYTHON_BIN:-python3}
if ! command -v "$PY" >/dev/null 2>&1; then
  echo ">> installing python3"
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq python3 python3-venv >/dev/null
fi
if ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "error: $PY is $("$PY" -V 2>&1); the SDK needs Python 3.11 or later (tomllib)" >&2
  exit 1
fi
if [ ! -x "$VENV/bin/python" ]; then
  echo ">> making the venv $VENV"
  mkdir -p "$(dirname "$VENV")"
  if ! "$PY" -m venv "$VENV" 2>/dev/null; then
    # Debian's python3 keeps venv (ensurepip) in a package of its own.
    as_root apt-get update -qq
    DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq python3-venv >/dev/null
    rm -rf "$VENV"
    "$PY" -m venv "$VENV"
  fi
fi
VPY=$VENV/bin/python

# What is missing, from PyPI: the runtime (as pyproject.toml pins it), the generator (pinned:
# its output is compared), the test tools.
need=()
"$VPY" - <<'PY' || need+=("grpcio>=1.85.1" "protobuf>=7.35.1,<8")
import sys
from importlib.metadata import version, PackageNotFoundError
def v(name):
    try:
        return tuple(int(x) for x in version(name).split(".")[:3])
    except (PackageNotFoundError, ValueError):
        return None
g, p = v("grpcio"), v("protobuf")
sys.exit(0 if g and g >= (1, 85, 1) and p and (7, 35, 1) <= p < (8,) else 1)
PY
[ "$("$VPY" -c 'from importlib.metadata import version; print(version("grpcio-tools"))' 2>/dev/null)" = "$GRPCIO_TOOLS" ] ||
  need+=("grpcio-tools==$GRPCIO_TOOLS")
for mod in pytest:pytest pytest_asyncio:pytest-asyncio cryptography:cryptography setuptools:setuptools; do
  "$VPY" -c "import ${mod%%:*}" 2>/dev/null || need+=("${mod##*:}")
done
if [ ${#need[@]} -gt 0 ]; then
  echo ">> pip install ${need[*]}"
  "$VPY" -m pip install -q --disable-pip-version-check "${need[@]}"
fi

echo ">> grpcio-tools $GRPCIO_TOOLS: proto/seqsvr/v1/seq.proto -> src/seqsvr/v1/ (compared with the committed stubs)"
gen=$(mktemp -d)
trap 'rm -rf "$gen"' EXIT
"$VPY" -m grpc_tools.protoc -I "$ROOT/proto" --python_out="$gen" --pyi_out="$gen" --grpc_python_out="$gen" \
  "$ROOT/proto/seqsvr/v1/seq.proto"
for f in seq_pb2.py seq_pb2.pyi seq_pb2_grpc.py; do
  if ! cmp -s "$gen/seqsvr/v1/$f" "$SDK/src/seqsvr/v1/$f"; then
    if [ "${SEQSVR_PY_REGEN:-0}" = 1 ]; then
      cp "$gen/seqsvr/v1/$f" "$SDK/src/seqsvr/v1/$f"
      echo ">>   wrote src/seqsvr/v1/$f (commit it)"
    else
      echo "error: src/seqsvr/v1/$f differs from what grpcio-tools $GRPCIO_TOOLS generates from proto/" \
        "(proto/ changed? run SEQSVR_PY_REGEN=1 sdk/python/build.sh and commit the stubs):" >&2
      diff -u "$SDK/src/seqsvr/v1/$f" "$gen/seqsvr/v1/$f" | head -n 20 >&2 || true
      exit 1
    fi
  fi
done

echo ">> pip install $SDK"
"$VPY" -m pip install -q --disable-pip-version-check --no-build-isolation --force-reinstall --no-deps "$SDK"
"$VPY" -m pip check -q >/dev/null 2>&1 || "$VPY" -m pip check

# The decode vectors are checked against the Rust decoder too when a seqctl is built.
seqctl=${SEQSVR_SEQCTL:-${CARGO_TARGET_DIR:-$HOME/.cache/seqsvr/target}/release/seqctl}
if [ -x "$seqctl" ]; then export SEQSVR_SEQCTL=$seqctl; else unset SEQSVR_SEQCTL; fi
echo ">> pytest (unit; decode vectors against ${SEQSVR_SEQCTL:-no seqctl: not against Rust})"
cd "$SDK"
# The tests import the installed package (not src/): what `pip install` gives users.
"$VPY" -m pytest -q -p no:cacheprovider -m "not live" tests

if [ $LIVE -eq 1 ]; then
  DEV=${SEQSVR_DEV_DIR:-$ROOT/data/local}
  if [ ! -f "$DEV/cluster.toml" ] || [ ! -f "$DEV/certs/client.pem" ]; then
    echo "error: no cluster in $DEV (cluster.toml and certs/client.pem): start one with" \
      "scripts/dev-cluster.sh up (this script never starts or stops a cluster)" >&2
    exit 1
  fi
  echo ">> pytest -m live (against $DEV)"
  SEQSVR_LIVE=1 SEQSVR_DEV_DIR=$DEV SEQSVR_ROOT=$ROOT "$VPY" -m pytest -v -p no:cacheprovider -m live tests
fi
