//! `seqcheck`: check a recorded history, run the nemesis against a fresh local cluster, replay
//! the lost-disk interleaving (`DESIGN.md` §8), or put one AllocSvr under hostile clients.
//!
//! Exit status: 0 = no violation, 1 = violations found, 2 = the run itself failed.

use clap::{Parser, Subcommand};
use seqsvr_check::conformance;
use seqsvr_check::history::{check, read_jsonl, Report};
use seqsvr_check::hostile::{self, HostileConfig};
use seqsvr_check::lost_disk::{self, LostDiskConfig};
use seqsvr_check::nemesis::{self, FaultKind, RunConfig, ALL_FAULTS};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "seqcheck",
    version,
    about = "Prove seqsvr's promise: histories, checker, nemesis"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Check a history saved as JSON lines (one operation per line).
    Check { history: PathBuf },
    /// Start a local cluster, load it, inject seeded faults, check and save the history.
    Nemesis {
        /// Keep injecting faults for this long (every fault kind runs at least once).
        #[arg(long, default_value_t = 150)]
        seconds: u64,
        /// The same seed gives the same fault schedule.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Where history.jsonl, report.json and summary.md go.
        #[arg(long, default_value = "data/nemesis")]
        out: PathBuf,
        #[arg(long, default_value_t = 2)]
        sets: u64,
        #[arg(long, default_value_t = 12)]
        clients: usize,
        /// Comma-separated fault kinds (default: all).
        #[arg(long, value_delimiter = ',')]
        faults: Vec<String>,
        /// AllocSvr step: small steps make advances (and their fencing) frequent.
        #[arg(long, default_value_t = 100)]
        step: u64,
        /// Lease length in ms (default 1500).
        #[arg(long)]
        lease_ms: Option<u64>,
        /// Lease margin in ms (default 200).
        #[arg(long)]
        lease_margin_ms: Option<u64>,
        /// AllocSvr heartbeat period in ms (default 300). Its heartbeat waits at most this long
        /// (split over the store members) for an answer.
        #[arg(long)]
        heartbeat_ms: Option<u64>,
        /// Run without the id load (NextIds calls of every scheme, checked for duplicates and
        /// order): for timing-sensitive sequence-only runs, whose faults it would perturb.
        #[arg(long)]
        no_id_load: bool,
    },
    /// Load a running cluster (its cluster file) with recorded calls while an outside script
    /// injects faults, marking them on stdin (`step NAME`, then `stop` or end of input); then
    /// check the history and report the longest stretch without a successful call per step.
    Load {
        /// The cluster file clients use (its sets' `allocs` are the seeds).
        #[arg(long)]
        config: PathBuf,
        /// Where history.jsonl, report.json and summary.md go.
        #[arg(long, default_value = "data/load")]
        out: PathBuf,
        #[arg(long, default_value_t = 8)]
        clients: usize,
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Comma-separated set ids to load (default: every set of the file).
        #[arg(long, value_delimiter = ',')]
        sets: Vec<u64>,
        /// How long to wait for every set to serve before the load starts.
        #[arg(long, default_value_t = 60)]
        connect_wait_s: u64,
        /// This client's certificate, when the cluster file has `[tls]`.
        #[arg(long, env = "SEQSVR_TLS_CERT")]
        tls_cert: Option<PathBuf>,
        /// The private key of --tls-cert.
        #[arg(long, env = "SEQSVR_TLS_KEY")]
        tls_key: Option<PathBuf>,
        /// Run without the id load (NextIds of every served scheme on every loaded AllocSvr,
        /// checked for ids issued twice and for ids of one worker id or session going back).
        #[arg(long)]
        no_id_load: bool,
    },
    /// One AllocSvr of a fresh local cluster under hostile clients (streams that never read,
    /// the largest id counts, oversized and malformed messages, stalled TLS handshakes, store
    /// registrations with long addresses) while a good client runs; asserts the AllocSvr's
    /// memory bound, that it lives, the good client's error rate and every refusal's code.
    Hostile {
        /// Both phases: a third baseline (the good client alone), the rest hostile.
        #[arg(long, default_value_t = 120)]
        seconds: u64,
        /// Where report.json, summary.md and rss.csv go.
        #[arg(long, default_value = "data/hostile")]
        out: PathBuf,
        /// Keep the cluster's data and logs (always kept on a violation or failure).
        #[arg(long)]
        keep: bool,
        /// Comma-separated attacks to run (default: all): never-read-streams,
        /// idle-connections, huge-id-counts, oversized, malformed, stalled-handshakes,
        /// registrations.
        #[arg(long, value_delimiter = ',')]
        attacks: Vec<String>,
    },
    /// The Rust SDK's runner of the SDK conformance suite (tests/conformance/README.md;
    /// scripts/conformance.sh drives it): `static` runs the cases, `load` the fault load.
    Conformance {
        #[command(subcommand)]
        mode: ConformanceMode,
    },
    /// Replay the lost-disk interleaving with real processes: a lagging member plus a member
    /// whose data dir was wiped must not elect a leader that lost a committed max_seq.
    /// Binaries come from SEQSVR_BIN_DIR (e.g. a teeth build), else next to seqcheck.
    LostDisk {
        /// How long to keep reading while only the lagging and the wiped member run, in
        /// election timeouts (each raft-rs election timeout is up to 2 × election_ticks × tick).
        #[arg(long, default_value_t = 10)]
        window_election_timeouts: u32,
        /// Skip the last step (remove, wipe, re-add and promote the wiped member).
        #[arg(long)]
        no_repair: bool,
        /// Keep the cluster's data and logs (they are always kept on a violation or failure).
        #[arg(long)]
        keep: bool,
    },
}

