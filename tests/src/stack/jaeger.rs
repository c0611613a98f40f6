//! Jaeger in the stack: in-memory, on its standard ports on loopback, so that our processes
//! export traces to it and tests and the demo query it. With real nodes its OTLP receivers listen
//! on every address (as the apiservers do), so that our containers export to it at the stack
//! address.

use std::time::Duration;

use anyhow::Context;

use super::{Stack, wait_tcp};

/// Jaeger's standard ports, as users and tools expect them.
pub const JAEGER_OTLP_GRPC: u16 = 4317;
pub const JAEGER_OTLP_HTTP: u16 = 4318;
pub const JAEGER_QUERY: u16 = 16686;

impl Stack {
    pub(super) fn start_jaeger(&self) -> anyhow::Result<()> {
        let config = self.state.join("jaeger.yaml");
        let otlp_host = if self.has_real_nodes() { "0.0.0.0" } else { "127.0.0.1" };
        std::fs::write(&config, JAEGER_CONFIG.replace("OTLP_HOST", otlp_host))?;
        self.procs.ensure(
            "jaeger",
            &self.bin("jaeger"),
            &[format!("--config={}", config.display())],
            &[],
        )?;
        // Processes export to it and tests query it as soon as `up` returns.
        for port in [JAEGER_OTLP_GRPC, JAEGER_QUERY] {
            wait_tcp(port, Duration::from_secs(30)).with_context(|| self.procs.tail("jaeger", 20))?;
        }
        Ok(())
    }
}

/// Jaeger v2 with in-memory storage: OTLP in (on `OTLP_HOST`), query API and UI on 16686 on
/// loopback.
const JAEGER_CONFIG: &str = r#"service:
  extensions: [jaeger_storage, jaeger_query, healthcheckv2]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
extensions:
  jaeger_query:
    storage:
      traces: memstore
    http:
      endpoint: 127.0.0.1:16686
    grpc:
      endpoint: 127.0.0.1:16685
  jaeger_storage:
    backends:
      memstore:
        memory:
          max_traces: 100000
  healthcheckv2:
    use_v2: true
    http:
      endpoint: 127.0.0.1:13133
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: OTLP_HOST:4317
      http:
        endpoint: OTLP_HOST:4318
processors:
  batch: {}
exporters:
  jaeger_storage_exporter:
    trace_storage: memstore
"#;
