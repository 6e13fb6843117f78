//! Server accept: the server's rustls configuration ([`ServerTls`]), the accept loop that runs
//! each handshake in its own task ([`incoming`]), the accepted connection with its client's
//! [`PeerIdentity`] ([`TlsConn`]), and serving a tonic router over it or, with `--insecure`,
//! over plain TCP ([`plain_incoming`], [`ServeExt::serve_maybe_tls`], from a [`TlsSetup`]).
//! Both loops admit connections through an [`AcceptGate`] (`gate.rs`): a bound on connections
//! per remote IP and, for TLS, on handshakes in progress; past one, closed at once.
//!
//! [`ServerTls`] is built from the server's own certificate chain and key and the CA bundles of
//! the planes it serves; it *requires* a client certificate (TLS 1.2 or 1.3, ALPN `h2`, and
//! `http/1.1` on an AllocSvr, which serves its HTTP/JSON API beside gRPC). It is
//! rebuilt when its files change (`reload.rs`: checked at most once a second, on a new
//! connection), so certificates and CA bundles rotate without a restart; open connections keep
//! the configuration they started with.

use crate::gate::{AcceptGate, AcceptLimits, IpSlot};
use crate::identity::{certificate_names, PeerIdentity};
use crate::pem::{parse_certs, parse_key, provider, roots, TlsError, TlsFiles};
use crate::reload::{Messages, Reloading, Source};
use crate::{Plane, ServerKind};
use http::{Request, Response};
use rustls::pki_types::UnixTime;
use rustls::server::danger::ClientCertVerifier;
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use seqsvr_core::config::{Role, TlsConfig};
use seqsvr_core::ids::{NodeId, SetId};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tonic::transport::server::Connected;

/// A TLS handshake that takes longer is dropped (from accept to the verified client
/// certificate).
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// A connection whose ClientHello has not arrived this long after accept is dropped: a real
/// client sends it at once (it is its first flight), so a connection that sends nothing frees
/// its handshake slot ([`crate::AcceptGate::handshake`]) after 2 s instead of
/// [`HANDSHAKE_TIMEOUT`]. The rest of the handshake keeps the whole of [`HANDSHAKE_TIMEOUT`].
pub const CLIENT_HELLO_TIMEOUT: Duration = Duration::from_secs(2);

/// One loaded configuration: what handshakes use, and a verifier per plane to tell afterwards
/// which planes' CA bundles the client certificate chains to.
#[derive(Clone)]
struct Loaded {
    config: Arc<ServerConfig>,
    planes: PlaneVerifiers,
}

/// One verifier per plane the server serves, each trusting only that plane's CA bundle.
type PlaneVerifiers = Arc<Vec<(Plane, Arc<dyn ClientCertVerifier>)>>;

/// What a server's configuration is built from: its certificate, its key, then the CA bundle of
/// each plane it serves.
struct ServerFiles {
    files: TlsFiles,
    kind: ServerKind,
}

impl Source for ServerFiles {
    type Built = Loaded;

    fn files(&self) -> Option<Vec<PathBuf>> {
        let (f, planes) = (&self.files, self.kind.planes());
        let cas = planes.iter().map(|&p| f.ca(p).to_path_buf());
        Some([f.cert.clone(), f.key.clone()].into_iter().chain(cas).collect())
    }

    fn build(&self, c: &[Vec<u8>]) -> Result<Loaded, TlsError> {
        let files = &self.files;
        let provider = provider();
        let chain = parse_certs(&files.cert, &c[0])?;
        let key = parse_key(&files.key, &c[1])?;
        let mut union = RootCertStore::empty();
        let mut planes = Vec::new();
        for (plane, pem) in self.kind.planes().iter().zip(&c[2..]) {
            let store = roots(files.ca(*plane), pem)?;
            union.roots.extend(store.roots.iter().cloned());
            let verifier =
                WebPkiClientVerifier::builder_with_provider(Arc::new(store), provider.clone())
                    .build()?;
            planes.push((*plane, verifier));
        }
        // Required client authentication: the builder refuses anonymous clients by default.
        let verifier =
            WebPkiClientVerifier::builder_with_provider(Arc::new(union), provider.clone())
                .build()?;
        let mut config = ServerConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])?
            .with_client_cert_verifier(verifier)
            .with_single_cert(chain, key)?;
        config.alpn_protocols = alpn_of(self.kind);
        Ok(Loaded { config: Arc::new(config), planes: Arc::new(planes) })
    }

    fn cert(&self) -> String {
        self.files.cert.display().to_string()
    }
}

/// The application protocols a server of `kind` offers in the handshake, preferred first: `h2`
/// (gRPC) everywhere; an AllocSvr also `http/1.1`, for HTTP/JSON clients that speak only it
/// (`curl --http1.1`, most load-balancer probes). Without it such a client's handshake fails
/// (no common protocol) before any request could be answered.
fn alpn_of(kind: ServerKind) -> Vec<Vec<u8>> {
    match kind {
        ServerKind::AllocSvr => vec![b"h2".to_vec(), b"http/1.1".to_vec()],
        ServerKind::StoreSvr { .. } => vec![b"h2".to_vec()],
    }
}

