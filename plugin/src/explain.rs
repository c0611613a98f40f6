//! `why`: from the evidence about one object to the chain a rollout goes through (policy
//! selection, WEC selection, Binding, ManifestWork, apply on the WEC, status report), each link
//! found or not, and the first broken one with what to do about it.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use ks_hub::binding::{
    CompiledPolicy, ObjectIdentity, SYSTEM_NAMESPACES, Wec, clause_misses, made_by_the_wds, matching_clauses,
    wec_selected,
};
use ks_hub::status::collector::{Collector, WecReport, combine};
use ks_hub::status::rules::Rules;
use ks_shared::api::{Binding, Health, Verdict, WorkStatus};
use ks_shared::names::WDS_CONTENT_ANNOTATION;
use ks_shared::workload::content_digest;
use kube::ResourceExt;
use serde::Serialize;

use crate::evidence::{Delivered, Evidence, Observed};

/// What `why` found.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Explanation {
    /// E.g. `deployments.apps/web in namespace shop`.
    pub object: String,
    pub in_wds: bool,
    pub policies: Vec<PolicyFinding>,
    pub wecs: Vec<WecFinding>,
    /// The scalar fields of the object's `.status` in the WDS (`replicas=2`, ...); `None`:
    /// it has none.
    pub status_in_wds: Option<String>,
    /// The latest rollout's trace, from the delivered object's `traceparent`.
    pub trace_id: Option<String>,
    /// The HealthRule that judges the object's kind, if one does.
    pub health_rule: Option<String>,
    /// The first link of the chain that does not hold, if any.
    pub broken: Option<BrokenLink>,
}

/// One BindingPolicy's verdict on the object.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyFinding {
    pub policy: String,
    /// The downsync clauses (indexes) the object matches; empty: the policy does not select it.
    pub matching_clauses: Vec<usize>,
    /// When it does not: the clause it came closest to, and the criteria it fails there.
    pub nearest_miss: Option<Miss>,
    /// Invalid selectors in the policy (they select nothing).
    pub errors: Vec<String>,
    /// The WECs its clusterSelectors choose.
    pub wecs: Vec<String>,
    /// Whether its Binding lists the object.
    pub in_binding: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Miss {
    pub clause: usize,
    pub failed: Vec<&'static str>,
}

/// The object on one WEC.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WecFinding {
    pub wec: String,
    /// The selecting policies that choose this WEC; empty: it is not a destination.
    pub chosen_by: Vec<String>,
    /// Why the policies that select the object do not choose this WEC.
    pub not_chosen: Option<String>,
    pub manifest_works: Vec<String>,
    /// OCM's conditions on the object: `True`, or `False: <message>`.
    pub applied: Option<String>,
    pub available: Option<String>,
    /// The WDS generation the WEC's status agent last reported, and whether the WEC applied it;
    /// no generation where the report names the object's content instead.
    pub reported_generation: Option<i64>,
    pub generation_applied: Option<bool>,
    /// Where the object's versions are told by content (its resource has no status
    /// subresource): whether the WEC runs the content the WDS has now.
    pub content_current: Option<bool>,
    pub work_status: Option<String>,
    /// The verdict on it there: its HealthRule's when one judges its kind (`Explanation::
    /// health_rule`), else its status agent's.
    pub health: Option<Health>,
}

/// A link of the chain that does not hold.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BrokenLink {
    /// `object`, `selection`, `clusters`, `binding`, `delivery`, `apply`, `status`, `health`.
    pub link: &'static str,
    pub wec: Option<String>,
    pub problem: String,
    pub fix: String,
}

