//! The metrics every controller keeps, named alike: `kubestellar_<controller>_reconciles_total`,
//! `_errors_total`, `_writes_total` (plain or by label) and `_queue_depth`; and the same loops
//! under the names dashboards and alerts written for Kubernetes controllers query
//! ([`register_conventional`]): client-go's `workqueue_*{name}` and controller-runtime's
//! `controller_runtime_reconcile_*{controller}`.

use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Metric, Registry, Unit};

/// Clones share the values.
#[derive(Clone, Debug, Default)]
pub struct ControllerMetrics<W = Counter> {
    pub reconciles: Counter,
    /// Failed reconciles and writes.
    pub errors: Counter,
    /// Writes made (only when content changed): a counter, or a family of them by label.
    pub writes: W,
    /// Keys waiting to be reconciled, now or after a failure.
    pub queue_depth: Gauge,
    /// How long keys wait and take, and how reconciles end.
    pub queue: QueueMetrics,
}

/// A controller's queue and reconciles as client-go and controller-runtime measure them.
#[derive(Clone, Debug)]
pub struct QueueMetrics {
    /// Keys that entered the queue (one already waiting is not added again).
    adds: Counter,
    /// Keys queued again after a failure.
    retries: Counter,
    /// From entering the queue to being worked on.
    waiting: Histogram,
    /// From being worked on to done.
    working: Histogram,
    succeeded: Counter,
    failed: Counter,
}

impl Default for QueueMetrics {
    fn default() -> QueueMetrics {
        // client-go's buckets: 10 ns to 10 s, by tens.
        let buckets = || Histogram::new(exponential_buckets(1e-8, 10.0, 10));
        QueueMetrics {
            adds: Counter::default(),
            retries: Counter::default(),
            waiting: buckets(),
            working: buckets(),
            succeeded: Counter::default(),
            failed: Counter::default(),
        }
    }
}

impl QueueMetrics {
    /// A key entered the queue.
    pub fn added(&self) {
        self.adds.inc();
    }

    /// A failed key was queued again.
    pub fn retried(&self) {
        self.retries.inc();
    }

    /// A key is worked on after waiting `waited`.
    pub fn started(&self, waited: Duration) {
        self.waiting.observe(waited.as_secs_f64());
    }

    /// Keys added and retried so far.
    #[cfg(test)]
    pub(crate) fn adds(&self) -> u64 {
        self.adds.get()
    }

    #[cfg(test)]
    pub(crate) fn retries(&self) -> u64 {
        self.retries.get()
    }

    /// Reconciles that succeeded and failed so far.
    #[cfg(test)]
    pub(crate) fn reconciles(&self) -> (u64, u64) {
        (self.succeeded.get(), self.failed.get())
    }

    /// A key's reconcile took `took` and succeeded or not.
    pub fn finished(&self, took: Duration, succeeded: bool) {
        self.working.observe(took.as_secs_f64());
        if succeeded {
            self.succeeded.inc();
        } else {
            self.failed.inc();
        }
    }
}

/// A controller's name in its metrics (`kubestellar_<controller>_`), and what they count in its
/// own words (their help texts).
pub struct Help {
    pub controller: &'static str,
    pub reconciles: &'static str,
    pub errors: &'static str,
    pub writes: &'static str,
    pub queue_depth: &'static str,
}

impl<W: Metric + Clone> ControllerMetrics<W> {
    /// Registers them under `kubestellar_<controller>_`, and under the conventional names for
    /// the process's registry that [`register_conventional`] was given; returns that
    /// sub-registry for the controller's other metrics.
    pub fn register<'r>(&self, registry: &'r mut Registry, help: &Help) -> &'r mut Registry {
        conventional().add(
            help.controller,
            self.errors.clone(),
            self.queue_depth.clone(),
            self.queue.clone(),
        );
        let sub = registry.sub_registry_with_prefix(format!("kubestellar_{}", help.controller));
        sub.register("reconciles", help.reconciles, self.reconciles.clone());
        sub.register("errors", help.errors, self.errors.clone());
        sub.register("writes", help.writes, self.writes.clone());
        sub.register("queue_depth", help.queue_depth, self.queue_depth.clone());
        sub
    }
}

