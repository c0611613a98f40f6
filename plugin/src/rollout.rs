//! `status <policy>`: how far a policy's objects got on each of its WECs, counted from its
//! Binding, the ManifestWorks made from that Binding, and the WorkStatuses they own.

use std::collections::{BTreeMap, BTreeSet};

use ks_hub::transport::ocm::cached;
use ks_hub::transport::types::Landed;
use ks_shared::api::{Binding, PolicyHealth, WorkStatus};
use ks_shared::names::ORIGIN_BINDING_LABEL;
use ks_shared::ocm::ManifestWork;
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};
use serde::Serialize;

/// One WEC's counts of the policy's objects.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WecRollout {
    pub wec: String,
    /// In the Binding.
    pub selected: usize,
    /// In a ManifestWork for this WEC.
    pub delivered: usize,
    /// OCM says Applied, and Available (present on the WEC).
    pub applied: usize,
    pub available: usize,
    /// With a WorkStatus from the WEC's status agent.
    pub status_returned: usize,
    /// Healthy there, as the policy's status counts them (`None`: it does not say yet).
    pub healthy: Option<i64>,
    /// The first object not healthy there (degraded first) and why, as the policy's status says.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_unhealthy: Option<String>,
}

/// Per destination of `binding`: its counts, from `works` and `statuses` per WEC namespace, and
/// its policy's `health` (the hub's verdicts, HealthRules included).
pub fn rollout(
    binding: &Binding,
    works: &BTreeMap<String, Vec<ManifestWork>>,
    statuses: &BTreeMap<String, Vec<WorkStatus>>,
    health: Option<&PolicyHealth>,
) -> Vec<WecRollout> {
    let workload = &binding.spec.workload;
    let selected = workload.cluster_scope.len() + workload.namespace_scope.len();
    let none = Vec::new();
    binding
        .spec
        .destinations
        .iter()
        .map(|destination| {
            let wec = &destination.cluster_id;
            let ours: Vec<&ManifestWork> = works
                .get(wec)
                .unwrap_or(&none)
                .iter()
                .filter(|w| w.labels().get(ORIGIN_BINDING_LABEL) == Some(&binding.name_any()))
                .collect();
            let names: BTreeSet<String> = ours.iter().map(|w| w.name_any()).collect();
            let landed: Landed = ours
                .iter()
                .map(|w| cached::landed(w.spec.workload.manifests.len(), w.status.as_ref()))
                .sum();
            let judged = health.and_then(|h| h.per_wec.iter().find(|w| &w.wec == wec));
            WecRollout {
                wec: wec.clone(),
                selected,
                delivered: landed.delivered,
                applied: landed.applied,
                available: landed.available,
                status_returned: statuses
                    .get(wec)
                    .into_iter()
                    .flatten()
                    .filter(|s| s.owner_references().iter().any(|o| names.contains(&o.name)))
                    .count(),
                healthy: judged.map(|w| w.healthy),
                first_unhealthy: judged.map(|w| w.first_unhealthy.clone()).filter(|f| !f.is_empty()),
            }
        })
        .collect()
}

/// Reads the ManifestWorks and WorkStatuses of `binding`'s destinations from the ITS.
pub async fn gather(
    its: &Client,
    binding: &Binding,
) -> kube::Result<(BTreeMap<String, Vec<ManifestWork>>, BTreeMap<String, Vec<WorkStatus>>)> {
    let mut works = BTreeMap::new();
    let mut statuses = BTreeMap::new();
    let ours = ListParams::default().labels(&format!("{ORIGIN_BINDING_LABEL}={}", binding.name_any()));
    for destination in &binding.spec.destinations {
        let wec = &destination.cluster_id;
        let listed = Api::<ManifestWork>::namespaced(its.clone(), wec).list(&ours).await?;
        works.insert(wec.clone(), listed.items);
        let listed = Api::<WorkStatus>::namespaced(its.clone(), wec)
            .list(&ListParams::default())
            .await?;
        statuses.insert(wec.clone(), listed.items);
    }
    Ok((works, statuses))
}
