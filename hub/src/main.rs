//! ks-hub: the binding, transport and status controllers for one WDS.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Parser;
use ks_hub::informers::{InformerMetrics, ResourceFilter};
use ks_hub::kubeflex;
use ks_shared::cli::{CommonArgs, Process, retry_until_done};
use ks_shared::client::{Limits, limited_client, limited_client_from_text};
use ks_shared::crds::{self, Space};
use ks_shared::fence::Fence;
use ks_shared::names::field_manager;
use ks_shared::names::{CP_TYPE_ITS, CP_TYPE_WDS};
use kube::Client;

// Returns freed memory to the system (see the workspace's Cargo.toml; its options are in
// `.cargo/config.toml`).
#[cfg(feature = "jemalloc")]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

const ABOUT: &str = "KubeStellar hub: the binding, transport and status controllers for one WDS";

#[derive(Parser, Debug)]
#[command(
    name = "ks-hub",
    version,
    about = ABOUT,
    long_about = "KubeStellar hub: the binding, transport and status controllers for one WDS.\n\n\
Runs beside a Workload Definition Space (WDS). The binding controller watches every workload \
resource of the WDS and the WECs (ManagedClusters) of the ITS, and turns each BindingPolicy into a \
Binding of the same name listing the selected objects and WECs, with the policy's status showing \
errors and Ready/Synced conditions. It installs the KubeStellar CRDs into the WDS at start-up. \
The transport controller turns each Binding into ManifestWorks in the WECs' mailbox namespaces of \
the ITS. The status controller returns the status the WECs report (WorkStatus objects in the ITS) \
into the WDS objects, singleton or aggregated over WECs, and computes CombinedStatuses from \
StatusCollectors."
)]
struct Args {
    #[command(flatten)]
    common: CommonArgs,

