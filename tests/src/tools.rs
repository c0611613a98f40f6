//! The command-line tools users drive the stack with, `kubectl` and `helm` (from `make deps`),
//! against the stack's kubeconfig, with Helm's cache and configuration in a scratch directory of
//! the test; and reading what they print.

use std::path::PathBuf;
use std::process::{Command, Stdio};

use anyhow::{Context, bail, ensure};
use serde_json::Value;

use crate::harness::{Ctx, repo_root};

/// A release of one of the charts on the stack.
pub struct Release {
    pub context: &'static str,
    pub namespace: String,
    pub name: String,
    /// The chart's directory, relative to the repository root.
    pub chart: &'static str,
}

impl Release {
    /// helm arguments `args` for this release: with its `--kube-context` and `--namespace`.
    pub fn args<'a>(&'a self, args: &[&'a str]) -> Vec<&'a str> {
        let mut args = args.to_vec();
        args.extend(["--kube-context", self.context, "--namespace", &self.namespace]);
        args
    }
}

/// helm and kubectl (from `make deps`) against the stack's kubeconfig, with helm's cache and
/// configuration in a scratch directory of this test.
pub struct Tools {
    pub bin: PathBuf,
    pub kubeconfig: PathBuf,
    /// Our binaries, the kubectl plugin `kubectl-kubestellar` among them.
    plugins: PathBuf,
    scratch: PathBuf,
}

impl Tools {
    pub fn new(ctx: &Ctx, test: &str) -> anyhow::Result<Tools> {
        let scratch = ctx
            .stack
            .state
            .join("tmp")
            .join(format!("{test}-{}", std::process::id()));
        std::fs::create_dir_all(&scratch)?;
        Ok(Tools {
            bin: ctx.stack.cache.join("bin"),
            kubeconfig: ctx.stack.kubeconfig(),
            plugins: ctx.stack.our_binaries.clone(),
            scratch,
        })
    }

    pub fn helm(&self, args: &[&str]) -> anyhow::Result<String> {
        let mut command = Command::new(self.bin.join("helm"));
        command
            .args(args)
            .env("KUBECONFIG", &self.kubeconfig)
            .env("HELM_CACHE_HOME", self.scratch.join("cache"))
            .env("HELM_CONFIG_HOME", self.scratch.join("config"))
            .env("HELM_DATA_HOME", self.scratch.join("data"));
        output(&mut command)
    }

    pub fn kubectl(&self, context: &str, args: &[&str]) -> anyhow::Result<String> {
        output(self.kubectl_in(context).args(args))
    }

    /// `kubectl patch --subresource=status --type=merge` of `resource` `name` in `namespace` of
    /// `context`: as a WEC's controller, or a hand, writes an object's status.
    pub fn patch_status(
        &self,
        context: &str,
        namespace: &str,
        resource: &str,
        name: &str,
        patch: &str,
    ) -> anyhow::Result<String> {
        self.kubectl(
            context,
            &[
                "patch",
                "-n",
                namespace,
                resource,
                name,
                "--subresource=status",
                "--type=merge",
                "-p",
                patch,
            ],
        )
    }

    /// `kubectl apply` of the CRD `name` in `file` into `context`, then waits until it is
    /// established.
    pub fn apply_crd(&self, context: &str, file: &str, name: &str) -> anyhow::Result<()> {
        self.kubectl(context, &["apply", "-f", file])?;
        let crd = format!("crd/{name}");
        self.kubectl(context, &["wait", "--for=condition=established", "--timeout=60s", &crd])?;
        Ok(())
    }

    /// `kubectl kubestellar <args>`: our plugin, found on `PATH` as kubectl finds plugins, with
    /// the stack's kubeconfig.
    pub fn kubestellar(&self, args: &[&str]) -> anyhow::Result<String> {
        self.kubestellar_answer(args).map(|(_, answer)| answer)
    }

    /// `kubectl kubestellar` through kubectl's plugin lookup: whether it named a broken link
    /// (`why`'s exit status 3), and its answer.
    pub fn kubestellar_answer(&self, args: &[&str]) -> anyhow::Result<(bool, String)> {
        let path = std::env::join_paths(
            std::iter::once(self.plugins.clone())
                .chain(std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())),
        )?;
        let mut command = Command::new(self.bin.join("kubectl"));
        command
            .arg("kubestellar")
            .args(args)
            .env("KUBECONFIG", &self.kubeconfig)
            .env("PATH", path);
        let result = command.output().with_context(|| format!("running {command:?}"))?;
        if result.status.code() == Some(3) {
            return Ok((true, String::from_utf8(result.stdout)?));
        }
        let what = format!("{:?}", command.get_args().collect::<Vec<_>>());
        Ok((false, succeeded(&what, result)?))
    }