/// Explains the evidence; with `only_wec`, only that WEC's part of the chain.
pub fn explain(evidence: &Evidence, only_wec: Option<&str>) -> Explanation {
    let id = &evidence.identity;
    let mut explanation = Explanation {
        object: describe(id),
        in_wds: evidence.observed.is_some(),
        status_in_wds: evidence.observed.as_ref().and_then(|o| o.status.as_ref()).map(scalars),
        ..Default::default()
    };
    let Some(observed) = &evidence.observed else {
        explanation.broken = Some(BrokenLink {
            link: "object",
            wec: None,
            problem: format!("the WDS has no {}", explanation.object),
            fix: "check the resource, name and namespace (-n) against `kubectl get` in the WDS".into(),
        });
        return explanation;
    };
    let wecs: Vec<&Wec> = evidence
        .wecs
        .iter()
        .filter(|w| only_wec.is_none_or(|only| w.name == only))
        .collect();
    for policy in &evidence.policies {
        let compiled = CompiledPolicy::new(&policy.spec);
        let matching = matching_clauses(&compiled, &observed.object, observed.namespace_labels.as_ref());
        let nearest_miss = if matching.is_empty() {
            compiled
                .clauses()
                .iter()
                .enumerate()
                .map(|(clause, c)| Miss {
                    clause,
                    failed: clause_misses(c, &observed.object, observed.namespace_labels.as_ref()),
                })
                .min_by_key(|m| m.failed.len())
        } else {
            None
        };
        explanation.policies.push(PolicyFinding {
            policy: policy.name_any(),
            matching_clauses: matching,
            nearest_miss,
            errors: compiled.errors().iter().map(ToString::to_string).collect(),
            wecs: wecs
                .iter()
                .filter(|w| wec_selected(&compiled, w))
                .map(|w| w.name.clone())
                .collect(),
            in_binding: evidence.bindings.get(&policy.name_any()).is_some_and(|b| lists(b, id)),
        });
    }
    let selecting: Vec<&PolicyFinding> = explanation
        .policies
        .iter()
        .filter(|p| !p.matching_clauses.is_empty())
        .collect();
    let content = content_digest(observed.whole.as_object().into_iter().flatten());
    for wec in &wecs {
        let chosen_by: Vec<String> = selecting
            .iter()
            .filter(|p| p.wecs.contains(&wec.name))
            .map(|p| p.policy.clone())
            .collect();
        let not_chosen = (chosen_by.is_empty() && !selecting.is_empty()).then(|| {
            let names: Vec<&str> = selecting.iter().map(|p| p.policy.as_str()).collect();
            format!(
                "its labels {} match no clusterSelector of {}",
                labels(&wec.labels),
                names.join(", ")
            )
        });
        let delivered = evidence.delivered.get(&wec.name).map(Vec::as_slice).unwrap_or_default();
        let status = evidence.work_statuses.get(&wec.name);
        let details = status.and_then(|s| s.spec.status_details.as_ref());
        let reported_content = status.and_then(|s| s.annotations().get(WDS_CONTENT_ANNOTATION));
        explanation.wecs.push(WecFinding {
            wec: wec.name.clone(),
            chosen_by,
            not_chosen,
            manifest_works: delivered.iter().map(|d| d.manifest_work.clone()).collect(),
            applied: condition(delivered, "Applied"),
            available: condition(delivered, "Available"),
            reported_generation: details
                .filter(|_| reported_content.is_none())
                .map(|d| d.last_generation),
            generation_applied: details.map(|d| d.last_generation_is_applied),
            content_current: reported_content.map(|reported| *reported == content),
            work_status: status.map(|s| s.name_any()),
            health: status.and_then(|s| s.spec.health.clone()),
        });
    }
    if let Some((rule, verdicts)) = ruled(evidence, observed) {
        for wec in &mut explanation.wecs {
            wec.health = verdicts.get(&wec.wec).cloned().filter(|_| wec.work_status.is_some());
        }
        explanation.health_rule = Some(rule);
    }
    explanation.trace_id = evidence
        .delivered
        .values()
        .flatten()
        .filter_map(|d| d.traceparent.as_deref())
        .chain(observed.traceparent.as_deref())
        .find_map(trace_id);
    explanation.broken = first_broken(&explanation, evidence, observed.generation);
    explanation
}

