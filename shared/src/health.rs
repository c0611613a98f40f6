//! The health verdict on one object as its WEC has it (whole: spec, generation and status):
//! built-in rules for the kinds users deploy most, and the common conventions of `.status`
//! for every other kind. Pure functions over the object's JSON.
//!
//! A reason names what the verdict rests on (a condition, a phase, what is awaited) but no
//! counts: it changes only when that ground does, so a rollout's progress is not a new verdict
//! to write at each replica.
//!
//! Every rule first asks whether the object's controller has acted on its current spec
//! (`status.observedGeneration` against `metadata.generation`); until then it is
//! `Progressing`. A rule that finds a field of an unexpected type says `Unknown`, naming the
//! field, rather than guess.

use serde_json::{Map, Value};

use crate::api::{Health, Verdict};

/// The longest reason kept: messages of conditions can be long, and a reason is shown in
/// tables and on the policy.
pub const MAX_REASON: usize = 512;

/// The verdict on an object of API group `group` and kind `kind`, at `generation`
/// (`metadata.generation`), whose other fields but its metadata are `data` (`spec`, `status`).
pub fn judge(group: &str, kind: &str, generation: Option<i64>, data: &Value) -> Health {
    let health = match judged(group, kind, generation, data) {
        Ok(health) => health,
        Err(unreadable) => unknown(unreadable),
    };
    Health {
        reason: bounded_reason(health.reason),
        ..health
    }
}

fn judged(group: &str, kind: &str, generation: Option<i64>, data: &Value) -> Result<Health, String> {
    // No status yet is an empty one: a kind with a rule waits for what its controller reports
    // (a Deployment just made is progressing), one without needs none (a ConfigMap is healthy).
    let empty = Map::new();
    let status = match data.get("status") {
        None | Some(Value::Null) => &empty,
        Some(Value::Object(status)) => status,
        Some(_) => return Err("its status is not an object".into()),
    };
    if let (Some(generation), Some(observed)) = (generation, number(status, "observedGeneration")?)
        && observed < generation
    {
        return Ok(progressing(format!(
            "its controller has seen generation {observed} of {generation}"
        )));
    }
    let spec = data.get("spec").and_then(Value::as_object);
    let conditions = Conditions::of(status, generation)?;
    match (group, kind) {
        ("apps", "Deployment") => deployment(spec, status, &conditions),
        ("apps", "StatefulSet") => stateful_set(spec, status),
        ("apps", "DaemonSet") => daemon_set(spec, status),
        ("apps", "ReplicaSet") => replica_set(spec, status, &conditions),
        ("batch", "Job") => job(spec, status, &conditions),
        ("", "Pod") => pod(status, &conditions),
        ("", "Service") => service(spec, status),
        ("", "PersistentVolumeClaim") => phase(status, &[("Bound", Verdict::Healthy), ("Lost", Verdict::Degraded)]),
        ("", "Namespace") => phase(status, &[("Active", Verdict::Healthy)]),
        ("apiextensions.k8s.io", "CustomResourceDefinition") => crd(&conditions),
        _ => Ok(conventions(&conditions)),
    }
}

fn healthy() -> Health {
    Health {
        verdict: Verdict::Healthy,
        reason: String::new(),
    }
}

fn progressing(reason: String) -> Health {
    Health {
        verdict: Verdict::Progressing,
        reason,
    }
}

fn degraded(reason: String) -> Health {
    Health {
        verdict: Verdict::Degraded,
        reason,
    }
}

fn unknown(reason: String) -> Health {
    Health {
        verdict: Verdict::Unknown,
        reason,
    }
}

/// `reason` cut to [`MAX_REASON`] bytes at a character boundary.
pub fn bounded_reason(mut reason: String) -> String {
    if reason.len() > MAX_REASON {
        let mut end = MAX_REASON - '…'.len_utf8();
        while !reason.is_char_boundary(end) {
            end -= 1;
        }
        reason.truncate(end);
        reason.push('…');
    }
    reason
}

