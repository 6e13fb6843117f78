//! An AllocSvr's configuration: the shared cluster config file, its set and address, and
//! per-process overrides, each settable by flag or environment variable; and the id schemes it
//! serves ([`IdSetup`], from the file's `[ids]`).

use anyhow::{bail, Context};
use clap::Parser;
use seqsvr_core::config::{default_listen, AllocTuning, ClusterConfig};
use seqsvr_core::ids::{NodeId, SetId};
use seqsvr_core::idscheme::Layout;
use seqsvr_server::args::ServerArgs;
use std::collections::BTreeMap;
use std::net::SocketAddr;

#[derive(Debug, Parser)]
#[command(name = "allocsvr", version, about = "seqsvr AllocSvr: serves per-uid sequence numbers")]
#[command(mut_arg("tls_cert", |a| a.help(TLS_CERT_HELP)))]
pub struct Args {
    /// `--config`, `--metrics-addr`, the TLS flags, `--insecure`, `--log-format`.
    #[command(flatten)]
    pub server: ServerArgs,
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
    /// Where to answer `GET /healthz` and `GET /readyz` in plaintext HTTP **without a client
    /// certificate**, for probes that cannot present one (Kubernetes `httpGet`, a cloud load
    /// balancer): `off` (the default: the probes are answered only on the mutual-TLS port) or
    /// HOST:PORT. Nothing else is served there.
    #[arg(long, env = "SEQSVR_PROBE_ADDR", default_value = "off")]
    pub probe_addr: String,
}

/// `--tls-cert`'s help for an AllocSvr.
const TLS_CERT_HELP: &str =
    "This AllocSvr's certificate chain (PEM), required when the cluster file has `[tls]`: its \
server identity towards clients and its client identity towards the store";

#[derive(Clone, Debug)]
pub struct AllocConfig {
    pub set_id: SetId,
    pub addr: String,
    pub listen: SocketAddr,
    /// Where `/metrics` is served; None: not at all.
    pub metrics: Option<SocketAddr>,
    /// Where the probes are answered without a client certificate (`--probe-addr`); None: only
    /// on the mutual-TLS port.
    pub probes: Option<SocketAddr>,
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
    pub ids: IdSetup,
    /// Where calls for uids this AllocSvr does not own are forwarded (`forward.rs`).
    pub forward: ForwardSetup,
}

/// What forwarding needs of the cluster file: every set's uids and the AllocSvrs it lists for
/// the set (`allocs`, the seeds the hop learns route tables from), and `[ids]` to route
/// `rongcloud` sessions.
#[derive(Clone, Debug, Default)]
pub struct ForwardSetup {
    pub sets: Vec<ForwardSet>,
    pub ids: seqsvr_core::config::IdsConfig,
}

#[derive(Clone, Debug)]
pub struct ForwardSet {
    pub id: SetId,
    pub uids: std::ops::Range<u64>,
    pub allocs: Vec<String>,
}

impl ForwardSetup {
    fn from_cluster(cluster: &ClusterConfig) -> ForwardSetup {
        let sets = cluster
            .sets
            .iter()
            .map(|s| ForwardSet {
                id: s.id,
                uids: s.uid_begin..s.uid_end,
                allocs: s.allocs.clone(),
            })
            .collect();
        ForwardSetup { sets, ids: cluster.ids.clone() }
    }

    /// The set holding `uid`, if any.
    pub fn set_of(&self, uid: u64) -> Option<&ForwardSet> {
        self.sets.iter().find(|s| s.uids.contains(&uid))
    }

    /// Every AllocSvr the cluster file lists, once each.
    pub fn seeds(&self) -> Vec<String> {
        let mut seeds: Vec<String> = self.sets.iter().flat_map(|s| s.allocs.clone()).collect();
        seeds.sort();
        seeds.dedup();
        seeds
    }
}

