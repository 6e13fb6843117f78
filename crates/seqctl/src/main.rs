//! `seqctl`: the seqsvr admin CLI. It finds the cluster from the cluster config file (like
//! `etcdctl --endpoints`): `--config FILE` or `SEQSVR_CONFIG`.

use anyhow::{bail, Context};
use clap::{Parser, Subcommand};
use seqsvr_client::seq::SeqClient;
use seqsvr_client::store::{member_status, StoreClient};
use seqsvr_core::config::{ClusterConfig, SetConfig};
use seqsvr_core::ids::{NodeId, SectionId, SetId};
use seqsvr_proto::v1 as pb;
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
    /// Every set's route table: which AllocSvr serves which sections.
    Route {
        #[arg(long)]
        json: bool,
    },
    /// AllocSvr registrations and leases as each set's leader sees them.
    Leases {
        #[arg(long)]
        json: bool,
    },
    /// Section commands.
    #[command(subcommand)]
    Section(SectionCommand),
    /// AllocSvr commands.
    #[command(subcommand)]
    Alloc(AllocCommand),
    /// The whole cluster at a glance: store members, AllocSvrs, route versions.
    Status {
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
enum SectionCommand {
    /// Move SECTION (and the `--count - 1` after it) to AllocSvr `--to`. The old owner stops at
    /// its next heartbeat; the new one serves once the old lease must have run out.
    Move {
        section: u64,
        #[arg(long)]
        to: u64,
        #[arg(long, default_value_t = 1)]
        count: u64,
    },
}

#[derive(Subcommand)]
enum AllocCommand {
    /// Move every section away from an AllocSvr and give it none (`--undo` to stop draining).
    Drain {
        alloc_id: u64,
        #[arg(long)]
        set: Option<u64>,
        #[arg(long)]
        undo: bool,
    },
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
    /// Add a member as a learner (it receives the log, never votes). Start it first with an
    /// empty data dir and `--initial-cluster-state existing`.
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

fn parse_advance(text: &str) -> Result<(u64, u64), String> {
    let (s, v) = text.split_once('=').ok_or("expected SECTION=MAX_SEQ")?;
    Ok((
        s.parse().map_err(|e| format!("section: {e}"))?,
        v.parse().map_err(|e| format!("max_seq: {e}"))?,
    ))
}

fn main() -> ExitCode {
    // Like every Unix tool: a closed stdout (`seqctl store status | head`) ends the process
    // quietly instead of panicking in `println!`.
    // SAFETY: restoring the default disposition of SIGPIPE before any thread starts.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
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
        Command::Next { uids } => seq_command(&config, timeout, &uids, true).await,
        Command::Get { uids } => seq_command(&config, timeout, &uids, false).await,
        Command::Route { json } => route(&config, timeout, json).await,
        Command::Leases { json } => leases(&config, timeout, json).await,
        Command::Status { json } => status(&config, timeout, json).await,
        Command::Section(SectionCommand::Move { section, to, count }) => {
            let Some(set) = config
                .sets
                .iter()
                .find(|s| s.sections(config.section_size).contains(SectionId(section)))
            else {
                bail!("section {section} belongs to no set of the cluster");
            };
            let client = store_client(set)?;
            let request = pb::MoveSectionsRequest {
                section_begin: section,
                section_end: section.saturating_add(count.max(1)),
                to_alloc_id: to,
            };
            let result = client
                .admin(timeout, |mut c, _| {
                    let r = request;
                    async move { c.move_sections(r).await }
                })
                .await;
            match result {
                Ok(r) => {
                    println!(
                        "set {}: sections [{section}, {}) assigned to alloc {to} at lease epoch {}; \
                         served there once the previous owner's lease has run out",
                        set.id,
                        section.saturating_add(count.max(1)),
                        r.lease_epoch
                    );
                    Ok(ExitCode::SUCCESS)
                }
                Err(status) => grpc_failure(status),
            }
        }
        Command::Alloc(AllocCommand::Drain { alloc_id, set, undo }) => {
            let set = pick_set(&config, set)?;
            let client = store_client(set)?;
            let request = pb::DrainAllocRequest { alloc_id, drain: !undo };
            match client
                .admin(timeout, |mut c, _| async move { c.drain_alloc(request).await })
                .await
            {
                Ok(_) => {
                    if undo {
                        println!("set {}: alloc {alloc_id} may receive sections again", set.id);
                    } else {
                        println!(
                            "set {}: alloc {alloc_id} is draining; its sections move away",
                            set.id
                        );
                    }
                    Ok(ExitCode::SUCCESS)
                }
                Err(status) => grpc_failure(status),
            }
        }
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
            let client = store_client(set)?;
            match client.transfer_leader(NodeId(to), timeout).await {
                Ok(()) => {
                    println!(
                        "asked the leader of set {} to transfer leadership to member {to}",
                        set.id
                    );
                    Ok(ExitCode::SUCCESS)
                }
                Err(status) => grpc_failure(status),
            }
        }
        Command::Store(StoreCommand::AddLearner { set, id, addr }) => {
            let set = pick_set(&config, set)?;
            let client = store_client(set)?;
            let result = client.add_learner(NodeId(id), &addr, timeout).await;
            membership_done(set.id, &format!("member {id} at {addr} added as a learner"), result)
        }
        Command::Store(StoreCommand::Promote { set, id }) => {
            let set = pick_set(&config, set)?;
            let client = store_client(set)?;
            let result = client.promote(NodeId(id), timeout).await;
            membership_done(set.id, &format!("member {id} promoted to voter"), result)
        }
        Command::Store(StoreCommand::Remove { set, id }) => {
            let set = pick_set(&config, set)?;
            let client = store_client(set)?;
            let result = client.remove(NodeId(id), timeout).await;
            membership_done(set.id, &format!("member {id} removed"), result)
        }
        Command::Store(StoreCommand::SetLease { set, lease_ms, margin_ms }) => {
            let set = pick_set(&config, set)?;
            let client = store_client(set)?;
            match client.set_lease(lease_ms, margin_ms, timeout).await {
                Ok(r) => {
                    println!(
                        "set {}: lease {} ms, margin {} ms (replicated; every leader uses it)",
                        set.id, r.lease_ms, r.lease_margin_ms
                    );
                    Ok(ExitCode::SUCCESS)
                }
                Err(status) => grpc_failure(status),
            }
        }
    }
}

