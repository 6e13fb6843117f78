#!/usr/bin/env bash
# The development PKI of docker-compose.yml: `seqctl certs init` into config/compose-certs/
# (CAs, one certificate per container, admin and client), which the containers mount read-only
# at /etc/seqsvr/compose-certs and config/compose*.toml name in their [tls] sections. Made once;
# `--force` makes a new one (restart the containers afterwards).
# The image runs as uid 10001: the private keys are handed to that uid (0600) when this runs as
# root, else made readable (0644) — a development PKI only; never do that with real keys.
set -euo pipefail
source "$(dirname "$0")/common.sh"
cd "$SEQSVR_ROOT"

DIR=config/compose-certs
force=()
[ "${1:-}" = "--force" ] && force=(--force)
if [ -f "$DIR/admin.key" ] && [ ${#force[@]} -eq 0 ]; then
  echo ">> $DIR exists (pass --force for a new PKI)"
  exit 0
fi
[ -x "$SEQSVR_BIN/seqctl" ] || cargo build --release -p seqctl >/dev/null
"$SEQSVR_BIN/seqctl" certs init --dir "$DIR" --sets 2 --members 3 --allocs 2 "${force[@]}" >/dev/null
if [ "$(id -u)" -eq 0 ]; then
  chown 10001:10001 "$DIR"/store-*.key "$DIR"/alloc-*.key
else
  chmod 0644 "$DIR"/store-*.key "$DIR"/alloc-*.key
fi
echo ">> made the compose PKI in $DIR (admin: $DIR/admin.pem, applications: $DIR/client.pem)"