/// An integer field of `map`; absent or null is `None`.
fn number(map: &Map<String, Value>, field: &str) -> Result<Option<i64>, String> {
    match map.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(value) => value
            .as_i64()
            .map(Some)
            .ok_or_else(|| format!("its {field} is not an integer")),
    }
}

/// A count of the status: absent means 0, as Kubernetes leaves zero counts out.
fn count(status: &Map<String, Value>, field: &str) -> Result<i64, String> {
    Ok(number(status, field)?.unwrap_or(0))
}

/// The desired replicas of a spec (Kubernetes defaults them to 1).
fn replicas(spec: Option<&Map<String, Value>>) -> Result<i64, String> {
    Ok(spec.map(|s| number(s, "replicas")).transpose()?.flatten().unwrap_or(1))
}

fn string<'a>(map: &'a Map<String, Value>, field: &str) -> &'a str {
    map.get(field).and_then(Value::as_str).unwrap_or_default()
}

/// One entry of `status.conditions`.
struct Condition<'a> {
    type_: &'a str,
    status: &'a str,
    reason: &'a str,
    message: &'a str,
    /// Set when the condition names an older generation than the object's.
    stale: bool,
}

impl Condition<'_> {
    /// `Type: Reason: message`, leaving out what is empty.
    fn said(&self) -> String {
        self.said_as(self.type_)
    }

    /// [`Condition::said`] with another type's name.
    fn said_as(&self, type_: &str) -> String {
        [type_, self.reason, self.message]
            .into_iter()
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>()
            .join(": ")
    }
}

struct Conditions<'a>(Vec<Condition<'a>>);

impl<'a> Conditions<'a> {
    fn of(status: &'a Map<String, Value>, generation: Option<i64>) -> Result<Conditions<'a>, String> {
        let list = match status.get("conditions") {
            None | Some(Value::Null) => return Ok(Conditions(Vec::new())),
            Some(Value::Array(list)) => list,
            Some(_) => return Err("its status.conditions is not a list".into()),
        };
        let mut conditions = Vec::with_capacity(list.len());
        for entry in list {
            let Some(entry) = entry.as_object() else {
                return Err("an entry of its status.conditions is not an object".into());
            };
            let observed = number(entry, "observedGeneration")?;
            conditions.push(Condition {
                type_: string(entry, "type"),
                status: string(entry, "status"),
                reason: string(entry, "reason"),
                message: string(entry, "message"),
                stale: matches!((observed, generation), (Some(o), Some(g)) if o < g),
            });
        }
        Ok(Conditions(conditions))
    }

    fn get(&self, type_: &str) -> Option<&Condition<'a>> {
        self.0.iter().find(|c| c.type_ == type_)
    }

    /// The condition `type_` when its status is `status`.
    fn is(&self, type_: &str, status: &str) -> Option<&Condition<'a>> {
        self.get(type_).filter(|c| c.status == status)
    }
}

fn deployment(
    spec: Option<&Map<String, Value>>,
    status: &Map<String, Value>,
    conditions: &Conditions,
) -> Result<Health, String> {
    if let Some(failure) = conditions.is("ReplicaFailure", "True") {
        return Ok(degraded(failure.said()));
    }
    if let Some(stuck) = conditions
        .is("Progressing", "False")
        .filter(|c| c.reason == "ProgressDeadlineExceeded")
    {
        return Ok(degraded(stuck.said()));
    }
    if spec.and_then(|s| s.get("paused")).and_then(Value::as_bool) == Some(true) {
        return Ok(progressing("its rollout is paused".into()));
    }
    let desired = replicas(spec)?;
    let updated = count(status, "updatedReplicas")?;
    let available = count(status, "availableReplicas")?;
    let total = count(status, "replicas")?;
    Ok(if updated < desired {
        progressing("waiting for its replicas to be updated".into())
    } else if total > updated {
        progressing("waiting for its old replicas to terminate".into())
    } else if available < updated {
        progressing("waiting for its updated replicas to become available".into())
    } else {
        healthy()
    })
}

