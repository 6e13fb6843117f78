//! An AllocSvr's configuration: the shared cluster config file, its set and address, and
//! per-process overrides, each settable by flag or environment variable.

use anyhow::{bail, Context};
use clap::Parser;
use seqsvr_core::config::{default_listen, AllocTuning, ClusterConfig};
use seqsvr_core::ids::{NodeId, SetId};
use std::net::SocketAddr;
use std::path::PathBuf;

#[derive(Debug, Parser)]
#[command(name = "allocsvr", version, about = "seqsvr AllocSvr: serves per-uid sequence numbers")]
pub struct Args {
    /// The cluster config (TOML) shared by every process of the cluster.
    #[arg(long, env = "SEQSVR_CONFIG")]
    pub config: PathBuf,
    /// The set this AllocSvr serves.
    #[arg(long, env = "SEQSVR_SET_ID")]
    pub set_id: u64,
    /// The address clients dial (host:port); registered with the store and published in the
    /// route table.
    #[arg(long, env = "SEQSVR_ADDR")]
    pub addr: String,
    /// Address to bind; defaults to `--addr` (0.0.0.0:<port> when that is a host name).
    #[arg(long, env = "SEQSVR_LISTEN")]
    pub listen: Option<SocketAddr>,
    /// Override `alloc.step`.
    #[arg(long, env = "SEQSVR_STEP")]
    pub step: Option<u64>,
    /// Override `alloc.prefetch_ratio`.
    #[arg(long, env = "SEQSVR_PREFETCH_RATIO")]
    pub prefetch_ratio: Option<f64>,
    /// Override `alloc.request_timeout_ms`.
    #[arg(long, env = "SEQSVR_REQUEST_TIMEOUT_MS")]
    pub request_timeout_ms: Option<u64>,
    /// Where to serve Prometheus metrics (`GET /metrics`): `auto` (the listen address with its
    /// port + 10000), `off`, or HOST:PORT.
    #[arg(long, env = "SEQSVR_METRICS_ADDR", default_value = "auto")]
    pub metrics_addr: String,
    /// This AllocSvr's certificate chain (PEM), required when the cluster file has `[tls]`: its
    /// server identity towards clients and its client identity towards the store.
    #[arg(long, env = "SEQSVR_TLS_CERT")]
    pub tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM).
    #[arg(long, env = "SEQSVR_TLS_KEY")]
    pub tls_key: Option<PathBuf>,
    /// Serve plaintext, with no role checks, when the cluster file has no `[tls]` section:
    /// anyone who reaches the port can do anything. Without it (and without `[tls]`) the
    /// server refuses to start. Logged at start and reported as `seqsvr_insecure` 1.
    #[arg(long, env = "SEQSVR_INSECURE")]
    pub insecure: bool,
    /// Log format: `text` or `json`. Filter with RUST_LOG (default `info`).
    #[arg(long, env = "SEQSVR_LOG_FORMAT", default_value = "text")]
    pub log_format: String,
}

#[derive(Clone, Debug)]
pub struct AllocConfig {
    pub set_id: SetId,
    pub addr: String,
    pub listen: SocketAddr,
    /// Where `/metrics` is served; None: not at all.
    pub metrics: Option<SocketAddr>,
    pub uid_begin: u64,
    pub uid_end: u64,
    pub section_size: u64,
    pub stores: Vec<(NodeId, String)>,
    pub tuning: AllocTuning,
    /// The store's limit on sections per advance.
    pub max_batch_sections: usize,
    /// Mutual TLS (the cluster file's `[tls]` + --tls-cert/--tls-key); None: plaintext.
    pub tls: Option<seqsvr_tls::TlsSetup>,
    /// The id schemes served (`[ids]`), loaded at start.
    pub ids: crate::ids::IdSetup,
}

impl AllocConfig {
    pub fn from_args(args: &Args) -> anyhow::Result<AllocConfig> {
        let text = std::fs::read_to_string(&args.config)
            .with_context(|| format!("cannot read cluster config {}", args.config.display()))?;
        let cluster = ClusterConfig::from_toml_str(&text)
            .with_context(|| format!("in {}", args.config.display()))?;
        let set_id = SetId(args.set_id);
        let Some(set) = cluster.set(set_id) else {
            bail!("set {set_id} is not in {}", args.config.display());
        };
        let mut tuning = cluster.alloc.clone();
        if let Some(v) = args.step {
            tuning.step = v;
        }
        if let Some(v) = args.prefetch_ratio {
            tuning.prefetch_ratio = v;
        }
        if let Some(v) = args.request_timeout_ms {
            tuning.request_timeout_ms = v;
        }
        tuning.validate()?;
        let Some(default) = default_listen(&args.addr) else {
            bail!("--addr {:?} is not host:port", args.addr)
        };
        let listen = args.listen.unwrap_or(default);
        let metrics = seqsvr_server::metrics::metrics_addr(&args.metrics_addr, listen)?;
        let tls = seqsvr_tls::TlsSetup::from_cluster(
            cluster.tls.as_ref(),
            &args.config,
            args.tls_cert.as_deref(),
            args.tls_key.as_deref(),
            seqsvr_tls::ServerKind::AllocSvr,
            args.insecure,
        )?;
        Ok(AllocConfig {
            set_id,
            addr: args.addr.clone(),
            listen,
            metrics,
            uid_begin: set.uid_begin,
            uid_end: set.uid_end,
            section_size: cluster.section_size,
            stores: set.stores.iter().map(|m| (m.id, m.addr.clone())).collect(),
            tuning,
            max_batch_sections: cluster.store.max_batch_sections,
            tls,
            ids: crate::ids::IdSetup::from_cluster(
                &cluster,
                set_id,
                seqsvr_server::clock::unix_ms_now(),
            )
            .with_context(|| format!("in {}", args.config.display()))?,
        })
    }
}

#[cfg(test)]
impl AllocConfig {
    /// Set 1, uids [0, 100) in sections of 10, one store member at an address nobody serves:
    /// for unit tests that never reach the store.
    pub(crate) fn for_tests() -> AllocConfig {
        AllocConfig {
            set_id: SetId(1),
            addr: "127.0.0.1:1".into(),
            listen: "127.0.0.1:1".parse().expect("an address"),
            metrics: None,
            uid_begin: 0,
            uid_end: 100,
            section_size: 10,
            stores: vec![(NodeId(1), "127.0.0.1:1".into())],
            tuning: AllocTuning::default(),
            max_batch_sections: 100,
            tls: None,
            ids: Default::default(),
        }
    }
}
