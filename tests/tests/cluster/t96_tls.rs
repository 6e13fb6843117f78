//! t96: a set run with mutual TLS, as `seqctl certs init` sets it up (issue 12, first step).
//!
//! Three StoreSvrs and an AllocSvr with `[tls]` in the cluster file and their own certificates:
//! Raft between the members, the AllocSvr's registration and advances, and clients all go over
//! mutual TLS. Then the attacks: an application certificate cannot reach a StoreSvr at all
//! (another CA), an `alloc` certificate may not call `StoreAdmin`, a member certificate of
//! another set may not send Raft messages, nor one of this set as another member (a forged
//! higher-term heartbeat: the receiver's term stays), another AllocSvr's certificate (or an admin's) may
//! not heartbeat for or release the running AllocSvr's registration, a plaintext connection gets
//! nothing — and nothing changed, and every member is still up.
//!
//! Processes are started here (not by the plaintext harness); binaries as the harness finds them.

use seqsvr_cluster_tests::{binary, free_port};
use seqsvr_proto::v1 as pb;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};
use tonic::Code;

/// Children killed when the test ends, however it ends.
struct Procs(Vec<(String, Child)>);

impl Drop for Procs {
    fn drop(&mut self) {
        for (_, child) in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Procs {
    fn start(&mut self, name: &str, dir: &Path, bin: &str, args: &[String]) {
        let log = std::fs::File::create(dir.join(format!("{name}.log"))).expect("log file");
        let child = Command::new(binary(bin))
            .args(args)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("start {bin}: {e}"));
        self.0.push((name.to_string(), child));
    }

    fn all_running(&mut self) -> Vec<String> {
        let mut dead = Vec::new();
        for (name, child) in &mut self.0 {
            if !matches!(child.try_wait(), Ok(None)) {
                dead.push(name.clone());
            }
        }
        dead
    }
}

/// A client of set 0's StoreSvrs (the name their certificates carry) as `who`.
fn tls(dir: &Path, trust: &str, who: &str) -> ClientTlsConfig {
    let read = |f: &str| std::fs::read(dir.join(f)).expect("certificate file");
    ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(read(trust)))
        .identity(Identity::from_pem(read(&format!("{who}.pem")), read(&format!("{who}.key"))))
        .domain_name("store-0.seqsvr")
}

async fn channel(addr: &str, tls: ClientTlsConfig) -> Result<Channel, String> {
    Endpoint::from_shared(format!("https://{addr}"))
        .map_err(|e| e.to_string())?
        .tls_config(tls)
        .map_err(|e| e.to_string())?
        .connect_timeout(Duration::from_secs(2))
        .timeout(Duration::from_secs(3))
        .connect()
        .await
        .map_err(|e| format!("{e:?}"))
}

/// The leader's leases, asked as the admin.
async fn leases(addr: &str, certs: &Path) -> pb::LeasesResponse {
    let ch = channel(addr, tls(certs, "cluster-ca.pem", "admin")).await.expect("admin channel");
    let mut admin = pb::store_admin_client::StoreAdminClient::new(ch);
    admin.leases(pb::LeasesRequest {}).await.expect("leases").into_inner()
}

async fn status(addr: &str, certs: &Path) -> Option<pb::StoreStatusResponse> {
    let ch = channel(addr, tls(certs, "cluster-ca.pem", "admin")).await.ok()?;
    let mut admin = pb::store_admin_client::StoreAdminClient::new(ch);
    admin.status(pb::StoreStatusRequest {}).await.ok().map(|r| r.into_inner())
}

