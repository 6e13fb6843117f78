//! **Who may call what: the one role → RPC table. Adding an RPC? Edit [`need_for`] here.**
//!
//! Each gRPC path (`Service/Method`) maps to what it needs of its caller ([`Need`]): any
//! verified certificate (health, reflection), or one of some [`Grant`]s — a role from
//! `[tls.identities]`, the plane whose CA bundle must have issued the certificate, and for a
//! peer or an AllocSvr the set it must belong to. A path the table does not know is refused, so
//! a new RPC answers `PERMISSION_DENIED` until it has a row. [`authorize`] is the decision for
//! one call (the tower layer of `layer.rs` asks it for every request); rules that need the
//! request body are the handler's, with the [`Caller`]: [`require_admin`] and
//! [`alloc_identity`].
//!
//! Refusals name the identity, its role and what the call needs; they are written to the audit
//! target ([`crate::AUDIT_TARGET`]).

use crate::identity::{Caller, PeerIdentity};
use crate::{Plane, ServerKind, AUDIT_TARGET};
use seqsvr_core::config::{IdentityEntry, Role, TlsConfig};
use seqsvr_core::ids::{NodeId, SetId};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

/// One way to be allowed a call: a certificate from `plane`'s CA bundle whose identity has
/// `role` (and, for a peer, belongs to `set`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grant {
    pub plane: Plane,
    pub role: Role,
    pub set: Option<SetId>,
    /// Only for a call marked [`seqsvr_proto::NO_FORWARD_METADATA`] (one the server answers
    /// itself, never forwards on).
    pub unforwarded_only: bool,
}

impl Grant {
    const fn of(plane: Plane, role: Role) -> Grant {
        Grant { plane, role, set: None, unforwarded_only: false }
    }

    const fn peer(set: SetId) -> Grant {
        Grant { plane: Plane::Peer, role: Role::Peer, set: Some(set), unforwarded_only: false }
    }

    const fn alloc_of(set: SetId) -> Grant {
        Grant { plane: Plane::Store, role: Role::Alloc, set: Some(set), unforwarded_only: false }
    }

    /// An AllocSvr of any set forwarding a call to the owner: its own (store-plane) identity,
    /// on a call marked not to be forwarded again, so a hop never becomes a chain or a loop.
    const fn forwarding_alloc() -> Grant {
        Grant { plane: Plane::Store, role: Role::Alloc, set: None, unforwarded_only: true }
    }

    /// Does an identity with `entry` fit this grant, on a call marked not to be forwarded
    /// (`no_forward`) or not? A grant for a set needs an identity of that set; an `alloc`
    /// identity that names no set (written before allocs named theirs) may act in any set.
    fn fits(&self, entry: &IdentityEntry, no_forward: bool) -> bool {
        self.role == entry.role()
            && (no_forward || !self.unforwarded_only)
            && match (self.set, entry.set()) {
                (None, _) => true,
                (Some(want), Some(have)) => want == have,
                (Some(_), None) => entry.role() == Role::Alloc,
            }
    }

