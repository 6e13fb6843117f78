//! Mutual TLS and the role check, end to end over real sockets: a tonic server on 127.0.0.1:0
//! serving health and fake `seqsvr.v1` services through `tls::incoming` + `tls::AuthLayer`, with
//! certificates made here by rcgen. The fake services count their calls, so a refusal is shown
//! to change nothing behind the guard.

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use seqsvr_core::config::{ClusterConfig, TlsConfig};
use seqsvr_core::ids::SetId;
use seqsvr_tls::{
    self as tls, Caller, PeerIdentity, Plane, ServeExt as _, ServerKind, TlsFiles, TlsSetup,
};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};
use tonic::{Code, Status};

// ---- certificates ----

struct Ca {
    issuer: Issuer<'static, KeyPair>,
    pem: String,
}

fn ca(name: &str) -> Ca {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.distinguished_name.push(DnType::CommonName, name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let key = KeyPair::generate().unwrap();
    let cert = params.self_signed(&key).unwrap();
    Ca { issuer: Issuer::new(params, key), pem: cert.pem() }
}

/// A leaf certificate and its key, PEM.
#[derive(Clone)]
struct Leaf {
    cert: String,
    key: String,
}

impl Ca {
    fn issue_with(&self, cn: &str, sans: &[&str], expired: bool) -> Leaf {
        let mut params =
            CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
        params.distinguished_name.push(DnType::CommonName, cn);
        params.extended_key_usages =
            vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth];
        if expired {
            params.not_before = rcgen::date_time_ymd(2020, 1, 1);
            params.not_after = rcgen::date_time_ymd(2021, 1, 1);
        }
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        Leaf { cert: cert.pem(), key: key.serialize_pem() }
    }

    fn issue(&self, cn: &str) -> Leaf {
        self.issue_with(cn, &[cn], false)
    }

    /// A server certificate: the name of its role (`store.seqsvr`, `alloc.seqsvr`), which the
    /// library's clients check, and plain "seqsvr", which this file's raw tonic clients check.
    /// A StoreSvr's (`store-<set>-<id>`) also carries its set's name, `store-<set>.seqsvr`.
    fn server(&self, cn: &str) -> Leaf {
        if cn.starts_with("alloc") {
            return self.issue_with(cn, &["seqsvr", "alloc.seqsvr", "127.0.0.1"], false);
        }
        let set = cn.split('-').nth(1).unwrap_or("0");
        let set_name = format!("store-{set}.seqsvr");
        self.issue_with(cn, &["seqsvr", "store.seqsvr", &set_name, "127.0.0.1"], false)
    }
}

/// Writes `contents` to `path` the way an operator should rotate: a temporary file renamed
/// into place, so no reader sees half a file.
fn put(path: &Path, contents: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, contents).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

const SETS: &str = r#"
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
client_ca = "client-ca.pem"
store_ca = "store-ca.pem"
peer_ca = "peer-ca.pem"
[tls.identities]
"app-1" = "client"
"alloc-0-1" = "alloc"
"alloc-0-2" = { role = "alloc", set = 0 }
"alloc-1-1" = { role = "alloc", set = 1 }
"admin" = "admin"
"store-0-1" = { role = "peer", set = 0, node = 1 }
"store-0-2" = { role = "peer", set = 0, node = 2 }
"store-1-1" = { role = "peer", set = 1, node = 1 }
"#;

fn tls_config() -> TlsConfig {
    ClusterConfig::from_toml_str(SETS).unwrap().tls.unwrap()
}

/// A directory with a server's files: its certificate and key and the three CA bundles.
struct Dir {
    dir: tempfile::TempDir,
}

impl Dir {
    fn new(server: &Leaf, client_ca: &str, store_ca: &str, peer_ca: &str) -> Dir {
        let dir = Dir { dir: tempfile::tempdir().unwrap() };
        put(&dir.path("server.pem"), &server.cert);
        put(&dir.path("server.key"), &server.key);
        put(&dir.path("client-ca.pem"), client_ca);
        put(&dir.path("store-ca.pem"), store_ca);
        put(&dir.path("peer-ca.pem"), peer_ca);
        dir
    }

