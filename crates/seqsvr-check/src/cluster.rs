//! The cluster harness shared by the cluster tests and the nemesis runner: starts real
//! `storesvr` and `allocsvr` processes on 127.0.0.1, each with its own ports and data dir, kills,
//! pauses and restarts them by PID, cuts and delays links through proxies, jumps wall clocks,
//! and waits on conditions (never on fixed sleeps). Every process a [`Cluster`] started is
//! killed when it is dropped, even if a test panics; a failed run's data and logs are kept and
//! their tails printed.
//!
//! Store membership (`DESIGN.md` §8): the first start of each member of the cluster file passes
//! `--initial-cluster-state new` (it bootstraps the set), every later start `existing`, so a
//! wiped data dir ([`Cluster::wipe_data_dir`]) comes back as an empty member that must be added
//! again. [`Cluster::new_store_member`] registers a member the file does not list (started with
//! `--addr`); the membership changes themselves go through `StoreClient`, and
//! [`Cluster::set_removed`] tells the harness which members left.
//!
//! Transport security (`DESIGN.md` §10): by default every process serves and dials over mutual
//! TLS, with the certificates of one development PKI per test process ([`test_pki`], made by
//! `seqctl certs init`), and this process's own clients (store clients, the SDK, health checks,
//! `seqctl` run by tests via [`Cluster::seqctl`]) present its `admin` identity.
//! [`ClusterOptions::tls`] false runs the processes with `--insecure` instead.
//!
//! Binaries are found in `SEQSVR_BIN_DIR`, else next to the running executable
//! (`target/<profile>/`); `scripts/test.sh` builds them first.

use crate::proxy::{Delay, Proxy};
use seqsvr_client::seq::SeqClient;
use seqsvr_client::store::{member_status, StoreClient};
use seqsvr_core::config::{
    AllocTuning, ClusterConfig, IdentityEntry, MemberConfig, MemberIdentity, Role, SetConfig,
    StoreTuning, TlsConfig,
};
use seqsvr_core::ids::{NodeId, SectionId, SetId};
use seqsvr_proto::v1 as pb;
use std::collections::{BTreeMap, HashSet};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;
use tokio::time::Instant;

/// Upper bound for any wait in a test: a liveness bound, not a performance threshold.
pub const WAIT_MAX: Duration = Duration::from_secs(60);

/// `target/<profile>/<name>`: where cargo puts the workspace's binaries.
pub fn binary(name: &str) -> PathBuf {
    let dir = match std::env::var_os("SEQSVR_BIN_DIR") {
        Some(d) => PathBuf::from(d),
        None => {
            let exe = std::env::current_exe().expect("executable path");
            let mut dir = exe.parent().expect("executable dir").to_path_buf();
            if dir.file_name().is_some_and(|n| n == "deps") {
                dir.pop(); // test executables live in target/<profile>/deps
            }
            dir
        }
    };
    let path = dir.join(name);
    assert!(
        path.exists(),
        "{} is missing: build the binaries first (scripts/test.sh does: cargo build --release --bins)",
        path.display()
    );
    path
}

/// The harness's PKI covers sets `0..PKI_SETS`, members `1..=PKI_MEMBERS` of each (members
/// added later get the next ids) and `PKI_ALLOCS` AllocSvrs per set.
const PKI_SETS: u64 = 4;
const PKI_MEMBERS: u64 = 12;
const PKI_ALLOCS: usize = 8;
/// A PKI is made for at most a week of runs (its certificates last 30 days).
const PKI_DAYS: u64 = 30;
const PKI_REUSE_DAYS: u64 = 7;

/// The development PKI of this test process (one for the process, since a process has one
/// client identity: [`seqsvr_client::tls::set_process_tls`]). Made once a week by
/// `seqctl certs init` into the system temp dir and reused by every run of that week (a few
/// dozen small files, never a growing pile), moved into place whole so concurrent runs agree.
pub fn test_pki() -> &'static Path {
    static PKI: OnceLock<PathBuf> = OnceLock::new();
    PKI.get_or_init(|| {
        let week = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock after 1970")
            .as_secs()
            / (86_400 * PKI_REUSE_DAYS);
        // SAFETY: getuid has no preconditions and cannot fail.
        let uid = unsafe { libc::getuid() };
        let dir = std::env::temp_dir().join(format!("seqsvr-test-pki-{uid}-{week}"));
        if dir.join("admin.key").exists() {
            return dir;
        }
        let tmp = tempfile::Builder::new()
            .prefix("seqsvr-test-pki-new-")
            .tempdir_in(std::env::temp_dir())
            .expect("temp dir");
        let certs = tmp.path().join("certs");
        let out = Command::new(binary("seqctl"))
            .args(["certs", "init", "--dir"])
            .arg(&certs)
            .args(["--sets", &PKI_SETS.to_string(), "--members", &PKI_MEMBERS.to_string()])
            .args(["--allocs", &PKI_ALLOCS.to_string(), "--days", &PKI_DAYS.to_string()])
            .output()
            .expect("run seqctl certs init");
        assert!(
            out.status.success(),
            "seqctl certs init: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        // Another run may have won the race: then its PKI is the one.
        if std::fs::rename(&certs, &dir).is_err() {
            assert!(dir.join("admin.key").exists(), "no PKI at {}", dir.display());
        }
        dir
    })
}

