#!/usr/bin/env bash
# Builds and tests the Java SDK offline, from Debian's packages only (no Maven, no network but
# apt):
#   sdk/java/build.sh          install what is missing, generate the stubs from proto/ (protoc
#                              with Debian's grpc-java plugin), javac against /usr/share/java,
#                              run the unit tests (JUnit 4: in-process fake AllocSvrs over
#                              Netty, mutual TLS with certificates made by openssl, the decode
#                              vectors of tests/conformance/decode-vectors.json) and build
#                              sdk/java/build/seqsvr-java.jar (the SDK, the conformance runner
#                              io.seqsvr.conformance.Runner, the README's example and the load
#                              generator io.seqsvr.examples.bench.Bench that sdk/java/bench runs).
#   sdk/java/build.sh --live   the same, then the live tests against the running cluster named
#                              by SEQSVR_DEV_DIR (default data/local): its cluster.toml and
#                              certs/client.pem/.key. It never starts or stops a cluster:
#                              `scripts/dev-cluster.sh up` must be running. They use uids
#                              3000000..3099999 (set 0) and 2200000000..2200099999 (set 1).
# After a build, sdk/java/build/classpath holds the runtime classpath:
#   java -cp "$(cat sdk/java/build/classpath)" io.seqsvr.examples.ReadmeExample
#   java -cp "$(cat sdk/java/build/classpath)" io.seqsvr.conformance.Runner static --cases ...
# pom.xml is for users who build with Maven elsewhere; this script does not read it.
set -euo pipefail
SDK=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$SDK/../.." && pwd)
OUT=$SDK/build
LIVE=0
case "${1:-}" in
  --live) LIVE=1 ;;
  "") ;;
  *) echo "usage: sdk/java/build.sh [--live]   (--live: against a running scripts/dev-cluster.sh up)" >&2; exit 2 ;;
esac

as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

# Debian's packages: the JDK, protoc and the grpc-java plugin, grpc-java 1.41 (with Netty),
# protobuf-java 3.21, their dependencies as jars, JUnit 4, and openssl for the tests' PKI.
need=()
command -v javac >/dev/null 2>&1 || need+=(openjdk-17-jdk-headless)
command -v protoc >/dev/null 2>&1 || need+=(protobuf-compiler)
[ -x /usr/bin/grpc_java_plugin ] || need+=(protobuf-compiler-grpc-java-plugin)
command -v openssl >/dev/null 2>&1 || need+=(openssl)
for pkg in libgrpc-java libprotobuf-java libnetty-java libperfmark-java libgoogle-gson-java \
  libguava-java junit4; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  echo ">> installing: ${need[*]}"
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq "${need[@]}" >/dev/null
fi

J=/usr/share/java
jars=(grpc-api grpc-core grpc-context grpc-netty grpc-protobuf grpc-protobuf-lite grpc-stub
  protobuf guava error-prone-annotations jsr305 perfmark-api gson opencensus-api
  netty-buffer netty-codec netty-codec-http netty-codec-http2 netty-codec-socks netty-common
  netty-handler netty-handler-proxy netty-resolver netty-transport
  netty-transport-native-unix-common)
CP=
for j in "${jars[@]}"; do
  [ -f "$J/$j.jar" ] || { echo "error: $J/$j.jar is missing" >&2; exit 1; }
  CP=$CP${CP:+:}$J/$j.jar
done
TEST_CP=$CP:$J/junit4.jar:$J/hamcrest-core.jar

rm -rf "$OUT"
mkdir -p "$OUT/gen" "$OUT/classes" "$OUT/test-classes"

echo ">> protoc: proto/seqsvr/v1/seq.proto -> build/gen (java + grpc-java)"
protoc -I "$ROOT/proto" --java_out="$OUT/gen" \
  --plugin=protoc-gen-grpc-java=/usr/bin/grpc_java_plugin --grpc-java_out="$OUT/gen" \
  seqsvr/v1/seq.proto
# The plugin annotates its stubs @javax.annotation.Generated, which JDK 9+ no longer has (and
# this plugin's version cannot omit); the annotation is source-only, so drop it.
for f in "$OUT"/gen/seqsvr/v1/*Grpc.java; do
  sed -i '/^@javax.annotation.Generated(/,/comments = /d' "$f"
done

echo ">> javac (main, examples)"
find "$OUT/gen" "$SDK/src/main/java" "$SDK/src/examples/java" -name '*.java' >"$OUT/main-sources"
javac -nowarn -encoding UTF-8 --release 17 -Xlint:-options -d "$OUT/classes" -cp "$CP" @"$OUT/main-sources" \
  2>&1 | grep -v '^Note:' || true
[ -f "$OUT/classes/io/seqsvr/SeqsvrClient.class" ] || { echo "error: javac failed" >&2; exit 1; }

echo ">> jar: build/seqsvr-java.jar"
(cd "$OUT/classes" && jar --create --file "$OUT/seqsvr-java.jar" .)
echo "$OUT/seqsvr-java.jar:$CP" >"$OUT/classpath"

echo ">> javadoc (the public API: build/javadoc)"
javadoc -quiet -Xdoclint:all,-missing -d "$OUT/javadoc" -cp "$CP" \
  -sourcepath "$SDK/src/main/java:$OUT/gen" io.seqsvr io.seqsvr.conformance >"$OUT/javadoc.log" 2>&1 ||
  { cat "$OUT/javadoc.log" >&2; echo "error: javadoc failed" >&2; exit 1; }

echo ">> javac (tests)"
find "$SDK/src/test/java" -name '*.java' >"$OUT/test-sources"
javac -nowarn -encoding UTF-8 --release 17 -d "$OUT/test-classes" -cp "$OUT/classes:$TEST_CP" @"$OUT/test-sources" \
  2>&1 | grep -v '^Note:' || true
[ -f "$OUT/test-classes/io/seqsvr/AllTests.class" ] || { echo "error: javac (tests) failed" >&2; exit 1; }

run_tests() {
  java -cp "$OUT/test-classes:$OUT/classes:$TEST_CP" \
    -Dseqsvr.root="$ROOT" "$@" io.seqsvr.AllTests
}

echo ">> unit tests (JUnit 4)"
run_tests

echo ">> unit tests of the load generator (io.seqsvr.examples.bench, sdk/java/bench)"
java -cp "$OUT/test-classes:$OUT/classes:$TEST_CP" org.junit.runner.JUnitCore \
  io.seqsvr.examples.bench.BenchTest

if [ $LIVE -eq 1 ]; then
  DEV=${SEQSVR_DEV_DIR:-$ROOT/data/local}
  if [ ! -f "$DEV/cluster.toml" ]; then
    echo "error: $DEV/cluster.toml not found: start the cluster first (scripts/dev-cluster.sh up)" >&2
    exit 1
  fi
  echo ">> live tests against $DEV (scripts/dev-cluster.sh up must be running)"
  run_tests -Dseqsvr.live="$DEV"
fi
