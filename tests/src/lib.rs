//! The cluster test harness: starts real `storesvr` processes on 127.0.0.1, each with its own
//! ports and data dir, kills and restarts them by PID, and waits on conditions (never on fixed
//! sleeps). Every process a [`Cluster`] started is killed when it is dropped, even if a test
//! panics.
//!
//! Binaries are found next to the test executable (`target/<profile>/`); `scripts/test.sh`
//! builds them before running the tests.

use seqsvr_client::store::{member_status, StoreClient};
use seqsvr_core::config::{ClusterConfig, MemberConfig, SetConfig, StoreTuning};
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
    pub members: usize,
    pub section_size: u64,
    pub n_sections: u64,
    pub tuning: StoreTuning,
}

impl Default for ClusterOptions {
    fn default() -> ClusterOptions {
        ClusterOptions {
            members: 3,
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
        }
    }
}

pub struct Member {
    pub id: NodeId,
    pub addr: String,
    pub data_dir: PathBuf,
    pub log: PathBuf,
    child: Option<Child>,
}

impl Member {
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }
}

/// One set of StoreSvr members on loopback.
pub struct Cluster {
    pub dir: tempfile::TempDir,
    pub config_path: PathBuf,
    pub config: ClusterConfig,
    pub members: Vec<Member>,
}

impl Cluster {
    /// Writes a cluster config with fresh ports and starts every member.
    pub fn start(options: ClusterOptions) -> Cluster {
        let dir = tempfile::Builder::new().prefix("seqsvr-test-").tempdir().expect("temp dir");
        let stores: Vec<MemberConfig> = (1..=options.members as u64)
            .map(|id| MemberConfig { id: NodeId(id), addr: format!("127.0.0.1:{}", free_port()) })
            .collect();
        let config = ClusterConfig {
            section_size: options.section_size,
            store: options.tuning.clone(),
            sets: vec![SetConfig {
                id: SetId(0),
                uid_begin: 0,
                uid_end: options.section_size * options.n_sections,
                stores: stores.clone(),
            }],
        };
        config.validate().expect("test cluster config is valid");
        let config_path = dir.path().join("cluster.toml");
        std::fs::write(&config_path, config.to_toml_string()).expect("write cluster.toml");
        let members = stores
            .iter()
            .map(|m| Member {
                id: m.id,
                addr: m.addr.clone(),
                data_dir: dir.path().join(format!("store-{}", m.id)),
                log: dir.path().join(format!("store-{}.log", m.id)),
                child: None,
            })
            .collect();
        let mut cluster = Cluster { dir, config_path, config, members };
        for id in cluster.ids() {
            cluster.start_member(id);
        }
        cluster
    }

    pub fn ids(&self) -> Vec<NodeId> {
        self.members.iter().map(|m| m.id).collect()
    }

    pub fn member(&self, id: NodeId) -> &Member {
        self.members.iter().find(|m| m.id == id).expect("member id")
    }

    fn member_mut(&mut self, id: NodeId) -> &mut Member {
        self.members.iter_mut().find(|m| m.id == id).expect("member id")
    }

    /// The command line that starts member `id` (also used to start it with extra flags).
    pub fn member_command(&self, id: NodeId) -> Command {
        let m = self.member(id);
        let mut cmd = Command::new(binary("storesvr"));
        cmd.arg("--config")
            .arg(&self.config_path)
            .args(["--set-id", "0", "--node-id", &id.0.to_string()])
            .arg("--data-dir")
            .arg(&m.data_dir)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null());
        cmd
    }

    pub fn start_member(&mut self, id: NodeId) {
        let mut cmd = self.member_command(id);
        let m = self.member(id);
        assert!(m.child.is_none(), "member {id} is already running");
        let log =
            std::fs::OpenOptions::new().create(true).append(true).open(&m.log).expect("open log");
        let child = cmd
            .stdout(log.try_clone().expect("dup log"))
            .stderr(log)
            .spawn()
            .expect("spawn storesvr");
        self.member_mut(id).child = Some(child);
    }

    /// `kill -9` by PID, then reap it.
    pub fn kill9(&mut self, id: NodeId) {
        if let Some(mut child) = self.member_mut(id).child.take() {
            // SAFETY: plain kill(2) on a PID this process spawned and has not reaped.
            unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
            let _ = child.wait();
        }
    }

    pub fn is_running(&self, id: NodeId) -> bool {
        self.member(id).child.is_some()
    }

    pub fn log_text(&self, id: NodeId) -> String {
        std::fs::read_to_string(&self.member(id).log).unwrap_or_default()
    }

    pub async fn status(&self, id: NodeId) -> Option<pb::StoreStatusResponse> {
        member_status(&self.member(id).addr, Duration::from_secs(1)).await.ok()
    }

    /// Waits until every running member answers and they agree on one leader among them.
    pub async fn wait_leader(&self) -> NodeId {
        let running: Vec<NodeId> =
            self.ids().into_iter().filter(|&id| self.is_running(id)).collect();
        wait_for("a leader every running member agrees on", || async {
            let mut leaders = HashSet::new();
            let mut leader_roles = 0;
            for &id in &running {
                let s = self.status(id).await?;
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

    /// Waits until every running member has applied at least `index`.
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
        let members: Vec<(NodeId, String)> =
            self.members.iter().map(|m| (m.id, m.addr.clone())).collect();
        StoreClient::new(&members).expect("store client")
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
        for id in self.ids() {
            self.kill9(id);
        }
        if std::thread::panicking() {
            // Keep data and logs of a failed test for inspection.
            self.dir.disable_cleanup(true);
            eprintln!("---- test cluster kept at {}", self.dir.path().display());
            for m in &self.members {
                let log = std::fs::read_to_string(&m.log).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(40).collect();
                eprintln!("---- last lines of member {} log ({}):", m.id, m.log.display());
                for line in tail.iter().rev() {
                    eprintln!("{line}");
                }
            }
        }
    }
}
