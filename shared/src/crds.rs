//! The CRDs generated from our API types, and their YAML form as committed under `config/crds/`.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps, JSONSchemaPropsOrArray, JSONSchemaPropsOrBool,
};
use kube::CustomResourceExt;

use crate::api::{Binding, BindingPolicy, CombinedStatus, CustomTransform, HealthRule, StatusCollector, WorkStatus};

/// Where a CRD is installed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Space {
    /// The Workload Definition Space (installed by the hub process).
    Wds,
    /// The Inventory and Transport Space (installed with the status add-on).
    Its,
}

/// Every CRD we define, with the space it belongs in.
pub fn all() -> Vec<(Space, CustomResourceDefinition)> {
    [
        (Space::Wds, BindingPolicy::crd()),
        (Space::Wds, Binding::crd()),
        (Space::Wds, CustomTransform::crd()),
        (Space::Wds, StatusCollector::crd()),
        (Space::Wds, CombinedStatus::crd()),
        (Space::Wds, HealthRule::crd()),
        (Space::Its, WorkStatus::crd()),
    ]
    .into_iter()
    .map(|(space, crd)| (space, without_defaults(crd)))
    .collect()
}

/// Drops the `default`s that schemars derives from `#[serde(default)]`: our code applies those
/// when reading, and upstream's CRDs have none, so a field left out stays left out on the server.
fn without_defaults(mut crd: CustomResourceDefinition) -> CustomResourceDefinition {
    fn strip(schema: &mut JSONSchemaProps) {
        schema.default = None;
        schema
            .properties
            .iter_mut()
            .flat_map(|p| p.values_mut())
            .for_each(strip);
        if let Some(JSONSchemaPropsOrArray::Schema(items)) = &mut schema.items {
            strip(items);
        }
        if let Some(JSONSchemaPropsOrBool::Schema(values)) = &mut schema.additional_properties {
            strip(values);
        }
    }
    for version in &mut crd.spec.versions {
        if let Some(schema) = version.schema.as_mut().and_then(|s| s.open_api_v3_schema.as_mut()) {
            strip(schema);
        }
    }
    crd
}

/// The CRDs installed in one space.
pub fn for_space(space: Space) -> Vec<CustomResourceDefinition> {
    all()
        .into_iter()
        .filter(|(s, _)| *s == space)
        .map(|(_, crd)| crd)
        .collect()
}

/// The committed file name of a CRD: `<group>_<plural>.yaml`, as upstream names them.
pub fn file_name(crd: &CustomResourceDefinition) -> String {
    format!("{}_{}.yaml", crd.spec.group, crd.spec.names.plural)
}

/// The YAML document committed for a CRD.
pub fn to_yaml(crd: &CustomResourceDefinition) -> Result<String, serde_saphyr::ser::Error> {
    let yaml = serde_saphyr::to_string(crd)?;
    Ok(format!(
        "# Generated from the Rust types in shared/src/api by `make crds`. Do not edit.\n---\n{yaml}"
    ))
}

/// Why CRDs could not be installed.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    #[error("applying CRD {name}: {source}")]
    Apply { name: String, source: kube::Error },
    #[error("CRD {name} not established within {seconds}s")]
    NotEstablished { name: String, seconds: u64 },
    #[error("waiting for CRD {name}: {source}")]
    Wait {
        name: String,
        source: kube::runtime::wait::Error,
    },
}

/// Installs (or updates) the CRDs of a space with server-side apply and waits until each is
/// established, so that the caller can watch its kinds right away.
pub async fn install(client: &kube::Client, space: Space, field_manager: &str) -> Result<(), InstallError> {
    use kube::api::{Api, Patch, PatchParams};
    use kube::runtime::wait::{await_condition, conditions};
    const DEADLINE: std::time::Duration = std::time::Duration::from_secs(60);
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in for_space(space) {
        let name = crd.metadata.name.clone().unwrap_or_default();
        api.patch(&name, &PatchParams::apply(field_manager).force(), &Patch::Apply(&crd))
            .await
            .map_err(|source| InstallError::Apply {
                name: name.clone(),
                source,
            })?;
        match tokio::time::timeout(
            DEADLINE,
            await_condition(api.clone(), &name, conditions::is_crd_established()),
        )
        .await
        {
            Ok(Ok(_)) => {}
            Ok(Err(source)) => return Err(InstallError::Wait { name, source }),
            Err(_) => {
                return Err(InstallError::NotEstablished {
                    name,
                    seconds: DEADLINE.as_secs(),
                });
            }
        }
    }
    Ok(())
}
