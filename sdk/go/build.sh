#!/usr/bin/env bash
# Builds and tests the Go SDK offline, from Debian's packages only (no Go module proxy):
#   sdk/go/build.sh          install what is missing, generate the stubs from proto/, gofmt,
#                            go vet, go test ./... (unit tests: in-process fake AllocSvrs,
#                            the decode vectors of tests/conformance/decode-vectors.json),
#                            and builds the conformance runner (sdk/go/conformance) into
#                            $SEQSVR_GO_WORK/bin/seqsvr-go-conformance and the bench driver
#                            (examples/bench) into .../bin/seqsvr-go-bench (paths printed)
#   sdk/go/build.sh --live   the same, then `scripts/dev-cluster.sh up` and the live tests
#                            against it (the README example as printed, concurrent callers
#                            strictly increasing per uid, a kill -9 of the owning AllocSvr),
#                            and `down` at the end if this run started the cluster.
# The dev cluster has fixed ports (one per machine); SEQSVR_DEV_DIR as for dev-cluster.sh.
# CARGO_TARGET_DIR: where dev-cluster.sh finds (or builds) the servers (scripts/common.sh).
#
# How it builds offline: GOPATH mode (GO111MODULE=off) over /usr/share/gocode, where Debian's
# golang-*-dev packages put their sources, with this directory linked in at its import path
# (github.com/seqsvr/seqsvr/sdk/go) in a GOPATH of its own. go.mod is for users who build
# with a module proxy; this script does not read it.
set -euo pipefail
SDK=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$SDK/../.." && pwd)
IMPORT=github.com/seqsvr/seqsvr/sdk/go
WORK=${SEQSVR_GO_WORK:-$HOME/.cache/seqsvr/go}
LIVE=0
[ "${1:-}" = --live ] && LIVE=1

as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

# Debian's packages: the compiler, protoc and its two Go plugins, gRPC, protobuf (APIv2 and
# the 1.5 APIv1 shim gRPC 1.33 encodes with: the 1.3 one cannot marshal APIv2 messages) and
# the TOML reader; redigo for examples/bench's Redis mode.
need=()
command -v go >/dev/null 2>&1 || need+=(golang-go)
command -v protoc >/dev/null 2>&1 || need+=(protobuf-compiler)
command -v protoc-gen-go >/dev/null 2>&1 || need+=(protoc-gen-go)
command -v protoc-gen-go-grpc >/dev/null 2>&1 || need+=(protoc-gen-go-grpc)
for pkg in golang-google-grpc-dev golang-google-protobuf-dev golang-github-golang-protobuf-1-5-dev \
  golang-github-burntsushi-toml-dev golang-github-gomodule-redigo-dev; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  echo ">> installing: ${need[*]}"
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq "${need[@]}" >/dev/null
fi

export GO111MODULE=off GOFLAGS= GOPATH=$WORK/gopath:/usr/share/gocode GOCACHE=$WORK/cache
LINK=$WORK/gopath/src/$IMPORT
mkdir -p "$(dirname "$LINK")"
ln -sfn "$SDK" "$LINK"
cd "$LINK" # the import path, so the go tool sees the package where GOPATH says it is

echo ">> protoc: proto/seqsvr/v1/seq.proto -> seqsvrpb/"
map=Mseqsvr/v1/seq.proto=$IMPORT/seqsvrpb
protoc -I "$ROOT/proto" --go_out=. --go_opt=module=$IMPORT --go_opt=$map \
  --go-grpc_out=. --go-grpc_opt=module=$IMPORT --go-grpc_opt=$map seqsvr/v1/seq.proto

echo ">> gofmt, go vet"
unformatted=$(gofmt -l .)
if [ -n "$unformatted" ]; then
  echo "error: not gofmt-ed: $unformatted" >&2
  exit 1
fi
go vet ./...

# The decode vectors are checked against the Rust decoder too when a seqctl is built.
seqctl=${SEQSVR_SEQCTL:-${CARGO_TARGET_DIR:-$HOME/.cache/seqsvr/target}/release/seqctl}
if [ -x "$seqctl" ]; then export SEQSVR_SEQCTL=$seqctl; else unset SEQSVR_SEQCTL; fi
echo ">> go test ./... (unit; decode vectors against ${SEQSVR_SEQCTL:-no seqctl: not against Rust})"
go test -count=1 ./...

# The conformance runner (tests/conformance/README.md; scripts/conformance.sh runs it).
mkdir -p "$WORK/bin"
go build -o "$WORK/bin/seqsvr-go-conformance" $IMPORT/conformance
echo ">> conformance runner: $WORK/bin/seqsvr-go-conformance"
go build -o "$WORK/bin/seqsvr-go-bench" $IMPORT/examples/bench
echo ">> bench driver (examples/bench): $WORK/bin/seqsvr-go-bench"

if [ $LIVE -eq 1 ]; then
  DEV=${SEQSVR_DEV_DIR:-$ROOT/data/local}
  started=0
  if ! ls "$DEV"/pids/*.pid >/dev/null 2>&1; then started=1; fi
  stop() { if [ $started -eq 1 ]; then "$ROOT/scripts/dev-cluster.sh" down || true; fi; }
  trap stop EXIT
  "$ROOT/scripts/dev-cluster.sh" up
  echo ">> go test -run Live ./... (against $DEV)"
  SEQSVR_DEV_DIR=$DEV SEQSVR_ROOT=$ROOT go test -count=1 -v -run Live ./... 2>&1 | tee "$WORK/live.log" \
    | grep -E '^(=== RUN|--- |PASS|FAIL|ok|    live_test)' || true
  grep -q '^ok' "$WORK/live.log" && ! grep -q -- '--- FAIL\|--- SKIP' "$WORK/live.log"
fi