#[derive(Subcommand)]
enum ConformanceMode {
    /// Every case without "phase": "load"; exit 0 if all passed, 1 if one failed.
    Static(conformance::RunnerArgs),
    /// The fault load until OUT/stop exists.
    Load(conformance::RunnerArgs),
    /// One connection with this identity (a refused_connection case, in a process of its own):
    /// exit 0 if it was refused, 1 if it was served.
    Refused {
        #[arg(long)]
        cluster: PathBuf,
        #[arg(long)]
        cert: PathBuf,
        #[arg(long)]
        key: PathBuf,
        /// Check the AllocSvrs' certificates against this prefix + the cluster's server name.
        #[arg(long)]
        server_name_prefix: Option<String>,
    },
}

fn print_report(report: &Report) {
    for v in report.violations.iter().take(10) {
        println!(
            "VIOLATION uid {} ({}): value {} from {:?}\n    then value {} from {:?}",
            v.uid, v.kind, v.earlier_value, v.earlier, v.later_value, v.later
        );
    }
    if report.violations.len() > 10 {
        println!("... and {} more violations", report.violations.len() - 10);
    }
}

/// Runs `seqcheck lost-disk`; a panic in the harness (a wait that timed out) is "could not run".
fn lost_disk_command(cfg: LostDiskConfig) -> ExitCode {
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start runtime: {e}");
            return ExitCode::from(2);
        }
    };
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        runtime.block_on(lost_disk::run(&cfg))
    }));
    match outcome {
        Ok(Ok(report)) => {
            for note in &report.notes {
                println!("note: {note}");
            }
            match &report.violation {
                None => {
                    println!("lost-disk: 0 violations");
                    ExitCode::SUCCESS
                }
                Some(v) => {
                    println!("VIOLATION {v}");
                    println!("lost-disk: 1 violation");
                    ExitCode::from(1)
                }
            }
        }
        Ok(Err(e)) => {
            eprintln!("error: lost-disk run failed: {e:#}");
            ExitCode::from(2)
        }
        Err(_) => {
            eprintln!("error: lost-disk run failed (panicked, see above)");
            ExitCode::from(2)
        }
    }
}

/// Runs `seqcheck hostile`; a panic in the harness (a wait that timed out) is "could not run".
fn conformance_command(mode: ConformanceMode) -> ExitCode {
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start runtime: {e}");
            return ExitCode::from(2);
        }
    };
    match mode {
        ConformanceMode::Static(args) => match runtime.block_on(conformance::run_static(args)) {
            Ok(true) => ExitCode::SUCCESS,
            Ok(false) => ExitCode::from(1),
            Err(e) => {
                eprintln!("error: conformance static: {e:#}");
                ExitCode::from(2)
            }
        },
        ConformanceMode::Load(args) => match runtime.block_on(conformance::run_load(args)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: conformance load: {e:#}");
                ExitCode::from(1)
            }
        },
        ConformanceMode::Refused { cluster, cert, key, server_name_prefix } => {
            let prefix = server_name_prefix.as_deref();
            match runtime.block_on(conformance::run_refused(&cluster, &cert, &key, prefix)) {
                Ok(how) => {
                    println!("{how}");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    println!("{e:#}");
                    ExitCode::from(1)
                }
            }
        }
    }
}

