//! The metrics every controller keeps, named alike: `kubestellar_<controller>_reconciles_total`,
//! `_errors_total`, `_writes_total` (plain or by label) and `_queue_depth`.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Metric, Registry};

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
    /// Registers them under `kubestellar_<controller>_`; returns that sub-registry for the
    /// controller's other metrics.
    pub fn register<'r>(&self, registry: &'r mut Registry, help: &Help) -> &'r mut Registry {
        let sub = registry.sub_registry_with_prefix(format!("kubestellar_{}", help.controller));
        sub.register("reconciles", help.reconciles, self.reconciles.clone());
        sub.register("errors", help.errors, self.errors.clone());
        sub.register("writes", help.writes, self.writes.clone());
        sub.register("queue_depth", help.queue_depth, self.queue_depth.clone());
        sub
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
}
