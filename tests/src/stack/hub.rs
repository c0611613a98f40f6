//! Our hub process for a WDS, as the stack runs it: started by `up` for wds1, restarted with
//! other options by tests and benchmarks, and further replicas for leader-election tests.

use std::time::Duration;

use super::{JAEGER_OTLP_GRPC, Stack, Tracing, wait_for};

/// The stack's hub puts at most this many objects in one ManifestWork.
pub const HUB_MAX_NUM_WRAPPED: usize = 20;

/// How the stack runs our hub.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HubOptions {
    pub tracing: Tracing,
    /// `--max-num-wrapped`; `None` is the shipped default. The stack's is
    /// [`HUB_MAX_NUM_WRAPPED`], so tests see sharding by count.
    pub max_num_wrapped: Option<usize>,
}

impl HubOptions {
    /// As `make up` runs it.
    pub const STACK: HubOptions = HubOptions {
        tracing: Tracing::On,
        max_num_wrapped: Some(HUB_MAX_NUM_WRAPPED),
    };
}

impl Stack {
    /// Our hub process for a WDS, exporting traces to the stack's Jaeger when tracing is on.
    pub(super) fn start_hub(&self, wds: &str, options: HubOptions) -> anyhow::Result<()> {
        self.spawn_hub(&Self::hub_process(wds), wds, self.hub_port(wds), options, &[])
    }

    /// A further hub for a WDS, the process `hub-<wds>-<replica>` serving /readyz on `port`, with
    /// `extra` flags (e.g. leader election); returns its process name. The test stops it.
    pub fn start_hub_replica(&self, wds: &str, replica: &str, port: u16, extra: &[String]) -> anyhow::Result<String> {
        let name = format!("{}-{replica}", Self::hub_process(wds));
        self.spawn_hub(&name, wds, port, HubOptions::STACK, extra)?;
        Ok(name)
    }

    fn spawn_hub(&self, name: &str, wds: &str, port: u16, options: HubOptions, extra: &[String]) -> anyhow::Result<()> {
        let mut args = vec![
            format!("--wds-kubeconfig={}", self.space_kubeconfig(wds).display()),
            format!("--its-kubeconfig={}", self.space_kubeconfig("its1").display()),
            format!("--wds-name={wds}"),
            format!("--http-address=127.0.0.1:{port}"),
        ];
        if let Some(n) = options.max_num_wrapped {
            args.push(format!("--max-num-wrapped={n}"));
        }
        args.extend_from_slice(extra);
        let otlp = format!("http://127.0.0.1:{JAEGER_OTLP_GRPC}");
        let mut env = vec![("OTEL_SERVICE_NAME", "ks-hub")];
        if options.tracing == Tracing::On {
            env.push(("OTEL_EXPORTER_OTLP_ENDPOINT", otlp.as_str()));
        }
        self.procs
            .ensure(name, &self.our_binaries.join("ks-hub"), &args, &env)?;
        Ok(())
    }

    /// The process name of our hub for a WDS.
    pub fn hub_process(wds: &str) -> String {
        format!("hub-{wds}")
    }

    /// Restarts our hub for a WDS with other options, and waits until it is ready. A test or
    /// benchmark that changes them restores [`HubOptions::STACK`] when done.
    pub async fn restart_hub(&self, wds: &str, options: HubOptions) -> anyhow::Result<()> {
        self.procs.stop(&Self::hub_process(wds), Duration::from_secs(10))?;
        self.start_hub(wds, options)?;
        self.wait_hub_ready(wds, Duration::from_secs(60)).await
    }

    /// Waits until our hub for a WDS answers /readyz with 200.
    pub async fn wait_hub_ready(&self, wds: &str, deadline: Duration) -> anyhow::Result<()> {
        let address = std::net::SocketAddr::from(([127, 0, 0, 1], self.hub_port(wds)));
        let name = Self::hub_process(wds);
        wait_for(&format!("{name} to be ready"), deadline, || {
            let alive = self.procs.check_alive(&name);
            let ready =
                std::net::TcpStream::connect(address).is_ok() && crate::process::http_get(address, "/readyz").0 == 200;
            std::future::ready(alive.map(|()| ready))
        })
        .await
    }

    /// Where the hub of a WDS serves /metrics, /healthz and /readyz.
    pub fn hub_port(&self, wds: &str) -> u16 {
        self.side_port("hub", wds)
    }
}
