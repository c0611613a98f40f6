//! What the WDS and the ITS hold about one workload object, read once: the facts `why` reasons
//! over, kept apart from the reasoning so that it is tested without a cluster.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use ks_hub::binding::{Labels, ObjectIdentity, Wec, WorkloadObject};
use ks_hub::transport::types;
use ks_shared::api::{Binding, BindingPolicy, HealthRule, WorkStatus};
use ks_shared::names::{ORIGIN_BINDING_LABEL, TRACEPARENT_ANNOTATION};
use ks_shared::ocm::{ManagedCluster, ManifestWork};
use kube::api::{Api, DynamicObject, ListParams};
use kube::{Client, ResourceExt};
use serde_json::Value;

use crate::target::Resource;

/// The object in the WDS.
#[derive(Clone, Debug, Default)]
pub struct Observed {
    pub object: WorkloadObject,
    pub generation: Option<i64>,
    /// Its Namespace's labels; `None` when cluster-scoped or the Namespace is missing.
    pub namespace_labels: Option<Labels>,
    /// Its `.status`, if any (returned from a WEC, or its own).
    pub status: Option<Value>,
    pub traceparent: Option<String>,
    /// The whole object, as a HealthRule's `obj` sees it.
    pub whole: Value,
}

/// The object in one ManifestWork, with what OCM says of it.
#[derive(Clone, Debug, Default)]
pub struct Delivered {
    pub manifest_work: String,
    /// OCM's conditions on this manifest: Applied, Available, StatusFeedbackSynced.
    pub conditions: Vec<Condition>,
    pub traceparent: Option<String>,
}

/// Everything `why` looks at.
#[derive(Clone, Debug, Default)]
pub struct Evidence {
    /// The object's identity, also when it is not in the WDS.
    pub identity: ObjectIdentity,
    pub observed: Option<Observed>,
    pub policies: Vec<BindingPolicy>,
    /// By name (the policy's).
    pub bindings: BTreeMap<String, Binding>,
    pub wecs: Vec<Wec>,
    /// Per WEC, the ManifestWorks holding the object.
    pub delivered: BTreeMap<String, Vec<Delivered>>,
    /// Per WEC, the WorkStatus its agent keeps for the object.
    pub work_statuses: BTreeMap<String, WorkStatus>,
    /// The WDS's HealthRules.
    pub health_rules: Vec<HealthRule>,
}

/// Reads the evidence about `name` (in `namespace`) of `resource` from the WDS and the ITS.
pub async fn gather(
    wds: &Client,
    its: &Client,
    resource: &Resource,
    namespace: Option<&str>,
    name: &str,
) -> anyhow::Result<Evidence> {
    let namespace = if resource.namespaced {
        namespace.unwrap_or("default")
    } else {
        ""
    };
    let identity = ObjectIdentity {
        group: resource.group.clone(),
        version: resource.version.clone(),
        resource: resource.plural.clone(),
        namespace: namespace.to_string(),
        name: name.to_string(),
        kind: resource.kind.clone(),
    };
    let api_resource = resource.api_resource();
    let objects: Api<DynamicObject> = if resource.namespaced {
        Api::namespaced_with(wds.clone(), namespace, &api_resource)
    } else {
        Api::all_with(wds.clone(), &api_resource)
    };
    let observed = match objects.get_opt(name).await? {
        None => None,
        Some(object) => Some(Observed {
            object: WorkloadObject {
                identity: identity.clone(),
                resource_version: object.resource_version().unwrap_or_default(),
                labels: object.labels().clone(),
            },
            generation: object.metadata.generation,
            namespace_labels: match namespace {
                "" => None,
                ns => Api::<Namespace>::all(wds.clone())
                    .get_opt(ns)
                    .await?
                    .map(|n| n.labels().clone()),
            },
            status: object
                .data
                .get("status")
                .filter(|s| s.as_object().is_some_and(|s| !s.is_empty()))
                .cloned(),
            traceparent: object.annotations().get(TRACEPARENT_ANNOTATION).cloned(),
            whole: serde_json::to_value(&object)?,
        }),
    };
    let all = ListParams::default();
    let policies = Api::<BindingPolicy>::all(wds.clone()).list(&all).await?.items;
    let bindings = Api::<Binding>::all(wds.clone())
        .list(&all)
        .await?
        .into_iter()
        .map(|b| (b.name_any(), b))
        .collect();
    let wecs: Vec<Wec> = Api::<ManagedCluster>::all(its.clone())
        .list(&all)
        .await?
        .into_iter()
        .map(|c| Wec {
            name: c.name_any(),
            labels: c.labels().clone(),
        })
        .collect();
    // One list for every mailbox: ManifestWorks live in the namespace named after their WEC.
    let ours = ListParams::default().labels(ORIGIN_BINDING_LABEL);
    let mut delivered: BTreeMap<String, Vec<Delivered>> = BTreeMap::new();
    for work in Api::<ManifestWork>::all(its.clone()).list(&ours).await? {
        if let Some(holding) = delivered_in(&work, &identity) {
            delivered
                .entry(work.namespace().unwrap_or_default())
                .or_default()
                .push(holding);
        }
    }
    // WorkStatuses cannot be selected by what they report on: each mailbox is read whole.
    let mut work_statuses = BTreeMap::new();
    for wec in &wecs {
        let statuses = Api::<WorkStatus>::namespaced(its.clone(), &wec.name).list(&all).await?;
        if let Some(status) = statuses.into_iter().find(|s| reports_on(s, &identity)) {
            work_statuses.insert(wec.name.clone(), status);
        }
    }
    let health_rules = Api::<HealthRule>::all(wds.clone()).list(&all).await?.items;
    Ok(Evidence {
        identity,
        observed,
        policies,
        bindings,
        wecs,
        delivered,
        work_statuses,
        health_rules,
    })
}

/// The object in `work`, if it holds it.
fn delivered_in(work: &ManifestWork, id: &ObjectIdentity) -> Option<Delivered> {
    let wanted = (id.group.clone(), id.kind.clone(), id.namespace.clone(), id.name.clone());
    let manifest = work
        .spec
        .workload
        .manifests
        .iter()
        .find(|m| types::identity(m) == wanted)?;
    let conditions = work
        .status
        .iter()
        .flat_map(|s| &s.resource_status.manifests)
        .find(|m| {
            let meta = &m.resource_meta;
            (&meta.group, &meta.resource, &meta.namespace, &meta.name)
                == (&id.group, &id.resource, &id.namespace, &id.name)
        })
        .map(|m| m.conditions.clone())
        .unwrap_or_default();
    Some(Delivered {
        manifest_work: work.name_any(),
        conditions,
        traceparent: manifest["metadata"]["annotations"][TRACEPARENT_ANNOTATION]
            .as_str()
            .map(String::from),
    })
}

/// Whether `status` is about the object `id`.
fn reports_on(status: &WorkStatus, id: &ObjectIdentity) -> bool {
    let source = &status.spec.spec.source_ref;
    (&source.group, &source.resource, &source.namespace, &source.name)
        == (&id.group, &id.resource, &id.namespace, &id.name)
}