fn hostile_command(cfg: HostileConfig) -> ExitCode {
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start runtime: {e}");
            return ExitCode::from(2);
        }
    };
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        runtime.block_on(hostile::run(&cfg))
    }));
    match outcome {
        Ok(Ok(report)) => {
            print!("\n{}", report.summary());
            println!("report: {}", cfg.out_dir.join("report.json").display());
            if report.violations.is_empty() {
                println!("hostile: 0 violations");
                ExitCode::SUCCESS
            } else {
                for v in &report.violations {
                    println!("VIOLATION {v}");
                }
                println!("hostile: {} violations", report.violations.len());
                ExitCode::from(1)
            }
        }
        Ok(Err(e)) => {
            eprintln!("error: hostile run failed: {e:#}");
            ExitCode::from(2)
        }
        Err(_) => {
            eprintln!("error: hostile run failed (panicked, see above)");
            ExitCode::from(2)
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Load {
            config,
            out,
            clients,
            seed,
            sets,
            connect_wait_s,
            tls_cert,
            tls_key,
            no_id_load,
        } => {
            let cfg = seqsvr_check::load::LoadConfig {
                config,
                out_dir: out.clone(),
                clients,
                seed,
                sets,
                connect_wait: std::time::Duration::from_secs(connect_wait_s),
                tls_cert,
                tls_key,
                id_load: !no_id_load,
            };
            let runtime = match tokio::runtime::Runtime::new() {
                Ok(rt) => rt,
                Err(e) => {
                    eprintln!("error: cannot start runtime: {e}");
                    return ExitCode::from(2);
                }
            };
            match runtime.block_on(seqsvr_check::load::run(cfg)) {
                Ok(summary) => {
                    print_report(&summary.report);
                    print!("{}", summary.table());
                    println!("history and report in {}", out.display());
                    if summary.report.is_valid() {
                        ExitCode::SUCCESS
                    } else {
                        ExitCode::from(1)
                    }
                }
                Err(e) => {
                    eprintln!("error: load run failed: {e:#}");
                    ExitCode::from(2)
                }
            }
        }
        Command::Hostile { seconds, out, keep, attacks } => {
            hostile_command(HostileConfig { seconds, out_dir: out, keep, attacks })
        }
        Command::Conformance { mode } => conformance_command(mode),
        Command::LostDisk { window_election_timeouts, no_repair, keep } => {
            lost_disk_command(LostDiskConfig { window_election_timeouts, repair: !no_repair, keep })
        }
        Command::Check { history } => {
            let file = match std::fs::File::open(&history) {
                Ok(f) => f,
                Err(e) => {
                    eprintln!("error: cannot open {}: {e}", history.display());
                    return ExitCode::from(2);
                }
            };
            let ops = match read_jsonl(std::io::BufReader::new(file)) {
                Ok(ops) => ops,
                Err(e) => {
                    eprintln!("error: {}: {e}", history.display());
                    return ExitCode::from(2);
                }
            };
            let report = check(&ops);
            print_report(&report);
            println!(
                "{} ok, {} failed, {} unknown; {} violations",
                report.n_ok,
                report.n_fail,
                report.n_unknown,
                report.violations.len()
            );
            if report.is_valid() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Command::Nemesis {
            seconds,
            seed,
            out,
            sets,
            clients,
            faults,
            step,
            lease_ms,
            lease_margin_ms,
            heartbeat_ms,
            no_id_load,
        } => {
            let kinds: Vec<FaultKind> = if faults.is_empty() {
                ALL_FAULTS.to_vec()
            } else {
                let mut kinds = Vec::new();
                for name in &faults {
                    match FaultKind::parse(name) {
                        Some(k) => kinds.push(k),
                        None => {
                            let names: Vec<&str> = ALL_FAULTS.iter().map(|k| k.name()).collect();
                            eprintln!("error: unknown fault {name:?}; known: {}", names.join(", "));
                            return ExitCode::from(2);
                        }
                    }
                }
                kinds
            };
            let runtime = match tokio::runtime::Runtime::new() {
                Ok(rt) => rt,
                Err(e) => {
                    eprintln!("error: cannot start runtime: {e}");
                    return ExitCode::from(2);
                }
            };
            let cfg = RunConfig {
                seconds,
                seed,
                out_dir: out.clone(),
                sets,
                clients,
                kinds,
                step,
                lease_ms,
                lease_margin_ms,
                heartbeat_ms,
                id_load: !no_id_load,
            };
            match runtime.block_on(nemesis::run(cfg)) {
                Ok(summary) => {
                    print_report(&summary.report);
                    println!("\n{}", summary.table());
                    println!("history: {}", out.join("history.jsonl").display());
                    if summary.report.is_valid() {
                        println!("nemesis: 0 violations");
                        ExitCode::SUCCESS
                    } else {
                        println!("nemesis: {} violations", summary.report.violations.len());
                        ExitCode::from(1)
                    }
                }
                Err(e) => {
                    eprintln!("error: nemesis run failed: {e:#}");
                    ExitCode::from(2)
                }
            }
        }
    }
}
