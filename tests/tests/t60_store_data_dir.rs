//! t60: a data dir that is not this member's seqsvr store, or is corrupt, is refused with a clear
//! message: the process exits non-zero and never re-initialises over it.

use seqsvr_cluster_tests::{Cluster, ClusterOptions};
use seqsvr_core::ids::NodeId;

fn run_to_exit(cluster: &Cluster, id: NodeId) -> (bool, String) {
    let out = cluster.member_command(id).output().expect("run storesvr");
    (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refuses_foreign_and_corrupt_data_dirs() {
    let mut cluster = Cluster::start(ClusterOptions::default());
    cluster.wait_leader().await;
    let id = NodeId(3);

    // 1. A directory holding something else.
    cluster.kill9(id);
    let data = cluster.member(id).data_dir.clone();
    let moved = data.with_extension("real");
    std::fs::rename(&data, &moved).unwrap();
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(data.join("precious.txt"), "someone's data").unwrap();
    let (ok, stderr) = run_to_exit(&cluster, id);
    assert!(!ok, "must refuse to start");
    assert!(stderr.contains("Refusing to start"), "{stderr}");
    assert_eq!(std::fs::read_to_string(data.join("precious.txt")).unwrap(), "someone's data");

    // 2. Another member's data dir.
    std::fs::remove_dir_all(&data).unwrap();
    let other = cluster.member(NodeId(2)).data_dir.clone();
    cluster.kill9(NodeId(2));
    copy_dir(&other, &data);
    let (ok, stderr) = run_to_exit(&cluster, id);
    assert!(!ok);
    assert!(stderr.contains("belongs to set 0 member 2"), "{stderr}");

    // 3. Its own data dir with a corrupt RocksDB manifest pointer.
    std::fs::remove_dir_all(&data).unwrap();
    std::fs::rename(&moved, &data).unwrap();
    std::fs::write(data.join("CURRENT"), "garbage\n").unwrap();
    let (ok, stderr) = run_to_exit(&cluster, id);
    assert!(!ok);
    assert!(stderr.contains("cannot open RocksDB"), "{stderr}");
    assert!(stderr.contains("Refusing to start"), "{stderr}");
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