    /// One CA for all three planes.
    fn one_ca(ca: &Ca, server: &Leaf) -> Dir {
        Dir::new(server, &ca.pem, &ca.pem, &ca.pem)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn files(&self) -> TlsFiles {
        TlsFiles::resolve(
            &tls_config(),
            self.dir.path(),
            self.path("server.pem"),
            self.path("server.key"),
        )
    }
}

// ---- a server ----

/// What the fake services saw: calls per service and the callers the auth layer handed them.
#[derive(Clone, Default)]
struct Seen {
    calls: Arc<Mutex<Vec<Call>>>,
}

/// A call that reached a service: its path, the caller and the connection's identity.
type Call = (String, Option<Caller>, Option<PeerIdentity>);

impl Seen {
    fn count(&self) -> usize {
        self.calls.lock().unwrap().len()
    }
}

struct Echo;

impl tonic::server::UnaryService<()> for Echo {
    type Response = ();
    type Future = std::future::Ready<Result<tonic::Response<()>, Status>>;
    fn call(&mut self, _: tonic::Request<()>) -> Self::Future {
        std::future::ready(Ok(tonic::Response::new(())))
    }
}

macro_rules! fake_service {
    ($ty:ident, $name:literal) => {
        #[derive(Clone)]
        struct $ty(Seen);

        impl tonic::server::NamedService for $ty {
            const NAME: &'static str = $name;
        }

        impl tower_service::Service<http::Request<tonic::body::Body>> for $ty {
            type Response = http::Response<tonic::body::Body>;
            type Error = std::convert::Infallible;
            type Future = std::pin::Pin<
                Box<dyn std::future::Future<Output = Result<Self::Response, Self::Error>> + Send>,
            >;

            fn poll_ready(
                &mut self,
                _: &mut std::task::Context<'_>,
            ) -> std::task::Poll<Result<(), Self::Error>> {
                std::task::Poll::Ready(Ok(()))
            }

            fn call(&mut self, req: http::Request<tonic::body::Body>) -> Self::Future {
                let seen = self.0.clone();
                seen.calls.lock().unwrap().push((
                    req.uri().path().to_string(),
                    req.extensions().get::<Caller>().cloned(),
                    req.extensions().get::<PeerIdentity>().cloned(),
                ));
                Box::pin(async move {
                    let mut grpc =
                        tonic::server::Grpc::new(tonic_prost::ProstCodec::<(), ()>::default());
                    Ok(grpc.unary(Echo, req).await)
                })
            }
        }
    };
}

fake_service!(FakeStoreAdmin, "seqsvr.v1.StoreAdmin");
fake_service!(FakeStoreService, "seqsvr.v1.StoreService");
fake_service!(FakeRaft, "seqsvr.v1.RaftTransport");
fake_service!(FakeSeq, "seqsvr.v1.SeqService");

struct Server {
    addr: SocketAddr,
    seen: Seen,
    _stop: tokio::sync::oneshot::Sender<()>,
}

/// A server as the binaries start one: `[tls]` of a cluster file in `dir`, the server's own
/// certificate and key by flag, `auth_layer` and `serve_maybe_tls`.
async fn serve(dir: &Dir, kind: ServerKind) -> Server {
    let setup = TlsSetup::from_cluster(
        Some(&tls_config()),
        &dir.path("cluster.toml"),
        Some(&dir.path("server.pem")),
        Some(&dir.path("server.key")),
        kind,
        false,
    )
    .unwrap();
    assert!(setup.is_some());
    serve_with(setup).await
}

async fn serve_with(setup: Option<TlsSetup>) -> Server {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Seen::default();
    let (_reporter, health) = tonic_health::server::health_reporter();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let router = tonic::transport::Server::builder()
        .layer(tls::auth_layer(setup.as_ref()))
        .add_service(health)
        .add_service(FakeStoreAdmin(seen.clone()))
        .add_service(FakeStoreService(seen.clone()))
        .add_service(FakeRaft(seen.clone()))
        .add_service(FakeSeq(seen.clone()));
    tokio::spawn(async move {
        router
            .serve_maybe_tls(listener, setup.as_ref(), async {
                let _ = stopped.await;
            })
            .await
            .expect("the server's TLS files load");
    });
    Server { addr, seen, _stop: stop }
}

const STORE0: ServerKind = ServerKind::StoreSvr { set: SetId(0) };

// ---- a client ----

fn client_tls(trust: &str, id: Option<&Leaf>) -> ClientTlsConfig {
    let mut c =
        ClientTlsConfig::new().ca_certificate(Certificate::from_pem(trust)).domain_name("seqsvr");
    if let Some(id) = id {
        c = c.identity(Identity::from_pem(&id.cert, &id.key));
    }
    c
}

async fn connect(addr: SocketAddr, tls: ClientTlsConfig) -> Result<Channel, String> {
    Endpoint::from_shared(format!("https://{addr}"))
        .map_err(|e| e.to_string())?
        .tls_config(tls)
        .map_err(|e| e.to_string())?
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(5))
        .connect()
        .await
        .map_err(|e| format!("{e:?}"))
}

async fn unary(channel: Channel, path: &'static str) -> Result<(), Status> {
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.map_err(|e| Status::unavailable(format!("{e:?}")))?;
    grpc.unary(
        tonic::Request::new(()),
        http::uri::PathAndQuery::from_static(path),
        tonic_prost::ProstCodec::<(), ()>::default(),
    )
    .await
    .map(|_| ())
}

#[derive(Debug)]
enum Outcome {
    Served,
    /// PERMISSION_DENIED, with its message.
    Denied(String),
    /// The connection was refused (handshake): a connect error, or a call failing as
    /// UNAVAILABLE, UNKNOWN or CANCELLED (the connection closed under it).
    Refused(String),
}

async fn attempt(addr: SocketAddr, tls: ClientTlsConfig, path: &'static str) -> Outcome {
    let channel = match connect(addr, tls).await {
        Ok(c) => c,
        Err(e) => return Outcome::Refused(e),
    };
    match unary(channel, path).await {
        Ok(()) => Outcome::Served,
        Err(s) if s.code() == Code::PermissionDenied => Outcome::Denied(s.message().to_string()),
        Err(s) if matches!(s.code(), Code::Unavailable | Code::Unknown | Code::Cancelled) => {
            Outcome::Refused(format!("{s:?}"))
        }
        Err(s) => panic!("unexpected status {s:?}"),
    }
}

fn refused(o: Outcome) -> String {
    match o {
        Outcome::Refused(e) => e,
        other => panic!("expected the connection to be refused, got {other:?}"),
    }
}

/// The refusal `e` is for `alert`: the client read the server's alert, or (TLS 1.3, where the
/// client finishes its side first and may already be writing its request) found the
/// connection gone before reading it.
fn assert_alert(e: &str, alert: &str) {
    let dropped = ["broken pipe", "connection closed", "reset"].iter().any(|w| e.contains(w));
    assert!(e.contains(alert) || dropped, "expected {alert}: {e}");
}

fn denied(o: Outcome) -> String {
    match o {
        Outcome::Denied(m) => m,
        other => panic!("expected PERMISSION_DENIED, got {other:?}"),
    }
}

