//! KubeFlex mode: the WDS and ITS are KubeFlex `ControlPlane`s in a hosting cluster, found by
//! their `kflex.kubestellar.io/cptype` label (and name), whose kubeconfig sits in the Secret
//! their `status.secretRef` names, as upstream KubeStellar's controller-manager finds them.

use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use ks_shared::names::KUBEFLEX_CP_TYPE_LABEL;
use kube::api::{Api, DynamicObject, ListParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Client, ResourceExt};
use tokio_util::sync::CancellationToken;

/// What a ControlPlane says about where its kubeconfig is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ControlPlane {
    pub name: String,
    /// `(namespace, name, key, inClusterKey)` of the kubeconfig Secret, once KubeFlex set it.
    pub secret: Option<SecretRef>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SecretRef {
    pub namespace: String,
    pub name: String,
    pub key: String,
    pub in_cluster_key: String,
}

impl SecretRef {
    /// The kubeconfig in the Secret's `data`: inside a pod its `inClusterKey`, elsewhere its
    /// `key`, each falling back to the other. KubeFlex writes only the in-cluster key for an
    /// `external` ControlPlane (whose server is the same from anywhere).
    pub fn kubeconfig_in(
        &self,
        data: &std::collections::BTreeMap<String, k8s_openapi::ByteString>,
        in_pod: bool,
    ) -> Result<Vec<u8>, KubeflexError> {
        let keys = if in_pod {
            [&self.in_cluster_key, &self.key]
        } else {
            [&self.key, &self.in_cluster_key]
        };
        keys.into_iter()
            .find_map(|k| data.get(k))
            .map(|bytes| bytes.0.clone())
            .ok_or_else(|| KubeflexError::MissingKey {
                namespace: self.namespace.clone(),
                name: self.name.clone(),
                keys: keys
                    .into_iter()
                    .filter(|k| !k.is_empty())
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(" or "),
            })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum KubeflexError {
    #[error("more than one ControlPlane of type {cp_type} ({names}); choose one with --{cp_type}-name")]
    Ambiguous { cp_type: String, names: String },
    #[error("no ControlPlane of type {cp_type}{named} appeared with a kubeconfig Secret within {seconds}s")]
    NotFound {
        cp_type: String,
        named: String,
        seconds: u64,
    },
    #[error("Secret {namespace}/{name} has no key {keys}")]
    MissingKey {
        namespace: String,
        name: String,
        keys: String,
    },
    #[error("reading the kubeconfig Secret {namespace}/{name}: {source}")]
    Secret {
        namespace: String,
        name: String,
        source: kube::Error,
    },
    #[error("the kubeconfig in Secret {namespace}/{name} is not UTF-8")]
    NotText { namespace: String, name: String },
}

/// The ControlPlane to use among those of a type: the named one, else the only one. `Ok(None)`
/// means none yet (KubeFlex may still be creating it).
pub fn choose<'a>(
    cp_type: &str,
    candidates: &'a [ControlPlane],
    name: Option<&str>,
) -> Result<Option<&'a ControlPlane>, KubeflexError> {
    match name {
        Some(name) => Ok(candidates.iter().find(|c| c.name == name)),
        None if candidates.len() > 1 => Err(KubeflexError::Ambiguous {
            cp_type: cp_type.into(),
            names: candidates
                .iter()
                .map(|c| c.name.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        }),
        None => Ok(candidates.first()),
    }
}

fn control_plane(object: &DynamicObject) -> ControlPlane {
    let secret = &object.data["status"]["secretRef"];
    let text = |key: &str| secret[key].as_str().unwrap_or_default().to_string();
    ControlPlane {
        name: object.name_any(),
        secret: secret.is_object().then(|| SecretRef {
            namespace: text("namespace"),
            name: text("name"),
            key: text("key"),
            in_cluster_key: text("inClusterKey"),
        }),
    }
}

/// The kubeconfig of the ControlPlane of `cp_type` (`wds` or `its`), named `name` if given,
/// polling every 2 s for up to 5 minutes while it does not exist yet. Inside a pod the Secret's
/// `inClusterKey` is used, elsewhere its `key`. `None` on shutdown.
pub async fn kubeconfig(
    hosting: &Client,
    cp_type: &str,
    name: Option<&str>,
    shutdown: &CancellationToken,
) -> Result<Option<String>, KubeflexError> {
    const POLL: Duration = Duration::from_secs(2);
    const PATIENCE: Duration = Duration::from_secs(300);
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("tenancy.kflex.kubestellar.org", "v1alpha1", "ControlPlane"),
        "controlplanes",
    );
    let control_planes: Api<DynamicObject> = Api::all_with(hosting.clone(), &resource);
    let in_pod = std::env::var_os("KUBERNETES_SERVICE_HOST").is_some();
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let listed = control_planes
            .list(&ListParams::default().labels(&format!("{KUBEFLEX_CP_TYPE_LABEL}={cp_type}")))
            .await;
        match listed {
            Ok(list) => {
                let candidates: Vec<ControlPlane> = list.items.iter().map(control_plane).collect();
                if let Some(secret) = choose(cp_type, &candidates, name)?.and_then(|cp| cp.secret.clone()) {
                    let data = Api::<Secret>::namespaced(hosting.clone(), &secret.namespace)
                        .get(&secret.name)
                        .await
                        .map_err(|source| KubeflexError::Secret {
                            namespace: secret.namespace.clone(),
                            name: secret.name.clone(),
                            source,
                        })?
                        .data
                        .unwrap_or_default();
                    let bytes = secret.kubeconfig_in(&data, in_pod)?;
                    tracing::info!(cp_type, secret = %format!("{}/{}", secret.namespace, secret.name), "found the space through KubeFlex");
                    let text = String::from_utf8(bytes).map_err(|_| KubeflexError::NotText {
                        namespace: secret.namespace,
                        name: secret.name,
                    })?;
                    return Ok(Some(text));
                }
            }
            Err(err) => tracing::warn!(error = %err, "listing KubeFlex ControlPlanes"),
        }
        if tokio::time::Instant::now() > deadline {
            let named = name.map(|n| format!(" named {n}")).unwrap_or_default();
            return Err(KubeflexError::NotFound {
                cp_type: cp_type.into(),
                named,
                seconds: PATIENCE.as_secs(),
            });
        }
        tokio::select! {
            _ = shutdown.cancelled() => return Ok(None),
            _ = tokio::time::sleep(POLL) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cp(name: &str) -> ControlPlane {
        ControlPlane {
            name: name.into(),
            secret: None,
        }
    }

    #[test]
    fn the_named_or_the_only_control_plane() {
        let two = [cp("wds1"), cp("wds2")];
        assert_eq!(choose("wds", &two, Some("wds2")).unwrap(), Some(&two[1]));
        assert_eq!(choose("wds", &two, Some("wds3")).unwrap(), None);
        let err = choose("wds", &two, None).unwrap_err();
        assert_eq!(
            err.to_string(),
            "more than one ControlPlane of type wds (wds1, wds2); choose one with --wds-name"
        );
        assert_eq!(choose("its", &two[..1], None).unwrap(), Some(&two[0]));
        assert_eq!(choose("its", &[], None).unwrap(), None);
    }

    #[test]
    fn reads_the_secret_reference() {
        let object: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "tenancy.kflex.kubestellar.org/v1alpha1", "kind": "ControlPlane",
            "metadata": {"name": "wds1"},
            "status": {"secretRef": {"namespace": "wds1-system", "name": "admin-kubeconfig", "key": "kubeconfig", "inClusterKey": "kubeconfig-incluster"}}
        }))
        .unwrap();
        let parsed = control_plane(&object);
        assert_eq!(parsed.secret.unwrap().in_cluster_key, "kubeconfig-incluster");
        let pending: DynamicObject = serde_json::from_value(serde_json::json!({"metadata": {"name": "its1"}})).unwrap();
        assert_eq!(control_plane(&pending).secret, None);
    }

    #[test]
    fn the_kubeconfig_key_for_where_the_hub_runs_or_the_other() {
        let secret = SecretRef {
            namespace: "wds1-system".into(),
            name: "admin-kubeconfig".into(),
            key: "kubeconfig".into(),
            in_cluster_key: "kubeconfig-incluster".into(),
        };
        let data = |keys: &[&str]| {
            keys.iter()
                .map(|k| (k.to_string(), k8s_openapi::ByteString(k.as_bytes().to_vec())))
                .collect()
        };
        let both = data(&["kubeconfig", "kubeconfig-incluster"]);
        assert_eq!(secret.kubeconfig_in(&both, false).unwrap(), b"kubeconfig");
        assert_eq!(secret.kubeconfig_in(&both, true).unwrap(), b"kubeconfig-incluster");
        // An external ControlPlane's Secret.
        let in_cluster = data(&["kubeconfig-incluster"]);
        assert_eq!(
            secret.kubeconfig_in(&in_cluster, false).unwrap(),
            b"kubeconfig-incluster"
        );
        let err = secret.kubeconfig_in(&data(&[]), false).unwrap_err();
        assert_eq!(
            err.to_string(),
            "Secret wds1-system/admin-kubeconfig has no key kubeconfig or kubeconfig-incluster"
        );
    }
}