fn stateful_set(spec: Option<&Map<String, Value>>, status: &Map<String, Value>) -> Result<Health, String> {
    let desired = replicas(spec)?;
    let ready = count(status, "readyReplicas")?;
    if ready < desired {
        return Ok(progressing("waiting for its replicas to be ready".into()));
    }
    let strategy = spec.and_then(|s| s.get("updateStrategy")).and_then(Value::as_object);
    if strategy.map(|s| string(s, "type")) == Some("OnDelete") {
        return Ok(healthy());
    }
    let partition = strategy
        .and_then(|s| s.get("rollingUpdate"))
        .and_then(Value::as_object)
        .map(|r| number(r, "partition"))
        .transpose()?
        .flatten()
        .unwrap_or(0);
    let updated = count(status, "updatedReplicas")?;
    let to_update = (desired - partition).max(0);
    if updated < to_update {
        return Ok(progressing("waiting for its replicas to be updated".into()));
    }
    let (current, update) = (string(status, "currentRevision"), string(status, "updateRevision"));
    if partition == 0 && current != update {
        return Ok(progressing(format!("revision {update} is rolling out")));
    }
    Ok(healthy())
}

fn daemon_set(spec: Option<&Map<String, Value>>, status: &Map<String, Value>) -> Result<Health, String> {
    let strategy = spec
        .and_then(|s| s.get("updateStrategy"))
        .and_then(Value::as_object)
        .map(|s| string(s, "type"));
    let desired = count(status, "desiredNumberScheduled")?;
    let updated = count(status, "updatedNumberScheduled")?;
    let available = count(status, "numberAvailable")?;
    Ok(if strategy != Some("OnDelete") && updated < desired {
        progressing("waiting for its pods to be updated".into())
    } else if available < desired {
        progressing("waiting for its pods to become available".into())
    } else {
        healthy()
    })
}

fn replica_set(
    spec: Option<&Map<String, Value>>,
    status: &Map<String, Value>,
    conditions: &Conditions,
) -> Result<Health, String> {
    if let Some(failure) = conditions.is("ReplicaFailure", "True") {
        return Ok(degraded(failure.said()));
    }
    let desired = replicas(spec)?;
    let available = count(status, "availableReplicas")?;
    Ok(if available < desired {
        progressing("waiting for its replicas to become available".into())
    } else {
        healthy()
    })
}

fn job(
    spec: Option<&Map<String, Value>>,
    status: &Map<String, Value>,
    conditions: &Conditions,
) -> Result<Health, String> {
    if let Some(failed) = conditions
        .is("Failed", "True")
        .or_else(|| conditions.is("FailureTarget", "True"))
    {
        // The Job controller says FailureTarget first, Failed once its pods are gone: one
        // failure, said the same way throughout.
        return Ok(degraded(failed.said_as("Failed")));
    }
    if conditions.is("Complete", "True").is_some() {
        return Ok(healthy());
    }
    if spec.and_then(|s| s.get("suspend")).and_then(Value::as_bool) == Some(true) {
        return Ok(progressing("it is suspended".into()));
    }
    // Its counts are read (a count of another type is no verdict), not said: a reason changes
    // only when the verdict's ground does, so a running Job's report is not written again for
    // each pod.
    for field in ["active", "succeeded", "failed"] {
        count(status, field)?;
    }
    Ok(progressing("running".into()))
}

/// Reasons a container waits for that waiting does not cure.
const STUCK_WAITING: [&str; 6] = [
    "CrashLoopBackOff",
    "ImagePullBackOff",
    "ErrImagePull",
    "InvalidImageName",
    "CreateContainerConfigError",
    "CreateContainerError",
];

