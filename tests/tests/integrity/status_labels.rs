//! The status-request labels the hub puts on WDS objects: taking one off an object the user
//! deleted must not bring the object back (a server-side apply creates what is missing).

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use ks_shared::api::{Binding, BindingPolicy};
use ks_tests::harness::{Ctx, StackTest, apply, wait_until};
use ks_tests::stack_test;
use kube::api::{Api, DeleteParams};
use serde_json::json;

const DEADLINE: Duration = Duration::from_secs(60);
const HUB: &[&str] = &["hub-wds1", "apiserver-wds1"];

pub fn tests() -> Vec<StackTest> {
    vec![stack_test!(a_deleted_object_with_status_requested_stays_deleted, HUB)]
}

fn lists(binding: Option<&Binding>, name: &str) -> bool {
    binding.is_some_and(|b| b.spec.workload.namespace_scope.iter().any(|o| o.object.name == name))
}

async fn a_deleted_object_with_status_requested_stays_deleted(ctx: Ctx) -> anyhow::Result<()> {
    const SINGLETON: &str = "managed-by.kubestellar.io/singletonstatus";
    let wds = ctx.client("wds1").await?;
    let ns = ctx.namespace("wds1").await?;
    let cms: Api<ConfigMap> = Api::namespaced(wds.clone(), &ns);
    let policies: Api<BindingPolicy> = Api::all(wds.clone());
    let bindings: Api<Binding> = Api::all(wds.clone());
    for name in ["cm1", "cm2"] {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": "v"}});
        apply(&cms, cm).await?;
    }
    let policy = format!("{ns}-status");
    apply(
        &policies,
        json!({"apiVersion": "control.kubestellar.io/v1alpha1", "kind": "BindingPolicy",
               "metadata": {"name": policy},
               "spec": {"clusterSelectors": [{"matchLabels": {"name": "cluster1"}}],
                        "downsync": [{"namespaces": [ns], "wantSingletonReportedState": true}]}}),
    )
    .await?;
    let labelled = |c: Option<&ConfigMap>| {
        c.is_some_and(|c| {
            c.metadata
                .labels
                .iter()
                .flatten()
                .any(|(k, v)| k == SINGLETON && v == "true")
        })
    };
    wait_until(cms.clone(), "cm1", "labelled singletonstatus", DEADLINE, labelled).await?;

    // As `kubectl delete cm cm1`: the Binding lets go of it, and its label needs no removing.
    cms.delete("cm1", &DeleteParams::default()).await?;
    let what = "without cm1 (and still with cm2)";
    wait_until(bindings.clone(), &policy, what, DEADLINE, |b: Option<&Binding>| {
        !lists(b, "cm1") && lists(b, "cm2")
    })
    .await?;
    // The label write comes before the Binding's: had it brought cm1 back, cm1 is here by now,
    // and the Binding would list it again.
    let back = cms.get_opt("cm1").await?;
    anyhow::ensure!(
        back.is_none(),
        "cm1 came back after its delete, managed by {:?}",
        back.and_then(|c| c.metadata.managed_fields)
            .unwrap_or_default()
            .iter()
            .map(|m| m.manager.clone())
            .collect::<Vec<_>>()
    );
    policies.delete(&policy, &DeleteParams::default()).await?;
    wait_until(
        policies.clone(),
        &policy,
        "deleted",
        DEADLINE,
        |p: Option<&BindingPolicy>| p.is_none(),
    )
    .await?;
    ctx.delete_namespace("wds1", &ns).await
}