    fn text(&self) -> String {
        match (self.set, self.unforwarded_only) {
            (Some(set), _) => format!("{} of set {set}", self.role),
            (None, true) => format!(
                "{} (on a call marked `{}: 1`, as a forwarding AllocSvr sends)",
                self.role,
                seqsvr_proto::NO_FORWARD_METADATA
            ),
            (None, false) => self.role.to_string(),
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
        // An AllocSvr forwards a call for a uid another one owns to that owner, as itself.
        (ServerKind::AllocSvr, "seqsvr.v1.SeqService" | "seqsvr.v1.IdService") => one_of(&[
            Grant::of(Plane::Client, Role::Client),
            Grant::of(Plane::Client, Role::Admin),
            Grant::forwarding_alloc(),
        ]),
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
        _ => need_for_http(kind, call),
    }
}

/// The rows of the AllocSvr's HTTP/JSON API (issue 31), whose paths are not `Service/Method`:
/// everything under `v1/` (sequences and ids) needs a client or an admin of the client plane,
/// as `SeqService` does; the probes `healthz` and `readyz` any verified certificate, as gRPC
/// health does. A path under `v1/` the API does not serve passes here and is answered 404 by
/// the API's router; any other path is refused.
fn need_for_http(kind: ServerKind, call: &str) -> Option<Need> {
    match kind {
        ServerKind::AllocSvr if call == "healthz" || call == "readyz" => Some(Need::AnyVerified),
        ServerKind::AllocSvr if call.starts_with("v1/") => Some(Need::OneOf(vec![
            Grant::of(Plane::Client, Role::Client),
            Grant::of(Plane::Client, Role::Admin),
        ])),
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
/// `call` is `Service/Method`, as it appears in messages; `no_forward`: the call is marked
/// [`seqsvr_proto::NO_FORWARD_METADATA`].
pub fn authorize(
    tls: &TlsConfig,
    kind: ServerKind,
    peer: &PeerIdentity,
    call: &str,
    no_forward: bool,
) -> Result<Option<Caller>, String> {
    let resolved = tls.resolve_identity(peer.cn.as_deref(), &peer.dns_sans);
    let caller = resolved.as_ref().ok().map(|(name, e)| Caller {
        name: name.clone(),
        role: e.role(),
        set: e.set(),
        node: e.node(),
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
    let mut fits = grants.iter().filter(|g| g.fits(&entry, no_forward)).peekable();
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

/// Audit lines of refused Raft batches: at most one per [`crate::gate::WARN_EVERY`], with the
/// count refused since. A member whose peer runs with the wrong certificate (or an unbound
/// entry) is refused several batches a second; one line per batch would flood the log.
pub struct RefusalLog {
    since: Mutex<(Option<Instant>, u64)>,
    lines: AtomicU64,
}

impl RefusalLog {
    pub const fn new() -> RefusalLog {
        RefusalLog { since: Mutex::new((None, 0)), lines: AtomicU64::new(0) }
    }

    /// Lines written so far.
    pub fn lines(&self) -> u64 {
        self.lines.load(Ordering::Relaxed)
    }

    /// Counts one refusal; `Some(refused since the last line)` when a line is due.
    fn due(&self) -> Option<u64> {
        let mut since = self.since.lock().unwrap_or_else(|e| e.into_inner());
        since.1 += 1;
        let now = Instant::now();
        if since.0.is_some_and(|last| now.duration_since(last) < crate::gate::WARN_EVERY) {
            return None;
        }
        since.0 = Some(now);
        self.lines.fetch_add(1, Ordering::Relaxed);
        Some(std::mem::take(&mut since.1))
    }
}

impl Default for RefusalLog {
    fn default() -> Self {
        RefusalLog::new()
    }
}

/// The process's [`RefusalLog`] for Raft batches ([`require_own_node`]).
static RAFT_REFUSALS: RefusalLog = RefusalLog::new();

/// [`refuse`], its audit line throttled by `log`.
fn refuse_throttled(caller: &Caller, what: &str, why: &str, log: &RefusalLog) -> tonic::Status {
    let message =
        format!("identity {:?} (role {}) may not make {what}: {why}", caller.name, caller.role);
    if let Some(refused) = log.due() {
        tracing::warn!(target: AUDIT_TARGET, refused,
            "PERMISSION_DENIED: {message} (at most one line per 10 s; `refused` counts since the \
             last, seqsvr_store_raft_messages_refused_total all)");
    }
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

/// For `RaftTransport/Send`: a batch says which member it comes from (`from`), and everything
/// it carries is taken as that member's (its messages, its address, whether it is vote-blocked,
/// its commands version). Only that member itself may say so: the caller's identity must name
/// node `from` (`[tls.identities]`: `{ role = "peer", set = S, node = N }`). Otherwise one
/// member's certificate could forge another's votes (a leader without a real majority, which
/// can lose a committed `max_seq`), its higher-term messages, or its commands version (the
/// upgrade gate raised early). A peer whose entry names no node (a file written for builds
/// before `node`) is refused too, the message naming the entry and the `node = N` to add: a
/// member of this build hears only peers the file binds to their node (README "Upgrading").
/// `None` caller: a plaintext server, nothing to check.
pub fn require_own_node<T>(request: &tonic::Request<T>, from: NodeId) -> Result<(), tonic::Status> {
    require_own_node_logged(request, from, &RAFT_REFUSALS)
}

fn require_own_node_logged<T>(
    request: &tonic::Request<T>,
    from: NodeId,
    log: &RefusalLog,
) -> Result<(), tonic::Status> {
    let refuse = |caller: &Caller, what: &str, why: &str| refuse_throttled(caller, what, why, log);
    let Some(caller) = request.extensions().get::<Caller>() else {
        return Ok(());
    };
    match (caller.role, caller.node) {
        (Role::Peer, Some(node)) if node == from => Ok(()),
        (Role::Peer, Some(node)) => Err(refuse(
            caller,
            &format!("a Raft batch as member {from}"),
            &format!(
                "its [tls.identities] entry names member {node}, and a member speaks only for \
                 itself (check that member {node} runs with its own certificate)"
            ),
        )),
        (Role::Peer, None) => Err(refuse(
            caller,
            &format!("a Raft batch as member {from}"),
            &format!(
                "its [tls.identities] entry names no node: add `node = {from}` to it if that \
                 certificate is member {from}'s ({{ role = \"peer\", set = {}, node = {from} }}; \
                 README \"Upgrading\")",
                caller.set.map_or("S".to_string(), |s| s.to_string())
            ),
        )),
        _ => Err(refuse(
            caller,
            &format!("a Raft batch as member {from}"),
            "only a peer whose [tls.identities] entry names that node does",
        )),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Two sets, and an identity of each role (`app-1` client, `alloc`, `admin`, peers).
    pub(crate) fn tls_config() -> TlsConfig {
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
"store-0" = { role = "peer", set = 0, node = 1 }
"store-1" = { role = "peer", set = 1, node = 1 }
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
        authorize(&tls_config(), kind, p, path, false)
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
        let err = check(ServerKind::AllocSvr, &alloc, "seqsvr.v1.SeqService/Next").unwrap_err();
        assert!(err.contains("marked `seqsvr-no-forward: 1`"), "{err}");
        // An AllocSvr's own identity, forwarding a call (marked not to be forwarded again).
        let forwarded = |path| authorize(&tls_config(), ServerKind::AllocSvr, &alloc, path, true);
        assert!(forwarded("seqsvr.v1.SeqService/Next").is_ok());
        assert!(forwarded("seqsvr.v1.IdService/NextIds").is_ok());
        // ...on its own plane only: an application CA's certificate named like it gets nothing.
        let client_plane_alloc = peer("alloc", &[Plane::Client]);
        let tls = tls_config();
        let err = authorize(
            &tls,
            ServerKind::AllocSvr,
            &client_plane_alloc,
            "seqsvr.v1.SeqService/Next",
            true,
        )
        .unwrap_err();
        assert!(err.contains("store_ca"), "{err}");
        // A service the server does not run is refused, not passed through.
        assert!(check(ServerKind::AllocSvr, &admin, "seqsvr.v1.StoreAdmin/Status").is_err());
        assert!(check(STORE0, &admin, "other.Thing/Do").is_err());
    }

    /// The HTTP/JSON API's paths: clients and admins under `v1/`, any verified certificate for
    /// the probes, on an AllocSvr only; nothing else passes (not `v1` itself, not a StoreSvr).
    #[test]
    fn the_http_api_needs_the_roles_of_seq_service() {
        let (admin, client, alloc) = (peer("admin", ALL), peer("app-1", ALL), peer("alloc", ALL));
        let stranger = peer("stranger", ALL);
        let alloc_svr = ServerKind::AllocSvr;
        for path in ["v1/seq/next", "v1/seq/42", "v1/ids/snowflake/next", "v1/nope"] {
            assert!(check(alloc_svr, &client, path).is_ok(), "{path}");
            assert!(check(alloc_svr, &admin, path).is_ok(), "{path}");
            let err = check(alloc_svr, &alloc, path).unwrap_err();
            assert!(err.contains("needs role client or admin"), "{err}");
            assert!(check(alloc_svr, &stranger, path).is_err(), "{path}");
            assert!(check(STORE0, &admin, path).is_err(), "a StoreSvr serves no HTTP: {path}");
        }
        for probe in ["healthz", "readyz"] {
            assert_eq!(check(alloc_svr, &stranger, probe), Ok(None), "{probe}");
            assert!(check(STORE0, &stranger, probe).is_err(), "{probe}");
        }
        for other in ["v1", "v2/seq/next", "healthz/x", "metrics", ""] {
            assert!(check(alloc_svr, &admin, other).is_err(), "{other:?}");
        }
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
    fn a_member_sends_raft_batches_only_as_itself() {
        let mut request = tonic::Request::new(());
        assert!(require_own_node(&request, NodeId(2)).is_ok(), "plaintext: nothing to check");
        let member_1 = Caller {
            name: "store-0-1".into(),
            role: Role::Peer,
            set: Some(SetId(0)),
            node: Some(NodeId(1)),
        };
        request.extensions_mut().insert(member_1);
        assert!(require_own_node(&request, NodeId(1)).is_ok());
        let err = require_own_node(&request, NodeId(2)).unwrap_err();
        assert_eq!(err.code(), tonic::Code::PermissionDenied);
        assert!(
            err.message().starts_with(
                "identity \"store-0-1\" (role peer) may not make a Raft batch as member 2: its \
                 [tls.identities] entry names member 1"
            ),
            "{}",
            err.message()
        );
        let admin = Caller { name: "admin".into(), role: Role::Admin, set: None, node: None };
        request.extensions_mut().insert(admin);
        assert!(require_own_node(&request, NodeId(1)).is_err());
        // A peer entry written before peers named their node parses (a rolling upgrade's file),
        // but its batches are refused, saying what to add.
        let unbound =
            Caller { name: "store-0-3".into(), role: Role::Peer, set: Some(SetId(0)), node: None };
        request.extensions_mut().insert(unbound);
        let err = require_own_node(&request, NodeId(3)).unwrap_err();
        assert_eq!(err.code(), tonic::Code::PermissionDenied);
        assert!(
            err.message().contains("\"store-0-3\"")
                && err.message().contains("names no node: add `node = 3`"),
            "{}",
            err.message()
        );
    }

    /// Refused Raft batches write one audit line per WARN_EVERY, not one each. Fails without
    /// the throttle (three lines).
    #[test]
    fn refused_raft_batches_are_logged_at_most_once_per_warn_every() {
        let log = RefusalLog::new();
        let mut request = tonic::Request::new(());
        request.extensions_mut().insert(Caller {
            name: "store-0-1".into(),
            role: Role::Peer,
            set: Some(SetId(0)),
            node: Some(NodeId(1)),
        });
        for _ in 0..3 {
            let err = require_own_node_logged(&request, NodeId(2), &log).unwrap_err();
            assert_eq!(err.code(), tonic::Code::PermissionDenied);
        }
        assert_eq!(log.lines(), 1);
    }

    #[test]
    fn only_an_admin_passes_require_admin() {
        let mut request = tonic::Request::new(());
        assert!(require_admin(&request, "x").is_ok(), "plaintext: no caller, nothing to check");
        let alloc = Caller { name: "alloc-0-1".into(), role: Role::Alloc, set: None, node: None };
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
            node: None,
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
