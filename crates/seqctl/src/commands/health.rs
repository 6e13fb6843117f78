//! `seqctl health ADDR`: the grpc.health.v1 `Check` of one server, as an exit code a container
//! runtime or load balancer can use (0 only when SERVING).

use crate::cli::ServerRole;
use crate::ctx::Ctx;
use crate::error::{coded, CtlError, Exit};
use crate::render::{self, View};
use seqsvr_tls::Plane;
use serde::Serialize;
use std::time::Duration;
use tonic::Code;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

/// What a health check found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Health {
    /// The server answered with this status.
    Answered(ServingStatus),
    /// The server does not know the service (grpc.health.v1: `Check` answers NOT_FOUND).
    ServiceUnknown,
    /// No answer: not reachable, no health service, timed out, or the call failed.
    Failed(String),
}

/// The exit code of a health check: 0 only when SERVING; 1 when the server answered anything
/// else (NOT_SERVING, UNKNOWN, SERVICE_UNKNOWN); 2 when it gave no answer.
pub fn health_exit(health: &Health) -> Exit {
    match health {
        Health::Answered(ServingStatus::Serving) => Exit::Ok,
        Health::Answered(_) | Health::ServiceUnknown => Exit::Refused,
        Health::Failed(_) => Exit::NoAnswer,
    }
}

/// The health a `Check` call's outcome means.
pub fn classify(
    result: Result<ServingStatus, tonic::Status>,
    addr: &str,
    waited: Duration,
) -> Health {
    match result {
        Ok(status) => Health::Answered(status),
        Err(s) if s.code() == Code::NotFound => Health::ServiceUnknown,
        Err(s) if s.code() == Code::Unimplemented => {
            Health::Failed(format!("{addr} does not serve grpc.health.v1"))
        }
        Err(s) => Health::Failed(coded(&s, waited)),
    }
}

/// `ADDR SERVING` (with the service when one was named); `--json`:
/// `{"addr": ..., "service": ..., "status": "SERVING"}`.
#[derive(Debug, Serialize)]
pub struct HealthRow {
    pub addr: String,
    pub service: String,
    /// SERVING, NOT_SERVING, UNKNOWN or SERVICE_UNKNOWN.
    pub status: String,
}

impl View for HealthRow {
    fn text(&self) -> String {
        if self.service.is_empty() {
            format!("{} {}\n", self.addr, self.status)
        } else {
            format!("{} {} {}\n", self.addr, self.service, self.status)
        }
    }
}

async fn check(addr: &str, plane: Plane, service: &str, timeout: Duration) -> Health {
    let channel = match seqsvr_client::store::channel_on(addr, plane) {
        Ok(c) => c,
        Err(status) => return Health::Failed(status.message().to_string()),
    };
    let mut client = HealthClient::new(channel);
    let mut request = tonic::Request::new(HealthCheckRequest { service: service.to_string() });
    request.set_timeout(timeout);
    let result = match tokio::time::timeout(timeout, client.check(request)).await {
        Ok(r) => r.map(|r| {
            ServingStatus::try_from(r.into_inner().status).unwrap_or(ServingStatus::Unknown)
        }),
        Err(_) => Err(tonic::Status::deadline_exceeded(format!(
            "no answer within --timeout-ms {}",
            timeout.as_millis()
        ))),
    };
    classify(result, addr, timeout)
}

pub async fn health(
    ctx: &Ctx,
    addr: &str,
    service: &str,
    server: Option<ServerRole>,
) -> Result<Exit, CtlError> {
    let addr = addr.strip_prefix("http://").unwrap_or(addr);
    // Over TLS only with an identity: then the cluster file says how (and `ctx.config` sets
    // this process's identity). Plaintext otherwise, where the plane changes nothing.
    let plane = if ctx.tls_cert.is_some() || ctx.tls_key.is_some() {
        let config = ctx.config()?;
        let is_alloc = config.sets.iter().any(|s| s.allocs.iter().any(|a| a == addr));
        match server {
            Some(ServerRole::Alloc) => Plane::Client,
            Some(ServerRole::Store) => Plane::Store,
            None if is_alloc => Plane::Client,
            None => Plane::Store,
        }
    } else {
        // Without an identity the check is plaintext, explicitly (a TLS server refuses it).
        seqsvr_tls::use_plaintext();
        Plane::Store
    };
    let health = check(addr, plane, service, ctx.timeout).await;
    let status = match &health {
        Health::Answered(s) => s.as_str_name(),
        Health::ServiceUnknown => "SERVICE_UNKNOWN",
        Health::Failed(why) => {
            return Err(CtlError {
                exit: health_exit(&health),
                what: format!("health check of {addr} (service {service:?}) failed: {why}"),
                hint: Some(format!(
                    "is a StoreSvr or AllocSvr running at {addr}? One that is stopped or hung \
                     fails this way too; a busy one may need a larger --timeout-ms (now {})",
                    ctx.timeout.as_millis()
                )),
            });
        }
    };
    let row =
        HealthRow { addr: addr.to_string(), service: service.to_string(), status: status.into() };
    render::emit(ctx.json, &row)?;
    Ok(health_exit(&health))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_serving_exits_zero() {
        assert_eq!(health_exit(&Health::Answered(ServingStatus::Serving)).code(), 0);
        assert_eq!(health_exit(&Health::Answered(ServingStatus::NotServing)).code(), 1);
        assert_eq!(health_exit(&Health::Answered(ServingStatus::Unknown)).code(), 1);
        assert_eq!(health_exit(&Health::Answered(ServingStatus::ServiceUnknown)).code(), 1);
        assert_eq!(health_exit(&Health::ServiceUnknown).code(), 1);
        assert_eq!(health_exit(&Health::Failed("refused".into())).code(), 2);
    }

    #[test]
    fn call_outcomes_map_to_health() {
        let a = "127.0.0.1:1";
        let w = Duration::from_millis(300);
        assert_eq!(
            classify(Ok(ServingStatus::Serving), a, w),
            Health::Answered(ServingStatus::Serving)
        );
        assert_eq!(classify(Err(tonic::Status::not_found("x")), a, w), Health::ServiceUnknown);
        for status in [
            tonic::Status::unavailable("tcp connect error"),
            tonic::Status::deadline_exceeded("slow"),
            tonic::Status::cancelled("timeout"),
            tonic::Status::unimplemented(""),
            tonic::Status::internal("boom"),
        ] {
            assert!(matches!(classify(Err(status.clone()), a, w), Health::Failed(_)), "{status:?}");
        }
        assert_eq!(
            classify(Err(tonic::Status::unimplemented("")), a, w),
            Health::Failed("127.0.0.1:1 does not serve grpc.health.v1".into())
        );
        assert_eq!(
            classify(Err(tonic::Status::cancelled("Timeout expired")), a, w),
            Health::Failed("no answer within 300 ms".into())
        );
    }

    #[test]
    fn health_text_and_json() {
        let row =
            HealthRow { addr: "h:1".into(), service: String::new(), status: "SERVING".into() };
        assert_eq!(row.text(), "h:1 SERVING\n");
        assert_eq!(
            serde_json::to_value(&row).unwrap(),
            serde_json::json!({"addr": "h:1", "service": "", "status": "SERVING"})
        );
    }
}
