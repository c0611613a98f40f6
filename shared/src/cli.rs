//! Flags every binary shares, and the start-up every binary does: telemetry, the metrics and
//! health endpoint, and signal handling.

use std::net::SocketAddr;
use std::sync::Arc;

use prometheus_client::registry::Registry;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::fence::Fence;
use crate::leader::{LeaseConfig, default_identity};
use crate::serve::{self, Readiness};
use crate::telemetry::{self, LogFormat, Telemetry};

/// Logging, endpoint and leader-election flags, each with an environment fallback.
#[derive(clap::Args, Debug, Clone)]
pub struct CommonArgs {
    /// Log line format on standard error (levels come from RUST_LOG, default info; kube's client errors only).
    #[arg(long, env = "KS_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// Address serving /metrics, /healthz and /readyz (port 0 picks a free port).
    #[arg(long, env = "KS_HTTP_ADDRESS", value_name = "IP:PORT")]
    pub http_address: Option<SocketAddr>,

    /// Run only while holding a Lease, so that several replicas can stand by.
    #[arg(long, env = "KS_LEADER_ELECT")]
    pub leader_elect: bool,

    /// Namespace of the leader-election Lease.
    #[arg(
        long,
        env = "KS_LEADER_ELECT_NAMESPACE",
        default_value = "kube-system",
        value_name = "NAMESPACE"
    )]
    pub leader_elect_namespace: String,

    /// Seconds the Lease stays valid without renewal.
    #[arg(long, env = "KS_LEADER_ELECT_LEASE_DURATION", default_value_t = 15, value_name = "SECONDS",
          value_parser = clap::value_parser!(u64).range(2..=3600))]
    pub leader_elect_lease_duration: u64,
}

impl CommonArgs {
    /// The Lease named `name` that these flags describe.
    pub fn lease(&self, name: impl Into<String>) -> LeaseConfig {
        LeaseConfig {
            name: name.into(),
            namespace: self.leader_elect_namespace.clone(),
            identity: default_identity(),
            duration_seconds: self.leader_elect_lease_duration,
        }
    }

    /// The fence for the clients the work writes with: closed until this process leads when
    /// --leader-elect is on, else always open.
    pub fn fence(&self) -> Fence {
        if self.leader_elect {
            Fence::closed()
        } else {
            Fence::open()
        }
    }
}

/// What a started process shares with its controllers.
pub struct Process {
    /// Register metrics here before calling [`Process::serve`].
    pub registry: Registry,
    pub readiness: Readiness,
    /// Cancelled on SIGTERM or SIGINT.
    pub shutdown: CancellationToken,
    _telemetry: Telemetry,
}

/// The endpoint, once listening.
pub struct Serving {
    pub address: SocketAddr,
    task: JoinHandle<std::io::Result<()>>,
}

impl Process {
    /// Sets up telemetry and signal handling for `service`, serving `cluster` (named in its spans).
    pub fn start(service: &'static str, cluster: Option<&str>, args: &CommonArgs) -> Result<Process, StartError> {
        let telemetry = telemetry::init(service, cluster, args.log_format)?;
        crate::crash::exit_on_panic();
        let shutdown = crate::shutdown::on_signal()?;
        tracing::info!(
            service,
            version = env!("CARGO_PKG_VERSION"),
            tracing_export = telemetry.exporting(),
            "starting"
        );
        let mut registry = Registry::default();
        crate::rollout::register(&mut registry);
        crate::apilatency::register(&mut registry);
        crate::runtime::watch_health::register(&mut registry);
        crate::runtime::register_conventional(&mut registry);
        crate::process_metrics::register(&mut registry, service, cluster);
        crate::leader::register(&mut registry);
        Ok(Process {
            registry,
            readiness: Readiness::default(),
            shutdown,
            _telemetry: telemetry,
        })
    }

