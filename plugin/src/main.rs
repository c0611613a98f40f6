//! `kubectl kubestellar`: did a workload object reach every WEC, and if not, why.

mod evidence;
mod explain;
mod get;
#[cfg(test)]
mod krew;
mod render;
mod rollout;
mod target;
mod trace;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::error::ErrorKind;
use clap::{CommandFactory, Parser, Subcommand, ValueEnum};
use clap_complete::Shell;
use k8s_openapi::jiff::Timestamp;
use ks_shared::api::{Binding, BindingPolicy};
use kube::Client;
use kube::api::Api;

#[derive(Parser)]
#[command(
    name = "kubectl-kubestellar",
    bin_name = "kubectl kubestellar",
    version,
    about = "Explain KubeStellar rollouts: why an object did or did not reach its WECs, a policy's rollout per WEC, \
             and a rollout's trace; and list a resource on every WEC at once",
    after_help = "Examples:\n  \
      kubectl kubestellar why deployment/web -n shop\n  \
      kubectl kubestellar why configmap/settings -n shop --wec cluster1 -o yaml\n  \
      kubectl kubestellar status web-policy\n  \
      kubectl kubestellar trace deployment/web -n shop --jaeger http://127.0.0.1:16686\n  \
      kubectl kubestellar get deployments -A -l app=web\n  \
      source <(kubectl kubestellar completion bash)\n\n\
      The WDS and ITS are contexts of your kubeconfig (--wds, --its; the local stack's are wds1 and its1); \
      `get` reads each WEC (each ManagedCluster of the ITS) in the context its name maps to \
      (--wec-context-template, default {wec}: the context named as the WEC).\n\n\
      Exit status: 0 answered (for `why`: every link holds); 3 `why` answered and names a broken link; \
      4 `get` answered for some WECs only (each one that could not be read is named on standard error); \
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
    /// Output format: wide and name for `get` only.
    #[arg(short, long, global = true, value_enum, default_value_t = Output::Table)]
    output: Output,
    /// Tables without their header line (`get` and `status`).
    #[arg(long, global = true)]
    no_headers: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Output {
    Table,
    /// `get`: more columns (the conditions that hold, the labels).
    Wide,
    /// `get`: <wec>/<resource>/<name> per object.
    Name,
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
    /// A resource on every WEC, as `kubectl get` lists it in one cluster, with a WEC column first;
    /// `-o json|yaml` gives a List whose items carry the annotation kubestellar.io/wec.
    #[command(
        after_help = "The WECs are the ITS's ManagedClusters, each read in its kubeconfig context, all at once; a \
                      WEC that cannot be read (no such context, unreachable, no answer within --wec-timeout, \
                      forbidden, no such resource) is named on standard error and the others' objects are \
                      printed (exit status 4)."
    )]
    Get {
        /// The resource as kubectl takes it (deployments, deploy, cm, deployments.apps, ...), or
        /// <resource>/<name>.
        resource: String,
        /// Only the object of this name.
        name: Option<String>,
        /// Namespace of a namespaced resource (default: each WEC context's namespace, else default).
        #[arg(short, long, conflicts_with = "all_namespaces")]
        namespace: Option<String>,
        /// Every namespace.
        #[arg(short = 'A', long)]
        all_namespaces: bool,
        /// Only objects with these labels, as kubectl takes them (app=web,tier!=db).
        #[arg(short = 'l', long, value_name = "SELECTOR")]
        selector: Option<String>,
        /// The kubeconfig context of each WEC: {wec} stands for its ManagedCluster's name.
        #[arg(
            long,
            env = "KUBESTELLAR_WEC_CONTEXT_TEMPLATE",
            default_value = "{wec}",
            value_name = "TEMPLATE",
            value_parser = get::parse_template
        )]
        wec_context_template: String,
        /// How long each WEC has to answer (500ms, 10s, 1m, ...).
        #[arg(long, default_value = "10s", value_name = "DURATION", value_parser = get::parse_timeout)]
        wec_timeout: Duration,
    },
    /// A completion script for bash, zsh or fish, for the command `kubectl-kubestellar` (e.g.
    /// `source <(kubectl kubestellar completion bash)`).
    Completion { shell: Shell },
}

impl Command {
    fn name(&self) -> &'static str {
        match self {
            Command::Why { .. } => "why",
            Command::Status { .. } => "status",
            Command::Trace { .. } => "trace",
            Command::Get { .. } => "get",
            Command::Completion { .. } => "completion",
        }
    }
}

/// Why `-o` or `--no-headers` does not fit the command, if it does not.
fn misfit(command: &Command, output: Output, no_headers: bool) -> Option<String> {
    let name = command.name();
    match command {
        Command::Get { .. } => None,
        Command::Completion { .. } => (output != Output::Table || no_headers)
            .then(|| "-o, --no-headers: `completion` prints a shell script, in no other format".to_string()),
        _ if matches!(output, Output::Wide | Output::Name) => {
            let format = output.to_possible_value().map(|v| v.get_name().to_string());
            Some(format!(
                "-o {}: only `get` prints it; `{name}` prints table, json or yaml",
                format.unwrap_or_default()
            ))
        }
        Command::Status { .. } => None,
        _ if no_headers => Some(format!("--no-headers: `{name}` prints no table of rows")),
        _ => None,
    }
}

