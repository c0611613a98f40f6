//! The agent's stages of a rollout's trace (see `ks_shared::rollout`). When a delivered object
//! carries a trace context it has not followed yet (a new rollout), the agent records the
//! `delivery` span, reconstructed from the time the hub sent the context to the time the
//! object is seen on the WEC, and later the `activation` span, from then until the object's
//! status first shows the generation applied. Each status report is a child of the delivery.
//! Only rollouts of followed objects are kept (one entry each).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, PoisonError};
use std::time::SystemTime;

use ks_shared::names::TRACEPARENT_ANNOTATION;
use ks_shared::rollout::{self, Context, KeyValue, stage};
use ks_shared::telemetry::extract_context;

use crate::objects::ObjectKey;

/// One object's current rollout.
struct Rollout {
    /// The traceparent the WEC object carries: a different one is a new rollout.
    traceparent: String,
    delivery: Context,
    seen: SystemTime,
    activated: bool,
}

/// The rollouts of the followed objects.
#[derive(Default)]
pub struct Rollouts(Mutex<HashMap<ObjectKey, Rollout>>);

impl Rollouts {
    /// The context a status report of `key` continues: its rollout's delivery span (recording
    /// the delivery, and the activation once `applied`, as they happen); the object's own
    /// context when it carries no trace.
    pub fn follow(
        &self,
        key: &ObjectKey,
        annotations: &BTreeMap<String, String>,
        applied: bool,
        attributes: &[KeyValue],
        labels: &rollout::Labels,
    ) -> Context {
        let carried = extract_context(annotations);
        let Some(traceparent) = annotations
            .get(TRACEPARENT_ANNOTATION)
            .filter(|_| rollout::is_traced(&carried))
        else {
            return carried;
        };
        let now = SystemTime::now();
        let mut rollouts = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let current = rollouts.entry(key.clone()).or_insert_with(|| Rollout {
            traceparent: String::new(),
            delivery: Context::new(),
            seen: now,
            activated: false,
        });
        if current.traceparent != *traceparent {
            let sent = rollout::sent_at(&carried).unwrap_or(now).min(now);
            if let Some(started) = rollout::started_at(&carried) {
                rollout::latencies()
                    .downsync
                    .get_or_create(labels)
                    .observe(rollout::seconds(started, now));
            }
            *current = Rollout {
                traceparent: traceparent.clone(),
                delivery: rollout::record(stage::DELIVERY, &carried, sent, now, attributes.to_vec(), labels),
                seen: now,
                activated: false,
            };
        }
        if applied && !current.activated {
            current.activated = true;
            rollout::record(
                stage::ACTIVATION,
                &current.delivery,
                current.seen,
                now,
                attributes.to_vec(),
                labels,
            );
        }
        current.delivery.clone()
    }

    /// Forgets an object that is no longer followed.
    pub fn forget(&self, key: &ObjectKey) {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).remove(key);
    }
}
