//! Spec builders and a one-collector run shared by the collector's tests, and the tests of the
//! CombinedStatus metadata and of the collector's status lines.

use ks_shared::api::{NamedAggregator, NamedExpression, StatusCollectorSpec};
use serde_json::{Value as Json, json};

use super::*;

pub(super) fn named(pairs: &[(&str, &str)]) -> Vec<NamedExpression> {
    pairs
        .iter()
        .map(|(name, def)| NamedExpression {
            name: name.to_string(),
            def: def.to_string(),
        })
        .collect()
}

pub(super) fn field(name: &str, type_: &str, subject: Option<&str>) -> NamedAggregator {
    NamedAggregator {
        name: name.into(),
        type_: type_.into(),
        subject: subject.map(String::from),
    }
}

pub(super) fn selecting(pairs: &[(&str, &str)]) -> StatusCollectorSpec {
    StatusCollectorSpec {
        select: named(pairs),
        limit: 20,
        ..Default::default()
    }
}

pub(super) fn combining(group_by: &[(&str, &str)], fields: Vec<NamedAggregator>) -> StatusCollectorSpec {
    StatusCollectorSpec {
        group_by: named(group_by),
        combined_fields: fields,
        limit: 20,
        ..Default::default()
    }
}

pub(super) fn collector(spec: &StatusCollectorSpec) -> Collector {
    Collector::new("sc", spec).unwrap()
}

/// Runs one collector over WECs named after their statuses' position (`wec0`, `wec1`, …).
pub(super) fn run_one(spec: &StatusCollectorSpec, statuses: &[Json]) -> NamedStatusCombination {
    let names: Vec<String> = (0..statuses.len()).map(|i| format!("wec{i}")).collect();
    let reports: Vec<WecReport> = names
        .iter()
        .zip(statuses)
        .map(|(wec, status)| WecReport {
            wec,
            status: (!status.is_null()).then_some(status),
            ..Default::default()
        })
        .collect();
    let object = json!({"metadata": {"name": "web"}, "spec": {"replicas": 2}, "status": {"secret": 1}});
    combine(&[&collector(spec)], &object, &reports).remove(0)
}

#[test]
fn combined_status_is_named_placed_and_labelled_as_upstream() {
    let web = ObjectIdentity {
        group: "apps".into(),
        version: "v1".into(),
        resource: "deployments".into(),
        namespace: "ns1".into(),
        name: "web".into(),
        kind: "Deployment".into(),
    };
    let meta = combined_status_metadata(&web, "u1", "bp", "u2");
    assert_eq!(meta.name.as_deref(), Some("u1.u2"));
    assert_eq!(meta.namespace.as_deref(), Some("ns1"));
    let labels = meta.labels.unwrap();
    assert_eq!(labels.len(), 5);
    assert_eq!(labels[combined_status_label::BINDING_POLICY], "bp");
    assert_eq!(labels[combined_status_label::API_GROUP], "apps");
    let owner = &meta.owner_references.unwrap()[0];
    assert_eq!((owner.api_version.as_str(), owner.uid.as_str()), ("apps/v1", "u1"));
    assert_eq!(owner.controller, None);

    let namespace = ObjectIdentity {
        group: "".into(),
        version: "v1".into(),
        resource: "namespaces".into(),
        name: "ns1".into(),
        kind: "Namespace".into(),
        ..Default::default()
    };
    let meta = combined_status_metadata(&namespace, "u3", "bp", "u2");
    assert_eq!(meta.namespace.as_deref(), Some(REPORT_NAMESPACE));
    assert_eq!(meta.labels.unwrap()[combined_status_label::NAMESPACE], "");
    assert_eq!(meta.owner_references.unwrap()[0].api_version, "v1");

    let long_policy = "p".repeat(64);
    let role = ObjectIdentity {
        name: "system:admin".into(),
        ..web
    };
    let labels = combined_status_metadata(&role, "u4", &long_policy, "u2")
        .labels
        .unwrap();
    assert!(!labels.contains_key(combined_status_label::BINDING_POLICY));
    assert!(!labels.contains_key(combined_status_label::NAME));
    assert_eq!(labels.len(), 3);
}

#[test]
fn evaluation_errors_become_status_lines() {
    let spec = StatusCollectorSpec {
        filter: Some("returned.status.x".into()),
        ..combining(&[], vec![field("sum", "SUM", Some("'a'"))])
    };
    let result = run_one(&spec, &[json!({"x": 1}), json!({"x": true})]);
    assert_eq!(
        evaluation_errors("apps/deployments ns1/web", &result),
        [
            "apps/deployments ns1/web, WEC wec0, filter: filter expression has type int but expected bool or null",
            concat!(
                r#"apps/deployments ns1/web, column "sum": for WEC wec1, "#,
                r#"failed to parse combinedField subject as a float: parsing "a": invalid float literal"#
            ),
        ]
    );
}
