//! KubeFlex in the stack: its operator runs against the `kubeflex` hosting apiserver, as the
//! KubeFlex chart would run it there. The stack's ITS is adopted as an `external` ControlPlane
//! (what `kflex adopt` does), so a hub installed by the hub chart finds it through KubeFlex; a WDS
//! comes the same way, from the chart's values (the spare `wds2` apiserver is there for that).

use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use ks_shared::names::KUBEFLEX_CP_TYPE_LABEL;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, Preconditions};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;

use super::{FIELD_MANAGER, SPARE_WDS, Stack, wait_for};

/// The process name of the KubeFlex operator.
pub const OPERATOR_PROCESS: &str = "kubeflex-operator";
/// Where the bootstrap Secrets of the spaces the stack adopts go (KubeFlex's own namespace).
pub const BOOTSTRAP_NAMESPACE: &str = "kubeflex-system";
/// The key of a bootstrap Secret that KubeFlex reads by default.
pub const BOOTSTRAP_KEY: &str = "kubeconfig-incluster";

/// KubeFlex's ControlPlane resource.
pub fn control_planes() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("tenancy.kflex.kubestellar.org", "v1alpha1", "ControlPlane"),
        "controlplanes",
    )
}

/// Helm's annotations of what a release installed.
const HELM_RELEASE_NAME: &str = "meta.helm.sh/release-name";
const HELM_RELEASE_NAMESPACE: &str = "meta.helm.sh/release-namespace";

