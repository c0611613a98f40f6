//! `kubectl kubestellar`: did a workload object reach every WEC, and if not, why.

mod evidence;
mod explain;
mod render;
mod rollout;
mod target;
mod trace;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};
use ks_shared::api::{Binding, BindingPolicy};
use kube::Client;
use kube::api::Api;

#[derive(Parser)]
#[command(
    name = "kubectl-kubestellar",
    bin_name = "kubectl kubestellar",
    version,
    about = "Explain KubeStellar rollouts: why an object did or did not reach its WECs, a policy's rollout per WEC, \
             and a rollout's trace",
    after_help = "Examples:\n  \
      kubectl kubestellar why deployment/web -n shop\n  \
      kubectl kubestellar why configmap/settings -n shop --wec cluster1 -o yaml\n  \
      kubectl kubestellar status web-policy\n  \
      kubectl kubestellar trace deployment/web -n shop --jaeger http://127.0.0.1:16686\n\n\
      The WDS and ITS are contexts of your kubeconfig (--wds, --its; the local stack's are wds1 and its1).\n\n\
      Exit status: 0 answered (for `why`: every link holds); 3 `why` answered and names a broken link; \
      1 no answer (a space unreachable, nothing found); 2 a usage error."
)]
struct Cli {
    /// Kubeconfig with the WDS's and the ITS's contexts (default: $KUBECONFIG, whose files, separated
    /// by ':', are merged as kubectl merges them; else ~/.kube/config).
    #[arg(long, global = true, value_name = "PATH")]
    kubeconfig: Option<PathBuf>,
    /// Context of the Workload Definition Space.
    #[arg(
        long,
        global = true,
        env = "KUBESTELLAR_WDS_CONTEXT",
        default_value = "wds1",
        value_name = "CONTEXT"
    )]
    wds: String,
    /// Context of the Inventory and Transport Space (the OCM hub).
    #[arg(
        long,
        global = true,
        env = "KUBESTELLAR_ITS_CONTEXT",
        default_value = "its1",
        value_name = "CONTEXT"
    )]
    its: String,
    /// Output format.
    #[arg(short, long, global = true, value_enum, default_value_t = Output::Table)]
    output: Output,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
enum Output {
    Table,
    Json,
    Yaml,
}

#[derive(Subcommand)]
enum Command {
    /// For one WDS object: the policies that select it (or the nearest miss), the WECs chosen, the
    /// ManifestWork per WEC with OCM's conditions, the generation the WEC reports, the status in the
    /// WDS and the rollout's trace id; the first broken link is named with what to do about it.
    Why {
        /// <resource>/<name>, the resource as kubectl takes it (deployment/web, cm/settings, ...).
        object: String,
        /// Namespace of a namespaced object (default: the WDS context's namespace, else default).
        #[arg(short, long)]
        namespace: Option<String>,
        /// Only this WEC.
        #[arg(long, value_name = "WEC")]
        wec: Option<String>,
    },
    /// A BindingPolicy's rollout: per WEC, its objects selected, delivered, applied, available, and
    /// with status returned.
    Status {
        /// The BindingPolicy.
        policy: String,
    },
    /// The latest rollout of one WDS object, from Jaeger's query API, as a waterfall.
    Trace {
        /// <resource>/<name>, as for `why`.
        object: String,
        /// Namespace of a namespaced object (default: the WDS context's namespace, else default).
        #[arg(short, long)]
        namespace: Option<String>,
        /// Jaeger's query endpoint.
        #[arg(
            long,
            env = "KUBESTELLAR_JAEGER_QUERY",
            default_value = "http://127.0.0.1:16686",
            value_name = "URL"
        )]
        jaeger: String,
    },
}

/// The exit status of `why` when it names a broken link: scripts can tell it from an answer with
/// none (0) and from no answer (1).
const BROKEN_LINK: u8 = 3;

