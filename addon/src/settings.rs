//! How the agent is installed on one WEC: the controller's defaults, overridden by the
//! AddOnDeploymentConfig that the cluster's ManagedClusterAddOn references.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Toleration;
use ks_shared::ocm::{AddOnConfig, AddOnDeploymentConfigSpec, ManagedClusterAddOn};

/// API group and resource of an AddOnDeploymentConfig reference in `spec.configs`.
pub const CONFIG_GROUP: &str = "addon.open-cluster-management.io";
pub const CONFIG_RESOURCE: &str = "addondeploymentconfigs";

/// The customized variable that overrides the agent image (`customizedVariables[].name`).
pub const IMAGE_VARIABLE: &str = "IMAGE";
/// The customized variable that sets the agent's `--http-address` (metrics and health), e.g.
/// `127.0.0.1:0` where several agents share one host, as on the local stack.
pub const HTTP_ADDRESS_VARIABLE: &str = "HTTP_ADDRESS";
/// The customized variable that sets where the agent sends its traces (its
/// `OTEL_EXPORTER_OTLP_ENDPOINT`); empty: no tracing on that WEC.
pub const OTLP_ENDPOINT_VARIABLE: &str = "OTLP_ENDPOINT";

/// The customized variables that tune the agent's logs, rate limits and trace export on one WEC:
/// each variable, what it sets, and how its value is checked.
pub const TUNING_VARIABLES: [(&str, Tuning); 7] = [
    ("LOG_LEVEL", Tuning::Env("RUST_LOG", Check::LogFilter)),
    (
        "LOG_FORMAT",
        Tuning::Flag("--log-format", Check::OneOf(&["text", "json"])),
    ),
    ("HUB_QPS", Tuning::Flag("--hub-qps", Check::Qps)),
    ("HUB_BURST", Tuning::Flag("--hub-burst", Check::Count)),
    ("LOCAL_QPS", Tuning::Flag("--local-qps", Check::Qps)),
    ("LOCAL_BURST", Tuning::Flag("--local-burst", Check::Count)),
    (
        "OTLP_PROTOCOL",
        Tuning::Env("OTEL_EXPORTER_OTLP_PROTOCOL", Check::OneOf(&["grpc", "http/protobuf"])),
    ),
];

/// What a tuning variable sets.
#[derive(Clone, Copy, Debug)]
pub enum Tuning {
    /// An environment variable of the agent.
    Env(&'static str, Check),
    /// A flag of the agent (`--flag=value`).
    Flag(&'static str, Check),
}

/// How a tuning variable's value is checked.
#[derive(Clone, Copy, Debug)]
pub enum Check {
    /// A `RUST_LOG` filter.
    LogFilter,
    OneOf(&'static [&'static str]),
    /// Requests per second, at least 0.
    Qps,
    /// A whole number of requests.
    Count,
}

impl Check {
    fn allows(self, value: &str) -> Result<(), String> {
        match self {
            Check::LogFilter => tracing_subscriber::EnvFilter::builder()
                .parse(value)
                .map(|_| ())
                .map_err(|err| format!("not a log filter: {err}")),
            Check::OneOf(allowed) if allowed.contains(&value) => Ok(()),
            Check::OneOf(allowed) => Err(format!("not one of {}", allowed.join(", "))),
            Check::Qps => ks_shared::cli::parse_qps(value).map(|_| ()),
            Check::Count => value
                .parse::<u32>()
                .map(|_| ())
                .map_err(|_| "not a whole number".to_string()),
        }
    }
}

/// What the controller uses when no AddOnDeploymentConfig says otherwise.
#[derive(Clone, Debug, PartialEq)]
pub struct Defaults {
    pub image: String,
    pub install_namespace: String,
    /// The most WorkStatuses an agent may keep in its cluster's mailbox (a ResourceQuota).
    pub max_work_statuses: crate::hub_rbac::WorkStatusQuota,
    /// Where agents send traces (OTLP/gRPC); `None`: no tracing.
    pub otlp_endpoint: Option<String>,
}

/// Everything that varies in the rendered agent manifests.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct AgentSettings {
    pub image: String,
    pub install_namespace: String,
    pub node_selector: BTreeMap<String, String>,
    pub tolerations: Vec<Toleration>,
    /// The agent's `--http-address`, when not its default.
    pub http_address: Option<String>,
    /// The agent's `OTEL_EXPORTER_OTLP_ENDPOINT`, if it traces.
    pub otlp_endpoint: Option<String>,
    /// More flags and environment variables, from [`TUNING_VARIABLES`].
    pub flags: Vec<String>,
    pub env: BTreeMap<String, String>,
}

