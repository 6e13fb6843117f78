//! Client connect: the TLS settings for dialling a plane, and the server-name rule every client
//! checks.
//!
//! **The server's role, checked by the client**: a channel trusts the CA bundle of the plane's
//! servers, presents this process's certificate, and checks the server's certificate for the
//! name of the role it means to reach ([`server_name_for`]): `alloc.<server_name>` on the
//! client plane, `store.<server_name>` on the store and peer planes, `store-<set>.<server_name>`
//! when the set of the StoreSvr is known (addresses are IPs, and one CA may issue every role; so
//! a member of set 1 cannot answer for set 0). An AllocSvr is a store-plane member: its
//! certificate is checked against the store plane's bundle, never the client bundle (which may
//! hold the applications' CA): [`server_ca_plane`].
//!
//! Two users, one rotation (`reload.rs`):
//! - **the process identity** ([`ClientTls`]): a process has one identity (its certificate and
//!   key), set once at start ([`set_process_tls`], [`use_cluster_identity`]) before any channel
//!   is opened; every channel of the SDK then dials with it ([`endpoint`]). Plaintext `http://`
//!   is a choice of its own ([`use_plaintext`]): a process that made neither opens no channel
//!   (FAILED_PRECONDITION naming both, [`process_transport`]), never a plaintext one by default. The SDK's clients watch [`generation`] and build new
//!   channels when it moves (calls already running finish on the old connection).
//! - **a member dialling its peers** ([`ReloadingClientTls`], from the process's [`TlsFiles`]),
//!   and [`client_tls_config`] for a one-off configuration.

use crate::pem::{check_pair, parse_certs, parse_key, TlsError, TlsFiles};
use crate::reload::{read_all, Messages, Reloading, Source};
use crate::{Plane, ServerKind};
use seqsvr_core::config::TlsConfig;
use seqsvr_core::ids::SetId;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity};
use tonic::Status;

/// The name the server of `plane` must carry: `alloc.<server_name>` on the client plane;
/// `store-<set>.<server_name>` on the store and peer planes when the set dialled is known, else
/// `store.<server_name>` (any set's StoreSvr).
pub fn server_name_for(server_name: &str, plane: Plane, set: Option<SetId>) -> String {
    match (plane, set) {
        (Plane::Client, _) => seqsvr_core::config::alloc_server_name(server_name),
        (Plane::Store | Plane::Peer, Some(set)) => {
            seqsvr_core::config::set_store_server_name(server_name, set)
        }
        (Plane::Store | Plane::Peer, None) => seqsvr_core::config::store_server_name(server_name),
    }
}

/// The server names a certificate of `kind` carries (what [`server_name_for`] checks): a
/// StoreSvr's `store.<server_name>` and `store-<set>.<server_name>`, an AllocSvr's
/// `alloc.<server_name>`. Admin and application certificates carry none.
pub fn server_names_of(kind: ServerKind, server_name: &str) -> Vec<String> {
    match kind {
        ServerKind::StoreSvr { set } => vec![
            seqsvr_core::config::store_server_name(server_name),
            seqsvr_core::config::set_store_server_name(server_name, set),
        ],
        ServerKind::AllocSvr => vec![seqsvr_core::config::alloc_server_name(server_name)],
    }
}

/// The plane whose CA bundle the server of `plane` is checked against: an AllocSvr (the client
/// plane's server) is a store-plane member, checked against the store plane's bundle, never the
/// client bundle (which may hold the applications' CA).
pub fn server_ca_plane(plane: Plane) -> Plane {
    match plane {
        Plane::Client => Plane::Store,
        other => other,
    }
}

/// The tonic settings: trust `ca`, present `cert`/`key`, expect the server to be `name`.
fn tonic_config(ca: &[u8], cert: &[u8], key: &[u8], name: String) -> ClientTlsConfig {
    ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(ca))
        .identity(Identity::from_pem(cert, key))
        .domain_name(name)
}

// ---- the process identity ----

/// A process's client identity and the CA bundles it trusts (PEM).
#[derive(Clone, PartialEq, Eq)]
pub struct ClientTls {
    pub server_name: String,
    pub cert_pem: Vec<u8>,
    pub key_pem: Vec<u8>,
    pub client_ca_pem: Vec<u8>,
    pub store_ca_pem: Vec<u8>,
    /// The files it was read from (cert, key, client CA, store CA), for rotation.
    pub files: Option<[PathBuf; 4]>,
}

