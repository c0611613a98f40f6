use ks_shared::api::HealthRule;
use serde_json::{Value, json};

use super::*;
use crate::status::collector::{WecReport, combine};

/// The sample rules users may apply (`config/health-rules/`).
const SAMPLES: [&str; 3] = [
    include_str!("../../../../config/health-rules/cert-manager-certificate.yaml"),
    include_str!("../../../../config/health-rules/argo-rollouts-rollout.yaml"),
    include_str!("../../../../config/health-rules/flux-kustomization.yaml"),
];

fn sample(kind: &str) -> Rule {
    let rule = SAMPLES
        .iter()
        .map(|yaml| serde_saphyr::from_str::<HealthRule>(yaml).unwrap())
        .find(|r| r.spec.kind == kind)
        .unwrap();
    Rule::compile(&rule.metadata.name.unwrap(), &rule.spec).unwrap()
}

/// The rule's verdict on each WEC's status (`None`: nothing reported), as the hub computes it.
fn judged(rule: &Rule, statuses: &[(&str, Option<Value>)]) -> Vec<(Verdict, String)> {
    let reports: Vec<WecReport> = statuses
        .iter()
        .map(|(wec, status)| WecReport {
            wec,
            status: status.as_ref(),
            ..Default::default()
        })
        .collect();
    let object = json!({"metadata": {"name": "x"}});
    let in_place =
        |collectors: &[&Collector], reports: &[WecReport]| Ok::<_, ()>(combine(collectors, &object, reports));
    rule.judge(&reports, in_place)
        .unwrap()
        .into_values()
        .map(|h| (h.verdict, h.reason))
        .collect()
}

fn one(rule: &Rule, status: Value) -> (Verdict, String) {
    judged(rule, &[("cluster1", Some(status))]).remove(0)
}

fn conditions(list: Value) -> Value {
    json!({"conditions": list})
}

#[test]
fn the_cert_manager_sample_follows_ready_and_issuing() {
    let rule = sample("Certificate");
    assert_eq!(
        one(&rule, conditions(json!([{"type": "Ready", "status": "True"}]))).0,
        Verdict::Healthy
    );
    assert_eq!(
        one(
            &rule,
            conditions(json!([{"type": "Ready", "status": "False", "reason": "DoesNotExist"},
                              {"type": "Issuing", "status": "True"}]))
        ),
        (Verdict::Progressing, "issuing".into())
    );
    assert_eq!(
        one(
            &rule,
            conditions(json!([{"type": "Ready", "status": "False", "reason": "Failed",
                               "message": "the issuer is not ready"}]))
        ),
        (Verdict::Degraded, "Ready: Failed: the issuer is not ready".into())
    );
    assert_eq!(
        one(&rule, json!({})),
        (
            Verdict::Progressing,
            "HealthRule cert-manager-certificate: no check holds".into()
        )
    );
    assert_eq!(
        judged(&rule, &[("cluster1", None)]),
        [(
            Verdict::Progressing,
            "HealthRule cert-manager-certificate: no check holds".into()
        )],
        "no status yet"
    );
}

#[test]
fn the_argo_rollouts_sample_reads_the_phase() {
    let rule = sample("Rollout");
    assert_eq!(
        one(
            &rule,
            json!({"phase": "Degraded", "message": "ProgressDeadlineExceeded: ..."})
        ),
        (Verdict::Degraded, "Degraded: ProgressDeadlineExceeded: ...".into())
    );
    assert_eq!(one(&rule, json!({"phase": "Healthy"})).0, Verdict::Healthy);
    assert_eq!(
        one(&rule, json!({"phase": "Paused", "message": "CanaryPauseStep"})),
        (Verdict::Progressing, "paused: CanaryPauseStep".into())
    );
}

#[test]
fn the_flux_sample_puts_stalled_before_ready_and_reconciling_before_not_ready() {
    let rule = sample("Kustomization");
    let said = |list: Value| one(&rule, conditions(list));
    assert_eq!(
        said(
            json!([{"type": "Ready", "status": "True"}, {"type": "Stalled", "status": "True", "reason": "BuildFailed"}])
        ),
        (Verdict::Degraded, "Stalled: BuildFailed".into())
    );
    assert_eq!(
        said(json!([{"type": "Ready", "status": "False", "reason": "Progressing"}, {"type": "Reconciling", "status": "True"}])).0,
        Verdict::Progressing
    );
    assert_eq!(
        said(json!([{"type": "Ready", "status": "False", "reason": "HealthCheckFailed"}])),
        (Verdict::Degraded, "Ready: HealthCheckFailed".into())
    );
}

#[test]
fn a_check_that_fails_on_one_wec_is_unknown_there_only() {
    let rule = sample("Rollout");
    let verdicts = judged(
        &rule,
        &[
            ("cluster1", Some(json!({"phase": "Healthy"}))),
            ("cluster2", Some(json!({"phase": "Degraded", "message": 7}))),
        ],
    );
    assert_eq!(verdicts[0], (Verdict::Healthy, String::new()));
    assert_eq!(verdicts[1].0, Verdict::Unknown);
    assert!(
        verdicts[1].1.starts_with("HealthRule argo-rollouts-rollout: reason: "),
        "{verdicts:?}"
    );
}

fn spec(kind: &str, checks: Value) -> HealthRuleSpec {
    serde_json::from_value(json!({"group": "example.com", "kind": kind, "checks": checks})).unwrap()
}

#[test]
fn a_rule_that_does_not_compile_names_each_field_at_fault() {
    let errors = Rule::compile(
        "bad",
        &spec(
            "",
            json!([{"verdict": "Healthy", "when": "returned.status.("},
                   {"verdict": "Degraded", "when": "true", "reason": "'a' +"}]),
        ),
    )
    .err()
    .unwrap();
    assert_eq!(errors.len(), 3, "{errors:?}");
    assert_eq!(errors[0], "spec.kind is empty");
    assert!(errors[1].starts_with("spec.checks[0].when invalid: "), "{errors:?}");
    assert!(errors[2].starts_with("spec.checks[1].reason invalid: "), "{errors:?}");
}

#[test]
fn the_first_valid_rule_by_name_judges_its_kind_and_a_later_one_is_said_unused() {
    let mut rules = Rules::default();
    let always = |verdict: &str| spec("Widget", json!([{"verdict": verdict, "when": "true"}]));
    assert_eq!(
        rules.set("b-rule", Some(1), Some(&always("Healthy"))),
        [("example.com".to_string(), "Widget".to_string())]
    );
    assert!(
        rules.set("b-rule", Some(1), Some(&always("Degraded"))).is_empty(),
        "same generation"
    );
    rules.set("c-rule", Some(1), Some(&always("Degraded")));
    rules.set(
        "a-rule",
        Some(1),
        Some(&spec("Widget", json!([{"verdict": "Healthy", "when": "("}]))),
    );
    assert_eq!(rules.for_kind("example.com", "Widget").map(Rule::name), Some("b-rule"));
    assert!(rules.errors("a-rule")[0].starts_with("spec.checks[0].when invalid"));
    assert!(rules.errors("b-rule").is_empty());
    assert_eq!(
        rules.errors("c-rule"),
        ["HealthRule b-rule judges Widget in group \"example.com\" already: this one is not used"]
    );
    rules.set("b-rule", None, None);
    assert_eq!(rules.for_kind("example.com", "Widget").map(Rule::name), Some("c-rule"));
    assert!(rules.errors("c-rule").is_empty());
    assert_eq!(rules.names(), ["a-rule", "c-rule"]);
}
