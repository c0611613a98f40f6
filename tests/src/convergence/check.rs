//! Comparing what the stack shows ([`Observed`]) with what the oracle expects ([`Expected`]),
//! and what must carry over from one converged state to the next ([`History`]): the UIDs of WEC
//! objects that stay selected, and the content of create-only copies.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::names::{Key, Kind};
use super::observe::Observed;
use super::oracle::{Content, Expected, Projection, Side, StatusReturn};

/// One way the stack differs from the oracle: `what` names the kind of difference and `about`
/// the kind of object (a failure shrinks to operations showing the same), `detail` says where
/// and how.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Difference {
    pub what: &'static str,
    pub about: Option<Kind>,
    pub detail: String,
}

impl std::fmt::Display for Difference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "[{}] {}", self.what, self.detail)
    }
}

fn difference(what: &'static str, about: Option<Kind>, detail: String) -> Difference {
    Difference { what, about, detail }
}

type OnWecKey = (String, Key);

/// What the previous converged state fixes for the next.
#[derive(Clone, Debug, Default)]
pub struct History {
    /// The UID of each WEC object at the last convergence.
    uids: BTreeMap<OnWecKey, String>,
    /// The content of each create-only copy at the last convergence, while it stays so.
    pinned: BTreeMap<OnWecKey, Projection>,
    /// The policies that have sent the object to the WEC throughout since then.
    carried: BTreeMap<OnWecKey, BTreeSet<String>>,
    /// The content the copy had then, and every content it was to have since (status labels
    /// aside; failed renderings left out).
    seen: BTreeMap<OnWecKey, Vec<Projection>>,
    incarnations: BTreeMap<Key, u64>,
    /// The copies (by UID) that were create-only at some convergence, or new at one where some
    /// policy sent them createOnly, so perhaps created by OCM's createOnly create: OCM goes on
    /// writing them in place (its `Update`), which keeps the labels and annotations the WDS
    /// then removes (see `leniently`).
    created_create_only: BTreeMap<OnWecKey, String>,
    /// WDS objects deleted and created again since then.
    reincarnated: BTreeSet<Key>,
}

fn uid(object: &Value) -> &str {
    object["metadata"]["uid"].as_str().unwrap_or_default()
}

impl History {
    /// Follows what the WECs are to hold after each operation.
    pub fn note(&mut self, expected: &Expected) {
        let on_wec = |wec: &str, key: &Key| expected.wecs.get(wec).and_then(|objects| objects.get(key));
        for ((wec, key), carried) in &mut self.carried {
            let holders = on_wec(wec, key).map(|o| &o.holders);
            carried.retain(|h| holders.is_some_and(|now| now.contains(h)));
        }
        for (key, incarnation) in &expected.incarnations {
            if self.incarnations.get(key).is_some_and(|before| before != incarnation) {
                self.reincarnated.insert(key.clone());
            }
        }
        let reincarnated = &self.reincarnated;
        self.pinned.retain(|(wec, key), _| {
            on_wec(wec, key).is_some_and(|o| o.content == Content::CreateOnly) && !reincarnated.contains(key)
        });
        for (wec, objects) in &expected.wecs {
            for (key, object) in objects.iter().filter(|(_, o)| o.content != Content::LastGood) {
                let seen = self.seen.entry((wec.clone(), key.clone())).or_default();
                let projection = object.projection.without_status_labels();
                if !seen.contains(&projection) {
                    seen.push(projection);
                }
            }
        }
    }