/// What a command answered, and whether it names a broken link.
struct Answer {
    text: String,
    broken: bool,
}

impl From<String> for Answer {
    fn from(text: String) -> Answer {
        Answer { text, broken: false }
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(&cli).await {
        Ok(answer) => {
            print!("{}", answer.text);
            if answer.broken {
                ExitCode::from(BROKEN_LINK)
            } else {
                ExitCode::SUCCESS
            }
        }
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: &Cli) -> anyhow::Result<Answer> {
    match &cli.command {
        Command::Why { object, namespace, wec } => {
            let (typed, name) = target::split(object)?;
            let (wds, its) = (space(cli, &cli.wds, "WDS").await?, space(cli, &cli.its, "ITS").await?);
            let namespace = namespace.as_deref().unwrap_or(wds.default_namespace());
            let resource = resolve(&wds, &cli.wds, typed).await?;
            let evidence = evidence::gather(&wds, &its, &resource, Some(namespace), name)
                .await
                .context(unreachable_hint(cli))?;
            let found = explain::explain(&evidence, wec.as_deref());
            let text = render::output(cli.output, &found, || render::explanation(&found, object, namespace))?;
            Ok(Answer {
                text,
                broken: found.broken.is_some(),
            })
        }
        Command::Status { policy } => {
            let (wds, its) = (space(cli, &cli.wds, "WDS").await?, space(cli, &cli.its, "ITS").await?);
            let health = Api::<BindingPolicy>::all(wds.clone())
                .get_opt(policy)
                .await
                .context(unreachable_hint(cli))?
                .and_then(|p| p.status?.health);
            let binding = Api::<Binding>::all(wds)
                .get_opt(policy)
                .await
                .context(unreachable_hint(cli))?
                .with_context(|| {
                    format!(
                        "the WDS (context {}) has no Binding {policy}: is there a BindingPolicy {policy}, and a hub running for this WDS?",
                        cli.wds
                    )
                })?;
            let (works, statuses) = rollout::gather(&its, &binding).await.context(unreachable_hint(cli))?;
            let rows = rollout::rollout(&binding, &works, &statuses, health.as_ref());
            render::output(cli.output, &rows, || render::rollout(&rows)).map(Answer::from)
        }
        Command::Trace {
            object,
            namespace,
            jaeger,
        } => {
            let (typed, name) = target::split(object)?;
            let wds = space(cli, &cli.wds, "WDS").await?;
            let resource = resolve(&wds, &cli.wds, typed).await?;
            let namespace = match &resource {
                r if !r.namespaced => "",
                _ => namespace.as_deref().unwrap_or(wds.default_namespace()),
            };
            let found = trace::query(jaeger, &trace::search_path(&resource.plural, name)).await?;
            let trace = trace::newest(&found, namespace).with_context(|| {
                format!("Jaeger at {jaeger} has no rollout trace of {}/{name} (a rollout is traced when the hub sends traces there)", resource.qualified())
            })?;
            render::output(cli.output, &trace, || render::trace(&trace, jaeger)).map(Answer::from)
        }
    }
}

/// A client for one space, with an error that says which one could not be reached.
async fn space(cli: &Cli, context: &str, what: &str) -> anyhow::Result<Client> {
    ks_shared::client::client(cli.kubeconfig.as_deref(), Some(context))
        .await
        .with_context(|| {
            format!(
                "the {what}: kubeconfig context {context:?} (set it with --{})",
                what.to_lowercase()
            )
        })
}

async fn resolve(wds: &Client, context: &str, typed: &str) -> anyhow::Result<target::Resource> {
    let served = target::discover(wds)
        .await
        .with_context(|| format!("cannot reach the WDS (context {context})"))?;
    Ok(target::find(&served, typed)?)
}

fn unreachable_hint(cli: &Cli) -> String {
    format!(
        "reading the WDS (context {}) and the ITS (context {})",
        cli.wds, cli.its
    )
}
