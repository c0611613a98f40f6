//! Tracing adds no writes: the same rollout with the hub's tracing off and then on causes the
//! same number of ManifestWork and WorkStatus writes. Watches on the rollout's own ManifestWorks
//! and WorkStatuses see every write: a new ManifestWork generation (a spec write, where trace
//! context would go) or a new WorkStatus version (only the agents write those).
//! The rollout is a Namespace and a Gauge (a custom resource: it has a generation, so it is
//! traced; nothing changes its status, so the count of writes does not depend on timing).
//! It restarts the hub, so it is a test binary of its own (cargo runs binaries one at a time).

use std::collections::BTreeSet;
use std::fmt::Debug;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::ensure;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use ks_shared::api::{BindingPolicy, WorkStatus};
use ks_shared::names::{self, TRACEPARENT_ANNOTATION};
use ks_shared::ocm::ManifestWork;
use ks_tests::harness::{Ctx, apply, run, wait_until};
use ks_tests::metrics::sample;
use ks_tests::stack::{HubOptions, Tracing};
use ks_tests::stack_test;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::json;

const DEADLINE: Duration = Duration::from_secs(90);
const WECS: [&str; 2] = ["cluster1", "cluster2"];
const PATH: &[&str] = &[
    "hub-wds1",
    "pod-cluster1-open-cluster-management-agent-addon-status-agent",
    "pod-cluster2-open-cluster-management-agent-addon-status-agent",
];

ks_tests::stack_main!(run, vec![stack_test!(tracing_adds_no_writes, PATH)]);

/// Writes of one rollout: (ManifestWorks, WorkStatuses).
type Writes = (u64, u64);

async fn tracing_adds_no_writes(ctx: Ctx) -> anyhow::Result<()> {
    let off = rollout(&ctx, Tracing::Off).await;
    // Whatever happened, the stack's hub traces again afterwards.
    let on = match off {
        Ok(_) => rollout(&ctx, Tracing::On).await,
        Err(_) => ctx.stack.restart_hub("wds1", HubOptions::STACK).await.map(|()| (0, 0)),
    };
    let (off, on) = (off?, on?);
    eprintln!("writes (ManifestWorks, WorkStatuses): tracing off {off:?}, on {on:?}");
    ensure!(off == on, "tracing off wrote {off:?}, tracing on {on:?}");
    // Each WEC gets one ManifestWork (one generation) and one WorkStatus per object (the
    // Namespace and the Gauge), written at least once.
    ensure!(off.0 >= 2 && off.1 >= 4, "too few writes counted: {off:?}");
    Ok(())
}

/// Restarts the hub with `tracing`, delivers a Namespace and a Gauge to both WECs, and counts
/// the writes of the rollout's ManifestWorks (generations) and WorkStatuses (versions).
async fn rollout(ctx: &Ctx, tracing: Tracing) -> anyhow::Result<Writes> {
    let options = HubOptions {
        tracing,
        ..HubOptions::STACK
    };
    // The Gauge CRD first: a hub started after it serves Gauges from the start. Installed after
    // the restart (on a fresh stack, where it is new), the hub would find it while the rollout
    // runs and write each ManifestWork twice, once without the Gauge (seen as `off (4, 6)`).
    for space in ["wds1", "cluster1", "cluster2"] {
        ks_tests::gauge::install(&ctx.client(space).await?, "ks-tests").await?;
    }
    ctx.stack.restart_hub("wds1", options).await?;
    let wds = ctx.client("wds1").await?;
    let its = ctx.client("its1").await?;
    let ns = ctx.namespace("wds1").await?;
    let selector = json!({"app.kubernetes.io/part-of": ns});
    apply(
        &Api::<Namespace>::all(wds.clone()),
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": selector}}),
    )
    .await?;
    apply(
        &Api::<DynamicObject>::namespaced_with(wds.clone(), &ns, &ks_tests::gauge::resource()),
        json!({"apiVersion": "bench.kubestellar.io/v1", "kind": "Gauge",
               "metadata": {"name": "settings", "labels": selector}, "spec": {"k": "v"}}),
    )
    .await?;
    let policy = format!("{ns}-edge");
    let ours = ListParams::default().labels(&format!("{}={policy}", names::ORIGIN_BINDING_LABEL));
    let works = Versions::watch(Api::<ManifestWork>::all(its.clone()), &ours, |w| {
        w.metadata.generation.unwrap_or(0).to_string()
    });
    let reports = Versions::watch(Api::<WorkStatus>::all(its.clone()), &ours, |w| {
        w.resource_version().unwrap_or_default()
    });
    let policies = Api::<BindingPolicy>::all(wds.clone());
    apply(
        &policies,
        json!({"apiVersion": "control.kubestellar.io/v1alpha1", "kind": "BindingPolicy", "metadata": {"name": policy},
               "spec": {"clusterSelectors": [{"matchLabels": {"location-group": "edge"}}],
                        "downsync": [{"objectSelectors": [{"matchLabels": selector}]}]}}),
    )
    .await?;

    for wec in WECS {
        let on_wec = Api::<DynamicObject>::namespaced_with(ctx.client(wec).await?, &ns, &ks_tests::gauge::resource());
        let delivered = wait_until(
            on_wec,
            "settings",
            "delivered",
            DEADLINE,
            |g: Option<&DynamicObject>| g.is_some(),
        )
        .await?;
        let traced = delivered
            .and_then(|g| g.metadata.annotations)
            .is_some_and(|a| a.contains_key(TRACEPARENT_ANNOTATION));
        ensure!(
            traced == (tracing == Tracing::On),
            "with tracing {tracing:?}, the Gauge on {wec} has a traceparent: {traced}"
        );
        // The Namespace's WorkStatus shows its phase: both objects have been reported.
        let statuses = Api::<WorkStatus>::namespaced(its.clone(), wec);
        ks_tests::stack::wait_for(&format!("both objects reported from {wec}"), DEADLINE, || async {
            let list = statuses.list(&ours).await?.items;
            let namespace_reported = list.iter().any(|w| {
                w.spec.spec.source_ref.kind == "Namespace"
                    && w.status.as_ref().is_some_and(|s| s.0.get("phase").is_some())
            });
            Ok(list.len() == 2 && namespace_reported)
        })
        .await?;
    }
    settled(ctx).await?;
    let counted = (
        works.count_when_caught_up().await?,
        reports.count_when_caught_up().await?,
    );

    policies.delete(&policy, &DeleteParams::default()).await?;
    for wec in WECS {
        let works = Api::<ManifestWork>::namespaced(its.clone(), wec);
        ks_tests::stack::wait_for(
            &format!("the rollout's ManifestWork on {wec} gone"),
            DEADLINE,
            || async { Ok(works.list(&ours).await?.items.is_empty()) },
        )
        .await?;
    }
    ctx.delete_namespace("wds1", &ns).await?;
    Ok(counted)
}

