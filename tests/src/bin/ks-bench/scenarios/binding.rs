//! `binding-latency`: time from a BindingPolicy change (apply returned) to its Binding showing
//! the change, and the Binding writes each change costs.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use ks_shared::api::{Binding, BindingPolicy};
use ks_tests::harness::wait_until;
use ks_tests::stack::Stack;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::json;

use crate::fixtures::{MANAGER, apply_namespace};
use ks_tests::measure::summary;

/// Times `changes` policy changes; prints their percentiles and the Binding writes of each.
pub async fn latency(stack: &Stack, changes: usize) -> anyhow::Result<()> {
    let wds = stack.client("wds1").await?;
    let ns = format!("bench-{}", std::process::id());
    let namespaces = apply_namespace(&wds, &ns, &json!({})).await?;
    let apply = PatchParams::apply(MANAGER).force();
    let cms: Api<ConfigMap> = Api::namespaced(wds.clone(), &ns);
    for name in ["a", "b"] {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": "v"}});
        cms.patch(name, &apply, &Patch::Apply(cm)).await?;
    }
    let policies: Api<BindingPolicy> = Api::all(wds.clone());
    let bindings: Api<Binding> = Api::all(wds.clone());
    let policy = |object: &str| {
        json!({"apiVersion": "control.kubestellar.io/v1alpha1", "kind": "BindingPolicy", "metadata": {"name": ns},
               "spec": {"clusterSelectors": [{"matchLabels": {"location-group": "edge"}}],
                        "downsync": [{"namespaces": [ns], "resources": ["configmaps"], "objectNames": [object]}]}})
    };
    let mut latencies = Vec::new();
    let mut writes = Vec::new();
    for i in 0..=changes {
        let object = if i % 2 == 0 { "a" } else { "b" };
        let generation_before = bindings
            .get_opt(&ns)
            .await?
            .and_then(|b| b.metadata.generation)
            .unwrap_or(0);
        let started = Instant::now();
        policies.patch(&ns, &apply, &Patch::Apply(policy(object))).await?;
        let shows = |b: Option<&Binding>| {
            b.is_some_and(|b| b.spec.workload.namespace_scope.iter().any(|o| o.object.name == object))
        };
        let binding = wait_until(
            bindings.clone(),
            &ns,
            "showing the change",
            Duration::from_secs(30),
            shows,
        )
        .await?;
        // The first round creates the policy and is not a change.
        if i > 0 {
            latencies.push(started.elapsed());
            writes.push(binding.and_then(|b| b.metadata.generation).unwrap_or(0) - generation_before);
        }
    }
    println!(
        "binding latency over {} policy changes: {}  (Binding writes per change: {:?})",
        latencies.len(),
        summary(latencies),
        writes
    );
    policies.delete(&ns, &DeleteParams::default()).await?;
    namespaces.delete(&ns, &DeleteParams::default()).await?;
    Ok(())
}