/// One controller as the conventional names show it.
#[derive(Debug)]
struct Loop {
    controller: &'static str,
    errors: Counter,
    depth: Gauge,
    queue: QueueMetrics,
}

/// Every controller of the process, encoded at each scrape under the conventional names. One
/// collector for all, so that each name is one family with a label per controller.
#[derive(Debug, Default)]
struct Conventional {
    loops: Mutex<Vec<Loop>>,
}

fn conventional() -> &'static Conventional {
    static CONVENTIONAL: OnceLock<Conventional> = OnceLock::new();
    CONVENTIONAL.get_or_init(Conventional::default)
}

impl Conventional {
    /// Adds a controller, replacing one of the same name.
    fn add(&self, controller: &'static str, errors: Counter, depth: Gauge, queue: QueueMetrics) {
        let mut loops = self.loops.lock().unwrap_or_else(PoisonError::into_inner);
        loops.retain(|l| l.controller != controller);
        loops.push(Loop {
            controller,
            errors,
            depth,
            queue,
        });
    }
}

/// Serves the process's controllers (those registered with [`ControllerMetrics::register`]) as
/// `workqueue_depth`, `workqueue_adds_total`, `workqueue_retries_total`,
/// `workqueue_queue_duration_seconds`, `workqueue_work_duration_seconds` (label `name`) and
/// `controller_runtime_reconcile_total` (labels `controller`, `result`),
/// `controller_runtime_reconcile_errors_total`, `controller_runtime_reconcile_time_seconds`
/// (label `controller`).
pub fn register_conventional(registry: &mut Registry) {
    registry.register_collector(Box::new(ConventionalCollector));
}

#[derive(Debug)]
struct ConventionalCollector;

/// One conventional family: its name, help and type, the label naming the controller, and the
/// metric of each controller it shows.
struct Named {
    name: &'static str,
    help: &'static str,
    unit: Option<Unit>,
    kind: MetricType,
    label: &'static str,
    each: fn(&Loop) -> &dyn EncodeMetric,
}

impl Collector for ConventionalCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let loops = conventional().loops.lock().unwrap_or_else(PoisonError::into_inner);
        let families = [
            Named {
                name: "workqueue_depth",
                help: "Current depth of the workqueue",
                unit: None,
                kind: MetricType::Gauge,
                label: "name",
                each: |l| &l.depth,
            },
            Named {
                name: "workqueue_adds",
                help: "Total number of adds handled by the workqueue",
                unit: None,
                kind: MetricType::Counter,
                label: "name",
                each: |l| &l.queue.adds,
            },
            Named {
                name: "workqueue_retries",
                help: "Total number of retries handled by the workqueue",
                unit: None,
                kind: MetricType::Counter,
                label: "name",
                each: |l| &l.queue.retries,
            },
            Named {
                name: "workqueue_queue_duration",
                help: "How long an item stays in the workqueue before being requested",
                unit: Some(Unit::Seconds),
                kind: MetricType::Histogram,
                label: "name",
                each: |l| &l.queue.waiting,
            },
            Named {
                name: "workqueue_work_duration",
                help: "How long processing an item from the workqueue takes",
                unit: Some(Unit::Seconds),
                kind: MetricType::Histogram,
                label: "name",
                each: |l| &l.queue.working,
            },
            Named {
                name: "controller_runtime_reconcile_errors",
                help: "Total number of reconciliation errors per controller",
                unit: None,
                kind: MetricType::Counter,
                label: "controller",
                each: |l| &l.errors,
            },
            Named {
                name: "controller_runtime_reconcile_time",
                help: "Length of time per reconciliation per controller",
                unit: Some(Unit::Seconds),
                kind: MetricType::Histogram,
                label: "controller",
                each: |l| &l.queue.working,
            },
        ];
        for named in families {
            let mut family = encoder.encode_descriptor(named.name, named.help, named.unit.as_ref(), named.kind)?;
            for l in loops.iter() {
                (named.each)(l).encode(family.encode_family(&[(named.label, l.controller)])?)?;
            }
        }
        let mut family = encoder.encode_descriptor(
            "controller_runtime_reconcile",
            "Total number of reconciliations per controller",
            None,
            MetricType::Counter,
        )?;
        for l in loops.iter() {
            for (result, count) in [("success", &l.queue.succeeded), ("error", &l.queue.failed)] {
                count.encode(family.encode_family(&[("controller", l.controller), ("result", result)])?)?;
            }
        }
        Ok(())
    }
}