impl std::fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.debug_struct("ClientTls").field("server_name", &self.server_name).finish_non_exhaustive()
    }
}

impl ClientTls {
    /// Reads the identity (`cert`, `key`) and the CA bundles a cluster file's `[tls]` names
    /// (relative to `cluster_dir`), and checks that they parse.
    pub fn from_files(
        tls: &TlsConfig,
        cluster_dir: &Path,
        cert: &Path,
        key: &Path,
    ) -> Result<ClientTls, TlsError> {
        let (client_ca, store_ca) =
            (cluster_dir.join(&tls.client_ca), cluster_dir.join(&tls.store_ca));
        ClientTls::read(&tls.server_name, cert, key, &client_ca, &store_ca)
    }

    /// Reads and checks the files themselves (paths already resolved).
    pub fn read(
        server_name: &str,
        cert: &Path,
        key: &Path,
        client_ca: &Path,
        store_ca: &Path,
    ) -> Result<ClientTls, TlsError> {
        let files = [cert, key, client_ca, store_ca].map(Path::to_path_buf);
        // Each file read when its turn comes: the first that does not load is the one named.
        ClientTls::build(server_name, files, |path, _| crate::pem::read(path))
    }

    /// The identity from the files' contents (in the order of `files`), each checked in turn
    /// (`get` hands over the contents of one).
    fn build(
        server_name: &str,
        files: [PathBuf; 4],
        mut get: impl FnMut(&Path, usize) -> Result<Vec<u8>, TlsError>,
    ) -> Result<ClientTls, TlsError> {
        let [cert, key, client_ca, store_ca] = &files;
        let cert_pem = get(cert, 0)?;
        let chain = parse_certs(cert, &cert_pem)?;
        let key_pem = get(key, 1)?;
        let key_der = parse_key(key, &key_pem)?;
        // The key must be the certificate's: a certificate renamed into place before its key
        // (a rotation half done) is refused here, not at the next handshake.
        check_pair(chain, key_der).map_err(|source| TlsError::NotAPair {
            cert: cert.clone(),
            key: key.clone(),
            source,
        })?;
        let mut bundle = |path: &Path, i: usize| -> Result<Vec<u8>, TlsError> {
            let pem = get(path, i)?;
            parse_certs(path, &pem)?;
            Ok(pem)
        };
        let (client_ca_pem, store_ca_pem) = (bundle(client_ca, 2)?, bundle(store_ca, 3)?);
        Ok(ClientTls {
            server_name: server_name.to_string(),
            cert_pem,
            key_pem,
            client_ca_pem,
            store_ca_pem,
            files: Some(files),
        })
    }

    /// The tonic TLS settings for dialling `plane` (`set`: the set of the StoreSvr dialled, when
    /// known). Every server the process identity dials is a store-plane member: its certificate
    /// is checked against `store_ca` ([`server_ca_plane`]; the identity has no peer bundle:
    /// members dial their peers with [`ReloadingClientTls`]).
    pub fn config(&self, plane: Plane, set: Option<SetId>) -> ClientTlsConfig {
        let name = server_name_for(&self.server_name, plane, set);
        tonic_config(&self.store_ca_pem, &self.cert_pem, &self.key_pem, name)
    }

    /// The bytes it was built from, in the order of [`ClientTls::files`].
    fn contents(&self) -> Vec<Vec<u8>> {
        [&self.cert_pem, &self.key_pem, &self.client_ca_pem, &self.store_ca_pem]
            .map(|b| b.to_vec())
            .into()
    }
}

/// The process identity as a [`Source`]: rebuilt from the files it was read from.
struct IdentityFiles {
    server_name: String,
    files: Option<[PathBuf; 4]>,
}

impl Source for IdentityFiles {
    type Built = ClientTls;

    fn files(&self) -> Option<Vec<PathBuf>> {
        self.files.as_ref().map(|f| f.to_vec())
    }

