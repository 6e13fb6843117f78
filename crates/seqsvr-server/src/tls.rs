//! Mutual TLS for the three planes and the one place that decides who may call what.
//!
//! - [`ServerTls`]: the server's rustls configuration, built from its own certificate chain and
//!   key and the CA bundles of the planes it serves; it *requires* a client certificate (TLS 1.2
//!   or 1.3, ALPN `h2`). The files are re-read when their contents change (checked at most once a
//!   second, on a new connection), so certificates and CA bundles rotate without a restart; a set
//!   of files that does not load (say a key written before its certificate) is logged and the
//!   previous configuration kept. Open connections keep the configuration they started with.
//! - [`incoming`]: accepts TCP connections, runs each handshake in its own task (a slow or
//!   failing one never blocks the others) and yields [`TlsConn`]s for tonic's
//!   `serve_with_incoming(_shutdown)`. Each carries a [`PeerIdentity`] (the verified
//!   certificate's CN, DNS SANs and the planes whose CA bundle verified it), which tonic puts in
//!   every request's extensions.
//! - [`AuthLayer`]: a tower layer in front of every service that maps the gRPC path to the role
//!   (and plane, and set) it needs and answers `PERMISSION_DENIED` naming the identity and what it
//!   lacks. It hands the handler a [`Caller`] and writes an audit line for each admin-role call.
//! - [`client_tls_config`]: the tonic `ClientTlsConfig` for dialling a plane.
//!
//! Identities and roles come from the cluster file's `[tls]` ([`TlsConfig`]); changing them
//! needs a restart (the cluster file is read once).

use http::{Request, Response};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use rustls::server::danger::ClientCertVerifier;
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use seqsvr_core::config::{IdentityEntry, Role, TlsConfig};
use seqsvr_core::ids::SetId;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tonic::transport::server::Connected;

/// How often a server looks at its certificate files for a change (on a new connection).
pub const RELOAD_CHECK: Duration = Duration::from_secs(1);
/// A TLS handshake that takes longer is dropped.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Where the audit lines go (`RUST_LOG=seqsvr::audit=info` keeps only them).
pub const AUDIT_TARGET: &str = "seqsvr::audit";

/// One of the three trust planes, each with its own CA bundle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Plane {
    /// Clients and admins → AllocSvr (`SeqService`): `client_ca`.
    Client,
    /// AllocSvrs and admins → StoreSvr (`StoreService`, `StoreAdmin`): `store_ca`.
    Store,
    /// StoreSvr ↔ StoreSvr (`RaftTransport`): `peer_ca`.
    Peer,
}

impl Plane {
    pub fn ca_key(self) -> &'static str {
        match self {
            Plane::Client => "client_ca",
            Plane::Store => "store_ca",
            Plane::Peer => "peer_ca",
        }
    }
}

/// Which server is serving: decides the planes it trusts and the set its peers must belong to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ServerKind {
    /// Serves `SeqService` on the client plane.
    AllocSvr,
    /// Serves `StoreService` and `StoreAdmin` on the store plane, `RaftTransport` on the peer
    /// plane to the members of `set`.
    StoreSvr { set: SetId },
}

impl ServerKind {
    pub fn planes(self) -> &'static [Plane] {
        match self {
            ServerKind::AllocSvr => &[Plane::Client],
            ServerKind::StoreSvr { .. } => &[Plane::Store, Plane::Peer],
        }
    }
}

/// The files one process uses: its own certificate chain and key (its server identity, and its
/// client identity when it dials), the three CA bundles, and the name servers carry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub client_ca: PathBuf,
    pub store_ca: PathBuf,
    pub peer_ca: PathBuf,
    pub server_name: String,
}

impl TlsFiles {
    /// The `[tls]` paths resolved against `cluster_dir` (the cluster file's directory), with the
    /// process's own `cert` and `key` (`--tls-cert`, `--tls-key`).
    pub fn resolve(tls: &TlsConfig, cluster_dir: &Path, cert: PathBuf, key: PathBuf) -> TlsFiles {
        let at = |p: &str| cluster_dir.join(p);
        TlsFiles {
            cert,
            key,
            client_ca: at(&tls.client_ca),
            store_ca: at(&tls.store_ca),
            peer_ca: at(&tls.peer_ca),
            server_name: tls.server_name.clone(),
        }
    }

