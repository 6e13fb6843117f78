//! Admission of accepted TCP connections, before anything is read from them ([`AcceptGate`]):
//! at most [`AcceptLimits::max_connections_per_ip`] open connections from one remote IP, and
//! (TLS) at most [`AcceptLimits::max_handshakes`] handshakes in progress at once. A connection
//! past either is closed at once — never queued — counted in
//! `seqsvr_connections_refused_total{reason}`, and logged at most once per [`WARN_EVERY`] with
//! the number refused since.
//!
//! Why: each accepted connection is a file descriptor and (TLS) a task that waits up to
//! [`crate::HANDSHAKE_TIMEOUT`] for a ClientHello. Without a bound, a flood of stalled
//! handshakes from anyone who can reach the port exhausts the process's descriptors, and the
//! member can no longer open its own connections (Raft, the store). A refused handshake only
//! costs the client a retry; the connections already served are never touched.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// At most one warning line per reason this often (with the count refused since the last).
pub const WARN_EVERY: Duration = Duration::from_secs(10);

/// The bounds of one server's accept loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AcceptLimits {
    /// TLS handshakes in progress at once. A handshake is a few milliseconds of CPU for a real
    /// client, so this many at once is a reconnect storm of thousands of clients a second; a
    /// stalled one holds its slot for at most [`crate::HANDSHAKE_TIMEOUT`].
    pub max_handshakes: usize,
    /// Connections open at once from one remote IP (handshaking or served), counted from
    /// `accept` until the connection is closed. One SDK process holds a connection or two per
    /// AllocSvr, and thousands of them may share one NAT address, so this is large; it bounds
    /// what one address can take of the descriptors.
    pub max_connections_per_ip: usize,
}

impl AcceptLimits {
    /// What both servers use: 512 handshakes, 8192 connections per remote IP.
    pub const DEFAULT: AcceptLimits =
        AcceptLimits { max_handshakes: 512, max_connections_per_ip: 8192 };
}

impl Default for AcceptLimits {
    fn default() -> Self {
        AcceptLimits::DEFAULT
    }
}

/// Why a connection was closed at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Its remote IP already has `max_connections_per_ip` open.
    PerIp,
    /// `max_handshakes` handshakes were in progress.
    Handshakes,
}

impl Refusal {
    fn label(self) -> &'static str {
        match self {
            Refusal::PerIp => "per_ip",
            Refusal::Handshakes => "handshakes",
        }
    }
}

/// One limit's refusals since its last warning line.
#[derive(Default)]
struct Warned {
    last: Option<Instant>,
    since: u64,
}

/// The admission state of one accept loop; shared with what it hands out ([`IpSlot`]).
pub struct AcceptGate {
    limits: AcceptLimits,
    handshakes: Arc<Semaphore>,
    per_ip: Mutex<HashMap<IpAddr, usize>>,
    refused_per_ip: AtomicU64,
    refused_handshakes: AtomicU64,
    warned: Mutex<[Warned; 2]>,
}

impl AcceptGate {
    pub fn new(limits: AcceptLimits) -> Arc<AcceptGate> {
        assert!(limits.max_handshakes > 0 && limits.max_connections_per_ip > 0, "{limits:?}");
        Arc::new(AcceptGate {
            limits,
            handshakes: Arc::new(Semaphore::new(limits.max_handshakes)),
            per_ip: Mutex::new(HashMap::new()),
            refused_per_ip: AtomicU64::new(0),
            refused_handshakes: AtomicU64::new(0),
            warned: Mutex::new(Default::default()),
        })
    }

    pub fn limits(&self) -> AcceptLimits {
        self.limits
    }

    /// Counts a connection from `remote` as open until the returned slot is dropped; `None`
    /// (refused, counted, logged): its IP is at the limit. The caller drops the socket.
    pub fn admit(self: &Arc<Self>, remote: SocketAddr) -> Option<IpSlot> {
        let ip = remote.ip().to_canonical();
        let mut per_ip = self.per_ip.lock().unwrap_or_else(|e| e.into_inner());
        let open = per_ip.entry(ip).or_insert(0);
        if *open >= self.limits.max_connections_per_ip {
            drop(per_ip);
            self.refuse(Refusal::PerIp, remote);
            return None;
        }
        *open += 1;
        Some(IpSlot { gate: self.clone(), ip })
    }