const ADMIN_STATUS: &str = "/seqsvr.v1.StoreAdmin/Status";
const MOVE_SECTIONS: &str = "/seqsvr.v1.StoreAdmin/MoveSections";
const ADVANCE: &str = "/seqsvr.v1.StoreService/AdvanceMaxSeq";
const RAFT_SEND: &str = "/seqsvr.v1.RaftTransport/Send";
const NEXT: &str = "/seqsvr.v1.SeqService/Next";

// ---- the tests ----

#[tokio::test]
async fn no_client_certificate_is_refused_at_the_handshake() {
    let ca = ca("cluster");
    let dir = Dir::one_ca(&ca, &ca.server("store-0-1"));
    let server = serve(&dir, STORE0).await;
    let e = refused(attempt(server.addr, client_tls(&ca.pem, None), ADMIN_STATUS).await);
    assert_alert(&e, "CertificateRequired");
    assert_eq!(server.seen.count(), 0);
}

#[tokio::test]
async fn a_certificate_from_another_ca_is_refused_at_the_handshake() {
    let (ca, other) = (ca("cluster"), ca("other"));
    let dir = Dir::one_ca(&ca, &ca.server("store-0-1"));
    let server = serve(&dir, STORE0).await;
    // Same name as a real admin, wrong issuer.
    let forged = other.issue("admin");
    let e = refused(attempt(server.addr, client_tls(&ca.pem, Some(&forged)), ADMIN_STATUS).await);
    assert_alert(&e, "UnknownCA");
    assert_eq!(server.seen.count(), 0);
}

#[tokio::test]
async fn an_expired_certificate_is_refused_at_the_handshake() {
    let ca = ca("cluster");
    let dir = Dir::one_ca(&ca, &ca.server("store-0-1"));
    let server = serve(&dir, STORE0).await;
    let expired = ca.issue_with("admin", &["admin"], true);
    let e = refused(attempt(server.addr, client_tls(&ca.pem, Some(&expired)), ADMIN_STATUS).await);
    assert_alert(&e, "CertificateExpired");
    assert_eq!(server.seen.count(), 0);
}

#[tokio::test]
async fn an_identity_not_in_the_list_is_permission_denied_but_may_ask_health() {
    let ca = ca("cluster");
    let dir = Dir::one_ca(&ca, &ca.server("store-0-1"));
    let server = serve(&dir, STORE0).await;
    let stranger = ca.issue("stranger");
    let msg = denied(attempt(server.addr, client_tls(&ca.pem, Some(&stranger)), ADVANCE).await);
    assert!(msg.contains("\"stranger\"") && msg.contains("[tls.identities]"), "{msg}");
    assert_eq!(server.seen.count(), 0, "the service never ran");
    let channel = connect(server.addr, client_tls(&ca.pem, Some(&stranger))).await.unwrap();
    let health = tonic_health::pb::health_client::HealthClient::new(channel)
        .check(tonic_health::pb::HealthCheckRequest { service: String::new() })
        .await
        .expect("health is open to any verified certificate");
    assert_eq!(health.into_inner().status, 1, "SERVING");
}

#[tokio::test]
async fn the_right_certificate_is_served_and_the_handler_sees_who_called() {
    let ca = ca("cluster");
    let dir = Dir::one_ca(&ca, &ca.server("store-0-1"));
    let server = serve(&dir, STORE0).await;
    // The admin dials with the library's own client helper, as seqctl will.
    let admin = ca.issue("admin");
    let admin_dir = Dir::one_ca(&ca, &admin);
    let helper = tls::client_tls_config(&admin_dir.files(), Plane::Store, None).unwrap();
    assert!(matches!(attempt(server.addr, helper, ADMIN_STATUS).await, Outcome::Served));
    let alloc = ca.issue("alloc-0-1");
    assert!(matches!(
        attempt(server.addr, client_tls(&ca.pem, Some(&alloc)), ADVANCE).await,
        Outcome::Served
    ));
    let calls = server.seen.calls.lock().unwrap().clone();
    assert_eq!(calls.len(), 2);
    let (path, caller, peer) = &calls[0];
    assert_eq!(path, ADMIN_STATUS);
    let caller = caller.as_ref().expect("the auth layer hands the handler its caller");
    assert_eq!((caller.name.as_str(), caller.role.as_str()), ("admin", "admin"));
    let peer = peer.as_ref().expect("the connection's verified identity");
    assert_eq!(peer.cn.as_deref(), Some("admin"));
    assert!(peer.planes.contains(&Plane::Store) && peer.planes.contains(&Plane::Peer));
    assert_eq!(calls[1].1.as_ref().map(|c| c.name.as_str()), Some("alloc-0-1"));
}

#[tokio::test]
async fn a_client_calling_admin_or_store_paths_is_permission_denied_and_nothing_runs() {
    let ca = ca("cluster");
    let dir = Dir::one_ca(&ca, &ca.server("store-0-1"));
    let server = serve(&dir, STORE0).await;
    let app = ca.issue("app-1");
    let msg = denied(attempt(server.addr, client_tls(&ca.pem, Some(&app)), MOVE_SECTIONS).await);
    assert_eq!(
        msg,
        "identity \"app-1\" (role client) may not call seqsvr.v1.StoreAdmin/MoveSections: \
         needs role admin"
    );
    let msg = denied(attempt(server.addr, client_tls(&ca.pem, Some(&app)), ADVANCE).await);
    assert!(msg.contains("needs role alloc of set 0 or admin"), "{msg}");
    let msg = denied(attempt(server.addr, client_tls(&ca.pem, Some(&app)), RAFT_SEND).await);
    assert!(msg.contains("needs role peer of set 0"), "{msg}");
    // A StoreSvr does not serve SeqService: refused, not passed through to a 404.
    let msg = denied(attempt(server.addr, client_tls(&ca.pem, Some(&app)), NEXT).await);
    assert!(msg.contains("no such service"), "{msg}");
    assert_eq!(server.seen.count(), 0, "no refused call reached a service");
}

