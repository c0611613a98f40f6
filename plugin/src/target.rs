//! Which WDS object the user means by `<resource>/<name>`: the resource as kubectl accepts it
//! (plural, singular, kind or short name, optionally `.group`), found in the WDS's discovery.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResource;
use kube::Client;
use kube::discovery::ApiResource;

/// A resource of a cluster (the WDS, a WEC), as discovery describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resource {
    pub group: String,
    pub version: String,
    /// Lowercase plural, e.g. `deployments`.
    pub plural: String,
    pub kind: String,
    pub namespaced: bool,
}

impl Resource {
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    pub fn qualified(&self) -> String {
        qualified(&self.group, &self.plural)
    }

    /// As kube's dynamic API takes it.
    pub fn api_resource(&self) -> ApiResource {
        ApiResource {
            group: self.group.clone(),
            version: self.version.clone(),
            api_version: self.api_version(),
            kind: self.kind.clone(),
            plural: self.plural.clone(),
        }
    }
}

/// `deployments.apps`, or `configmaps` for the core group.
pub fn qualified(group: &str, plural: &str) -> String {
    if group.is_empty() {
        plural.to_string()
    } else {
        format!("{plural}.{group}")
    }
}

/// One API group version's resources, as served.
pub struct Served {
    pub group: String,
    pub version: String,
    pub resources: Vec<APIResource>,
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum TargetError {
    #[error("{0:?} is not <resource>/<name> (e.g. deployment/web or configmaps/settings)")]
    Syntax(String),
    #[error("no resource {0:?} is served (try its plural, e.g. deployments, or kind)")]
    Unknown(String),
}

/// Splits `deploy/web` into the resource as typed and the name.
pub fn split(target: &str) -> Result<(&str, &str), TargetError> {
    match target.split_once('/') {
        Some((resource, name)) if !resource.is_empty() && !name.is_empty() && !name.contains('/') => {
            Ok((resource, name))
        }
        _ => Err(TargetError::Syntax(target.to_string())),
    }
}

/// The resource `typed` names among `served` (in discovery order: the core group first, then
/// each group's preferred version), as kubectl resolves it.
pub fn find(served: &[Served], typed: &str) -> Result<Resource, TargetError> {
    let (name, group) = match typed.split_once('.') {
        Some((name, group)) => (name, Some(group)),
        None => (typed, None),
    };
    let lower = name.to_lowercase();
    served
        .iter()
        .filter(|s| group.is_none_or(|g| g == s.group))
        .flat_map(|s| s.resources.iter().map(move |r| (s, r)))
        .filter(|(_, r)| !r.name.contains('/'))
        .find(|(_, r)| {
            r.name == lower
                || r.singular_name == lower
                || r.kind.to_lowercase() == lower
                || r.short_names.iter().flatten().any(|s| *s == lower)
        })
        .map(|(s, r)| Resource {
            group: s.group.clone(),
            version: s.version.clone(),
            plural: r.name.clone(),
            kind: r.kind.clone(),
            namespaced: r.namespaced,
        })
        .ok_or_else(|| TargetError::Unknown(typed.to_string()))
}

/// What a cluster serves: the core group, then every group's preferred version.
pub async fn discover(client: &Client) -> kube::Result<Vec<Served>> {
    let mut served = vec![Served {
        group: String::new(),
        version: "v1".into(),
        resources: client.list_core_api_resources("v1").await?.resources,
    }];
    for group in client.list_api_groups().await?.groups {
        let Some(preferred) = group.preferred_version.or_else(|| group.versions.first().cloned()) else {
            continue;
        };
        let resources = client
            .list_api_group_resources(&preferred.group_version)
            .await?
            .resources;
        served.push(Served {
            group: group.name,
            version: preferred.version,
            resources,
        });
    }
    Ok(served)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resource(name: &str, singular: &str, kind: &str, short: &[&str]) -> APIResource {
        APIResource {
            name: name.into(),
            singular_name: singular.into(),
            kind: kind.into(),
            namespaced: true,
            short_names: Some(short.iter().map(|s| s.to_string()).collect()),
            ..Default::default()
        }
    }

    fn served() -> Vec<Served> {
        vec![
            Served {
                group: String::new(),
                version: "v1".into(),
                resources: vec![
                    resource("configmaps", "configmap", "ConfigMap", &["cm"]),
                    resource("pods/status", "", "Pod", &[]),
                ],
            },
            Served {
                group: "apps".into(),
                version: "v1".into(),
                resources: vec![resource("deployments", "deployment", "Deployment", &["deploy"])],
            },
            Served {
                group: "example.io".into(),
                version: "v2".into(),
                resources: vec![resource("deployments", "deployment", "Deployment", &[])],
            },
        ]
    }

    #[test]
    fn finds_a_resource_as_kubectl_does() {
        for typed in ["deployments", "deployment", "Deployment", "deploy", "deployments.apps"] {
            let found = find(&served(), typed).unwrap();
            assert_eq!(
                (found.qualified(), found.api_version()),
                ("deployments.apps".into(), "apps/v1".into())
            );
        }
        assert_eq!(find(&served(), "cm").unwrap().api_version(), "v1");
        assert_eq!(find(&served(), "deployments.example.io").unwrap().version, "v2");
        assert_eq!(find(&served(), "status"), Err(TargetError::Unknown("status".into())));
        assert_eq!(find(&served(), "gadgets"), Err(TargetError::Unknown("gadgets".into())));
    }

    #[test]
    fn a_target_is_resource_slash_name() {
        assert_eq!(split("deploy/web"), Ok(("deploy", "web")));
        for bad in ["web", "/web", "deploy/", "deploy/web/x"] {
            assert_eq!(split(bad), Err(TargetError::Syntax(bad.into())));
        }
    }
}