/// Whether a release in `namespace` was a test run's that has ended, or is this process's
/// (`me`): tests install into namespaces `<test>-<pid>-<n>` (`Ctx::namespace`); `alive` says
/// whether a process runs.
fn left_by_an_ended_test(namespace: &str, me: u32, alive: impl Fn(u32) -> bool) -> bool {
    let mut parts = namespace.rsplitn(3, '-');
    let (Some(n), Some(pid), Some(test)) = (parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    let Ok(pid) = pid.parse::<u32>() else {
        return false;
    };
    !test.is_empty() && n.parse::<u32>().is_ok() && (pid == me || !alive(pid))
}

/// How long KubeFlex and the garbage collector may take to remove a ControlPlane's objects.
const GONE: Duration = Duration::from_secs(120);

/// The namespace KubeFlex keeps a ControlPlane's objects in.
pub fn system_namespace(control_plane: &str) -> String {
    format!("{control_plane}-system")
}

impl Stack {
    pub(super) fn start_kubeflex_operator(&self) -> anyhow::Result<()> {
        let args = [
            format!("--kubeconfig={}", self.space_kubeconfig("kubeflex").display()),
            "--metrics-bind-address=0".to_string(),
            format!(
                "--health-probe-bind-address=127.0.0.1:{}",
                self.side_port("kubeflex", "kubeflex")
            ),
        ];
        self.procs
            .ensure(OPERATOR_PROCESS, &self.bin("kubeflex-controller-manager"), &args, &[])?;
        Ok(())
    }

    /// A bootstrap Secret for adopting `space`: its admin kubeconfig under [`BOOTSTRAP_KEY`], at
    /// the address Pods reach it by ([`Stack::api_host`]), as the hub's Pods read it.
    pub fn bootstrap_secret(&self, space: &str, namespace: &str, name: &str) -> anyhow::Result<serde_json::Value> {
        let kubeconfig = self.space_kubeconfig_at(space, self.api_host())?;
        Ok(json!({"apiVersion": "v1", "kind": "Secret",
                  "metadata": {"name": name, "namespace": namespace},
                  "stringData": {BOOTSTRAP_KEY: kubeconfig}}))
    }

    /// Adopts `space` as the `external` ControlPlane of the same name and `cp_type`, and waits
    /// until KubeFlex has written its kubeconfig Secret. KubeFlex deletes the bootstrap Secret
    /// once done, so it is written only while the ControlPlane has no kubeconfig yet.
    pub(super) async fn adopt(&self, space: &str, cp_type: &str) -> anyhow::Result<()> {
        let hosting = self.client("kubeflex").await?;
        let params = PatchParams::apply(FIELD_MANAGER).force();
        let secrets: Api<Secret> = Api::namespaced(hosting.clone(), &system_namespace(space));
        let adopted = secrets.get_opt("admin-kubeconfig").await?.is_some();
        if !adopted {
            let namespace = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": BOOTSTRAP_NAMESPACE}});
            Api::<Namespace>::all(hosting.clone())
                .patch(BOOTSTRAP_NAMESPACE, &params, &Patch::Apply(&namespace))
                .await?;
            let bootstrap = format!("{space}-bootstrap");
            Api::<Secret>::namespaced(hosting.clone(), BOOTSTRAP_NAMESPACE)
                .patch(
                    &bootstrap,
                    &params,
                    &Patch::Apply(&self.bootstrap_secret(space, BOOTSTRAP_NAMESPACE, &bootstrap)?),
                )
                .await?;
            let control_plane = json!({
                "apiVersion": "tenancy.kflex.kubestellar.org/v1alpha1", "kind": "ControlPlane",
                "metadata": {"name": space, "labels": {KUBEFLEX_CP_TYPE_LABEL: cp_type}},
                "spec": {"type": "external", "backend": "shared",
                         "bootstrapSecretRef": {"name": bootstrap, "namespace": BOOTSTRAP_NAMESPACE,
                                                "inClusterKey": BOOTSTRAP_KEY}}});
            Api::<DynamicObject>::all_with(hosting.clone(), &control_planes())
                .patch(space, &params, &Patch::Apply(&control_plane))
                .await?;
        }
        wait_for(
            &format!("KubeFlex to adopt {space}"),
            Duration::from_secs(120),
            || async {
                self.procs.check_alive(OPERATOR_PROCESS)?;
                Ok(secrets.get_opt("admin-kubeconfig").await?.is_some())
            },
        )
        .await
    }
}

impl Stack {
    /// Makes the spare WDS free to be adopted again: deletes its ControlPlane if a test run that
    /// has ended (or this one) left it, then waits until what KubeFlex made for it is gone
    /// ([`Stack::spare_wds_objects_gone`]). A ControlPlane anyone else holds (`make demo`'s
    /// release, a user's, a test running beside this one) is refused, saying whose it is: only
    /// the object looked at is deleted (its UID a precondition).
    pub async fn free_spare_wds(&self) -> anyhow::Result<()> {
        let hosting = self.client("kubeflex").await?;
        let control_planes = Api::<DynamicObject>::all_with(hosting, &control_planes());
        if let Some(left) = control_planes.get_opt(SPARE_WDS).await? {
            let release = (
                left.annotations().get(HELM_RELEASE_NAME).cloned().unwrap_or_default(),
                left.annotations()
                    .get(HELM_RELEASE_NAMESPACE)
                    .cloned()
                    .unwrap_or_default(),
            );
            anyhow::ensure!(
                left_by_an_ended_test(&release.1, std::process::id(), |pid| {
                    Path::new(&format!("/proc/{pid}")).exists()
                }),
                "the spare WDS {SPARE_WDS} is held by Helm release {:?} in namespace {:?} of the kubeflex \
                 context, not a test's leftover: uninstall it first (e.g. `helm --kube-context kubeflex \
                 -n kubestellar uninstall kubestellar` for make demo's)",
                release.0,
                release.1
            );
            let params = DeleteParams {
                preconditions: Some(Preconditions {
                    uid: left.uid(),
                    resource_version: None,
                }),
                ..Default::default()
            };
            control_planes.delete(SPARE_WDS, &params).await?;
            wait_for("the spare WDS's ControlPlane to go", GONE, || async {
                Ok(control_planes.get_opt(SPARE_WDS).await?.is_none())
            })
            .await?;
        }
        self.spare_wds_objects_gone().await
    }

    /// Waits until what KubeFlex made for the spare WDS's ControlPlane is gone: its namespace, and
    /// the hook's cluster-scoped RBAC (garbage-collected through owner references KubeFlex sets
    /// when the ControlPlane goes; a new ControlPlane before then would get its hub's RBAC deleted).
    pub async fn spare_wds_objects_gone(&self) -> anyhow::Result<()> {
        let hosting = self.client("kubeflex").await?;
        let namespaces: Api<Namespace> = Api::all(hosting.clone());
        let roles: Api<ClusterRole> = Api::all(hosting.clone());
        let bindings: Api<ClusterRoleBinding> = Api::all(hosting);
        let rbac = format!("{SPARE_WDS}-ks-hub");
        wait_for("what KubeFlex made for the spare WDS to go", GONE, || async {
            Ok(namespaces.get_opt(&system_namespace(SPARE_WDS)).await?.is_none()
                && roles.get_opt(&rbac).await?.is_none()
                && bindings.get_opt(&rbac).await?.is_none())
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::left_by_an_ended_test;

    #[test]
    fn only_an_ended_test_runs_release_is_a_leftover() {
        let gone = |_| false;
        let running = |_| true;
        let namespace = "the-kubeflex-path-runs-as-containers-4242-3";
        assert!(left_by_an_ended_test(namespace, 1, gone));
        assert!(!left_by_an_ended_test(namespace, 1, running), "a test running beside");
        assert!(left_by_an_ended_test(namespace, 4242, running), "this run's own");
        // make demo's release, a user's, or none at all.
        for held in ["kubestellar", "", "team-a", "prod-7", "x-y-z"] {
            assert!(!left_by_an_ended_test(held, 1, gone), "{held}");
        }
    }
}
