//! Latency of every Kubernetes API call a process makes, as the histogram
//! `kubestellar_api_request_duration_seconds{server, verb, code}`: a tower layer on the client's
//! service stack, timing from sending a request to its response's headers (for a watch, until
//! the stream is open). `verb` is the HTTP method, or `WATCH` for a GET with `watch=true`;
//! `code` is the HTTP status, or `error` when no response came.

use std::future::Future;
use std::pin::Pin;
use std::sync::OnceLock;
use std::task::{Context, Poll};
use std::time::Instant;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use tower_layer::Layer;
use tower_service::Service;

/// What one API call is counted by.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Call {
    pub server: String,
    pub verb: String,
    pub code: String,
}

type Latencies = Family<Call, Histogram, fn() -> Histogram>;

fn buckets() -> Histogram {
    // 1 ms to about 33 s.
    Histogram::new(exponential_buckets(0.001, 2.0, 16))
}

/// The process's API call latencies.
pub fn latencies() -> &'static Latencies {
    static LATENCIES: OnceLock<Latencies> = OnceLock::new();
    LATENCIES.get_or_init(|| Family::new_with_constructor(buckets))
}

/// Adds the histogram to a registry.
pub fn register(registry: &mut Registry) {
    registry.register(
        "kubestellar_api_request_duration_seconds",
        "Time from sending a Kubernetes API request to its response headers",
        latencies().clone(),
    );
}

/// The verb of a request: its method, or `WATCH`.
pub fn verb<B>(request: &http::Request<B>) -> String {
    let watch = request
        .uri()
        .query()
        .is_some_and(|q| q.split('&').any(|p| p == "watch=true" || p == "watch=1"));
    if request.method() == http::Method::GET && watch {
        "WATCH".to_string()
    } else {
        request.method().as_str().to_string()
    }
}

/// The layer, for the API server at `server` (its URL, as the label).
#[derive(Clone, Debug)]
pub struct ApiLatencyLayer {
    server: String,
}

impl ApiLatencyLayer {
    pub fn new(server: &str) -> ApiLatencyLayer {
        ApiLatencyLayer {
            server: server.trim_end_matches('/').to_string(),
        }
    }
}

impl<S> Layer<S> for ApiLatencyLayer {
    type Service = Timed<S>;

    fn layer(&self, inner: S) -> Timed<S> {
        Timed {
            inner,
            server: self.server.clone(),
        }
    }
}

/// A service that times each call into the histogram.
#[derive(Clone)]
pub struct Timed<S> {
    inner: S,
    server: String,
}

impl<S, B, R> Service<http::Request<B>> for Timed<S>
where
    S: Service<http::Request<B>, Response = http::Response<R>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let (server, verb) = (self.server.clone(), verb(&request));
        let started = Instant::now();
        let response = self.inner.call(request);
        Box::pin(async move {
            let result = response.await;
            let code = match &result {
                Ok(response) => response.status().as_u16().to_string(),
                Err(_) => "error".to_string(),
            };
            latencies()
                .get_or_create(&Call { server, verb, code })
                .observe(started.elapsed().as_secs_f64());
            result
        })
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use tower::ServiceExt;

    use super::*;

    #[test]
    fn verbs() {
        let get = |uri: &str| http::Request::get(uri).body(()).unwrap();
        assert_eq!(verb(&get("/api/v1/pods?watch=true&resourceVersion=1")), "WATCH");
        assert_eq!(verb(&get("/api/v1/pods?limit=500")), "GET");
        assert_eq!(verb(&http::Request::patch("/x?watch=true").body(()).unwrap()), "PATCH");
    }

    #[tokio::test]
    async fn each_call_is_observed_with_its_code() {
        let inner = tower::service_fn(|_: http::Request<()>| async {
            Ok::<_, Infallible>(http::Response::builder().status(409).body(()).unwrap())
        });
        let service = ApiLatencyLayer::new("https://test.invalid:1/").layer(inner);
        let request = http::Request::put("/apis/x").body(()).unwrap();
        service.oneshot(request).await.unwrap();
        let call = Call {
            server: "https://test.invalid:1".into(),
            verb: "PUT".into(),
            code: "409".into(),
        };
        let mut text = String::new();
        let mut registry = Registry::default();
        register(&mut registry);
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(latencies().get(&call).is_some(), "{text}");
        assert!(
            text.contains(r#"kubestellar_api_request_duration_seconds_count{server="https://test.invalid:1",verb="PUT",code="409"} 1"#),
            "{text}"
        );
    }
}
