//! ks-stack: start and stop the local KubeStellar stack (`make up`, `make down`).

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use ks_tests::stack::Stack;

#[derive(Parser)]
#[command(
    version,
    about = "Start and stop a local KubeStellar stack built from upstream components"
)]
struct Args {
    /// Repository root; state goes to <repo>/.stack.
    #[arg(long, default_value = ".", global = true)]
    repo: PathBuf,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Start every component that is not running yet, join the WECs, print how to use the stack.
    Up {
        /// Number of WECs (cluster1..clusterN).
        #[arg(long, env = "WECS", default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=20))]
        wecs: u16,
    },
    /// Stop every process `up` started.
    Down,
    /// Show which processes are running.
    Status,
    /// Play kubelet for our images in one space, the hosting cluster or a WEC (started by `up`;
    /// runs until stopped).
    Kubelet {
        /// The space's name (its context in the stack's kubeconfig).
        #[arg(long)]
        space: String,
    },
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let exe = std::env::current_exe()?;
    let our_binaries = exe.parent().expect("an executable lives in a directory");
    let stack = |wecs: u16| Stack::new(&args.repo, wecs.into(), our_binaries);
    match args.command {
        Command::Up { wecs } => {
            let stack = stack(wecs)?;
            stack.up().await?;
            println!(
                "\nThe stack is up. Use it with:\n  source .stack/env\n  kubectl --context its1 get managedclusters\n  kubectl --context cluster1 get nodes\nContexts: {}\nTraces: Jaeger's query API, http://127.0.0.1:16686/api/traces?service=ks-hub (this Jaeger is built without its UI; `make demo` draws a trace in the terminal)\nLogs: .stack/logs/   Stop: make down",
                stack
                    .spaces()
                    .iter()
                    .map(|s| s.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        Command::Down => {
            stack(0)?.down()?;
            println!("stack stopped");
        }
        Command::Status => {
            for line in stack(0)?.status() {
                println!("{line}");
            }
        }
        Command::Kubelet { space } => {
            let stack = stack(0)?;
            ks_tests::stack::kubelet::run(&stack, &space, &stack.our_binaries).await?;
        }
    }
    Ok(())
}