/// The name of the HealthRule judging the object's kind (the first valid one by name, as the
/// hub takes it) and its verdict on each WEC's report, evaluated here as the hub does.
fn ruled(evidence: &Evidence, observed: &Observed) -> Option<(String, BTreeMap<String, Health>)> {
    let mut rules = Rules::default();
    for rule in &evidence.health_rules {
        rules.set(&rule.name_any(), rule.metadata.generation, Some(&rule.spec));
    }
    let rule = rules.for_kind(&evidence.identity.group, &evidence.identity.kind)?;
    let statuses: Vec<(&str, Option<serde_json::Value>, &WorkStatus)> = evidence
        .work_statuses
        .iter()
        .map(|(wec, ws)| {
            (
                wec.as_str(),
                ws.status.as_ref().map(|s| serde_json::Value::Object(s.0.clone())),
                ws,
            )
        })
        .collect();
    let reports: Vec<WecReport> = statuses
        .iter()
        .map(|(wec, status, ws)| WecReport {
            wec,
            status: status.as_ref(),
            details: ws.spec.status_details.as_ref(),
            ..Default::default()
        })
        .collect();
    let in_place = |collectors: &[&Collector], reports: &[WecReport]| {
        Ok::<_, std::convert::Infallible>(combine(collectors, &observed.whole, reports))
    };
    let verdicts = rule.judge(&reports, in_place).ok()?;
    Some((rule.name().to_string(), verdicts))
}

/// The scalar fields of a status, `key=value` in key order: what a glance needs.
fn scalars(status: &serde_json::Value) -> String {
    let fields: Vec<String> = status
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(_, v)| !v.is_object() && !v.is_array())
        .map(|(k, v)| format!("{k}={}", v.as_str().map_or_else(|| v.to_string(), str::to_string)))
        .collect();
    if fields.is_empty() {
        "present (no scalar fields)".to_string()
    } else {
        fields.join(" ")
    }
}

/// `deployments.apps/web in namespace shop`.
fn describe(id: &ObjectIdentity) -> String {
    let resource = crate::target::qualified(&id.group, &id.resource);
    match id.namespace.as_str() {
        "" => format!("{resource}/{}", id.name),
        namespace => format!("{resource}/{} in namespace {namespace}", id.name),
    }
}

/// Whether `binding` lists the object.
fn lists(binding: &Binding, id: &ObjectIdentity) -> bool {
    let workload = &binding.spec.workload;
    if id.namespace.is_empty() {
        workload.cluster_scope.iter().any(|c| {
            let o = &c.object;
            (&o.group, &o.resource, &o.name) == (&id.group, &id.resource, &id.name)
        })
    } else {
        workload.namespace_scope.iter().any(|c| {
            let o = &c.object;
            (&o.group, &o.resource, &o.namespace, &o.name) == (&id.group, &id.resource, &id.namespace, &id.name)
        })
    }
}

/// OCM's condition `type_` on the object, over every ManifestWork holding it: the first that is
/// not `True`, else `True`; `None` when none reports it yet.
fn condition(delivered: &[Delivered], type_: &str) -> Option<String> {
    let found: Vec<&Condition> = delivered
        .iter()
        .filter_map(|d| d.conditions.iter().find(|c| c.type_ == type_))
        .collect();
    let bad = found.iter().find(|c| c.status != "True");
    match (bad, found.is_empty()) {
        (Some(c), _) => Some(format!("{}: {}", c.status, c.message)),
        (None, false) => Some("True".into()),
        (None, true) => None,
    }
}

/// The trace id of a W3C `traceparent` (`00-<trace id>-<span id>-<flags>`).
fn trace_id(traceparent: &str) -> Option<String> {
    let id = traceparent.split('-').nth(1)?;
    (id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit())).then(|| id.to_string())
}

