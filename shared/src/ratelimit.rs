//! Client-side rate limiting for Kubernetes API requests (`--hub-qps`/`--hub-burst`,
//! `--local-qps`/`--local-burst`). kube-rs has none built in, so this is a token bucket as a
//! tower layer on the client's service stack, with client-go's meaning: on average at most
//! `qps` requests per second, up to `burst` at once. A watch counts once, when it is opened.
//! A `qps` of 0 turns limiting off.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use tokio::time::{Instant, Sleep};
use tower_layer::Layer;
use tower_service::Service;

/// No request waits longer than this for a token, however low the rate.
const MAX_WAIT: Duration = Duration::from_secs(3600);

/// Tokens that refill at `qps` per second up to `burst`. Taking one may drive the balance below
/// zero: the caller then waits until its token would have arrived, so waiters keep their order.
#[derive(Debug)]
pub struct Bucket {
    qps: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
}

impl Bucket {
    /// A full bucket.
    pub fn new(qps: f64, burst: u32, now: Instant) -> Bucket {
        let burst = f64::from(burst.max(1));
        Bucket {
            qps,
            burst,
            tokens: burst,
            last: now,
        }
    }

    /// Takes a token; returns how long to wait before using it.
    pub fn take(&mut self, now: Instant) -> Duration {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.last = now;
        self.tokens = (self.tokens + elapsed * self.qps).min(self.burst) - 1.0;
        if self.tokens >= 0.0 {
            Duration::ZERO
        } else {
            // A tiny qps means a very long wait, never an overflow.
            Duration::try_from_secs_f64(-self.tokens / self.qps).map_or(MAX_WAIT, |wait| wait.min(MAX_WAIT))
        }
    }
}

/// The layer; `None` inside means unlimited.
#[derive(Clone, Debug)]
pub struct RateLimitLayer {
    bucket: Option<Arc<Mutex<Bucket>>>,
}

impl RateLimitLayer {
    /// At most `qps` requests per second on average, `burst` at once; unlimited when `qps` is 0
    /// (or not a finite positive number).
    pub fn new(qps: f32, burst: u32) -> RateLimitLayer {
        let bucket = (qps > 0.0 && qps.is_finite())
            .then(|| Arc::new(Mutex::new(Bucket::new(f64::from(qps), burst, Instant::now()))));
        RateLimitLayer { bucket }
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimited<S>;

    fn layer(&self, inner: S) -> RateLimited<S> {
        RateLimited {
            inner,
            bucket: self.bucket.clone(),
            wait: None,
            holds_token: false,
        }
    }
}

/// A service that waits for a token before each request.
pub struct RateLimited<S> {
    inner: S,
    bucket: Option<Arc<Mutex<Bucket>>>,
    wait: Option<Pin<Box<Sleep>>>,
    /// A token has been taken for the next call.
    holds_token: bool,
}

impl<S, R> Service<R> for RateLimited<S>
where
    S: Service<R>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        if let Some(bucket) = &self.bucket
            && !self.holds_token
        {
            let delay = bucket
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take(Instant::now());
            self.holds_token = true;
            if !delay.is_zero() {
                self.wait = Some(Box::pin(tokio::time::sleep(delay)));
            }
        }
        if let Some(wait) = self.wait.as_mut() {
            ready!(wait.as_mut().poll(cx));
            self.wait = None;
        }
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: R) -> Self::Future {
        self.holds_token = false;
        self.inner.call(request)
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use super::*;

    #[test]
    fn burst_then_qps() {
        let start = Instant::now();
        let mut bucket = Bucket::new(5.0, 2, start);
        assert_eq!(bucket.take(start), Duration::ZERO);
        assert_eq!(bucket.take(start), Duration::ZERO);
        assert_eq!(bucket.take(start), Duration::from_millis(200));
        assert_eq!(bucket.take(start), Duration::from_millis(400), "waiters queue up");
        let later = start + Duration::from_secs(10);
        assert_eq!(bucket.take(later), Duration::ZERO, "refilled, capped at the burst");
        assert_eq!(bucket.take(later), Duration::ZERO);
        assert!(bucket.take(later) > Duration::ZERO);

        let mut slow = Bucket::new(1e-30, 1, start);
        slow.take(start);
        assert_eq!(slow.take(start), MAX_WAIT, "no overflow");
    }

    #[derive(Default)]
    struct Count(u32);

    impl Service<()> for Count {
        type Response = u32;
        type Error = Infallible;
        type Future = std::future::Ready<Result<u32, Infallible>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, _: ()) -> Self::Future {
            self.0 += 1;
            std::future::ready(Ok(self.0))
        }
    }

    async fn send(service: &mut RateLimited<Count>) -> u32 {
        std::future::poll_fn(|cx| service.poll_ready(cx)).await.unwrap();
        service.call(()).await.unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn requests_wait_for_tokens() {
        let mut limited = RateLimitLayer::new(10.0, 3).layer(Count::default());
        let start = Instant::now();
        for _ in 0..3 {
            send(&mut limited).await;
        }
        assert_eq!(start.elapsed(), Duration::ZERO, "the burst passes at once");
        assert_eq!(send(&mut limited).await, 4);
        assert_eq!(start.elapsed(), Duration::from_millis(100));

        let mut unlimited = RateLimitLayer::new(0.0, 1).layer(Count::default());
        for _ in 0..100 {
            send(&mut unlimited).await;
        }
        assert_eq!(start.elapsed(), Duration::from_millis(100), "qps 0 is unlimited");
    }
}
