//! The cluster test harness: starts real `storesvr` and `allocsvr` processes on 127.0.0.1, each
//! with its own ports and data dir, kills, pauses and restarts them by PID, and waits on
//! conditions (never on fixed sleeps). Every process a [`Cluster`] started is killed when it is
//! dropped, even if a test panics; a failed test's data and logs are kept and their tails
//! printed.
//!
//! Binaries are found next to the test executable (`target/<profile>/`); `scripts/test.sh`
//! builds them before running the tests.

use seqsvr_client::seq::SeqClient;
use seqsvr_client::store::{member_status, StoreClient};
use seqsvr_core::config::{AllocTuning, ClusterConfig, MemberConfig, SetConfig, StoreTuning};
use seqsvr_core::ids::{NodeId, SectionId, SetId};
use seqsvr_proto::v1 as pb;
use std::collections::{BTreeMap, HashSet};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;

/// Upper bound for any wait in a test: a liveness bound, not a performance threshold.
pub const WAIT_MAX: Duration = Duration::from_secs(60);

/// `target/<profile>/<name>`: where cargo puts the workspace's binaries.
pub fn binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let profile_dir = exe.parent().and_then(Path::parent).expect("target/<profile>/deps/<test>");
    let path = profile_dir.join(name);
    assert!(
        path.exists(),
        "{} is missing: build the binaries first (scripts/test.sh does: cargo build --release --bins)",
        path.display()
    );
    path
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
}

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
            },
        }
    }
}

/// Which process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ProcKey {
    Store(SetId, NodeId),
    /// The `i`-th AllocSvr of a set (0-based).
    Alloc(SetId, usize),
}

pub struct Proc {
    pub key: ProcKey,
    pub addr: String,
    pub data_dir: PathBuf,
    pub log: PathBuf,
    child: Option<Child>,
}