    pub fn ca(&self, plane: Plane) -> &Path {
        match plane {
            Plane::Client => &self.client_ca,
            Plane::Store => &self.store_ca,
            Plane::Peer => &self.peer_ca,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{path}: {what}")]
    Pem { path: PathBuf, what: String },
    #[error("TLS configuration: {0}")]
    Rustls(#[from] rustls::Error),
    #[error("TLS client verifier: {0}")]
    Verifier(#[from] rustls::server::VerifierBuilderError),
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read { path: path.to_path_buf(), source })
}

/// Every certificate of a PEM file (a chain or a CA bundle); at least one.
pub fn parse_certs(path: &Path, pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::Pem { path: path.to_path_buf(), what: e.to_string() })?;
    if certs.is_empty() {
        return Err(TlsError::Pem {
            path: path.to_path_buf(),
            what: "no CERTIFICATE in the file".into(),
        });
    }
    Ok(certs)
}

/// The private key of a PEM file (PKCS#8, PKCS#1 or SEC1).
pub fn parse_key(path: &Path, pem: &[u8]) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_slice(pem)
        .map_err(|e| TlsError::Pem { path: path.to_path_buf(), what: format!("private key: {e}") })
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn roots(path: &Path, pem: &[u8]) -> Result<RootCertStore, TlsError> {
    let mut store = RootCertStore::empty();
    for cert in parse_certs(path, pem)? {
        store.add(cert).map_err(|e| TlsError::Pem {
            path: path.to_path_buf(),
            what: format!("not a usable CA certificate: {e}"),
        })?;
    }
    Ok(store)
}

/// The contents of every file a server's configuration is built from, in a fixed order.
#[derive(Clone, PartialEq, Eq)]
struct Contents {
    cert: Vec<u8>,
    key: Vec<u8>,
    cas: Vec<(Plane, Vec<u8>)>,
}

impl Contents {
    fn read(files: &TlsFiles, planes: &[Plane]) -> Result<Contents, TlsError> {
        Ok(Contents {
            cert: read(&files.cert)?,
            key: read(&files.key)?,
            cas: planes
                .iter()
                .map(|&p| Ok((p, read(files.ca(p))?)))
                .collect::<Result<_, TlsError>>()?,
        })
    }
}

/// One loaded configuration: what handshakes use, and a verifier per plane to tell afterwards
/// which planes' CA bundles the client certificate chains to.
struct Loaded {
    config: Arc<ServerConfig>,
    planes: PlaneVerifiers,
}

/// One verifier per plane the server serves, each trusting only that plane's CA bundle.
type PlaneVerifiers = Arc<Vec<(Plane, Arc<dyn ClientCertVerifier>)>>;

fn build(files: &TlsFiles, c: &Contents) -> Result<Loaded, TlsError> {
    let provider = provider();
    let chain = parse_certs(&files.cert, &c.cert)?;
    let key = parse_key(&files.key, &c.key)?;
    let mut union = RootCertStore::empty();
    let mut planes = Vec::new();
    for (plane, pem) in &c.cas {
        let store = roots(files.ca(*plane), pem)?;
        union.roots.extend(store.roots.iter().cloned());
        let verifier =
            WebPkiClientVerifier::builder_with_provider(Arc::new(store), provider.clone())
                .build()?;
        planes.push((*plane, verifier));
    }
    // Required client authentication: the builder refuses anonymous clients by default.
    let verifier =
        WebPkiClientVerifier::builder_with_provider(Arc::new(union), provider.clone()).build()?;
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])?
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, key)?;
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Loaded { config: Arc::new(config), planes: Arc::new(planes) })
}

struct ReloadState {
    loaded: Loaded,
    /// The contents `loaded` was built from.
    contents: Contents,
    /// Contents that failed to load (logged once), so a bad set is not retried every second.
    failed: Option<Contents>,
    checked: Instant,
}

/// A server's TLS configuration, re-read when its files change.
pub struct ServerTls {
    files: TlsFiles,
    kind: ServerKind,
    state: Mutex<ReloadState>,
}

impl ServerTls {
    /// Reads and checks every file now: a server with unusable TLS files does not start.
    pub fn new(files: TlsFiles, kind: ServerKind) -> Result<Arc<ServerTls>, TlsError> {
        let contents = Contents::read(&files, kind.planes())?;
        let loaded = build(&files, &contents)?;
        Ok(Arc::new(ServerTls {
            files,
            kind,
            state: Mutex::new(ReloadState {
                loaded,
                contents,
                failed: None,
                checked: Instant::now(),
            }),
        }))
    }

    pub fn kind(&self) -> ServerKind {
        self.kind
    }

    /// The configuration for a new handshake, after looking for changed files if the last look
    /// was [`RELOAD_CHECK`] ago.
    fn current(&self) -> (Arc<ServerConfig>, PlaneVerifiers) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if state.checked.elapsed() >= RELOAD_CHECK {
            state.checked = Instant::now();
            self.reload(&mut state);
        }
        (state.loaded.config.clone(), state.loaded.planes.clone())
    }

    fn reload(&self, state: &mut ReloadState) {
        let contents = match Contents::read(&self.files, self.kind.planes()) {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "TLS files unreadable; keeping the loaded certificates");
                return;
            }
        };
        if contents == state.contents || state.failed.as_ref() == Some(&contents) {
            return;
        }
        match build(&self.files, &contents) {
            Ok(loaded) => {
                tracing::info!(cert = %self.files.cert.display(),
                    "TLS files changed: new connections use the new certificates");
                state.loaded = loaded;
                state.contents = contents;
                state.failed = None;
            }
            Err(e) => {
                tracing::warn!(error = %e,
                    "TLS files changed but do not load; keeping the previous certificates");
                state.failed = Some(contents);
            }
        }
    }
}

/// Who is at the other end of a connection, as its verified certificate says. Tonic puts it in
/// the extensions of every request of the connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerIdentity {
    pub remote_addr: Option<SocketAddr>,
    /// The certificate's subject common name.
    pub cn: Option<String>,
    /// Its DNS subject alternative names.
    pub dns_sans: Vec<String>,
    /// The planes whose CA bundle the certificate chains to (at handshake time).
    pub planes: Vec<Plane>,
}

impl PeerIdentity {
    /// All names, CN first, for messages.
    pub fn names(&self) -> Vec<String> {
        self.cn.iter().cloned().chain(self.dns_sans.iter().cloned()).collect()
    }
}

