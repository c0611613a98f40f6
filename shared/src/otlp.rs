//! How traces leave the process: OTLP to the collector the standard `OTEL_EXPORTER_OTLP_*`
//! variables name (each `OTEL_EXPORTER_OTLP_TRACES_*` variable first). An agent on a remote WEC
//! normally exports to a collector elsewhere, so TLS is the usual case:
//! - `..._PROTOCOL`: `grpc` (the default) or `http/protobuf`; `http/json` and anything else is
//!   refused at start, never silently replaced.
//! - an `https` endpoint is TLS, the collector verified against `..._CERTIFICATE` (a PEM file of
//!   CA certificates) when set, else against the system's roots;
//! - `..._CLIENT_CERTIFICATE` and `..._CLIENT_KEY` (PEM files, both or neither) present a client
//!   certificate (mutual TLS).
//!
//! - `..._ENDPOINT`: the general one gets `/v1/traces` appended for `http/protobuf`, the
//!   traces-specific one is taken as it is (the specification's rule).
//!
//! Headers, timeout and compression are read by `opentelemetry-otlp` itself.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use opentelemetry_otlp::tonic_types::transport::{Certificate, ClientTlsConfig, Identity};
use opentelemetry_otlp::{SpanExporter, WithExportConfig, WithHttpConfig, WithTonicConfig};

/// The protocols we speak, as `..._PROTOCOL` names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    Grpc,
    HttpProtobuf,
}

/// What the environment asks of the exporter.
#[derive(Debug, PartialEq)]
pub struct Settings {
    pub protocol: Protocol,
    /// Where to export to; `None`: the exporter's default (localhost).
    pub endpoint: Option<String>,
    /// CA certificates to verify the collector with, instead of the system's.
    pub certificate: Option<PathBuf>,
    /// A client certificate and its key.
    pub client: Option<(PathBuf, PathBuf)>,
}

