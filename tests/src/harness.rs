//! Runs end-to-end tests against the local stack: attaches to a running stack or starts one
//! (and then stops it at the end), hands each test clients and unique namespaces, prints
//! the logs of the components a failed test names, and checks the stack's invariants
//! ([`crate::invariants`]) once the tests are done.

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DeleteParams, ObjectMeta, PostParams};
use kube::runtime::wait::{Condition, await_condition};
use kube::{Client, Resource};
use libtest_mimic::{Arguments, Failed, Trial};
use serde::de::DeserializeOwned;

use crate::invariants::Invariants;
use crate::stack::Stack;

type TestBody = fn(Ctx) -> Pin<Box<dyn Future<Output = anyhow::Result<()>> + Send>>;

/// One end-to-end test: a name, the processes whose logs explain its failure, and its body.
pub struct StackTest {
    pub name: &'static str,
    pub components: &'static [&'static str],
    pub body: TestBody,
    /// It stops or restarts processes the other tests of its binary use: it runs while none of
    /// them does.
    pub alone: bool,
}

/// A [`StackTest`] running the async fn `$body` (which takes a [`Ctx`]), named after it;
/// `alone` as the third argument for one that runs while no other test does.
#[macro_export]
macro_rules! stack_test {
    ($body:ident, $components:expr) => {
        $crate::harness::StackTest {
            name: stringify!($body),
            components: $components,
            body: |ctx| Box::pin($body(ctx)),
            alone: false,
        }
    };
    ($body:ident, $components:expr, alone) => {
        $crate::harness::StackTest {
            name: stringify!($body),
            components: $components,
            body: |ctx| Box::pin($body(ctx)),
            alone: true,
        }
    };
}

/// The `main` of a stack test binary: brings our binaries up to date
/// ([`crate::binaries::build`]), then runs `$tests` with `$runner` ([`run`] or
/// [`run_one_at_a_time`]) against the binaries beside `ks-stack`.
#[macro_export]
macro_rules! stack_main {
    ($runner:path, $tests:expr $(,)?) => {
        fn main() -> std::process::ExitCode {
            if let Err(err) = $crate::binaries::build() {
                eprintln!("{err:#}");
                return std::process::ExitCode::FAILURE;
            }
            let ks_stack = std::path::Path::new(env!("CARGO_BIN_EXE_ks-stack"));
            $runner(ks_stack.parent().expect("binaries live in a directory"), $tests)
        }
    };
}

/// What a test gets: the stack and helpers bound to it.
#[derive(Clone)]
pub struct Ctx {
    pub stack: Arc<Stack>,
    test: &'static str,
}

static NAMESPACES: AtomicU32 = AtomicU32::new(0);

impl Ctx {
    /// An admin client for a context (`kubeflex`, `wds1`, `its1`, `cluster1`, ...).
    pub async fn client(&self, context: &str) -> anyhow::Result<Client> {
        self.stack.client(context).await
    }

    /// A name no other test or run uses, starting with `prefix`: for the objects a test
    /// creates the way users do (with kubectl or helm).
    pub fn unique_name(&self, prefix: &str) -> String {
        let n = NAMESPACES.fetch_add(1, Ordering::Relaxed);
        format!("{prefix}-{}-{n}", std::process::id())
    }

    /// Creates a namespace no other test or run uses, in the given space.
    pub async fn namespace(&self, context: &str) -> anyhow::Result<String> {
        let n = NAMESPACES.fetch_add(1, Ordering::Relaxed);
        let name = format!("{}-{}-{n}", self.test.replace('_', "-"), std::process::id());
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                ..Default::default()
            },
            ..Default::default()
        };
        Api::<Namespace>::all(self.client(context).await?)
            .create(&PostParams::default(), &ns)
            .await?;
        Ok(name)
    }

    /// [`Ctx::namespace`] labelled `app.kubernetes.io/part-of: <its name>`; its name and that
    /// label, a selector for it and for the objects a test puts there labelled so too.
    pub async fn selected_namespace(&self, context: &str) -> anyhow::Result<(String, serde_json::Value)> {
        let ns = self.namespace(context).await?;
        let selector = serde_json::json!({"app.kubernetes.io/part-of": ns});
        let patch = serde_json::json!({"metadata": {"labels": selector}});
        Api::<Namespace>::all(self.client(context).await?)
            .patch(
                &ns,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(&patch),
            )
            .await?;
        Ok((ns, selector))
    }

    /// Deletes a namespace created by [`Ctx::namespace`].
    pub async fn delete_namespace(&self, context: &str, name: &str) -> anyhow::Result<()> {
        Api::<Namespace>::all(self.client(context).await?)
            .delete(name, &DeleteParams::default())
            .await?;
        Ok(())
    }
}

