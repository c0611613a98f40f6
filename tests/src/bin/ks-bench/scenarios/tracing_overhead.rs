//! `tracing-overhead`: delivery and singleton status latency with our hub's tracing off and on,
//! alternating.

use std::time::Duration;

use ks_tests::stack::{HubOptions, Stack, Tracing};

use super::{delivery, status};
use ks_tests::measure::summary;

/// Delivery and status latency with our hub's tracing off, then on, `rounds` times; the stack's
/// hub is restored afterwards.
pub async fn run(stack: &Stack, rounds: usize, objects: usize, changes: usize) -> anyhow::Result<()> {
    let mut measured: Vec<(Tracing, Vec<Duration>, Vec<Duration>)> =
        vec![(Tracing::Off, vec![], vec![]), (Tracing::On, vec![], vec![])];
    for round in 0..rounds {
        for (tracing, delivered, returned) in measured.iter_mut() {
            println!("round {} with tracing {tracing:?}", round + 1);
            let options = HubOptions {
                tracing: *tracing,
                ..HubOptions::STACK
            };
            stack.restart_hub("wds1", options).await?;
            delivered.extend(delivery::delivery(stack, objects).await?.total);
            returned.extend(status::singleton(stack, changes).await?.latencies);
        }
    }
    stack.restart_hub("wds1", HubOptions::STACK).await?;
    for (tracing, delivered, returned) in measured {
        println!(
            "tracing {tracing:?}: delivery (WDS create -> both WECs) {}",
            summary(delivered)
        );
        println!(
            "tracing {tracing:?}: status (WEC change -> WDS .status) {}",
            summary(returned)
        );
    }
    Ok(())
}
