//! What every command gets: the flags, the cluster config (read on demand: `health` and
//! `completions` need none), and one deadline for the whole command.

use crate::cli::GlobalArgs;
use crate::error::CtlError;
use seqsvr_client::store::StoreClient;
use seqsvr_core::config::{ClusterConfig, SetConfig};
use seqsvr_core::ids::SetId;
use std::path::PathBuf;
use std::time::Duration;
use tokio::time::Instant;

/// The end of the time one command (or one `watch` refresh) may take: every call gets what is
/// left of it, so N calls in a row cannot add up to N × --timeout-ms.
#[derive(Debug, Clone, Copy)]
pub struct Deadline {
    until: Instant,
    total: Duration,
}

impl Deadline {
    pub fn after(total: Duration) -> Deadline {
        Deadline { until: Instant::now() + total, total }
    }

    /// Time left (zero once passed).
    pub fn left(&self) -> Duration {
        self.until.saturating_duration_since(Instant::now())
    }

    /// The whole budget (--timeout-ms), for messages.
    pub fn total(&self) -> Duration {
        self.total
    }
}

pub struct Ctx {
    pub config_path: PathBuf,
    pub timeout: Duration,
    pub json: bool,
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
}

impl Ctx {
    pub fn new(global: &GlobalArgs) -> Ctx {
        Ctx {
            config_path: global.config.clone(),
            timeout: Duration::from_millis(global.timeout_ms),
            json: global.json,
            tls_cert: global.tls_cert.clone(),
            tls_key: global.tls_key.clone(),
        }
    }

    pub fn deadline(&self) -> Deadline {
        Deadline::after(self.timeout)
    }

    /// The cluster config named by --config / SEQSVR_CONFIG.
    pub fn config(&self) -> Result<ClusterConfig, CtlError> {
        let path = self.config_path.display();
        let text = std::fs::read_to_string(&self.config_path).map_err(|e| {
            CtlError::usage(
                format!("cannot read the cluster config {path}: {e}"),
                "name it with --config FILE or SEQSVR_CONFIG (the local cluster's is \
                 data/local/cluster.toml, written by `scripts/dev-cluster.sh up`)",
            )
        })?;
        let config = ClusterConfig::from_toml_str(&text).map_err(|e| {
            CtlError::usage(
                format!("the cluster config {path} is not valid: {e}"),
                "compare it with config/cluster.toml",
            )
        })?;
        self.use_tls(&config)?;
        Ok(config)
    }

    /// With `[tls]` in the cluster file, every channel from now on presents --tls-cert.
    fn use_tls(&self, config: &ClusterConfig) -> Result<(), CtlError> {
        use seqsvr_tls::{use_cluster_identity, IdentityError};
        let (cert, key) = (self.tls_cert.as_deref(), self.tls_key.as_deref());
        use_cluster_identity(config.tls.as_ref(), &self.config_path, cert, key).map_err(|e| {
            let hint = match e {
                IdentityError::NotAsked(_) => {
                    "drop them, or add the [tls] block `seqctl certs init` printed"
                }
                IdentityError::Missing(_) => "an admin identity for store commands",
                IdentityError::Files(_) => "check --tls-cert/--tls-key and the [tls] paths",
            };
            CtlError::usage(e.to_string(), hint)
        })
    }
}

/// The set `--set` names, or the only one.
pub fn pick_set(config: &ClusterConfig, set: Option<u64>) -> Result<&SetConfig, CtlError> {
    let ids = || config.sets.iter().map(|s| s.id.to_string()).collect::<Vec<_>>().join(", ");
    match set {
        Some(id) => config.set(SetId(id)).ok_or_else(|| {
            CtlError::usage(
                format!("no set {id} in the cluster config"),
                format!("the config has sets {}", ids()),
            )
        }),
        None if config.sets.len() == 1 => Ok(&config.sets[0]),
        None => Err(CtlError::usage(
            format!("the cluster has {} sets", config.sets.len()),
            format!("name one with --set (one of {})", ids()),
        )),
    }
}

/// `ID@ADDR, ...` of a set's store members, for messages.
pub fn members_text(set: &SetConfig) -> String {
    let members: Vec<String> = set.stores.iter().map(|m| format!("{}@{}", m.id, m.addr)).collect();
    format!("set {} StoreSvrs {}", set.id, members.join(", "))
}

/// A client of the set's Raft group (follows the leader hint).
pub fn store_client(set: &SetConfig) -> Result<StoreClient, CtlError> {
    let members: Vec<_> = set.stores.iter().map(|m| (m.id, m.addr.clone())).collect();
    StoreClient::for_set(set.id, &members).map_err(|status| {
        CtlError::usage(
            format!("set {}: bad store member list: {}", set.id, status.message()),
            "fix the set's `stores` in the cluster config",
        )
    })
}