/// An AddOnDeploymentConfig that cannot be honoured. Reported on the ManagedClusterAddOn.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum SettingsError {
    #[error("agentInstallNamespace {0:?} is not a valid namespace name")]
    InstallNamespace(String),
    #[error("customized variable {IMAGE_VARIABLE} is empty")]
    EmptyImage,
    #[error("customized variable {HTTP_ADDRESS_VARIABLE} {0:?} is not IP:PORT")]
    HttpAddress(String),
    #[error("OTLP endpoint {0:?} is not an http:// or https:// URL")]
    OtlpEndpoint(String),
    #[error("customized variable {name} {value:?}: {problem}")]
    Tuning {
        name: &'static str,
        value: String,
        problem: String,
    },
}

/// The AddOnDeploymentConfig a ManagedClusterAddOn references, if any (namespace defaults to the
/// add-on's own namespace, as in OCM).
pub fn deployment_config_ref(addon: &ManagedClusterAddOn) -> Option<AddOnConfig> {
    let own_namespace = addon.metadata.namespace.clone().unwrap_or_default();
    addon
        .spec
        .configs
        .iter()
        .find(|c| c.group == CONFIG_GROUP && c.resource == CONFIG_RESOURCE)
        .map(|c| AddOnConfig {
            namespace: if c.namespace.is_empty() {
                own_namespace
            } else {
                c.namespace.clone()
            },
            ..c.clone()
        })
}

/// The settings for one WEC: `defaults` overridden by `config`. Image registry mirrors apply
/// last, to whichever image was chosen.
pub fn resolve(
    defaults: &Defaults,
    config: Option<&AddOnDeploymentConfigSpec>,
) -> Result<AgentSettings, SettingsError> {
    let mut settings = AgentSettings {
        image: defaults.image.clone(),
        install_namespace: defaults.install_namespace.clone(),
        otlp_endpoint: defaults.otlp_endpoint.as_deref().map(otlp_endpoint).transpose()?,
        ..Default::default()
    };
    let Some(config) = config else {
        return Ok(settings);
    };
    if let Some(variable) = config
        .customized_variables
        .iter()
        .find(|v| v.name == OTLP_ENDPOINT_VARIABLE)
    {
        let endpoint = variable.value.trim();
        settings.otlp_endpoint = (!endpoint.is_empty()).then(|| otlp_endpoint(endpoint)).transpose()?;
    }
    if let Some(variable) = config.customized_variables.iter().find(|v| v.name == IMAGE_VARIABLE) {
        if variable.value.trim().is_empty() {
            return Err(SettingsError::EmptyImage);
        }
        settings.image = variable.value.trim().to_string();
    }
    if let Some(variable) = config
        .customized_variables
        .iter()
        .find(|v| v.name == HTTP_ADDRESS_VARIABLE)
    {
        let address = variable.value.trim();
        if address.parse::<std::net::SocketAddr>().is_err() {
            return Err(SettingsError::HttpAddress(address.to_string()));
        }
        settings.http_address = Some(address.to_string());
    }
    for (name, tuning) in TUNING_VARIABLES {
        let Some(variable) = config.customized_variables.iter().find(|v| v.name == name) else {
            continue;
        };
        let value = variable.value.trim().to_string();
        let (Tuning::Env(_, check) | Tuning::Flag(_, check)) = tuning;
        if let Err(problem) = check.allows(&value) {
            return Err(SettingsError::Tuning { name, value, problem });
        }
        match tuning {
            Tuning::Env(env, _) => {
                settings.env.insert(env.to_string(), value);
            }
            Tuning::Flag(flag, _) => settings.flags.push(format!("{flag}={value}")),
        }
    }
    if let Some(namespace) = config.agent_install_namespace.as_deref().filter(|n| !n.is_empty()) {
        if !is_dns_label(namespace) {
            return Err(SettingsError::InstallNamespace(namespace.to_string()));
        }
        settings.install_namespace = namespace.to_string();
    }
    if let Some(placement) = &config.node_placement {
        settings.node_selector = placement.node_selector.clone();
        settings.tolerations = placement.tolerations.clone();
    }
    if let Some(mirror) = config
        .registries
        .iter()
        .find(|m| !m.source.is_empty() && settings.image.starts_with(&m.source))
    {
        settings.image = format!("{}{}", mirror.mirror, &settings.image[mirror.source.len()..]);
    }
    Ok(settings)
}