    /// Kubeconfig of the WDS (default: in-cluster, $KUBECONFIG or ~/.kube/config).
    #[arg(long, env = "KS_WDS_KUBECONFIG", value_name = "PATH")]
    wds_kubeconfig: Option<PathBuf>,
    /// Context of the WDS in its kubeconfig (default: the current context).
    #[arg(long, env = "KS_WDS_CONTEXT", value_name = "NAME")]
    wds_context: Option<String>,
    /// Kubeconfig of the ITS, the OCM hub holding the ManagedClusters.
    #[arg(long, env = "KS_ITS_KUBECONFIG", value_name = "PATH")]
    its_kubeconfig: Option<PathBuf>,
    /// Context of the ITS in its kubeconfig.
    #[arg(long, env = "KS_ITS_CONTEXT", value_name = "NAME")]
    its_context: Option<String>,
    /// Name of this WDS, a DNS label unique per ITS; it labels what this process writes into the
    /// ITS. In KubeFlex mode, the name of its ControlPlane.
    #[arg(long, env = "KS_WDS_NAME", value_name = "NAME", value_parser = ks_shared::cli::parse_wds_name)]
    wds_name: String,
    /// KubeFlex mode: find the WDS and ITS through KubeFlex ControlPlanes (label
    /// kflex.kubestellar.io/cptype=wds|its) and their kubeconfig Secrets in the hosting cluster.
    #[arg(long, env = "KS_KUBEFLEX", conflicts_with_all = ["wds_kubeconfig", "wds_context", "its_kubeconfig", "its_context"])]
    kubeflex: bool,
    /// Kubeconfig of the KubeFlex hosting cluster (default: in-cluster, $KUBECONFIG or ~/.kube/config).
    #[arg(long, env = "KS_KUBEFLEX_KUBECONFIG", value_name = "PATH", requires = "kubeflex")]
    kubeflex_kubeconfig: Option<PathBuf>,
    /// Context of the hosting cluster in its kubeconfig.
    #[arg(long, env = "KS_KUBEFLEX_CONTEXT", value_name = "NAME", requires = "kubeflex")]
    kubeflex_context: Option<String>,
    /// In KubeFlex mode, the ITS ControlPlane's name (needed when there are several; empty is
    /// the same as unset).
    #[arg(long, env = "KS_ITS_NAME", value_name = "NAME", requires = "kubeflex")]
    its_name: Option<String>,
    /// Controllers to run, comma-separated: `binding`, `transport`, `status`. Each runs alone too
    /// (e.g. two processes, one with `binding`, one with `transport,status`).
    #[arg(
        long,
        env = "KS_CONTROLLERS",
        default_value = "binding,transport,status",
        value_delimiter = ','
    )]
    controllers: Vec<String>,
    /// Most bytes of objects in one ManifestWork (upstream's --max-size-wrapped).
    #[arg(long, env = "KS_MAX_SIZE_WRAPPED", default_value_t = 512_000, value_name = "BYTES")]
    max_size_wrapped: usize,
    /// Most objects in one ManifestWork (upstream's --max-num-wrapped); 1 names each
    /// ManifestWork after its object's UID, as upstream's chart does.
    #[arg(long, env = "KS_MAX_NUM_WRAPPED", default_value_t = 512_000, value_name = "N",
          value_parser = clap::value_parser!(u64).range(1..))]
    max_num_wrapped: u64,
    /// Only watch these API groups, comma-separated (`""` is the core group, e.g. `,apps`);
    /// empty watches every group.
    #[arg(long, env = "KS_API_GROUPS", default_value = "", value_name = "GROUPS")]
    api_groups: String,
    /// Average requests per second to the WDS (0: unlimited).
    #[arg(long, env = "KS_WDS_QPS", default_value_t = 50.0, value_name = "QPS", value_parser = ks_shared::cli::parse_qps)]
    wds_qps: f32,
    /// Requests to the WDS allowed at once above --wds-qps.
    #[arg(long, env = "KS_WDS_BURST", default_value_t = 100, value_name = "N")]
    wds_burst: u32,
    /// Average requests per second to the ITS (0: unlimited).
    #[arg(long, env = "KS_ITS_QPS", default_value_t = 20.0, value_name = "QPS", value_parser = ks_shared::cli::parse_qps)]
    its_qps: f32,
    /// Requests to the ITS allowed at once above --its-qps.
    #[arg(long, env = "KS_ITS_BURST", default_value_t = 40, value_name = "N")]
    its_burst: u32,
    /// Milliseconds a policy's changes must pause before its Binding is written: a lone change
    /// waits this long, a burst (objects created one after another) until it stops: a pause of
    /// 4 times the typical gap between the objects joining or leaving the policy's selection,
    /// from this up to 4 times this; in a fast stream of them (at most 2 times this apart on
    /// average), also a quarter of how long it has lasted, up to 60 times this, and at least 2
    /// times this per object so far, up to 30 times this.
    #[arg(long, env = "KS_BINDING_DEBOUNCE_MS", default_value_t = 50, value_name = "MS")]
    binding_debounce_ms: u64,
    /// The most milliseconds a policy's changes first wait while they keep coming: a burst
    /// longer than this is written after this (4 times this in a fast stream, such as the objects
    /// of a file `kubectl apply` creates), then after twice as long each time (up to 16×).
    #[arg(long, env = "KS_BINDING_DEBOUNCE_MAX_MS", default_value_t = 2000, value_name = "MS")]
    binding_debounce_max_ms: u64,
    /// Seconds start-up waits for every workload resource's cache to fill. A resource whose LIST
    /// keeps failing (e.g. a CRD whose conversion webhook is down) does not hold the others back:
    /// its objects stay as the Bindings list them, and it is logged and counted in
    /// kubestellar_workload_unsynced_resources until its cache fills.
    #[arg(long, env = "KS_CACHE_SYNC_TIMEOUT", default_value_t = 30, value_name = "SECONDS")]
    cache_sync_timeout: u64,
    /// MiB of data the process that evaluates StatusCollectors' CEL may hold. Each evaluation is
    /// estimated and refused beyond its budget before it runs (64 MiB built for one object); this
    /// bounds what the estimate cannot see: the process is ended, the evaluation reported as
    /// failed on the collector, and a new one started.
    #[arg(long, env = "KS_CEL_MEMORY", default_value_t = 256, value_name = "MIB",
          value_parser = clap::value_parser!(u64).range(64..))]
    cel_memory: u64,
    /// Seconds that process may take for one object's evaluations before it is stopped and they
    /// are reported as failed.
    #[arg(long, env = "KS_CEL_DEADLINE", default_value_t = 10, value_name = "SECONDS",
          value_parser = clap::value_parser!(u64).range(1..))]
    cel_deadline: u64,
}

/// What `--controllers` can name.
const CONTROLLERS: [&str; 3] = ["binding", "transport", "status"];

/// Where /metrics, /healthz and /readyz are served unless --http-address says otherwise.
const DEFAULT_HTTP_ADDRESS: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED), 8080);

fn main() -> anyhow::Result<()> {
    // Started by the status controller to evaluate CEL (`status::sandbox`), not by users.
    let mut command = std::env::args().skip(1);
    if command.next().as_deref() == Some(ks_hub::status::sandbox::WORKER_COMMAND) {
        let memory = command
            .next()
            .and_then(|m| m.parse().ok())
            .context("the worker's memory limit")?;
        return ks_hub::status::sandbox::serve(memory);
    }
    // The status controller evaluates users' CEL expressions on these threads: the third-party
    // evaluator recurses deeply, with large frames (see `CEL_STACK`).
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_stack_size(ks_hub::status::collector::CEL_STACK)
        .build()?
        .block_on(run())
}