    /// Records the converged state as what the next must carry over.
    pub fn converged(&mut self, expected: &Expected, observed: &Observed) {
        let mut created_create_only = std::mem::take(&mut self.created_create_only);
        let previous_uids = std::mem::take(&mut self.uids);
        *self = History::default();
        for (wec, objects) in &expected.wecs {
            for (key, object) in objects {
                let at = (wec.clone(), key.clone());
                let Some(found) = observed.wecs.get(wec).and_then(|o| o.get(key)) else {
                    continue;
                };
                let found_uid = uid(found).to_string();
                let new_copy = previous_uids.get(&at) != Some(&found_uid);
                match created_create_only.remove(&at) {
                    _ if object.content == Content::CreateOnly || (new_copy && object.create_only_sender) => {
                        self.created_create_only.insert(at.clone(), found_uid.clone());
                    }
                    Some(was) if was == found_uid => {
                        self.created_create_only.insert(at.clone(), was);
                    }
                    _ => {}
                }
                self.uids.insert(at.clone(), found_uid);
                let projection = Projection::of(key.kind, found, Side::Wec).without_status_labels();
                if object.content == Content::CreateOnly {
                    self.pinned.insert(at.clone(), projection.clone());
                }
                self.carried.insert(at.clone(), object.holders.clone());
                self.seen.insert(at, vec![projection]);
            }
        }
        self.incarnations = expected.incarnations.clone();
    }

    /// The contents a copy that is not kept current may have: a create-only one the one it had
    /// if it stayed create-only, else (and one whose template fails) any it had or was to
    /// have since the last convergence.
    fn allowed(&self, at: &OnWecKey) -> Vec<Projection> {
        match self.pinned.get(at) {
            Some(pinned) => vec![pinned.clone()],
            None => self.seen.get(at).cloned().unwrap_or_default(),
        }
    }

    /// Whether the copy was on its WEC at the last convergence and some policy has sent it
    /// there throughout since (and the WDS object is the same): it may not go.
    fn kept(&self, at: &OnWecKey) -> bool {
        self.uids.contains_key(at)
            && self.carried.get(at).is_some_and(|c| !c.is_empty())
            && !self.reincarnated.contains(&at.1)
    }
}

/// `found` without the labels and annotations that `expected` lacks: what OCM's `Update` keeps
/// on a copy it writes in place (one first created createOnly, or a custom resource; known
/// limits, docs/writes.md).
fn leniently(mut found: Projection, expected: &Projection) -> Projection {
    found.labels.retain(|k, _| expected.labels.contains_key(k));
    found.annotations.retain(|k, _| expected.annotations.contains_key(k));
    found
}

/// What differs in two projections, briefly.
fn describe(expected: &Projection, found: &Projection) -> String {
    let mut parts = Vec::new();
    for (what, e, f) in [
        ("labels", &expected.labels, &found.labels),
        ("annotations", &expected.annotations, &found.annotations),
    ] {
        let keys: BTreeSet<&String> = e.keys().chain(f.keys()).collect();
        for key in keys.into_iter().filter(|k| e.get(*k) != f.get(*k)) {
            parts.push(format!(
                "{what}[{key}] expected {:?}, found {:?}",
                e.get(key),
                f.get(key)
            ));
        }
    }
    for (field, e) in &expected.fields {
        let f = found.fields.get(field).unwrap_or(&Value::Null);
        if e != f {
            parts.push(format!("{field} expected {e}, found {f}"));
        }
    }
    parts.join("; ")
}