    /// `kubectl` in `context` with `input` on its standard input (as in `kubectl apply -f -`).
    pub fn kubectl_input(&self, context: &str, args: &[&str], input: &str) -> anyhow::Result<String> {
        use std::io::Write;
        let mut child = self
            .kubectl_in(context)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .context("running kubectl")?;
        child
            .stdin
            .take()
            .context("kubectl's stdin")?
            .write_all(input.as_bytes())?;
        succeeded(&format!("kubectl {args:?}"), child.wait_with_output()?)
    }

    /// `kubectl` in `context` whose editor (for `kubectl edit`) runs the sed script `script`
    /// over the file, as a user changing a line would.
    pub fn kubectl_with_editor(&self, context: &str, args: &[&str], script: &str) -> anyhow::Result<String> {
        output(
            self.kubectl_in(context)
                .args(args)
                .env("KUBE_EDITOR", format!("sed -i '{script}'")),
        )
    }

    /// `kubectl` with the stack's kubeconfig, in `context`.
    fn kubectl_in(&self, context: &str) -> Command {
        let mut command = Command::new(self.bin.join("kubectl"));
        command
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(["--context", context]);
        command
    }

    /// Writes `text` into the scratch directory; the file's path.
    pub fn scratch_file(&self, extension: &str, text: &str) -> anyhow::Result<String> {
        use std::hash::{Hash, Hasher};
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        text.hash(&mut hasher);
        let path = self.scratch.join(format!("{:016x}.{extension}", hasher.finish()));
        std::fs::write(&path, text)?;
        Ok(path.to_string_lossy().into_owned())
    }

    /// `values` as a values file (JSON is YAML).
    pub fn values_file(&self, values: &Value) -> anyhow::Result<String> {
        self.scratch_file("json", &serde_json::to_string_pretty(values)?)
    }

    /// `helm template` (release `t`, CRDs included): the rendered objects.
    pub fn render(&self, chart: &str, namespace: &str, values: &Value) -> anyhow::Result<Vec<Value>> {
        let file = self.values_file(values)?;
        let chart = chart_path(chart);
        let args = [
            "template",
            "t",
            &chart,
            "--namespace",
            namespace,
            "--include-crds",
            "--values",
            &file,
        ];
        objects(&self.helm(&args)?)
    }

    /// `helm install` or `helm upgrade` (without `--wait`: nothing runs our Pods on these spaces).
    pub fn deploy(&self, verb: &str, release: &Release, values: &Value) -> anyhow::Result<()> {
        let file = self.values_file(values)?;
        let chart = chart_path(release.chart);
        self.helm(&release.args(&[verb, &release.name, &chart, "--values", &file]))?;
        Ok(())
    }

    /// The objects of the release, as Helm recorded them.
    pub fn manifest(&self, release: &Release) -> anyhow::Result<Vec<Value>> {
        objects(&self.helm(&release.args(&["get", "manifest", &release.name]))?)
    }

    /// `helm uninstall`, checking that none of the release's objects is left.
    pub fn uninstall(&self, release: &Release) -> anyhow::Result<()> {
        let manifest = self.helm(&release.args(&["get", "manifest", &release.name]))?;
        let file = self.scratch_file("yaml", &manifest)?;
        // --wait: until every object is gone, not only marked for deletion.
        self.helm(&release.args(&["uninstall", &release.name, "--wait"]))?;
        let args = ["get", "--ignore-not-found", "-o", "name", "-f", &file];
        let left = self.kubectl(release.context, &args)?;
        ensure!(left.trim().is_empty(), "left after helm uninstall:\n{left}");
        Ok(())
    }

    /// Server-side applies `objects` with `--dry-run=server`: the apiserver validates them
    /// against its schemas (CRDs included) without storing anything.
    pub fn dry_run(&self, context: &str, namespace: &str, objects: &[Value]) -> anyhow::Result<()> {
        ensure!(!objects.is_empty(), "nothing to apply");
        let text: String = objects.iter().map(|o| format!("---\n{o}\n")).collect();
        let file = self.scratch_file("yaml", &text)?;
        let printed = self.kubectl(
            context,
            &[
                "--namespace",
                namespace,
                "apply",
                "--server-side",
                "--dry-run=server",
                "--force-conflicts",
                "--field-manager=ks-tests-charts",
                "-f",
                &file,
            ],
        )?;
        let applied = printed.lines().filter(|l| l.contains("(server dry run)")).count();
        ensure!(
            applied == objects.len(),
            "{applied} of {} objects applied:\n{printed}",
            objects.len()
        );
        Ok(())
    }
}

