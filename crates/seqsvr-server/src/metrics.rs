//! Prometheus metrics: every server exports its series on an HTTP listener of its own
//! (`--metrics-addr`, `GET /metrics`), recorded through the `metrics` facade and rendered by
//! `metrics-exporter-prometheus`. Names follow Prometheus practice: `seqsvr_` prefix, base
//! units, `_total` counters, `_seconds` histograms, and never a uid in a label.
//!
//! The listener is the exporter's own: plaintext HTTP, no client certificate, and no bound on
//! the connections it holds open (its allow-list answers 403 after accepting; nothing like
//! `seqsvr-tls`'s `AcceptGate` can be put in front of it). Anyone who reaches it can read every
//! series and hold connections, each a file descriptor of this process. So `auto` binds it to
//! the loopback address, and an explicit address should be a private interface only the
//! scraper reaches (README "Metrics").

use anyhow::{bail, Context};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// Latency buckets, in seconds: 50 µs to 10 s.
pub const LATENCY_BUCKETS: &[f64] = &[
    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0,
];

/// Buckets for counts of things per request (uids in a batch, sections in an advance).
pub const COUNT_BUCKETS: &[f64] =
    &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 4096.0];

/// Histograms (by full name) that count things rather than time.
pub const COUNT_HISTOGRAMS: &[&str] = &["seqsvr_alloc_batch_uids", "seqsvr_alloc_advance_sections"];

/// How far the default metrics port sits above the gRPC port (`7101` → `17101`).
pub const DEFAULT_PORT_OFFSET: u16 = 10_000;

/// Where the metrics listener goes: `off`, `auto` (the loopback address — `127.0.0.1`, or `::1`
/// for an IPv6 gRPC address — at the gRPC port + [`DEFAULT_PORT_OFFSET`]: never the gRPC
/// interface, since the listener is ungated), or an explicit `host:port`.
pub fn metrics_addr(flag: &str, grpc_listen: SocketAddr) -> anyhow::Result<Option<SocketAddr>> {
    match flag {
        "off" => Ok(None),
        "auto" => {
            let Some(port) = grpc_listen.port().checked_add(DEFAULT_PORT_OFFSET) else {
                bail!(
                    "--metrics-addr auto would use port {} + {DEFAULT_PORT_OFFSET}, past 65535: \
                     give --metrics-addr HOST:PORT (or off)",
                    grpc_listen.port()
                );
            };
            let loopback = match grpc_listen {
                SocketAddr::V4(_) => IpAddr::V4(Ipv4Addr::LOCALHOST),
                SocketAddr::V6(_) => IpAddr::V6(Ipv6Addr::LOCALHOST),
            };
            Ok(Some(SocketAddr::new(loopback, port)))
        }
        other => other.parse().map(Some).with_context(|| {
            format!("--metrics-addr {other:?} is not `off`, `auto` or an IP address with a port")
        }),
    }
}

/// Installs the process-wide recorder and serves `/metrics` on `addr` from the current Tokio
/// runtime. `labels` go on every series (e.g. `set`, `node`). Fails when the address cannot be
/// bound, or when a recorder is already installed (one per process).
pub fn install(addr: SocketAddr, labels: &[(&str, String)]) -> anyhow::Result<()> {
    let mut builder = PrometheusBuilder::new()
        .with_http_listener(addr)
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), LATENCY_BUCKETS)?;
    for name in COUNT_HISTOGRAMS {
        builder = builder.set_buckets_for_metric(Matcher::Full((*name).into()), COUNT_BUCKETS)?;
    }
    for (k, v) in labels {
        builder = builder.add_global_label(*k, v.clone());
    }
    let (recorder, exporter) =
        builder.build().with_context(|| format!("cannot serve metrics on {addr}"))?;
    metrics::set_global_recorder(recorder)
        .map_err(|_| anyhow::anyhow!("a metrics recorder is already installed in this process"))?;
    tokio::spawn(async move {
        if let Err(e) = exporter.await {
            tracing::error!(error = ?e, "the metrics listener stopped");
        }
    });
    tracing::info!(%addr, "serving Prometheus metrics at http://{addr}/metrics");
    Ok(())
}

/// Seconds in a `Duration`, as the `f64` histograms record.
pub fn seconds(d: std::time::Duration) -> f64 {
    d.as_secs_f64()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_metrics_address_is_off_auto_or_explicit() {
        let listen: SocketAddr = "127.0.0.1:7101".parse().unwrap();
        assert_eq!(metrics_addr("off", listen).unwrap(), None);
        assert_eq!(metrics_addr("auto", listen).unwrap(), Some("127.0.0.1:17101".parse().unwrap()));
        assert_eq!(
            metrics_addr("0.0.0.0:9100", listen).unwrap(),
            Some("0.0.0.0:9100".parse().unwrap())
        );
        let high: SocketAddr = "127.0.0.1:60000".parse().unwrap();
        assert!(metrics_addr("auto", high).unwrap_err().to_string().contains("past 65535"));
        assert!(metrics_addr("localhost", listen).is_err());
        // The listener is ungated: `auto` never puts it on the gRPC interface.
        let public: SocketAddr = "0.0.0.0:7101".parse().unwrap();
        assert_eq!(metrics_addr("auto", public).unwrap(), Some("127.0.0.1:17101".parse().unwrap()));
        let v6: SocketAddr = "[2001:db8::1]:7101".parse().unwrap();
        assert_eq!(metrics_addr("auto", v6).unwrap(), Some("[::1]:17101".parse().unwrap()));
    }
}
