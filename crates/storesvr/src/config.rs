//! A StoreSvr's configuration: the shared cluster config file, this member's identity, and
//! per-process overrides, each settable by flag or environment variable.

use anyhow::{bail, Context};
use clap::Parser;
use seqsvr_core::config::{default_listen, AllocTuning, ClusterConfig, StoreTuning};
use seqsvr_core::ids::{NodeId, SetId};
use seqsvr_core::section::SectionRange;
use std::net::SocketAddr;
use std::path::PathBuf;

#[derive(Debug, Parser)]
#[command(name = "storesvr", version, about = "seqsvr StoreSvr: one member of a set's Raft group")]
pub struct Args {
    /// The cluster config (TOML) shared by every process of the cluster.
    #[arg(long, env = "SEQSVR_CONFIG")]
    pub config: PathBuf,
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
    /// Log format: `text` or `json`. Filter with RUST_LOG (default `info`).
    #[arg(long, env = "SEQSVR_LOG_FORMAT", default_value = "text")]
    pub log_format: String,
}

/// Everything a member needs, validated.
#[derive(Clone, Debug)]
pub struct NodeConfig {
    pub set_id: SetId,
    pub node_id: NodeId,
    pub data_dir: PathBuf,
    pub listen: SocketAddr,
    /// The address others dial, from the cluster config.
    pub addr: String,
    pub members: Vec<(NodeId, String)>,
    pub sections: SectionRange,
    pub uid_begin: u64,
    pub uid_end: u64,
    pub section_size: u64,
    pub tuning: StoreTuning,
    /// Lease length and margin (the `[alloc]` section): the arbiter's arithmetic.
    pub lease: AllocTuning,
}

impl NodeConfig {
    pub fn from_args(args: &Args) -> anyhow::Result<NodeConfig> {
        let text = std::fs::read_to_string(&args.config)
            .with_context(|| format!("cannot read cluster config {}", args.config.display()))?;
        let cluster = ClusterConfig::from_toml_str(&text)
            .with_context(|| format!("in {}", args.config.display()))?;
        let set_id = SetId(args.set_id);
        let node_id = NodeId(args.node_id);
        let Some(set) = cluster.set(set_id) else {
            bail!("set {set_id} is not in {}", args.config.display());
        };
        let Some(me) = set.member(node_id) else {
            bail!("set {set_id} in {} has no member {node_id}", args.config.display());
        };
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
        let Some(default) = default_listen(&me.addr) else {
            bail!("member addr {:?} is not host:port", me.addr);
        };
        let listen = args.listen.unwrap_or(default);
        Ok(NodeConfig {
            set_id,
            node_id,
            data_dir: args.data_dir.clone(),
            listen,
            addr: me.addr.clone(),
            members: set.stores.iter().map(|m| (m.id, m.addr.clone())).collect(),
            sections: set.sections(cluster.section_size),
            uid_begin: set.uid_begin,
            uid_end: set.uid_end,
            section_size: cluster.section_size,
            tuning,
            lease: cluster.alloc.clone(),
        })
    }
}
