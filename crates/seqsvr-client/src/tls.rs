//! Client-side mutual TLS for every channel this crate opens.
//!
//! A process has one identity (its certificate and key), so it is set once for the process
//! ([`set_process_tls`], at start, before any channel is opened); each channel then trusts the
//! CA bundle of the plane it dials ([`Plane`]) and checks the server's certificate for the name
//! of the role it means to reach (`alloc.<server_name>` or `store.<server_name>`: addresses are
//! IPs, and one CA issues both roles). Without it, channels are plaintext `http://`.
//! Rotation: an identity read from files ([`ClientTls::read`]) is checked against them at most
//! once a second ([`generation`]); when they changed and load, the new identity replaces the
//! old one and the generation moves on, and the crate's clients ([`crate::store::StoreClient`],
//! [`crate::seq::SeqClient`]) build new channels on their next call (calls already running
//! finish on the old connection). Files that do not load are logged and the old identity kept.

use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use seqsvr_core::config::TlsConfig;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{OnceLock, RwLock};
use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity};
use tonic::Status;

/// The plane a channel dials, which decides the CA bundle its server is checked against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Plane {
    /// An AllocSvr's `SeqService` (its certificate checked against `store_ca`).
    Client,
    /// A StoreSvr's `StoreService`/`StoreAdmin`: `store_ca`; any set's StoreSvr.
    Store,
    /// A StoreSvr of this set only (`store-<set>.<server_name>`): for clients that know which
    /// set they dial (an AllocSvr), so a store of another set cannot answer for this one.
    SetStore(seqsvr_core::ids::SetId),
}

/// A process's client identity and the CA bundles it trusts (PEM).
#[derive(Clone, PartialEq, Eq)]
pub struct ClientTls {
    pub server_name: String,
    pub cert_pem: Vec<u8>,
    pub key_pem: Vec<u8>,
    pub client_ca_pem: Vec<u8>,
    pub store_ca_pem: Vec<u8>,
    /// The files it was read from (cert, key, client CA, store CA), for rotation.
    pub files: Option<[std::path::PathBuf; 4]>,
}

impl std::fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.debug_struct("ClientTls").field("server_name", &self.server_name).finish_non_exhaustive()
    }
}

fn read(path: &Path) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
}

fn check_certs(path: &Path, pem: &[u8]) -> Result<(), String> {
    let n = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{}: {e}", path.display()))?
        .len();
    if n == 0 {
        return Err(format!("{}: no CERTIFICATE in the file", path.display()));
    }
    Ok(())
}

impl ClientTls {
    /// Reads the identity (`cert`, `key`) and the CA bundles a cluster file's `[tls]` names
    /// (relative to `cluster_dir`), and checks that they parse.
    pub fn from_files(
        tls: &TlsConfig,
        cluster_dir: &Path,
        cert: &Path,
        key: &Path,
    ) -> Result<ClientTls, String> {
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
    ) -> Result<ClientTls, String> {
        let cert_pem = read(cert)?;
        check_certs(cert, &cert_pem)?;
        let key_pem = read(key)?;
        let key_der = PrivateKeyDer::from_pem_slice(&key_pem)
            .map_err(|e| format!("{}: private key: {e}", key.display()))?;
        // The key must be the certificate's: a certificate renamed into place before its key
        // (a rotation half done) is refused here, not at the next handshake.
        let chain = CertificateDer::pem_slice_iter(&cert_pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("{}: {e}", cert.display()))?;
        let provider = rustls::crypto::ring::default_provider();
        rustls::sign::CertifiedKey::from_der(chain, key_der, &provider)
            .map_err(|e| format!("{} and {} are not a pair: {e}", cert.display(), key.display()))?;
        let bundle = |path: &Path| -> Result<Vec<u8>, String> {
            let pem = read(path)?;
            check_certs(path, &pem)?;
            Ok(pem)
        };
        Ok(ClientTls {
            server_name: server_name.to_string(),
            cert_pem,
            key_pem,
            client_ca_pem: bundle(client_ca)?,
            store_ca_pem: bundle(store_ca)?,
            files: Some([cert, key, client_ca, store_ca].map(Path::to_path_buf)),
        })
    }

