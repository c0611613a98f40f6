//! ks-agent: KubeStellar status add-on agent: reports the status of delivered objects from a WEC.

mod changes;
mod controller;
mod delivered;
mod existing;
mod informers;
mod kinds;
mod metrics;
mod naming;
mod objects;
mod own_writes;
mod report;
mod reporters;
mod rollouts;
mod tracker;

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use ks_shared::cli::{CommonArgs, Process};
use ks_shared::client::{Limits, limited_client};

// Returns freed memory to the system (see the workspace's Cargo.toml; its options are in
// `.cargo/config.toml`).
#[cfg(feature = "jemalloc")]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[derive(Parser, Debug)]
#[command(
    name = "ks-agent",
    version,
    about = "KubeStellar status add-on agent: reports the status of delivered objects from a WEC",
    long_about = "KubeStellar status add-on agent: reports the status of delivered objects from a WEC\n\n\
Runs on each Workload Execution Cluster (WEC). It follows the AppliedManifestWorks that the OCM \
work agent records, watches the objects they delivered, and keeps one WorkStatus per object of a \
KubeStellar ManifestWork in the WEC's mailbox namespace on the hub (the ITS): the object's .status, \
the ManifestWork's labels, and which WDS generation has been applied (statusDetails). It writes only \
when something changed.\n\n\
The WEC is reached with --kubeconfig/--context, else $KUBECONFIG or ~/.kube/config with --context, \
else the in-cluster config. It needs get/list/watch on AppliedManifestWorks and on the delivered \
resources there, and on the hub get/list/watch on ManifestWorks and full access to WorkStatuses \
(and workstatuses/status) in the mailbox namespace only."
)]
struct Args {
    /// Kubeconfig file for the hub (the ITS) holding the WEC's mailbox namespace.
    #[arg(long, env = "KS_HUB_KUBECONFIG", value_name = "PATH")]
    hub_kubeconfig: PathBuf,

    /// Context in --hub-kubeconfig (default: its current context).
    #[arg(long, env = "KS_HUB_CONTEXT", value_name = "CONTEXT")]
    hub_context: Option<String>,

    /// The WEC's name in the inventory: its mailbox namespace on the hub.
    #[arg(long, env = "KS_CLUSTER_NAME", value_name = "NAME")]
    cluster_name: String,

    /// Kubeconfig file for the WEC (default: in-cluster config, else $KUBECONFIG or ~/.kube/config).
    #[arg(long, env = "KS_KUBECONFIG", value_name = "PATH")]
    kubeconfig: Option<PathBuf>,

    /// Context for the WEC in its kubeconfig (default: the current context).
    #[arg(long, env = "KS_CONTEXT", value_name = "CONTEXT")]
    context: Option<String>,

    /// Requests per second to the hub on average (token bucket; 0 = unlimited).
    #[arg(long, env = "KS_HUB_QPS", default_value_t = 50.0, value_name = "QPS", value_parser = ks_shared::cli::parse_qps)]
    hub_qps: f32,

    /// Requests to the hub allowed at once above --hub-qps.
    #[arg(long, env = "KS_HUB_BURST", default_value_t = 100, value_name = "N")]
    hub_burst: u32,

    /// Requests per second to the WEC on average (token bucket; 0 = unlimited). Mostly the
    /// list and watch of each delivered resource and discovery.
    #[arg(long, env = "KS_LOCAL_QPS", default_value_t = 20.0, value_name = "QPS", value_parser = ks_shared::cli::parse_qps)]
    local_qps: f32,

    /// Requests to the WEC allowed at once above --local-qps.
    #[arg(long, env = "KS_LOCAL_BURST", default_value_t = 40, value_name = "N")]
    local_burst: u32,

    /// Seconds between looks at the hub kubeconfig and the certificate files it names. When they
    /// change (OCM rotates the add-on's client certificate) the agent stops, to be restarted with
    /// them.
    #[arg(long, env = "KS_HUB_CREDENTIALS_CHECK", default_value_t = 5, value_name = "SECONDS",
          value_parser = clap::value_parser!(u64).range(1..))]
    hub_credentials_check: u64,

    #[command(flatten)]
    common: CommonArgs,
}

/// Where /metrics, /healthz and /readyz are served unless --http-address says otherwise.
const DEFAULT_HTTP_ADDRESS: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED), 8080);

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let mut process = Process::start("ks-agent", Some(&args.cluster_name), &args.common)?;
    #[cfg(feature = "jemalloc")]
    ks_shared::allocator::register(&mut process.registry);
    let metrics = metrics::Metrics::register(&mut process.registry);
    let ready = process.readiness.gate("appliedmanifestworks");
    let serving = process
        .serve(args.common.http_address.unwrap_or(DEFAULT_HTTP_ADDRESS))
        .await?;

    let fence = args.common.fence();
    let (kubeconfig, context) = (args.kubeconfig.as_deref(), args.context.as_deref());
    let wec_limits = Limits {
        qps: args.local_qps,
        burst: args.local_burst,
        fence: fence.clone(),
    };
    let wec = limited_client(kubeconfig, context, &wec_limits)
        .await
        .context("the WEC")?;
    let wec_lease = limited_client(kubeconfig, context, &Limits::none())
        .await
        .context("the WEC")?;
    // Taken before the client reads them.
    let rotated = ks_shared::credentials::changed(
        args.hub_kubeconfig.clone(),
        std::time::Duration::from_secs(args.hub_credentials_check),
    );
    let hub_limits = Limits {
        qps: args.hub_qps,
        burst: args.hub_burst,
        fence: fence.clone(),
    };
    let hub = limited_client(Some(&args.hub_kubeconfig), args.hub_context.as_deref(), &hub_limits)
        .await
        .context("the hub")?;
    tracing::info!(cluster = %args.cluster_name, "reporting status to the hub's mailbox namespace");
    let shutdown = process.shutdown.clone();
    tokio::spawn(async move {
        rotated.await;
        tracing::warn!("the hub kubeconfig or a certificate it names changed; stopping, to be restarted with them");
        shutdown.cancel();
    });

    let mailbox = args.cluster_name.clone();
    let work = |token| controller::run(wec.clone(), hub, mailbox, metrics, ready, token);
    if args.common.leader_elect {
        ks_shared::leader::run_as_leader(
            wec_lease,
            &args.common.lease(ks_shared::names::AGENT_LEASE),
            &fence,
            process.shutdown.clone(),
            work,
        )
        .await?;
    } else {
        work(process.shutdown.clone()).await;
    }
    serving.stopped().await?;
    Ok(())
}