/// The CN and DNS SANs of a DER certificate.
pub fn certificate_names(der: &[u8]) -> Result<(Option<String>, Vec<String>), String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).map_err(|e| e.to_string())?;
    let cn =
        cert.subject().iter_common_name().next().and_then(|a| a.as_str().ok()).map(str::to_string);
    let mut sans = Vec::new();
    if let Ok(Some(ext)) = cert.subject_alternative_name() {
        for name in &ext.value.general_names {
            if let x509_parser::extensions::GeneralName::DNSName(dns) = name {
                sans.push(dns.to_string());
            }
        }
    }
    Ok((cn, sans))
}

/// A TLS connection a server accepted, with the identity of its client.
pub struct TlsConn {
    inner: tokio_rustls::server::TlsStream<TcpStream>,
    peer: PeerIdentity,
}

impl TlsConn {
    pub fn peer(&self) -> &PeerIdentity {
        &self.peer
    }
}

impl Connected for TlsConn {
    type ConnectInfo = PeerIdentity;

    fn connect_info(&self) -> PeerIdentity {
        self.peer.clone()
    }
}

impl AsyncRead for TlsConn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for TlsConn {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// One handshake: the TLS exchange (client certificate required and verified), then the
/// identity read from the verified certificate.
async fn handshake(tls: &ServerTls, tcp: TcpStream, remote: SocketAddr) -> Result<TlsConn, String> {
    let _ = tcp.set_nodelay(true);
    set_tcp_keepalive(&tcp);
    let (config, planes) = tls.current();
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    let stream = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return Err(format!("handshake failed: {e}")),
        Err(_) => return Err("handshake timed out".into()),
    };
    let (_, session) = stream.get_ref();
    let chain = match session.peer_certificates() {
        Some(c) if !c.is_empty() => c,
        // Unreachable with a verifier that requires a certificate; refuse all the same.
        _ => return Err("no client certificate".into()),
    };
    let (end_entity, intermediates) = (&chain[0], &chain[1..]);
    let now = UnixTime::now();
    let verified: Vec<Plane> = planes
        .iter()
        .filter(|(_, v)| v.verify_client_cert(end_entity, intermediates, now).is_ok())
        .map(|(p, _)| *p)
        .collect();
    let (cn, dns_sans) = certificate_names(end_entity.as_ref())
        .map_err(|e| format!("unreadable client certificate: {e}"))?;
    Ok(TlsConn {
        inner: stream,
        peer: PeerIdentity { remote_addr: Some(remote), cn, dns_sans, planes: verified },
    })
}

/// The accepted, handshaken connections of `listener`, for
/// `tonic::transport::Server::serve_with_incoming(_shutdown)`. Failed handshakes are logged and
/// dropped; the stream ends when tonic drops it.
pub fn incoming(
    listener: TcpListener,
    tls: Arc<ServerTls>,
) -> tokio_stream::wrappers::ReceiverStream<Result<TlsConn, std::io::Error>> {
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                _ = tx.closed() => return,
                a = listener.accept() => a,
            };
            let (tcp, remote) = match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors and the like: wait instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let (tls, tx) = (tls.clone(), tx.clone());
            tokio::spawn(async move {
                match handshake(&tls, tcp, remote).await {
                    Ok(conn) => {
                        tracing::debug!(%remote, cn = ?conn.peer.cn, planes = ?conn.peer.planes,
                            "TLS connection");
                        let _ = tx.send(Ok(conn)).await;
                    }
                    Err(e) => tracing::warn!(%remote, "refused a TLS connection: {e}"),
                }
            });
        }
    });
    tokio_stream::wrappers::ReceiverStream::new(rx)
}

/// The authorised caller of a request, for handlers (put in the request extensions by
/// [`AuthLayer`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caller {
    /// The name `[tls.identities]` knows the certificate by.
    pub name: String,
    pub role: Role,
    pub set: Option<SetId>,
}

/// One way to be allowed a call: a certificate from `plane`'s CA bundle whose identity has
/// `role` (and, for a peer, belongs to `set`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grant {
    pub plane: Plane,
    pub role: Role,
    pub set: Option<SetId>,
}

impl Grant {
    const fn of(plane: Plane, role: Role) -> Grant {
        Grant { plane, role, set: None }
    }

    const fn peer(set: SetId) -> Grant {
        Grant { plane: Plane::Peer, role: Role::Peer, set: Some(set) }
    }

    const fn alloc_of(set: SetId) -> Grant {
        Grant { plane: Plane::Store, role: Role::Alloc, set: Some(set) }
    }

    /// Does an identity with `entry` fit this grant? A grant for a set needs an identity of that
    /// set; an `alloc` identity that names no set (written before allocs named theirs) may act
    /// in any set.
    fn fits(&self, entry: &IdentityEntry) -> bool {
        self.role == entry.role()
            && match (self.set, entry.set()) {
                (None, _) => true,
                (Some(want), Some(have)) => want == have,
                (Some(_), None) => entry.role() == Role::Alloc,
            }
    }

    fn text(&self) -> String {
        match self.set {
            Some(set) => format!("{} of set {set}", self.role),
            None => self.role.to_string(),
        }
    }
}

/// What a call needs of its caller.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Need {
    /// Any verified certificate (health, reflection).
    AnyVerified,
    /// One of these grants.
    OneOf(Vec<Grant>),
}