fn membership_done(
    set: SetId,
    what: &str,
    result: Result<pb::MembershipResponse, tonic::Status>,
) -> anyhow::Result<ExitCode> {
    match result {
        Ok(r) => {
            println!("set {set}: {what} (applied at index {})", r.applied_index);
            for m in &r.members {
                let kind = if m.learner { "learner" } else { "voter" };
                println!(
                    "  {:<4} {:<22} {:<8} match {:>8}  lag {}",
                    m.id, m.addr, kind, m.match_index, m.lag
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(status) => grpc_failure(status),
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
    let rows = store_rows(config, timeout).await;
    let all_answered = rows.iter().all(|r| r["role"] != "unreachable");
    if as_json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        println!(
            "{:<4} {:<4} {:<22} {:<13} {:<8} {:>6} {:>7} {:>9} {:>9} {:>9} {:>6}  VOTERS / LEARNERS",
            "SET",
            "ID",
            "ADDR",
            "ROLE",
            "MEMBER",
            "TERM",
            "LEADER",
            "COMMIT",
            "APPLIED",
            "SNAPSHOT",
            "LAG"
        );
        for r in &rows {
            let cell = |k: &str| r[k].as_u64().map(|v| v.to_string()).unwrap_or_else(|| "-".into());
            let list = |k: &str| {
                r[k].as_array()
                    .map(|v| v.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(","))
            };
            let voters = match (list("voters"), list("learners")) {
                (Some(v), Some(l)) if !l.is_empty() => format!("{v} / {l}"),
                (Some(v), _) => v,
                _ => r["error"].as_str().unwrap_or("").to_string(),
            };
            let mut role = r["role"].as_str().unwrap_or("").to_string();
            if r["vote_blocked"] == true {
                role.push('*');
            }
            println!(
                "{:<4} {:<4} {:<22} {:<13} {:<8} {:>6} {:>7} {:>9} {:>9} {:>9} {:>6}  {}",
                cell("set"),
                cell("id"),
                r["addr"].as_str().unwrap_or(""),
                role,
                r["member"].as_str().unwrap_or("-"),
                cell("term"),
                cell("leader_id"),
                cell("commit_index"),
                cell("applied_index"),
                cell("snapshot_index"),
                cell("lag"),
                voters
            );
        }
        if rows.iter().any(|r| r["vote_blocked"] == true) {
            println!(
                "* vote-blocked: started empty in an existing set; votes only once a membership \
                 change applied from its log made it a voter (add-learner, then promote)"
            );
        }
    }
    Ok(if all_answered { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// The route table of each set, from its store leader (authoritative).
async fn route_tables(
    config: &ClusterConfig,
    timeout: Duration,
) -> Vec<(SetId, Result<pb::RouteTable, tonic::Status>)> {
    let mut out = Vec::new();
    for set in &config.sets {
        let result = match store_client(set) {
            Ok(client) => client
                .admin(timeout, |mut c, _| async move {
                    c.route_table(pb::GetRouteTableRequest {}).await
                })
                .await
                .and_then(|r| {
                    r.route_table.ok_or_else(|| tonic::Status::internal("empty route table"))
                }),
            Err(e) => Err(tonic::Status::invalid_argument(e.to_string())),
        };
        out.push((set.id, result));
    }
    out
}

/// Seeds for the client SDK: the config's AllocSvr list of each set, else the addresses in the
/// set's route table as its store leader knows it.
async fn seeds(config: &ClusterConfig, timeout: Duration) -> Vec<String> {
    let mut seeds: Vec<String> =
        config.sets.iter().flat_map(|s| s.allocs.iter().cloned()).collect();
    let missing: Vec<&SetConfig> = config.sets.iter().filter(|s| s.allocs.is_empty()).collect();
    if !missing.is_empty() {
        for (_, table) in route_tables(config, timeout).await {
            if let Ok(t) = table {
                if let Some(e) = t.entries.first() {
                    seeds.push(e.addr.clone());
                }
            }
        }
    }
    seeds.sort();
    seeds.dedup();
    seeds
}

async fn seq_command(
    config: &ClusterConfig,
    timeout: Duration,
    uids: &[u64],
    allocate: bool,
) -> anyhow::Result<ExitCode> {
    let seeds = seeds(config, timeout).await;
    if seeds.is_empty() {
        bail!("no AllocSvr address known: list `allocs` in the config or start an AllocSvr");
    }
    let client = match SeqClient::connect(&seeds, timeout).await {
        Ok(c) => c,
        Err(status) => return grpc_failure(status),
    };
    for &uid in uids {
        let result = if allocate {
            client.next(uid, timeout).await
        } else {
            client.current(uid, timeout).await
        };
        match result {
            Ok(seq) => println!("{uid} {seq}"),
            Err(status) => return grpc_failure(status),
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn route_json(table: &pb::RouteTable) -> serde_json::Value {
    json!({
        "set": table.set_id, "version": table.version, "uid_begin": table.uid_begin,
        "uid_end": table.uid_end, "section_size": table.section_size,
        "entries": table.entries.iter().map(|e| json!({
            "section_begin": e.section_begin, "section_end": e.section_end,
            "alloc_id": e.alloc_id, "addr": e.addr,
        })).collect::<Vec<_>>(),
    })
}

async fn route(
    config: &ClusterConfig,
    timeout: Duration,
    as_json: bool,
) -> anyhow::Result<ExitCode> {
    let mut ok = true;
    let mut rows = Vec::new();
    for (set, table) in route_tables(config, timeout).await {
        match table {
            Ok(t) => rows.push(route_json(&t)),
            Err(status) => {
                ok = false;
                rows.push(json!({ "set": set.0, "version": null, "entries": [], "error": status.message() }));
            }
        }
    }
    if as_json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        for r in &rows {
            println!("set {} route table v{}", r["set"], r["version"]);
            if let Some(e) = r.get("error") {
                println!("  error: {}", e.as_str().unwrap_or(""));
            }
            println!("  {:>10} {:>10} {:>6}  ADDR", "SECTIONS", "", "ALLOC");
            for e in r["entries"].as_array().into_iter().flatten() {
                println!(
                    "  {:>10} {:>10} {:>6}  {}",
                    text(&e["section_begin"]),
                    text(&e["section_end"]),
                    text(&e["alloc_id"]),
                    text(&e["addr"])
                );
            }
        }
    }
    Ok(if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

async fn leases_json(config: &ClusterConfig, timeout: Duration) -> (bool, Vec<serde_json::Value>) {
    let mut ok = true;
    let mut rows = Vec::new();
    for set in &config.sets {
        let result = match store_client(set) {
            Ok(client) => {
                client
                    .admin(timeout, |mut c, _| async move { c.leases(pb::LeasesRequest {}).await })
                    .await
            }
            Err(e) => Err(tonic::Status::invalid_argument(e.to_string())),
        };
        match result {
            Ok(l) => rows.push(json!({
                "set": set.id.0, "lease_ms": l.lease_ms, "lease_margin_ms": l.lease_margin_ms,
                "route_version": l.route_version,
                "allocs": l.allocs.iter().map(|a| json!({
                    "alloc_id": a.alloc_id, "addr": a.addr, "draining": a.draining,
                    "replaced": a.replaced, "expired": a.expired,
                    "ms_since_grant": a.ms_since_grant, "lease_left_ms": a.lease_left_ms,
                    "n_sections": a.n_sections,
                })).collect::<Vec<_>>(),
                "runs": l.runs.iter().map(|r| json!({
                    "section_begin": r.section_begin, "section_end": r.section_end,
                    "alloc_id": r.alloc_id, "lease_epoch": r.lease_epoch, "settled": r.settled,
                })).collect::<Vec<_>>(),
            })),
            Err(status) => {
                ok = false;
                rows.push(
                    json!({ "set": set.id.0, "error": status.message(), "allocs": [], "runs": [] }),
                );
            }
        }
    }
    (ok, rows)
}

fn print_leases(rows: &[serde_json::Value]) {
    for r in rows {
        println!(
            "set {}: lease {} ms (margin {} ms), route v{}",
            r["set"], r["lease_ms"], r["lease_margin_ms"], r["route_version"]
        );
        if let Some(e) = r.get("error") {
            println!("  error: {}", e.as_str().unwrap_or(""));
            continue;
        }
        println!(
            "  {:>6} {:<22} {:<10} {:>9} {:>12}",
            "ALLOC", "ADDR", "STATE", "SECTIONS", "LEASE LEFT"
        );
        for a in r["allocs"].as_array().into_iter().flatten() {
            let state = if a["replaced"] == true {
                "replaced"
            } else if a["expired"] == true {
                "expired"
            } else if a["draining"] == true {
                "draining"
            } else {
                "live"
            };
            println!(
                "  {:>6} {:<22} {:<10} {:>9} {:>9} ms",
                text(&a["alloc_id"]),
                text(&a["addr"]),
                state,
                text(&a["n_sections"]),
                text(&a["lease_left_ms"])
            );
        }
        println!("  {:>10} {:>10} {:>6} {:>6}  SETTLED", "SECTIONS", "", "ALLOC", "EPOCH");
        for run in r["runs"].as_array().into_iter().flatten() {
            println!(
                "  {:>10} {:>10} {:>6} {:>6}  {}",
                text(&run["section_begin"]),
                text(&run["section_end"]),
                text(&run["alloc_id"]),
                text(&run["lease_epoch"]),
                text(&run["settled"])
            );
        }
    }
}

async fn leases(
    config: &ClusterConfig,
    timeout: Duration,
    as_json: bool,
) -> anyhow::Result<ExitCode> {
    let (ok, rows) = leases_json(config, timeout).await;
    if as_json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        print_leases(&rows);
    }
    Ok(if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

async fn status(
    config: &ClusterConfig,
    timeout: Duration,
    as_json: bool,
) -> anyhow::Result<ExitCode> {
    if as_json {
        let (ok, leases) = leases_json(config, timeout).await;
        let store = store_rows(config, timeout).await;
        let all_up = store.iter().all(|r| r["role"] != "unreachable");
        println!("{}", serde_json::to_string_pretty(&json!({ "store": store, "leases": leases }))?);
        return Ok(if ok && all_up { ExitCode::SUCCESS } else { ExitCode::FAILURE });
    }
    let store_code = store_status(config, timeout, false).await?;
    println!();
    let (ok, rows) = leases_json(config, timeout).await;
    print_leases(&rows);
    Ok(if ok && store_code == ExitCode::SUCCESS { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// Every store member's own status; unreachable members get role "unreachable". Members are
/// the cluster file's plus any the replicated membership names (added later); `member` says
/// what the leader's membership makes of each (voter, learner, or `removed`), with its lag.
async fn store_rows(config: &ClusterConfig, timeout: Duration) -> Vec<serde_json::Value> {
    let mut rows = Vec::new();
    for set in &config.sets {
        let mut queue: Vec<(u64, String)> =
            set.stores.iter().map(|m| (m.id.0, m.addr.clone())).collect();
        let mut asked = std::collections::BTreeSet::new();
        let mut set_rows = Vec::new();
        let mut leader_view: Option<Vec<pb::MemberInfo>> = None;
        while let Some((id, addr)) = queue.pop() {
            if !asked.insert(id) {
                continue;
            }
            let row = match member_status(&addr, timeout).await {
                Ok(s) => {
                    for m in &s.members {
                        if !asked.contains(&m.id) && !m.addr.is_empty() {
                            queue.push((m.id, m.addr.clone()));
                        }
                    }
                    if s.role == "leader" {
                        leader_view = Some(s.members.clone());
                    }
                    json!({
                        "set": set.id.0, "id": id, "addr": addr, "role": s.role, "term": s.term,
                        "leader_id": s.leader_id, "commit_index": s.commit_index,
                        "applied_index": s.applied_index, "first_index": s.first_index,
                        "last_index": s.last_index, "snapshot_index": s.snapshot_index,
                        "voters": s.voters, "learners": s.learners,
                        "section_begin": s.section_begin, "section_end": s.section_end,
                        "vote_blocked": s.vote_blocked,
                        "lease_ms": s.lease_ms, "lease_margin_ms": s.lease_margin_ms,
                        "members": s.members.iter().map(|m| json!({
                            "id": m.id, "addr": m.addr, "learner": m.learner,
                            "match_index": m.match_index, "lag": m.lag,
                        })).collect::<Vec<_>>(),
                    })
                }
                Err(status) => {
                    json!({
                        "set": set.id.0, "id": id, "addr": addr, "role": "unreachable",
                        "term": null, "leader_id": null, "commit_index": null, "applied_index": null,
                        "error": status.message(),
                    })
                }
            };
            set_rows.push(row);
        }
        for row in &mut set_rows {
            let id = row["id"].as_u64().unwrap_or(0);
            if let Some(view) = &leader_view {
                let (member, lag) = match view.iter().find(|m| m.id == id) {
                    Some(m) if m.learner => ("learner", json!(m.lag)),
                    Some(m) => ("voter", json!(m.lag)),
                    None => ("removed", serde_json::Value::Null),
                };
                row["member"] = json!(member);
                row["lag"] = lag;
            }
        }
        set_rows.sort_by_key(|r| r["id"].as_u64().unwrap_or(0));
        rows.extend(set_rows);
    }
    rows
}

/// A JSON value as table text: strings without quotes, null as "-".
fn text(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Null => "-".into(),
        other => other.to_string(),
    }
}