/// Panics unless `registry` exports each of `lines` as a whole sample line: for tests of a
/// controller's metrics.
pub fn assert_exports(registry: &Registry, lines: &[&str]) {
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, registry).expect("metrics encode");
    for line in lines {
        assert!(text.lines().any(|l| l == *line), "{line} in {text}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_controller_names_its_metrics_alike() {
        let mut registry = Registry::default();
        let metrics = ControllerMetrics::<Counter>::default();
        let informers = Gauge::<i64>::default();
        let help = Help {
            controller: "agent",
            reconciles: "r",
            errors: "e",
            writes: "w",
            queue_depth: "q",
        };
        metrics
            .register(&mut registry, &help)
            .register("informers", "i", informers.clone());
        metrics.reconciles.inc();
        metrics.writes.inc_by(2);
        informers.set(3);
        assert_exports(
            &registry,
            &[
                "kubestellar_agent_reconciles_total 1",
                "kubestellar_agent_errors_total 0",
                "kubestellar_agent_writes_total 2",
                "kubestellar_agent_queue_depth 0",
                "kubestellar_agent_informers 3",
            ],
        );
    }

    #[test]
    fn every_controller_is_served_under_the_conventional_names_too() {
        let help = |controller| Help {
            controller,
            reconciles: "r",
            errors: "e",
            writes: "w",
            queue_depth: "q",
        };
        let mut registry = Registry::default();
        register_conventional(&mut registry);
        let (first, second) = (
            ControllerMetrics::<Counter>::default(),
            ControllerMetrics::<Counter>::default(),
        );
        first.register(&mut registry, &help("conventional-one"));
        second.register(&mut registry, &help("conventional-two"));
        first.queue_depth.set(3);
        first.errors.inc();
        first.queue.added();
        first.queue.started(Duration::from_millis(20));
        first.queue.finished(Duration::from_millis(5), true);
        second.queue.finished(Duration::from_millis(5), false);
        second.queue.retried();
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert_eq!(
            text.matches("# TYPE workqueue_depth gauge").count(),
            1,
            "one family for all: {text}"
        );
        assert_exports(
            &registry,
            &[
                r#"workqueue_depth{name="conventional-one"} 3"#,
                r#"workqueue_depth{name="conventional-two"} 0"#,
                r#"workqueue_adds_total{name="conventional-one"} 1"#,
                r#"workqueue_retries_total{name="conventional-two"} 1"#,
                r#"workqueue_queue_duration_seconds_count{name="conventional-one"} 1"#,
                r#"workqueue_queue_duration_seconds_sum{name="conventional-one"} 0.02"#,
                r#"workqueue_work_duration_seconds_count{name="conventional-two"} 1"#,
                r#"controller_runtime_reconcile_total{controller="conventional-one",result="success"} 1"#,
                r#"controller_runtime_reconcile_total{controller="conventional-two",result="error"} 1"#,
                r#"controller_runtime_reconcile_errors_total{controller="conventional-one"} 1"#,
                r#"controller_runtime_reconcile_time_seconds_count{controller="conventional-one"} 1"#,
                r#"kubestellar_conventional-one_queue_depth 3"#,
            ],
        );
    }
}
