#!/usr/bin/env bash
# Builds the image seqsvr:<version> (and seqsvr:latest) from our own release binaries, with no
# network and no base image: FROM scratch + storesvr, allocsvr, seqctl + exactly the shared
# libraries `ldd` lists for them + a passwd/group naming the non-root user (uid 10001) the
# processes run as. Prints the image's size.
#
#   scripts/docker-image.sh            # build the binaries (if needed) and the image
#   SEQSVR_IMAGE=seqsvr:dev scripts/docker-image.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/common.sh

if ! docker info >/dev/null 2>&1; then
  echo "error: no Docker engine answers (docker info failed)" >&2
  exit 1
fi
ensure_build_deps
build_release_bins

version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
image=${SEQSVR_IMAGE:-seqsvr:$version}
tags=(-t "$image")
# seqsvr:latest (what docker-compose.yml runs by default) only for the default name.
[ -n "${SEQSVR_IMAGE:-}" ] || tags+=(-t seqsvr:latest)
bins=(storesvr allocsvr seqctl)
uid=10001

stage=$(mktemp -d /tmp/seqsvr-image.XXXXXX)
trap 'rm -rf "$stage"' EXIT
root=$stage/rootfs
mkdir -p "$root/usr/local/bin" "$root/etc/seqsvr" "$root/tmp" "$stage/home/data" "$stage/home/bootstrap"
chmod 1777 "$root/tmp"
for b in "${bins[@]}"; do
  install -m 0755 "$SEQSVR_BIN/$b" "$root/usr/local/bin/$b"
  # The one build profile keeps debug info (for profiles and backtraces); the image does not
  # need it (about 3/4 of the binaries' size).
  strip --strip-debug "$root/usr/local/bin/$b"
done

# Every shared library the binaries load (the dynamic loader included), at the path ldd names,
# with symlinks resolved into regular files.
libs=$(for b in "${bins[@]}"; do ldd "$SEQSVR_BIN/$b"; done |
  awk '/=> \// { print $3 } /^[[:space:]]*\/[^ ]+ \(0x/ { print $1 }' | sort -u)
for lib in $libs; do
  mkdir -p "$root$(dirname "$lib")"
  cp -L "$lib" "$root$lib"
done
# glibc resolves host names through NSS: files (/etc/hosts, which Docker provides), then DNS
# (Docker's embedded resolver); both modules are part of libc since glibc 2.34.
printf 'hosts: files dns\n' >"$root/etc/nsswitch.conf"
printf 'root:x:0:0:root:/:/sbin/nologin\nseqsvr:x:%s:%s:seqsvr:/var/lib/seqsvr:/sbin/nologin\n' \
  "$uid" "$uid" >"$root/etc/passwd"
printf 'root:x:0:\nseqsvr:x:%s:\n' "$uid" >"$root/etc/group"

cat >"$stage/Dockerfile" <<EOF
FROM scratch
COPY rootfs/ /
# Named volumes mounted here start with this ownership, so the non-root user can write them.
COPY --chown=$uid:$uid home/ /var/lib/seqsvr/
USER $uid:$uid
WORKDIR /var/lib/seqsvr
ENV PATH=/usr/local/bin RUST_LOG=info
LABEL org.opencontainers.image.title="seqsvr" org.opencontainers.image.version="$version"
EOF

echo ">> building $image from $SEQSVR_BIN (libraries: $(echo $libs | wc -w))"
# The classic builder: BuildKit may try to resolve the `scratch` frontend over the network.
if ! DOCKER_BUILDKIT=0 docker build -q "${tags[@]}" "$stage" >"$stage/build.log" 2>&1; then
  cat "$stage/build.log" >&2
  echo "error: docker build failed" >&2
  exit 1
fi
bytes=$(docker image inspect -f '{{.Size}}' "$image")
names=$image
[ -n "${SEQSVR_IMAGE:-}" ] || names="$image and seqsvr:latest"
echo ">> built $names: $((bytes / 1024 / 1024)) MB ($bytes bytes)"
