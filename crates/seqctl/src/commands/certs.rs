//! `seqctl certs init`: a development PKI for mutual TLS (rcgen), and the `[tls]` block that
//! goes with it.
//!
//! Two CAs:
//! - `cluster-ca` issues the servers (`store-<set>-<id>`, `alloc-<set>-<i>`) and `admin`;
//! - `client-ca` issues the applications (`client`).
//!
//! The store and peer planes trust `cluster-ca.pem` only, so an application certificate cannot
//! even finish a handshake with a StoreSvr; the client plane trusts `client-bundle.pem`
//! (client-ca + cluster-ca): an AllocSvr accepts applications and the admin, and clients accept
//! the AllocSvrs' cluster-issued server certificates. Which plane a member of the cluster may act
//! on is then the role's business (`[tls.identities]`). A StoreSvr's certificate carries the
//! DNS SANs `store.<server_name>` and `store-<set>.<server_name>`, an AllocSvr's
//! `alloc.<server_name>` (clients dial IP addresses and check the name of the role they mean to
//! reach, so one cannot pose as the other), plus 127.0.0.1 and localhost; admin and client
//! certificates carry no server name at all. The names and the certificates are
//! `seqsvr-tls`'s (`seqsvr_tls::server_names_of`, `seqsvr_tls::pki`): this file plans the PKI
//! and writes it. Keys are written 0600; existing files are kept unless `--force`.

use crate::error::{CtlError, Exit};
use seqsvr_core::ids::SetId;
use seqsvr_tls::pki::{issue, make_ca, Ca};
use seqsvr_tls::{server_names_of, ServerKind};
use std::io::Write as _;
use std::path::{Path, PathBuf};

/// What `certs init` makes.
#[derive(Clone, Debug)]
pub struct InitOptions {
    pub dir: PathBuf,
    pub sets: u32,
    pub members: u64,
    pub allocs: u32,
    pub server_name: String,
    pub days: u32,
    pub force: bool,
}

/// One certificate to issue: its file stem (= CN), the server names it serves under (none: a
/// client only), the role line.
struct Leaf {
    name: String,
    server: Vec<String>,
    client_ca: bool,
    role: String,
}

fn plan(o: &InitOptions) -> Vec<Leaf> {
    let mut leaves = Vec::new();
    for set in 0..o.sets {
        for id in 1..=o.members {
            leaves.push(Leaf {
                name: format!("store-{set}-{id}"),
                server: server_names_of(
                    ServerKind::StoreSvr { set: SetId(set.into()) },
                    &o.server_name,
                ),
                client_ca: false,
                role: format!("{{ role = \"peer\", set = {set}, node = {id} }}"),
            });
        }
        for i in 1..=o.allocs {
            leaves.push(Leaf {
                name: format!("alloc-{set}-{i}"),
                server: server_names_of(ServerKind::AllocSvr, &o.server_name),
                client_ca: false,
                role: format!("{{ role = \"alloc\", set = {set} }}"),
            });
        }
    }
    leaves.push(Leaf {
        name: "admin".into(),
        server: Vec::new(),
        client_ca: false,
        role: "\"admin\"".into(),
    });
    leaves.push(Leaf {
        name: "client".into(),
        server: Vec::new(),
        client_ca: true,
        role: "\"client\"".into(),
    });
    leaves
}

fn fail(what: impl Into<String>) -> CtlError {
    CtlError { exit: Exit::NoAnswer, what: what.into(), hint: None }
}

fn rc(what: &str) -> impl Fn(seqsvr_tls::pki::Error) -> CtlError + '_ {
    move |e| fail(format!("cannot make {what}: {e}"))
}

/// Writes a file; keys 0600. Refuses to replace an existing file unless `force`.
fn write(path: &Path, contents: &str, secret: bool, force: bool) -> Result<(), CtlError> {
    if path.exists() && !force {
        return Err(CtlError::usage(
            format!("{} exists", path.display()),
            "pass --force to replace the whole PKI, or choose another --dir",
        ));
    }
    let mut open = std::fs::OpenOptions::new();
    open.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        open.mode(if secret { 0o600 } else { 0o644 });
    }
    let mut file =
        open.open(path).map_err(|e| fail(format!("cannot write {}: {e}", path.display())))?;
    // `mode` applies only to a new file: a replaced key is narrowed too.
    #[cfg(unix)]
    if secret {
        use std::os::unix::fs::PermissionsExt as _;
        file.set_permissions(std::fs::Permissions::from_mode(0o600))
            .map_err(|e| fail(format!("cannot chmod {}: {e}", path.display())))?;
    }
    file.write_all(contents.as_bytes())
        .map_err(|e| fail(format!("cannot write {}: {e}", path.display())))
}