#[tokio::test]
async fn a_peer_of_another_set_cannot_send_raft_messages() {
    let ca = ca("cluster");
    let dir = Dir::one_ca(&ca, &ca.server("store-0-1"));
    let server = serve(&dir, STORE0).await;
    let other_set = ca.issue_with("store-1-1", &["seqsvr", "store-1-1"], false);
    let msg = denied(attempt(server.addr, client_tls(&ca.pem, Some(&other_set)), RAFT_SEND).await);
    assert_eq!(
        msg,
        "identity \"store-1-1\" (role peer of set 1) may not call seqsvr.v1.RaftTransport/Send: \
         needs role peer of set 0"
    );
    assert_eq!(server.seen.count(), 0);
    let same_set = ca.issue_with("store-0-2", &["seqsvr", "store-0-2"], false);
    assert!(matches!(
        attempt(server.addr, client_tls(&ca.pem, Some(&same_set)), RAFT_SEND).await,
        Outcome::Served
    ));
}

/// An AllocSvr identity that names its set may use only that set's StoreSvrs: a key stolen
/// from one set's AllocSvr cannot register with another set (and be given its sections).
#[tokio::test]
async fn an_allocsvr_of_another_set_cannot_use_this_sets_store() {
    let ca = ca("cluster");
    let dir = Dir::one_ca(&ca, &ca.server("store-0-1"));
    let server = serve(&dir, STORE0).await;
    let other_set = ca.issue("alloc-1-1");
    let msg = denied(attempt(server.addr, client_tls(&ca.pem, Some(&other_set)), ADVANCE).await);
    assert_eq!(
        msg,
        "identity \"alloc-1-1\" (role alloc of set 1) may not call \
         seqsvr.v1.StoreService/AdvanceMaxSeq: needs role alloc of set 0 or admin"
    );
    assert_eq!(server.seen.count(), 0);
    for same_set in ["alloc-0-2", "alloc-0-1"] {
        let leaf = ca.issue(same_set);
        let outcome = attempt(server.addr, client_tls(&ca.pem, Some(&leaf)), ADVANCE).await;
        assert!(matches!(outcome, Outcome::Served), "{same_set}: {outcome:?}");
    }
}

#[tokio::test]
async fn each_plane_trusts_only_its_own_ca_bundle() {
    // Separate CAs: the store plane's CA issues the admin and the AllocSvrs, the peer plane's
    // the members. A member name on a store-plane certificate is not a peer.
    let (client_ca, store_ca, peer_ca) = (ca("client"), ca("store"), ca("peer"));
    let server_leaf = store_ca.server("store-0-1");
    // The server's certificate comes from the store CA; peers trust it through their bundle.
    let peer_bundle = format!("{}{}", peer_ca.pem, store_ca.pem);
    let dir = Dir::new(&server_leaf, &client_ca.pem, &store_ca.pem, &peer_ca.pem);
    let server = serve(&dir, STORE0).await;
    let impostor = store_ca.issue_with("store-0-2", &["seqsvr", "store-0-2"], false);
    let msg =
        denied(attempt(server.addr, client_tls(&store_ca.pem, Some(&impostor)), RAFT_SEND).await);
    assert!(msg.contains("peer_ca"), "{msg}");
    let member = peer_ca.issue_with("store-0-2", &["seqsvr", "store-0-2"], false);
    assert!(matches!(
        attempt(server.addr, client_tls(&peer_bundle, Some(&member)), RAFT_SEND).await,
        Outcome::Served
    ));
    // The client CA is not trusted at all by a StoreSvr: refused at the handshake.
    let admin_from_client_ca = client_ca.issue("admin");
    let e = refused(
        attempt(server.addr, client_tls(&store_ca.pem, Some(&admin_from_client_ca)), ADMIN_STATUS)
            .await,
    );
    assert_alert(&e, "UnknownCA");
    assert_eq!(server.seen.count(), 1);
}

/// A raw rustls client trusting `trust`, presenting `id`.
fn raw_client_config(trust: &str, id: &Leaf) -> rustls::ClientConfig {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(trust.as_bytes()) {
        roots.add(c.unwrap()).unwrap();
    }
    let chain: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(id.cert.as_bytes()).map(|c| c.unwrap()).collect();
    let key = PrivateKeyDer::from_pem_slice(id.key.as_bytes()).unwrap();
    rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .unwrap()
}

/// The raw TLS view: which certificate a new connection is served.
async fn served_certificate(addr: SocketAddr, trust: &str, id: &Leaf) -> CertificateDer<'static> {
    let config = raw_client_config(trust, id);
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let conn = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("seqsvr").unwrap(), tcp)
        .await
        .unwrap();
    conn.get_ref().1.peer_certificates().unwrap()[0].clone()
}

/// The application protocol a client offering only `alpn` agrees on with the server at
/// `addr` (`None`: none agreed), or the handshake's error.
async fn negotiated(
    addr: SocketAddr,
    trust: &str,
    id: &Leaf,
    alpn: &[u8],
) -> Result<Option<Vec<u8>>, String> {
    let mut config = raw_client_config(trust, id);
    config.alpn_protocols = vec![alpn.to_vec()];
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let conn = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("seqsvr").unwrap(), tcp)
        .await
        .map_err(|e| e.to_string())?;
    Ok(conn.get_ref().1.alpn_protocol().map(<[u8]>::to_vec))
}

