//! ks-addon: KubeStellar status add-on controller: installs the status agent on every WEC through OCM

mod approver;
mod controller;
mod digest;
mod grants;
mod health;
mod hub_rbac;
mod install;
mod manifests;
mod metrics;
mod registration;
mod settings;

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use ks_shared::cli::{CommonArgs, Process, retry_until_done};
use ks_shared::client::{Limits, limited_client};
use ks_shared::crds::{self, Space};
use ks_shared::names::AGENT_INSTALL_NAMESPACE;
use ks_shared::names::field_manager;

use crate::metrics::Metrics;
use crate::settings::Defaults;

/// The agent image this build installs unless told otherwise.
const DEFAULT_AGENT_IMAGE: &str = concat!("ghcr.io/kubestellar-rs/ks-agent:", env!("CARGO_PKG_VERSION"));

#[derive(Parser, Debug)]
#[command(
    name = "ks-addon",
    version,
    about = "KubeStellar status add-on controller: installs the status agent on every WEC through OCM",
    long_about = "KubeStellar status add-on controller: installs the status agent on every WEC through OCM.\n\n\
Runs on an Inventory and Transport Space (ITS), an OCM hub, doing for the addon-status add-on what \
OCM's add-on framework does: registers the ClusterManagementAddOn addon-status; for each \
ManagedClusterAddOn addon-status (one per cluster namespace, created for every ManagedCluster with \
--install-all) delivers the agent in the ManifestWork addon-addon-status-deploy-0 (namespace, \
ServiceAccount, read-only RBAC, Deployment status-agent), grants the agent a Role in that cluster's \
namespace only, declares the agent's certificate registration, approves exactly the matching CSRs \
from the cluster's registration agent, and sets the add-on's Available condition from the agent \
Deployment's ready replicas.\n\n\
An AddOnDeploymentConfig referenced by a ManagedClusterAddOn (spec.configs) overrides, for that \
cluster: the image (customizedVariables IMAGE), the agent's --http-address (HTTP_ADDRESS), \
where it sends traces (OTLP_ENDPOINT; empty: nowhere) and how (OTLP_PROTOCOL), its logs (LOG_LEVEL, \
LOG_FORMAT), its rate limits (HUB_QPS, HUB_BURST, LOCAL_QPS, LOCAL_BURST), nodePlacement, \
agentInstallNamespace, and registry mirrors (registries)."
)]
struct Args {
    #[command(flatten)]
    common: CommonArgs,

    /// Kubeconfig of the ITS (default: in-cluster, $KUBECONFIG or ~/.kube/config).
    #[arg(long, env = "KS_KUBECONFIG", value_name = "PATH")]
    kubeconfig: Option<PathBuf>,
    /// Context of the ITS in its kubeconfig (default: the current context).
    #[arg(long, env = "KS_CONTEXT", value_name = "NAME")]
    context: Option<String>,
    /// Enable the add-on on every ManagedCluster (create a ManagedClusterAddOn addon-status in
    /// each cluster namespace); without it, enable it per cluster by creating that object.
    #[arg(long, env = "KS_INSTALL_ALL")]
    install_all: bool,
    /// Image of the status agent, unless a cluster's AddOnDeploymentConfig says otherwise.
    #[arg(long, env = "KS_AGENT_IMAGE", default_value = DEFAULT_AGENT_IMAGE, value_name = "IMAGE")]
    agent_image: String,
    /// The most WorkStatuses the agent of one WEC may keep in its mailbox on the ITS (a
    /// ResourceQuota there), so that one WEC cannot fill the ITS's etcd: `auto` sizes it from the
    /// objects delivered to that WEC (twice as many and 64 more, rounded up to a power of two, at
    /// least 128), a number fixes it, 0 sets none. Needs the ITS's kube-controller-manager to run its
    /// resourcequota controller: until that controller has counted, the apiserver refuses every
    /// WorkStatus in the namespace (set 0 on an ITS without one).
    #[arg(
        long,
        env = "KS_MAX_WORK_STATUSES",
        default_value = "auto",
        value_name = "auto|COUNT"
    )]
    max_work_statuses: hub_rbac::WorkStatusQuota,
    /// Namespace of the agent on each WEC, unless a cluster's AddOnDeploymentConfig says otherwise.
    #[arg(long, env = "KS_AGENT_INSTALL_NAMESPACE", default_value = AGENT_INSTALL_NAMESPACE, value_name = "NAMESPACE")]
    agent_install_namespace: String,
    /// Where the agents send their traces (OTLP/gRPC, e.g. http://jaeger-collector.tracing:4317),
    /// unless a cluster's AddOnDeploymentConfig says otherwise; unset: agents do not trace.
    #[arg(long, env = "KS_AGENT_OTLP_ENDPOINT", value_name = "URL")]
    agent_otlp_endpoint: Option<String>,
}

