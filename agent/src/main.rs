//! ks-agent: KubeStellar status add-on agent: reports the status of delivered objects from a WEC

use std::net::SocketAddr;

use clap::Parser;
use ks_shared::cli::{CommonArgs, Process};

#[derive(Parser, Debug)]
#[command(
    name = "ks-agent",
    version,
    about = "KubeStellar status add-on agent: reports the status of delivered objects from a WEC",
    long_about = "KubeStellar status add-on agent: reports the status of delivered objects from a WEC\n\nRuns on each Workload Execution Cluster (WEC): follows the AppliedManifestWorks of KubeStellar ManifestWorks and keeps one WorkStatus per delivered object in the WEC's mailbox namespace on the ITS. This build provides the process plumbing (logging, OpenTelemetry export when OTEL_EXPORTER_OTLP_ENDPOINT is set, /metrics, /healthz, /readyz, leader election flags); the status reporting is being added."
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
    let process = Process::start("ks-agent", &args.common)?;
    process
        .serve_until_shutdown(args.common.http_address.unwrap_or(DEFAULT_HTTP_ADDRESS))
        .await?;
    Ok(())
}