async fn run() -> anyhow::Result<()> {
    let args = Args::parse();
    if args.controllers.iter().all(|c| c.is_empty()) {
        bail!("--controllers: name at least one of binding, transport, status");
    }
    if let Some(unknown) = args.controllers.iter().find(|c| !CONTROLLERS.contains(&c.as_str())) {
        bail!("--controllers: {unknown:?} is not available in this build (available: binding, transport, status)");
    }
    let with = |name: &str| args.controllers.iter().any(|c| c == name);
    let mut process = Process::start("ks-hub", Some(&args.wds_name), &args.common)?;
    #[cfg(feature = "jemalloc")]
    ks_shared::allocator::register(&mut process.registry);
    let binding_metrics = ks_hub::binding::Metrics::default();
    binding_metrics.register(&mut process.registry, &ks_hub::binding::METRICS);
    let status_metrics = ks_hub::status::Metrics::default();
    status_metrics.register(&mut process.registry);
    let transport_metrics = ks_hub::transport::controller::Metrics::default();
    transport_metrics.register(&mut process.registry);
    let informer_metrics = InformerMetrics::default();
    informer_metrics.register(&mut process.registry);
    let ready = process.readiness.gate("hub-controllers");
    let serving = process
        .serve(args.common.http_address.unwrap_or(DEFAULT_HTTP_ADDRESS))
        .await?;

    let shutdown = process.shutdown.clone();
    let fence = args.common.fence();
    let Some(Spaces { wds, its, wds_lease }) = spaces(&args, &fence, &shutdown).await? else {
        return Ok(serving.stopped().await?);
    };
    let this_program = std::env::current_exe().context("this executable, to run the CEL worker")?;
    let settings = ks_hub::Settings {
        filter: ResourceFilter::from_api_groups(&args.api_groups),
        cache_sync_timeout: Duration::from_secs(args.cache_sync_timeout),
        informer_metrics,
        binding: with("binding").then(|| ks_hub::binding::controller::Settings {
            debounce: Duration::from_millis(args.binding_debounce_ms),
            debounce_max: Duration::from_millis(args.binding_debounce_max_ms),
            metrics: binding_metrics,
        }),
        status: with("status").then(|| ks_hub::status::controller::Settings {
            wds_name: args.wds_name.clone(),
            after_transport: with("transport"),
            metrics: status_metrics,
            sandbox: ks_hub::status::sandbox::Sandbox::new(
                this_program.clone(),
                ks_hub::status::sandbox::Limits {
                    memory: args.cel_memory << 20,
                    deadline: Duration::from_secs(args.cel_deadline),
                },
            ),
        }),
        transport: with("transport").then(|| ks_hub::transport::controller::Settings {
            wds_name: args.wds_name.clone(),
            limits: ks_hub::transport::plan::sharding::Limits {
                max_size: args.max_size_wrapped,
                max_count: usize::try_from(args.max_num_wrapped).unwrap_or(usize::MAX),
            },
            metrics: transport_metrics,
        }),
    };
    let wds_name = args.wds_name.clone();
    // Only the leader writes, the CRDs included.
    let work = |token: tokio_util::sync::CancellationToken| async move {
        let install = || crds::install(&wds, Space::Wds, field_manager::BINDING);
        if retry_until_done("installing CRDs into the WDS", &token, install)
            .await
            .is_none()
        {
            return;
        }
        tracing::info!(wds = %wds_name, "KubeStellar CRDs installed");
        ks_hub::run(wds, its, settings, ready, token).await;
    };
    if args.common.leader_elect {
        let lease = args.common.lease(lease_name(&args.wds_name, &args.controllers));
        ks_shared::leader::run_as_leader(wds_lease, &lease, &fence, shutdown.clone(), work).await?;
    } else {
        work(shutdown.clone()).await;
    }
    shutdown.cancel();
    serving.stopped().await?;
    Ok(())
}

/// The Lease of a hub running `controllers` for `wds`: `ks-hub-<wds>` for all three, else
/// one per set (`ks-hub-wds1-binding`, `ks-hub-wds1-status-transport`), so that processes
/// running different controllers each elect their own leader.
fn lease_name(wds: &str, controllers: &[String]) -> String {
    let mut chosen: Vec<&str> = controllers.iter().map(String::as_str).collect();
    chosen.sort_unstable();
    chosen.dedup();
    if chosen.len() == CONTROLLERS.len() {
        format!("ks-hub-{wds}")
    } else {
        format!("ks-hub-{wds}-{}", chosen.join("-"))
    }
}