/// The rule for `Service/Method` (the gRPC path without its leading '/') on a server of
/// `kind`; `None` for a service this table does not know (refused).
pub fn need_for(kind: ServerKind, call: &str) -> Option<Need> {
    let service = call.split('/').next().unwrap_or_default();
    let one_of = |grants: &[Grant]| Some(Need::OneOf(grants.to_vec()));
    match (kind, service) {
        (
            _,
            "grpc.health.v1.Health"
            | "grpc.reflection.v1.ServerReflection"
            | "grpc.reflection.v1alpha.ServerReflection",
        ) => Some(Need::AnyVerified),
        (ServerKind::AllocSvr, "seqsvr.v1.SeqService" | "seqsvr.v1.IdService") => {
            one_of(&[Grant::of(Plane::Client, Role::Client), Grant::of(Plane::Client, Role::Admin)])
        }
        // `seqctl store get/advance` use StoreService as an admin; an AllocSvr only in its own
        // set, and that it acts only for its own registration is checked by the handler
        // (`alloc_identity`, then the store's `ControlState::check_holder`).
        (ServerKind::StoreSvr { set }, "seqsvr.v1.StoreService") => {
            one_of(&[Grant::alloc_of(set), Grant::of(Plane::Store, Role::Admin)])
        }
        // A member starting a new set asks its peers' Status (lib.rs::refuse_new_if_the_set_exists).
        (ServerKind::StoreSvr { set }, "seqsvr.v1.StoreAdmin")
            if call == "seqsvr.v1.StoreAdmin/Status" =>
        {
            one_of(&[Grant::of(Plane::Store, Role::Admin), Grant::peer(set)])
        }
        (ServerKind::StoreSvr { .. }, "seqsvr.v1.StoreAdmin") => {
            one_of(&[Grant::of(Plane::Store, Role::Admin)])
        }
        (ServerKind::StoreSvr { set }, "seqsvr.v1.RaftTransport") => one_of(&[Grant::peer(set)]),
        _ => None,
    }
}

fn describe(name: &str, entry: &IdentityEntry) -> String {
    match entry.set() {
        Some(set) => format!("identity {name:?} (role {} of set {set})", entry.role()),
        None => format!("identity {name:?} (role {})", entry.role()),
    }
}

/// The decision for one call: the caller (when the identity is known) or the refusal message.
/// `call` is `Service/Method`, as it appears in messages.
pub fn authorize(
    tls: &TlsConfig,
    kind: ServerKind,
    peer: &PeerIdentity,
    call: &str,
) -> Result<Option<Caller>, String> {
    let resolved = tls.resolve_identity(peer.cn.as_deref(), &peer.dns_sans);
    let caller = resolved.as_ref().ok().map(|(name, e)| Caller {
        name: name.clone(),
        role: e.role(),
        set: e.set(),
    });
    let grants = match need_for(kind, call) {
        Some(Need::AnyVerified) => return Ok(caller),
        Some(Need::OneOf(grants)) => grants,
        None => return Err(format!("{call}: no such service on this server")),
    };
    let (name, entry) = match resolved {
        Ok(found) => found,
        Err(e) => {
            let shown =
                peer.cn.clone().or_else(|| peer.dns_sans.first().cloned()).unwrap_or_default();
            return Err(format!("identity {shown:?} may not call {call}: {e}"));
        }
    };
    // Every call of every RPC comes here: the messages are only made for a refusal.
    let mut fits = grants.iter().filter(|g| g.fits(&entry)).peekable();
    let Some(first_fit) = fits.peek().copied() else {
        let needs: Vec<String> = grants.iter().map(Grant::text).collect();
        let who = describe(&name, &entry);
        return Err(format!("{who} may not call {call}: needs role {}", needs.join(" or ")));
    };
    if !fits.any(|g| peer.planes.contains(&g.plane)) {
        let who = describe(&name, &entry);
        return Err(format!(
            "{who} may not call {call}: its certificate is not issued by a CA of {} \
             (this plane's bundle)",
            first_fit.plane.ca_key()
        ));
    }
    Ok(caller)
}

/// The tower layer that authorises every call (see [`authorize`]). Add it with
/// `Server::builder().layer(AuthLayer::new(..))`; requests without a [`PeerIdentity`] (a
/// plaintext connection) are refused.
#[derive(Clone)]
pub struct AuthLayer {
    /// None: a plaintext server (no `[tls]`), every call passes.
    rules: Option<(Arc<TlsConfig>, ServerKind)>,
}

impl AuthLayer {
    pub fn new(tls: Arc<TlsConfig>, kind: ServerKind) -> AuthLayer {
        AuthLayer { rules: Some((tls, kind)) }
    }

    /// For a server without `[tls]`: lets every call through (there is no identity to check).
    pub fn plaintext() -> AuthLayer {
        AuthLayer { rules: None }
    }
}

impl<S> tower_layer::Layer<S> for AuthLayer {
    type Service = Auth<S>;

    fn layer(&self, inner: S) -> Auth<S> {
        Auth { inner, rules: self.rules.clone() }
    }
}

#[derive(Clone)]
pub struct Auth<S> {
    inner: S,
    rules: Option<(Arc<TlsConfig>, ServerKind)>,
}

type BoxFuture<T> = Pin<Box<dyn std::future::Future<Output = T> + Send + 'static>>;

