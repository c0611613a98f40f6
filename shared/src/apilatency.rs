//! Latency of every Kubernetes API call a process makes, as the histogram
//! `kubestellar_api_request_duration_seconds{server, verb, code}`: a tower layer on the client's
//! service stack, timing from sending a request to its response's headers (for a watch, until
//! the stream is open). `verb` is the HTTP method, or `WATCH` for a GET with `watch=true`;
//! `code` is the HTTP status, or `error` when no response came. The same calls are counted under
//! client-go's names, which dashboards for Kubernetes controllers read:
//! `rest_client_requests_total{code, method, host}` and
//! `rest_client_request_duration_seconds{verb, host}` (`host` is the server's host:port).

use std::future::Future;
use std::pin::Pin;
use std::sync::OnceLock;
use std::task::{Context, Poll};
use std::time::Instant;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
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

/// A call as client-go counts it.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Request {
    code: String,
    method: String,
    host: String,
}

/// A call as client-go times it.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Timing {
    verb: String,
    host: String,
}

/// The process's calls under client-go's names.
struct ClientGo {
    requests: Family<Request, Counter>,
    durations: Family<Timing, Histogram, fn() -> Histogram>,
}

fn client_go() -> &'static ClientGo {
    static CLIENT_GO: OnceLock<ClientGo> = OnceLock::new();
    CLIENT_GO.get_or_init(|| ClientGo {
        requests: Family::default(),
        // client-go's buckets.
        durations: Family::new_with_constructor(|| {
            Histogram::new([0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0])
        }),
    })
}

/// Adds the histograms and the request counter to a registry.
pub fn register(registry: &mut Registry) {
    registry.register(
        "kubestellar_api_request_duration_seconds",
        "Time from sending a Kubernetes API request to its response headers",
        latencies().clone(),
    );
    let client_go = client_go();
    registry.register(
        "rest_client_requests",
        "Number of HTTP requests, partitioned by status code, method, and host",
        client_go.requests.clone(),
    );
    registry.register(
        "rest_client_request_duration_seconds",
        "Request latency in seconds. Broken down by verb, and host",
        client_go.durations.clone(),
    );
}

/// Counts and times one finished call: `status` is its response's, `None` when none came.
fn observe(server: String, verb: String, host: &str, method: &str, status: Option<u16>, seconds: f64) {
    let client_go = client_go();
    client_go
        .requests
        .get_or_create(&Request {
            // client-go's code for a request that got no response.
            code: status.map_or_else(|| "<error>".to_string(), |s| s.to_string()),
            method: method.to_string(),
            host: host.to_string(),
        })
        .inc();
    client_go
        .durations
        .get_or_create(&Timing {
            verb: method.to_string(),
            host: host.to_string(),
        })
        .observe(seconds);
    let code = status.map_or_else(|| "error".to_string(), |s| s.to_string());
    latencies().get_or_create(&Call { server, verb, code }).observe(seconds);
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
    host: String,
}

impl ApiLatencyLayer {
    pub fn new(server: &str) -> ApiLatencyLayer {
        let server = server.trim_end_matches('/').to_string();
        let host = server.parse::<http::Uri>().ok().and_then(|uri| {
            let authority = uri.authority()?;
            Some(match authority.port() {
                Some(_) => authority.to_string(),
                None => format!(
                    "{}:{}",
                    authority.host(),
                    if uri.scheme_str() == Some("http") { 80 } else { 443 }
                ),
            })
        });
        ApiLatencyLayer {
            host: host.unwrap_or_else(|| server.clone()),
            server,
        }
    }
}

impl<S> Layer<S> for ApiLatencyLayer {
    type Service = Timed<S>;

    fn layer(&self, inner: S) -> Timed<S> {
        Timed {
            inner,
            server: self.server.clone(),
            host: self.host.clone(),
        }
    }
}

/// A service that times each call into the histogram.
#[derive(Clone)]
pub struct Timed<S> {
    inner: S,
    server: String,
    host: String,
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
        let (server, host, verb) = (self.server.clone(), self.host.clone(), verb(&request));
        let method = request.method().as_str().to_string();
        let started = Instant::now();
        let response = self.inner.call(request);
        Box::pin(async move {
            let result = response.await;
            let status = result.as_ref().ok().map(|response| response.status().as_u16());
            observe(server, verb, &host, &method, status, started.elapsed().as_secs_f64());
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
        assert!(
            text.contains(r#"rest_client_requests_total{code="409",method="PUT",host="test.invalid:1"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"rest_client_request_duration_seconds_count{verb="PUT",host="test.invalid:1"} 1"#),
            "{text}"
        );
    }
}