impl AllocConfig {
    pub fn from_args(args: &Args) -> anyhow::Result<AllocConfig> {
        let server = &args.server;
        let cluster = server.read_cluster()?;
        let set_id = SetId(args.set_id);
        let Some(set) = cluster.set(set_id) else {
            bail!("set {set_id} is not in {}", server.config.display());
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
        if tuning.max_ids_in_flight < cluster.ids.max_count as usize {
            bail!(
                "alloc.max_ids_in_flight ({}) is below ids.max_count ({}): a NextIds call of \
                 ids.max_count ids could never be answered; raise alloc.max_ids_in_flight or \
                 lower ids.max_count in {}",
                tuning.max_ids_in_flight,
                cluster.ids.max_count,
                server.config.display()
            );
        }
        if (tuning.max_ids_in_flight as u64) < 2 * u64::from(cluster.ids.max_count) {
            tracing::warn!(
                max_ids_in_flight = tuning.max_ids_in_flight,
                max_count = cluster.ids.max_count,
                "alloc.max_ids_in_flight is below twice ids.max_count: one NextIds call of \
                 ids.max_count ids can hold more than half of it, and calls of at most 4096 ids \
                 are refused while it waits; raise alloc.max_ids_in_flight to at least {}",
                2 * u64::from(cluster.ids.max_count)
            );
        }
        let Some(default) = default_listen(&args.addr) else {
            bail!("--addr {:?} is not host:port", args.addr)
        };
        let listen = args.listen.unwrap_or(default);
        let metrics = seqsvr_server::metrics::metrics_addr(&server.metrics_addr, listen)?;
        let probes = probe_addr(&args.probe_addr)?;
        if probes.is_some_and(|p| p == listen || Some(p) == metrics) {
            bail!(
                "--probe-addr {} is also the gRPC or the metrics address: give it a port of its own",
                args.probe_addr
            );
        }
        let tls = seqsvr_tls::TlsSetup::from_cluster(
            cluster.tls.as_ref(),
            &server.config,
            server.tls_cert.as_deref(),
            server.tls_key.as_deref(),
            seqsvr_tls::ServerKind::AllocSvr,
            server.insecure,
        )?;
        Ok(AllocConfig {
            set_id,
            addr: args.addr.clone(),
            listen,
            metrics,
            probes,
            uid_begin: set.uid_begin,
            uid_end: set.uid_end,
            section_size: cluster.section_size,
            stores: set.stores.iter().map(|m| (m.id, m.addr.clone())).collect(),
            tuning,
            max_batch_sections: cluster.store.max_batch_sections,
            tls,
            ids: IdSetup::from_cluster(&cluster, set_id, seqsvr_server::clock::unix_ms_now())
                .with_context(|| format!("in {}", server.config.display()))?,
            forward: ForwardSetup::from_cluster(&cluster),
        })
    }
}

/// `--probe-addr`: `off`, or an IP address with a port.
fn probe_addr(flag: &str) -> anyhow::Result<Option<SocketAddr>> {
    if flag == "off" {
        return Ok(None);
    }
    flag.parse().map(Some).with_context(|| {
        format!("--probe-addr {flag:?} is not `off` or an IP address with a port (HOST:PORT)")
    })
}

/// One served scheme: its layout and its limits in the layout's time units.
#[derive(Clone, Debug)]
pub struct SchemeSetup {
    pub layout: Layout,
    /// How far ahead of the clock issued times may run (borrowing) before a call waits.
    pub max_ahead_units: u64,
    /// How far ahead of the clock the high-water mark is reserved in the store.
    pub reserve_units: u64,
    /// What the store records for the scheme and refuses to see change
    /// (`IdSchemeConfig::fingerprint`).
    pub fingerprint: String,
    /// `rongcloud`: the uids its sessions are routed by (`IdSchemeConfig::session_uids`).
    pub session_uids: std::ops::Range<u64>,
}

impl SchemeSetup {
    /// The most ids one worker id (one section, for `rongcloud`) can issue within `left_ms`
    /// from now to a call that may run `ahead_units` ahead of the clock (`max_ahead_units`, or
    /// less for a big call: `ids::clock::ahead_share`): every unit up to that far ahead, and the
    /// units the clock passes meanwhile, each with its whole sequence. A count above it could
    /// only time out.
    pub fn ids_within(&self, left_ms: u64, ahead_units: u64) -> u64 {
        // The clock can cross one unit boundary more than `left_ms / unit` says.
        let passed = left_ms.div_ceil(self.layout.unit().ms().max(1)).saturating_add(1);
        let units = ahead_units.saturating_add(1).saturating_add(passed);
        units.saturating_mul(self.layout.max_sequence().saturating_add(1))
    }
    /// `rongcloud`: the uid session `key` is routed by (`IdSchemeConfig::session_uid`).
    pub fn session_uid(&self, key: u64) -> u64 {
        seqsvr_core::config::session_uid(self.session_uids.clone(), key)
    }
}

/// The id schemes of the cluster config, loaded at start.
#[derive(Clone, Debug, Default)]
pub struct IdSetup {
    pub schemes: BTreeMap<String, SchemeSetup>,
    pub max_count: u32,
    /// The wall clock the id issuers read.
    pub clock: WallClock,
}

/// The wall clock the id issuers read, in Unix ms: the system's; in unit tests one that stands
/// still until the test moves it (so a test can tell "waits for the clock" from "answered"
/// without timing anything).
#[derive(Clone, Debug, Default)]
pub struct WallClock {
    #[cfg(test)]
    fixed: Option<std::sync::Arc<std::sync::atomic::AtomicU64>>,
}

impl WallClock {
    /// Now, in Unix ms.
    pub fn now_ms(&self) -> u64 {
        #[cfg(test)]
        if let Some(ms) = &self.fixed {
            return ms.load(std::sync::atomic::Ordering::Acquire);
        }
        seqsvr_server::clock::unix_ms_now()
    }
}

#[cfg(test)]
impl WallClock {
    /// A clock that reads `ms` until [`WallClock::set`] moves it (every clone with it).
    pub(crate) fn fixed(ms: u64) -> WallClock {
        WallClock { fixed: Some(std::sync::Arc::new(ms.into())) }
    }