/// An AllocSvr offers `http/1.1` beside `h2` (its HTTP/JSON API serves clients that speak
/// only HTTP/1.1, issue 31) and prefers `h2`; a StoreSvr offers `h2` only, so a client that
/// speaks only HTTP/1.1 fails its handshake. Fails without `accept.rs::alpn_of`.
#[tokio::test]
async fn an_allocsvr_also_speaks_http1_a_storesvr_only_h2() {
    let ca = ca("cluster");
    let app = ca.issue("app-1");
    let alloc_dir = Dir::one_ca(&ca, &ca.server("alloc-0-1"));
    let alloc = serve(&alloc_dir, ServerKind::AllocSvr).await;
    let http1 = negotiated(alloc.addr, &ca.pem, &app, b"http/1.1").await;
    assert_eq!(http1, Ok(Some(b"http/1.1".to_vec())));
    let h2 = negotiated(alloc.addr, &ca.pem, &app, b"h2").await;
    assert_eq!(h2, Ok(Some(b"h2".to_vec())));
    let store_dir = Dir::one_ca(&ca, &ca.server("store-0-1"));
    let store = serve(&store_dir, STORE0).await;
    let admin = ca.issue("admin");
    let refused = negotiated(store.addr, &ca.pem, &admin, b"http/1.1").await.unwrap_err();
    assert!(refused.contains("NoApplicationProtocol"), "{refused}");
    assert_eq!(negotiated(store.addr, &ca.pem, &admin, b"h2").await, Ok(Some(b"h2".to_vec())));
}

fn der(leaf: &Leaf) -> CertificateDer<'static> {
    CertificateDer::from_pem_slice(leaf.cert.as_bytes()).unwrap()
}