/// The clients of the hub.
struct Spaces {
    /// Rate limited, and fenced by leadership.
    wds: Client,
    its: Client,
    /// Neither: for the leader-election Lease in the WDS.
    wds_lease: Client,
}

/// Clients for the WDS and the ITS, from kubeconfig flags or through KubeFlex. `None` on shutdown.
async fn spaces(
    args: &Args,
    fence: &Fence,
    shutdown: &tokio_util::sync::CancellationToken,
) -> anyhow::Result<Option<Spaces>> {
    let wds_limits = Limits {
        qps: args.wds_qps,
        burst: args.wds_burst,
        fence: fence.clone(),
    };
    let its_limits = Limits {
        qps: args.its_qps,
        burst: args.its_burst,
        fence: fence.clone(),
    };
    if !args.kubeflex {
        let (kubeconfig, context) = (args.wds_kubeconfig.as_deref(), args.wds_context.as_deref());
        let wds = limited_client(kubeconfig, context, &wds_limits)
            .await
            .context("WDS client")?;
        let wds_lease = limited_client(kubeconfig, context, &Limits::none())
            .await
            .context("WDS client")?;
        let its = limited_client(args.its_kubeconfig.as_deref(), args.its_context.as_deref(), &its_limits)
            .await
            .context("ITS client")?;
        return Ok(Some(Spaces { wds, its, wds_lease }));
    }
    let hosting = ks_shared::client::client(args.kubeflex_kubeconfig.as_deref(), args.kubeflex_context.as_deref())
        .await
        .context("KubeFlex hosting cluster client")?;
    let Some(wds) = kubeflex::kubeconfig(&hosting, CP_TYPE_WDS, Some(&args.wds_name), shutdown).await? else {
        return Ok(None);
    };
    // Empty means unset, as upstream's chart passes it when there is one ITS.
    let its_name = args.its_name.as_deref().filter(|name| !name.is_empty());
    let Some(its) = kubeflex::kubeconfig(&hosting, CP_TYPE_ITS, its_name, shutdown).await? else {
        return Ok(None);
    };
    let wds_lease = limited_client_from_text(&wds, &Limits::none())
        .await
        .context("WDS kubeconfig Secret")?;
    let wds = limited_client_from_text(&wds, &wds_limits)
        .await
        .context("WDS kubeconfig Secret")?;
    let its = limited_client_from_text(&its, &its_limits)
        .await
        .context("ITS kubeconfig Secret")?;
    Ok(Some(Spaces { wds, its, wds_lease }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_set_of_controllers_elects_its_own_leader() {
        let names = |list: &str| list.split(',').map(String::from).collect::<Vec<_>>();
        assert_eq!(lease_name("wds1", &names("binding,transport,status")), "ks-hub-wds1");
        assert_eq!(
            lease_name("wds1", &names("status,binding,transport,status")),
            "ks-hub-wds1"
        );
        assert_eq!(lease_name("wds1", &names("binding")), "ks-hub-wds1-binding");
        assert_eq!(
            lease_name("wds1", &names("transport,status")),
            "ks-hub-wds1-status-transport"
        );
    }

    /// The options are set at build time, by `.cargo/config.toml`: a build that misses them
    /// keeps freed pages for ten seconds again.
    #[cfg(feature = "jemalloc")]
    #[test]
    fn jemalloc_returns_freed_pages_within_a_second() {
        let options = tikv_jemalloc_ctl::config::malloc_conf::read().expect("jemalloc's build options");
        // This version of the crate reads the C string's final NUL too.
        assert_eq!(options.trim_end_matches('\0'), "dirty_decay_ms:1000,muzzy_decay_ms:0");
    }

    /// /metrics tells the heap the program holds from what jemalloc keeps: a 64 MiB buffer counts
    /// as allocated, and jemalloc's resident pages hold at least what is allocated.
    #[cfg(feature = "jemalloc")]
    #[test]
    fn metrics_show_the_heap_held() {
        let mut registry = prometheus_client::registry::Registry::default();
        ks_shared::allocator::register(&mut registry);
        let held = std::hint::black_box(vec![1u8; 64 << 20]);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encoded");
        let bytes = |state: &str| -> u64 {
            let line = format!("kubestellar_allocator_bytes{{state=\"{state}\"}} ");
            let value = text.lines().find_map(|l| l.strip_prefix(&line));
            value
                .unwrap_or_else(|| panic!("no {state} in {text}"))
                .parse()
                .expect("a number")
        };
        assert!(bytes("allocated") >= held.len() as u64, "{text}");
        assert!(bytes("resident") >= bytes("allocated"), "{text}");
    }
}