/// Why the exporter could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum OtlpError {
    #[error("{variable}={value} is not supported: set grpc (the default) or http/protobuf")]
    Protocol { variable: &'static str, value: String },
    #[error("{set} is set without {missing}: a client certificate needs both")]
    HalfClient { set: &'static str, missing: &'static str },
    #[error("cannot read {variable} {path}: {source}")]
    Read {
        variable: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{variable} {path}: {message}")]
    Pem {
        variable: &'static str,
        path: PathBuf,
        message: String,
    },
    #[error("OTLP over HTTP is set up from within the process's tokio runtime")]
    NoRuntime,
    #[error("TLS for OTLP over HTTP: {0}")]
    Tls(#[from] rustls::Error),
    #[error(transparent)]
    Build(#[from] opentelemetry_otlp::ExporterBuildError),
}

/// Each setting's variables: the traces-specific one first.
const ENDPOINT: [&str; 2] = ["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"];
const PROTOCOL: [&str; 2] = ["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"];
const CERTIFICATE: [&str; 2] = [
    "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE",
    "OTEL_EXPORTER_OTLP_CERTIFICATE",
];
const CLIENT_CERTIFICATE: [&str; 2] = [
    "OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE",
    "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE",
];
const CLIENT_KEY: [&str; 2] = ["OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY", "OTEL_EXPORTER_OTLP_CLIENT_KEY"];

/// The first of `names` that is set (not blank), and its value.
fn either(env: &impl Fn(&str) -> Option<String>, names: [&'static str; 2]) -> Option<(&'static str, String)> {
    names.into_iter().find_map(|name| {
        env(name)
            .filter(|v| !v.trim().is_empty())
            .map(|v| (name, v.trim().to_string()))
    })
}

/// Reads the settings from `env`.
pub fn settings(env: impl Fn(&str) -> Option<String>) -> Result<Settings, OtlpError> {
    let protocol = match either(&env, PROTOCOL) {
        None => Protocol::Grpc,
        Some((_, value)) if value.eq_ignore_ascii_case("grpc") => Protocol::Grpc,
        Some((_, value)) if value.eq_ignore_ascii_case("http/protobuf") => Protocol::HttpProtobuf,
        Some((variable, value)) => return Err(OtlpError::Protocol { variable, value }),
    };
    let endpoint = either(&env, ENDPOINT).map(|(variable, endpoint)| match protocol {
        Protocol::HttpProtobuf if variable == ENDPOINT[1] => format!("{}/v1/traces", endpoint.trim_end_matches('/')),
        _ => endpoint,
    });
    let certificate = either(&env, CERTIFICATE).map(|(_, path)| PathBuf::from(path));
    let client = match (either(&env, CLIENT_CERTIFICATE), either(&env, CLIENT_KEY)) {
        (Some((_, cert)), Some((_, key))) => Some((PathBuf::from(cert), PathBuf::from(key))),
        (None, None) => None,
        (Some((set, _)), None) => {
            return Err(OtlpError::HalfClient {
                set,
                missing: CLIENT_KEY[1],
            });
        }
        (None, Some((set, _))) => {
            return Err(OtlpError::HalfClient {
                set,
                missing: CLIENT_CERTIFICATE[1],
            });
        }
    };
    Ok(Settings {
        protocol,
        endpoint,
        certificate,
        client,
    })
}

fn read(variable: &'static str, path: &PathBuf) -> Result<Vec<u8>, OtlpError> {
    std::fs::read(path).map_err(|source| OtlpError::Read {
        variable,
        path: path.clone(),
        source,
    })
}

/// The exporter the settings describe.
pub fn exporter(settings: &Settings) -> Result<SpanExporter, OtlpError> {
    match settings.protocol {
        Protocol::Grpc => {
            let mut tls = ClientTlsConfig::new().with_native_roots();
            if let Some(path) = &settings.certificate {
                tls = ClientTlsConfig::new()
                    .ca_certificate(Certificate::from_pem(read("OTEL_EXPORTER_OTLP_CERTIFICATE", path)?));
            }
            if let Some((cert, key)) = &settings.client {
                tls = tls.identity(Identity::from_pem(
                    read("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", cert)?,
                    read("OTEL_EXPORTER_OTLP_CLIENT_KEY", key)?,
                ));
            }
            // Used only for an https endpoint.
            Ok(at(SpanExporter::builder().with_tonic().with_tls_config(tls), settings).build()?)
        }
        Protocol::HttpProtobuf => {
            let connector = hyper_rustls::HttpsConnectorBuilder::new()
                .with_tls_config(rustls_config(settings)?)
                .https_or_http()
                .enable_http1()
                .build();
            let client = OnTokio {
                client: Arc::new(opentelemetry_http::hyper::HyperClient::new(
                    connector,
                    EXPORT_TIMEOUT,
                    None,
                )),
                runtime: tokio::runtime::Handle::try_current().map_err(|_| OtlpError::NoRuntime)?,
            };
            Ok(at(SpanExporter::builder().with_http().with_http_client(client), settings).build()?)
        }
    }
}

/// `builder` sending to the settings' endpoint, if they name one.
fn at<B: WithExportConfig>(builder: B, settings: &Settings) -> B {
    match &settings.endpoint {
        Some(endpoint) => builder.with_endpoint(endpoint),
        None => builder,
    }
}

/// An HTTP client whose requests run on the process's tokio runtime: the batch span processor
/// exports from a thread of its own, where hyper (and its timer) would find no runtime.
#[derive(Debug)]
struct OnTokio {
    client: Arc<dyn opentelemetry_http::HttpClient>,
    runtime: tokio::runtime::Handle,
}

#[async_trait::async_trait]
impl opentelemetry_http::HttpClient for OnTokio {
    async fn send_bytes(
        &self,
        request: opentelemetry_http::Request<opentelemetry_http::Bytes>,
    ) -> Result<opentelemetry_http::Response<opentelemetry_http::Bytes>, opentelemetry_http::HttpError> {
        let client = self.client.clone();
        self.runtime
            .spawn(async move { client.send_bytes(request).await })
            .await?
    }
}

/// The longest an export over HTTP may take (the gRPC exporter's own default).
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// rustls' client configuration for OTLP over HTTP: the given CAs (else the system's roots) and
/// the client certificate, if any.
fn rustls_config(settings: &Settings) -> Result<rustls::ClientConfig, OtlpError> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let pem_error = |variable: &'static str, path: &PathBuf| {
        let path = path.clone();
        move |err: rustls::pki_types::pem::Error| OtlpError::Pem {
            variable,
            path,
            message: err.to_string(),
        }
    };
    let mut roots = rustls::RootCertStore::empty();
    match &settings.certificate {
        Some(path) => {
            let variable = "OTEL_EXPORTER_OTLP_CERTIFICATE";
            let pem = read(variable, path)?;
            for cert in CertificateDer::pem_slice_iter(&pem) {
                roots.add(cert.map_err(pem_error(variable, path))?)?;
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            roots.add_parsable_certificates(found.certs);
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots);
    Ok(match &settings.client {
        Some((cert, key)) => {
            let chain = CertificateDer::pem_slice_iter(&read("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", cert)?)
                .collect::<Result<Vec<_>, _>>()
                .map_err(pem_error("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", cert))?;
            let key = PrivateKeyDer::from_pem_slice(&read("OTEL_EXPORTER_OTLP_CLIENT_KEY", key)?)
                .map_err(pem_error("OTEL_EXPORTER_OTLP_CLIENT_KEY", key))?;
            builder.with_client_auth_cert(chain, key)?
        }
        None => builder.with_no_client_auth(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        |name| pairs.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_string())
    }

    #[test]
    fn grpc_by_default_and_http_protobuf_when_asked() {
        assert_eq!(settings(env(&[])).unwrap().protocol, Protocol::Grpc);
        let http = settings(env(&[("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")])).unwrap();
        assert_eq!(http.protocol, Protocol::HttpProtobuf);
        let traces_first = settings(env(&[
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
            ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grpc"),
        ]))
        .unwrap();
        assert_eq!(traces_first.protocol, Protocol::Grpc);
    }

    #[test]
    fn the_general_endpoint_gets_the_traces_path_over_http() {
        let endpoint = |pairs| settings(env(pairs)).unwrap().endpoint;
        assert_eq!(
            endpoint(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "https://c:4317")]).as_deref(),
            Some("https://c:4317")
        );
        assert_eq!(
            endpoint(&[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "https://c:4318/"),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
            ])
            .as_deref(),
            Some("https://c:4318/v1/traces")
        );
        assert_eq!(
            endpoint(&[
                ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "https://c:4318/x"),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
            ])
            .as_deref(),
            Some("https://c:4318/x")
        );
        assert_eq!(endpoint(&[]), None);
    }

    #[test]
    fn other_protocols_are_refused_by_name() {
        let err = settings(env(&[("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/json")]))
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/json is not supported: set grpc (the default) or http/protobuf"
        );
    }

    #[test]
    fn certificates_and_half_a_client_identity() {
        let set = settings(env(&[
            ("OTEL_EXPORTER_OTLP_CERTIFICATE", "/ca.pem"),
            ("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", "/c.pem"),
            ("OTEL_EXPORTER_OTLP_CLIENT_KEY", "/k.pem"),
        ]))
        .unwrap();
        assert_eq!(set.certificate, Some(PathBuf::from("/ca.pem")));
        assert_eq!(set.client, Some((PathBuf::from("/c.pem"), PathBuf::from("/k.pem"))));
        let err = settings(env(&[("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", "/c.pem")]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("OTEL_EXPORTER_OTLP_CLIENT_KEY"), "{err}");
    }

    #[test]
    fn an_unreadable_certificate_is_named() {
        let settings = Settings {
            protocol: Protocol::HttpProtobuf,
            endpoint: None,
            certificate: Some(PathBuf::from("/nonexistent/ca.pem")),
            client: None,
        };
        let err = exporter(&settings).unwrap_err().to_string();
        assert!(
            err.contains("OTEL_EXPORTER_OTLP_CERTIFICATE /nonexistent/ca.pem"),
            "{err}"
        );
    }
}
