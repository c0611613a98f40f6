//! The HTTP endpoint every process serves: `/metrics` (Prometheus text), `/healthz` (alive)
//! and `/readyz` (ready only once every registered readiness gate has opened, e.g. caches synced,
//! and while no watch the process needs is stuck).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::runtime::watch_health;

/// Named conditions that must all hold before the process reports ready.
#[derive(Clone, Default, Debug)]
pub struct Readiness {
    gates: Arc<Mutex<BTreeMap<String, bool>>>,
}

/// One condition of [`Readiness`]; open it when it holds.
#[derive(Debug)]
pub struct ReadyGate {
    name: String,
    readiness: Readiness,
}

impl Readiness {
    /// Registers a closed gate; the process is not ready until it is opened.
    pub fn gate(&self, name: impl Into<String>) -> ReadyGate {
        let name = name.into();
        self.lock().insert(name.clone(), false);
        ReadyGate {
            name,
            readiness: self.clone(),
        }
    }

    /// The names of the gates not yet open.
    pub fn waiting_for(&self) -> Vec<String> {
        self.lock()
            .iter()
            .filter(|(_, open)| !**open)
            .map(|(n, _)| n.clone())
            .collect()
    }

    pub fn is_ready(&self) -> bool {
        self.waiting_for().is_empty()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, bool>> {
        // A panic elsewhere while holding the lock leaves the map itself intact.
        self.gates.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl ReadyGate {
    pub fn open(&self) {
        self.readiness.lock().insert(self.name.clone(), true);
    }

    /// Closes the gate again, e.g. while an informer re-lists.
    pub fn close(&self) {
        self.readiness.lock().insert(self.name.clone(), false);
    }
}

#[derive(Clone)]
struct Endpoint {
    registry: Arc<Registry>,
    readiness: Readiness,
}

/// The router with the three endpoints.
pub fn router(registry: Arc<Registry>, readiness: Readiness) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .with_state(Endpoint { registry, readiness })
}

async fn metrics(State(endpoint): State<Endpoint>) -> impl IntoResponse {
    let mut body = String::new();
    match prometheus_client::encoding::text::encode(&mut body, &endpoint.registry) {
        Ok(()) => (
            StatusCode::OK,
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            body,
        )
            .into_response(),
        Err(err) => (StatusCode::INTERNAL_SERVER_ERROR, format!("encoding metrics: {err}")).into_response(),
    }
}

/// 200 once every gate is open and no watch the process needs is stuck, else 503; the body says
/// what it waits for and names every stuck watch, with its last error (those of one resource
/// among many too, which leave the process ready).
async fn readyz(State(endpoint): State<Endpoint>) -> impl IntoResponse {
    let waiting = endpoint.readiness.waiting_for();
    let stuck = watch_health::stuck();
    let ready = waiting.is_empty() && !stuck.iter().any(|s| s.role == watch_health::WatchRole::Essential);
    let mut lines = Vec::new();
    if ready {
        lines.push("ok".to_string());
    } else if !waiting.is_empty() {
        lines.push(format!("waiting for: {}", waiting.join(", ")));
    }
    lines.extend(stuck.iter().map(ToString::to_string));
    let code = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (code, lines.join("\n"))
}

/// Binds the endpoint's address; a clear error when it is taken.
pub async fn bind(address: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(address)
        .await
        .map_err(|err| std::io::Error::new(err.kind(), format!("cannot listen on {address}: {err}")))
}

/// Serves the endpoints until `shutdown` is cancelled.
pub async fn serve(
    listener: TcpListener,
    registry: Arc<Registry>,
    readiness: Readiness,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    axum::serve(listener, router(registry, readiness))
        .with_graceful_shutdown(shutdown.cancelled_owned())
        .await
}

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use axum::http::Request;
    use prometheus_client::metrics::counter::Counter;
    use tower::ServiceExt;

    use super::*;

    async fn get_path(router: Router, path: &str) -> (StatusCode, String) {
        let response = router
            .oneshot(Request::get(path).body(Body::empty()).unwrap())
            .await
            .unwrap();
        let status = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 20).await.unwrap();
        (status, String::from_utf8(bytes.to_vec()).unwrap())
    }

    #[tokio::test]
    async fn ready_only_when_every_gate_is_open() {
        let readiness = Readiness::default();
        let router = || router(Arc::new(Registry::default()), readiness.clone());
        assert_eq!(get_path(router(), "/readyz").await.0, StatusCode::OK, "no gates: ready");

        let wds = readiness.gate("wds-informers");
        let its = readiness.gate("its-informers");
        assert_eq!(
            get_path(router(), "/readyz").await,
            (
                StatusCode::SERVICE_UNAVAILABLE,
                "waiting for: its-informers, wds-informers".into()
            )
        );
        wds.open();
        assert_eq!(get_path(router(), "/readyz").await.1, "waiting for: its-informers");
        its.open();
        assert_eq!(get_path(router(), "/readyz").await.0, StatusCode::OK);
        its.close();
        assert_eq!(get_path(router(), "/readyz").await.0, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            get_path(router(), "/healthz").await,
            (StatusCode::OK, "ok".into()),
            "alive while not ready"
        );
    }

    #[tokio::test]
    async fn metrics_are_prometheus_text() {
        let mut registry = Registry::default();
        let reconciles = Counter::<u64>::default();
        registry.register("kubestellar_reconciles", "Reconciles run", reconciles.clone());
        reconciles.inc_by(3);
        let (status, body) = get_path(router(Arc::new(registry), Readiness::default()), "/metrics").await;
        assert_eq!(status, StatusCode::OK);
        assert!(body.contains("kubestellar_reconciles_total 3"), "{body}");
        assert!(body.ends_with("# EOF\n"));
    }

    #[tokio::test]
    async fn taken_address_is_a_clear_error() {
        let first = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let address = first.local_addr().unwrap();
        let err = bind(address).await.unwrap_err().to_string();
        assert!(err.contains(&address.to_string()), "{err}");
    }
}
