//! `seqctl`: the seqsvr admin CLI. It finds the cluster from the cluster config file (like
//! `etcdctl --endpoints`): `--config FILE` or `SEQSVR_CONFIG`.

use anyhow::{bail, Context};
use clap::{Parser, Subcommand};
use seqsvr_client::store::{member_status, StoreClient};
use seqsvr_core::config::{ClusterConfig, SetConfig};
use seqsvr_core::ids::{NodeId, SectionId, SetId};
use serde_json::json;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

#[derive(Parser)]
#[command(name = "seqctl", version, about = "Administer a seqsvr cluster")]
struct Cli {
    /// The cluster config (TOML) listing the sets and their members.
    #[arg(long, env = "SEQSVR_CONFIG", default_value = "data/local/cluster.toml", global = true)]
    config: PathBuf,
    /// How long one command may take.
    #[arg(long, default_value_t = 5000, global = true)]
    timeout_ms: u64,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// StoreSvr (Raft group) commands.
    #[command(subcommand)]
    Store(StoreCommand),
}

#[derive(Subcommand)]
enum StoreCommand {
    /// Every member of every set: role, term, leader, commit and applied index, membership.
    Status {
        /// A JSON array of objects (stable keys: set, id, addr, role, term, leader_id,
        /// commit_index, applied_index, ...).
        #[arg(long)]
        json: bool,
    },
    /// Linearizable read of sections' max_seq.
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
        #[arg(required = true, value_parser = parse_advance)]
        sections: Vec<(u64, u64)>,
    },
    /// Ask a set's leader to hand leadership to another member.
    TransferLeader {
        #[arg(long)]
        set: Option<u64>,
        #[arg(long)]
        to: u64,
    },
}

fn parse_advance(text: &str) -> Result<(u64, u64), String> {
    let (s, v) = text.split_once('=').ok_or("expected SECTION=MAX_SEQ")?;
    Ok((
        s.parse().map_err(|e| format!("section: {e}"))?,
        v.parse().map_err(|e| format!("max_seq: {e}"))?,
    ))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn load(path: &PathBuf) -> anyhow::Result<ClusterConfig> {
    let text = std::fs::read_to_string(path).with_context(|| {
        format!("cannot read cluster config {} (set --config or SEQSVR_CONFIG)", path.display())
    })?;
    ClusterConfig::from_toml_str(&text).with_context(|| format!("in {}", path.display()))
}

fn pick_set(config: &ClusterConfig, set: Option<u64>) -> anyhow::Result<&SetConfig> {
    match set {
        Some(id) => config.set(SetId(id)).with_context(|| format!("no set {id} in the config")),
        None if config.sets.len() == 1 => Ok(&config.sets[0]),
        None => bail!("the cluster has {} sets: name one with --set", config.sets.len()),
    }
}

fn store_client(set: &SetConfig) -> anyhow::Result<StoreClient> {
    let members: Vec<(NodeId, String)> =
        set.stores.iter().map(|m| (m.id, m.addr.clone())).collect();
    Ok(StoreClient::new(&members)?)
}

async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let config = load(&cli.config)?;
    let timeout = Duration::from_millis(cli.timeout_ms);
    match cli.command {
        Command::Store(StoreCommand::Status { json }) => store_status(&config, timeout, json).await,
        Command::Store(StoreCommand::Get { set, sections }) => {
            let client = store_client(pick_set(&config, set)?)?;
            let ids: Vec<SectionId> = sections.into_iter().map(SectionId).collect();
            match client.get(&ids, timeout).await {
                Ok(values) => {
                    for (s, v) in values {
                        println!("{s} {v}");
                    }
                    Ok(ExitCode::SUCCESS)
                }
                Err(status) => grpc_failure(status),
            }
        }
        Command::Store(StoreCommand::Advance { set, sections }) => {
            let client = store_client(pick_set(&config, set)?)?;
            let wanted: Vec<(SectionId, u64)> =
                sections.into_iter().map(|(s, v)| (SectionId(s), v)).collect();
            match client.advance(&wanted, timeout).await {
                Ok(values) => {
                    for (s, v) in values {
                        println!("{s} {v}");
                    }
                    Ok(ExitCode::SUCCESS)
                }
                Err(status) => grpc_failure(status),
            }
        }
        Command::Store(StoreCommand::TransferLeader { set, to }) => {
            let set = pick_set(&config, set)?;
            // Find the leader from any member's status, then ask it.
            let mut leader_addr = None;
            for m in &set.stores {
                if let Ok(s) = member_status(&m.addr, timeout).await {
                    if s.leader_id != 0 {
                        leader_addr = Some(s.leader_addr);
                        break;
                    }
                }
            }
            let Some(addr) = leader_addr.filter(|a| !a.is_empty()) else {
                bail!("set {}: no member knows a leader", set.id);
            };
            let channel = seqsvr_client::store::channel(&addr)?;
            let mut client = seqsvr_proto::v1::store_admin_client::StoreAdminClient::new(channel);
            match client
                .transfer_leader(seqsvr_proto::v1::TransferLeaderRequest { target_id: to })
                .await
            {
                Ok(_) => {
                    println!(
                        "asked member at {addr} to transfer leadership of set {} to member {to}",
                        set.id
                    );
                    Ok(ExitCode::SUCCESS)
                }
                Err(status) => grpc_failure(status),
            }
        }
    }
}

