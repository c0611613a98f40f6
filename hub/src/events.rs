//! Kubernetes Events (events.k8s.io) on the objects users look at, so that `kubectl describe`
//! and `kubectl get events` say what the hub did with them. One Event per change of what a
//! controller reports in a status (a condition's outcome, or an error's text), never one per
//! pass: a status that converges stops them. kube's recorder folds a repeat within minutes into
//! the first one's series. Publishing is best-effort: a failure is logged, not a reconcile's
//! failure. The binding controller's few (a policy's) are published as they come ([`Events`]);
//! the transport's and the status controller's, per object, through a paced queue ([`Paced`]).
//!
//! What these writes cannot do: the recorder creates each Event under a fresh name
//! (`<object>.<nanoseconds>`), and a repeat only merge-patches the Event it created itself, by
//! that name; a merge patch of an Event deleted meanwhile is refused (404), not a create. So it
//! never writes over another's Event, and never writes the object an Event is about.

use k8s_openapi::api::core::v1::ObjectReference;
use ks_shared::api::{Condition, condition_type};
use kube::Client;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use prometheus_client::metrics::counter::Counter;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// The most Events waiting in a [`Paced`] publisher.
pub const QUEUE: usize = 1024;
/// The most Events a [`Paced`] publisher publishes a second.
pub const PER_SECOND: u64 = 10;

/// Events published by a task of their own, so that a reconcile never waits on them, at most
/// [`PER_SECOND`] a second: at most [`QUEUE`] wait, and what comes beyond is counted and dropped
/// (a rollout of thousands of objects does not become thousands of writes at once into the WDS).
/// For Events per object; clones share the queue.
#[derive(Clone)]
pub struct Paced {
    queue: mpsc::Sender<(ObjectReference, Event)>,
    dropped: Counter,
}

impl Paced {
    /// Starts publishing, as `controller`, into the WDS of `client` until `stop`; `dropped`
    /// counts what did not fit the queue.
    pub fn start(client: Client, controller: &str, dropped: Counter, stop: &CancellationToken) -> Paced {
        let (queue, mut waiting) = mpsc::channel::<(ObjectReference, Event)>(QUEUE);
        let recorder = Recorder::new(client, Reporter::from(controller));
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut pace = tokio::time::interval(std::time::Duration::from_millis(1000 / PER_SECOND));
            pace.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                pace.tick().await;
                let (regarding, event) = tokio::select! {
                    _ = stop.cancelled() => return,
                    next = waiting.recv() => match next {
                        Some(next) => next,
                        None => return,
                    },
                };
                if let Err(err) = recorder.publish(&event, &regarding).await {
                    tracing::debug!(object = ?regarding.name, error = %err, "event not published");
                }
            }
        });
        Paced { queue, dropped }
    }

    /// Queues `event` about `regarding`, or counts it dropped.
    pub fn tell(&self, regarding: ObjectReference, event: Event) {
        if self.queue.try_send((regarding, event)).is_err() {
            self.dropped.inc();
        }
    }
}

/// A controller's Event publisher.
#[derive(Clone)]
pub struct Events {
    recorder: Recorder,
}

impl Events {
    /// Events reported by `controller` (a qualified name such as
    /// `kubestellar.io/binding-controller`), the instance being this host's name (the Pod's).
    pub fn new(client: Client, controller: &str) -> Events {
        Events {
            recorder: Recorder::new(client, Reporter::from(controller)),
        }
    }

    /// Publishes `events` about `regarding`.
    pub async fn publish(&self, regarding: &ObjectReference, events: Vec<Event>) {
        for event in events {
            if let Err(err) = self.recorder.publish(&event, regarding).await {
                tracing::warn!(
                    object = regarding.name.as_deref().unwrap_or_default(),
                    reason = event.reason,
                    error = %err,
                    "publishing an Event failed"
                );
            }
        }
    }
}

fn event(type_: EventType, reason: &str, action: &str, text: &str) -> Event {
    Event {
        type_,
        reason: reason.into(),
        note: Some(note(text)),
        action: action.into(),
        secondary: None,
    }
}