/// An OTLP endpoint as OpenTelemetry's exporters take it: a URL with its scheme.
fn otlp_endpoint(endpoint: &str) -> Result<String, SettingsError> {
    let host = endpoint
        .strip_prefix("http://")
        .or_else(|| endpoint.strip_prefix("https://"));
    match host {
        Some(host) if !host.is_empty() && !host.contains(char::is_whitespace) => Ok(endpoint.to_string()),
        _ => Err(SettingsError::OtlpEndpoint(endpoint.to_string())),
    }
}

/// RFC 1123 label: what a namespace name must be.
fn is_dns_label(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-')
}

#[cfg(test)]
mod tests {
    use super::*;
    use ks_shared::ocm::{CustomizedVariable, ImageMirror, ManagedClusterAddOnSpec, NodePlacement};

    fn defaults() -> Defaults {
        Defaults {
            max_work_statuses: crate::hub_rbac::WorkStatusQuota::Fixed(100),
            image: "ghcr.io/kubestellar-rs/ks-agent:0.1.0".into(),
            install_namespace: "open-cluster-management-agent-addon".into(),
            otlp_endpoint: Some("http://jaeger-collector.tracing:4317".into()),
        }
    }

    #[test]
    fn without_config_the_defaults_hold() {
        let settings = resolve(&defaults(), None).unwrap();
        assert_eq!(settings.image, defaults().image);
        assert_eq!(settings.install_namespace, defaults().install_namespace);
        assert!(settings.node_selector.is_empty() && settings.tolerations.is_empty());
        assert_eq!(settings.otlp_endpoint, defaults().otlp_endpoint);
    }

    #[test]
    fn a_cluster_traces_elsewhere_or_not_at_all() {
        let endpoint = |value: &str| AddOnDeploymentConfigSpec {
            customized_variables: vec![CustomizedVariable {
                name: OTLP_ENDPOINT_VARIABLE.into(),
                value: value.into(),
            }],
            ..Default::default()
        };
        let settings = |value| resolve(&defaults(), Some(&endpoint(value)));
        let elsewhere = settings("https://otel.edge:4317").unwrap();
        assert_eq!(elsewhere.otlp_endpoint.as_deref(), Some("https://otel.edge:4317"));
        assert_eq!(settings(" ").unwrap().otlp_endpoint, None);
        for bad in ["otel.edge:4317", "http://", "http://a b"] {
            assert_eq!(settings(bad), Err(SettingsError::OtlpEndpoint(bad.into())), "{bad}");
        }
        let bad_default = Defaults {
            otlp_endpoint: Some("jaeger:4317".into()),
            ..defaults()
        };
        assert!(matches!(
            resolve(&bad_default, None),
            Err(SettingsError::OtlpEndpoint(_))
        ));
    }

    #[test]
    fn a_cluster_tunes_the_agents_logs_rate_limits_and_export() {
        let config = |pairs: &[(&str, &str)]| AddOnDeploymentConfigSpec {
            customized_variables: pairs
                .iter()
                .map(|(name, value)| CustomizedVariable {
                    name: (*name).into(),
                    value: (*value).into(),
                })
                .collect(),
            ..Default::default()
        };
        let settings = |pairs: &[(&str, &str)]| resolve(&defaults(), Some(&config(pairs)));
        let tuned = settings(&[
            ("LOG_LEVEL", "info,ks_agent=debug"),
            ("LOG_FORMAT", "json"),
            ("HUB_QPS", "5.5"),
            ("HUB_BURST", "10"),
            ("LOCAL_QPS", "0"),
            ("LOCAL_BURST", "1"),
            ("OTLP_PROTOCOL", "http/protobuf"),
        ])
        .unwrap();
        assert_eq!(
            tuned.flags,
            [
                "--log-format=json",
                "--hub-qps=5.5",
                "--hub-burst=10",
                "--local-qps=0",
                "--local-burst=1"
            ]
        );
        assert_eq!(
            tuned.env,
            BTreeMap::from([
                ("OTEL_EXPORTER_OTLP_PROTOCOL".to_string(), "http/protobuf".to_string()),
                ("RUST_LOG".to_string(), "info,ks_agent=debug".to_string()),
            ])
        );
        for (name, bad) in [
            ("LOG_LEVEL", "info,ks_agent=loud"),
            ("LOG_FORMAT", "xml"),
            ("HUB_QPS", "-1"),
            ("LOCAL_BURST", "1.5"),
            ("OTLP_PROTOCOL", "http/json"),
        ] {
            let err = settings(&[(name, bad)]).unwrap_err().to_string();
            assert!(
                err.starts_with(&format!("customized variable {name} {bad:?}: ")),
                "{err}"
            );
        }
        assert_eq!(
            settings(&[]).unwrap().flags,
            Vec::<String>::new(),
            "nothing set: nothing added"
        );
    }

