//! A StoreSvr's configuration: the shared cluster config file, this member's identity, and
//! per-process overrides, each settable by flag or environment variable.

use anyhow::{bail, Context};
use clap::Parser;
use seqsvr_core::config::{default_listen, AllocTuning, ClusterConfig, StoreTuning};
use seqsvr_core::ids::{NodeId, SetId};
use seqsvr_core::section::SectionRange;
use seqsvr_server::args::ServerArgs;
use std::net::SocketAddr;
use std::path::PathBuf;

#[derive(Debug, Parser)]
#[command(name = "storesvr", version, about = "seqsvr StoreSvr: one member of a set's Raft group")]
#[command(mut_arg("tls_cert", |a| a.help(TLS_CERT_HELP)))]
pub struct Args {
    /// `--config`, `--metrics-addr`, the TLS flags, `--insecure`, `--log-format`.
    #[command(flatten)]
    pub server: ServerArgs,
    /// The set this member belongs to.
    #[arg(long, env = "SEQSVR_SET_ID")]
    pub set_id: u64,
    /// This member's id within its set (as listed in the config).
    #[arg(long, env = "SEQSVR_NODE_ID")]
    pub node_id: u64,
    /// Where this member keeps its RocksDB. Created on first start; never re-initialised.
    #[arg(long, env = "SEQSVR_DATA_DIR")]
    pub data_dir: PathBuf,
    /// Address to bind; defaults to the member's `addr` from the config (0.0.0.0:<port> when that
    /// is a host name).
    #[arg(long, env = "SEQSVR_LISTEN")]
    pub listen: Option<SocketAddr>,
    #[arg(long, env = "SEQSVR_TICK_MS")]
    pub tick_ms: Option<u64>,
    #[arg(long, env = "SEQSVR_ELECTION_TICKS")]
    pub election_ticks: Option<usize>,
    #[arg(long, env = "SEQSVR_HEARTBEAT_TICKS")]
    pub heartbeat_ticks: Option<usize>,
    #[arg(long, env = "SEQSVR_COMPACT_LOG_ENTRIES")]
    pub compact_log_entries: Option<u64>,
    #[arg(long, env = "SEQSVR_MAX_BATCH_SECTIONS")]
    pub max_batch_sections: Option<usize>,
    #[arg(long, env = "SEQSVR_REQUEST_TIMEOUT_MS")]
    pub request_timeout_ms: Option<u64>,
    /// What an EMPTY data dir means (ignored once the dir holds a store). `new`: this member is
    /// one of the set's initial members, being created now: bootstrap with the cluster file's
    /// members as voters (refused if another member reports that the set already exists).
    /// `existing` (the default): the set already exists; start as an empty member that never
    /// votes or campaigns, and wait to be added (`seqctl store add-learner`) and caught up by
    /// snapshot. Like etcd's --initial-cluster-state.
    #[arg(long, env = "SEQSVR_INITIAL_CLUSTER_STATE", value_enum, default_value_t = InitialClusterState::Existing)]
    pub initial_cluster_state: InitialClusterState,
    /// A file that records that this member's set was created (for deployments that start every
    /// member the same way, such as docker-compose). When it exists, `--initial-cluster-state new`
    /// is taken as `existing`: an empty data dir then means a lost disk, not a new set. The leader
    /// writes it once every voter acknowledged an entry past the set's bootstrap. Keep it OUTSIDE the data dir, on
    /// storage that outlives it (e.g. a volume shared by the set's members).
    #[arg(long, env = "SEQSVR_CREATED_MARKER")]
    pub created_marker: Option<PathBuf>,
    /// The address other members and clients dial for this member. Defaults to the member's
    /// `addr` in the cluster file; required for a member the file does not list (one added later).
    #[arg(long, env = "SEQSVR_ADDR")]
    pub addr: Option<String>,
}

/// `--tls-cert`'s help for a StoreSvr member.
const TLS_CERT_HELP: &str =
    "This member's certificate chain (PEM), required when the cluster file has `[tls]`: its \
server identity, and its client identity towards its peers. Re-read when it changes";

/// What an empty data dir means; see `Args::initial_cluster_state`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum InitialClusterState {
    New,
    Existing,
}

/// Everything a member needs, validated.
#[derive(Clone, Debug)]
pub struct NodeConfig {
    pub set_id: SetId,
    pub node_id: NodeId,
    pub data_dir: PathBuf,
    pub listen: SocketAddr,
    /// Where `/metrics` is served; None: not at all.
    pub metrics: Option<SocketAddr>,
    /// The address others dial (the cluster file's, or `--addr`).
    pub addr: String,
    /// The members the cluster file lists (this one included when listed): the initial voters
    /// of a `new` set, and this process's own view of their addresses (tests route them through
    /// proxies). The replicated membership says who the members are now.
    pub members: Vec<(NodeId, String)>,
    pub initial_cluster_state: InitialClusterState,
    /// See `Args::created_marker`; written once this member serves.
    pub created_marker: Option<PathBuf>,
    /// `--initial-cluster-state new` was given but the created marker exists: taken as `existing`.
    pub new_overridden_by_marker: bool,
    pub sections: SectionRange,
    pub uid_begin: u64,
    pub uid_end: u64,
    pub section_size: u64,
    pub tuning: StoreTuning,
    /// Lease length and margin (the `[alloc]` section): the arbiter's arithmetic.
    pub lease: AllocTuning,
    /// Mutual TLS (the cluster file's `[tls]` + --tls-cert/--tls-key); None: plaintext.
    pub tls: Option<seqsvr_tls::TlsSetup>,
    /// Every id scheme → what this set records for it at once (`scheme_records`).
    pub scheme_records: std::collections::BTreeMap<String, seqsvr_core::store::SchemeRecord>,
    /// `ids.reserve_ms + ids.max_ahead_ms + ids.max_clock_skew_ms`: the furthest a time mark
    /// may be reserved ahead of this member's wall clock (a clock further ahead would push the
    /// mark, which every later holder starts above, into the future).
    pub max_reserve_ahead_ms: u64,
}

