//! A leadership fence: the instant until which this process may write. Leader election moves it
//! forward after each renewal of the Lease; a tower layer on the client refuses every write
//! (POST, PUT, PATCH, DELETE) made after it, so a leader whose renewals stall stops writing at its
//! renewal deadline, before a standby may take over, whatever its controllers are doing then.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Instant;

use tower_layer::Layer;
use tower_service::Service;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The fence value meaning "always open" (no leader election).
const ALWAYS: u64 = u64::MAX;

/// Milliseconds since the first use of a fence in this process, so an instant fits in an atomic.
fn millis(at: Instant) -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    let start = *START.get_or_init(Instant::now);
    u64::try_from(at.saturating_duration_since(start).as_millis()).unwrap_or(ALWAYS - 1)
}

/// Shared by the elector that moves it and the clients that obey it.
#[derive(Clone, Debug)]
pub struct Fence {
    /// Writes are allowed while `millis(now)` is below this.
    until: Arc<AtomicU64>,
}

impl Fence {
    /// Never closes: for a process that does not take part in leader election.
    pub fn open() -> Fence {
        Fence {
            until: Arc::new(AtomicU64::new(ALWAYS)),
        }
    }

    /// Closed until [`Fence::open_until`] is called.
    pub fn closed() -> Fence {
        Fence {
            until: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Allows writes until `deadline` (it only ever moves forward, so a late renewal cannot
    /// shorten a later one).
    pub fn open_until(&self, deadline: Instant) {
        self.until.fetch_max(millis(deadline), Ordering::AcqRel);
    }

    /// Refuses writes from now on.
    pub fn close(&self) {
        self.until.store(0, Ordering::Release);
    }

    /// Whether a write may start now.
    pub fn is_open(&self) -> bool {
        millis(Instant::now()) < self.until.load(Ordering::Acquire)
    }
}

/// Why a write was refused.
#[derive(Debug, thiserror::Error)]
#[error("not writing {method} {path}: this process is not (or no longer) the leader")]
pub struct NotLeader {
    method: http::Method,
    path: String,
}

/// The layer: put it innermost (added first), so a write that waited for the rate limiter is
/// checked when it is sent.
#[derive(Clone, Debug)]
pub struct FenceLayer {
    fence: Fence,
}

impl FenceLayer {
    pub fn new(fence: Fence) -> FenceLayer {
        FenceLayer { fence }
    }
}

impl<S> Layer<S> for FenceLayer {
    type Service = Fenced<S>;

    fn layer(&self, inner: S) -> Fenced<S> {
        Fenced {
            inner,
            fence: self.fence.clone(),
        }
    }
}

/// A service that refuses writes while its fence is closed.
#[derive(Clone, Debug)]
pub struct Fenced<S> {
    inner: S,
    fence: Fence,
}

fn is_write(method: &http::Method) -> bool {
    !matches!(*method, http::Method::GET | http::Method::HEAD | http::Method::OPTIONS)
}

impl<S, B> Service<http::Request<B>> for Fenced<S>
where
    S: Service<http::Request<B>>,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
    S::Response: Send + 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        if is_write(request.method()) && !self.fence.is_open() {
            let refused = NotLeader {
                method: request.method().clone(),
                path: request.uri().path().to_string(),
            };
            return Box::pin(std::future::ready(Err(refused.into())));
        }
        let response = self.inner.call(request);
        Box::pin(async move { response.await.map_err(Into::into) })
    }
}

#[cfg(test)]
mod tests {
    use tower::ServiceExt;

    use std::time::Duration;

    use super::*;

    type Answer = std::future::Ready<Result<u8, std::convert::Infallible>>;
    type Backend = tower::util::ServiceFn<fn(http::Request<()>) -> Answer>;

    fn service(fence: &Fence) -> Fenced<Backend> {
        FenceLayer::new(fence.clone()).layer(tower::service_fn(|_| std::future::ready(Ok(1))))
    }

    #[tokio::test]
    async fn writes_pass_only_while_open_and_reads_always() {
        let fence = Fence::closed();
        let put = || {
            http::Request::put("/api/v1/namespaces/a/configmaps/b")
                .body(())
                .unwrap()
        };
        let get = || {
            http::Request::get("/api/v1/namespaces/a/configmaps/b")
                .body(())
                .unwrap()
        };
        let err = service(&fence).oneshot(put()).await.unwrap_err().to_string();
        assert!(
            err.contains("not (or no longer) the leader") && err.contains("PUT"),
            "{err}"
        );
        assert_eq!(
            service(&fence).oneshot(get()).await.unwrap(),
            1,
            "reads are never fenced"
        );

        fence.open_until(Instant::now() + Duration::from_secs(60));
        assert_eq!(service(&fence).oneshot(put()).await.unwrap(), 1);
        fence.open_until(Instant::now());
        assert!(fence.is_open(), "an earlier deadline does not shorten a later one");

        fence.close();
        assert!(service(&fence).oneshot(put()).await.is_err());

        let open = Fence::open();
        assert_eq!(service(&open).oneshot(put()).await.unwrap(), 1);
    }

    #[test]
    fn a_deadline_passed_is_closed() {
        let fence = Fence::closed();
        let now = Instant::now();
        fence.open_until(now + Duration::from_secs(1));
        assert!(fence.is_open());
        let passed = Fence::closed();
        passed.open_until(now.checked_sub(Duration::from_millis(1)).unwrap_or(now));
        assert!(!passed.is_open(), "a deadline already passed leaves the fence closed");
    }
}