impl<S, ReqBody, ResBody> tower_service::Service<Request<ReqBody>> for Auth<S>
where
    S: tower_service::Service<Request<ReqBody>, Response = Response<ResBody>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    ReqBody: Send + 'static,
    ResBody: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    ResBody::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Response = Response<tonic::body::Body>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Response<tonic::body::Body>, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<ReqBody>) -> Self::Future {
        let Some((tls, kind)) = &self.rules else {
            let future = self.inner.call(req);
            return Box::pin(async move {
                let (parts, body) = future.await?.into_parts();
                Ok(Response::from_parts(parts, tonic::body::Body::new(body)))
            });
        };
        // Borrowed, not cloned: this runs for every RPC.
        let path = req.uri().path().trim_start_matches('/');
        let peer = req.extensions().get::<PeerIdentity>();
        let decision = match peer {
            Some(peer) => authorize(tls, *kind, peer, path),
            None => Err(format!("may not call {path}: not a verified TLS connection")),
        };
        let remote = peer.and_then(|p| p.remote_addr);
        let caller = match decision {
            Ok(caller) => caller,
            Err(message) => {
                tracing::warn!(target: AUDIT_TARGET, remote = ?remote, "PERMISSION_DENIED: {message}");
                let response = tonic::Status::permission_denied(message).into_http();
                return Box::pin(std::future::ready(Ok(response)));
            }
        };
        let audit = caller.as_ref().filter(|c| c.role == Role::Admin).map(|c| Audit {
            who: c.name.clone(),
            what: path.to_string(),
            remote,
            done: false,
        });
        if let Some(c) = caller {
            req.extensions_mut().insert(c);
        }
        let future = self.inner.call(req);
        Box::pin(async move {
            let response = future.await?;
            let (parts, body) = response.into_parts();
            let body = match audit {
                Some(mut audit) => {
                    // A trailers-only answer (most refusals) has its status in the headers.
                    if let Some(code) = parts.headers.get("grpc-status") {
                        audit.log(code.to_str().unwrap_or("?"));
                    }
                    tonic::body::Body::new(AuditBody { inner: tonic::body::Body::new(body), audit })
                }
                None => tonic::body::Body::new(body),
            };
            Ok(Response::from_parts(parts, body))
        })
    }
}

/// For handlers, on top of the path's rule: `what` (e.g. an unfenced advance) is an admin's
/// only. A request without a [`Caller`] came over a plaintext server (no `[tls]`), where
/// there is no identity to check: it passes, as everything does there.
pub fn require_admin<T>(request: &tonic::Request<T>, what: &str) -> Result<(), tonic::Status> {
    match request.extensions().get::<Caller>() {
        None => Ok(()),
        Some(c) if c.role == Role::Admin => Ok(()),
        Some(c) => Err(refuse(c, what, "needs role admin")),
    }
}

/// A handler's refusal of `caller` for `what`: logged to the audit target, PERMISSION_DENIED
/// naming the identity, its role and `why`.
fn refuse(caller: &Caller, what: &str, why: &str) -> tonic::Status {
    let message =
        format!("identity {:?} (role {}) may not make {what}: {why}", caller.name, caller.role);
    tracing::warn!(target: AUDIT_TARGET, "PERMISSION_DENIED: {message}");
    tonic::Status::permission_denied(message)
}

/// For the StoreService calls an AllocSvr makes for its own registration (register, heartbeat,
/// fenced advance, release): the caller's identity, which the store checks against the one that
/// registered (`ControlState::check_holder`). `None` over plaintext. Any role but `alloc` is
/// refused: an admin has no registration of its own, and acting for another's — a release
/// above all, which lets its sections move before its lease ends — would break I3.
pub fn alloc_identity<T>(
    request: &tonic::Request<T>,
    what: &str,
) -> Result<Option<String>, tonic::Status> {
    match request.extensions().get::<Caller>() {
        None => Ok(None),
        Some(c) if c.role == Role::Alloc => Ok(Some(c.name.clone())),
        Some(c) => {
            Err(refuse(c, what, "only an AllocSvr (role alloc) does, for its own registration"))
        }
    }
}

/// One admin call's audit line, written once its gRPC status is known (or it is dropped).
struct Audit {
    who: String,
    what: String,
    remote: Option<SocketAddr>,
    done: bool,
}

impl Audit {
    fn log(&mut self, status: &str) {
        if self.done {
            return;
        }
        self.done = true;
        let result = status
            .parse::<i32>()
            .map(|c| format!("{:?}", tonic::Code::from_i32(c)))
            .unwrap_or_else(|_| status.to_string());
        tracing::info!(target: AUDIT_TARGET, who = %self.who, what = %self.what,
            remote = ?self.remote, result = %result, "admin call");
    }
}

impl Drop for Audit {
    fn drop(&mut self) {
        self.log("cancelled before its status");
    }
}

/// The response body of an admin call: watches for the trailers that carry its gRPC status.
struct AuditBody {
    inner: tonic::body::Body,
    audit: Audit,
}

