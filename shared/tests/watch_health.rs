//! Watch health, as `/metrics` and `/readyz` show it. One test, in a process of its own: the
//! watches followed are the process's, so tests running beside it would see each other's.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use futures::{StreamExt, stream};
use ks_shared::runtime::watch_health::{self, WatchRole};
use ks_shared::serve::{Readiness, router};
use kube::runtime::watcher;
use prometheus_client::registry::Registry;
use tower::ServiceExt;

fn failure() -> Result<watcher::Event<String>, String> {
    Err("403 forbidden".to_string())
}

async fn readyz() -> (StatusCode, String) {
    let router = router(Arc::new(Registry::default()), Readiness::default());
    let request = Request::get("/readyz").body(Body::empty()).unwrap();
    let response = router.oneshot(request).await.unwrap();
    let status = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20).await.unwrap();
    (status, String::from_utf8(bytes.to_vec()).unwrap())
}

fn metrics() -> String {
    let mut registry = Registry::default();
    watch_health::register(&mut registry);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    text
}

#[tokio::test]
async fn a_stuck_watch_shows_in_metrics_and_readiness_until_something_gets_through() {
    // One resource among many: stuck after three failures in a row; the start of a list
    // between them does not count as getting through.
    let events = vec![
        failure(),
        failure(),
        Ok(watcher::Event::Init),
        failure(),
        Ok(watcher::Event::InitDone),
    ];
    let workload = watch_health::observe("workload:apps/widgets", WatchRole::OneOfMany, stream::iter(events));
    futures::pin_mut!(workload);
    for _ in 0..3 {
        workload.next().await;
    }
    assert_eq!(watch_health::stuck_watch("workload:apps/widgets"), None);
    assert_eq!(readyz().await, (StatusCode::OK, "ok".to_string()));
    workload.next().await;
    let stuck = "watch workload:apps/widgets stuck: 3 failures in a row, the last: 403 forbidden";
    assert_eq!(
        readyz().await,
        (StatusCode::OK, format!("ok\n{stuck}")),
        "ready: the rest works on"
    );
    let text = metrics();
    assert!(
        text.contains("kubestellar_watch_stuck{watch=\"workload:apps/widgets\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("kubestellar_watch_errors_total{watch=\"workload:apps/widgets\"} 3"),
        "{text}"
    );

    // One the process needs: not ready while it is stuck.
    let mut essential = Box::pin(watch_health::observe(
        "ManifestWork",
        WatchRole::Essential,
        stream::iter((0..3).map(|_| failure())),
    ));
    for _ in 0..3 {
        essential.next().await;
    }
    let (code, body) = readyz().await;
    assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE);
    assert!(body.contains("watch ManifestWork stuck: 3 failures"), "{body}");
    drop(essential);
    assert_eq!(readyz().await.0, StatusCode::OK, "a watch dropped is forgotten");
    assert!(!metrics().contains("kubestellar_watch_stuck{watch=\"ManifestWork\"}"));

    // A finished list clears it.
    workload.next().await;
    assert_eq!(watch_health::stuck_watch("workload:apps/widgets"), None);
    assert_eq!(readyz().await, (StatusCode::OK, "ok".to_string()));
    assert!(metrics().contains("kubestellar_watch_stuck{watch=\"workload:apps/widgets\"} 0"));
}
