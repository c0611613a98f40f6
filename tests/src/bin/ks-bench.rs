//! ks-bench: latency measurements on the running local stack (`make up` first). Prints numbers;
//! never asserts them.

use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use ks_shared::api::{Binding, BindingPolicy};
use ks_tests::harness::{repo_root, wait_until};
use ks_tests::stack::Stack;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::json;

#[derive(Parser)]
#[command(version, about = "Latency measurements on the running local stack")]
struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Time from a BindingPolicy change (apply returned) to its Binding showing the change.
    BindingLatency {
        /// How many policy changes to time.
        #[arg(long, default_value_t = 20)]
        changes: usize,
    },
}

const MANAGER: &str = "ks-bench";

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let Command::BindingLatency { changes } = Args::parse().command;
    let exe = std::env::current_exe()?;
    let stack = Stack::new(&repo_root(), 2, exe.parent().expect("binary directory"))?;
    anyhow::ensure!(stack.is_running(), "the stack is not running: run `make up` first");
    let wds = stack.client("wds1").await?;
    let ns = format!("bench-{}", std::process::id());
    let namespaces: Api<Namespace> = Api::all(wds.clone());
    let apply = PatchParams::apply(MANAGER).force();
    namespaces
        .patch(
            &ns,
            &apply,
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})),
        )
        .await?;
    let cms: Api<ConfigMap> = Api::namespaced(wds.clone(), &ns);
    for name in ["a", "b"] {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": "v"}});
        cms.patch(name, &apply, &Patch::Apply(cm)).await?;
    }
    let policies: Api<BindingPolicy> = Api::all(wds.clone());
    let bindings: Api<Binding> = Api::all(wds.clone());
    let policy = |object: &str| {
        json!({"apiVersion": "control.kubestellar.io/v1alpha1", "kind": "BindingPolicy", "metadata": {"name": ns},
               "spec": {"clusterSelectors": [{"matchLabels": {"location-group": "edge"}}],
                        "downsync": [{"namespaces": [ns], "resources": ["configmaps"], "objectNames": [object]}]}})
    };
    let mut latencies = Vec::new();
    let mut writes = Vec::new();
    for i in 0..=changes {
        let object = if i % 2 == 0 { "a" } else { "b" };
        let generation_before = bindings
            .get_opt(&ns)
            .await?
            .and_then(|b| b.metadata.generation)
            .unwrap_or(0);
        let started = Instant::now();
        policies.patch(&ns, &apply, &Patch::Apply(policy(object))).await?;
        let shows = |b: Option<&Binding>| {
            b.is_some_and(|b| b.spec.workload.namespace_scope.iter().any(|o| o.object.name == object))
        };
        let binding = wait_until(
            bindings.clone(),
            &ns,
            "showing the change",
            Duration::from_secs(30),
            shows,
        )
        .await?;
        // The first round creates the policy and is not a change.
        if i > 0 {
            latencies.push(started.elapsed());
            writes.push(binding.and_then(|b| b.metadata.generation).unwrap_or(0) - generation_before);
        }
    }
    latencies.sort();
    let at = |q: f64| latencies[((latencies.len() as f64 - 1.0) * q).round() as usize];
    println!(
        "binding latency over {} policy changes: p50 {:?}  p90 {:?}  max {:?}  (Binding writes per change: {:?})",
        latencies.len(),
        at(0.5),
        at(0.9),
        latencies.last().copied().unwrap_or_default(),
        writes
    );
    policies.delete(&ns, &DeleteParams::default()).await?;
    namespaces.delete(&ns, &DeleteParams::default()).await?;
    Ok(())
}