impl http_body::Body for AuditBody {
    type Data = bytes::Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<bytes::Bytes>, tonic::Status>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(frame))) = &polled {
            if let Some(code) = frame.trailers_ref().and_then(|t| t.get("grpc-status")) {
                let code = code.to_str().unwrap_or("?").to_string();
                self.audit.log(&code);
            }
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// The client side for dialling `plane`: trust the CA bundle of the plane's servers, present
/// this process's certificate, and check the server's certificate for the name of the role that
/// serves the plane (`alloc.<server_name>` on the client plane, `store.<server_name>` on the
/// store and peer planes; addresses are IPs, and one CA may issue every role). Files are read
/// now ([`ReloadingClientTls`] follows them). `set`: the set of the StoreSvr dialled, when known (a member dialling its peers): then
/// only that set's certificates (`store-<set>.<server_name>`) are accepted.
pub fn client_tls_config(
    files: &TlsFiles,
    plane: Plane,
    set: Option<SetId>,
) -> Result<tonic::transport::ClientTlsConfig, TlsError> {
    let contents = ClientContents::read(files, plane)?;
    client_config_of(files, plane, set, &contents)
}

/// The files a client configuration is built from: the CA bundle of the plane's server, this
/// process's certificate and key.
#[derive(Clone, PartialEq, Eq)]
struct ClientContents {
    ca: Vec<u8>,
    cert: Vec<u8>,
    key: Vec<u8>,
}

impl ClientContents {
    /// An AllocSvr (the client plane's server) is a store-plane member: its certificate is
    /// checked against the store plane's bundle, never the client bundle (which may hold the
    /// applications' CA).
    fn ca_plane(plane: Plane) -> Plane {
        match plane {
            Plane::Client => Plane::Store,
            other => other,
        }
    }

    fn read(files: &TlsFiles, plane: Plane) -> Result<ClientContents, TlsError> {
        Ok(ClientContents {
            ca: read(files.ca(Self::ca_plane(plane)))?,
            cert: read(&files.cert)?,
            key: read(&files.key)?,
        })
    }
}

fn client_config_of(
    files: &TlsFiles,
    plane: Plane,
    set: Option<SetId>,
    c: &ClientContents,
) -> Result<tonic::transport::ClientTlsConfig, TlsError> {
    parse_certs(files.ca(ClientContents::ca_plane(plane)), &c.ca)?;
    let chain = parse_certs(&files.cert, &c.cert)?;
    let key = parse_key(&files.key, &c.key)?;
    // The key must be the certificate's (tonic would only find out at the handshake): a
    // certificate renamed into place before its key is a pair that does not load yet.
    rustls::sign::CertifiedKey::from_der(chain, key, &provider())?;
    Ok(tonic::transport::ClientTlsConfig::new()
        .ca_certificate(tonic::transport::Certificate::from_pem(&c.ca))
        .identity(tonic::transport::Identity::from_pem(&c.cert, &c.key))
        .domain_name(match (plane, set) {
            (Plane::Client, _) => seqsvr_core::config::alloc_server_name(&files.server_name),
            (Plane::Store | Plane::Peer, Some(set)) => {
                seqsvr_core::config::set_store_server_name(&files.server_name, set)
            }
            (Plane::Store | Plane::Peer, None) => {
                seqsvr_core::config::store_server_name(&files.server_name)
            }
        }))
}

/// A client configuration rebuilt when its files change (rotation of a member's certificate
/// for the connections it dials): [`ReloadingClientTls::current`] looks at the files at most
/// once per [`RELOAD_CHECK`]; files that do not load are logged and the old ones kept.
pub struct ReloadingClientTls {
    files: TlsFiles,
    plane: Plane,
    set: Option<SetId>,
    state: Mutex<ClientReloadState>,
}

struct ClientReloadState {
    config: tonic::transport::ClientTlsConfig,
    contents: ClientContents,
    failed: Option<ClientContents>,
    checked: Instant,
    generation: u64,
}

impl ReloadingClientTls {
    /// Reads and checks the files now (a member with unusable files does not start).
    pub fn new(
        files: TlsFiles,
        plane: Plane,
        set: Option<SetId>,
    ) -> Result<Arc<ReloadingClientTls>, TlsError> {
        let contents = ClientContents::read(&files, plane)?;
        let config = client_config_of(&files, plane, set, &contents)?;
        let state = ClientReloadState {
            config,
            contents,
            failed: None,
            checked: Instant::now(),
            generation: 0,
        };
        Ok(Arc::new(ReloadingClientTls { files, plane, set, state: Mutex::new(state) }))
    }

    /// The configuration for new connections and its generation (bumped by every change).
    pub fn current(&self) -> (u64, tonic::transport::ClientTlsConfig) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if state.checked.elapsed() >= RELOAD_CHECK {
            state.checked = Instant::now();
            match ClientContents::read(&self.files, self.plane) {
                Ok(c) if c == state.contents || state.failed.as_ref() == Some(&c) => {}
                Ok(c) => match client_config_of(&self.files, self.plane, self.set, &c) {
                    Ok(config) => {
                        tracing::info!(cert = %self.files.cert.display(),
                            "client TLS files changed: new connections use the new certificate");
                        state.config = config;
                        state.contents = c;
                        state.failed = None;
                        state.generation += 1;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "client TLS files changed but do not load; \
                            keeping the previous certificate");
                        state.failed = Some(c);
                    }
                },
                Err(e) => tracing::warn!(error = %e,
                    "client TLS files unreadable; keeping the loaded certificate"),
            }
        }
        (state.generation, state.config.clone())
    }
}

/// A server's transport security, from the cluster file's `[tls]` and its own
/// `--tls-cert/--tls-key`: what [`ServeExt::serve_maybe_tls`] and [`auth_layer`] take.
#[derive(Clone, Debug)]
pub struct TlsSetup {
    pub config: Arc<TlsConfig>,
    pub files: TlsFiles,
    pub kind: ServerKind,
}

