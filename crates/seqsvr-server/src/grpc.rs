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