/// A server's TLS configuration, re-read when its files change.
pub struct ServerTls {
    kind: ServerKind,
    loaded: Reloading<ServerFiles>,
}

impl ServerTls {
    /// Reads and checks every file now: a server with unusable TLS files does not start.
    pub fn new(files: TlsFiles, kind: ServerKind) -> Result<Arc<ServerTls>, TlsError> {
        let loaded = Reloading::load(
            ServerFiles { files, kind },
            Messages {
                unreadable: Some("TLS files unreadable; keeping the loaded certificates"),
                changed: "TLS files changed: new connections use the new certificates",
                broken: "TLS files changed but do not load; keeping the previous certificates",
            },
        )?;
        Ok(Arc::new(ServerTls { kind, loaded }))
    }

    pub fn kind(&self) -> ServerKind {
        self.kind
    }

    /// The configuration for a new handshake, after looking for changed files if the last look
    /// was [`crate::RELOAD_CHECK`] ago.
    fn current(&self) -> Option<Loaded> {
        self.loaded.current().map(|(_, loaded)| loaded)
    }
}

/// A TLS connection a server accepted, with the identity of its client.
pub struct TlsConn {
    inner: tokio_rustls::server::TlsStream<TcpStream>,
    peer: PeerIdentity,
    /// Counts it as open from its IP until it is dropped.
    _slot: IpSlot,
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
async fn handshake(
    tls: &ServerTls,
    tcp: TcpStream,
    remote: SocketAddr,
    slot: IpSlot,
) -> Result<TlsConn, String> {
    let _ = tcp.set_nodelay(true);
    set_tcp_keepalive(&tcp);
    // Loaded at start and only ever replaced: never empty.
    let Some(Loaded { config, planes }) = tls.current() else {
        return Err("no TLS configuration loaded".into());
    };
    let started = tokio::time::Instant::now();
    let hello = tokio_rustls::LazyConfigAcceptor::new(rustls::server::Acceptor::default(), tcp);
    let start = match tokio::time::timeout(CLIENT_HELLO_TIMEOUT, hello).await {
        Ok(Ok(start)) => start,
        Ok(Err(e)) => return Err(format!("handshake failed: {e}")),
        Err(_) => {
            return Err(format!(
                "no ClientHello within {CLIENT_HELLO_TIMEOUT:?} of the connection (closed)"
            ))
        }
    };
    let rest = start.into_stream(config);
    let stream = match tokio::time::timeout_at(started + HANDSHAKE_TIMEOUT, rest).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return Err(format!("handshake failed: {e}")),
        Err(_) => return Err(format!("handshake not done within {HANDSHAKE_TIMEOUT:?}")),
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
        _slot: slot,
    })
}