fn first_broken(explanation: &Explanation, evidence: &Evidence, generation: Option<i64>) -> Option<BrokenLink> {
    let selecting: Vec<&PolicyFinding> = explanation
        .policies
        .iter()
        .filter(|p| !p.matching_clauses.is_empty())
        .collect();
    if selecting.is_empty() {
        return Some(BrokenLink {
            link: "selection",
            wec: None,
            problem: "no BindingPolicy selects it".into(),
            fix: own_object_fix(evidence).unwrap_or_else(|| nearest_miss_fix(&explanation.policies)),
        });
    }
    let destinations: BTreeSet<&str> = selecting
        .iter()
        .flat_map(|p| p.wecs.iter().map(String::as_str))
        .collect();
    if destinations.is_empty() {
        let names: Vec<&str> = selecting.iter().map(|p| p.policy.as_str()).collect();
        let known: Vec<String> = evidence
            .wecs
            .iter()
            .map(|w| format!("{} {}", w.name, labels(&w.labels)))
            .collect();
        let errors: Vec<&str> = selecting
            .iter()
            .flat_map(|p| p.errors.iter().map(String::as_str))
            .collect();
        return Some(BrokenLink {
            link: "clusters",
            wec: None,
            problem: format!(
                "the clusterSelectors of {} choose no WEC{}",
                names.join(", "),
                if errors.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", errors.join("; "))
                }
            ),
            fix: format!(
                "label a ManagedCluster in the ITS to match, or change spec.clusterSelectors; the WECs are: {}",
                if known.is_empty() {
                    "none".to_string()
                } else {
                    known.join(", ")
                }
            ),
        });
    }
    for wec in explanation.wecs.iter().filter(|w| !w.chosen_by.is_empty()) {
        let broken = |link, problem: String, fix: String| {
            Some(BrokenLink {
                link,
                wec: Some(wec.wec.clone()),
                problem,
                fix,
            })
        };
        let unbound: Vec<&str> = selecting
            .iter()
            .filter(|p| p.wecs.contains(&wec.wec) && !p.in_binding)
            .map(|p| p.policy.as_str())
            .collect();
        if unbound.len() == wec.chosen_by.len() {
            return broken(
                "binding",
                format!("Binding {} does not list it yet", unbound.join(", ")),
                "the hub for this WDS records selections in Bindings: is ks-hub running, and what does the \
                 BindingPolicy's status say?"
                    .into(),
            );
        }
        if wec.manifest_works.is_empty() {
            // What the transport could not write, as it reports it on the Bindings.
            let reported: Vec<&str> = wec
                .chosen_by
                .iter()
                .filter_map(|p| evidence.bindings.get(p)?.status.as_ref())
                .flat_map(|s| s.errors.iter().map(String::as_str))
                .collect();
            let fix = if reported.is_empty() {
                "the hub's transport writes them: look at ks-hub's log and at the ITS's health".to_string()
            } else {
                format!("the hub's transport reports: {}", reported.join("; "))
            };
            return broken(
                "delivery",
                format!("no ManifestWork in namespace {} of the ITS holds it", wec.wec),
                fix,
            );
        }
        match wec.applied.as_deref() {
            None => {
                return broken(
                    "apply",
                    format!("OCM has not reported applying it on {}", wec.wec),
                    format!(
                        "is the OCM agent of {0} running, and its ManagedCluster Available? \
                         (kubectl --context <its> get managedcluster {0})",
                        wec.wec
                    ),
                );
            }
            Some(applied) if applied != "True" => {
                let error = applied.trim_start_matches("False: ");
                return broken(
                    "apply",
                    format!("{} could not apply it: {error}", wec.wec),
                    apply_fix(error),
                );
            }
            _ => {}
        }
        if let Some(available) = wec.available.as_deref().filter(|a| *a != "True") {
            return broken(
                "apply",
                format!("it is not on {}: Available {available}", wec.wec),
                "OCM re-applies it; if it stays missing, something on the WEC deletes it".into(),
            );
        }
        if wec.work_status.is_none() {
            return broken(
                "status",
                format!("the status agent of {} has not reported it (no WorkStatus)", wec.wec),
                format!(
                    "is the add-on addon-status Available on {0}? (kubectl --context <its> -n {0} get \
                     managedclusteraddons)",
                    wec.wec
                ),
            );
        }
        if wec.content_current == Some(false) {
            return broken(
                "status",
                format!("{} reports an earlier content of the object", wec.wec),
                "the WEC has not caught up yet; if it stays behind, look at the ManifestWork's conditions".into(),
            );
        }
        if let (Some(reported), Some(wanted)) = (wec.reported_generation, generation)
            && (reported < wanted || wec.generation_applied == Some(false))
        {
            return broken(
                "status",
                format!("{} reports generation {reported} of {wanted}, not yet applied", wec.wec),
                "the WEC has not caught up yet; if it stays behind, look at the ManifestWork's conditions".into(),
            );
        }
    }
    unhealthy(explanation)
}