/// Waits, by watching, until the named object satisfies `condition`; fails after `deadline`.
pub async fn wait_until<K>(
    api: Api<K>,
    name: &str,
    what: &str,
    deadline: Duration,
    condition: impl Condition<K>,
) -> anyhow::Result<Option<K>>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let until = tokio::time::Instant::now() + deadline;
    loop {
        let probe = |object: Option<&K>| condition.matches_object(object);
        match tokio::time::timeout_at(until, await_condition(api.clone(), name, probe)).await {
            Ok(Ok(found)) => return Ok(found),
            // A watch can end with an error (410 Expired after etcd compacts): watch again, after
            // a pause so that an apiserver that is down is not hammered.
            Ok(Err(kube::runtime::wait::Error::ProbeFailed(e))) => {
                tracing::debug!("{name}: watch failed, watching again: {e}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(_) => anyhow::bail!("{name}: not {what} within {deadline:?}"),
        }
    }
}

/// Server-side applies `object` (JSON with apiVersion, kind and metadata.name) as the tests'
/// field manager, with strict field validation, and returns what the server stored.
pub async fn apply<K>(api: &Api<K>, object: serde_json::Value) -> kube::Result<K>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let name = object["metadata"]["name"].as_str().unwrap_or_default().to_string();
    let params = kube::api::PatchParams::apply("ks-tests").force().validation_strict();
    api.patch(&name, &params, &kube::api::Patch::Apply(&object)).await
}

/// The repository root (the parent of this crate).
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Runs `tests` against the stack with the standard test-runner arguments and output.
/// `our_binaries` is the cargo target directory holding `ks-stack`, `ks-agent`, ...
pub fn run(our_binaries: &std::path::Path, tests: Vec<StackTest>) -> ExitCode {
    run_with(Arguments::from_args(), our_binaries, tests)
}

/// As [`run`], one test at a time: for tests that restart or break the stack's processes.
pub fn run_one_at_a_time(our_binaries: &std::path::Path, tests: Vec<StackTest>) -> ExitCode {
    let mut args = Arguments::from_args();
    args.test_threads = Some(1);
    run_with(args, our_binaries, tests)
}

fn run_with(args: Arguments, our_binaries: &std::path::Path, tests: Vec<StackTest>) -> ExitCode {
    let runtime = tokio::runtime::Runtime::new().expect("tokio runtime");
    let stack = match Stack::new(&repo_root(), 2, our_binaries) {
        Ok(stack) => Arc::new(stack),
        Err(err) => {
            eprintln!("cannot set up the stack: {err:#}");
            return ExitCode::FAILURE;
        }
    };
    let any_selected = tests
        .iter()
        .any(|t| args.filter.as_deref().is_none_or(|f| t.name.contains(f)));
    let started_here = any_selected && !args.list && !stack.is_running();
    if any_selected && !args.list {
        eprintln!(
            "{} the local stack",
            if started_here { "starting" } else { "attaching to" }
        );
        if let Err(err) = runtime.block_on(stack.up()) {
            eprintln!("cannot start the stack: {err:#}");
            return ExitCode::FAILURE;
        }
    }
    // Watched from the start, checked once every test is done.
    let invariants = if any_selected && !args.list {
        match runtime.block_on(Invariants::start(&stack)) {
            Ok(invariants) => Some(invariants),
            Err(err) => {
                eprintln!("cannot watch the stack for the invariants: {err:#}");
                return ExitCode::FAILURE;
            }
        }
    } else {
        None
    };
    let handle = runtime.handle().clone();
    // Held shared by every test, and whole by a test that runs alone.
    let turns = Arc::new(tokio::sync::RwLock::new(()));
    let trials = tests
        .into_iter()
        .map(|test| {
            let ctx = Ctx {
                stack: stack.clone(),
                test: test.name,
            };
            let handle = handle.clone();
            let turns = turns.clone();
            Trial::test(test.name, move || {
                let stack = ctx.stack.clone();
                let outcome = handle.block_on(async {
                    let _turn: Box<dyn Send + '_> = if test.alone {
                        Box::new(turns.write().await)
                    } else {
                        Box::new(turns.read().await)
                    };
                    let started = Instant::now();
                    let outcome = (test.body)(ctx).await;
                    // libtest-mimic reports no time per test; this shows where a suite's time goes.
                    eprintln!("{} took {:.1} s", test.name, started.elapsed().as_secs_f64());
                    outcome
                });
                outcome.map_err(|err| {
                    let logs: String = test
                        .components
                        .iter()
                        .map(|c| {
                            format!(
                                "\n--- last lines of .stack/logs/{c}.log ---\n{}",
                                stack.procs.tail(c, 30)
                            )
                        })
                        .collect();
                    Failed::from(format!("{err:#}{logs}"))
                })
            })
        })
        .collect();
    let conclusion = libtest_mimic::run(&args, trials);
    let mut exit = conclusion.exit_code();
    if let Some(invariants) = invariants {
        eprintln!("checking the stack's invariants (quiet, no recreated WEC object, one WorkStatus per WEC object)");
        match runtime.block_on(invariants.check(&stack)) {
            Ok(violations) if violations.is_empty() => eprintln!("invariants hold"),
            Ok(violations) => {
                eprintln!("INVARIANTS VIOLATED:\n{}", violations.join("\n"));
                exit = ExitCode::FAILURE;
            }
            Err(err) => {
                eprintln!("cannot check the invariants: {err:#}");
                exit = ExitCode::FAILURE;
            }
        }
    }
    if started_here
        && std::env::var_os("KS_KEEP_STACK").is_none()
        && let Err(err) = stack.down()
    {
        eprintln!("stopping the stack: {err:#}");
        return ExitCode::FAILURE;
    }
    exit
}