    /// The tonic TLS settings for dialling `plane`.
    pub fn config(&self, plane: Plane) -> ClientTlsConfig {
        let (ca, name) = match plane {
            // AllocSvrs are store-plane members: their certificates chain to `store_ca`, and
            // the client bundle (which may hold the applications' CA) never vouches for one.
            Plane::Client => {
                (&self.store_ca_pem, seqsvr_core::config::alloc_server_name(&self.server_name))
            }
            Plane::Store => {
                (&self.store_ca_pem, seqsvr_core::config::store_server_name(&self.server_name))
            }
            Plane::SetStore(set) => (
                &self.store_ca_pem,
                seqsvr_core::config::set_store_server_name(&self.server_name, set),
            ),
        };
        ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(ca))
            .identity(Identity::from_pem(&self.cert_pem, &self.key_pem))
            .domain_name(name)
    }
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
/// channel from now on presents `cert`/`key`; without it, channels stay plaintext. A
/// certificate without `[tls]`, or `[tls]` without one, is an error (never silently ignored).
pub fn use_cluster_identity(
    tls: Option<&TlsConfig>,
    cluster_file: &Path,
    cert: Option<&Path>,
    key: Option<&Path>,
) -> Result<(), IdentityError> {
    let file = || cluster_file.display().to_string();
    match (tls, cert, key) {
        (None, None, None) => Ok(()),
        (None, _, _) => Err(IdentityError::NotAsked(file())),
        (Some(tls), Some(cert), Some(key)) => {
            let dir = cluster_file.parent().unwrap_or(Path::new(""));
            let client =
                ClientTls::from_files(tls, dir, cert, key).map_err(IdentityError::Files)?;
            set_process_tls(Some(client));
            Ok(())
        }
        (Some(_), _, _) => Err(IdentityError::Missing(file())),
    }
}

/// The process's identity, the files' bytes last looked at (loaded or not), when they were last
/// looked at, and the generation (bumped by every change).
struct ProcessTls {
    tls: Option<ClientTls>,
    seen: Vec<Vec<u8>>,
    checked: Option<std::time::Instant>,
    generation: u64,
}

static PROCESS_TLS: RwLock<ProcessTls> =
    RwLock::new(ProcessTls { tls: None, seen: Vec::new(), checked: None, generation: 0 });

/// What every call of [`generation`] reads without a lock: the generation (a copy of
/// `ProcessTls::generation`, written under its write lock), and when the files are due to be
/// looked at again (ns since [`clock_origin`]; `u64::MAX`: never, the identity has no files).
/// Between two looks, a call costs two atomic loads and a clock reading.
static GENERATION: AtomicU64 = AtomicU64::new(0);
static NEXT_CHECK_NS: AtomicU64 = AtomicU64::new(u64::MAX);

/// The instant `NEXT_CHECK_NS` counts from (the first time anyone asked).
fn clock_origin() -> std::time::Instant {
    static ORIGIN: OnceLock<std::time::Instant> = OnceLock::new();
    *ORIGIN.get_or_init(std::time::Instant::now)
}

fn nanos_since_origin(at: std::time::Instant) -> u64 {
    u64::try_from(at.saturating_duration_since(clock_origin()).as_nanos()).unwrap_or(u64::MAX - 1)
}

/// Publishes `p`'s generation and when its files are due next (call with the write lock held).
fn publish(p: &ProcessTls) {
    let next = match (p.tls.as_ref().and_then(|t| t.files.as_ref()), p.checked) {
        (Some(_), Some(checked)) => nanos_since_origin(checked + RELOAD_CHECK),
        (Some(_), None) => 0,
        (None, _) => u64::MAX,
    };
    // The generation first: a reader that sees the new check time (and so skips the files)
    // then sees this generation too, never the one before it.
    GENERATION.store(p.generation, Ordering::Release);
    NEXT_CHECK_NS.store(next, Ordering::Release);
}

/// How often the identity's files are looked at for a rotation.
pub const RELOAD_CHECK: std::time::Duration = std::time::Duration::from_secs(1);

/// The bytes an identity was built from, in the order of `ClientTls::files`.
fn bytes_of(tls: &ClientTls) -> Vec<Vec<u8>> {
    [&tls.cert_pem, &tls.key_pem, &tls.client_ca_pem, &tls.store_ca_pem].map(|b| b.to_vec()).into()
}

/// Sets (or, with `None`, clears) the TLS identity of every channel opened from now on.
pub fn set_process_tls(tls: Option<ClientTls>) {
    let mut p = PROCESS_TLS.write().unwrap_or_else(|e| e.into_inner());
    // What was loaded, not what the files hold now: a file replaced since is a change.
    p.seen = tls.as_ref().map(bytes_of).unwrap_or_default();
    p.tls = tls;
    p.checked = Some(std::time::Instant::now());
    p.generation += 1;
    publish(&p);
}

/// The process's TLS identity, if set.
pub fn process_tls() -> Option<ClientTls> {
    PROCESS_TLS.read().unwrap_or_else(|e| e.into_inner()).tls.clone()
}