fn managers(object: &Value) -> String {
    let managers: Vec<&str> = object["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["manager"].as_str())
        .collect();
    format!("managers {managers:?}")
}

/// The WDS holds exactly the episode's objects, as the user left them.
fn wds(expected: &Expected, observed: &Observed, out: &mut Vec<Difference>) {
    for (key, object) in &observed.wds {
        if !expected.wds.contains_key(key) {
            out.push(difference(
                "wds-extra",
                Some(key.kind),
                format!("WDS: {key} exists, {}", managers(object)),
            ));
        }
    }
    for (key, projection) in &expected.wds {
        match observed.wds.get(key) {
            None => out.push(difference("wds-missing", Some(key.kind), format!("WDS: {key} missing"))),
            Some(found) => {
                let found = Projection::of(key.kind, found, Side::Wds);
                if found != *projection {
                    out.push(difference(
                        "wds-content",
                        Some(key.kind),
                        format!("WDS: {key}: {}", describe(projection, &found)),
                    ));
                }
            }
        }
    }
}

/// Each WEC holds exactly what the oracle sends it, with that content (metadata included: what
/// the WDS object loses goes from the copies), under the same UID for as long as one policy
/// kept sending it.
fn wecs(expected: &Expected, observed: &Observed, history: &History, out: &mut Vec<Difference>) {
    let none = BTreeMap::new();
    for (wec, objects) in &expected.wecs {
        let found_here = observed.wecs.get(wec).unwrap_or(&none);
        for (key, object) in found_here {
            if !objects.contains_key(key) {
                out.push(difference(
                    "wec-extra",
                    Some(key.kind),
                    format!("{wec}: {key} exists, {}", managers(object)),
                ));
            }
        }
        for (key, object) in objects {
            let at = (wec.clone(), key.clone());
            let Some(found) = found_here.get(key) else {
                // One whose template fails is there only if it was before.
                if object.content != Content::LastGood || history.kept(&at) {
                    let detail = format!("{wec}: {key} missing");
                    out.push(difference("wec-missing", Some(key.kind), detail));
                }
                continue;
            };
            let projection = Projection::of(key.kind, found, Side::Wec);
            // Perhaps created createOnly: so at an earlier convergence, or new now while some
            // policy sends it createOnly.
            let new_copy = history.uids.get(&at).is_none_or(|u| u != uid(found));
            let created_create_only = history.created_create_only.get(&at).is_some_and(|u| u == uid(found))
                || (new_copy && object.create_only_sender);
            let as_compared = |found: &Projection, expected: &Projection| {
                if created_create_only || key.kind == Kind::Widget {
                    leniently(found.clone(), expected)
                } else {
                    found.clone()
                }
            };
            if object.content != Content::Current {
                let allowed = history.allowed(&at);
                let found = projection.without_status_labels();
                if !allowed.iter().any(|a| as_compared(&found, a) == *a) {
                    let closest = allowed.last().unwrap_or(&object.projection);
                    let detail = format!("{wec}: {key} ({:?}): {}", object.content, describe(closest, &found));
                    out.push(difference("wec-content", Some(key.kind), detail));
                }
            } else if as_compared(&projection, &object.projection) != object.projection {
                let detail = format!("{wec}: {key}: {}", describe(&object.projection, &projection));
                out.push(difference("wec-content", Some(key.kind), detail));
            }
            if let Some(before) = history.uids.get(&at).filter(|_| history.kept(&at))
                && before != uid(found)
            {
                let detail = format!(
                    "{wec}: {key} recreated while sent throughout: UID {before} -> {}",
                    uid(found)
                );
                out.push(difference("wec-recreated", Some(key.kind), detail));
            }
        }
    }
}

/// One WorkStatus for each WEC object KubeStellar sent, none for anything else.
fn work_statuses(expected: &Expected, observed: &Observed, widgets: &str, out: &mut Vec<Difference>) {
    for (wec, objects) in &expected.wecs {
        let mut counts: BTreeMap<(String, String, String, String), Vec<String>> = BTreeMap::new();
        for reported in observed.work_statuses.get(wec).into_iter().flatten() {
            counts
                .entry(reported.object.clone())
                .or_default()
                .push(reported.name.clone());
        }
        let on_wec = observed.wecs.get(wec);
        for (key, object) in objects.iter().filter(|(_, o)| o.reported) {
            // One whose template fails may not be there, nor then reported.
            let there = on_wec.is_some_and(|o| o.contains_key(key));
            if object.content == Content::LastGood && !there {
                continue;
            }
            let id = (
                key.kind.group(widgets).to_string(),
                key.kind.resource().to_string(),
                key.namespace.clone(),
                key.name.clone(),
            );
            let names = counts.remove(&id).unwrap_or_default();
            if names.len() != 1 {
                let detail = format!("{wec}: {} WorkStatuses for {key}: {names:?}", names.len());
                out.push(difference("work-status", Some(key.kind), detail));
            }
        }
        for ((group, resource, namespace, name), names) in counts {
            let detail =
                format!("{wec}: WorkStatuses {names:?} for {group}/{resource} {namespace}/{name}, not on the WEC");
            out.push(difference("work-status", Kind::of_resource(&resource), detail));
        }
    }
}

/// `value` without nulls, empty objects and empty lists, at any depth: what an apiserver drops
/// or keeps of them depends on the type's Go struct, not on what the status says.
fn without_empties(value: &Value) -> Option<Value> {
    match value {
        Value::Null => None,
        Value::Object(map) => {
            let map: serde_json::Map<String, Value> = map
                .iter()
                .filter_map(|(k, v)| without_empties(v).map(|v| (k.clone(), v)))
                .collect();
            (!map.is_empty()).then_some(Value::Object(map))
        }
        Value::Array(items) => {
            let items: Vec<Value> = items.iter().filter_map(without_empties).collect();
            (!items.is_empty()).then_some(Value::Array(items))
        }
        other => Some(other.clone()),
    }
}

fn status_of(object: Option<&Value>) -> Value {
    object
        .and_then(|o| without_empties(&o["status"]))
        .unwrap_or_else(|| Value::Object(Default::default()))
}

/// Whether a Job's status says it started: the apiserver then refuses to take that back (an
/// unsuspended Job's `startTime`, a terminal condition, a counter going down), so a status
/// returned once stays when its return is withdrawn.
fn started(status: &Value) -> bool {
    status.get("startTime").is_some()
}

/// Whether a Job's status says it finished (a terminal condition): the apiserver then keeps its
/// completion for good.
fn finished(status: &Value) -> bool {
    status["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| ["Complete", "Failed"].contains(&c["type"].as_str().unwrap_or_default()) && c["status"] == "True")
}

/// The counts a Deployment's combined status totals over its WECs (hub/src/status/AGGREGATION.md).
const SUMMED: [&str; 4] = ["replicas", "updatedReplicas", "readyReplicas", "availableReplicas"];

/// Each WDS object's status: a copy of its one WEC's, the total of several, or empty.
fn statuses(expected: &Expected, observed: &Observed, out: &mut Vec<Difference>) {
    let on = |wec: &str, key: &Key| observed.wecs.get(wec).and_then(|o| o.get(key));
    for (key, rule) in &expected.statuses {
        let Some(object) = observed.wds.get(key) else { continue };
        let status = status_of(Some(object));
        if key.kind == Kind::Job && finished(&status) {
            // Another run's (a copy made again, or another WEC's) would have to change its
            // completion time, which the apiserver refuses.
            continue;
        }
        let wrong = match rule {
            StatusReturn::Clear => {
                status.as_object().is_none_or(|s| !s.is_empty()) && !(key.kind == Kind::Job && started(&status))
            }
            StatusReturn::Copy(wec) => status != status_of(on(wec, key)),
            StatusReturn::Combine(wecs) => SUMMED.iter().any(|field| {
                let total: i64 = wecs
                    .iter()
                    .map(|w| status_of(on(w, key))[field].as_i64().unwrap_or(0))
                    .sum();
                status[field].as_i64().unwrap_or(0) != total
            }),
        };
        if wrong {
            let from: Vec<String> = match rule {
                StatusReturn::Clear => Vec::new(),
                StatusReturn::Copy(wec) => vec![format!("{wec}: {}", status_of(on(wec, key)))],
                StatusReturn::Combine(wecs) => wecs.iter().map(|w| format!("{w}: {}", status_of(on(w, key)))).collect(),
            };
            let detail = format!("WDS: {key}: status {status}, expected {rule:?} of {from:?}");
            out.push(difference("status", Some(key.kind), detail));
        }
    }
}

/// Foreign ManifestWorks stay as their admin wrote them (the objects they hold are checked on
/// the WECs with the rest).
fn foreign_works(expected: &Expected, observed: &Observed, out: &mut Vec<Difference>) {
    for ((mailbox, name), labels) in &expected.foreign_works {
        let Some(work) = observed.foreign_works.get(&(mailbox.clone(), name.clone())) else {
            out.push(difference(
                "foreign",
                None,
                format!("ManifestWork {mailbox}/{name} (foreign) gone"),
            ));
            continue;
        };
        let found = Projection::of(Kind::Namespace, work, Side::Wds).labels;
        let generation = work["metadata"]["generation"].as_i64();
        if found != *labels || generation != Some(1) {
            let detail = format!(
                "ManifestWork {mailbox}/{name} (foreign) changed: generation {generation:?}, labels {found:?}, {}",
                managers(work)
            );
            out.push(difference("foreign", None, detail));
        }
    }
}

/// Every way `observed` differs from `expected`, given what `history` carries over.
pub fn differences(expected: &Expected, observed: &Observed, history: &History, widgets: &str) -> Vec<Difference> {
    let mut out = Vec::new();
    wds(expected, observed, &mut out);
    wecs(expected, observed, history, &mut out);
    work_statuses(expected, observed, widgets, &mut out);
    statuses(expected, observed, &mut out);
    foreign_works(expected, observed, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::convergence::oracle::OnWec;

    fn key() -> Key {
        Key {
            kind: Kind::ConfigMap,
            namespace: "n".into(),
            name: "o".into(),
        }
    }

    fn config_map(uid: &str, data: &str) -> Value {
        json!({"metadata": {"uid": uid, "labels": {"a": "b"}}, "data": {"k": data}})
    }

    /// What the oracle expects: the ConfigMap on `c1` with `data`, sent by `policy`.
    fn expecting(data: Option<&str>, content: Content, policy: &str) -> Expected {
        let mut expected = Expected::default();
        let mut on_c1 = BTreeMap::new();
        if let Some(data) = data {
            let on_wec = OnWec {
                projection: Projection::of(Kind::ConfigMap, &config_map("", data), Side::Wec),
                content,
                reported: false,
                holders: BTreeSet::from([policy.to_string()]),
                create_only_sender: false,
            };
            on_c1.insert(key(), on_wec);
        }
        expected.wecs.insert("c1".into(), on_c1);
        expected
    }

    fn observing(uid: &str, data: &str) -> Observed {
        let mut observed = Observed::default();
        observed
            .wecs
            .insert("c1".into(), BTreeMap::from([(key(), config_map(uid, data))]));
        observed
    }

    fn found(expected: &Expected, observed: &Observed, history: &History) -> Vec<&'static str> {
        differences(expected, observed, history, "")
            .iter()
            .map(|d| d.what)
            .collect()
    }

    #[test]
    fn a_new_uid_is_a_recreation_only_while_one_policy_sent_the_object_throughout() {
        let sent = expecting(Some("x"), Content::Current, "p");
        let mut history = History::default();
        history.converged(&sent, &observing("1", "x"));
        history.note(&sent);
        assert_eq!(found(&sent, &observing("2", "x"), &history), ["wec-recreated"]);
        // Handed from one policy to another: OCM may delete and create it.
        let mut handed = history.clone();
        handed.note(&expecting(Some("x"), Content::Current, "q"));
        assert!(found(&sent, &observing("2", "x"), &handed).is_empty());
        // Gone a moment.
        let mut gap = history.clone();
        gap.note(&expecting(None, Content::Current, "p"));
        gap.note(&sent);
        assert!(found(&sent, &observing("2", "x"), &gap).is_empty());
    }

    #[test]
    fn a_create_only_copy_keeps_its_content_and_a_failed_template_the_last_good_one() {
        let mut history = History::default();
        let first = expecting(Some("x"), Content::CreateOnly, "p");
        history.converged(&first, &observing("1", "x"));
        let changed = expecting(Some("y"), Content::CreateOnly, "p");
        history.note(&changed);
        assert!(found(&changed, &observing("1", "x"), &history).is_empty());
        assert_eq!(found(&changed, &observing("1", "y"), &history), ["wec-content"]);

        let failing = expecting(Some("{{.nosuch}}"), Content::LastGood, "p");
        let mut history = History::default();
        history.converged(&expecting(Some("x"), Content::Current, "p"), &observing("1", "x"));
        history.note(&failing);
        assert!(found(&failing, &observing("1", "x"), &history).is_empty());
        assert_eq!(
            found(&failing, &Observed::default(), &history),
            ["wec-missing"],
            "it was there"
        );
        // Never delivered good: it need not be there.
        let mut fresh = History::default();
        fresh.note(&failing);
        assert!(found(&failing, &Observed::default(), &fresh).is_empty());
    }

    #[test]
    fn a_started_jobs_status_may_stay_when_withdrawn_and_a_finished_ones_for_good() {
        let key = |kind| Key {
            kind,
            namespace: "n".into(),
            name: "o".into(),
        };
        let started = json!({"status": {"startTime": "2026-01-01T00:00:00Z", "succeeded": 1}});
        let complete = json!({"status": {"startTime": "2026-01-01T00:00:00Z",
                                         "conditions": [{"type": "Complete", "status": "True"}]}});
        let mut expected = Expected::default();
        let mut observed = Observed::default();
        for kind in [Kind::Job, Kind::Deployment] {
            expected.statuses.insert(key(kind), StatusReturn::Clear);
            observed.wds.insert(key(kind), started.clone());
        }
        let mut out = Vec::new();
        statuses(&expected, &observed, &mut out);
        assert_eq!(
            out.iter().map(|d| d.about).collect::<Vec<_>>(),
            [Some(Kind::Deployment)]
        );
        // Finished, it keeps its run's status though another WEC's copy is the one to return.
        let c2 = BTreeMap::from([(key(Kind::Job), json!({"status": {"succeeded": 2}}))]);
        observed.wecs.insert("c2".into(), c2);
        expected
            .statuses
            .insert(key(Kind::Job), StatusReturn::Copy("c2".into()));
        let jobs = |observed: &Observed| {
            let mut out = Vec::new();
            statuses(&expected, observed, &mut out);
            out.iter().filter(|d| d.about == Some(Kind::Job)).count()
        };
        assert_eq!(jobs(&observed), 1, "a running one follows");
        observed.wds.insert(key(Kind::Job), complete);
        assert_eq!(jobs(&observed), 0, "a finished one stays");
    }

    #[test]
    fn a_copy_created_create_only_may_keep_what_a_later_apply_does_not_name() {
        let labelled = |labels: Value| json!({"metadata": {"uid": "1", "labels": labels}, "data": {"k": "x"}});
        let on_c1 = |content, labels: Value| {
            let mut expected = Expected::default();
            let on_wec = OnWec {
                projection: Projection::of(Kind::ConfigMap, &labelled(labels), Side::Wec),
                content,
                reported: false,
                holders: BTreeSet::from(["p".to_string()]),
                create_only_sender: content == Content::CreateOnly,
            };
            expected.wecs.insert("c1".into(), BTreeMap::from([(key(), on_wec)]));
            expected
        };
        let mut observed = Observed::default();
        let copy = labelled(json!({"a": "b", "tier": "b"}));
        observed.wecs.insert("c1".into(), BTreeMap::from([(key(), copy)]));
        let current = on_c1(Content::Current, json!({"a": "b"}));
        let fresh = History::default();
        assert_eq!(found(&current, &observed, &fresh), ["wec-content"]);
        let mut history = History::default();
        history.converged(&on_c1(Content::CreateOnly, json!({"a": "b", "tier": "b"})), &observed);
        history.converged(&current, &observed);
        assert!(
            found(&current, &observed, &history).is_empty(),
            "kept across convergences"
        );
        // New at a convergence where one policy sent it createOnly and another did not.
        let mut history = History::default();
        let mut both = on_c1(Content::Current, json!({"a": "b", "tier": "b"}));
        both.wecs
            .get_mut("c1")
            .unwrap()
            .get_mut(&key())
            .unwrap()
            .create_only_sender = true;
        history.converged(&both, &observed);
        assert!(
            found(&current, &observed, &history).is_empty(),
            "perhaps created createOnly"
        );
    }

    #[test]
    fn statuses_compare_without_empty_parts() {
        let wec = json!({"status": {"succeeded": 1, "uncountedTerminatedPods": {}, "conditions": [], "x": null}});
        let wds = json!({"status": {"succeeded": 1}});
        assert_eq!(status_of(Some(&wec)), status_of(Some(&wds)));
        assert_eq!(status_of(Some(&json!({}))), json!({}));
        assert_eq!(status_of(None), json!({}));
    }
}