/// Sets of StoreSvr members and AllocSvrs on loopback.
pub struct Cluster {
    pub dir: tempfile::TempDir,
    pub config_path: PathBuf,
    pub config: ClusterConfig,
    pub procs: Vec<Proc>,
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
                    data_dir: dir.path().join(&name),
                    log: dir.path().join(format!("{name}.log")),
                    child: None,
                });
            }
            for (i, addr) in allocs.iter().enumerate() {
                let name = format!("alloc-{set}-{i}");
                procs.push(Proc {
                    key: ProcKey::Alloc(set_id, i),
                    addr: addr.clone(),
                    data_dir: dir.path().join(&name),
                    log: dir.path().join(format!("{name}.log")),
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
        };
        config.validate().expect("test cluster config is valid");
        let config_path = dir.path().join("cluster.toml");
        std::fs::write(&config_path, config.to_toml_string()).expect("write cluster.toml");
        let mut cluster = Cluster { dir, config_path, config, procs };
        let keys: Vec<ProcKey> = cluster.procs.iter().map(|p| p.key).collect();
        for key in keys {
            cluster.start_proc(key);
        }
        cluster
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
                    .arg(&p.data_dir);
                c
            }
            ProcKey::Alloc(set, _) => {
                let mut c = Command::new(binary("allocsvr"));
                c.args(["--set-id", &set.0.to_string(), "--addr", &p.addr]);
                c
            }
        };
        cmd.arg("--config").arg(&self.config_path).env("RUST_LOG", "info").stdin(Stdio::null());
        cmd
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
        self.proc_mut(key).child = Some(child);
    }

    /// `kill -9` by PID, then reap it.
    pub fn kill9_proc(&mut self, key: ProcKey) {
        if let Some(mut child) = self.proc_mut(key).child.take() {
            // SAFETY: plain kill(2) on a PID this process spawned and has not reaped.
            unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
            let _ = child.wait();
        }
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

    pub fn log_of(&self, key: ProcKey) -> String {
        std::fs::read_to_string(&self.proc(key).log).unwrap_or_default()
    }

    pub fn store_ids(&self, set: SetId) -> Vec<NodeId> {
        self.config.set(set).expect("set").stores.iter().map(|m| m.id).collect()
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

    pub fn store_client_of(&self, set: SetId) -> StoreClient {
        let members: Vec<(NodeId, String)> = self
            .config
            .set(set)
            .expect("set")
            .stores
            .iter()
            .map(|m| (m.id, m.addr.clone()))
            .collect();
        StoreClient::new(&members).expect("store client")
    }

    /// A client SDK seeded with the first AllocSvr of each set.
    pub async fn seq_client(&self) -> SeqClient {
        let seeds: Vec<String> =
            self.config.sets.iter().flat_map(|s| s.allocs.first().cloned()).collect();
        SeqClient::connect(&seeds, WAIT_MAX).await.expect("seq client connects")
    }

    /// Waits until every section of every set is assigned, settled and answering `current`.
    pub async fn wait_serving(&self, client: &SeqClient) {
        for set in &self.config.sets {
            let store = self.store_client_of(set.id);
            let sections = set.sections(self.config.section_size);
            wait_for(&format!("set {} to assign and settle all sections", set.id), || async {
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
            .await;
            for uid in [set.uid_begin, set.uid_end - 1] {
                client.current(uid, WAIT_MAX).await.expect("current once serving");
            }
        }
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

/// A recorded call for the real-time order checks: invoked and completed on one clock.
#[derive(Clone, Copy, Debug)]
pub struct Op {
    pub uid: u64,
    pub invoked: Instant,
    pub completed: Instant,
    pub value: u64,
}

/// Checks I1 on successful operations: per uid, values are distinct, and whenever A completed
/// before B was invoked, `A.value < B.value`. Returns the violations found.
pub fn check_monotonic(ops: &[Op]) -> Vec<String> {
    let mut by_uid: BTreeMap<u64, Vec<Op>> = BTreeMap::new();
    for op in ops {
        by_uid.entry(op.uid).or_default().push(*op);
    }
    let mut violations = Vec::new();
    for (uid, mut list) in by_uid {
        list.sort_by_key(|o| o.invoked);
        let mut seen = HashSet::new();
        for o in &list {
            if !seen.insert(o.value) {
                violations.push(format!("uid {uid}: value {} returned twice", o.value));
            }
        }
        // Sweep by invocation: the largest value among ops completed before this one started.
        let mut by_completion = list.clone();
        by_completion.sort_by_key(|o| o.completed);
        let mut j = 0;
        let mut max_done: Option<Op> = None;
        for b in &list {
            while j < by_completion.len() && by_completion[j].completed < b.invoked {
                if max_done.is_none_or(|m| by_completion[j].value > m.value) {
                    max_done = Some(by_completion[j]);
                }
                j += 1;
            }
            if let Some(a) = max_done {
                if a.value >= b.value {
                    violations.push(format!(
                        "uid {uid}: {} completed before a call that then returned {}",
                        a.value, b.value
                    ));
                }
            }
        }
    }
    violations
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(uid: u64, invoked_ms: u64, completed_ms: u64, value: u64, t0: Instant) -> Op {
        Op {
            uid,
            invoked: t0 + Duration::from_millis(invoked_ms),
            completed: t0 + Duration::from_millis(completed_ms),
            value,
        }
    }

    #[test]
    fn checker_finds_duplicates_and_real_time_regressions_only() {
        let t0 = Instant::now();
        // Valid: sequential increase, and overlapping calls may return in any order.
        let ok =
            [op(1, 0, 10, 5, t0), op(1, 20, 30, 6, t0), op(1, 25, 40, 9, t0), op(1, 26, 41, 7, t0)];
        assert!(check_monotonic(&ok).is_empty());
        let dup = [op(1, 0, 10, 5, t0), op(1, 0, 10, 5, t0)];
        assert_eq!(check_monotonic(&dup).len(), 1);
        let back = [op(1, 0, 10, 5, t0), op(1, 20, 30, 4, t0)];
        assert_eq!(check_monotonic(&back).len(), 1);
        let other_uid = [op(1, 0, 10, 5, t0), op(2, 20, 30, 4, t0)];
        assert!(check_monotonic(&other_uid).is_empty());
    }
}