/// Every other link holds: the first WEC where the object is not healthy (degraded before
/// progressing before unknown), as its status agent judges it there.
fn unhealthy(explanation: &Explanation) -> Option<BrokenLink> {
    let chosen = explanation.wecs.iter().filter(|w| !w.chosen_by.is_empty());
    let (wec, health) = chosen
        .filter_map(|w| Some((w, w.health.as_ref()?)))
        .filter(|(_, h)| h.verdict != Verdict::Healthy)
        .min_by_key(|(_, h)| match h.verdict {
            Verdict::Degraded => 0,
            Verdict::Progressing => 1,
            _ => 2,
        })?;
    let fix = match health.verdict {
        Verdict::Degraded => format!(
            "its controller on {0} reports a failure that waiting will not cure: look at it there \
             (kubectl --context <{0}> describe …) and fix its spec or what it needs",
            wec.wec
        ),
        Verdict::Progressing => "it is on its way; if it stays so, look at it on the WEC".to_string(),
        _ => "its status agent cannot judge its status: look at it on the WEC".to_string(),
    };
    let problem = if health.reason.is_empty() {
        format!("it is {} on {}", health.verdict, wec.wec)
    } else {
        format!("it is {} on {}: {}", health.verdict, wec.wec, health.reason)
    };
    Some(BrokenLink {
        link: "health",
        wec: Some(wec.wec.clone()),
        problem,
        fix,
    })
}

/// For an object the WDS makes for itself (or one in a system namespace), which a clause must
/// name to send: what to name.
fn own_object_fix(evidence: &Evidence) -> Option<String> {
    let object = &evidence.observed.as_ref()?.object;
    let namespace = object.identity.namespace.as_str();
    if made_by_the_wds(object) {
        Some(format!(
            "the WDS makes {} for itself and each WEC has its own, so only a clause whose objectNames names it sends it",
            object.identity.name
        ))
    } else if SYSTEM_NAMESPACES.contains(&namespace) {
        Some(format!(
            "{namespace} holds the WDS's own machinery, so only a clause whose namespaces names {namespace} sends what is in it"
        ))
    } else {
        None
    }
}

/// What to do when no policy selects the object: the nearest miss, named.
fn nearest_miss_fix(policies: &[PolicyFinding]) -> String {
    let nearest = policies
        .iter()
        .filter_map(|p| p.nearest_miss.as_ref().map(|m| (p, m)))
        .min_by_key(|(_, m)| m.failed.len());
    match nearest {
        None => "create a BindingPolicy whose spec.downsync selects it".into(),
        Some((policy, miss)) => format!(
            "nearest: BindingPolicy {} spec.downsync[{}] fails {}; change the object (e.g. its labels) or that clause",
            policy.policy,
            miss.clause,
            miss.failed.join(", ")
        ),
    }
}

/// What to do about an apply error.
fn apply_fix(applied: &str) -> String {
    let lower = applied.to_lowercase();
    if lower.contains("namespaces") && lower.contains("not found") {
        "its Namespace is not on the WEC: let a BindingPolicy select the Namespace object too, for the same WECs".into()
    } else if lower.contains("forbidden") {
        "the WEC's OCM work agent may not write it: grant its ServiceAccount the rights (klusterlet-work-sa)".into()
    } else {
        "fix what the error names in the WDS object; OCM retries by itself".into()
    }
}

