//! ks-bench: measurements on the running local stack (`make up` first), and the side-by-side
//! comparison with upstream KubeStellar (`compare`). Prints numbers; never asserts them.

mod compare;
mod fixtures;
mod scenarios;

use clap::{Parser, Subcommand};
use ks_tests::harness::repo_root;
use ks_tests::stack::Stack;

use scenarios::{agent, binding, delivery, status, tracing_overhead, write_cost};

#[derive(Parser)]
#[command(
    version,
    about = "Measurements on the running local stack (`make up` first)",
    long_about = "Measurements on the running local stack (`make up` first). `compare` runs parts \
                  (latency, bulk, objects, wecs, agent) against our hub and upstream KubeStellar v0.30.0's \
                  in turn (`make bench`, `make bench SCENARIO=<part>`); `report` writes docs/benchmarks.md \
                  again from the parts' results; the others measure one part of ours."
)]
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
    /// Time from creating a Deployment in the WDS to it being present on every WEC, one
    /// Deployment after another, and count ManifestWork writes.
    DeliveryLatency {
        #[arg(long, default_value_t = 50)]
        objects: usize,
    },
    /// With the stack's agent on cluster1: time WEC status change → WorkStatus update, count
    /// WorkStatus writes per change, then measure the agent's memory at many tracked objects.
    AgentLatency {
        /// How many status changes to time.
        #[arg(long, default_value_t = 50)]
        changes: usize,
        /// How many ConfigMaps to deliver for the memory measurement (in ManifestWorks of 100).
        #[arg(long, default_value_t = 1000)]
        objects: usize,
    },
    /// A Gauge bound to cluster1 with singleton status return: time WEC status change → WDS
    /// `.status` updated, and count writes to the WDS object per change.
    StatusLatency {
        /// How many status changes to time.
        #[arg(long, default_value_t = 50)]
        changes: usize,
    },
    /// With the stack's agent on cluster1: delete and recreate ManifestWorks of one Pod each, round
    /// after round, and print the agent's memory after each round.
    AgentChurn {
        #[arg(long, default_value_t = 5)]
        rounds: usize,
        #[arg(long, default_value_t = 20)]
        works: usize,
    },
    /// Delivery and singleton status latency with the hub's tracing off and on, alternating.
    TracingOverhead {
        /// Rounds per setting.
        #[arg(long, default_value_t = 2)]
        rounds: usize,
        #[arg(long, default_value_t = 30)]
        objects: usize,
        #[arg(long, default_value_t = 30)]
        changes: usize,
    },
    /// What each way of writing a ManifestWork (create, server-side apply, JSON patch, OCM's
    /// status merge patch) costs the ITS apiserver in CPU seconds, without and with OCM's
    /// per-manifest status in it.
    WriteCost {
        #[arg(long, default_value_t = 100)]
        works: usize,
        /// ConfigMaps per ManifestWork (of 300 bytes each).
        #[arg(long, default_value_t = 500)]
        manifests: usize,
    },
    /// Ours against upstream KubeStellar v0.30.0, alternating, in parts (`--scenario`); each
    /// part's results go to docs/bench/<part>.json, and docs/benchmarks.md with its plots is
    /// written again from every part's results present.
    Compare(Box<compare::Knobs>),
    /// Writes docs/benchmarks.md and its plots again from the parts' results (no stack needed).
    Report {
        /// Where the parts' results (<part>.json) are and the plots go (relative: from the
        /// repository's root).
        #[arg(long, default_value = "docs/bench")]
        out_dir: std::path::PathBuf,
        /// The report to write (relative: from the repository's root).
        #[arg(long, default_value = "docs/benchmarks.md")]
        markdown: std::path::PathBuf,
    },
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // Parsed first: `--help` and usage errors need no stack.
    let command = Args::parse().command;
    if let Command::Report { out_dir, markdown } = &command {
        let (out_dir, markdown) = (compare::in_repo(out_dir), compare::in_repo(markdown));
        compare::write_report(&out_dir, &markdown)?;
        println!("written: {}", markdown.display());
        return Ok(());
    }
    let exe = std::env::current_exe()?;
    let stack = Stack::new(&repo_root(), 2, exe.parent().expect("binary directory"))?;
    anyhow::ensure!(stack.is_running(), "the stack is not running: run `make up` first");
    match command {
        Command::BindingLatency { changes } => binding::latency(&stack, changes).await,
        Command::AgentLatency { changes, objects } => agent::latency(&stack, changes, objects).await,
        Command::DeliveryLatency { objects } => delivery::latency(&stack, objects).await,
        Command::AgentChurn { rounds, works } => agent::churn(&stack, rounds, works).await,
        Command::StatusLatency { changes } => status::latency(&stack, changes).await,
        Command::TracingOverhead {
            rounds,
            objects,
            changes,
        } => tracing_overhead::run(&stack, rounds, objects, changes).await,
        Command::WriteCost { works, manifests } => write_cost::run(&stack, works, manifests).await,
        Command::Compare(knobs) => compare::run(&stack, &knobs).await,
        Command::Report { .. } => unreachable!("handled above"),
    }
}