/// The generation of the process's identity, after picking up a rotation of its files (their
/// contents compared once per [`RELOAD_CHECK`] at most, read outside the lock): a client whose
/// channels were built under an older generation builds new ones.
pub fn generation() -> u64 {
    // Every call of the SDK asks: between two looks at the files, no lock and no allocation.
    if nanos_since_origin(std::time::Instant::now()) < NEXT_CHECK_NS.load(Ordering::Acquire) {
        return GENERATION.load(Ordering::Acquire);
    }
    generation_after_looking()
}

/// [`generation`] once the files are due to be looked at.
fn generation_after_looking() -> u64 {
    let (files, server_name) = {
        let p = PROCESS_TLS.read().unwrap_or_else(|e| e.into_inner());
        let due = p.checked.is_none_or(|t| t.elapsed() >= RELOAD_CHECK);
        match p.tls.as_ref().and_then(|t| Some((t.files.clone()?, t.server_name.clone()))) {
            Some(found) if due => found,
            _ => return p.generation,
        }
    };
    {
        let mut p = PROCESS_TLS.write().unwrap_or_else(|e| e.into_inner());
        if p.checked.is_some_and(|t| t.elapsed() < RELOAD_CHECK) {
            return p.generation; // another caller is looking
        }
        p.checked = Some(std::time::Instant::now());
        publish(&p);
    }
    // Unreadable files (mid-rename) count as unchanged: looked at again next time.
    let Ok(now) = files.iter().map(std::fs::read).collect::<Result<Vec<_>, _>>() else {
        return PROCESS_TLS.read().unwrap_or_else(|e| e.into_inner()).generation;
    };
    {
        let p = PROCESS_TLS.read().unwrap_or_else(|e| e.into_inner());
        if now == p.seen {
            return p.generation;
        }
    }
    let [cert, key, client_ca, store_ca] = &files;
    let loaded = ClientTls::read(&server_name, cert, key, client_ca, store_ca);
    let mut p = PROCESS_TLS.write().unwrap_or_else(|e| e.into_inner());
    p.seen = now;
    match loaded {
        Ok(new) => {
            tracing::info!(cert = %files[0].display(), "client certificate files changed: new \
                connections use the new identity");
            p.tls = Some(new);
            p.generation += 1;
            publish(&p);
        }
        // Half-rotated (a key renamed in before its certificate): keep the old identity; said
        // once per change of the files.
        Err(e) => tracing::warn!(error = %e, "client certificate files changed but do not load: \
            the old identity is kept"),
    }
    p.generation
}

/// An endpoint for `addr` (`host:port`) on `plane`: `https://` with the process's TLS identity
/// when it has one, else `http://`.
pub fn endpoint(addr: &str, plane: Plane) -> Result<Endpoint, Status> {
    endpoint_with(addr, plane, process_tls().as_ref())
}

/// [`endpoint`] with an explicit identity instead of the process's (`None`: plaintext): for a
/// process that acts as more than one identity (the test harness acting as an AllocSvr).
pub fn endpoint_with(
    addr: &str,
    plane: Plane,
    tls: Option<&ClientTls>,
) -> Result<Endpoint, Status> {
    let bad =
        |e: tonic::transport::Error| Status::invalid_argument(format!("bad address {addr:?}: {e}"));
    match tls {
        Some(tls) => Endpoint::from_shared(format!("https://{addr}"))
            .map_err(bad)?
            .tls_config(tls.config(plane))
            .map_err(|e| Status::invalid_argument(format!("TLS settings for {addr}: {e}"))),
        None => Endpoint::from_shared(format!("http://{addr}")).map_err(bad),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_are_plaintext_without_tls_and_https_with_it() {
        // Not through the process-wide setting: other tests open channels in parallel.
        let e = endpoint_with("127.0.0.1:7001", Plane::Store, None).unwrap();
        assert_eq!(e.uri().scheme_str(), Some("http"));
        assert!(endpoint_with("not an address", Plane::Store, None).is_err());
        let broken = ClientTls {
            server_name: "seqsvr".into(),
            cert_pem: b"junk".to_vec(),
            key_pem: b"junk".to_vec(),
            client_ca_pem: vec![],
            store_ca_pem: vec![],
            files: None,
        };
        // tonic parses the identity when TLS is applied: https was attempted.
        let err = endpoint_with("127.0.0.1:7001", Plane::Client, Some(&broken)).unwrap_err();
        assert!(err.message().contains("TLS settings"), "{err:?}");
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
            identities: Default::default(),
        };
        let err = ClientTls::from_files(&tls, &dir, &dir.join("bad.pem"), &dir.join("nope.key"))
            .unwrap_err();
        assert!(err.contains("bad.pem") && err.contains("no CERTIFICATE"), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