impl TlsSetup {
    /// Secure by default: without `[tls]` a server refuses to start unless told `insecure`
    /// (`--insecure`), and then it is `None` (plaintext). With `[tls]`, the process's
    /// certificate and key are required, and `insecure` is refused (it would be silently
    /// ignored); giving a certificate without `[tls]` is refused too. Reads nothing:
    /// [`ServerTls::new`] does when the server starts.
    pub fn from_cluster(
        tls: Option<&TlsConfig>,
        cluster_file: &Path,
        cert: Option<&Path>,
        key: Option<&Path>,
        kind: ServerKind,
        insecure: bool,
    ) -> anyhow::Result<Option<TlsSetup>> {
        match (tls, cert, key) {
            (Some(_), _, _) if insecure => anyhow::bail!(
                "--insecure given, but {} has a [tls] section: remove one of them",
                cluster_file.display()
            ),
            (None, None, None) if insecure => Ok(None),
            (None, None, None) => anyhow::bail!(
                "{} has no [tls] section: refusing to serve without mutual TLS. Make a PKI and \
                 the section with `seqctl certs init`, or pass --insecure (SEQSVR_INSECURE=1) to \
                 serve plaintext to anyone who can reach the port, with no role checks",
                cluster_file.display()
            ),
            (None, _, _) => anyhow::bail!(
                "--tls-cert/--tls-key given, but {} has no [tls] section",
                cluster_file.display()
            ),
            (Some(tls), Some(cert), Some(key)) => {
                let dir = cluster_file.parent().unwrap_or(Path::new(""));
                Ok(Some(TlsSetup {
                    config: Arc::new(tls.clone()),
                    files: TlsFiles::resolve(tls, dir, cert.to_path_buf(), key.to_path_buf()),
                    kind,
                }))
            }
            (Some(_), _, _) => anyhow::bail!(
                "{} has a [tls] section: this process needs its certificate and key \
                 (--tls-cert/--tls-key or SEQSVR_TLS_CERT/SEQSVR_TLS_KEY)",
                cluster_file.display()
            ),
        }
    }
}

/// The role check for a server: [`AuthLayer::new`] with TLS, [`AuthLayer::plaintext`] without.
pub fn auth_layer(setup: Option<&TlsSetup>) -> AuthLayer {
    match setup {
        Some(s) => AuthLayer::new(s.config.clone(), s.kind),
        None => AuthLayer::plaintext(),
    }
}

/// TCP keepalive on every accepted connection (both servers, TLS or not): a peer that vanished
/// without a FIN is noticed even while no HTTP/2 PING is due.
pub const TCP_KEEPALIVE: Duration = Duration::from_secs(60);

fn set_tcp_keepalive(tcp: &TcpStream) {
    let keepalive = socket2::TcpKeepalive::new().with_time(TCP_KEEPALIVE);
    if let Err(e) = socket2::SockRef::from(tcp).set_tcp_keepalive(&keepalive) {
        tracing::debug!(error = %e, "could not set TCP keepalive");
    }
}

/// Serving a tonic router over TLS when set up, else over plain TCP (with a loud warning).
/// Tonic ignores the builder's `tcp_keepalive` with an incoming stream of our own, so it is set
/// here on each accepted socket ([`TCP_KEEPALIVE`]).
pub trait ServeExt {
    fn serve_maybe_tls<F: std::future::Future<Output = ()>>(
        self,
        listener: TcpListener,
        setup: Option<&TlsSetup>,
        signal: F,
    ) -> impl std::future::Future<Output = anyhow::Result<()>>;
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl<L, ResBody> ServeExt for tonic::transport::server::Router<L>
where
    L: tower_layer::Layer<tonic::service::Routes>,
    L::Service: tower_service::Service<Request<tonic::body::Body>, Response = Response<ResBody>>
        + Clone
        + Send
        + 'static,
    <L::Service as tower_service::Service<Request<tonic::body::Body>>>::Future: Send,
    <L::Service as tower_service::Service<Request<tonic::body::Body>>>::Error:
        Into<BoxError> + Send,
    ResBody: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    async fn serve_maybe_tls<F: std::future::Future<Output = ()>>(
        self,
        listener: TcpListener,
        setup: Option<&TlsSetup>,
        signal: F,
    ) -> anyhow::Result<()> {
        // 1 while this server serves plaintext (`--insecure`): an alert rule's whole input.
        metrics::gauge!("seqsvr_insecure").set(if setup.is_none() { 1.0 } else { 0.0 });
        match setup {
            Some(setup) => {
                let server = ServerTls::new(setup.files.clone(), setup.kind)?;
                tracing::info!(cert = %setup.files.cert.display(), planes = ?setup.kind.planes(),
                    "serving over mutual TLS");
                self.serve_with_incoming_shutdown(incoming(listener, server), signal).await?;
            }
            None => {
                tracing::warn!(
                    "INSECURE (--insecure): the cluster file has no [tls] section, so this server \
                     accepts plaintext connections from anyone who can reach its port, with no \
                     role check (see `seqctl certs init`); seqsvr_insecure is 1"
                );
                let incoming = tonic::transport::server::TcpIncoming::from(listener)
                    .with_nodelay(Some(true))
                    .with_keepalive(Some(TCP_KEEPALIVE));
                self.serve_with_incoming_shutdown(incoming, signal).await?;
            }
        }
        Ok(())
    }
}