/// The `[tls]` section for a cluster of sets `0..sets` on [`test_pki`]: the identities
/// `seqctl certs init` made for those sets.
pub fn test_tls_config(sets: u64) -> TlsConfig {
    assert!(sets <= PKI_SETS, "{sets} sets is beyond the test PKI (raise PKI_SETS)");
    let pki = test_pki();
    let path = |name: &str| pki.join(name).display().to_string();
    let mut identities = BTreeMap::new();
    for set in 0..sets {
        for id in 1..=PKI_MEMBERS {
            let peer =
                MemberIdentity { role: Role::Peer, set: Some(SetId(set)), node: Some(NodeId(id)) };
            identities.insert(format!("store-{set}-{id}"), IdentityEntry::Member(peer));
        }
        for i in 1..=PKI_ALLOCS {
            let alloc = MemberIdentity { role: Role::Alloc, set: Some(SetId(set)), node: None };
            identities.insert(format!("alloc-{set}-{i}"), IdentityEntry::Member(alloc));
        }
    }
    identities.insert("admin".into(), IdentityEntry::Role(Role::Admin));
    identities.insert("client".into(), IdentityEntry::Role(Role::Client));
    TlsConfig {
        server_name: "seqsvr".into(),
        client_ca: path("client-bundle.pem"),
        store_ca: path("cluster-ca.pem"),
        peer_ca: path("cluster-ca.pem"),
        max_registrations_per_identity: seqsvr_core::config::DEFAULT_MAX_REGISTRATIONS_PER_IDENTITY,
        identities,
    }
}

/// The [`test_pki`] certificate (file stem = identity) process `key` runs with.
pub fn identity_of(key: ProcKey) -> String {
    let (identity, fits) = match key {
        ProcKey::Store(set, id) => {
            (format!("store-{set}-{id}"), set.0 < PKI_SETS && id.0 <= PKI_MEMBERS)
        }
        ProcKey::Alloc(set, i) => {
            (format!("alloc-{set}-{}", i + 1), set.0 < PKI_SETS && i < PKI_ALLOCS)
        }
    };
    assert!(fits, "{key:?} is beyond the test PKI (raise PKI_SETS/MEMBERS/ALLOCS)");
    identity
}

/// This process's clients present the PKI's `admin` identity from now on.
fn use_admin_identity(tls: &TlsConfig) {
    let pki = test_pki();
    let admin = seqsvr_client::tls::ClientTls::from_files(
        tls,
        pki,
        &pki.join("admin.pem"),
        &pki.join("admin.key"),
    )
    .expect("the test PKI's admin identity");
    seqsvr_client::tls::set_process_tls(admin);
}

/// The id schemes every test cluster serves: each of the six, under its own name, with
/// `uid-generator` on a 2025 epoch (its default one ran out in 2024) and 30 bits of seconds.
/// [`Cluster::start`] routes `rongcloud`'s sessions over the uids of every set.
pub fn test_ids_config() -> seqsvr_core::config::IdsConfig {
    use seqsvr_core::config::{IdSchemeConfig, IdsConfig};
    use seqsvr_core::idscheme::Scheme;
    let plain = IdSchemeConfig::of;
    let mut schemes = BTreeMap::new();
    for scheme in
        [Scheme::Snowflake, Scheme::Weibo, Scheme::UuidV7, Scheme::RongCloud, Scheme::Js53]
    {
        schemes.insert(scheme.name().to_string(), plain(scheme));
    }
    schemes.insert(
        Scheme::UidGenerator.name().to_string(),
        IdSchemeConfig {
            epoch_ms: Some(1_735_689_600_000), // 2025-01-01T00:00:00Z
            time_bits: Some(30),
            worker_bits: Some(20),
            seq_bits: Some(13),
            ..plain(Scheme::UidGenerator)
        },
    );
    IdsConfig { schemes, ..IdsConfig::default() }
}

/// `ids` with every `rongcloud` scheme that leaves its session uid range to the default
/// (`[0, 2^26)`, far beyond a test cluster's uids, which the AllocSvrs would refuse) routing its
/// sessions by uids `[0, uid_end)`: the uids of every set, so sessions spread over all of them.
fn sessions_on_every_set(
    ids: &seqsvr_core::config::IdsConfig,
    uid_end: u64,
) -> seqsvr_core::config::IdsConfig {
    let mut ids = ids.clone();
    for scheme in ids.schemes.values_mut() {
        let unset = scheme.session_uid_begin.is_none() && scheme.session_uid_end.is_none();
        if scheme.scheme == seqsvr_core::idscheme::Scheme::RongCloud && unset {
            scheme.session_uid_begin = Some(0);
            scheme.session_uid_end = Some(uid_end);
        }
    }
    ids
}

/// A free TCP port on 127.0.0.1, never handed out twice by this process.
pub fn free_port() -> u16 {
    static USED: Mutex<Option<HashSet<u16>>> = Mutex::new(None);
    loop {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        let port = listener.local_addr().expect("local addr").port();
        let mut used = USED.lock().unwrap_or_else(|e| e.into_inner());
        if used.get_or_insert_with(HashSet::new).insert(port) {
            return port;
        }
    }
}

