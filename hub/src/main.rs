//! ks-hub: KubeStellar hub: the binding, transport and status controllers for one WDS

use std::net::SocketAddr;

use clap::Parser;
use ks_shared::cli::{CommonArgs, Process};

#[derive(Parser, Debug)]
#[command(
    name = "ks-hub",
    version,
    about = "KubeStellar hub: the binding, transport and status controllers for one WDS",
    long_about = "KubeStellar hub: the binding, transport and status controllers for one WDS\n\nRuns beside a Workload Definition Space (WDS): turns BindingPolicies into Bindings, Bindings into OCM ManifestWorks in the ITS, and returned WorkStatuses into WDS object status. This build provides the process plumbing (logging, OpenTelemetry export when OTEL_EXPORTER_OTLP_ENDPOINT is set, /metrics, /healthz, /readyz, leader election flags); the controllers are being added."
)]
struct Args {
    #[command(flatten)]
    common: CommonArgs,
}

/// Where /metrics, /healthz and /readyz are served unless --http-address says otherwise.
const DEFAULT_HTTP_ADDRESS: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED), 8080);

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let process = Process::start("ks-hub", &args.common)?;
    process
        .serve_until_shutdown(args.common.http_address.unwrap_or(DEFAULT_HTTP_ADDRESS))
        .await?;
    Ok(())
}
