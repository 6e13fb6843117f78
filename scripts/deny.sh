#!/usr/bin/env bash
# Dependency audit (issue 12, item 6): cargo-deny against deny.toml, where every exception is
# written down with its reason. What is checked, the last results and the advisories that apply
# to our tree: docs/reliability/dependencies.md. scripts/test.sh (CI) runs this.
#
# Always: `cargo deny check bans licenses sources` (needs only Cargo.lock and the package
# registry; compiles nothing), on the committed Cargo.lock (--locked).
#
# Advisories need the RustSec advisory database, which lives on GitHub, out of reach of this
# project's machines and CI. So `cargo deny check advisories` runs (offline) against a local
# copy when there is one, looked for in this order:
#   1. $SEQSVR_ADVISORY_DB: a git clone of rustsec/advisory-db (a work tree, or a bare repository,
#      which is cloned to a temporary dir first). Set but unusable is an error.
#   2. cargo-deny's own copy, ${CARGO_HOME:-~/.cargo}/advisory-dbs/advisory-db-3157b0e258782691,
#      which `cargo deny fetch db` leaves on a machine that reaches GitHub.
# With neither, it says that the advisories check was SKIPPED, and why, and goes on (exit status
# unaffected); SEQSVR_REQUIRE_ADVISORIES=1 makes a skip an error instead.
#
# Exit: 0 when every check that ran passed, 1 otherwise.
set -euo pipefail
source "$(dirname "$0")/common.sh"
cd "$SEQSVR_ROOT"
ensure_cargo_deny
echo ">> $("$CARGO_DENY" --version) ($CARGO_DENY), config deny.toml"

failed=()
ran="bans, licenses, sources"
echo ">> cargo deny check bans licenses sources"
if ! "$CARGO_DENY" --locked check --show-stats bans licenses sources; then
  failed+=("bans/licenses/sources")
fi

# cargo-deny keeps each database in <db-path>/<last URL segment>-<XxHash64 of the lowercased
# URL>; for the default URL (deny.toml sets no db-urls) cargo-deny 0.20.2 calls it this:
DB_DIR_NAME=advisory-db-3157b0e258782691
db=""
if [ -n "${SEQSVR_ADVISORY_DB:-}" ]; then
  db=$SEQSVR_ADVISORY_DB
  if ! git -C "$db" rev-parse --verify -q HEAD >/dev/null 2>&1; then
    echo "error: SEQSVR_ADVISORY_DB=$db is not a git clone of rustsec/advisory-db" >&2
    exit 1
  fi
elif [ -d "${CARGO_HOME:-$HOME/.cargo}/advisory-dbs/$DB_DIR_NAME/crates" ]; then
  db=${CARGO_HOME:-$HOME/.cargo}/advisory-dbs/$DB_DIR_NAME
fi

if [ -z "$db" ]; then
  echo "!! SKIPPED: cargo deny check advisories. The RustSec advisory database (rustsec/advisory-db"
  echo "!! on GitHub) cannot be fetched from this machine, and no local copy was found: set"
  echo "!! SEQSVR_ADVISORY_DB to a clone of it, or run 'cargo deny fetch db' where GitHub is"
  echo "!! reachable. The advisories known to apply, and what we do about each:"
  echo "!! docs/reliability/dependencies.md."
  ran="$ran; advisories SKIPPED"
  if [ "${SEQSVR_REQUIRE_ADVISORIES:-0}" = 1 ]; then
    failed+=("advisories (no database; SEQSVR_REQUIRE_ADVISORIES=1)")
  fi
else
  work=$(mktemp -d -t seqsvr-deny-XXXXXX)
  trap 'rm -rf "$work"' EXIT
  mkdir -p "$work/dbs"
  if [ "$(git -C "$db" rev-parse --is-bare-repository)" = true ]; then
    git clone -q "$db" "$work/dbs/$DB_DIR_NAME"
  else
    ln -s "$(cd "$db" && pwd)" "$work/dbs/$DB_DIR_NAME"
  fi
  if [ ! -d "$work/dbs/$DB_DIR_NAME/crates" ]; then
    echo "error: $db has no crates/ directory: not a copy of rustsec/advisory-db" >&2
    exit 1
  fi
  # cargo-deny judges a copy's age by its clone or fetch time, not by its newest advisory: say
  # how old the data really is.
  head=$(git -C "$db" log -1 --format='%h of %cs')
  age_days=$((($(date +%s) - $(git -C "$db" log -1 --format=%ct)) / 86400))
  echo ">> cargo deny check advisories (offline, database $db: commit $head, $age_days days old)"
  if [ "$age_days" -gt 30 ]; then
    echo "!! note: advisories published after this copy's last commit ($age_days days ago) are not checked"
  fi
  # deny.toml sets no db-path: point this run at the copy.
  sed "s|^\[advisories\]\$|[advisories]\ndb-path = \"$work/dbs\"|" deny.toml >"$work/deny.toml"
  if ! "$CARGO_DENY" --locked --offline --config "$work/deny.toml" check --show-stats advisories; then
    failed+=("advisories")
  fi
  echo ">> ignored in deny.toml, each with its reason:" \
    "$(grep -oE 'id = "RUSTSEC-[0-9]+-[0-9]+"' deny.toml | cut -d'"' -f2 | paste -sd' ')" \
    "(cargo-deny warns above about any that no longer matches a crate)"
  ran="$ran, advisories (database commit $head)"
fi

if [ ${#failed[@]} -gt 0 ]; then
  echo "error: cargo deny failed: ${failed[*]} (exceptions go in deny.toml, each with its reason)" >&2
  exit 1
fi
echo ">> cargo deny passed: $ran"