#[tokio::test]
async fn the_server_certificate_rotates_while_serving_without_a_failed_call() {
    let ca = ca("cluster");
    let (old, new) = (ca.server("store-0-1"), ca.server("store-0-1"));
    assert_ne!(der(&old), der(&new));
    let dir = Dir::one_ca(&ca, &old);
    let server = serve(&dir, STORE0).await;
    let admin = ca.issue("admin");
    assert_eq!(served_certificate(server.addr, &ca.pem, &admin).await, der(&old));

    // Calls keep going on an open channel through the rotation.
    let channel = connect(server.addr, client_tls(&ca.pem, Some(&admin))).await.unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let (ok, failed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let load = {
        let (stop, ok, failed) = (stop.clone(), ok.clone(), failed.clone());
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                match unary(channel.clone(), ADMIN_STATUS).await {
                    Ok(()) => ok.fetch_add(1, Ordering::Relaxed),
                    Err(_) => failed.fetch_add(1, Ordering::Relaxed),
                };
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    put(&dir.path("server.pem"), &new.cert);
    // A look between the two renames sees a key that does not match: kept the old pair.
    tokio::time::sleep(Duration::from_millis(50)).await;
    put(&dir.path("server.key"), &new.key);
    // New connections, each a fresh handshake, until the new certificate is served.
    let mut rotated = false;
    for _ in 0..40 {
        if served_certificate(server.addr, &ca.pem, &admin).await == der(&new) {
            rotated = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(rotated, "a new connection is served the new certificate within 4 s");
    // And a new tonic channel works against it.
    assert!(matches!(
        attempt(server.addr, client_tls(&ca.pem, Some(&admin)), ADMIN_STATUS).await,
        Outcome::Served
    ));
    tokio::time::sleep(Duration::from_millis(200)).await;
    stop.store(true, Ordering::Relaxed);
    load.await.unwrap();
    assert_eq!(failed.load(Ordering::Relaxed), 0, "no call failed during the rotation");
    assert!(ok.load(Ordering::Relaxed) > 20, "the load really ran");
}

/// The client side rotates too (a member's certificate for the connections it dials): a
/// `ReloadingClientTls` whose files are replaced hands out the new certificate, under a new
/// generation, within a few `RELOAD_CHECK`s; a half-written pair is not taken.
#[tokio::test]
async fn a_rotated_client_certificate_is_used_for_new_connections() {
    let (ca, other_ca) = (ca("cluster"), ca("other"));
    let dir = Dir::one_ca(&ca, &ca.server("store-0-1"));
    let server = serve(&dir, STORE0).await;
    // The dialling member starts with a certificate the server does not trust.
    let me = Dir::one_ca(&ca, &other_ca.issue("store-0-2"));
    let tls = tls::ReloadingClientTls::new(me.files(), Plane::Peer, Some(SetId(0))).unwrap();
    let (first, config) = tls.current();
    let e = refused(attempt(server.addr, config, RAFT_SEND).await);
    assert_alert(&e, "UnknownCA");
    // A certificate alone (its key not yet renamed in) does not load: nothing changes.
    let next = ca.issue("store-0-2");
    put(&me.path("server.pem"), &next.cert);
    let half = Instant::now() + tls::RELOAD_CHECK * 3;
    while Instant::now() < half {
        assert_eq!(tls.current().0, first, "a half-rotated pair was taken");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    put(&me.path("server.key"), &next.key);
    let until = Instant::now() + tls::RELOAD_CHECK * 10;
    let config = loop {
        let (generation, config) = tls.current();
        if generation != first {
            break config;
        }
        assert!(Instant::now() < until, "the rotated certificate was not picked up");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(matches!(attempt(server.addr, config, RAFT_SEND).await, Outcome::Served));
}

#[tokio::test]
async fn a_ca_bundle_change_is_picked_up_without_a_restart() {
    let (ca, next_ca) = (ca("cluster"), ca("next"));
    let dir = Dir::one_ca(&ca, &ca.server("store-0-1"));
    let server = serve(&dir, STORE0).await;
    let admin_next = next_ca.issue("admin");
    let e =
        refused(attempt(server.addr, client_tls(&ca.pem, Some(&admin_next)), ADMIN_STATUS).await);
    assert_alert(&e, "UnknownCA");
    // The operator adds the next CA to the store plane's bundle.
    put(&dir.path("store-ca.pem"), &format!("{}{}", ca.pem, next_ca.pem));
    tokio::time::sleep(tls::RELOAD_CHECK + Duration::from_millis(200)).await;
    assert!(matches!(
        attempt(server.addr, client_tls(&ca.pem, Some(&admin_next)), ADMIN_STATUS).await,
        Outcome::Served
    ));
}

#[tokio::test]
async fn a_client_refuses_a_server_without_the_server_name() {
    let ca = ca("cluster");
    // A certificate from the right CA that does not carry "seqsvr".
    let dir = Dir::one_ca(&ca, &ca.issue_with("store-0-1", &["elsewhere", "127.0.0.1"], false));
    let server = serve(&dir, STORE0).await;
    let admin = ca.issue("admin");
    let e = refused(attempt(server.addr, client_tls(&ca.pem, Some(&admin)), ADMIN_STATUS).await);
    assert!(e.contains("NotValidForName"), "{e}");
    assert_eq!(server.seen.count(), 0);
}

/// The library's clients check the name of the role they dial: an AllocSvr's certificate, from
/// the very CA that issues the StoreSvrs', cannot pose as a StoreSvr, nor a StoreSvr's as an
/// AllocSvr, nor (for a client that names the set) another set's StoreSvr as this set's.
#[tokio::test]
async fn a_client_refuses_a_server_of_another_role() {
    let ca = ca("cluster");
    let admin_dir = Dir::one_ca(&ca, &ca.issue("admin"));
    let impostor = Dir::one_ca(&ca, &ca.server("alloc-0-1"));
    let server = serve(&impostor, STORE0).await;
    let as_store = tls::client_tls_config(&admin_dir.files(), Plane::Store, None).unwrap();
    let e = refused(attempt(server.addr, as_store, ADMIN_STATUS).await);
    assert!(e.contains("NotValidForName"), "{e}");
    assert_eq!(server.seen.count(), 0);

    // A client that knows the set it dials accepts only that set's StoreSvrs.
    let other_set = Dir::one_ca(&ca, &ca.server("store-1-1"));
    let server = serve(&other_set, STORE0).await;
    let of_set_0 = tls::client_tls_config(&admin_dir.files(), Plane::Peer, Some(SetId(0))).unwrap();
    let e = refused(attempt(server.addr, of_set_0, ADMIN_STATUS).await);
    assert!(e.contains("NotValidForName"), "{e}");
    let of_set_1 = tls::client_tls_config(&admin_dir.files(), Plane::Peer, Some(SetId(1))).unwrap();
    assert!(matches!(attempt(server.addr, of_set_1, ADMIN_STATUS).await, Outcome::Served));

    let impostor = Dir::one_ca(&ca, &ca.server("store-0-1"));
    let server = serve(&impostor, ServerKind::AllocSvr).await;
    let as_alloc = tls::client_tls_config(&admin_dir.files(), Plane::Client, None).unwrap();
    let e = refused(attempt(server.addr, as_alloc, NEXT).await);
    assert!(e.contains("NotValidForName"), "{e}");
    assert_eq!(server.seen.count(), 0);
}

#[tokio::test]
async fn an_allocsvr_serves_clients_and_admins_only() {
    let ca = ca("cluster");
    let dir = Dir::one_ca(&ca, &ca.server("alloc-0-1"));
    let server = serve(&dir, ServerKind::AllocSvr).await;
    for (who, ok) in [("app-1", true), ("admin", true), ("alloc-0-1", false), ("store-0-1", false)]
    {
        let leaf = ca.issue(who);
        let outcome = attempt(server.addr, client_tls(&ca.pem, Some(&leaf)), NEXT).await;
        assert_eq!(matches!(outcome, Outcome::Served), ok, "{who}: {outcome:?}");
    }
    // StoreAdmin is not served by an AllocSvr, whoever asks.
    let admin = ca.issue("admin");
    denied(attempt(server.addr, client_tls(&ca.pem, Some(&admin)), ADMIN_STATUS).await);
    assert_eq!(server.seen.count(), 2);
}

#[tokio::test]
async fn without_tls_a_server_serves_plaintext_with_no_role_check() {
    let server = serve_with(None).await;
    let channel =
        Endpoint::from_shared(format!("http://{}", server.addr)).unwrap().connect().await.unwrap();
    unary(channel, MOVE_SECTIONS).await.expect("plaintext: no identity, no check");
    assert_eq!(server.seen.count(), 1);
}

/// A member whose certificate is not, in `[tls.identities]`, the peer of its set naming its
/// node id does not start (its peers would refuse every Raft batch it sends).
#[test]
fn a_member_must_present_the_identity_of_its_own_node() {
    let ca = ca("cluster");
    let dir = Dir::one_ca(&ca, &ca.server("store-0-1"));
    let setup = TlsSetup { config: Arc::new(tls_config()), files: dir.files(), kind: STORE0 };
    setup.check_member_identity(SetId(0), seqsvr_core::ids::NodeId(1)).unwrap();
    let err = setup.check_member_identity(SetId(0), seqsvr_core::ids::NodeId(2)).unwrap_err();
    let err = err.to_string();
    assert!(err.contains("\"store-0-1\"") && err.contains("node = 2"), "{err}");
    let err = setup.check_member_identity(SetId(1), seqsvr_core::ids::NodeId(1)).unwrap_err();
    assert!(err.to_string().contains("set 1"), "{err}");
    // A file written for older builds (no `node`) parses, but this member does not start on it,
    // told what to add.
    let old = SETS.replace(
        r#""store-0-1" = { role = "peer", set = 0, node = 1 }"#,
        r#""store-0-1" = { role = "peer", set = 0 }"#,
    );
    let old = ClusterConfig::from_toml_str(&old).expect("a peer entry without node parses");
    let setup = TlsSetup { config: Arc::new(old.tls.unwrap()), ..setup };
    let err = setup.check_member_identity(SetId(0), seqsvr_core::ids::NodeId(1)).unwrap_err();
    let err = err.to_string();
    assert!(
        err.contains("\"store-0-1\"") && err.contains("names no node: add `node = 1`"),
        "{err}"
    );
}

/// A member whose own entry names its node, but whose file lists another peer of its set
/// without one (half of a rolling upgrade's new file), does not start: it would refuse every
/// Raft batch that peer sends. The message names the entry. A peer of another set without a
/// node is not its concern. Fails without `TlsSetup::check_peers_name_their_node`.
#[test]
fn a_member_does_not_start_while_a_peer_of_its_set_names_no_node() {
    let ca = ca("cluster");
    let dir = Dir::one_ca(&ca, &ca.server("store-0-1"));
    let with_file = |file: &str| {
        let config = ClusterConfig::from_toml_str(file).expect("a peer entry without node parses");
        TlsSetup { config: Arc::new(config.tls.unwrap()), files: dir.files(), kind: STORE0 }
    };
    let half = SETS.replace(
        r#""store-0-2" = { role = "peer", set = 0, node = 2 }"#,
        r#""store-0-2" = { role = "peer", set = 0 }"#,
    );
    let err = with_file(&half).check_member_identity(SetId(0), seqsvr_core::ids::NodeId(1));
    let err = err.expect_err("a peer of its set names no node").to_string();
    assert!(err.contains("\"store-0-2\"") && err.contains("node = N"), "{err}");
    let other_set = SETS.replace(
        r#""store-1-1" = { role = "peer", set = 1, node = 1 }"#,
        r#""store-1-1" = { role = "peer", set = 1 }"#,
    );
    with_file(&other_set)
        .check_member_identity(SetId(0), seqsvr_core::ids::NodeId(1))
        .expect("another set's peers are not this member's to hear");
}

/// Secure by default: no `[tls]` and no `--insecure` is a refusal to start, naming both ways
/// out; `--insecure` with `[tls]` is refused as contradictory.
#[test]
fn tls_setup_needs_both_the_section_and_the_process_identity_or_insecure() {
    let (cert, key) = (Path::new("me.pem"), Path::new("me.key"));
    let file = Path::new("/etc/seqsvr/cluster.toml");
    let tls = Some(tls_config());
    let setup = |tls: Option<&TlsConfig>, cert, key, insecure| {
        TlsSetup::from_cluster(tls, file, cert, key, STORE0, insecure)
    };
    let files = setup(tls.as_ref(), Some(cert), Some(key), false).unwrap().unwrap().files;
    assert_eq!(files.store_ca, Path::new("/etc/seqsvr/store-ca.pem"), "relative to the file");
    assert_eq!(files.cert, cert, "flags are taken as given");
    let err = setup(None, None, None, false).unwrap_err().to_string();
    assert!(err.contains("seqctl certs init") && err.contains("--insecure"), "{err}");
    assert!(setup(None, None, None, true).unwrap().is_none(), "--insecure: plaintext");
    let err = setup(tls.as_ref(), Some(cert), Some(key), true).unwrap_err().to_string();
    assert!(err.contains("--insecure given"), "{err}");
    let err = setup(tls.as_ref(), None, None, false).unwrap_err();
    assert!(err.to_string().contains("--tls-cert"), "{err}");
    assert!(setup(None, Some(cert), Some(key), false).is_err());
    assert!(setup(None, Some(cert), Some(key), true).is_err());
}

// ---- admission: stalled handshakes and connections per IP (issue 30) ----

/// A server as [`serve_with`] makes one, over `incoming` through `gate`.
async fn serve_gated(dir: &Dir, gate: Arc<tls::AcceptGate>, plaintext: bool) -> Server {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Seen::default();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let setup = (!plaintext).then(|| TlsSetup {
        config: Arc::new(tls_config()),
        files: dir.files(),
        kind: STORE0,
    });
    let router = tonic::transport::Server::builder()
        .layer(tls::auth_layer(setup.as_ref()))
        .add_service(FakeStoreAdmin(seen.clone()));
    let signal = async {
        let _ = stopped.await;
    };
    if plaintext {
        let incoming = tls::plain_incoming(listener, gate);
        tokio::spawn(async move { router.serve_with_incoming_shutdown(incoming, signal).await });
    } else {
        let server = tls::ServerTls::new(dir.files(), STORE0).unwrap();
        let incoming = tls::incoming_gated(listener, server, gate);
        tokio::spawn(async move { router.serve_with_incoming_shutdown(incoming, signal).await });
    }
    Server { addr, seen, _stop: stop }
}

/// A TCP connection to `to` from the loopback address `from` (127.0.0.0/8 is all loopback on
/// Linux): another client IP for the per-IP count.
async fn tcp_from(from: &str, to: SocketAddr) -> tokio::net::TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(format!("{from}:0").parse().unwrap()).unwrap();
    socket.connect(to).await.unwrap()
}

/// Waits for `what` to hold (the server's accept loop runs on its own task); 30 s at most.
async fn until(what: &str, cond: impl Fn() -> bool) {
    let started = Instant::now();
    while !cond() {
        assert!(started.elapsed() < Duration::from_secs(30), "never: {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The server closed `tcp` without a byte: EOF (or a reset) on read. Only returns once it did.
async fn closed_by_the_server(mut tcp: tokio::net::TcpStream) {
    use tokio::io::AsyncReadExt as _;
    let mut byte = [0u8; 1];
    match tcp.read(&mut byte).await {
        Ok(0) | Err(_) => {}
        Ok(n) => panic!("the server sent {n} bytes to a refused connection"),
    }
}

/// Stalled handshakes (clients that connect and never send a ClientHello) hold at most
/// `max_handshakes_per_ip` slots per remote IP and `max_handshakes` in all: one more
/// connection is closed at once — before the ClientHello timeout, which is what would close it
/// otherwise — and so is a connection from an IP that has `max_connections_per_ip` open. Once
/// the stalled ones are gone, a good client is served. Fails without the gate (the refused
/// connections would wait out the ClientHello timeout, counted nowhere).
#[tokio::test]
async fn stalled_handshakes_and_one_ips_connections_are_bounded_and_a_good_client_still_connects() {
    let ca = ca("cluster");
    let dir = Dir::one_ca(&ca, &ca.server("store-0-1"));
    let limits = tls::AcceptLimits {
        max_handshakes: 2,
        max_handshakes_per_ip: 1,
        max_connections_per_ip: 2,
    };
    let gate = tls::AcceptGate::new(limits);
    let server = serve_gated(&dir, gate.clone(), false).await;
    let one: std::net::IpAddr = "127.0.0.1".parse().unwrap();

    let stalled =
        [tcp_from("127.0.0.1", server.addr).await, tcp_from("127.0.0.3", server.addr).await];
    until("two handshakes in progress", || gate.handshakes_in_progress() == 2).await;
    assert_eq!(gate.open_from(one), 1);
    assert_eq!(gate.handshakes_from(one), 1);

    // The stalled client's IP has its one handshake in progress: closed at once.
    closed_by_the_server(tcp_from("127.0.0.1", server.addr).await).await;
    assert_eq!(gate.refused(tls::Refusal::HandshakesPerIp), 1);
    // Another IP, but no handshake slot left in all: closed at once.
    closed_by_the_server(tcp_from("127.0.0.2", server.addr).await).await;
    assert_eq!(gate.refused(tls::Refusal::Handshakes), 1);
    assert_eq!(gate.handshakes_in_progress(), 2, "the refused ones took no slot");

    drop(stalled);
    until("the stalled handshakes gone", || {
        gate.handshakes_in_progress() == 0 && gate.open_from(one) == 0
    })
    .await;
    let admin = ca.issue("admin");
    let channel = connect(server.addr, client_tls(&ca.pem, Some(&admin))).await.unwrap();
    unary(channel.clone(), ADMIN_STATUS).await.expect("a good client is served");
    assert_eq!(server.seen.count(), 1);
    assert_eq!(gate.open_from(one), 1, "a served connection counts while it is open");
    assert_eq!(gate.handshakes_in_progress(), 0, "but holds no handshake slot");
    // With the served one and a stalled one, the IP is at its limit: closed at once, for that.
    let _stalled = tcp_from("127.0.0.1", server.addr).await;
    until("a stalled handshake", || gate.handshakes_in_progress() == 1).await;
    closed_by_the_server(tcp_from("127.0.0.1", server.addr).await).await;
    assert_eq!(gate.refused(tls::Refusal::PerIp), 1);
    drop((channel, _stalled));
    until("the connections closed", || gate.open_from(one) == 0).await;
}

/// `--insecure` has no handshake to bound, but one IP's open connections are bounded the same
/// way. Fails without the gate on the plaintext path (tonic's `TcpIncoming` counts nothing).
#[tokio::test]
async fn a_plaintext_server_bounds_one_ips_connections_too() {
    let ca = ca("cluster");
    let dir = Dir::one_ca(&ca, &ca.server("store-0-1"));
    let limits = tls::AcceptLimits {
        max_handshakes: 1,
        max_handshakes_per_ip: 1,
        max_connections_per_ip: 1,
    };
    let gate = tls::AcceptGate::new(limits);
    let server = serve_gated(&dir, gate.clone(), true).await;
    let one: std::net::IpAddr = "127.0.0.1".parse().unwrap();
    let held = tcp_from("127.0.0.1", server.addr).await;
    until("one open connection", || gate.open_from(one) == 1).await;
    closed_by_the_server(tcp_from("127.0.0.1", server.addr).await).await;
    assert_eq!(gate.refused(tls::Refusal::PerIp), 1);
    // Another IP is served meanwhile.
    let from_two = Endpoint::from_shared(format!("http://{}", server.addr))
        .unwrap()
        .local_address(Some("127.0.0.2".parse().unwrap()));
    unary(from_two.connect().await.unwrap(), ADMIN_STATUS).await.expect("another IP is served");
    drop(held);
    until("the held connection closed", || gate.open_from(one) == 0).await;
    let channel = Endpoint::from_shared(format!("http://{}", server.addr)).unwrap();
    unary(channel.connect().await.unwrap(), ADMIN_STATUS).await.expect("served once room");
    assert_eq!(server.seen.count(), 2);
}