    pub(crate) fn set(&self, ms: u64) {
        let fixed = self.fixed.as_ref().expect("a fixed clock");
        fixed.store(ms, std::sync::atomic::Ordering::Release);
    }
}

impl IdSetup {
    /// Loads `[ids]` for set `set` (a layout that cannot issue at `now_ms` is logged; its `NextIds` is refused).
    pub fn from_cluster(
        cluster: &ClusterConfig,
        set: SetId,
        now_ms: u64,
    ) -> anyhow::Result<IdSetup> {
        let mut schemes = BTreeMap::new();
        // Shapes only: a scheme that ran out (or whose epoch is ahead of this clock) must not
        // stop the AllocSvr, which serves the sequences too; its NextIds is refused instead.
        for (name, (layout, scheme)) in cluster.ids.load_shapes(&cluster.sets)? {
            if let Err(e) = layout.usable_at(now_ms) {
                tracing::error!(scheme = %name, error = %e,
                    "id scheme cannot issue ids at this clock: its NextIds is refused");
            }
            scheme
                .worker_pool(&layout, set)
                .map_err(|e| anyhow::anyhow!("ids.schemes.{name}: {e}"))?;
            let unit = layout.unit().ms();
            let max_ahead_units = cluster.ids.max_ahead_ms / unit;
            let reserve_units = cluster.ids.reserve_ms.div_ceil(unit).max(max_ahead_units + 1);
            tracing::info!(scheme = %name, layout = %layout.scheme(), range = %layout.describe_range(),
                "id scheme loaded");
            let fingerprint = scheme.fingerprint(&layout);
            let session_uids = scheme.session_uids();
            schemes.insert(
                name,
                SchemeSetup { layout, max_ahead_units, reserve_units, fingerprint, session_uids },
            );
        }
        Ok(IdSetup { schemes, max_count: cluster.ids.max_count, clock: WallClock::default() })
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
            probes: None,
            uid_begin: 0,
            uid_end: 100,
            section_size: 10,
            stores: vec![(NodeId(1), "127.0.0.1:1".into())],
            tuning: AllocTuning::default(),
            max_batch_sections: 100,
            tls: None,
            ids: Default::default(),
            forward: Default::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use seqsvr_core::idscheme::{LayoutSpec, Scheme};

    /// The count a call may ask for: whole sequences of every unit it can reach before its
    /// deadline (uid-generator's 8,192 per second: 40,960 in 2 s with 2 s ahead; snowflake's
    /// 4,096 per ms: millions).
    #[test]
    fn a_count_no_worker_id_can_issue_in_time_is_known_up_front() {
        let setup = |spec: LayoutSpec| {
            let layout = spec.load(1_796_000_000_000).unwrap();
            let max_ahead_units = 2_000 / layout.unit().ms();
            SchemeSetup {
                fingerprint: layout.fingerprint(),
                layout,
                max_ahead_units,
                reserve_units: max_ahead_units + 1,
                session_uids: 0..1,
            }
        };
        let uid_generator = setup(LayoutSpec {
            epoch_ms: Some(1_735_689_600_000),
            time_bits: Some(30),
            worker_bits: Some(20),
            seq_bits: Some(13),
            ..LayoutSpec::of(Scheme::UidGenerator)
        });
        let ahead = uid_generator.max_ahead_units;
        assert_eq!(uid_generator.ids_within(2_000, ahead), (2 + 1 + 2 + 1) * 8_192);
        assert_eq!(uid_generator.ids_within(2_001, ahead), (2 + 1 + 3 + 1) * 8_192);
        assert_eq!(uid_generator.ids_within(0, ahead), (3 + 1) * 8_192);
        assert_eq!(uid_generator.ids_within(2_000, 1), (1 + 1 + 2 + 1) * 8_192, "a big call");
        let snowflake = setup(LayoutSpec::of(Scheme::Snowflake));
        let ahead = snowflake.max_ahead_units;
        assert_eq!(snowflake.ids_within(2_000, ahead), (2_000 + 1 + 2_000 + 1) * 4_096);
    }
}