    /// A handshake slot, held until the handshake ends; `None` (refused, counted, logged): the
    /// limit is reached. The caller drops the socket.
    pub fn handshake(&self, remote: SocketAddr) -> Option<OwnedSemaphorePermit> {
        match self.handshakes.clone().try_acquire_owned() {
            Ok(permit) => Some(permit),
            Err(_) => {
                self.refuse(Refusal::Handshakes, remote);
                None
            }
        }
    }

    /// Handshakes in progress now.
    pub fn handshakes_in_progress(&self) -> usize {
        self.limits.max_handshakes - self.handshakes.available_permits()
    }

    /// Connections open now from `ip`.
    pub fn open_from(&self, ip: IpAddr) -> usize {
        let per_ip = self.per_ip.lock().unwrap_or_else(|e| e.into_inner());
        per_ip.get(&ip.to_canonical()).copied().unwrap_or(0)
    }

    /// Connections closed at once so far for `why`.
    pub fn refused(&self, why: Refusal) -> u64 {
        match why {
            Refusal::PerIp => self.refused_per_ip.load(Ordering::Relaxed),
            Refusal::Handshakes => self.refused_handshakes.load(Ordering::Relaxed),
        }
    }

    fn refuse(&self, why: Refusal, remote: SocketAddr) {
        let counter = match why {
            Refusal::PerIp => &self.refused_per_ip,
            Refusal::Handshakes => &self.refused_handshakes,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        metrics::counter!("seqsvr_connections_refused_total", "reason" => why.label()).increment(1);
        let mut warned = self.warned.lock().unwrap_or_else(|e| e.into_inner());
        let w = &mut warned[why as usize];
        w.since += 1;
        let now = Instant::now();
        if w.last.is_some_and(|last| now.duration_since(last) < WARN_EVERY) {
            return;
        }
        let refused = std::mem::take(&mut w.since);
        w.last = Some(now);
        drop(warned);
        let AcceptLimits { max_handshakes, max_connections_per_ip } = self.limits;
        match why {
            Refusal::PerIp => tracing::warn!(%remote, refused, max_connections_per_ip,
                "closed new connections at once: their remote IP already has \
                 max_connections_per_ip open (at most one line per 10 s; `refused` counts since \
                 the last, seqsvr_connections_refused_total{{reason=\"per_ip\"}} all)"),
            Refusal::Handshakes => tracing::warn!(%remote, refused, max_handshakes,
                "closed new connections at once: max_handshakes TLS handshakes are in progress \
                 (stalled clients? at most one line per 10 s; `refused` counts since the last, \
                 seqsvr_connections_refused_total{{reason=\"handshakes\"}} all)"),
        }
    }
}

/// A connection counted as open from its IP until this is dropped (with the connection).
pub struct IpSlot {
    gate: Arc<AcceptGate>,
    ip: IpAddr,
}

impl Drop for IpSlot {
    fn drop(&mut self) {
        let mut per_ip = self.gate.per_ip.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(open) = per_ip.get_mut(&self.ip) {
            *open -= 1;
            if *open == 0 {
                per_ip.remove(&self.ip);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ip: &str) -> SocketAddr {
        SocketAddr::new(ip.parse().unwrap(), 40000)
    }

    #[test]
    fn slots_count_per_ip_until_dropped_and_handshakes_until_released() {
        let gate = AcceptGate::new(AcceptLimits { max_handshakes: 1, max_connections_per_ip: 2 });
        let a = gate.admit(at("10.0.0.1")).unwrap();
        let b = gate.admit(at("10.0.0.1")).unwrap();
        assert!(gate.admit(at("10.0.0.1")).is_none(), "a third from one IP");
        // The same IP as an IPv4-mapped IPv6 address is the same IP.
        assert!(gate.admit(at("::ffff:10.0.0.1")).is_none());
        let other = gate.admit(at("10.0.0.2")).unwrap();
        assert_eq!(gate.refused(Refusal::PerIp), 2);
        drop(a);
        assert_eq!(gate.open_from("10.0.0.1".parse().unwrap()), 1);
        let _again = gate.admit(at("10.0.0.1")).unwrap();
        drop((b, other));

        let permit = gate.handshake(at("10.0.0.3")).unwrap();
        assert_eq!(gate.handshakes_in_progress(), 1);
        assert!(gate.handshake(at("10.0.0.4")).is_none());
        assert_eq!(gate.refused(Refusal::Handshakes), 1);
        drop(permit);
        assert!(gate.handshake(at("10.0.0.4")).is_some());
    }
}