    fn build(&self, contents: &[Vec<u8>]) -> Result<ClientTls, TlsError> {
        let files = self.files.clone().ok_or_else(|| TlsError::Pem {
            path: PathBuf::new(),
            what: "an identity not read from files is not reloaded".into(),
        })?;
        ClientTls::build(&self.server_name, files, |path, i| {
            contents
                .get(i)
                .cloned()
                .ok_or_else(|| TlsError::Pem { path: path.to_path_buf(), what: "not read".into() })
        })
    }

    fn cert(&self) -> String {
        self.files.as_ref().map(|f| f[0].display().to_string()).unwrap_or_default()
    }
}

/// The process's identity (none until set).
static PROCESS_TLS: Reloading<IdentityFiles> = Reloading::empty(Messages {
    // Unreadable files (mid-rename) count as unchanged: looked at again next time.
    unreadable: None,
    changed: "client certificate files changed: new connections use the new identity",
    // Half-rotated (a key renamed in before its certificate): keep the old identity.
    broken: "client certificate files changed but do not load: the old identity is kept",
});

/// Set once plaintext was chosen ([`use_plaintext`]) and no identity since.
static PLAINTEXT: AtomicBool = AtomicBool::new(false);

/// Every channel opened from now on dials with mutual TLS as `tls` (rotating with its files).
pub fn set_process_tls(tls: ClientTls) {
    // What was loaded, not what the files hold now: a file replaced since is a change.
    let contents = tls.contents();
    let source = IdentityFiles { server_name: tls.server_name.clone(), files: tls.files.clone() };
    PROCESS_TLS.set(Some((source, tls, contents)));
    PLAINTEXT.store(false, Ordering::Release);
}

/// Every channel opened from now on dials plaintext `http://`, with no identity: for a cluster
/// whose servers run with `--insecure` (its cluster file has no `[tls]`). The explicit choice
/// — a process that made neither ([`set_process_tls`] nor this) opens no channel at all
/// ([`process_transport`]), so nothing goes out in plaintext because TLS was forgotten.
pub fn use_plaintext() {
    PLAINTEXT.store(true, Ordering::Release);
    PROCESS_TLS.set(None);
}

/// The process's TLS identity, if set.
pub fn process_tls() -> Option<ClientTls> {
    PROCESS_TLS.get()
}

/// How this process's channels dial: `Some` identity (mutual TLS), `None` (plaintext, chosen
/// with [`use_plaintext`]), or FAILED_PRECONDITION saying what to configure when the process
/// chose neither.
pub fn process_transport() -> Result<Option<ClientTls>, Status> {
    if let Some(tls) = process_tls() {
        return Ok(Some(tls));
    }
    if PLAINTEXT.load(Ordering::Acquire) {
        return Ok(None);
    }
    Err(Status::failed_precondition(NO_TRANSPORT))
}

/// What a process that chose no transport is told.
pub const NO_TRANSPORT: &str = "no transport chosen for this process's seqsvr channels, so none \
     is opened: for mutual TLS (a cluster file with [tls]) call \
     seqsvr_client::tls::set_process_tls(ClientTls::read(..)) or use_cluster_identity(..) with \
     this process's certificate and key (e.g. the client.pem/client.key of `seqctl certs init`); \
     for a cluster served in plaintext (--insecure) call seqsvr_client::tls::use_plaintext()";

/// The generation of the process's identity, after picking up a rotation of its files (their
/// contents compared once per [`crate::RELOAD_CHECK`] at most, read outside the lock): a client
/// whose channels were built under an older generation builds new ones.
pub fn generation() -> u64 {
    PROCESS_TLS.generation()
}

/// Why a client process cannot take the identity its flags and cluster file describe.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    #[error("--tls-cert/--tls-key given, but {0} has no [tls] section")]
    NotAsked(String),
    #[error(
        "{0} has a [tls] section: this client needs a certificate (--tls-cert and --tls-key, or \
         SEQSVR_TLS_CERT/SEQSVR_TLS_KEY; e.g. the admin.pem/admin.key of `seqctl certs init`)"
    )]
    Missing(String),
    #[error("{0}")]
    Files(String),
}