/// Runs a command to success; its standard output.
pub fn output(command: &mut Command) -> anyhow::Result<String> {
    let result = command.output().with_context(|| format!("running {command:?}"))?;
    succeeded(&format!("{:?}", command.get_args().collect::<Vec<_>>()), result)
}

/// The standard output of the finished command `what`, or why it failed.
fn succeeded(what: &str, result: std::process::Output) -> anyhow::Result<String> {
    if !result.status.success() {
        bail!(
            "{what} failed ({}): {}{}",
            result.status,
            String::from_utf8_lossy(&result.stderr),
            String::from_utf8_lossy(&result.stdout)
        );
    }
    Ok(String::from_utf8(result.stdout)?)
}

/// The objects of a multi-document YAML stream (empty documents dropped).
pub fn objects(yaml: &str) -> anyhow::Result<Vec<Value>> {
    let documents: Vec<Value> = serde_saphyr::from_multiple(yaml)?;
    Ok(documents.into_iter().filter(Value::is_object).collect())
}

/// A BindingPolicy as a user writes it: objects labelled `selector` to the WECs labelled `clusters`
/// (both YAML flow-map entries, e.g. `name: cluster1`).
pub fn policy_yaml(name: &str, clusters: &str, selector: &str) -> String {
    format!(
        r#"---
apiVersion: control.kubestellar.io/v1alpha1
kind: BindingPolicy
metadata: {{name: {name}}}
spec:
  clusterSelectors: [{{matchLabels: {{{clusters}}}}}]
  downsync: [{{objectSelectors: [{{matchLabels: {{{selector}}}}}]}}]
"#
    )
}

/// A Namespace `namespace` holding a one-replica Deployment `app` (nginx), both labelled `label`
/// (`key: value`), as YAML. Delete it with `kubectl delete --ignore-not-found -f`: the Namespace
/// comes first, and the namespace controller may remove the Deployment before kubectl does.
pub fn app_yaml(namespace: &str, app: &str, label: &str) -> String {
    format!(
        r#"---
apiVersion: v1
kind: Namespace
metadata: {{name: {namespace}, labels: {{{label}}}}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: {app}, namespace: {namespace}, labels: {{{label}}}}}
spec:
  replicas: 1
  selector: {{matchLabels: {{app: {app}}}}}
  template:
    metadata: {{labels: {{app: {app}}}}}
    spec: {{containers: [{{name: {app}, image: "nginx:1.27"}}]}}
"#
    )
}

/// A namespaced CustomResourceDefinition `<plural>.<group>` of kind `kind` (version v1, any
/// content, with a status subresource), labelled `label` (`key: value`), as YAML.
pub fn crd_yaml(group: &str, plural: &str, kind: &str, label: &str) -> String {
    let singular = kind.to_lowercase();
    format!(
        r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {{name: {plural}.{group}, labels: {{{label}}}}}
spec:
  group: {group}
  scope: Namespaced
  names: {{plural: {plural}, singular: {singular}, kind: {kind}, listKind: {kind}List}}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {{status: {{}}}}
    schema: {{openAPIV3Schema: {{type: object, x-kubernetes-preserve-unknown-fields: true}}}}
"#
    )
}

/// A Namespace `namespace` and in it the object `g1` of kind `kind` (version v1 of `group`),
/// both labelled `label` (`key: value`), as YAML.
pub fn custom_object_yaml(namespace: &str, group: &str, kind: &str, label: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Namespace
metadata: {{name: {namespace}, labels: {{{label}}}}}
---
apiVersion: {group}/v1
kind: {kind}
metadata: {{name: g1, namespace: {namespace}, labels: {{{label}}}}}
spec: {{size: 3}}
"#
    )
}

/// A BindingPolicy `<name>-singleton` asking for the Deployments its `selector` picks to have
/// `wec`'s status returned (singleton status), as YAML.
pub fn singleton_policy_yaml(name: &str, wec: &str, selector: &str) -> String {
    format!(
        r#"---
apiVersion: control.kubestellar.io/v1alpha1
kind: BindingPolicy
metadata: {{name: {name}-singleton}}
spec:
  clusterSelectors: [{{matchLabels: {{name: {wec}}}}}]
  downsync:
  - objectSelectors: [{{matchLabels: {{{selector}}}}}]
    resources: [deployments]
    wantSingletonReportedState: true
"#
    )
}

pub fn chart_path(chart: &str) -> String {
    repo_root().join(chart).to_string_lossy().into_owned()
}
