//! The status add-on as users install it: `helm install` of `charts/ks-status-addon` into the
//! ITS. The stand-in kubelet on its1 runs the chart's ks-addon; through OCM (the chart's
//! Placement, OCM's addon-manager, then ks-addon's ManifestWork) every WEC gets its agent.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::Path;

use anyhow::Context;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::Api;
use serde_json::json;

use super::{JAEGER_OTLP_GRPC, MAX_WORK_STATUSES, Stack};

/// The add-on chart's release on its1, and its namespace (as the chart's README suggests).
pub const ADDON_RELEASE: &str = "ks-status-addon";
pub const ADDON_NAMESPACE: &str = "open-cluster-management";
const ADDON_CHART: &str = "charts/ks-status-addon";
/// The process name of the status add-on controller: the local Pod of the chart's Deployment
/// on its1.
pub const ADDON_PROCESS: &str = "pod-its1-open-cluster-management-ks-status-addon";
/// Pod annotation recording the chart and values the release was installed from, so that `up`
/// runs helm only when they changed.
const CONFIG_ANNOTATION: &str = "stack.kubestellar-rs.local/config";

impl Stack {
    /// `helm` from `make deps` against the stack's kubeconfig; what it printed.
    pub fn helm(&self, args: &[&str]) -> anyhow::Result<String> {
        self.tool(&self.bin("helm"), args)
    }

    /// Installs (or upgrades) the status add-on chart on its1 with the stack's settings: its
    /// metrics port, a WorkStatus quota per mailbox, and traces from ks-addon and every agent
    /// to the stack's Jaeger.
    pub(super) async fn install_status_addon(&self) -> anyhow::Result<()> {
        let repo = self.state.parent().context("state directory has a parent")?;
        let chart = repo.join(ADDON_CHART);
        let otlp = format!("http://127.0.0.1:{JAEGER_OTLP_GRPC}");
        let mut values = json!({
            "controller": {"port": self.addon_port(), "maxWorkStatuses": MAX_WORK_STATUSES, "otlpEndpoint": otlp},
            "agent": {"otlpEndpoint": otlp},
        });
        let config = config_digest(&chart, &values)?;
        let deployments: Api<Deployment> = Api::namespaced(self.client("its1").await?, ADDON_NAMESPACE);
        let installed = deployments
            .get_opt(ADDON_RELEASE)
            .await?
            .and_then(|d| d.spec?.template.metadata?.annotations?.remove(CONFIG_ANNOTATION));
        if installed.as_deref() == Some(config.as_str()) {
            return Ok(());
        }
        values["controller"]["podAnnotations"] = json!({CONFIG_ANNOTATION: config});
        let file = self.state.join("status-addon-values.json");
        std::fs::write(&file, values.to_string())?;
        let (chart, file) = (chart.display().to_string(), file.display().to_string());
        // A stack started before the add-on came from its chart has an addon-status that Helm
        // may not adopt.
        let hint = "installing the status add-on chart on its1 (a stack started by an older version: `make down`, \
                    `rm -rf .stack`, `make up`)";
        self.helm(&[
            "upgrade",
            "--install",
            ADDON_RELEASE,
            &chart,
            "--kube-context",
            "its1",
            "--namespace",
            ADDON_NAMESPACE,
            "--create-namespace",
            "--values",
            &file,
        ])
        .context(hint)?;
        Ok(())
    }
}

/// A digest of the chart's files and the values: what the release was made from.
fn config_digest(chart: &Path, values: &serde_json::Value) -> anyhow::Result<String> {
    let mut hasher = DefaultHasher::new();
    values.to_string().hash(&mut hasher);
    let mut pending = vec![chart.to_path_buf()];
    let mut files = Vec::new();
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).with_context(|| dir.display().to_string())? {
            let path = entry?.path();
            if path.is_dir() {
                pending.push(path);
            } else {
                files.push(path);
            }
        }
    }
    files.sort();
    for file in files {
        file.strip_prefix(chart)?.hash(&mut hasher);
        std::fs::read(&file)?.hash(&mut hasher);
    }
    Ok(format!("{:016x}", hasher.finish()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_addon_process_is_the_local_pod_of_the_chart_deployment() {
        assert_eq!(
            ADDON_PROCESS,
            super::super::kubelet::pod_process("its1", ADDON_NAMESPACE, ADDON_RELEASE)
        );
    }

    #[test]
    fn the_config_digest_changes_with_the_values_and_the_chart() -> anyhow::Result<()> {
        let chart = std::env::temp_dir().join(format!("ks-digest-{}", std::process::id()));
        std::fs::create_dir_all(chart.join("templates"))?;
        std::fs::write(chart.join("templates/a.yaml"), "a")?;
        let values = json!({"port": 1});
        let before = config_digest(&chart, &values)?;
        assert_eq!(before, config_digest(&chart, &values)?);
        assert_ne!(before, config_digest(&chart, &json!({"port": 2}))?);
        std::fs::write(chart.join("templates/a.yaml"), "b")?;
        let edited = config_digest(&chart, &values)?;
        std::fs::remove_dir_all(&chart)?;
        assert_ne!(before, edited);
        Ok(())
    }
}