/// Waits until the hub's queues and both agents' queues are empty.
async fn settled(ctx: &Ctx) -> anyhow::Result<()> {
    let hub = std::net::SocketAddr::from(([127, 0, 0, 1], ctx.stack.hub_port("wds1")));
    let mut agents = Vec::new();
    for wec in WECS {
        ctx.stack.wait_agent_ready(wec, DEADLINE).await?;
        agents.push(
            ctx.stack
                .agent_address(wec)
                .ok_or_else(|| anyhow::anyhow!("{wec}'s agent address"))?,
        );
    }
    let hub_gauges = ["kubestellar_binding_queue_depth", "kubestellar_status_queue_depth"];
    let agent_gauges = ["kubestellar_agent_queue_depth"];
    let readings = || {
        let read = |address, gauges: &[&'static str]| {
            let (_, text) = ks_tests::process::http_get(address, "/metrics");
            gauges.iter().map(|g| (*g, sample(&text, g))).collect::<Vec<_>>()
        };
        let mut all = read(hub, &hub_gauges);
        for agent in &agents {
            all.extend(read(*agent, &agent_gauges));
        }
        all
    };
    let waited = ks_tests::stack::wait_for("the hub and the agents to have nothing queued", DEADLINE, || {
        std::future::ready(Ok(readings().iter().all(|(_, depth)| *depth == Some(0.0))))
    })
    .await;
    // Which queue was not empty, in the hub's and then each agent's order.
    waited.map_err(|err| err.context(format!("queue depths: {:?}", readings())))
}

/// The distinct versions (by `version_of`) of the objects a watch has seen, by object.
struct Versions<K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static> {
    api: Api<K>,
    selector: ListParams,
    version_of: fn(&K) -> String,
    seen: Arc<Mutex<BTreeSet<(String, String)>>>,
    watching: tokio::task::JoinHandle<()>,
}

impl<K> Versions<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    fn watch(api: Api<K>, selector: &ListParams, version_of: fn(&K) -> String) -> Self {
        let seen: Arc<Mutex<BTreeSet<(String, String)>>> = Arc::default();
        let config = watcher::Config::default().labels(selector.label_selector.as_deref().unwrap_or_default());
        let events = watcher(api.clone(), config).default_backoff().applied_objects();
        let record = seen.clone();
        let watching = tokio::spawn(async move {
            futures::pin_mut!(events);
            while let Some(event) = events.next().await {
                if let Ok(object) = event {
                    let key = (
                        object.namespace().unwrap_or_default() + "/" + &object.name_any(),
                        version_of(&object),
                    );
                    record.lock().unwrap_or_else(PoisonError::into_inner).insert(key);
                }
            }
        });
        Versions {
            api,
            selector: selector.clone(),
            version_of,
            seen,
            watching,
        }
    }

    /// Waits until the watch has seen the current version of every object, then counts the
    /// versions seen.
    async fn count_when_caught_up(self) -> anyhow::Result<u64> {
        let version_of = self.version_of;
        ks_tests::stack::wait_for("the watch to catch up", DEADLINE, || async {
            let current = self.api.list(&self.selector).await?.items;
            let seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
            Ok(current
                .iter()
                .all(|o| seen.contains(&(o.namespace().unwrap_or_default() + "/" + &o.name_any(), version_of(o)))))
        })
        .await?;
        self.watching.abort();
        let seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        Ok(seen.len() as u64)
    }
}