/// Makes the CAs and certificates in `o.dir`; returns the `[tls]` block for the cluster file.
pub fn init_files(o: &InitOptions) -> Result<String, CtlError> {
    if o.sets == 0 || o.members == 0 {
        return Err(CtlError::usage(
            "--sets and --members must be at least 1",
            "e.g. --sets 1 --members 3",
        ));
    }
    if o.days == 0 {
        return Err(CtlError::usage("--days must be at least 1", "e.g. --days 365"));
    }
    if !o.force {
        let mut names: Vec<String> = [
            "cluster-ca.pem",
            "cluster-ca.key",
            "client-ca.pem",
            "client-ca.key",
            "client-bundle.pem",
        ]
        .map(String::from)
        .into();
        for leaf in plan(o) {
            names.push(format!("{}.pem", leaf.name));
            names.push(format!("{}.key", leaf.name));
        }
        if let Some(existing) = names.iter().map(|n| o.dir.join(n)).find(|p| p.exists()) {
            return Err(CtlError::usage(
                format!("{} exists", existing.display()),
                "pass --force to replace the whole PKI, or choose another --dir",
            ));
        }
    }
    std::fs::create_dir_all(&o.dir)
        .map_err(|e| fail(format!("cannot create {}: {e}", o.dir.display())))?;
    let ca = |cn: &str| -> Result<Ca, CtlError> { make_ca(cn, o.days).map_err(rc(cn)) };
    let (cluster, client) = (ca("seqsvr cluster CA")?, ca("seqsvr client CA")?);
    let at = |name: &str| o.dir.join(name);
    write(&at("cluster-ca.pem"), &cluster.pem, false, o.force)?;
    write(&at("cluster-ca.key"), &cluster.key, true, o.force)?;
    write(&at("client-ca.pem"), &client.pem, false, o.force)?;
    write(&at("client-ca.key"), &client.key, true, o.force)?;
    write(&at("client-bundle.pem"), &format!("{}{}", client.pem, cluster.pem), false, o.force)?;
    let mut identities = String::new();
    for leaf in plan(o) {
        let issuer = if leaf.client_ca { &client } else { &cluster };
        let (cert, key) =
            issue(issuer, &leaf.name, &leaf.server, o.days).map_err(rc(&leaf.name))?;
        // The chain a process presents: its certificate (the CA is in the peer's bundle).
        write(&at(&format!("{}.pem", leaf.name)), &cert, false, o.force)?;
        write(&at(&format!("{}.key", leaf.name)), &key, true, o.force)?;
        identities.push_str(&format!("\"{}\" = {}\n", leaf.name, leaf.role));
    }
    let path = |name: &str| at(name).display().to_string();
    Ok(format!(
        "# Paths are relative to the cluster file's directory: adjust them if it is elsewhere.\n\
         [tls]\n\
         server_name = \"{server_name}\"\n\
         client_ca = \"{client_ca}\"\n\
         store_ca = \"{cluster_ca}\"\n\
         peer_ca = \"{cluster_ca}\"\n\
         [tls.identities]\n\
         {identities}",
        server_name = o.server_name,
        client_ca = path("client-bundle.pem"),
        cluster_ca = path("cluster-ca.pem"),
    ))
}