/// The exit status of `why` when it names a broken link: scripts can tell it from an answer with
/// none (0) and from no answer (1).
const BROKEN_LINK: u8 = 3;
/// The exit status of `get` when some WECs answered and some did not.
const PARTIAL: u8 = 4;

/// What a command answered: its text, what it says on standard error, and how complete it is.
struct Answer {
    text: String,
    notes: Vec<String>,
    verdict: Verdict,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verdict {
    Answered,
    /// `why` names a broken link.
    Broken,
    /// `get`: some WECs could not be read.
    Partial,
}

impl Verdict {
    fn code(self) -> u8 {
        match self {
            Verdict::Answered => 0,
            Verdict::Broken => BROKEN_LINK,
            Verdict::Partial => PARTIAL,
        }
    }
}

impl From<String> for Answer {
    fn from(text: String) -> Answer {
        Answer {
            text,
            notes: Vec::new(),
            verdict: Verdict::Answered,
        }
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Some(problem) = misfit(&cli.command, cli.output, cli.no_headers) {
        Cli::command().error(ErrorKind::ArgumentConflict, problem).exit();
    }
    match run(&cli).await {
        Ok(answer) => {
            print!("{}", answer.text);
            for note in &answer.notes {
                eprintln!("{note}");
            }
            ExitCode::from(answer.verdict.code())
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
            let verdict = match found.broken {
                Some(_) => Verdict::Broken,
                None => Verdict::Answered,
            };
            Ok(Answer {
                verdict,
                ..Answer::from(text)
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
            render::output(cli.output, &rows, || render::rollout(&rows, !cli.no_headers)).map(Answer::from)
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
        Command::Get {
            resource,
            name,
            namespace,
            all_namespaces,
            selector,
            wec_context_template,
            wec_timeout,
        } => {
            let namespaces = match all_namespaces {
                true => get::Namespaces::All,
                false => get::Namespaces::One(namespace.clone()),
            };
            let query = get::query(resource, name.as_deref(), namespaces, selector.clone())?;
            let its = space(cli, &cli.its, "ITS").await?;
            let wecs = get::wecs(&its)
                .await
                .with_context(|| format!("listing the WECs (ManagedClusters) in the ITS (context {})", cli.its))?;
            anyhow::ensure!(
                !wecs.is_empty(),
                "the ITS (context {}) has no ManagedCluster: no WEC to read",
                cli.its
            );
            let kubeconfig = cli.kubeconfig.as_deref();
            let found = get::gather(kubeconfig, &wecs, wec_context_template, &query, *wec_timeout).await;
            listed(
                cli.output,
                cli.no_headers,
                *all_namespaces,
                &query,
                &found,
                Timestamp::now(),
            )
        }
        Command::Completion { shell } => Ok(Answer::from(completion(*shell))),
    }
}

/// The completion script of `kubectl-kubestellar` for `shell`.
fn completion(shell: Shell) -> String {
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "kubectl-kubestellar", &mut script);
    String::from_utf8_lossy(&script).into_owned()
}

/// `get`'s answer from what the WECs said, in `format`, with ages counted to `now`.
fn listed(
    format: Output,
    no_headers: bool,
    all_namespaces: bool,
    query: &get::Query,
    found: &get::Gathered,
    now: Timestamp,
) -> anyhow::Result<Answer> {
    let mut notes = get::failures(found);
    let verdict = match found.completeness() {
        get::Completeness::Nothing => anyhow::bail!("no WEC could be read:\n  {}", notes.join("\n  ")),
        get::Completeness::Partial => Verdict::Partial,
        get::Completeness::Complete => Verdict::Answered,
    };
    if found.count() == 0 {
        if let (Some(name), Verdict::Answered) = (&query.name, verdict) {
            anyhow::bail!("no WEC has {} {name}", query.resource);
        }
        notes.push(get::nothing_found(query));
    }
    let text = render::output(format, &get::list_object(found), || match format {
        Output::Name => get::names(found),
        _ => {
            let columns = get::columns(found, all_namespaces, format == Output::Wide);
            let rows = get::rows(found, columns, now);
            match rows.is_empty() {
                true => String::new(),
                false => render::table(&columns.headers(), &rows, !no_headers),
            }
        }
    })?;
    Ok(Answer { text, notes, verdict })
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
    target::find(&served, typed).with_context(|| format!("the WDS (context {context})"))
}

fn unreachable_hint(cli: &Cli) -> String {
    format!(
        "reading the WDS (context {}) and the ITS (context {})",
        cli.wds, cli.its
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Cli {
        Cli::try_parse_from([&["kubectl-kubestellar"], args].concat()).expect("parses")
    }

    fn misfit_of(args: &[&str]) -> Option<String> {
        let cli = parse(args);
        misfit(&cli.command, cli.output, cli.no_headers)
    }

    #[test]
    fn outputs_fit_the_commands_that_print_them() {
        for fits in [
            &["get", "cm", "-o", "wide", "--no-headers"][..],
            &["get", "cm", "-o", "name"],
            &["get", "cm", "-o", "yaml"],
            &["status", "p", "--no-headers"],
            &["status", "p", "-o", "json"],
            &["why", "cm/x", "-o", "yaml"],
            &["trace", "cm/x"],
            &["completion", "bash"],
        ] {
            assert_eq!(misfit_of(fits), None, "{fits:?}");
        }
        let cases = [
            (
                &["why", "cm/x", "-o", "wide"][..],
                "-o wide: only `get` prints it; `why` prints table, json or yaml",
            ),
            (
                &["status", "p", "-o", "name"],
                "-o name: only `get` prints it; `status` prints table, json or yaml",
            ),
            (
                &["why", "cm/x", "--no-headers"],
                "--no-headers: `why` prints no table of rows",
            ),
            (
                &["trace", "cm/x", "--no-headers"],
                "--no-headers: `trace` prints no table of rows",
            ),
            (
                &["completion", "zsh", "-o", "json"],
                "-o, --no-headers: `completion` prints a shell script, in no other format",
            ),
        ];
        for (args, problem) in cases {
            assert_eq!(misfit_of(args).as_deref(), Some(problem), "{args:?}");
        }
    }

    #[test]
    fn exit_statuses_tell_broken_and_partial_apart() {
        let codes: Vec<u8> = [Verdict::Answered, Verdict::Broken, Verdict::Partial]
            .into_iter()
            .map(Verdict::code)
            .collect();
        assert_eq!(codes, [0, 3, 4]);
    }

    /// cluster1 answered with the ConfigMap shop/settings; cluster2 could not be read.
    fn half_answered() -> (get::Query, get::Gathered) {
        let query = get::query("cm", None, get::Namespaces::All, None).expect("a query");
        let resource = target::Resource {
            group: String::new(),
            version: "v1".into(),
            plural: "configmaps".into(),
            kind: "ConfigMap".into(),
            namespaced: true,
        };
        let api_resource = kube::discovery::ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&());
        let settings = kube::api::DynamicObject::new("settings", &api_resource).within("shop");
        let found = get::Gathered {
            answered: vec![get::Answered {
                wec: "cluster1".into(),
                resource,
                objects: vec![settings],
            }],
            failed: vec![("cluster2".into(), "context \"cluster2\": connection refused".into())],
        };
        (query, found)
    }

    #[test]
    fn a_wec_that_does_not_answer_makes_get_partial() {
        let (query, mut found) = half_answered();
        let answer = listed(Output::Table, false, true, &query, &found, Timestamp::now()).expect("an answer");
        assert_eq!(answer.verdict.code(), PARTIAL);
        assert_eq!(
            answer.text,
            "WEC        NAMESPACE   NAME       AGE\ncluster1   shop        settings   <unknown>\n"
        );
        assert_eq!(
            answer.notes,
            ["WEC cluster2 could not be read: context \"cluster2\": connection refused"]
        );
        let names = listed(Output::Name, false, true, &query, &found, Timestamp::now()).expect("an answer");
        assert_eq!(names.text, "cluster1/configmap/settings\n");

        found.failed.clear();
        let complete = listed(Output::Table, true, true, &query, &found, Timestamp::now()).expect("an answer");
        assert_eq!((complete.verdict, complete.notes.len()), (Verdict::Answered, 0));
        assert_eq!(complete.text, "cluster1   shop   settings   <unknown>\n");
    }

    #[test]
    fn get_with_no_wec_answering_or_nothing_found_says_so() {
        let (query, mut found) = half_answered();
        let answered = std::mem::take(&mut found.answered);
        let error = listed(Output::Table, false, true, &query, &found, Timestamp::now())
            .err()
            .expect("no answer");
        assert!(
            error
                .to_string()
                .contains("no WEC could be read:\n  WEC cluster2 could not be read"),
            "{error}"
        );

        found = get::Gathered {
            answered,
            failed: Vec::new(),
        };
        found.answered[0].objects.clear();
        let empty = listed(Output::Table, false, true, &query, &found, Timestamp::now()).expect("an answer");
        assert_eq!(
            (empty.text.as_str(), empty.verdict, empty.notes),
            (
                "",
                Verdict::Answered,
                vec!["No resources found on any WEC.".to_string()]
            )
        );
        let named = get::query("cm", Some("settings"), get::Namespaces::All, None).expect("a query");
        let error = listed(Output::Table, false, true, &named, &found, Timestamp::now())
            .err()
            .expect("not found");
        assert_eq!(error.to_string(), "no WEC has cm settings");
    }

    #[test]
    fn get_reads_each_wec_in_the_context_named_after_it_by_default() {
        let Command::Get {
            wec_context_template,
            wec_timeout,
            ..
        } = parse(&["get", "deploy"]).command
        else {
            panic!("not get");
        };
        assert_eq!(get::context_for(&wec_context_template, "cluster1"), "cluster1");
        assert_eq!(wec_timeout, Duration::from_secs(10));
    }
}