fn grpc_failure(status: tonic::Status) -> anyhow::Result<ExitCode> {
    eprintln!("error: {:?}: {}", status.code(), status.message());
    Ok(ExitCode::FAILURE)
}

async fn store_status(
    config: &ClusterConfig,
    timeout: Duration,
    as_json: bool,
) -> anyhow::Result<ExitCode> {
    let mut rows = Vec::new();
    let mut all_answered = true;
    for set in &config.sets {
        for m in &set.stores {
            let row = match member_status(&m.addr, timeout).await {
                Ok(s) => json!({
                    "set": set.id.0, "id": m.id.0, "addr": m.addr, "role": s.role, "term": s.term,
                    "leader_id": s.leader_id, "commit_index": s.commit_index,
                    "applied_index": s.applied_index, "first_index": s.first_index,
                    "last_index": s.last_index, "snapshot_index": s.snapshot_index,
                    "voters": s.voters, "learners": s.learners,
                    "section_begin": s.section_begin, "section_end": s.section_end,
                }),
                Err(status) => {
                    all_answered = false;
                    json!({
                        "set": set.id.0, "id": m.id.0, "addr": m.addr, "role": "unreachable",
                        "term": null, "leader_id": null, "commit_index": null, "applied_index": null,
                        "error": status.message(),
                    })
                }
            };
            rows.push(row);
        }
    }
    if as_json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        println!(
            "{:<4} {:<4} {:<22} {:<13} {:>6} {:>7} {:>9} {:>9} {:>9}  VOTERS",
            "SET", "ID", "ADDR", "ROLE", "TERM", "LEADER", "COMMIT", "APPLIED", "SNAPSHOT"
        );
        for r in &rows {
            let cell = |k: &str| r[k].as_u64().map(|v| v.to_string()).unwrap_or_else(|| "-".into());
            let voters = r["voters"]
                .as_array()
                .map(|v| v.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(","))
                .unwrap_or_else(|| r["error"].as_str().unwrap_or("").to_string());
            println!(
                "{:<4} {:<4} {:<22} {:<13} {:>6} {:>7} {:>9} {:>9} {:>9}  {}",
                cell("set"),
                cell("id"),
                r["addr"].as_str().unwrap_or(""),
                r["role"].as_str().unwrap_or(""),
                cell("term"),
                cell("leader_id"),
                cell("commit_index"),
                cell("applied_index"),
                cell("snapshot_index"),
                voters
            );
        }
    }
    Ok(if all_answered { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}
