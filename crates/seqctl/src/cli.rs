//! The command line: every command, flag and its help (clap derive). No logic lives here.

use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

/// Shown at the end of `seqctl --help`.
pub const EXIT_CODES_HELP: &str = "\
Exit codes:
  0  done; `health`: the server reports SERVING
  1  the cluster answered but refused (e.g. InvalidArgument, FailedPrecondition), or only part
     of it answered (`status` with a member down); `health`: NOT_SERVING, UNKNOWN or
     SERVICE_UNKNOWN
  2  no usable answer: nothing answered within --timeout-ms, the cluster config is unreadable,
     or the arguments are wrong; `health`: the server could not be reached or the call failed

Errors go to stderr as `error: ...` (which address, what failed) and `hint: ...` (what to try).";

#[derive(Debug, Parser)]
#[command(
    name = "seqctl",
    version,
    about = "Administer a seqsvr cluster",
    long_about = "Administer a seqsvr cluster. seqctl finds the cluster from the cluster config \
                  file (like `etcdctl --endpoints`): --config FILE or SEQSVR_CONFIG.",
    after_help = EXIT_CODES_HELP
)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Args)]
pub struct GlobalArgs {
    /// The cluster config (TOML) listing the sets and their members.
    #[arg(long, env = "SEQSVR_CONFIG", default_value = "data/local/cluster.toml", global = true)]
    pub config: PathBuf,
    /// How long the whole command may take, all calls included (`watch`: each refresh).
    #[arg(long, default_value_t = 5000, global = true, value_name = "MS")]
    pub timeout_ms: u64,
    /// Print JSON (the same rows and fields as the tables, plus nested detail) instead of text.
    #[arg(long, global = true)]
    pub json: bool,
    /// This client's certificate chain (PEM), needed when the cluster file has `[tls]` (an
    /// `admin` identity for store commands; see `seqctl certs init`).
    #[arg(long, env = "SEQSVR_TLS_CERT", global = true, value_name = "PEM")]
    pub tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM).
    #[arg(long, env = "SEQSVR_TLS_KEY", global = true, value_name = "PEM")]
    pub tls_key: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// The whole cluster at a glance: store members, sets, AllocSvrs and their sections.
    Status {
        /// Redraw every --interval-ms like `top` (the same as `seqctl watch`).
        #[arg(long)]
        watch: bool,
        #[arg(long, default_value_t = 1000, value_name = "MS", requires = "watch")]
        interval_ms: u64,
    },
    /// Redraw the cluster view (`status`) every second, like `top`, until Ctrl-C.
    ///
    /// On a terminal the screen is cleared each time; in a pipe the views follow each other, a
    /// blank line apart. Each refresh is bounded by --timeout-ms.
    Watch {
        #[arg(long, default_value_t = 1000, value_name = "MS")]
        interval_ms: u64,
    },
    /// Ask one server's grpc.health.v1 `Check`: exit 0 only when it is SERVING.
    ///
    /// For container health checks and load balancers: prints `ADDR STATUS`; exit 1 for
    /// NOT_SERVING, UNKNOWN or SERVICE_UNKNOWN, 2 when the server cannot be reached or does not
    /// answer within --timeout-ms. Needs no cluster config.
    ///
    /// Over mutual TLS when --tls-cert is given (then --config is read for its `[tls]`; any
    /// identity the server trusts may ask), else plaintext (a server run with --insecure).
    Health {
        /// host:port of a StoreSvr or AllocSvr.
        addr: String,
        /// The service to ask about; "" (the default) is the server as a whole.
        #[arg(long, default_value = "")]
        service: String,
        /// Which kind of server ADDR is, for the name its certificate must carry over TLS
        /// (default: alloc if ADDR is an AllocSvr address in the cluster file, else store).
        #[arg(long, value_enum)]
        server: Option<ServerRole>,
    },
    /// Allocate the next sequence of each uid (one line per uid: `UID SEQ`).
    Next {
        #[arg(required = true)]
        uids: Vec<u64>,
    },
    /// The current sequence of each uid, without allocating (`UID SEQ`; 0 = never allocated).
    Get {
        #[arg(required = true)]
        uids: Vec<u64>,
    },
    /// Globally unique, time-ordered ids of the cluster config's `[ids.schemes]`.
    #[command(subcommand)]
    Id(IdCommand),
    /// Every set's route table: which AllocSvr serves which sections.
    Route,
    /// AllocSvr registrations and leases as each set's leader sees them.
    Leases,
    /// Section commands.
    #[command(subcommand)]
    Section(SectionCommand),
    /// AllocSvr commands.
    #[command(subcommand)]
    Alloc(AllocCommand),
    /// StoreSvr (Raft group) commands.
    #[command(subcommand)]
    Store(StoreCommand),
    /// Certificates for mutual TLS.
    #[command(subcommand)]
    Certs(CertsCommand),
    /// Print a shell completion script (bash, zsh, fish, ...).
    ///
    /// `seqctl completions bash > /etc/bash_completion.d/seqctl`, or
    /// `seqctl completions zsh > "${fpath[1]}/_seqctl"`.
    Completions { shell: clap_complete::Shell },
}

