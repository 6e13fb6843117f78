//! gRPC plumbing every server shares: reflection on both protocol versions that lists exactly
//! the services a server runs, and the health service those servers flip with their state.

use tonic_health::ServingStatus;

/// `grpc.health.v1.Health`.
pub const HEALTH_SERVICE: &str = "grpc.health.v1.Health";
/// The reflection services themselves, as clients (grpcurl, grpcui, Postman) ask for them.
pub const REFLECTION_SERVICES: [&str; 2] =
    ["grpc.reflection.v1.ServerReflection", "grpc.reflection.v1alpha.ServerReflection"];

/// The names a server advertises through reflection: its own services, health and reflection.
pub fn advertised(own: &[&str]) -> Vec<String> {
    own.iter()
        .copied()
        .chain([HEALTH_SERVICE])
        .chain(REFLECTION_SERVICES)
        .map(String::from)
        .collect()
}

/// Reflection on `grpc.reflection.v1` and `v1alpha` (older grpcurl, grpcui and Postman ask
/// the latter), advertising exactly `own` + health + reflection. Add both to the server.
#[allow(clippy::type_complexity)]
pub fn reflection(
    own: &[&str],
) -> anyhow::Result<(
    tonic_reflection::server::v1::ServerReflectionServer<
        impl tonic_reflection::server::v1::ServerReflection,
    >,
    tonic_reflection::server::v1alpha::ServerReflectionServer<
        impl tonic_reflection::server::v1alpha::ServerReflection,
    >,
)> {
    let builder = || {
        advertised(own).into_iter().fold(
            tonic_reflection::server::Builder::configure()
                .register_encoded_file_descriptor_set(seqsvr_proto::v1::FILE_DESCRIPTOR_SET)
                .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET),
            |b, name| b.with_service_name(name),
        )
    };
    Ok((builder().build_v1()?, builder().build_v1alpha()?))
}

/// A server's health as the `grpc.health.v1` service reports it: the overall status (service
/// name "") and each of `services` move together. Starts NOT_SERVING; logs every change with
/// its reason.
#[derive(Clone)]
pub struct Health {
    reporter: tonic_health::server::HealthReporter,
    services: Vec<String>,
    serving: std::sync::Arc<std::sync::Mutex<Option<bool>>>,
}

impl Health {
    /// The reporter and the service to add to the server.
    pub async fn new(
        services: &[&str],
    ) -> (
        Health,
        tonic_health::pb::health_server::HealthServer<impl tonic_health::pb::health_server::Health>,
    ) {
        let (reporter, service) = tonic_health::server::health_reporter();
        let health = Health {
            reporter,
            services: services.iter().map(|s| s.to_string()).collect(),
            serving: Default::default(),
        };
        health.apply(false).await;
        (health, service)
    }

    /// Whether it reports SERVING now (what HTTP readiness probes are answered from, so they
    /// and gRPC health never disagree).
    pub fn serving(&self) -> bool {
        self.serving.lock().unwrap_or_else(|e| e.into_inner()).unwrap_or(false)
    }

    /// Sets SERVING or NOT_SERVING; a change is logged at info with `reason`.
    pub async fn set(&self, serving: bool, reason: &str) {
        let changed = {
            let mut now = self.serving.lock().unwrap_or_else(|e| e.into_inner());
            let changed = *now != Some(serving);
            *now = Some(serving);
            changed
        };
        if changed {
            let status = if serving { "SERVING" } else { "NOT_SERVING" };
            tracing::info!(health = status, reason, "health changed");
            self.apply(serving).await;
        }
    }

    async fn apply(&self, serving: bool) {
        let status = if serving { ServingStatus::Serving } else { ServingStatus::NotServing };
        self.reporter.set_service_status("", status).await;
        for s in &self.services {
            self.reporter.set_service_status(s.as_str(), status).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_advertises_its_own_services_health_and_reflection() {
        let names = advertised(&["seqsvr.v1.SeqService"]);
        assert_eq!(
            names,
            [
                "seqsvr.v1.SeqService",
                "grpc.health.v1.Health",
                "grpc.reflection.v1.ServerReflection",
                "grpc.reflection.v1alpha.ServerReflection"
            ]
        );
        assert!(reflection(&["seqsvr.v1.StoreService", "seqsvr.v1.StoreAdmin"]).is_ok());
    }
}

/// Per-connection limits both servers apply to every connection, on every plane (see
/// [`ConnectionLimits::apply`]). Message sizes are per service, on each service
/// (`seqsvr_proto::*_MAX_BYTES`); deadlines are clamped by each server's handlers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// HTTP/2 `SETTINGS_MAX_CONCURRENT_STREAMS`: calls open at once on one connection. A client
    /// past it waits on its own side (h2 refuses the extra streams).
    pub max_concurrent_streams: u32,
    /// Handlers running at once for one connection; a call past it is refused at once with
    /// RESOURCE_EXHAUSTED (tonic's load shedding), never queued.
    pub max_calls_per_connection: usize,
    /// HTTP/2 PING every this often on an idle connection...
    pub http2_keepalive_interval: std::time::Duration,
    /// ...and the connection is closed when a PING is not answered within this.
    pub http2_keepalive_timeout: std::time::Duration,
}

impl ConnectionLimits {
    /// What both servers run with: 1024 streams, 512 running calls per connection (the SDK
    /// keeps 2 coalesced RPCs per AllocSvr in flight; an AllocSvr a handful per store member),
    /// PING every 30 s with 10 s to answer. TCP keepalive (60 s) is set on each accepted socket
    /// by [`seqsvr_tls::ServeExt::serve_maybe_tls`].
    pub const SERVER: ConnectionLimits = ConnectionLimits {
        max_concurrent_streams: 1024,
        max_calls_per_connection: 512,
        http2_keepalive_interval: std::time::Duration::from_secs(30),
        http2_keepalive_timeout: std::time::Duration::from_secs(10),
    };

    /// `server` with these limits and load shedding on.
    pub fn apply<L>(&self, server: tonic::transport::Server<L>) -> tonic::transport::Server<L> {
        server
            .max_concurrent_streams(self.max_concurrent_streams)
            .concurrency_limit_per_connection(self.max_calls_per_connection)
            .load_shed(true)
            .http2_keepalive_interval(Some(self.http2_keepalive_interval))
            .http2_keepalive_timeout(Some(self.http2_keepalive_timeout))
            .tcp_keepalive(Some(seqsvr_tls::TCP_KEEPALIVE))
    }
}
