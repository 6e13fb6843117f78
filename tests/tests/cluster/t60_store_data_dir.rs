//! t60: a data dir that is not this member's seqsvr store, or is corrupt, is refused with a clear
//! message: the process exits non-zero and never re-initialises over it.
//!
//! Every refused start is bounded (a storesvr that starts instead of refusing is caught as soon
//! as it answers, and killed), and "never re-initialised" is checked on the whole directory:
//! every entry's name, kind, size and content hash before and after.

use seqsvr_client::store::member_status;
use seqsvr_cluster_tests::{wait_for, Cluster, ClusterOptions, WAIT_MAX};
use seqsvr_core::ids::{NodeId, SectionId};
use std::collections::hash_map::DefaultHasher;
use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::Mutex;
use std::time::Duration;

/// A process this test spawned outside the harness: killed and reaped however the test ends.
struct Spawned(Child);

impl Drop for Spawned {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts member `id` on its current data dir and waits (bounded) for it to exit. Returns
/// whether it exited successfully and its stderr. Panics if it starts serving instead (its
/// admin port answers) or neither exits nor answers within the harness's bound.
async fn run_to_exit(cluster: &Cluster, id: NodeId, attempt: &str) -> (bool, String) {
    let stderr_path = cluster.dir.path().join(format!("t60-{id}-{attempt}.stderr"));
    let stderr = std::fs::File::create(&stderr_path).expect("stderr file");
    let child = cluster
        .member_command(id)
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .expect("run storesvr");
    let child = Mutex::new(Spawned(child));
    let addr = cluster.member(id).addr.clone();
    let exited = wait_for(&format!("storesvr {id} to exit ({attempt})"), || async {
        if let Some(status) = child.lock().unwrap().0.try_wait().expect("try_wait") {
            return Some(Ok(status));
        }
        match member_status(&addr, Duration::from_millis(200)).await {
            Ok(s) => Some(Err(s)),
            Err(_) => None,
        }
    })
    .await;
    let status = match exited {
        Ok(status) => status,
        Err(s) => {
            panic!("storesvr {id} started serving over a refused data dir ({attempt}): {s:?}")
        }
    };
    let text = std::fs::read_to_string(&stderr_path).unwrap_or_default();
    (status.success(), text)
}

/// RocksDB's own lock file and info log, which `DB::open` creates (or rotates) in the directory
/// before it finds out there is no database or a corrupt one: bookkeeping, not data. Every
/// other entry must be left exactly as it was.
fn rocksdb_bookkeeping(rel: &Path) -> bool {
    let name = rel.to_string_lossy();
    name == "LOCK" || name == "LOG" || name.starts_with("LOG.old.")
}

/// Every entry under `dir` but RocksDB's bookkeeping: relative path → (is dir, size, hash).
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, (bool, u64, u64)> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, (bool, u64, u64)>) {
        for entry in std::fs::read_dir(dir).expect("read dir") {
            let entry = entry.expect("dir entry");
            let path = entry.path();
            let rel = path.strip_prefix(root).expect("under root").to_path_buf();
            if rocksdb_bookkeeping(&rel) {
                continue;
            }
            if entry.file_type().expect("file type").is_dir() {
                out.insert(rel, (true, 0, 0));
                walk(root, &path, out);
            } else {
                let bytes = std::fs::read(&path).expect("read file");
                let mut h = DefaultHasher::new();
                bytes.hash(&mut h);
                out.insert(rel, (false, bytes.len() as u64, h.finish()));
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

/// Runs a refused start of `id` and checks its data dir is exactly as before; returns stderr.
/// With `byte_exact` false only the refusal is checked here (the caller checks the contents).
async fn refused_start(cluster: &Cluster, id: NodeId, attempt: &str, byte_exact: bool) -> String {
    let data = cluster.member(id).data_dir.clone();
    let before = snapshot(&data);
    let (ok, stderr) = run_to_exit(cluster, id, attempt).await;
    assert!(!ok, "must refuse to start ({attempt}): {stderr}");
    assert!(stderr.contains("Refusing to start"), "{attempt}: {stderr}");
    if !byte_exact {
        return stderr;
    }
    let after = snapshot(&data);
    let changed: Vec<String> = before
        .keys()
        .chain(after.keys())
        .filter(|k| before.get(*k) != after.get(*k))
        .map(|k| format!("{} {:?} -> {:?}", k.display(), before.get(k), after.get(k)))
        .collect();
    assert!(changed.is_empty(), "{attempt}: the refused data dir was changed: {changed:#?}");
    stderr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refuses_foreign_and_corrupt_data_dirs() {
    let mut cluster = Cluster::start(ClusterOptions::default());
    cluster.wait_leader().await;
    let advanced =
        cluster.store_client().advance(&[(SectionId(7), 100)], WAIT_MAX).await.expect("advance");
    assert_eq!(advanced, vec![(SectionId(7), 100)]);
    let id = NodeId(3);

    // 1. A directory holding something else.
    cluster.kill9(id);
    let data = cluster.member(id).data_dir.clone();
    let moved = data.with_extension("real");
    std::fs::rename(&data, &moved).unwrap();
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(data.join("precious.txt"), "someone's data").unwrap();
    refused_start(&cluster, id, "foreign dir", true).await;
    assert_eq!(std::fs::read_to_string(data.join("precious.txt")).unwrap(), "someone's data");

    // 2. Another member's data dir: a copy of member 2's, which holds section 7 = 100.
    std::fs::remove_dir_all(&data).unwrap();
    let two = NodeId(2);
    let leader = cluster.wait_leader().await;
    let commit = wait_for("the leader's status", || cluster.status(leader)).await.commit_index;
    cluster.wait_applied(commit).await;
    let two_before = wait_for("member 2's status", || cluster.status(two)).await;
    let other = cluster.member(two).data_dir.clone();
    cluster.kill9(two);
    copy_dir(&other, &data);
    let stderr = refused_start(&cluster, id, "another member's dir", false).await;
    assert!(stderr.contains("belongs to set 0 member 2"), "{stderr}");
    // storesvr opens RocksDB before it reads the identity record, and RocksDB's open recovers
    // the WAL (new SST, MANIFEST, CURRENT, OPTIONS), so the files are not byte-identical. What
    // must hold: it is still member 2's store with member 2's data. Member 2, started alone
    // (no leader to catch it up) from the refused copy, comes up with what it held.
    cluster.kill9(NodeId(1));
    std::fs::rename(&other, other.with_extension("orig")).unwrap();
    std::fs::rename(&data, &other).unwrap();
    cluster.start_member(two);
    let two_after =
        wait_for("member 2 to start from the refused copy", || cluster.status(two)).await;
    assert!(
        two_after.applied_index >= two_before.applied_index,
        "member 2 applied {} before, {} from the refused copy",
        two_before.applied_index,
        two_after.applied_index
    );
    let local = cluster.local_values(two, &[SectionId(7)]).await;
    assert_eq!(local.get(&SectionId(7)), Some(&100), "member 2's data, from the refused copy");
    cluster.kill9(two);

    // 3. Its own data dir with a corrupt RocksDB manifest pointer.
    std::fs::rename(&moved, &data).unwrap();
    std::fs::write(data.join("CURRENT"), "garbage\n").unwrap();
    let stderr = refused_start(&cluster, id, "corrupt CURRENT", true).await;
    assert!(stderr.contains("cannot open RocksDB"), "{stderr}");
}

fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}