/// Polls `check` every 50 ms until it yields `Some`, or panics after `WAIT_MAX` saying `what`.
pub async fn wait_for<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let until = Instant::now() + WAIT_MAX;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(Instant::now() < until, "timed out after {WAIT_MAX:?} waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Like [`wait_for`], but gives up after `limit` with an error instead of panicking (for
/// `seqcheck` runs, where "could not run" must be told apart from "violation").
pub async fn wait_until<T, F, Fut>(what: &str, limit: Duration, mut check: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let until = Instant::now() + limit;
    loop {
        if let Some(v) = check().await {
            return Ok(v);
        }
        anyhow::ensure!(Instant::now() < until, "timed out after {limit:?} waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[derive(Clone, Debug)]
pub struct ClusterOptions {
    pub sets: u64,
    pub members: usize,
    pub allocs_per_set: usize,
    pub section_size: u64,
    /// Sections per set.
    pub n_sections: u64,
    pub tuning: StoreTuning,
    pub alloc: AllocTuning,
    /// Route every AllocSvr → store and store → store link through its own [`Proxy`], so the
    /// nemesis can cut links one by one.
    pub proxied: bool,
    /// Start AllocSvrs under libfaketime (wall clock only; the monotonic clock stays real), so
    /// the nemesis can jump their wall clocks.
    pub faketime: bool,
    /// Start every store member the way `docker-compose.yml` does: always with
    /// `--initial-cluster-state new` and `--created-marker <dir>/set-<S>.created` (one marker per
    /// set, outside the data dirs), so the marker alone tells a lost disk from a new set.
    pub created_marker: bool,
    /// Mutual TLS everywhere (the default, as in production); false: every process runs with
    /// `--insecure` (plaintext, no role checks).
    pub tls: bool,
    /// The `[ids]` section (default: [`test_ids_config`], every scheme).
    pub ids: seqsvr_core::config::IdsConfig,
}

/// Where Debian's `faketime` package puts the preload library.
pub const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

impl Default for ClusterOptions {
    fn default() -> ClusterOptions {
        ClusterOptions {
            sets: 1,
            members: 3,
            allocs_per_set: 0,
            section_size: 100,
            n_sections: 1000,
            tuning: StoreTuning {
                tick_ms: 50,
                election_ticks: 10,
                heartbeat_ticks: 2,
                max_batch_sections: 64,
                compact_log_entries: 10_000,
                request_timeout_ms: 3_000,
                ..StoreTuning::default()
            },
            // Short leases keep hand-over tests quick.
            alloc: AllocTuning {
                lease_ms: 1_500,
                lease_margin_ms: 200,
                heartbeat_ms: 300,
                step: 1_000,
                prefetch_ratio: 0.9,
                max_batch_uids: 1_000,
                request_timeout_ms: 3_000,
                ..AllocTuning::default()
            },
            proxied: false,
            faketime: false,
            created_marker: false,
            tls: true,
            ids: test_ids_config(),
        }
    }
}

/// Which process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ProcKey {
    Store(SetId, NodeId),
    /// The `i`-th AllocSvr of a set (0-based).
    Alloc(SetId, usize),
}

pub struct Proc {
    pub key: ProcKey,
    pub addr: String,
    /// Where the process serves Prometheus metrics (`http://{metrics_addr}/metrics`).
    pub metrics_addr: String,
    pub data_dir: PathBuf,
    pub log: PathBuf,
    /// The cluster config this process reads (its own when proxied: peers via proxies).
    pub config_path: PathBuf,
    /// The file libfaketime reads this process's wall-clock offset from.
    pub faketime_file: PathBuf,
    /// Store members only: the next start passes `--initial-cluster-state new` (the very first
    /// start of a member of the cluster file, which bootstraps the set); every later start,
    /// and every start of a member added later, passes `existing`.
    pub bootstrap: bool,
    /// Store members only: this member is named in the cluster file. A member added later is
    /// not, so it is started with `--addr` (the address the others dial).
    pub in_file: bool,
    /// Store members only: removed from the set's membership (see [`Cluster::set_removed`]):
    /// [`Cluster::store_ids`] and the waits leave it out.
    pub removed: bool,
    child: Option<Child>,
}

/// Sets of StoreSvr members and AllocSvrs on loopback.
pub struct Cluster {
    pub dir: tempfile::TempDir,
    pub config_path: PathBuf,
    pub config: ClusterConfig,
    pub procs: Vec<Proc>,
    /// (from, to) → the proxy carrying that link, when proxied.
    pub links: BTreeMap<(ProcKey, ProcKey), Proxy>,
    faketime: bool,
    /// See [`ClusterOptions::created_marker`].
    created_marker: bool,
}

impl Cluster {
    /// Writes a cluster config with fresh ports and starts every process.
    pub fn start(options: ClusterOptions) -> Cluster {
        let dir = tempfile::Builder::new().prefix("seqsvr-test-").tempdir().expect("temp dir");
        let mut sets = Vec::new();
        let mut procs = Vec::new();
        let span = options.section_size * options.n_sections;
        for set in 0..options.sets {
            let set_id = SetId(set);
            let stores: Vec<MemberConfig> = (1..=options.members as u64)
                .map(|id| MemberConfig {
                    id: NodeId(id),
                    addr: format!("127.0.0.1:{}", free_port()),
                })
                .collect();
            let allocs: Vec<String> =
                (0..options.allocs_per_set).map(|_| format!("127.0.0.1:{}", free_port())).collect();
            for m in &stores {
                let name = format!("store-{set}-{}", m.id);
                procs.push(Proc {
                    key: ProcKey::Store(set_id, m.id),
                    addr: m.addr.clone(),
                    metrics_addr: format!("127.0.0.1:{}", free_port()),
                    data_dir: dir.path().join(&name),
                    log: dir.path().join(format!("{name}.log")),
                    config_path: dir.path().join(format!("{name}.toml")),
                    faketime_file: dir.path().join(format!("{name}.faketime")),
                    bootstrap: true,
                    in_file: true,
                    removed: false,
                    child: None,
                });
            }
            for (i, addr) in allocs.iter().enumerate() {
                let name = format!("alloc-{set}-{i}");
                procs.push(Proc {
                    key: ProcKey::Alloc(set_id, i),
                    addr: addr.clone(),
                    metrics_addr: format!("127.0.0.1:{}", free_port()),
                    data_dir: dir.path().join(&name),
                    log: dir.path().join(format!("{name}.log")),
                    config_path: dir.path().join(format!("{name}.toml")),
                    faketime_file: dir.path().join(format!("{name}.faketime")),
                    bootstrap: false,
                    in_file: false,
                    removed: false,
                    child: None,
                });
            }
            sets.push(SetConfig {
                id: set_id,
                uid_begin: set * span,
                uid_end: (set + 1) * span,
                stores,
                allocs,
            });
        }
        let config = ClusterConfig {
            section_size: options.section_size,
            store: options.tuning.clone(),
            alloc: options.alloc.clone(),
            sets,
            tls: options.tls.then(|| test_tls_config(options.sets)),
            ids: sessions_on_every_set(&options.ids, options.sets * span),
        };
        config.validate().expect("test cluster config is valid");
        match &config.tls {
            Some(tls) => use_admin_identity(tls),
            None => seqsvr_client::tls::use_plaintext(),
        }
        let config_path = dir.path().join("cluster.toml");
        std::fs::write(&config_path, config.to_toml_string()).expect("write cluster.toml");
        // Each process's own view: with proxies, its links to store members go through them.
        let mut links = BTreeMap::new();
        for p in &procs {
            let (set_id, me) = match p.key {
                ProcKey::Store(set, id) => (set, Some(id)),
                ProcKey::Alloc(set, _) => (set, None),
            };
            let mut view = config.clone();
            if options.proxied {
                let set = view.sets.iter_mut().find(|s| s.id == set_id).expect("own set");
                for m in set.stores.iter_mut().filter(|m| Some(m.id) != me) {
                    let proxy = Proxy::start(free_port(), m.addr.clone()).expect("start proxy");
                    m.addr = proxy.listen.to_string();
                    links.insert((p.key, ProcKey::Store(set_id, m.id)), proxy);
                }
            }
            std::fs::write(&p.config_path, view.to_toml_string()).expect("write process config");
            std::fs::write(&p.faketime_file, "+0\n").expect("write faketime file");
        }
        let mut cluster = Cluster {
            dir,
            config_path,
            config,
            procs,
            links,
            faketime: options.faketime,
            created_marker: options.created_marker,
        };
        let keys: Vec<ProcKey> = cluster.procs.iter().map(|p| p.key).collect();
        for key in keys {
            cluster.start_proc(key);
        }
        cluster
    }

    /// The file a set's members write once they serve (see [`ClusterOptions::created_marker`]).
    pub fn created_marker_path(&self, set: SetId) -> PathBuf {
        self.dir.path().join(format!("set-{}.created", set.0))
    }

    pub fn proc(&self, key: ProcKey) -> &Proc {
        self.procs.iter().find(|p| p.key == key).expect("known process")
    }

    fn proc_mut(&mut self, key: ProcKey) -> &mut Proc {
        self.procs.iter_mut().find(|p| p.key == key).expect("known process")
    }

    /// The command line that starts `key`.
    pub fn command(&self, key: ProcKey) -> Command {
        let p = self.proc(key);
        let mut cmd = match key {
            ProcKey::Store(set, id) => {
                let mut c = Command::new(binary("storesvr"));
                c.args(["--set-id", &set.0.to_string(), "--node-id", &id.0.to_string()])
                    .arg("--data-dir")
                    .arg(&p.data_dir)
                    .arg("--initial-cluster-state");
                if self.created_marker {
                    c.arg("new").arg("--created-marker").arg(self.created_marker_path(set));
                } else {
                    c.arg(if p.bootstrap { "new" } else { "existing" });
                }
                if !p.in_file {
                    c.args(["--addr", &p.addr]);
                }
                c
            }
            ProcKey::Alloc(set, _) => {
                let mut c = Command::new(binary("allocsvr"));
                c.args(["--set-id", &set.0.to_string(), "--addr", &p.addr]);
                c
            }
        };
        cmd.arg("--config")
            .arg(&p.config_path)
            .args(["--metrics-addr", &p.metrics_addr])
            .env("RUST_LOG", "info")
            .stdin(Stdio::null());
        if self.config.tls.is_some() {
            let identity = identity_of(key);
            let pki = test_pki();
            cmd.arg("--tls-cert")
                .arg(pki.join(format!("{identity}.pem")))
                .arg("--tls-key")
                .arg(pki.join(format!("{identity}.key")));
        } else {
            cmd.arg("--insecure");
        }
        if std::env::var_os("SEQSVR_BIN_DIR").is_some() {
            // Binaries picked on purpose (e.g. teeth builds for the checker's own tests).
            cmd.env("SEQSVR_TEETH_BUILD_OK", "1");
        }
        if self.faketime && matches!(key, ProcKey::Alloc(..)) {
            cmd.env("LD_PRELOAD", LIBFAKETIME)
                .env("FAKETIME_TIMESTAMP_FILE", &p.faketime_file)
                .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
                .env("FAKETIME_NO_CACHE", "1");
        }
        cmd
    }

    /// Sets a faketime'd process's wall-clock offset (libfaketime syntax: "+2h", "-1d", "+0").
    pub fn set_wall_clock_offset(&self, key: ProcKey, offset: &str) {
        std::fs::write(&self.proc(key).faketime_file, format!("{offset}\n"))
            .expect("write faketime file");
    }

    /// Cuts (or heals) every proxied link from or to `key`; with `only_stores`, links to and
    /// from AllocSvrs are left alone.
    pub fn cut_links_of(&self, key: ProcKey, cut: bool, only_stores: bool) {
        for ((from, to), proxy) in &self.links {
            let touches = *from == key || *to == key;
            let alloc_link = matches!(from, ProcKey::Alloc(..)) || matches!(to, ProcKey::Alloc(..));
            if touches && !(only_stores && alloc_link) {
                proxy.set_cut(cut);
            }
        }
    }

    /// Delays every proxied link `key` dials (an AllocSvr's links to its store members, a
    /// member's to its peers): `forward` its requests, `back` the answers. [`Delay::default`]
    /// (or [`Cluster::heal_all_links`]) undoes it.
    pub fn delay_links_from(&self, key: ProcKey, delay: Delay) {
        for ((from, _), proxy) in &self.links {
            if *from == key {
                proxy.set_delay(delay);
            }
        }
    }

    /// Heals every cut link and removes every delay.
    pub fn heal_all_links(&self) {
        for proxy in self.links.values() {
            proxy.set_cut(false);
            proxy.set_delay(Delay::default());
        }
    }

    pub fn start_proc(&mut self, key: ProcKey) {
        let mut cmd = self.command(key);
        let p = self.proc(key);
        assert!(p.child.is_none(), "{key:?} is already running");
        let log =
            std::fs::OpenOptions::new().create(true).append(true).open(&p.log).expect("open log");
        let child = cmd
            .stdout(log.try_clone().expect("dup log"))
            .stderr(log)
            .spawn()
            .expect("spawn process");
        let p = self.proc_mut(key);
        p.child = Some(child);
        // The set is bootstrapped once: every later start of this member is a returning one.
        p.bootstrap = false;
    }

    /// Deletes the data dir of stopped process `key` (a lost disk): its next [`start_proc`]
    /// starts it empty, with `--initial-cluster-state existing`, so it waits to be added.
    ///
    /// [`start_proc`]: Cluster::start_proc
    pub fn wipe_data_dir(&mut self, key: ProcKey) {
        assert!(!self.is_running_proc(key), "{key:?} must be stopped before its data dir is wiped");
        let p = self.proc_mut(key);
        match std::fs::remove_dir_all(&p.data_dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => panic!("cannot wipe {}: {e}", p.data_dir.display()),
        }
        p.bootstrap = false;
    }

    /// Registers (does not start) a new StoreSvr member of `set` with the next unused node id,
    /// a fresh port, data dir, log and config (the cluster file's contents, links not proxied).
    /// Start it with [`start_proc`] (which passes `--addr` and `--initial-cluster-state
    /// existing`), then add it through the leader (`StoreClient::add_learner`).
    ///
    /// [`start_proc`]: Cluster::start_proc
    pub fn new_store_member(&mut self, set: SetId) -> NodeId {
        let file_max =
            self.config.set(set).expect("set").stores.iter().map(|m| m.id.0).max().unwrap_or(0);
        let known_max = self
            .procs
            .iter()
            .filter_map(|p| match p.key {
                ProcKey::Store(s, id) if s == set => Some(id.0),
                _ => None,
            })
            .max()
            .unwrap_or(0);
        let id = NodeId(file_max.max(known_max) + 1);
        let name = format!("store-{set}-{id}");
        let dir = self.dir.path();
        let p = Proc {
            key: ProcKey::Store(set, id),
            addr: format!("127.0.0.1:{}", free_port()),
            metrics_addr: format!("127.0.0.1:{}", free_port()),
            data_dir: dir.join(&name),
            log: dir.join(format!("{name}.log")),
            config_path: dir.join(format!("{name}.toml")),
            faketime_file: dir.join(format!("{name}.faketime")),
            bootstrap: false,
            in_file: false,
            removed: false,
            child: None,
        };
        std::fs::write(&p.config_path, self.config.to_toml_string()).expect("write config");
        std::fs::write(&p.faketime_file, "+0\n").expect("write faketime file");
        self.procs.push(p);
        id
    }

    /// Records that store member `key` was removed from (`true`) or added back to (`false`)
    /// its set's membership, so [`store_ids`] and the waits leave it out or take it back.
    ///
    /// [`store_ids`]: Cluster::store_ids
    pub fn set_removed(&mut self, key: ProcKey, removed: bool) {
        assert!(matches!(key, ProcKey::Store(..)), "only store members have a membership");
        self.proc_mut(key).removed = removed;
    }

    /// Rewrites the cluster file and every process's own view of it with `change` applied (an
    /// operator editing the file): each process reads it at its next start.
    pub fn edit_config(&mut self, change: impl Fn(&mut ClusterConfig)) {
        let paths = std::iter::once(self.config_path.clone())
            .chain(self.procs.iter().map(|p| p.config_path.clone()));
        for path in paths {
            let text = std::fs::read_to_string(&path).expect("read a cluster file");
            let mut config = ClusterConfig::from_toml_str(&text).expect("a valid cluster file");
            change(&mut config);
            std::fs::write(&path, config.to_toml_string()).expect("write a cluster file");
        }
        change(&mut self.config);
    }

    /// `kill -9` by PID, then reap it.
    pub fn kill9_proc(&mut self, key: ProcKey) {
        if let Some(mut child) = self.proc_mut(key).child.take() {
            // SAFETY: plain kill(2) on a PID this process spawned and has not reaped.
            unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
            let _ = child.wait();
        }
    }

    /// SIGTERM by PID (a graceful stop), then waits for the process to exit, up to `WAIT_MAX`
    /// (then SIGKILL and panic). Returns its exit status.
    pub async fn terminate(&mut self, key: ProcKey) -> std::process::ExitStatus {
        self.sigterm(key);
        self.wait_exit(key).await
    }

    /// Sends SIGTERM to a running process and returns at once (see [`Cluster::wait_exit`]).
    pub fn sigterm(&self, key: ProcKey) {
        let pid = self.proc(key).child.as_ref().expect("running").id() as i32;
        // SAFETY: plain kill(2) on a PID this process spawned and has not reaped.
        unsafe { libc::kill(pid, libc::SIGTERM) };
    }

    /// Waits (bounded) for a process sent SIGTERM to exit, and reaps it.
    pub async fn wait_exit(&mut self, key: ProcKey) -> std::process::ExitStatus {
        let mut child = self.proc_mut(key).child.take().expect("running");
        let deadline = Instant::now() + WAIT_MAX;
        loop {
            if let Some(status) = child.try_wait().expect("wait for child") {
                return status;
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("{key:?} did not exit within {WAIT_MAX:?} of SIGTERM");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The store leader's view of `set`'s AllocSvrs, their leases and the assignment
    /// (`StoreAdmin.Leases`), asked with a 2 s budget.
    pub async fn leases(&self, set: SetId) -> Result<pb::LeasesResponse, tonic::Status> {
        self.store_client_of(set)
            .admin(Duration::from_secs(2), |mut c, _| async move {
                c.leases(pb::LeasesRequest {}).await
            })
            .await
    }

    /// SIGSTOP (`true`) or SIGCONT (`false`) by PID.
    pub fn pause(&self, key: ProcKey, stop: bool) {
        let pid = self.proc(key).child.as_ref().expect("running").id() as i32;
        let sig = if stop { libc::SIGSTOP } else { libc::SIGCONT };
        // SAFETY: plain kill(2) on a PID this process spawned and has not reaped.
        unsafe { libc::kill(pid, sig) };
    }

    pub fn is_running_proc(&self, key: ProcKey) -> bool {
        self.proc(key).child.is_some()
    }

    /// The PID of running process `key` (to read its `/proc/<pid>/status`), if it runs.
    pub fn pid(&self, key: ProcKey) -> Option<u32> {
        self.proc(key).child.as_ref().map(Child::id)
    }

    /// Whether process `key`, started and not stopped by the harness, exited on its own (a
    /// crash): its exit status then, reaped; `None` while it runs (or was never started).
    pub fn exited_on_its_own(&mut self, key: ProcKey) -> Option<std::process::ExitStatus> {
        let child = self.proc_mut(key).child.as_mut()?;
        let status = child.try_wait().ok().flatten()?;
        self.proc_mut(key).child = None;
        Some(status)
    }

    pub fn log_of(&self, key: ProcKey) -> String {
        std::fs::read_to_string(&self.proc(key).log).unwrap_or_default()
    }

    /// The store members of `set` the harness knows (the cluster file's and those added with
    /// [`new_store_member`]), except those marked removed, in id order.
    ///
    /// [`new_store_member`]: Cluster::new_store_member
    pub fn store_ids(&self, set: SetId) -> Vec<NodeId> {
        let mut ids: Vec<NodeId> = self
            .procs
            .iter()
            .filter(|p| !p.removed)
            .filter_map(|p| match p.key {
                ProcKey::Store(s, id) if s == set => Some(id),
                _ => None,
            })
            .collect();
        ids.sort();
        ids
    }

    /// The leader's view of `set`'s replicated membership: `(voters, learners)`, sorted.
    /// Waits for a leader among the running members.
    pub async fn membership(&self, set: SetId) -> (Vec<NodeId>, Vec<NodeId>) {
        let leader = self.wait_set_leader(set).await;
        let s = wait_for(&format!("the status of set {set}'s leader {leader}"), || {
            self.store_status(set, leader)
        })
        .await;
        let mut voters: Vec<NodeId> = s.voters.iter().map(|&v| NodeId(v)).collect();
        let mut learners: Vec<NodeId> = s.learners.iter().map(|&v| NodeId(v)).collect();
        voters.sort();
        learners.sort();
        (voters, learners)
    }

    /// The voters of `set` as its leader sees them.
    pub async fn voters(&self, set: SetId) -> Vec<NodeId> {
        self.membership(set).await.0
    }

    /// Waits until store member `id` of `set` has applied everything its leader had committed
    /// when this was called (a learner that caught up).
    pub async fn wait_caught_up(&self, set: SetId, id: NodeId) {
        let leader = self.wait_set_leader(set).await;
        let commit = wait_for(&format!("the status of set {set}'s leader {leader}"), || {
            self.store_status(set, leader)
        })
        .await
        .commit_index;
        wait_for(&format!("member {id} of set {set} to apply index {commit}"), || async {
            (self.store_status(set, id).await?.applied_index >= commit).then_some(())
        })
        .await
    }

    pub async fn store_status(&self, set: SetId, id: NodeId) -> Option<pb::StoreStatusResponse> {
        let addr = &self.proc(ProcKey::Store(set, id)).addr;
        member_status(addr, Duration::from_secs(1)).await.ok()
    }

    /// Waits until every running member of `set` answers and they agree on one leader.
    pub async fn wait_set_leader(&self, set: SetId) -> NodeId {
        let running: Vec<NodeId> = self
            .store_ids(set)
            .into_iter()
            .filter(|&id| self.is_running_proc(ProcKey::Store(set, id)))
            .collect();
        wait_for(&format!("a leader all running members of set {set} agree on"), || async {
            let mut leaders = HashSet::new();
            let mut leader_roles = 0;
            for &id in &running {
                let s = self.store_status(set, id).await?;
                leaders.insert(s.leader_id);
                if s.role == "leader" {
                    leader_roles += 1;
                }
            }
            let leader = *leaders.iter().next()?;
            (leaders.len() == 1 && leader != 0 && leader_roles == 1).then_some(NodeId(leader))
        })
        .await
    }

    /// A store client of `set` naming every member the harness knows (removed ones last: a
    /// removed member may still answer with a stale leader hint).
    pub fn store_client_of(&self, set: SetId) -> StoreClient {
        let mut members: Vec<(bool, NodeId, String)> = self
            .procs
            .iter()
            .filter_map(|p| match p.key {
                ProcKey::Store(s, id) if s == set => Some((p.removed, id, p.addr.clone())),
                _ => None,
            })
            .collect();
        members.sort();
        let members: Vec<(NodeId, String)> =
            members.into_iter().map(|(_, id, addr)| (id, addr)).collect();
        StoreClient::for_set(set, &members).expect("store client")
    }

    /// `seqctl --config <cluster file>`, with the `admin` identity of [`test_pki`] when the
    /// cluster runs TLS: add the subcommand and run it.
    pub fn seqctl(&self) -> Command {
        let mut c = Command::new(binary("seqctl"));
        c.arg("--config").arg(&self.config_path);
        if self.config.tls.is_some() {
            let pki = test_pki();
            c.arg("--tls-cert").arg(pki.join("admin.pem"));
            c.arg("--tls-key").arg(pki.join("admin.key"));
        }
        c
    }

    /// A store client of `set` that presents the certificate of process `key` instead of the
    /// admin's (an AllocSvr's, to act for its registration); plaintext without TLS.
    pub fn store_client_as(&self, set: SetId, key: ProcKey) -> StoreClient {
        self.store_client_as_identity(set, &identity_of(key))
    }

    /// The [`test_pki`] identity `who` (a certificate's file stem: `client`, `admin`,
    /// `alloc-0-2`, ...) when the cluster runs TLS; `None` over plaintext.
    pub fn client_tls_of(&self, who: &str) -> Option<seqsvr_client::tls::ClientTls> {
        self.config.tls.as_ref().map(|tls| {
            let pki = test_pki();
            seqsvr_client::tls::ClientTls::from_files(
                tls,
                pki,
                &pki.join(format!("{who}.pem")),
                &pki.join(format!("{who}.key")),
            )
            .expect("the test PKI's identity")
        })
    }

    /// [`Cluster::store_client_as`] for any identity of [`test_pki`] (see
    /// [`Cluster::client_tls_of`]).
    pub fn store_client_as_identity(&self, set: SetId, who: &str) -> StoreClient {
        let identity = self.client_tls_of(who);
        let members: Vec<(NodeId, String)> = self
            .procs
            .iter()
            .filter_map(|p| match p.key {
                ProcKey::Store(s, id) if s == set && !p.removed => Some((id, p.addr.clone())),
                _ => None,
            })
            .collect();
        StoreClient::new_as(&members, Some(set), identity).expect("store client")
    }

    /// The AllocSvr of `set` registered at `addr`, if the harness started one there.
    pub fn alloc_at(&self, set: SetId, addr: &str) -> Option<ProcKey> {
        self.procs
            .iter()
            .find(|p| matches!(p.key, ProcKey::Alloc(s, _) if s == set) && p.addr == addr)
            .map(|p| p.key)
    }

    /// A client SDK seeded with the first AllocSvr of each set.
    pub async fn seq_client(&self) -> SeqClient {
        let seeds: Vec<String> =
            self.config.sets.iter().flat_map(|s| s.allocs.first().cloned()).collect();
        SeqClient::connect(&seeds, WAIT_MAX).await.expect("seq client connects")
    }

    /// Waits until every section of every set is assigned, settled and answering `current`.
    pub async fn wait_serving(&self, client: &SeqClient) {
        self.try_wait_serving(client).await.expect("the cluster serves");
    }

    /// Like [`Cluster::wait_serving`], but an error instead of a panic after `WAIT_MAX` (for
    /// `seqcheck` runs, where "could not run" must be told apart from "violation").
    pub async fn try_wait_serving(&self, client: &SeqClient) -> anyhow::Result<()> {
        for set in &self.config.sets {
            let store = self.store_client_of(set.id);
            let sections = set.sections(self.config.section_size);
            let what = format!("set {} to assign and settle all sections", set.id);
            wait_until(&what, WAIT_MAX, || async {
                let leases = store
                    .admin(Duration::from_secs(2), |mut c, _| async move {
                        c.leases(pb::LeasesRequest {}).await
                    })
                    .await
                    .ok()?;
                let covered: u64 = leases
                    .runs
                    .iter()
                    .filter(|r| r.settled)
                    .map(|r| r.section_end - r.section_begin)
                    .sum();
                (covered == sections.len()).then_some(())
            })
            .await?;
            for uid in [set.uid_begin, set.uid_end - 1] {
                client
                    .current(uid, WAIT_MAX)
                    .await
                    .map_err(|s| anyhow::anyhow!("current({uid}) once serving: {s}"))?;
            }
        }
        Ok(())
    }

    // ---- set 0 shorthands, for the store-only tests ----

    pub fn ids(&self) -> Vec<NodeId> {
        self.store_ids(SetId(0))
    }

    pub fn member(&self, id: NodeId) -> &Proc {
        self.proc(ProcKey::Store(SetId(0), id))
    }

    pub fn member_command(&self, id: NodeId) -> Command {
        self.command(ProcKey::Store(SetId(0), id))
    }

    pub fn start_member(&mut self, id: NodeId) {
        self.start_proc(ProcKey::Store(SetId(0), id));
    }

    pub fn kill9(&mut self, id: NodeId) {
        self.kill9_proc(ProcKey::Store(SetId(0), id));
    }

    pub fn is_running(&self, id: NodeId) -> bool {
        self.is_running_proc(ProcKey::Store(SetId(0), id))
    }

    pub fn log_text(&self, id: NodeId) -> String {
        self.log_of(ProcKey::Store(SetId(0), id))
    }

    pub async fn status(&self, id: NodeId) -> Option<pb::StoreStatusResponse> {
        self.store_status(SetId(0), id).await
    }

    pub async fn wait_leader(&self) -> NodeId {
        self.wait_set_leader(SetId(0)).await
    }

    /// Waits until every running member of set 0 has applied at least `index`.
    pub async fn wait_applied(&self, index: u64) {
        let running: Vec<NodeId> =
            self.ids().into_iter().filter(|&id| self.is_running(id)).collect();
        wait_for(&format!("every running member to apply index {index}"), || async {
            for &id in &running {
                if self.status(id).await?.applied_index < index {
                    return None;
                }
            }
            Some(())
        })
        .await
    }

    pub fn store_client(&self) -> StoreClient {
        self.store_client_of(SetId(0))
    }

    /// Member `id`'s own applied values of `sections` (serializable read).
    pub async fn local_values(
        &self,
        id: NodeId,
        sections: &[SectionId],
    ) -> BTreeMap<SectionId, u64> {
        let channel = seqsvr_client::store::channel(&self.member(id).addr).expect("channel");
        let mut client = pb::store_admin_client::StoreAdminClient::new(channel);
        let reply = client
            .local_max_seq(pb::GetMaxSeqRequest {
                sections: sections.iter().map(|s| s.0).collect(),
            })
            .await
            .expect("local read")
            .into_inner();
        reply.sections.iter().map(|s| (SectionId(s.section), s.max_seq)).collect()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let keys: Vec<ProcKey> = self.procs.iter().map(|p| p.key).collect();
        for key in keys {
            if let Some(child) = self.proc(key).child.as_ref() {
                // A paused process must be resumed to die promptly and be reaped.
                // SAFETY: kill(2) on our own unreaped child.
                unsafe { libc::kill(child.id() as i32, libc::SIGCONT) };
            }
            self.kill9_proc(key);
        }
        if std::thread::panicking() {
            // Keep data and logs of a failed test for inspection.
            self.dir.disable_cleanup(true);
            eprintln!("---- test cluster kept at {}", self.dir.path().display());
            for p in &self.procs {
                let log = std::fs::read_to_string(&p.log).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(30).collect();
                eprintln!("---- last lines of {:?} ({}):", p.key, p.log.display());
                for line in tail.iter().rev() {
                    eprintln!("{line}");
                }
            }
        }
    }
}