    /// Starts the endpoint on `address` with the metrics registered so far.
    pub async fn serve(&mut self, address: SocketAddr) -> std::io::Result<Serving> {
        let listener = serve::bind(address).await?;
        let address = listener.local_addr()?;
        let registry = Arc::new(std::mem::take(&mut self.registry));
        let task = tokio::spawn(serve::serve(
            listener,
            registry,
            self.readiness.clone(),
            self.shutdown.clone(),
        ));
        tracing::info!(%address, "serving /metrics, /healthz and /readyz");
        Ok(Serving { address, task })
    }
}

impl Process {
    /// Serves the endpoint on `address` until SIGTERM or SIGINT, then stops cleanly.
    pub async fn serve_until_shutdown(mut self, address: SocketAddr) -> std::io::Result<()> {
        let serving = self.serve(address).await?;
        self.shutdown.cancelled().await;
        serving.stopped().await
    }
}

impl Serving {
    /// Waits until the endpoint has stopped (after shutdown).
    pub async fn stopped(self) -> std::io::Result<()> {
        self.task.await.map_err(std::io::Error::other)?
    }
}

/// Start-up failed: telemetry or signal handlers could not be installed.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Telemetry(#[from] crate::telemetry::TelemetryError),
    #[error("cannot install signal handlers: {0}")]
    Signals(#[from] std::io::Error),
}

/// Runs `attempt` until it succeeds, backing off from 1 s to 30 s between failures, so that a
/// process outliving a briefly unreachable API server does not crash-loop. `None` on shutdown.
pub async fn retry_until_done<T, E, F, Fut>(what: &str, shutdown: &CancellationToken, mut attempt: F) -> Option<T>
where
    E: std::fmt::Display,
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, E>>,
{
    let mut pause = std::time::Duration::from_secs(1);
    loop {
        match attempt().await {
            Ok(value) => return Some(value),
            Err(err) => tracing::warn!(error = %err, retry_in = ?pause, "{what} failed"),
        }
        tokio::select! {
            _ = shutdown.cancelled() => return None,
            _ = tokio::time::sleep(pause) => {}
        }
        pause = (pause * 2).min(std::time::Duration::from_secs(30));
    }
}

/// Parses a `--*-qps` flag: a finite number of requests per second, at least 0 (0: unlimited).
pub fn parse_qps(text: &str) -> Result<f32, String> {
    match text.parse::<f32>() {
        Ok(qps) if qps.is_finite() && qps >= 0.0 => Ok(qps),
        _ => Err(format!("{text:?} is not a number of requests per second (at least 0)")),
    }
}

/// Parses a `--wds-name` flag: a DNS label (at most 63 lowercase letters, digits and `-`,
/// starting and ending with a letter or digit), as a KubeFlex ControlPlane's name is. The name
/// goes into ManifestWork names, labels and field managers, and a dot in it would make the
/// names of two WDSes' ManifestWorks meet.
pub fn parse_wds_name(text: &str) -> Result<String, String> {
    let alphanumeric = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    let valid = !text.is_empty()
        && text.len() <= 63
        && text.chars().all(|c| alphanumeric(c) || c == '-')
        && text.starts_with(alphanumeric)
        && text.ends_with(alphanumeric);
    if valid {
        Ok(text.to_string())
    } else {
        Err(format!(
            "{text:?} is not a DNS label: at most 63 lowercase letters, digits and '-', starting and ending \
             with a letter or digit"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::{parse_qps, parse_wds_name};

    #[test]
    fn a_wds_name_is_a_dns_label() {
        for good in ["wds1", "a-b", "0", &"w".repeat(63)] {
            assert_eq!(parse_wds_name(good).as_deref(), Ok(good));
        }
        for bad in ["", "a.b", "WDS", "-a", "a-", "a_b", &"w".repeat(64)] {
            assert!(parse_wds_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn qps_is_a_finite_non_negative_number() {
        assert_eq!(parse_qps("0"), Ok(0.0));
        assert_eq!(parse_qps("12.5"), Ok(12.5));
        for bad in ["-1", "NaN", "inf", "fast", ""] {
            assert!(parse_qps(bad).is_err(), "{bad:?}");
        }
    }
}
