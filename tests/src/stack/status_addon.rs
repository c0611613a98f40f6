//! The status add-on as users install it: `helm install` of `charts/ks-status-addon` into the
//! ITS. The stand-in kubelet on its1 runs the chart's ks-addon; through OCM (the chart's
//! Placement, OCM's addon-manager, then ks-addon's ManifestWork) every WEC gets its agent, which
//! tests find by its local Pod's process and the address it logs.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::Api;
use serde_json::json;

use super::{JAEGER_OTLP_GRPC, Stack, kubelet, wait_for};

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
    /// Installs (or upgrades) the status add-on chart on its1 with the stack's settings: its
    /// metrics port and traces from ks-addon and every agent to the stack's Jaeger (and, by the
    /// chart's default, a WorkStatus quota in every mailbox sized from what is delivered there).
    pub(super) async fn install_status_addon(&self) -> anyhow::Result<()> {
        let repo = self.state.parent().context("state directory has a parent")?;
        let chart = repo.join(ADDON_CHART);
        let otlp = format!("http://127.0.0.1:{JAEGER_OTLP_GRPC}");
        let mut values = json!({
            "controller": {"port": self.addon_port(), "otlpEndpoint": otlp},
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

    /// Waits until the add-on's quota in every WEC's mailbox counts WorkStatuses: until then the
    /// ITS refuses every WorkStatus there ("status unknown for quota"), which would hold status
    /// back for the first tests.
    pub(super) async fn wait_mailbox_quotas(&self) -> anyhow::Result<()> {
        let its = self.client("its1").await?;
        for wec in self.wec_names() {
            let quotas: Api<k8s_openapi::api::core::v1::ResourceQuota> = Api::namespaced(its.clone(), &wec);
            wait_for(
                &format!("the WorkStatus quota in {wec}'s mailbox to count"),
                Duration::from_secs(180),
                || async {
                    self.procs.check_alive("kubelet-its1")?;
                    let quota = quotas.get_opt("addon-status-workstatuses").await?;
                    let used = quota.and_then(|q| q.status).and_then(|s| s.used).unwrap_or_default();
                    Ok(used.contains_key("count/workstatuses.control.kubestellar.io"))
                },
            )
            .await?;
        }
        Ok(())
    }

    /// Where the status add-on controller serves /metrics, /healthz and /readyz.
    pub fn addon_port(&self) -> u16 {
        self.side_port("ks-addon", "its1")
    }

    /// Waits until the status agent the stack runs for `wec` answers /readyz (it leads and has
    /// listed the AppliedManifestWorks); returns its process id.
    pub async fn wait_agent_ready(&self, wec: &str, deadline: Duration) -> anyhow::Result<u32> {
        let name = Self::agent_process(wec);
        let mut ready = None;
        wait_for(&format!("the status agent on {wec} to be ready"), deadline, || {
            ready = self.procs.running(&name).filter(|_| {
                self.agent_address(wec).is_some_and(|address| {
                    std::net::TcpStream::connect(address).is_ok()
                        && crate::process::http_get(address, "/readyz").0 == 200
                })
            });
            std::future::ready(Ok(ready.is_some()))
        })
        .await?;
        ready.context("ready")
    }

    /// Where the status agent for `wec` serves /metrics, /healthz and /readyz, as it last said.
    pub fn agent_address(&self, wec: &str) -> Option<std::net::SocketAddr> {
        // The log keeps earlier runs: the last address announced is the current one.
        let text = std::fs::read_to_string(self.procs.log_file(&Self::agent_process(wec))).ok()?;
        let line = text.lines().rev().find(|l| l.contains("serving /metrics"))?;
        Some(crate::process::address_in(line))
    }

    /// The process name of the status agent the stack runs for `wec`.
    pub fn agent_process(wec: &str) -> String {
        kubelet::pod_process(
            wec,
            ks_shared::names::AGENT_INSTALL_NAMESPACE,
            ks_shared::names::STATUS_AGENT_DEPLOYMENT,
        )
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

/// The key the add-on's mailbox quota limits.
pub const QUOTA_KEY: &str = "count/workstatuses.control.kubestellar.io";

/// Waits until the add-on's quota on WorkStatuses in `wec`'s mailbox on the ITS `its` is sized
/// from what KubeStellar delivers there (the chart's default, `auto`): at least two WorkStatuses
/// per object and 64 more, at most twice that or 128, and a power of two, so that it changes only
/// when the deliveries double. Returns that limit and the objects delivered.
pub async fn sized_mailbox_quota(its: &kube::Client, wec: &str, deadline: Duration) -> anyhow::Result<(u64, u64)> {
    use k8s_openapi::api::core::v1::ResourceQuota;
    use ks_shared::names::is_kubestellar_label;
    use ks_shared::ocm::ManifestWork;
    use kube::ResourceExt;
    use kube::api::ListParams;

    let quotas: Api<ResourceQuota> = Api::namespaced(its.clone(), wec);
    let works: Api<ManifestWork> = Api::namespaced(its.clone(), wec);
    let seen = std::sync::Mutex::new((None, 0));
    let what = format!("{wec}'s WorkStatus quota to be sized from what is delivered there");
    let waited = wait_for(&what, deadline, || async {
        let hard = quotas
            .get_opt("addon-status-workstatuses")
            .await?
            .and_then(|q| q.spec?.hard?.remove(QUOTA_KEY))
            .and_then(|q| q.0.parse::<u64>().ok());
        let delivered: u64 = works
            .list(&ListParams::default())
            .await?
            .items
            .iter()
            .filter(|w| w.labels().keys().any(|k| is_kubestellar_label(k)))
            .map(|w| w.spec.workload.manifests.len() as u64)
            .sum();
        *seen.lock().unwrap() = (hard, delivered);
        let least = 2 * delivered + 64;
        Ok(hard.is_some_and(|h| h.is_power_of_two() && h >= least && (h < 2 * least || h == 128)))
    })
    .await;
    let (hard, delivered) = *seen.lock().unwrap();
    waited.with_context(|| format!("last seen: quota {hard:?}, {delivered} objects delivered"))?;
    Ok((hard.unwrap_or_default(), delivered))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_addon_process_is_the_local_pod_of_the_chart_deployment() {
        assert_eq!(
            ADDON_PROCESS,
            kubelet::pod_process("its1", ADDON_NAMESPACE, ADDON_RELEASE)
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