pub fn init(o: &InitOptions) -> Result<Exit, CtlError> {
    let block = init_files(o)?;
    eprintln!(
        "wrote a development PKI to {dir} (CA keys: cluster-ca.key, client-ca.key; keep them \
         off the servers). Each process takes its own pair: --tls-cert {dir}/store-0-1.pem \
         --tls-key {dir}/store-0-1.key (SEQSVR_TLS_CERT / SEQSVR_TLS_KEY). Add this to the \
         cluster file:\n",
        dir = o.dir.display()
    );
    print!("{block}");
    Ok(Exit::Ok)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::client::danger::ServerCertVerifier as _;
    use rustls::pki_types::pem::PemObject as _;
    use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
    use std::sync::Arc;

    fn options(dir: &Path) -> InitOptions {
        InitOptions {
            dir: dir.join("certs"),
            sets: 2,
            members: 3,
            allocs: 2,
            server_name: "seqsvr".into(),
            days: 30,
            force: false,
        }
    }

    fn roots(path: &Path) -> Arc<rustls::RootCertStore> {
        let mut store = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_file_iter(path).unwrap() {
            store.add(c.unwrap()).unwrap();
        }
        Arc::new(store)
    }

    fn cert(dir: &Path, name: &str) -> CertificateDer<'static> {
        CertificateDer::from_pem_file(dir.join(format!("{name}.pem"))).unwrap()
    }

    #[test]
    fn init_makes_a_pki_whose_planes_trust_what_they_should() {
        let tmp = tempfile::tempdir().unwrap();
        let o = options(tmp.path());
        let block = init_files(&o).unwrap();
        let dir = &o.dir;

        // The block parses as the [tls] of a cluster file with two sets.
        let mut cluster = String::new();
        for set in 0..2 {
            cluster.push_str(&format!(
                "[[sets]]\nid = {set}\nuid_begin = {}\nuid_end = {}\n\
                 stores = [{{ id = 1, addr = \"127.0.0.1:{}\" }}]\n",
                set * 100_000,
                (set + 1) * 100_000,
                7001 + set
            ));
        }
        let config =
            seqsvr_core::config::ClusterConfig::from_toml_str(&format!("{cluster}{block}"))
                .unwrap();
        let tls = config.tls.unwrap();
        assert_eq!(tls.identities.len(), 2 * 3 + 2 * 2 + 2);
        assert_eq!(tls.identities["store-1-3"].set(), Some(seqsvr_core::ids::SetId(1)));
        // Each member's certificate is bound to its node id: it may send Raft batches only as it.
        assert_eq!(tls.identities["store-1-3"].node(), Some(seqsvr_core::ids::NodeId(3)));
        assert_eq!(tls.identities["alloc-1-2"].node(), None);

        #[cfg(unix)]
        for key in ["cluster-ca.key", "client-ca.key", "store-0-1.key", "client.key"] {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(dir.join(key)).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600, "{key}");
        }

        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let client_verifier = |bundle: &str| {
            rustls::server::WebPkiClientVerifier::builder_with_provider(
                roots(&dir.join(bundle)),
                provider.clone(),
            )
            .build()
            .unwrap()
        };
        let (store_plane, client_plane) =
            (client_verifier("cluster-ca.pem"), client_verifier("client-bundle.pem"));
        let now = UnixTime::now();
        let as_client = |v: &Arc<dyn rustls::server::danger::ClientCertVerifier>, name: &str| {
            v.verify_client_cert(&cert(dir, name), &[], now).is_ok()
        };
        for name in ["store-0-1", "alloc-1-2", "admin"] {
            assert!(as_client(&store_plane, name), "{name} on the store/peer planes");
        }
        assert!(!as_client(&store_plane, "client"), "an application is not trusted by a StoreSvr");
        assert!(as_client(&client_plane, "client") && as_client(&client_plane, "admin"));

        // Servers are verified by name, whichever plane's bundle the dialler uses.
        for bundle in ["cluster-ca.pem", "client-bundle.pem"] {
            let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
                roots(&dir.join(bundle)),
                provider.clone(),
            )
            .build()
            .unwrap();
            let serves = |name: &str, as_name: &str| {
                let as_name = ServerName::try_from(as_name.to_string()).unwrap();
                verifier.verify_server_cert(&cert(dir, name), &[], &as_name, &[], now)
            };
            for (name, role, other) in [
                ("store-1-3", "store.seqsvr", "alloc.seqsvr"),
                ("store-1-3", "store-1.seqsvr", "store-0.seqsvr"),
                ("alloc-0-1", "alloc.seqsvr", "store.seqsvr"),
            ] {
                let ok = serves(name, role);
                assert!(ok.is_ok(), "{name} as a server under {bundle}: {ok:?}");
                // Not as the other role: an AllocSvr cannot pose as a StoreSvr, nor back.
                assert!(serves(name, other).is_err(), "{name} passed as {other}");
            }
            for name in ["admin", "client"] {
                assert!(serves(name, "store.seqsvr").is_err(), "{name} serves as a store");
                assert!(serves(name, "alloc.seqsvr").is_err(), "{name} serves as an alloc");
            }
        }

        // A second init into the same dir refuses to overwrite; --force replaces.
        assert!(init_files(&o).is_err());
        assert!(init_files(&InitOptions { force: true, ..o }).is_ok());
    }
}
