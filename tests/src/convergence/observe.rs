//! Reading what the stack holds for an episode: its objects in the WDS and on each WEC (in every
//! namespace it may have used, whatever their labels, so that an object brought back by
//! something else shows), the WorkStatuses reporting on them, and its foreign ManifestWorks.

use std::collections::BTreeMap;

use futures::future::try_join_all;
use ks_shared::api::WorkStatus;
use ks_shared::names::{ORIGIN_BINDING_LABEL, ORIGIN_WDS_LABEL};
use ks_shared::ocm::ManifestWork;
use kube::api::{Api, DynamicObject, ListParams};
use kube::discovery::ApiResource;
use kube::{Client, ResourceExt};
use serde_json::Value;

use super::names::{Key, Kind, Names, WDS, WECS};
use super::ops::{FOREIGN_WORKS, NAMESPACES, POLICIES};

/// A WorkStatus: its name and the WEC object it reports on (group, resource, namespace, name).
#[derive(Clone, Debug)]
pub struct Reported {
    pub name: String,
    pub object: (String, String, String, String),
}

/// What the stack holds for an episode.
#[derive(Clone, Debug, Default)]
pub struct Observed {
    pub wds: BTreeMap<Key, Value>,
    pub wecs: BTreeMap<String, BTreeMap<Key, Value>>,
    /// By mailbox.
    pub work_statuses: BTreeMap<String, Vec<Reported>>,
    /// By (mailbox, name): the foreign ManifestWorks there.
    pub foreign_works: BTreeMap<(String, String), Value>,
    /// ManifestWorks of the episode's policies, by mailbox and name.
    pub our_works: Vec<String>,
}

/// Clients of the spaces an episode touches.
#[derive(Clone)]
pub struct Spaces {
    pub wds: Client,
    pub its: Client,
    pub wecs: Vec<(String, Client)>,
}

/// Every namespace an episode may have used: its own and its foreign works'.
fn namespaces(names: &Names) -> Vec<String> {
    let own = (0..NAMESPACES).map(|ns| names.namespace(ns));
    own.chain((0..FOREIGN_WORKS).map(|w| names.foreign_namespace(w)))
        .collect()
}

/// The episode's objects in one space: its Namespaces and what they hold.
async fn space(client: &Client, names: &Names) -> anyhow::Result<BTreeMap<Key, Value>> {
    let all: Api<DynamicObject> = Api::all_with(client.clone(), &Kind::Namespace.api_resource(""));
    let found = try_join_all(namespaces(names).into_iter().map(|ns| {
        let all = all.clone();
        async move { anyhow::Ok(all.get_opt(&ns).await?.map(|n| (ns, n))) }
    }))
    .await?;
    let mut objects = BTreeMap::new();
    let mut lists = Vec::new();
    for (ns, namespace) in found.into_iter().flatten() {
        let key = Key {
            kind: Kind::Namespace,
            namespace: String::new(),
            name: ns.clone(),
        };
        objects.insert(key, serde_json::to_value(namespace)?);
        for kind in Kind::WORKLOADS {
            let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &kind.api_resource(&names.widgets));
            lists.push(async move { anyhow::Ok((kind, api.list(&ListParams::default()).await?)) });
        }
    }
    for (kind, list) in try_join_all(lists).await? {
        for object in list {
            // Every namespace gets this one from its apiserver.
            if kind == Kind::ConfigMap && object.name_any() == "kube-root-ca.crt" {
                continue;
            }
            let key = Key {
                kind,
                namespace: object.namespace().unwrap_or_default(),
                name: object.name_any(),
            };
            objects.insert(key, serde_json::to_value(object)?);
        }
    }
    Ok(objects)
}

/// The names of every policy an episode may have made: their Bindings label what they write.
fn bindings(names: &Names) -> Vec<String> {
    let mut bindings: Vec<String> = (0..POLICIES).map(|p| names.policy(p)).collect();
    bindings.push(names.base_policy());
    bindings
}

/// The WorkStatuses in `mailbox` from the episode's ManifestWorks, on the episode's objects.
async fn work_statuses(its: &Client, mailbox: &str, names: &Names) -> anyhow::Result<Vec<Reported>> {
    let selector = format!(
        "{ORIGIN_WDS_LABEL}={WDS},{ORIGIN_BINDING_LABEL} in ({})",
        bindings(names).join(",")
    );
    let ours = namespaces(names);
    let listed = Api::<WorkStatus>::namespaced(its.clone(), mailbox)
        .list(&ListParams::default().labels(&selector))
        .await?;
    Ok(listed
        .into_iter()
        .filter(|w| w.metadata.deletion_timestamp.is_none())
        .filter_map(|w| {
            let source = &w.spec.spec.source_ref;
            let in_episode =
                ours.contains(&source.namespace) || (source.namespace.is_empty() && ours.contains(&source.name));
            in_episode.then(|| Reported {
                name: w.name_any(),
                object: (
                    source.group.clone(),
                    source.resource.clone(),
                    source.namespace.clone(),
                    source.name.clone(),
                ),
            })
        })
        .collect())
}

/// Reads what the stack holds for the episode `names`, whose foreign ManifestWorks are
/// `foreign` (mailbox, name).
pub async fn observe(spaces: &Spaces, names: &Names, foreign: &[(String, String)]) -> anyhow::Result<Observed> {
    let wecs = try_join_all(
        spaces
            .wecs
            .iter()
            .map(|(wec, client)| async move { anyhow::Ok((wec.clone(), space(client, names).await?)) }),
    );
    let statuses = try_join_all(WECS.iter().map(|mailbox| async move {
        anyhow::Ok((mailbox.to_string(), work_statuses(&spaces.its, mailbox, names).await?))
    }));
    let works = ApiResource::erase::<ManifestWork>(&());
    let foreign_works = try_join_all(foreign.iter().map(|(mailbox, name)| {
        let api: Api<DynamicObject> = Api::namespaced_with(spaces.its.clone(), mailbox, &works);
        async move {
            let found = api.get_opt(name).await?;
            anyhow::Ok(found.map(|w| serde_json::to_value(w).map(|w| ((mailbox.clone(), name.clone()), w))))
        }
    }));
    let selector = format!(
        "{ORIGIN_WDS_LABEL}={WDS},{ORIGIN_BINDING_LABEL} in ({})",
        bindings(names).join(",")
    );
    let listing = ListParams::default().labels(&selector);
    let all_works = Api::<ManifestWork>::all(spaces.its.clone());
    let our_works = all_works.list_metadata(&listing);
    let (wds, wecs, statuses, foreign_works, our_works) =
        tokio::try_join!(space(&spaces.wds, names), wecs, statuses, foreign_works, async {
            Ok(our_works.await?)
        })?;
    Ok(Observed {
        wds,
        wecs: wecs.into_iter().collect(),
        work_statuses: statuses.into_iter().collect(),
        foreign_works: foreign_works.into_iter().flatten().collect::<Result<_, _>>()?,
        our_works: our_works
            .iter()
            .map(|w| format!("{}/{}", w.namespace().unwrap_or_default(), w.name_any()))
            .collect(),
    })
}