    #[test]
    fn config_overrides_image_namespace_and_placement() {
        let config = AddOnDeploymentConfigSpec {
            customized_variables: vec![
                CustomizedVariable {
                    name: IMAGE_VARIABLE.into(),
                    value: "example.io/ks-agent:dev".into(),
                },
                CustomizedVariable {
                    name: HTTP_ADDRESS_VARIABLE.into(),
                    value: "127.0.0.1:0".into(),
                },
            ],
            agent_install_namespace: Some("status".into()),
            node_placement: Some(NodePlacement {
                node_selector: BTreeMap::from([("role".into(), "infra".into())]),
                tolerations: vec![Toleration {
                    key: Some("infra".into()),
                    operator: Some("Exists".into()),
                    ..Default::default()
                }],
            }),
            registries: vec![ImageMirror {
                source: "example.io".into(),
                mirror: "mirror.local:5000".into(),
            }],
        };
        let settings = resolve(&defaults(), Some(&config)).unwrap();
        assert_eq!(settings.image, "mirror.local:5000/ks-agent:dev");
        assert_eq!(settings.install_namespace, "status");
        assert_eq!(settings.node_selector["role"], "infra");
        assert_eq!(settings.tolerations.len(), 1);
        assert_eq!(settings.http_address.as_deref(), Some("127.0.0.1:0"));
    }

    #[test]
    fn bad_config_is_an_error_not_a_panic() {
        let namespace = AddOnDeploymentConfigSpec {
            agent_install_namespace: Some("Not_A/Namespace".into()),
            ..Default::default()
        };
        assert!(matches!(
            resolve(&defaults(), Some(&namespace)),
            Err(SettingsError::InstallNamespace(_))
        ));
        let image = AddOnDeploymentConfigSpec {
            customized_variables: vec![CustomizedVariable {
                name: IMAGE_VARIABLE.into(),
                value: " ".into(),
            }],
            ..Default::default()
        };
        assert_eq!(resolve(&defaults(), Some(&image)), Err(SettingsError::EmptyImage));
        let address = AddOnDeploymentConfigSpec {
            customized_variables: vec![CustomizedVariable {
                name: HTTP_ADDRESS_VARIABLE.into(),
                value: "everywhere".into(),
            }],
            ..Default::default()
        };
        assert!(matches!(
            resolve(&defaults(), Some(&address)),
            Err(SettingsError::HttpAddress(_))
        ));
    }

    #[test]
    fn config_reference_defaults_to_the_addon_namespace() {
        let mut addon = ManagedClusterAddOn::new(
            "addon-status",
            ManagedClusterAddOnSpec {
                configs: vec![
                    AddOnConfig {
                        group: "other.io".into(),
                        resource: "things".into(),
                        namespace: String::new(),
                        name: "x".into(),
                    },
                    AddOnConfig {
                        group: CONFIG_GROUP.into(),
                        resource: CONFIG_RESOURCE.into(),
                        namespace: String::new(),
                        name: "settings".into(),
                    },
                ],
                ..Default::default()
            },
        );
        addon.metadata.namespace = Some("cluster1".into());
        let found = deployment_config_ref(&addon).unwrap();
        assert_eq!(
            (found.namespace.as_str(), found.name.as_str()),
            ("cluster1", "settings")
        );
        addon.spec.configs.pop();
        assert_eq!(deployment_config_ref(&addon), None);
    }
}