/// An endpoint for `addr` (`host:port`): `https://` with `tls` when given, else `http://`.
pub fn endpoint(
    addr: &str,
    tls: Option<&tonic::transport::ClientTlsConfig>,
) -> Result<tonic::transport::Endpoint, tonic::transport::Error> {
    match tls {
        Some(tls) => tonic::transport::Endpoint::from_shared(format!("https://{addr}"))?
            .tls_config(tls.clone()),
        None => tonic::transport::Endpoint::from_shared(format!("http://{addr}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tls_config() -> TlsConfig {
        let text = r#"
[[sets]]
id = 0
uid_begin = 0
uid_end = 100000
stores = [{ id = 1, addr = "127.0.0.1:7001" }]
[[sets]]
id = 1
uid_begin = 100000
uid_end = 200000
stores = [{ id = 1, addr = "127.0.0.1:7101" }]
[tls]
server_name = "seqsvr"
client_ca = "c.pem"
store_ca = "s.pem"
peer_ca = "p.pem"
[tls.identities]
"app-1" = "client"
"alloc" = "alloc"
"admin" = "admin"
"store-0" = { role = "peer", set = 0 }
"store-1" = { role = "peer", set = 1 }
"#;
        seqsvr_core::config::ClusterConfig::from_toml_str(text).unwrap().tls.unwrap()
    }

    fn peer(cn: &str, planes: &[Plane]) -> PeerIdentity {
        PeerIdentity {
            remote_addr: None,
            cn: Some(cn.into()),
            dns_sans: vec!["seqsvr".into()],
            planes: planes.to_vec(),
        }
    }

    const STORE0: ServerKind = ServerKind::StoreSvr { set: SetId(0) };
    const ALL: &[Plane] = &[Plane::Client, Plane::Store, Plane::Peer];

    fn check(kind: ServerKind, p: &PeerIdentity, path: &str) -> Result<Option<Caller>, String> {
        authorize(&tls_config(), kind, p, path)
    }

    #[test]
    fn each_service_needs_its_role() {
        let admin = peer("admin", ALL);
        let client = peer("app-1", ALL);
        let alloc = peer("alloc", ALL);
        let err = check(STORE0, &client, "seqsvr.v1.StoreAdmin/MoveSections").unwrap_err();
        assert_eq!(
            err,
            "identity \"app-1\" (role client) may not call seqsvr.v1.StoreAdmin/MoveSections: \
             needs role admin"
        );
        assert!(check(STORE0, &client, "seqsvr.v1.StoreService/AdvanceMaxSeq").is_err());
        assert!(check(STORE0, &alloc, "seqsvr.v1.StoreAdmin/Status").is_err());
        assert!(check(STORE0, &alloc, "seqsvr.v1.RaftTransport/Send").is_err());
        let caller = check(STORE0, &admin, "seqsvr.v1.StoreAdmin/Status").unwrap().unwrap();
        assert_eq!((caller.name.as_str(), caller.role), ("admin", Role::Admin));
        assert!(check(STORE0, &alloc, "seqsvr.v1.StoreService/Heartbeat").is_ok());
        assert!(check(ServerKind::AllocSvr, &client, "seqsvr.v1.SeqService/Next").is_ok());
        assert!(check(ServerKind::AllocSvr, &admin, "seqsvr.v1.SeqService/Next").is_ok());
        assert!(check(ServerKind::AllocSvr, &alloc, "seqsvr.v1.SeqService/Next").is_err());
        // A service the server does not run is refused, not passed through.
        assert!(check(ServerKind::AllocSvr, &admin, "seqsvr.v1.StoreAdmin/Status").is_err());
        assert!(check(STORE0, &admin, "other.Thing/Do").is_err());
    }

    #[test]
    fn peers_only_of_the_same_set_and_only_on_the_peer_plane() {
        assert!(check(STORE0, &peer("store-0", ALL), "seqsvr.v1.RaftTransport/Send").is_ok());
        let err = check(STORE0, &peer("store-1", ALL), "seqsvr.v1.RaftTransport/Send").unwrap_err();
        assert!(err.contains("role peer of set 1") && err.contains("needs role peer of set 0"));
        let err = check(STORE0, &peer("store-0", &[Plane::Store]), "seqsvr.v1.RaftTransport/Send")
            .unwrap_err();
        assert!(err.contains("peer_ca"), "{err}");
        // Members ask their peers' Status before creating a set; other admin calls stay admin's.
        assert!(check(STORE0, &peer("store-0", ALL), "seqsvr.v1.StoreAdmin/Status").is_ok());
        let err = check(STORE0, &peer("store-1", ALL), "seqsvr.v1.StoreAdmin/Status").unwrap_err();
        assert!(err.contains("needs role admin or peer of set 0"), "{err}");
        assert!(check(STORE0, &peer("store-0", ALL), "seqsvr.v1.StoreAdmin/MoveSections").is_err());
    }

    #[test]
    fn only_an_admin_passes_require_admin() {
        let mut request = tonic::Request::new(());
        assert!(require_admin(&request, "x").is_ok(), "plaintext: no caller, nothing to check");
        let alloc = Caller { name: "alloc-0-1".into(), role: Role::Alloc, set: None };
        request.extensions_mut().insert(alloc);
        let err = require_admin(&request, "an unfenced advance (alloc_id 0)").unwrap_err();
        assert_eq!(err.code(), tonic::Code::PermissionDenied);
        assert_eq!(
            err.message(),
            "identity \"alloc-0-1\" (role alloc) may not make an unfenced advance (alloc_id 0): \
             needs role admin"
        );
        request.extensions_mut().insert(Caller {
            name: "admin".into(),
            role: Role::Admin,
            set: None,
        });
        assert!(require_admin(&request, "x").is_ok());
    }

    #[test]
    fn unknown_identities_get_health_only() {
        let stranger = peer("stranger", ALL);
        assert_eq!(check(STORE0, &stranger, "grpc.health.v1.Health/Check"), Ok(None));
        let err = check(STORE0, &stranger, "seqsvr.v1.StoreService/GetMaxSeq").unwrap_err();
        assert!(
            err.starts_with("identity \"stranger\" may not call seqsvr.v1.StoreService/GetMaxSeq")
                && err.contains("is in [tls.identities]"),
            "{err}"
        );
    }
}