fn seqctl(config: &Path, certs: &Path, who: &str, args: &[&str]) -> std::process::Output {
    Command::new(binary("seqctl"))
        .arg("--config")
        .arg(config)
        .arg("--tls-cert")
        .arg(certs.join(format!("{who}.pem")))
        .arg("--tls-key")
        .arg(certs.join(format!("{who}.key")))
        .args(args)
        .output()
        .expect("run seqctl")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_over_mutual_tls_serves_and_refuses_the_wrong_identities() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let certs = dir.join("certs");
    let init = Command::new(binary("seqctl"))
        .args(["certs", "init", "--dir"])
        .arg(&certs)
        .args(["--sets", "2", "--members", "3", "--allocs", "2"])
        .output()
        .expect("seqctl certs init");
    assert!(init.status.success(), "{}", String::from_utf8_lossy(&init.stderr));
    let tls_block = String::from_utf8(init.stdout).unwrap();

    let stores: Vec<String> = (0..3).map(|_| format!("127.0.0.1:{}", free_port())).collect();
    let other_set = format!("127.0.0.1:{}", free_port());
    let alloc = format!("127.0.0.1:{}", free_port());
    let members: Vec<String> = stores
        .iter()
        .enumerate()
        .map(|(i, a)| format!("{{ id = {}, addr = \"{a}\" }}", i + 1))
        .collect();
    let config = dir.join("cluster.toml");
    std::fs::write(
        &config,
        format!(
            "section_size = 1000\n[alloc]\nlease_ms = 3000\nlease_margin_ms = 300\n\
             heartbeat_ms = 800\nstep = 100\n\
             [[sets]]\nid = 0\nuid_begin = 0\nuid_end = 100000\nstores = [{}]\nallocs = [\"{alloc}\"]\n\
             [[sets]]\nid = 1\nuid_begin = 100000\nuid_end = 200000\n\
             stores = [{{ id = 1, addr = \"{other_set}\" }}]\n{tls_block}",
            members.join(", ")
        ),
    )
    .unwrap();

    let mut procs = Procs(Vec::new());
    let flag = |s: &str| s.to_string();
    for id in 1..=3 {
        let me = format!("store-0-{id}");
        procs.start(
            &me,
            dir,
            "storesvr",
            &[
                flag("--config"),
                config.display().to_string(),
                flag("--set-id"),
                flag("0"),
                flag("--node-id"),
                id.to_string(),
                flag("--data-dir"),
                dir.join(format!("data-{id}")).display().to_string(),
                flag("--initial-cluster-state"),
                flag("new"),
                flag("--metrics-addr"),
                flag("off"),
                flag("--tls-cert"),
                certs.join(format!("{me}.pem")).display().to_string(),
                flag("--tls-key"),
                certs.join(format!("{me}.key")).display().to_string(),
            ],
        );
    }
    procs.start(
        "alloc-0-1",
        dir,
        "allocsvr",
        &[
            flag("--config"),
            config.display().to_string(),
            flag("--set-id"),
            flag("0"),
            flag("--addr"),
            alloc.clone(),
            flag("--metrics-addr"),
            flag("off"),
            flag("--tls-cert"),
            certs.join("alloc-0-1.pem").display().to_string(),
            flag("--tls-key"),
            certs.join("alloc-0-1.key").display().to_string(),
        ],
    );

    // Raft over the peer plane: a leader is elected.
    let started = Instant::now();
    let leader = loop {
        if let Some(s) = status(&stores[0], &certs).await {
            if s.leader_id != 0 {
                break s.leader_id;
            }
        }
        assert!(started.elapsed() < Duration::from_secs(30), "no leader over TLS");
        assert!(procs.all_running().is_empty(), "a process died: {:?}", procs.all_running());
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let leader_addr = stores[leader as usize - 1].clone();

    // The AllocSvr registers over the store plane and serves an application over the client
    // plane (seqctl with the application's certificate).
    let started = Instant::now();
    let first = loop {
        let out = seqctl(&config, &certs, "client", &["next", "7"]);
        if out.status.success() {
            break String::from_utf8(out.stdout).unwrap();
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no value over TLS: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    assert!(first.starts_with("7 "), "{first}");

    let max_seq = |who: &'static str| {
        let (addr, certs) = (leader_addr.clone(), certs.clone());
        async move {
            let ch = channel(&addr, tls(&certs, "cluster-ca.pem", who)).await.unwrap();
            let mut store = pb::store_service_client::StoreServiceClient::new(ch);
            let r = store.get_max_seq(pb::GetMaxSeqRequest { sections: vec![0] }).await.unwrap();
            r.into_inner().sections[0].max_seq
        }
    };
    let before = max_seq("admin").await;

    // An application certificate (client CA) cannot even finish a handshake with a StoreSvr.
    let app = channel(&leader_addr, tls(&certs, "cluster-ca.pem", "client")).await;
    let refused = match app {
        Err(e) => e,
        Ok(ch) => {
            let mut store = pb::store_service_client::StoreServiceClient::new(ch);
            let r = store
                .advance_max_seq(pb::AdvanceMaxSeqRequest {
                    sections: vec![pb::SectionMaxSeq {
                        section: 0,
                        max_seq: 1 << 40,
                        lease_epoch: 0,
                    }],
                    alloc_id: 0,
                })
                .await;
            format!("{:?}", r.expect_err("an application must not advance max_seq"))
        }
    };
    // The client sees the server's alert, or (TLS 1.3: it already sent its request) a broken
    // connection; the server's log says why.
    assert!(
        ["UnknownCA", "broken pipe", "reset", "connection closed"]
            .iter()
            .any(|w| refused.contains(w)),
        "{refused}"
    );

    // The AllocSvr's certificate may not move sections (StoreAdmin is admin's).
    let ch = channel(&leader_addr, tls(&certs, "cluster-ca.pem", "alloc-0-1")).await.unwrap();
    let err = pb::store_admin_client::StoreAdminClient::new(ch)
        .move_sections(pb::MoveSectionsRequest { section_begin: 0, section_end: 1, to_alloc_id: 9 })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::PermissionDenied, "{err:?}");
    assert!(err.message().contains("\"alloc-0-1\" (role alloc of set 0)"), "{err:?}");

    // Nor raise max_seq unfenced (alloc_id 0 is an operator's raise).
    let ch = channel(&leader_addr, tls(&certs, "cluster-ca.pem", "alloc-0-1")).await.unwrap();
    let err = pb::store_service_client::StoreServiceClient::new(ch)
        .advance_max_seq(pb::AdvanceMaxSeqRequest {
            sections: vec![pb::SectionMaxSeq { section: 0, max_seq: 1 << 40, lease_epoch: 0 }],
            alloc_id: 0,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::PermissionDenied, "{err:?}");
    assert!(err.message().contains("unfenced advance"), "{err:?}");

    // A member of another set may not send Raft messages; bytes from it never reach raft-rs.
    let ch = channel(&leader_addr, tls(&certs, "cluster-ca.pem", "store-1-1")).await.unwrap();
    let err = pb::raft_transport_client::RaftTransportClient::new(ch)
        .send(pb::RaftMessageBatch {
            set_id: 0,
            from: 2,
            messages: vec![b"forged: a heartbeat committing past the follower's log".to_vec()],
            from_addr: other_set.clone(),
            sender_vote_blocked: false,
            sender_commands_version: 1,
            sender_layout: None,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::PermissionDenied, "{err:?}");
    assert!(err.message().contains("needs role peer of set 0"), "{err:?}");

    // A member may speak only for itself: with follower A's certificate, a batch that says it
    // comes from the leader (a heartbeat of a higher term, which would depose the real leader;
    // or, as well, forged votes and a forged commands version) is refused before it is read, and
    // the receiver's term does not move.
    let followers: Vec<u64> = (1..=3).filter(|&id| id != leader).collect();
    let (a, b) = (followers[0], followers[1]);
    let b_addr = &stores[b as usize - 1];
    let term_before = status(b_addr, &certs).await.expect("member b answers").term;
    let mut forged = raft::eraftpb::Message::default();
    forged.set_msg_type(raft::eraftpb::MessageType::MsgHeartbeat);
    (forged.from, forged.to, forged.term) = (leader, b, term_before + 5);
    let forged = protobuf::Message::write_to_bytes(&forged).unwrap();
    let ch = channel(b_addr, tls(&certs, "cluster-ca.pem", &format!("store-0-{a}"))).await.unwrap();
    let err = pb::raft_transport_client::RaftTransportClient::new(ch)
        .send(pb::RaftMessageBatch {
            set_id: 0,
            from: leader,
            messages: vec![forged],
            from_addr: stores[a as usize - 1].clone(),
            sender_vote_blocked: false,
            sender_commands_version: u32::MAX,
            sender_layout: None,
        })
        .await
        .expect_err("a batch forged by another member's certificate");
    assert_eq!(err.code(), Code::PermissionDenied, "{err:?}");
    assert!(
        err.message().contains(&format!("\"store-0-{a}\" (role peer)"))
            && err.message().contains(&format!("as member {leader}")),
        "{err:?}"
    );
    let after = status(b_addr, &certs).await.expect("member b answers");
    assert_eq!(
        (after.term, after.leader_id),
        (term_before, leader),
        "the forged batch was stepped"
    );

    // Another AllocSvr's certificate may not act for alloc-0-1's registration: a release would
    // let its sections move before its lease ends (I3), a heartbeat would keep a dead one's
    // lease alive. An admin has no registration at all. Refused before anything is proposed.
    let registered = leases(&leader_addr, &certs).await;
    let running = registered.allocs.iter().find(|a| a.addr == alloc).expect("alloc-0-1 registered");
    assert_eq!(running.identity, "alloc-0-1", "the registration records who registered");
    let running = running.alloc_id;
    for who in ["alloc-0-2", "admin"] {
        let ch = channel(&leader_addr, tls(&certs, "cluster-ca.pem", who)).await.unwrap();
        let mut store = pb::store_service_client::StoreServiceClient::new(ch);
        let err = store
            .release_alloc(pb::ReleaseAllocRequest { alloc_id: running })
            .await
            .expect_err("a release for another's registration");
        assert_eq!(err.code(), Code::PermissionDenied, "{who}: {err:?}");
        let err = store
            .heartbeat(pb::HeartbeatRequest { alloc_id: running, route_version: 0 })
            .await
            .expect_err("a heartbeat for another's registration");
        assert_eq!(err.code(), Code::PermissionDenied, "{who}: {err:?}");
    }
    let ch = channel(&leader_addr, tls(&certs, "cluster-ca.pem", "alloc-0-2")).await.unwrap();
    let err = pb::store_service_client::StoreServiceClient::new(ch)
        .release_alloc(pb::ReleaseAllocRequest { alloc_id: running })
        .await
        .unwrap_err();
    assert!(err.message().contains("registered by \"alloc-0-1\""), "{err:?}");

    // Plaintext gets nothing at all.
    let plain = Endpoint::from_shared(format!("http://{leader_addr}")).unwrap().connect().await;
    if let Ok(ch) = plain {
        let r = pb::raft_transport_client::RaftTransportClient::new(ch)
            .send(pb::RaftMessageBatch { set_id: 0, from: 2, ..Default::default() })
            .await;
        assert!(r.is_err(), "a plaintext Raft message was accepted");
    }

    // Nothing changed, and everyone is still up and serving.
    assert_eq!(max_seq("admin").await, before, "no refused call changed max_seq");
    let still = leases(&leader_addr, &certs).await;
    let still = still.allocs.iter().find(|a| a.alloc_id == running).expect("still registered");
    assert!(!still.released && !still.replaced, "a refused release changed the registration");
    assert!(procs.all_running().is_empty(), "died: {:?}", procs.all_running());
    for addr in &stores {
        let s = status(addr, &certs).await.expect("every member answers");
        assert_eq!(s.leader_id, leader, "{addr} still follows the same leader");
    }
    let out = seqctl(&config, &certs, "client", &["next", "7"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stores_log = std::fs::read_to_string(dir.join(format!("store-0-{leader}.log"))).unwrap();
    assert!(stores_log.contains("PERMISSION_DENIED"), "refusals are logged");
    assert!(
        stores_log.contains("refused a TLS connection") && stores_log.contains("UnknownIssuer"),
        "the application's handshake was refused for its issuer"
    );
}