/// For client tools (seqctl, seqbench, seqcheck): with `[tls]` in the cluster file, every
/// channel from now on presents `cert`/`key`; a cluster file without `[tls]` describes a
/// plaintext cluster (its servers refuse to start without `[tls]` unless given `--insecure`),
/// and channels are plaintext ([`use_plaintext`]). A certificate without `[tls]`, or `[tls]`
/// without one, is an error (never silently ignored).
pub fn use_cluster_identity(
    tls: Option<&TlsConfig>,
    cluster_file: &Path,
    cert: Option<&Path>,
    key: Option<&Path>,
) -> Result<(), IdentityError> {
    let file = || cluster_file.display().to_string();
    match (tls, cert, key) {
        (None, None, None) => {
            use_plaintext();
            Ok(())
        }
        (None, _, _) => Err(IdentityError::NotAsked(file())),
        (Some(tls), Some(cert), Some(key)) => {
            let dir = cluster_file.parent().unwrap_or(Path::new(""));
            let client = ClientTls::from_files(tls, dir, cert, key)
                .map_err(|e| IdentityError::Files(e.to_string()))?;
            set_process_tls(client);
            Ok(())
        }
        (Some(_), _, _) => Err(IdentityError::Missing(file())),
    }
}

/// An endpoint for `addr` (`host:port`) on `plane`, as the process chose
/// ([`process_transport`]): `https://` with its TLS identity, `http://` after
/// [`use_plaintext`], FAILED_PRECONDITION when it chose neither.
pub fn endpoint(addr: &str, plane: Plane) -> Result<Endpoint, Status> {
    endpoint_for(addr, plane, None)
}

/// [`endpoint`] to a StoreSvr of `set` when known (only that set's certificates accepted).
pub fn endpoint_for(addr: &str, plane: Plane, set: Option<SetId>) -> Result<Endpoint, Status> {
    endpoint_with(addr, plane, set, process_transport()?.as_ref())
}

/// [`endpoint_for`] with an explicit transport instead of the process's: `Some` identity, or
/// `None` for plaintext, said by the caller; for a process that acts as more than one identity
/// (the test harness acting as an AllocSvr).
pub fn endpoint_with(
    addr: &str,
    plane: Plane,
    set: Option<SetId>,
    tls: Option<&ClientTls>,
) -> Result<Endpoint, Status> {
    let bad =
        |e: tonic::transport::Error| Status::invalid_argument(format!("bad address {addr:?}: {e}"));
    match tls {
        Some(tls) => Endpoint::from_shared(format!("https://{addr}"))
            .map_err(bad)?
            .tls_config(tls.config(plane, set))
            .map_err(|e| Status::invalid_argument(format!("TLS settings for {addr}: {e}"))),
        None => Endpoint::from_shared(format!("http://{addr}")).map_err(bad),
    }
}

// ---- a member's configuration from its files ----

/// A member dialling `plane` (its peers) with its own certificate, as a [`Source`]: the CA
/// bundle of the plane's server, the certificate, the key.
struct MemberFiles {
    files: TlsFiles,
    plane: Plane,
    set: Option<SetId>,
}

impl Source for MemberFiles {
    type Built = ClientTlsConfig;

    fn files(&self) -> Option<Vec<PathBuf>> {
        let f = &self.files;
        Some(vec![f.ca(server_ca_plane(self.plane)).to_path_buf(), f.cert.clone(), f.key.clone()])
    }

    fn build(&self, c: &[Vec<u8>]) -> Result<ClientTlsConfig, TlsError> {
        let files = &self.files;
        parse_certs(files.ca(server_ca_plane(self.plane)), &c[0])?;
        let chain = parse_certs(&files.cert, &c[1])?;
        let key = parse_key(&files.key, &c[2])?;
        // The key must be the certificate's (tonic would only find out at the handshake).
        check_pair(chain, key)?;
        let name = server_name_for(&files.server_name, self.plane, self.set);
        Ok(tonic_config(&c[0], &c[1], &c[2], name))
    }

    fn cert(&self) -> String {
        self.files.cert.display().to_string()
    }
}

/// The client side for dialling `plane` with the process's files (see the module doc for what
/// is checked). Files are read now ([`ReloadingClientTls`] follows them). `set`: the set of the
/// StoreSvr dialled, when known (a member dialling its peers): then only that set's
/// certificates (`store-<set>.<server_name>`) are accepted.
pub fn client_tls_config(
    files: &TlsFiles,
    plane: Plane,
    set: Option<SetId>,
) -> Result<ClientTlsConfig, TlsError> {
    let source = MemberFiles { files: files.clone(), plane, set };
    source.build(&read_all(&source)?.unwrap_or_default())
}