/// Every id scheme's name → what set `set` records for it as soon as it runs: its fingerprint
/// (`IdSchemeConfig::fingerprint`, what AllocSvrs lease and reserve under) and the worker ids
/// the set leases out (none for `rongcloud`). A set whose record differs (a changed layout,
/// session uid range or `workers_per_set`) refuses the scheme's leases and reservations. Only
/// the layouts' shapes count: a scheme that ran out (or whose epoch is ahead of this clock) must
/// not stop a store, which serves the sequences too; its AllocSvrs refuse its `NextIds`.
pub fn scheme_records(
    cluster: &ClusterConfig,
    set: SetId,
) -> anyhow::Result<std::collections::BTreeMap<String, seqsvr_core::store::SchemeRecord>> {
    let mut records = std::collections::BTreeMap::new();
    for (name, (layout, scheme)) in cluster.ids.load_shapes(&cluster.sets)? {
        let pool = scheme
            .worker_pool(&layout, set)
            .map_err(|e| anyhow::anyhow!("ids.schemes.{name}: {e}"))?;
        let record = seqsvr_core::store::SchemeRecord {
            layout: scheme.fingerprint(&layout),
            pool_begin: pool.start,
            pool_end: pool.end,
        };
        records.insert(name, record);
    }
    Ok(records)
}

impl NodeConfig {
    pub fn from_args(args: &Args) -> anyhow::Result<NodeConfig> {
        let server = &args.server;
        let cluster = server.read_cluster()?;
        let set_id = SetId(args.set_id);
        let node_id = NodeId(args.node_id);
        let Some(set) = cluster.set(set_id) else {
            bail!("set {set_id} is not in {}", server.config.display());
        };
        let addr = match (set.member(node_id), &args.addr) {
            (_, Some(addr)) => addr.clone(),
            (Some(me), None) => me.addr.clone(),
            (None, None) => bail!(
                "set {set_id} in {} does not list member {node_id}: a member added later needs                  --addr HOST:PORT (the address the others dial)",
                server.config.display()
            ),
        };
        if set.member(node_id).is_none() && args.initial_cluster_state == InitialClusterState::New {
            bail!(
                "member {node_id} is not one of set {set_id}'s initial members in {}, so it                  cannot create the set (--initial-cluster-state new); start it with `existing`                  and add it with `seqctl store add-learner`",
                server.config.display()
            );
        }
        // The marker outranks `new`: the set was created before, so an empty data dir is a lost
        // disk and must come back as a non-voting member.
        let marker_exists = match &args.created_marker {
            None => false,
            // An error reading it is not "absent": falling back to `new` is what it guards.
            Some(path) => path.try_exists().with_context(|| {
                format!("cannot tell whether the created marker {} exists", path.display())
            })?,
        };
        let new_overridden_by_marker =
            args.initial_cluster_state == InitialClusterState::New && marker_exists;
        let initial_cluster_state = if new_overridden_by_marker {
            InitialClusterState::Existing
        } else {
            args.initial_cluster_state
        };
        if node_id.0 == 0 {
            bail!("node id 0 is reserved (raft-rs uses it for 'none')");
        }
        let mut tuning = cluster.store.clone();
        macro_rules! override_with {
            ($($field:ident),*) => { $(if let Some(v) = args.$field { tuning.$field = v; })* };
        }
        override_with!(
            tick_ms,
            election_ticks,
            heartbeat_ticks,
            compact_log_entries,
            max_batch_sections,
            request_timeout_ms
        );
        tuning.validate()?;
        let Some(default) = default_listen(&addr) else {
            bail!("member addr {addr:?} is not host:port");
        };
        let listen = args.listen.unwrap_or(default);
        let metrics = seqsvr_server::metrics::metrics_addr(&server.metrics_addr, listen)?;
        let tls = seqsvr_tls::TlsSetup::from_cluster(
            cluster.tls.as_ref(),
            &server.config,
            server.tls_cert.as_deref(),
            server.tls_key.as_deref(),
            seqsvr_tls::ServerKind::StoreSvr { set: set_id },
            server.insecure,
        )?;
        Ok(NodeConfig {
            set_id,
            node_id,
            data_dir: args.data_dir.clone(),
            listen,
            metrics,
            addr,
            members: set.stores.iter().map(|m| (m.id, m.addr.clone())).collect(),
            initial_cluster_state,
            created_marker: args.created_marker.clone(),
            new_overridden_by_marker,
            sections: set.sections(cluster.section_size),
            uid_begin: set.uid_begin,
            uid_end: set.uid_end,
            section_size: cluster.section_size,
            tuning,
            lease: cluster.alloc.clone(),
            tls,
            scheme_records: scheme_records(&cluster, set_id)
                .with_context(|| format!("in {}", server.config.display()))?,
            max_reserve_ahead_ms: cluster
                .ids
                .reserve_ms
                .saturating_add(cluster.ids.max_ahead_ms)
                .saturating_add(cluster.ids.max_clock_skew_ms),
        })
    }
}
