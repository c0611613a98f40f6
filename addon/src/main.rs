//! ks-addon: KubeStellar status add-on controller: installs the status agent on every WEC through OCM

use std::net::SocketAddr;

use clap::Parser;
use ks_shared::cli::{CommonArgs, Process};

#[derive(Parser, Debug)]
#[command(
    name = "ks-addon",
    version,
    about = "KubeStellar status add-on controller: installs the status agent on every WEC through OCM",
    long_about = "KubeStellar status add-on controller: installs the status agent on every WEC through OCM\n\nRuns on an Inventory and Transport Space (ITS), an OCM hub: registers the addon-status add-on, delivers the agent and its RBAC to each WEC in a ManifestWork, grants hub permissions and approves the agent's certificate requests. This build provides the process plumbing (logging, OpenTelemetry export when OTEL_EXPORTER_OTLP_ENDPOINT is set, /metrics, /healthz, /readyz, leader election flags); the add-on duties are being added."
)]
struct Args {
    #[command(flatten)]
    common: CommonArgs,
}

/// Where /metrics, /healthz and /readyz are served unless --http-address says otherwise.
const DEFAULT_HTTP_ADDRESS: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED), 9280);

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let process = Process::start("ks-addon", &args.common)?;
    process
        .serve_until_shutdown(args.common.http_address.unwrap_or(DEFAULT_HTTP_ADDRESS))
        .await?;
    Ok(())
}