/// `{a=b,c=d}`.
fn labels(labels: &ks_hub::binding::Labels) -> String {
    let pairs: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
    format!("{{{}}}", pairs.join(","))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use ks_hub::binding::WorkloadObject;
    use ks_shared::api::{BindingPolicy, BindingStatus, WorkStatus};
    use serde_json::json;

    use ks_shared::api::HealthRule;

    use super::*;
    use crate::evidence::Observed;

    const TRACEPARENT: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

    fn identity() -> ObjectIdentity {
        ObjectIdentity {
            group: "apps".into(),
            version: "v1".into(),
            resource: "deployments".into(),
            namespace: "shop".into(),
            name: "web".into(),
            kind: "Deployment".into(),
        }
    }

    fn policy(name: &str, object_labels: serde_json::Value, cluster_labels: serde_json::Value) -> BindingPolicy {
        serde_json::from_value(json!({
            "apiVersion": "control.kubestellar.io/v1alpha1", "kind": "BindingPolicy",
            "metadata": {"name": name},
            "spec": {"clusterSelectors": [{"matchLabels": cluster_labels}],
                     "downsync": [{"objectSelectors": [{"matchLabels": object_labels}]}]},
        }))
        .unwrap()
    }

    fn condition(type_: &str, status: &str, message: &str) -> Condition {
        Condition {
            type_: type_.into(),
            status: status.into(),
            message: message.into(),
            reason: "Test".into(),
            last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ),
            observed_generation: None,
        }
    }

    /// `web` selected by `web-policy` for both WECs (location-group=edge), delivered, applied,
    /// available and reported at generation 2.
    fn healthy() -> Evidence {
        let binding = serde_json::from_value(json!({
            "apiVersion": "control.kubestellar.io/v1alpha1", "kind": "Binding",
            "metadata": {"name": "web-policy"},
            "spec": {"workload": {"namespaceScope": [{"group": "apps", "version": "v1", "resource": "deployments",
                                                      "namespace": "shop", "name": "web", "resourceVersion": "7"}]},
                     "destinations": [{"clusterId": "cluster1"}, {"clusterId": "cluster2"}]},
        }))
        .unwrap();
        let wecs = ["cluster1", "cluster2"].map(|name| Wec {
            name: name.into(),
            labels: BTreeMap::from([("location-group".into(), "edge".into())]),
        });
        let delivered = |wec: &str| {
            vec![Delivered {
                manifest_work: format!("web-policy-{wec}"),
                conditions: vec![condition("Applied", "True", ""), condition("Available", "True", "")],
                traceparent: Some(TRACEPARENT.into()),
            }]
        };
        let status: WorkStatus = serde_json::from_value(json!({
            "apiVersion": "control.kubestellar.io/v1alpha1", "kind": "WorkStatus",
            "metadata": {"name": "appsv1-deployment-shop-web"},
            "spec": {"sourceRef": {"group": "apps", "version": "v1", "resource": "deployments", "kind": "Deployment",
                                   "namespace": "shop", "name": "web"}},
            "statusDetails": {"lastGeneration": 2, "lastGenerationIsApplied": true,
                              "lastCurrencyUpdateTime": "2026-11-24T12:00:00Z"},
        }))
        .unwrap();
        Evidence {
            identity: identity(),
            observed: Some(Observed {
                object: WorkloadObject {
                    identity: identity(),
                    labels: BTreeMap::from([("app".into(), "web".into())]),
                    ..Default::default()
                },
                generation: Some(2),
                namespace_labels: Some(BTreeMap::new()),
                status: Some(json!({"replicas": 2, "conditions": [], "readyReplicas": 2})),
                traceparent: None,
                whole: json!({"apiVersion": "apps/v1", "kind": "Deployment",
                              "metadata": {"name": "web", "namespace": "shop"}, "spec": {"replicas": 2}}),
            }),
            policies: vec![
                policy("web-policy", json!({"app": "web"}), json!({"location-group": "edge"})),
                policy("db-policy", json!({"app": "db"}), json!({"location-group": "edge"})),
            ],
            bindings: BTreeMap::from([("web-policy".into(), binding)]),
            wecs: wecs.to_vec(),
            delivered: BTreeMap::from([
                ("cluster1".into(), delivered("cluster1")),
                ("cluster2".into(), delivered("cluster2")),
            ]),
            work_statuses: BTreeMap::from([("cluster1".into(), status.clone()), ("cluster2".into(), status)]),
            health_rules: Vec::new(),
        }
    }

    #[test]
    fn where_versions_are_told_by_content_a_wec_behind_is_the_broken_link() {
        let mut evidence = healthy();
        let whole = evidence.observed.as_ref().unwrap().whole.clone();
        let current = content_digest(whole.as_object().unwrap());
        for (wec, digest) in [("cluster1", current.as_str()), ("cluster2", "an-earlier-one")] {
            let status = evidence.work_statuses.get_mut(wec).unwrap();
            status
                .annotations_mut()
                .insert(WDS_CONTENT_ANNOTATION.into(), digest.into());
            status.spec.status_details.as_mut().unwrap().last_generation = 0;
        }
        let found = explain(&evidence, None);
        let versions: Vec<_> = found
            .wecs
            .iter()
            .map(|w| (w.reported_generation, w.content_current))
            .collect();
        assert_eq!(
            versions,
            [(None, Some(true)), (None, Some(false))],
            "no generation 0 of 2"
        );
        let broken = found.broken.unwrap();
        assert_eq!(
            (broken.link, broken.problem.as_str()),
            ("status", "cluster2 reports an earlier content of the object")
        );
    }

    #[test]
    fn a_health_rule_for_the_kind_judges_it_as_the_hub_would() {
        let mut evidence = healthy();
        evidence.work_statuses.get_mut("cluster2").unwrap().status =
            Some(serde_json::from_value(json!({"readyReplicas": 2})).unwrap());
        let rule = |name: &str, checks: serde_json::Value| -> HealthRule {
            serde_json::from_value(json!({
                "apiVersion": "control.kubestellar.io/v1alpha1", "kind": "HealthRule", "metadata": {"name": name},
                "spec": {"group": "apps", "kind": "Deployment", "checks": checks}}))
            .unwrap()
        };
        evidence.health_rules = vec![
            rule(
                "web-health",
                json!([{"verdict": "Degraded", "when": "!has(returned.status.readyReplicas) && obj.spec.replicas > 0",
                                       "reason": "'no replica ready'"}]),
            ),
            rule("z-unused", json!([{"verdict": "Healthy", "when": "true"}])),
        ];
        let found = explain(&evidence, None);
        assert_eq!(found.health_rule.as_deref(), Some("web-health"));
        let verdicts: Vec<Option<Verdict>> = found
            .wecs
            .iter()
            .map(|w| w.health.as_ref().map(|h| h.verdict))
            .collect();
        assert_eq!(verdicts, [Some(Verdict::Degraded), Some(Verdict::Progressing)]);
        let broken = found.broken.unwrap();
        assert_eq!(
            (broken.link, broken.wec.as_deref(), broken.problem.as_str()),
            (
                "health",
                Some("cluster1"),
                "it is Degraded on cluster1: no replica ready"
            )
        );
    }

    #[test]
    fn an_object_not_healthy_on_a_wec_is_the_last_link_and_degraded_comes_first() {
        let mut evidence = healthy();
        let judged = |verdict: &str, reason: &str| {
            Some(Health {
                verdict: serde_json::from_value(json!(verdict)).unwrap(),
                reason: reason.into(),
            })
        };
        evidence.work_statuses.get_mut("cluster1").unwrap().spec.health = judged("Progressing", "running");
        evidence.work_statuses.get_mut("cluster2").unwrap().spec.health =
            judged("Degraded", "Progressing: ProgressDeadlineExceeded");
        let found = explain(&evidence, None);
        assert_eq!(found.wecs[1].health.as_ref().unwrap().verdict, Verdict::Degraded);
        let broken = found.broken.unwrap();
        assert_eq!((broken.link, broken.wec.as_deref()), ("health", Some("cluster2")));
        assert_eq!(
            broken.problem,
            "it is Degraded on cluster2: Progressing: ProgressDeadlineExceeded"
        );
        evidence.work_statuses.get_mut("cluster2").unwrap().spec.health = judged("Healthy", "");
        let broken = explain(&evidence, None).broken.unwrap();
        assert_eq!((broken.link, broken.wec.as_deref()), ("health", Some("cluster1")));
        evidence.work_statuses.get_mut("cluster1").unwrap().spec.health = judged("Healthy", "");
        assert_eq!(explain(&evidence, None).broken, None);
    }

    #[test]
    fn a_healthy_rollout_has_every_link() {
        let found = explain(&healthy(), None);
        assert_eq!(found.broken, None);
        assert_eq!(found.trace_id.as_deref(), Some("0af7651916cd43dd8448eb211c80319c"));
        assert_eq!(found.status_in_wds.as_deref(), Some("readyReplicas=2 replicas=2"));
        assert_eq!(found.policies[0].matching_clauses, [0]);
        assert_eq!(found.policies[0].wecs, ["cluster1", "cluster2"]);
        assert!(found.policies[0].in_binding);
        let miss = found.policies[1].nearest_miss.as_ref().unwrap();
        assert_eq!(miss.failed, ["objectSelectors"]);
        assert_eq!(found.wecs[1].applied.as_deref(), Some("True"));
        assert_eq!(found.wecs[1].reported_generation, Some(2));
        assert_eq!(explain(&healthy(), Some("cluster2")).wecs.len(), 1);
        let mut elsewhere = healthy();
        elsewhere.wecs.push(Wec {
            name: "cluster3".into(),
            labels: BTreeMap::from([("location-group".into(), "core".into())]),
        });
        let found = explain(&elsewhere, None);
        assert_eq!(found.broken, None, "a WEC no policy chooses breaks nothing");
        assert_eq!(
            found.wecs[2].not_chosen.as_deref(),
            Some("its labels {location-group=core} match no clusterSelector of web-policy")
        );
    }

    #[test]
    fn an_apply_error_on_a_wec_names_the_missing_namespace() {
        let mut evidence = healthy();
        let error = "namespaces \"shop\" not found";
        evidence.delivered.get_mut("cluster2").unwrap()[0].conditions = vec![condition("Applied", "False", error)];
        evidence.work_statuses.remove("cluster2");
        let broken = explain(&evidence, None).broken.unwrap();
        assert_eq!((broken.link, broken.wec.as_deref()), ("apply", Some("cluster2")));
        assert!(broken.problem.contains(error), "{broken:?}");
        assert!(broken.fix.contains("Namespace"), "{broken:?}");
    }

    #[test]
    fn a_cluster_selector_matching_nothing_is_the_broken_link() {
        let mut evidence = healthy();
        evidence.policies[0] = policy("web-policy", json!({"app": "web"}), json!({"location-group": "moon"}));
        let broken = explain(&evidence, None).broken.unwrap();
        assert_eq!(broken.link, "clusters");
        assert!(broken.problem.contains("web-policy"), "{broken:?}");
        assert!(broken.fix.contains("cluster1 {location-group=edge}"), "{broken:?}");
    }

    #[test]
    fn an_object_no_policy_selects_gets_the_nearest_miss() {
        let mut evidence = healthy();
        evidence.observed.as_mut().unwrap().object.labels.clear();
        let found = explain(&evidence, None);
        let broken = found.broken.unwrap();
        assert_eq!(broken.link, "selection");
        assert!(
            broken.fix.contains("spec.downsync[0] fails objectSelectors"),
            "{broken:?}"
        );
        assert!(found.wecs.iter().all(|w| w.chosen_by.is_empty()));
    }

    #[test]
    fn a_manifestwork_the_its_refused_is_named_at_the_delivery_link() {
        let mut evidence = healthy();
        evidence.delivered.remove("cluster1");
        let refused = "the ITS rejected ManifestWork cluster1/web-policy-wds1-0: metadata.labels: Invalid value";
        evidence.bindings.get_mut("web-policy").unwrap().status = Some(BindingStatus {
            errors: vec![refused.into()],
            ..Default::default()
        });
        let broken = explain(&evidence, None).broken.unwrap();
        assert_eq!((broken.link, broken.wec.as_deref()), ("delivery", Some("cluster1")));
        assert_eq!(broken.fix, format!("the hub's transport reports: {refused}"));
    }

    #[test]
    fn an_object_the_wds_makes_for_itself_is_sent_only_when_named() {
        let mut evidence = healthy();
        let observed = evidence.observed.as_mut().unwrap();
        observed.object.identity = ObjectIdentity {
            group: String::new(),
            version: "v1".into(),
            resource: "serviceaccounts".into(),
            namespace: "shop".into(),
            name: "default".into(),
            kind: "ServiceAccount".into(),
        };
        evidence.policies = vec![policy("shop", json!({}), json!({"location-group": "edge"}))];
        let broken = explain(&evidence, None).broken.unwrap();
        assert_eq!(broken.link, "selection");
        assert!(
            broken.fix.contains("only a clause whose objectNames names it"),
            "{broken:?}"
        );
    }

    #[test]
    fn the_first_missing_link_on_a_wec_is_named() {
        let mut evidence = healthy();
        evidence.work_statuses.remove("cluster1");
        assert_eq!(explain(&evidence, None).broken.unwrap().link, "status");
        evidence.delivered.remove("cluster1");
        assert_eq!(explain(&evidence, None).broken.unwrap().link, "delivery");
        evidence.bindings.clear();
        assert_eq!(explain(&evidence, None).broken.unwrap().link, "binding");
        evidence.observed = None;
        assert_eq!(explain(&evidence, None).broken.unwrap().link, "object");
    }
}