/// The next connection of `listener` the gate lets in, with its slot; `None` once `closed`
/// resolves. A connection its IP has no room for is closed at once (dropped), here.
async fn accept_admitted(
    listener: &TcpListener,
    gate: &Arc<AcceptGate>,
    closed: impl std::future::Future<Output = ()>,
) -> Option<(TcpStream, SocketAddr, IpSlot)> {
    tokio::pin!(closed);
    loop {
        let accepted = tokio::select! {
            _ = &mut closed => return None,
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
        if let Some(slot) = gate.admit(remote) {
            return Some((tcp, remote, slot));
        }
    }
}

/// The accepted, handshaken connections of `listener`, for
/// `tonic::transport::Server::serve_with_incoming(_shutdown)`, within the default
/// [`AcceptLimits`] ([`incoming_gated`]). Failed handshakes are logged and dropped; the stream
/// ends when tonic drops it.
pub fn incoming(
    listener: TcpListener,
    tls: Arc<ServerTls>,
) -> tokio_stream::wrappers::ReceiverStream<Result<TlsConn, std::io::Error>> {
    incoming_gated(listener, tls, AcceptGate::new(AcceptLimits::DEFAULT))
}

/// [`incoming`] within `gate`'s limits: a connection past the per-IP limit, or arriving while
/// the most handshakes are in progress, is closed at once, before any byte is read.
pub fn incoming_gated(
    listener: TcpListener,
    tls: Arc<ServerTls>,
    gate: Arc<AcceptGate>,
) -> tokio_stream::wrappers::ReceiverStream<Result<TlsConn, std::io::Error>> {
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    tokio::spawn(async move {
        loop {
            let Some((tcp, remote, slot)) = accept_admitted(&listener, &gate, tx.closed()).await
            else {
                return;
            };
            let Some(handshaking) = gate.handshake(remote) else {
                continue; // `tcp` and `slot` dropped: closed at once, no longer counted
            };
            let (tls, tx) = (tls.clone(), tx.clone());
            tokio::spawn(async move {
                let handshaken = handshake(&tls, tcp, remote, slot).await;
                drop(handshaking);
                match handshaken {
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

/// A server's transport security, from the cluster file's `[tls]` and its own
/// `--tls-cert/--tls-key`: what [`ServeExt::serve_maybe_tls`] and [`crate::auth_layer`] take.
#[derive(Clone, Debug)]
pub struct TlsSetup {
    pub config: Arc<TlsConfig>,
    pub files: TlsFiles,
    pub kind: ServerKind,
}

impl TlsSetup {
    /// For a StoreSvr member at start: its own certificate must be, in `[tls.identities]`, the
    /// peer of its set that names its node id. Its peers refuse every Raft batch it sends
    /// otherwise (`authz.rs::require_own_node`), so it would run without ever being heard. An
    /// entry without `node` parses (a file for older builds) but is refused here, saying what
    /// to add.
    pub fn check_member_identity(&self, set: SetId, node: NodeId) -> anyhow::Result<()> {
        let cert = &self.files.cert;
        let pem = crate::pem::read(cert)?;
        let chain = parse_certs(cert, &pem)?;
        let (cn, sans) = certificate_names(chain[0].as_ref())
            .map_err(|e| anyhow::anyhow!("{}: unreadable certificate: {e}", cert.display()))?;
        let (name, entry) = self.config.resolve_identity(cn.as_deref(), &sans).map_err(|e| {
            anyhow::anyhow!(
                "{}: this member's certificate: {e}; add it as {{ role = \"peer\", set = {set}, \
                 node = {node} }}",
                cert.display()
            )
        })?;
        if entry.role() == Role::Peer && entry.set() == Some(set) && entry.node().is_none() {
            anyhow::bail!(
                "{}: this member (set {set}, node {node}) presents identity {name:?}, whose \
                 [tls.identities] entry names no node: add `node = {node}` to it, {{ role = \
                 \"peer\", set = {set}, node = {node} }}, and to every other peer entry its \
                 own (a file written for older builds; this build hears only peers bound to \
                 their node: README \"Upgrading\")",
                cert.display()
            );
        }
        if entry.role() != Role::Peer || entry.set() != Some(set) || entry.node() != Some(node) {
            let found = match (entry.set(), entry.node()) {
                (Some(s), Some(n)) => format!("role {} of set {s}, node {n}", entry.role()),
                (Some(s), None) => format!("role {} of set {s}", entry.role()),
                _ => format!("role {}", entry.role()),
            };
            anyhow::bail!(
                "{}: this member (set {set}, node {node}) presents identity {name:?}, which \
                 [tls.identities] lists as {found}: its peers would refuse its Raft messages. \
                 Give it its own certificate, listed as {{ role = \"peer\", set = {set}, node = \
                 {node} }}",
                cert.display()
            );
        }
        self.check_peers_name_their_node(set)
    }

    /// Every other peer entry of this member's set must name its node too: this member refuses
    /// every Raft batch from a peer whose entry has none (`authz.rs::require_own_node`), so
    /// starting would take it out of the set's quorum one restarted member at a time (a half-made
    /// file during a rolling upgrade). The upgrade order of README "Upgrading" gives each
    /// upgraded StoreSvr the new file, `node` on every peer entry, so it never meets this; the
    /// older builds keep the old file. Peers of other sets are not this member's to hear.
    fn check_peers_name_their_node(&self, set: SetId) -> anyhow::Result<()> {
        let nameless: Vec<&str> = (self.config.identities.iter())
            .filter(|(_, e)| e.role() == Role::Peer && e.set() == Some(set) && e.node().is_none())
            .map(|(name, _)| name.as_str())
            .collect();
        if nameless.is_empty() {
            return Ok(());
        }
        anyhow::bail!(
            "[tls.identities]: the peer entries {nameless:?} of set {set} name no node: this \
             member would refuse every Raft batch they send (a file only half upgraded; starting \
             on it could lose the set's quorum). Add `node = N` to each, N the member its \
             certificate is, as `seqctl certs init` writes them; give the processes of older \
             builds the file without `node` (README \"Upgrading\")"
        );
    }

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

/// A plaintext connection a server accepted (`--insecure`), counted as open from its IP until
/// it is dropped.
pub struct PlainConn {
    inner: TcpStream,
    _slot: IpSlot,
}

impl Connected for PlainConn {
    type ConnectInfo = <TcpStream as Connected>::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}

impl AsyncRead for PlainConn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for PlainConn {
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

/// The accepted plaintext connections of `listener` (`--insecure`) within `gate`'s per-IP
/// limit (no handshake to bound), with TCP_NODELAY and [`TCP_KEEPALIVE`] set.
pub fn plain_incoming(
    listener: TcpListener,
    gate: Arc<AcceptGate>,
) -> tokio_stream::wrappers::ReceiverStream<Result<PlainConn, std::io::Error>> {
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    tokio::spawn(async move {
        while let Some((tcp, _, slot)) = accept_admitted(&listener, &gate, tx.closed()).await {
            let _ = tcp.set_nodelay(true);
            set_tcp_keepalive(&tcp);
            if tx.send(Ok(PlainConn { inner: tcp, _slot: slot })).await.is_err() {
                return;
            }
        }
    });
    tokio_stream::wrappers::ReceiverStream::new(rx)
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
                let incoming = plain_incoming(listener, AcceptGate::new(AcceptLimits::DEFAULT));
                self.serve_with_incoming_shutdown(incoming, signal).await?;
            }
        }
        Ok(())
    }
}
