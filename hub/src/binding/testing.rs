//! Builders shared by the binding tests, so each test states only what it is about.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use ks_shared::api::{BindingPolicySpec, DownsyncModulation, DownsyncObjectTest, DownsyncPolicyClause};

use super::policy::CompiledPolicy;
use super::workload::{Labels, ObjectIdentity, Wec, WorkloadObject};

pub(super) fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

pub(super) fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

/// A workload object at resourceVersion "1" with no labels; `namespace` "" makes it cluster-scoped.
pub(super) fn object(group: &str, resource: &str, kind: &str, namespace: &str, name: &str) -> WorkloadObject {
    WorkloadObject {
        identity: ObjectIdentity {
            group: group.into(),
            version: "v1".into(),
            resource: resource.into(),
            namespace: namespace.into(),
            name: name.into(),
            kind: kind.into(),
        },
        resource_version: "1".into(),
        labels: Labels::new(),
    }
}

pub(super) fn deployment(namespace: &str, name: &str) -> WorkloadObject {
    object("apps", "deployments", "Deployment", namespace, name)
}

pub(super) fn config_map(namespace: &str, name: &str) -> WorkloadObject {
    object("", "configmaps", "ConfigMap", namespace, name)
}

/// A Namespace object: cluster-scoped, in the core group.
pub(super) fn namespace(name: &str) -> WorkloadObject {
    object("", "namespaces", "Namespace", "", name)
}

pub(super) fn with_labels(mut object: WorkloadObject, pairs: &[(&str, &str)]) -> WorkloadObject {
    object.labels = labels(pairs);
    object
}

pub(super) fn wec(name: &str, pairs: &[(&str, &str)]) -> Wec {
    Wec {
        name: name.into(),
        labels: labels(pairs),
    }
}

pub(super) fn match_labels(pairs: &[(&str, &str)]) -> LabelSelector {
    LabelSelector {
        match_labels: Some(labels(pairs)),
        match_expressions: None,
    }
}

pub(super) fn expression(key: &str, operator: &str, values: &[&str]) -> LabelSelector {
    LabelSelector {
        match_labels: None,
        match_expressions: Some(vec![LabelSelectorRequirement {
            key: key.into(),
            operator: operator.into(),
            values: Some(strings(values)),
        }]),
    }
}

/// A selector that does not convert: `In` needs values.
pub(super) fn invalid_selector() -> LabelSelector {
    expression("app", "In", &[])
}

pub(super) fn clause(test: DownsyncObjectTest, modulation: DownsyncModulation) -> DownsyncPolicyClause {
    DownsyncPolicyClause { test, modulation }
}

pub(super) fn compile(downsync: Vec<DownsyncPolicyClause>, cluster_selectors: Vec<LabelSelector>) -> CompiledPolicy {
    CompiledPolicy::new(&BindingPolicySpec {
        cluster_selectors,
        downsync,
    })
}

pub(super) fn error_messages(policy: &CompiledPolicy) -> Vec<String> {
    policy.errors().iter().map(ToString::to_string).collect()
}
