//! Simulated WECs for the comparison: ManagedClusters with a mailbox but no agent, which load the
//! hub in the bulk scenario.

use k8s_openapi::api::core::v1::Namespace;
use ks_shared::ocm::{ManagedCluster, ManifestWork};
use ks_tests::stack::Stack;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use serde_json::json;

use super::DEADLINE;
use crate::fixtures::MANAGER;

/// Marks the simulated WECs (only the bulk scenario selects them).
pub const SIMULATED_LABEL: &str = "bench.kubestellar.io/simulated";
const SIMULATED_PREFIX: &str = "sim-";

/// The names of `count` simulated WECs.
pub fn names(count: usize) -> Vec<String> {
    (0..count).map(|n| format!("{SIMULATED_PREFIX}{n}")).collect()
}

/// ManagedClusters named `names` with mailbox namespaces but no agent (those there already stay).
pub async fn create(stack: &Stack, names: &[String]) -> anyhow::Result<()> {
    let its = stack.client("its1").await?;
    let apply = PatchParams::apply(MANAGER).force();
    for name in names {
        Api::<Namespace>::all(its.clone())
            .patch(
                name,
                &apply,
                &Patch::Apply(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})),
            )
            .await?;
        let cluster = json!({"apiVersion": "cluster.open-cluster-management.io/v1", "kind": "ManagedCluster",
            "metadata": {"name": name, "labels": {SIMULATED_LABEL: "true", "name": name}},
            "spec": {"hubAcceptsClient": true}});
        Api::<ManagedCluster>::all(its.clone())
            .patch(name, &apply, &Patch::Apply(cluster))
            .await?;
    }
    Ok(())
}

/// Removes every simulated WEC, leftovers of an interrupted run included. With no agent to
/// acknowledge the clean-up, their finalizers (and their add-ons') are dropped here.
pub async fn remove_simulated(stack: &Stack) -> anyhow::Result<()> {
    let its = stack.client("its1").await?;
    let clusters = Api::<ManagedCluster>::all(its.clone());
    let simulated = ListParams::default().labels(&format!("{SIMULATED_LABEL}=true"));
    let unblock = PatchParams::default();
    let no_finalizers = Patch::Merge(json!({"metadata": {"finalizers": null}}));
    for cluster in clusters.list_metadata(&simulated).await?.items {
        let name = cluster.metadata.name.unwrap_or_default();
        let addons = Api::<ks_shared::ocm::ManagedClusterAddOn>::namespaced(its.clone(), &name);
        for addon in addons.list_metadata(&ListParams::default()).await?.items {
            let addon = addon.metadata.name.unwrap_or_default();
            let _ = addons.delete(&addon, &DeleteParams::default()).await;
            let _ = addons.patch(&addon, &unblock, &no_finalizers).await;
        }
        let _ = clusters.delete(&name, &DeleteParams::default()).await;
        let _ = clusters.patch(&name, &unblock, &no_finalizers).await;
        let _ = Api::<Namespace>::all(its.clone())
            .delete(&name, &DeleteParams::default())
            .await;
    }
    let namespaces = Api::<Namespace>::all(its.clone());
    ks_tests::stack::wait_for(
        "the simulated WECs and their mailboxes to be gone",
        DEADLINE,
        || async {
            let mailboxes: Vec<String> = namespaces
                .list_metadata(&ListParams::default())
                .await?
                .items
                .into_iter()
                .filter_map(|n| n.metadata.name.filter(|n| n.starts_with(SIMULATED_PREFIX)))
                .collect();
            // The hub's clean-up finalizers wait for an agent that does not exist.
            for mailbox in &mailboxes {
                let works = Api::<ManifestWork>::namespaced(its.clone(), mailbox);
                for work in works.list_metadata(&ListParams::default()).await?.items {
                    let _ = works
                        .patch(&work.metadata.name.unwrap_or_default(), &unblock, &no_finalizers)
                        .await;
                }
                let bindings = Api::<k8s_openapi::api::rbac::v1::RoleBinding>::namespaced(its.clone(), mailbox);
                for binding in bindings.list_metadata(&ListParams::default()).await?.items {
                    let _ = bindings
                        .patch(&binding.metadata.name.unwrap_or_default(), &unblock, &no_finalizers)
                        .await;
                }
            }
            Ok(clusters.list_metadata(&simulated).await?.items.is_empty() && mailboxes.is_empty())
        },
    )
    .await
}