fn pod(status: &Map<String, Value>, conditions: &Conditions) -> Result<Health, String> {
    let phase = string(status, "phase");
    match phase {
        "Succeeded" => return Ok(healthy()),
        "Failed" => {
            let why = [string(status, "reason"), string(status, "message")]
                .into_iter()
                .filter(|s| !s.is_empty())
                .collect::<Vec<_>>()
                .join(": ");
            return Ok(degraded(format!(
                "phase Failed{}",
                if why.is_empty() { why } else { format!(": {why}") }
            )));
        }
        _ => {}
    }
    for field in ["initContainerStatuses", "containerStatuses"] {
        let Some(list) = status.get(field) else { continue };
        let Some(list) = list.as_array() else {
            return Err(format!("its status.{field} is not a list"));
        };
        for container in list {
            let name = container["name"].as_str().unwrap_or_default();
            let waiting = &container["state"]["waiting"];
            let reason = waiting["reason"].as_str().unwrap_or_default();
            if STUCK_WAITING.contains(&reason) {
                // Not its message, which counts the back-off up.
                return Ok(degraded(format!("container {name}: {reason}")));
            }
            // Between a crash and its back-off: exited, to be started again (the Pod has not
            // failed).
            let terminated = &container["state"]["terminated"];
            if let Some(code) = terminated["exitCode"].as_i64().filter(|&code| code != 0) {
                let reason = terminated["reason"].as_str().unwrap_or("Error");
                return Ok(degraded(format!(
                    "container {name}: exited with code {code} ({reason})"
                )));
            }
        }
    }
    Ok(match conditions.get("Ready") {
        Some(ready) if ready.status == "True" => healthy(),
        _ if phase.is_empty() => progressing("not scheduled yet".into()),
        Some(ready) => progressing(format!("phase {phase}, {}", ready.said())),
        None => progressing(format!("phase {phase}, not ready")),
    })
}

fn service(spec: Option<&Map<String, Value>>, status: &Map<String, Value>) -> Result<Health, String> {
    if spec.map(|s| string(s, "type")) != Some("LoadBalancer") {
        return Ok(healthy());
    }
    let ingress = status
        .get("loadBalancer")
        .and_then(|l| l.get("ingress"))
        .and_then(Value::as_array);
    Ok(if ingress.is_some_and(|i| !i.is_empty()) {
        healthy()
    } else {
        progressing("waiting for its load balancer's address".into())
    })
}

/// By `status.phase`: the listed phases give their verdict, others are `Progressing`.
fn phase(status: &Map<String, Value>, verdicts: &[(&str, Verdict)]) -> Result<Health, String> {
    let phase = string(status, "phase");
    Ok(match verdicts.iter().find(|(p, _)| *p == phase) {
        Some((_, Verdict::Healthy)) => healthy(),
        Some((_, verdict)) => Health {
            verdict: *verdict,
            reason: format!("phase {phase}"),
        },
        None if phase.is_empty() => progressing("no phase yet".into()),
        None => progressing(format!("phase {phase}")),
    })
}

fn crd(conditions: &Conditions) -> Result<Health, String> {
    if let Some(refused) = conditions.is("NamesAccepted", "False") {
        return Ok(degraded(refused.said()));
    }
    Ok(match conditions.get("Established") {
        Some(c) if c.status == "True" => healthy(),
        Some(c) => progressing(c.said()),
        None => progressing("not established yet".into()),
    })
}

/// Condition types whose `True` is the object's own verdict of success.
const SUCCESS: [&str; 3] = ["Ready", "Available", "Succeeded"];

/// The common conventions: `Stalled=True` is a failure; `Ready`, `Available` or `Succeeded`
/// (the first present) gives the verdict when it is about the current generation: `True`
/// healthy, `False` degraded (progressing while `Reconciling=True` says work goes on),
/// `Unknown` progressing; an object without any of them is healthy once applied.
fn conventions(conditions: &Conditions) -> Health {
    if let Some(stalled) = conditions.is("Stalled", "True") {
        return degraded(stalled.said());
    }
    let Some(verdict) = SUCCESS.iter().find_map(|t| conditions.get(t)) else {
        return healthy();
    };
    if verdict.stale {
        return progressing(format!("its {} condition is about an older generation", verdict.type_));
    }
    match verdict.status {
        "True" => healthy(),
        "False" if conditions.is("Reconciling", "True").is_none() => degraded(verdict.said()),
        _ => progressing(verdict.said()),
    }
}

#[cfg(test)]
mod tests;