/// A server's kind, for the name its certificate carries (`seqctl health --server`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ServerRole {
    Store,
    Alloc,
}

#[derive(Debug, Subcommand)]
pub enum CertsCommand {
    /// Make a development PKI in DIR and print the `[tls]` block for the cluster file.
    ///
    /// Two CAs: `cluster-ca` issues every StoreSvr (`store-<set>-<id>`, role peer of its set),
    /// AllocSvr (`alloc-<set>-<i>`) and `admin`; `client-ca` issues `client`. StoreSvrs trust
    /// only the cluster CA; AllocSvrs trust both (`client-bundle.pem`). Keys are written 0600.
    /// Needs no cluster config and no running cluster.
    Init {
        /// Where to write the files (created if missing).
        #[arg(long)]
        dir: PathBuf,
        /// Sets to make StoreSvr and AllocSvr certificates for (set ids 0..N).
        #[arg(long, default_value_t = 1)]
        sets: u32,
        /// StoreSvr members per set (member ids 1..=M).
        #[arg(long, default_value_t = 3)]
        members: u64,
        /// AllocSvr certificates per set.
        #[arg(long, default_value_t = 2)]
        allocs: u32,
        /// The base of the server names: StoreSvr certificates carry `store.<NAME>`, AllocSvr
        /// certificates `alloc.<NAME>`, and clients check the one of the role they dial.
        #[arg(long, default_value = "seqsvr")]
        server_name: String,
        /// Validity of every certificate, in days.
        #[arg(long, default_value_t = 365)]
        days: u32,
        /// Replace existing files in DIR.
        #[arg(long)]
        force: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum IdCommand {
    /// New ids of SCHEME from any AllocSvr, one per line (decimal; the 8-4-4-4-12 form for
    /// uuidv7); the worker id they carry goes to stderr (`--json`: into the object).
    Next {
        /// A scheme name from the cluster config's `[ids.schemes]`.
        scheme: String,
        /// How many ids (at most the config's `ids.max_count`).
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
        count: u32,
        /// weibo's business number (0 to 31); 0 for the other schemes.
        #[arg(long, default_value_t = 0)]
        business: u64,
        /// rongcloud: the session type (0 to 15).
        #[arg(long, default_value_t = 0)]
        session_type: u32,
        /// rongcloud: the session id (hashed as seed 000 does: the low 22 bits of Java's
        /// String.hashCode). Its ids come from the owner of the session's section.
        #[arg(long, conflicts_with = "session_hash")]
        session: Option<String>,
        /// rongcloud: the 22-bit session hash itself, instead of --session.
        #[arg(long)]
        session_hash: Option<u64>,
    },
    /// Decode an id of SCHEME: time (RFC 3339 and raw units), worker, business or session
    /// fields, sequence, canonical text and the layout. Needs no server and no certificate:
    /// it reads only the cluster config's `[ids.schemes]`.
    Decode {
        /// A scheme name from the cluster config's `[ids.schemes]`.
        scheme: String,
        /// The id's text form (decimal for the 64-bit schemes, 8-4-4-4-12 hex for uuidv7,
        /// XXXX-XXXX-XXXX-XXXX for rongcloud) or, for uuidv7 and rongcloud, a decimal number.
        id: String,
    },
    /// The layout of every scheme (or of SCHEME): bit fields, largest id and whether it is
    /// JavaScript-safe (at most 2^53 - 1), worker ids, ids/s per worker and years of life.
    /// Loads `[ids.schemes]` as the AllocSvrs do (a scheme they would refuse is an error);
    /// needs no server and no certificate.
    Layout {
        /// A scheme name from the cluster config's `[ids.schemes]` (default: all of them).
        scheme: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
pub enum SectionCommand {
    /// Move SECTION (and the `--count - 1` after it) to AllocSvr `--to`.
    ///
    /// The old owner stops at its next heartbeat; the new one serves once the old lease must
    /// have run out.
    Move {
        section: u64,
        #[arg(long)]
        to: u64,
        #[arg(long, default_value_t = 1)]
        count: u64,
    },
}

#[derive(Debug, Subcommand)]
pub enum AllocCommand {
    /// Move every section away from an AllocSvr and give it none (`--undo` to stop draining).
    Drain {
        alloc_id: u64,
        #[arg(long)]
        set: Option<u64>,
        #[arg(long)]
        undo: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum StoreCommand {
    /// Every member of every set: role, term, leader, commit and applied index, membership.
    ///
    /// `--json`: an array of objects (stable keys: set, id, addr, role, term, leader_id,
    /// commit_index, applied_index, vote_blocked, members, ...).
    Status,
    /// Linearizable read of sections' max_seq (`SECTION MAX_SEQ` per line).
    Get {
        #[arg(long)]
        set: Option<u64>,
        #[arg(required = true)]
        sections: Vec<u64>,
    },
    /// Raise sections' max_seq (never lowers it): SECTION=MAX_SEQ ...
    Advance {
        #[arg(long)]
        set: Option<u64>,
        #[arg(required = true, value_parser = parse_advance, value_name = "SECTION=MAX_SEQ")]
        sections: Vec<(u64, u64)>,
    },
    /// Ask a set's leader to hand leadership to another member (returns once asked).
    TransferLeader {
        #[arg(long)]
        set: Option<u64>,
        #[arg(long)]
        to: u64,
    },
    /// Add a member as a learner (it receives the log, never votes).
    ///
    /// Start it first with an empty data dir and `--initial-cluster-state existing`.
    AddLearner {
        #[arg(long)]
        set: Option<u64>,
        id: u64,
        /// host:port the other members and clients dial.
        addr: String,
    },
    /// Make a caught-up learner a voter (refused until it has caught up).
    Promote {
        #[arg(long)]
        set: Option<u64>,
        id: u64,
    },
    /// Remove a member (voter or learner). Removing the leader hands leadership over first.
    Remove {
        #[arg(long)]
        set: Option<u64>,
        id: u64,
    },
    /// Change the lease timing in the replicated state (every leader then uses it).
    SetLease {
        #[arg(long)]
        set: Option<u64>,
        #[arg(long)]
        lease_ms: u64,
        #[arg(long)]
        margin_ms: u64,
    },
}

pub fn parse_advance(text: &str) -> Result<(u64, u64), String> {
    let (s, v) = text.split_once('=').ok_or("expected SECTION=MAX_SEQ")?;
    Ok((
        s.parse().map_err(|e| format!("section: {e}"))?,
        v.parse().map_err(|e| format!("max_seq: {e}"))?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("seqctl").chain(args.iter().copied()))
    }

    #[test]
    fn the_command_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn global_flags_go_before_or_after_the_command() {
        let cli = parse(&["status", "--json", "--timeout-ms", "250"]).unwrap();
        assert!(cli.global.json);
        assert_eq!(cli.global.timeout_ms, 250);
        let cli = parse(&["--json", "--timeout-ms", "250", "store", "status"]).unwrap();
        assert!(cli.global.json);
        assert_eq!(cli.global.timeout_ms, 250);
        assert!(matches!(cli.command, Command::Store(StoreCommand::Status)));
        // Membership commands take it as well.
        let cli = parse(&["store", "transfer-leader", "--to", "3", "--timeout-ms", "10"]).unwrap();
        assert_eq!(cli.global.timeout_ms, 10);
        assert!(matches!(
            cli.command,
            Command::Store(StoreCommand::TransferLeader { set: None, to: 3 })
        ));
    }

    #[test]
    fn watch_and_status_watch() {
        let cli = parse(&["watch"]).unwrap();
        assert!(matches!(cli.command, Command::Watch { interval_ms: 1000 }));
        let cli = parse(&["status", "--watch", "--interval-ms", "200"]).unwrap();
        assert!(matches!(cli.command, Command::Status { watch: true, interval_ms: 200 }));
        assert!(parse(&["status", "--interval-ms", "200"]).is_err(), "interval needs --watch");
    }

    #[test]
    fn health_takes_an_address_and_an_optional_service() {
        let cli = parse(&["health", "127.0.0.1:7101"]).unwrap();
        match cli.command {
            Command::Health { addr, service, .. } => {
                assert_eq!(addr, "127.0.0.1:7101");
                assert_eq!(service, "");
            }
            other => panic!("{other:?}"),
        }
        let cli = parse(&["health", "h:1", "--service", "seqsvr.v1.SeqService"]).unwrap();
        assert!(
            matches!(cli.command, Command::Health { service, .. } if service == "seqsvr.v1.SeqService")
        );
        assert!(parse(&["health"]).is_err(), "the address is required");
    }

    #[test]
    fn completions_for_bash_and_zsh() {
        for shell in ["bash", "zsh"] {
            assert!(matches!(
                parse(&["completions", shell]).unwrap().command,
                Command::Completions { .. }
            ));
        }
        assert!(parse(&["completions", "cmd.exe"]).is_err());
    }

    #[test]
    fn advance_pairs() {
        assert_eq!(parse_advance("5=100"), Ok((5, 100)));
        assert!(parse_advance("5").unwrap_err().contains("SECTION=MAX_SEQ"));
        assert!(parse_advance("x=1").unwrap_err().starts_with("section"));
        assert!(parse_advance("1=x").unwrap_err().starts_with("max_seq"));
        let cli = parse(&["store", "advance", "--set", "1", "3=10", "4=20"]).unwrap();
        assert!(matches!(
            cli.command,
            Command::Store(StoreCommand::Advance { set: Some(1), sections }) if sections == vec![(3, 10), (4, 20)]
        ));
    }

    #[test]
    fn the_help_documents_the_exit_codes() {
        let help = Cli::command().render_long_help().to_string();
        assert!(help.contains("Exit codes:"), "{help}");
        for code in ["  0  ", "  1  ", "  2  "] {
            assert!(help.contains(code), "{code:?} missing in {help}");
        }
    }

    #[test]
    fn the_old_per_command_json_flags_still_parse() {
        for args in [
            &["status", "--json"][..],
            &["route", "--json"],
            &["leases", "--json"],
            &["store", "status", "--json"],
        ] {
            assert!(parse(args).unwrap().global.json, "{args:?}");
        }
    }
}
