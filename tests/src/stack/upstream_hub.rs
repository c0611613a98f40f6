//! Upstream KubeStellar's hub processes for a WDS, run in place of ours for side-by-side
//! benchmarks: the controller-manager (binding and status controllers) and the OCM transport
//! controller, built from the Go module proxy by `deps/build.sh kubestellar`. They find their
//! spaces as under KubeFlex: through ControlPlane objects in the hosting cluster whose status
//! points at a Secret holding the space's kubeconfig.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use super::{FIELD_MANAGER, Stack, wait_for};

/// The label KubeStellar's controllers find a space's type by.
const CONTROL_PLANE_TYPE_LABEL: &str = "kflex.kubestellar.io/cptype";

impl Stack {
    /// Process names of upstream's hub for a WDS.
    pub fn upstream_processes(wds: &str) -> [String; 2] {
        [
            format!("upstream-controller-manager-{wds}"),
            format!("upstream-transport-{wds}"),
        ]
    }

    /// Whether upstream's binaries have been built (`deps/build.sh kubestellar`).
    pub fn has_upstream_hub(&self) -> bool {
        ["kubestellar-controller-manager", "ocm-transport-controller"]
            .iter()
            .all(|b| self.bin(b).exists())
    }

    /// Registers the WDS and its1 as KubeFlex ControlPlanes in the hosting cluster, as
    /// upstream's controller-manager expects to find them.
    async fn register_control_planes(&self, wds: &str) -> anyhow::Result<()> {
        let hosting = self.client("kubeflex").await?;
        let apply = PatchParams::apply(FIELD_MANAGER).force();
        let control_planes = Api::<kube::api::DynamicObject>::all_with(hosting.clone(), &control_plane_resource());
        for (space, cptype, backend) in [(wds, "wds", "k8s"), ("its1", "its", "ocm")] {
            let namespace = format!("{space}-system");
            Api::<Namespace>::all(hosting.clone())
                .patch(
                    &namespace,
                    &apply,
                    &Patch::Apply(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})),
                )
                .await?;
            let kubeconfig = std::fs::read_to_string(self.space_kubeconfig(space))?;
            let secret = json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "admin-kubeconfig", "namespace": namespace},
                "stringData": {"kubeconfig": kubeconfig}});
            Api::<Secret>::namespaced(hosting.clone(), &namespace)
                .patch("admin-kubeconfig", &apply, &Patch::Apply(secret))
                .await?;
            let control_plane = json!({"apiVersion": "tenancy.kflex.kubestellar.org/v1alpha1", "kind": "ControlPlane",
                "metadata": {"name": space, "labels": {CONTROL_PLANE_TYPE_LABEL: cptype}},
                "spec": {"type": backend}});
            control_planes
                .patch(space, &apply, &Patch::Apply(control_plane))
                .await?;
            let status = json!({"apiVersion": "tenancy.kflex.kubestellar.org/v1alpha1", "kind": "ControlPlane",
                "status": {"conditions": [], "observedGeneration": 1,
                           "secretRef": {"name": "admin-kubeconfig", "namespace": namespace,
                                         "key": "kubeconfig", "inClusterKey": "kubeconfig"}}});
            control_planes
                .patch_status(space, &apply, &Patch::Apply(status))
                .await?;
        }
        Ok(())
    }

    /// Stops our hub for the WDS and starts upstream's in its place; returns once upstream's
    /// controller-manager reports ready.
    pub async fn switch_to_upstream_hub(&self, wds: &str) -> anyhow::Result<()> {
        anyhow::ensure!(
            self.has_upstream_hub(),
            "upstream KubeStellar is not built: run `deps/build.sh kubestellar`"
        );
        self.procs.stop(&Self::hub_process(wds), Duration::from_secs(10))?;
        self.register_control_planes(wds).await?;
        let [manager, transport] = Self::upstream_processes(wds);
        let port = |what| self.side_port(what, wds);
        let address = |p: u16| format!("127.0.0.1:{p}");
        let hosting = self.space_kubeconfig("kubeflex").display().to_string();
        self.procs.ensure(
            &manager,
            &self.bin("kubestellar-controller-manager"),
            &[
                format!("--wds-name={wds}"),
                "--its-name=its1".to_string(),
                format!("--metrics-bind-address={}", address(port("upstream-metrics"))),
                format!("--health-probe-bind-address={}", address(port("upstream-probes"))),
                format!("--pprof-bind-address={}", address(port("upstream-pprof"))),
                "-v=2".to_string(),
            ],
            &[("KUBECONFIG", hosting.as_str())],
        )?;
        self.procs.ensure(
            &transport,
            &self.bin("ocm-transport-controller"),
            &[
                format!("--wds-kubeconfig={}", self.space_kubeconfig(wds).display()),
                format!("--transport-kubeconfig={}", self.space_kubeconfig("its1").display()),
                format!("--wds-name={wds}"),
                format!("--metrics-bind-address={}", address(port("upstream-transport-metrics"))),
                format!("--pprof-bind-address={}", address(port("upstream-transport-pprof"))),
                "-v=2".to_string(),
            ],
            &[],
        )?;
        let probes = std::net::SocketAddr::from(([127, 0, 0, 1], port("upstream-probes")));
        wait_for(
            "upstream's controller-manager to be ready",
            Duration::from_secs(120),
            || {
                let alive = self.procs.check_alive(&manager).and(self.procs.check_alive(&transport));
                let ready = std::net::TcpStream::connect(probes).is_ok()
                    && crate::process::http_get(probes, "/readyz").0 == 200;
                std::future::ready(alive.map(|()| ready))
            },
        )
        .await
    }

    /// Stops upstream's hub for the WDS (if running).
    pub fn stop_upstream_hub(&self, wds: &str) -> anyhow::Result<()> {
        self.procs
            .stop_all(&Self::upstream_processes(wds), Duration::from_secs(10))
    }
}

fn control_plane_resource() -> kube::core::ApiResource {
    kube::core::ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk(
        "tenancy.kflex.kubestellar.org",
        "v1alpha1",
        "ControlPlane",
    ))
}