/// `text` as an Event's note, which the Events API takes up to 1 kB of: cut short (ending `…`)
/// on a character boundary.
pub fn note(text: &str) -> String {
    const MAX: usize = 1024;
    if text.len() <= MAX {
        return text.to_string();
    }
    let mut end = MAX - '…'.len_utf8();
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// Whether `after` says something new against `before`: another outcome (status or reason), or,
/// for a failing one, another message (a new error).
fn moved(before: Option<&Condition>, after: &Condition) -> bool {
    before.is_none_or(|b| {
        b.status != after.status || b.reason != after.reason || (after.status == "False" && b.message != after.message)
    })
}

/// The binding controller's Events on a BindingPolicy, from its `Synced` and `Ready` conditions
/// before and after a status write: the Binding not written (too large, refused), the policy in
/// error (an invalid selector, a singleton that cannot be), and their recoveries.
pub fn policy_resolution(before: &[Condition], after: &[Condition]) -> Vec<Event> {
    let find = |conditions: &[Condition], type_: &str| conditions.iter().find(|c| c.type_ == type_).cloned();
    let mut events = Vec::new();
    for (type_, failed, recovered) in [
        (condition_type::SYNCED, "BindingNotWritten", "BindingWritten"),
        (condition_type::READY, "PolicyError", "Resolved"),
    ] {
        let (was, now) = (find(before, type_), find(after, type_));
        let Some(now) = now.filter(|now| moved(was.as_ref(), now)) else {
            continue;
        };
        let recovering = match &was {
            Some(was) => was.status == "False",
            // A new policy is told when it resolves; a Binding written is no news by itself.
            None => type_ == condition_type::READY,
        };
        if now.status == "False" {
            events.push(event(EventType::Warning, failed, "Resolve", &now.message));
        } else if recovering {
            events.push(event(EventType::Normal, recovered, "Resolve", &now.message));
        }
    }
    events
}

/// The transport's Event on a WDS object that the WEC `wec` could not apply, saying why.
pub fn delivery_failed(wec: &str, why: &str) -> Event {
    event(
        EventType::Warning,
        "DeliveryFailed",
        "Deliver",
        &format!("not applied on {wec}: {why}"),
    )
}

/// The transport's Event on a BindingPolicy when its `Propagated` condition reaches an outcome:
/// every object applied and available everywhere, or no WEC chosen. Progress in between is
/// counted in the status, not told in Events.
pub fn propagation(before: Option<&Condition>, after: &Condition) -> Option<Event> {
    if before.is_some_and(|b| b.reason == after.reason) {
        return None;
    }
    match after.reason.as_str() {
        "Propagated" => Some(event(EventType::Normal, "Propagated", "Deliver", &after.message)),
        "NoWECs" => Some(event(EventType::Warning, "NoWECSelected", "Deliver", &after.message)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;

    fn condition(type_: &str, status: &str, reason: &str, message: &str) -> Condition {
        Condition {
            type_: type_.into(),
            status: status.into(),
            reason: reason.into(),
            message: message.into(),
            last_transition_time: Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
        }
    }

    fn told(events: &[Event]) -> Vec<(String, String)> {
        events
            .iter()
            .map(|e| (e.reason.clone(), e.note.clone().unwrap_or_default()))
            .collect()
    }

    fn synced(ok: bool, message: &str) -> Condition {
        let status = if ok { "True" } else { "False" };
        condition(condition_type::SYNCED, status, "R", message)
    }

    fn ready(ok: bool, message: &str) -> Condition {
        let status = if ok { "True" } else { "False" };
        condition(condition_type::READY, status, "R", message)
    }

    #[test]
    fn a_policy_is_told_of_its_errors_once_each_and_of_its_recovery() {
        let fine = [
            synced(true, "Binding is up to date"),
            ready(true, "selects 1 objects for 2 WECs"),
        ];
        assert_eq!(
            told(&policy_resolution(&[], &fine)),
            [("Resolved".into(), "selects 1 objects for 2 WECs".into())]
        );
        // More objects: the same outcome, nothing to tell.
        let more = [
            synced(true, "Binding is up to date"),
            ready(true, "selects 2 objects for 2 WECs"),
        ];
        assert!(policy_resolution(&fine, &more).is_empty());
        let broken = [synced(true, "Binding is up to date"), ready(false, "invalid selector")];
        assert_eq!(
            told(&policy_resolution(&fine, &broken)),
            [("PolicyError".into(), "invalid selector".into())]
        );
        assert!(
            policy_resolution(&broken, &broken).is_empty(),
            "the same error is told once"
        );
        let other = [synced(true, "Binding is up to date"), ready(false, "another error")];
        assert_eq!(told(&policy_resolution(&broken, &other))[0].0, "PolicyError");
        assert_eq!(told(&policy_resolution(&other, &fine))[0].0, "Resolved");
        let too_large = [
            synced(false, "the Binding is too large"),
            ready(false, "the Binding is too large"),
        ];
        let reasons: Vec<String> = told(&policy_resolution(&fine, &too_large))
            .into_iter()
            .map(|t| t.0)
            .collect();
        assert_eq!(reasons, ["BindingNotWritten", "PolicyError"]);
        let reasons: Vec<String> = told(&policy_resolution(&too_large, &fine))
            .into_iter()
            .map(|t| t.0)
            .collect();
        assert_eq!(reasons, ["BindingWritten", "Resolved"]);
    }

    #[test]
    fn propagation_is_told_at_its_outcomes_not_its_progress() {
        let propagating = |m: &str| condition(condition_type::PROPAGATED, "False", "Propagating", m);
        let done = condition(condition_type::PROPAGATED, "True", "Propagated", "all on 2 WECs");
        let none = condition(condition_type::PROPAGATED, "False", "NoWECs", "no WEC");
        assert!(propagation(None, &propagating("0/1")).is_none());
        assert!(propagation(Some(&propagating("0/1")), &propagating("1/2")).is_none());
        let told = propagation(Some(&propagating("1/2")), &done).unwrap();
        assert_eq!((told.reason.as_str(), told.type_), ("Propagated", EventType::Normal));
        assert!(propagation(Some(&done), &done).is_none());
        let told = propagation(Some(&done), &none).unwrap();
        assert_eq!(
            (told.reason.as_str(), told.type_),
            ("NoWECSelected", EventType::Warning)
        );
    }

    /// What the writes are: a create under a fresh name, then, for a repeat, a merge patch of
    /// that one Event by its name; a 404 to it is the end (no create), as the publish ends
    /// without asking again (the mock would wait for an answer).
    #[tokio::test]
    async fn an_event_is_created_once_and_a_repeat_only_patches_that_one() {
        let (client, mut server) = ks_tests::mock::client();
        let events = Events::new(client, "kubestellar.io/test");
        let policy = ObjectReference {
            api_version: Some("control.kubestellar.io/v1alpha1".into()),
            kind: Some("BindingPolicy".into()),
            name: Some("p".into()),
            uid: Some("uid-p".into()),
            ..Default::default()
        };
        let broken = [ready(false, "invalid selector")];
        let told = || policy_resolution(&[], &broken);
        let stored = serde_json::json!({"metadata": {"name": "p.1"}});
        let ((), created) = tokio::join!(events.publish(&policy, told()), server.answer(201, stored));
        assert_eq!(created.method, "POST");
        assert!(
            created
                .uri
                .starts_with("/apis/events.k8s.io/v1/namespaces/default/events?"),
            "{}",
            created.uri
        );
        let name = created.body["metadata"]["name"].as_str().unwrap().to_string();
        assert!(name.starts_with("p."), "{name}");
        assert_eq!(created.body["regarding"]["uid"], "uid-p");
        assert_eq!(created.body["reason"], "PolicyError");
        let gone = ks_tests::mock::failure(404);
        let ((), patched) = tokio::join!(events.publish(&policy, told()), server.answer(404, gone));
        assert_eq!(patched.method, "PATCH");
        assert!(
            patched
                .uri
                .starts_with(&format!("/apis/events.k8s.io/v1/namespaces/default/events/{name}?")),
            "{}",
            patched.uri
        );
        assert_eq!(patched.content_type, "application/merge-patch+json");
        assert_eq!(patched.body["series"]["count"], 2);
    }

    #[test]
    fn a_long_note_is_cut_to_a_kilobyte_on_a_character_boundary() {
        let long = "é".repeat(1000);
        let cut = note(&long);
        assert!(cut.len() <= 1024 && cut.ends_with('…'));
        assert_eq!(note("short"), "short");
    }
}