/// Where /metrics, /healthz and /readyz are served unless --http-address says otherwise.
const DEFAULT_HTTP_ADDRESS: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED), 9280);

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let defaults = Defaults {
        max_work_statuses: args.max_work_statuses,
        image: args.agent_image.clone(),
        install_namespace: args.agent_install_namespace.clone(),
        otlp_endpoint: args.agent_otlp_endpoint.clone(),
    };
    settings::resolve(&defaults, None).context("--agent-image / --agent-install-namespace / --agent-otlp-endpoint")?;
    let mut process = Process::start("ks-addon", None, &args.common)?;
    let metrics = Metrics::register(&mut process.registry);
    let ready = process.readiness.gate("addon-controller");
    let serving = process
        .serve(args.common.http_address.unwrap_or(DEFAULT_HTTP_ADDRESS))
        .await?;

    let fence = args.common.fence();
    let (kubeconfig, context) = (args.kubeconfig.as_deref(), args.context.as_deref());
    let its = limited_client(
        kubeconfig,
        context,
        &Limits {
            fence: fence.clone(),
            ..Limits::none()
        },
    )
    .await
    .context("ITS client")?;
    let its_lease = limited_client(kubeconfig, context, &Limits::none())
        .await
        .context("ITS client")?;
    let shutdown = process.shutdown.clone();
    let work = |token: tokio_util::sync::CancellationToken| {
        let (its, metrics) = (its.clone(), metrics.clone());
        async move {
            // Only the leader writes. Alive but not ready while the ITS is unreachable: no crash
            // loop, /readyz says why.
            let register = || install::register_addon(&its, &metrics);
            if retry_until_done("registering the ClusterManagementAddOn", &token, register)
                .await
                .is_none()
            {
                return;
            }
            tracing::info!(image = %defaults.image, namespace = %defaults.install_namespace, "add-on registered");
            // Helm installs a chart's CRDs once and never upgrades them: the WorkStatus CRD is
            // brought to this version's, or an upgraded agent's new fields would be pruned and
            // written again and again. The apply creates it when missing, as the chart would (it
            // is ours: RBAC allows no other CRD name), and takes only the fields our schema
            // declares; what Helm or others set beside them stays theirs.
            let crds = || crds::install(&its, Space::Its, field_manager::ADDON);
            if retry_until_done("installing the WorkStatus CRD into the ITS", &token, crds)
                .await
                .is_none()
            {
                return;
            }
            let mut tasks = vec![tokio::spawn(approver::run(its.clone(), metrics.clone(), token.clone()))];
            if args.install_all {
                tasks.push(tokio::spawn(install::install_on_every_cluster(
                    its.clone(),
                    metrics.clone(),
                    token.clone(),
                )));
            }
            if let Err(err) = controller::run(its, defaults, metrics, ready, token.clone()).await {
                ks_shared::crash::exit_on_error("the add-on controller", &format!("{err:#}"));
            }
            token.cancel();
            for task in tasks {
                let _ = task.await;
            }
        }
    };
    if args.common.leader_elect {
        let lease = args.common.lease("ks-addon");
        ks_shared::leader::run_as_leader(its_lease, &lease, &fence, shutdown.clone(), work).await?;
    } else {
        work(shutdown.clone()).await;
    }
    shutdown.cancel();
    serving.stopped().await?;
    Ok(())
}