/// A client configuration rebuilt when its files change (rotation of a member's certificate
/// for the connections it dials): [`ReloadingClientTls::current`] looks at the files at most
/// once per [`crate::RELOAD_CHECK`]; files that do not load are logged and the old ones kept.
pub struct ReloadingClientTls {
    config: Reloading<MemberFiles>,
}

impl ReloadingClientTls {
    /// Reads and checks the files now (a member with unusable files does not start).
    pub fn new(
        files: TlsFiles,
        plane: Plane,
        set: Option<SetId>,
    ) -> Result<Arc<ReloadingClientTls>, TlsError> {
        let messages = Messages {
            unreadable: Some("client TLS files unreadable; keeping the loaded certificate"),
            changed: "client TLS files changed: new connections use the new certificate",
            broken: "client TLS files changed but do not load; keeping the previous certificate",
        };
        let config = Reloading::load(MemberFiles { files, plane, set }, messages)?;
        Ok(Arc::new(ReloadingClientTls { config }))
    }

    /// The configuration for new connections and its generation (moved on by every change).
    pub fn current(&self) -> (u64, ClientTlsConfig) {
        // Loaded at `new` and only ever replaced, never cleared.
        self.config.current().unwrap_or_else(|| (0, ClientTlsConfig::new()))
    }
}

/// An endpoint for `addr` (`host:port`): `https://` with `tls` when given, else `http://`.
pub fn endpoint_with_config(
    addr: &str,
    tls: Option<&ClientTlsConfig>,
) -> Result<Endpoint, tonic::transport::Error> {
    match tls {
        Some(tls) => Endpoint::from_shared(format!("https://{addr}"))?.tls_config(tls.clone()),
        None => Endpoint::from_shared(format!("http://{addr}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_are_plaintext_without_tls_and_https_with_it() {
        // Not through the process-wide setting: other tests open channels in parallel.
        let e = endpoint_with("127.0.0.1:7001", Plane::Store, None, None).unwrap();
        assert_eq!(e.uri().scheme_str(), Some("http"));
        assert!(endpoint_with("not an address", Plane::Store, None, None).is_err());
        let broken = ClientTls {
            server_name: "seqsvr".into(),
            cert_pem: b"junk".to_vec(),
            key_pem: b"junk".to_vec(),
            client_ca_pem: vec![],
            store_ca_pem: vec![],
            files: None,
        };
        // tonic parses the identity when TLS is applied: https was attempted.
        let err = endpoint_with("127.0.0.1:7001", Plane::Client, None, Some(&broken)).unwrap_err();
        assert!(err.message().contains("TLS settings"), "{err:?}");
    }

    /// The process-wide choice: none is an error naming what to configure; plaintext only
    /// once asked. (The only test of this crate's unit tests that touches the process state.)
    #[test]
    fn a_process_that_chose_no_transport_opens_no_channel() {
        let err = endpoint("127.0.0.1:7001", Plane::Client).unwrap_err();
        assert_eq!(err.code(), tonic::Code::FailedPrecondition);
        assert!(
            err.message().contains("set_process_tls") && err.message().contains("use_plaintext"),
            "{err:?}"
        );
        use_plaintext();
        let e = endpoint("127.0.0.1:7001", Plane::Client).unwrap();
        assert_eq!(e.uri().scheme_str(), Some("http"));
    }

    #[test]
    fn from_files_reports_the_file_that_does_not_load() {
        let dir = std::env::temp_dir().join(format!("seqsvr-client-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("bad.pem"), "not pem").unwrap();
        let tls: TlsConfig = TlsConfig {
            server_name: "seqsvr".into(),
            client_ca: "bad.pem".into(),
            store_ca: "bad.pem".into(),
            peer_ca: "bad.pem".into(),
            max_registrations_per_identity: 8,
            identities: Default::default(),
        };
        let err = ClientTls::from_files(&tls, &dir, &dir.join("bad.pem"), &dir.join("nope.key"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("bad.pem") && err.contains("no CERTIFICATE"), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
