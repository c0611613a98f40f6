//! Kubernetes clients. A process holds several (WDS, ITS, hosting cluster), each chosen by a
//! kubeconfig file and a context in it.

use std::path::{Path, PathBuf};

use kube::config::{KubeConfigOptions, Kubeconfig, KubeconfigError};
use kube::{Client, Config};

use crate::fence::{Fence, FenceLayer};

/// Why a client could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot read kubeconfig {path}: {source}")]
    ReadKubeconfig { path: PathBuf, source: KubeconfigError },
    #[error("cannot read the default kubeconfig ($KUBECONFIG or ~/.kube/config): {0}")]
    DefaultKubeconfig(KubeconfigError),
    #[error("kubeconfig {origin}: {source}")]
    Config { origin: String, source: KubeconfigError },
    #[error("no in-cluster or default kubeconfig: {0}")]
    Infer(#[from] kube::config::InferConfigError),
    #[error("cannot build a client for {origin}: {source}")]
    Build { origin: String, source: kube::Error },
}

/// The client configuration for `context` in `kubeconfig`. Without a file, `$KUBECONFIG` or
/// `~/.kube/config` is read; without either argument, the in-cluster config is tried first.
pub async fn config(kubeconfig: Option<&Path>, context: Option<&str>) -> Result<Config, ClientError> {
    let options = KubeConfigOptions {
        context: context.map(str::to_string),
        ..Default::default()
    };
    let (file, origin) = match kubeconfig {
        Some(path) => {
            let file = Kubeconfig::read_from(path).map_err(|source| ClientError::ReadKubeconfig {
                path: path.to_path_buf(),
                source,
            })?;
            (file, path.display().to_string())
        }
        None if context.is_none() => return Ok(Config::infer().await?),
        None => (
            Kubeconfig::read().map_err(ClientError::DefaultKubeconfig)?,
            "default".to_string(),
        ),
    };
    let origin = format!("{origin} (context {})", context.unwrap_or("current"));
    Config::from_custom_kubeconfig(file, &options)
        .await
        .map_err(|source| ClientError::Config { origin, source })
}

/// A client for `context` in `kubeconfig`; see [`config`].
pub async fn client(kubeconfig: Option<&Path>, context: Option<&str>) -> Result<Client, ClientError> {
    let config = config(kubeconfig, context).await?;
    let origin = config.cluster_url.to_string();
    Client::try_from(config).map_err(|source| ClientError::Build { origin, source })
}

/// What our layers do to a client's requests.
#[derive(Clone, Debug)]
pub struct Limits {
    /// On average at most `qps` requests per second, up to `burst` at once (client-go's meaning;
    /// a `qps` of 0 means unlimited).
    pub qps: f32,
    pub burst: u32,
    /// Writes pass only while this is open (see [`crate::leader`]).
    pub fence: Fence,
}

impl Limits {
    /// Neither rate limited nor fenced: for the leader-election Lease.
    pub fn none() -> Limits {
        Limits {
            qps: 0.0,
            burst: 0,
            fence: Fence::open(),
        }
    }
}

/// A client for `context` in `kubeconfig` with [`Limits`]; see [`config`].
pub async fn limited_client(
    kubeconfig: Option<&Path>,
    context: Option<&str>,
    limits: &Limits,
) -> Result<Client, ClientError> {
    limited(config(kubeconfig, context).await?, "", limits)
}

/// A client for `config` with our layers: fenced, rate limited, and every call timed.
fn limited(config: Config, origin: &str, limits: &Limits) -> Result<Client, ClientError> {
    let server = config.cluster_url.to_string();
    let origin = if origin.is_empty() {
        server.clone()
    } else {
        origin.to_string()
    };
    let builder =
        kube::client::ClientBuilder::try_from(config).map_err(|source| ClientError::Build { origin, source })?;
    // Innermost first: a write that waited for a token is checked against the fence when sent.
    Ok(builder
        .with_layer(&FenceLayer::new(limits.fence.clone()))
        .with_layer(&crate::ratelimit::RateLimitLayer::new(limits.qps, limits.burst))
        .with_layer(&crate::apilatency::ApiLatencyLayer::new(&server))
        .build())
}

/// Like [`limited_client`], from the text of a kubeconfig (e.g. read from a Secret), using its
/// current context.
pub async fn limited_client_from_text(kubeconfig: &str, limits: &Limits) -> Result<Client, ClientError> {
    let origin = "kubeconfig from a Secret".to_string();
    let file = Kubeconfig::from_yaml(kubeconfig).map_err(|source| ClientError::Config {
        origin: origin.clone(),
        source,
    })?;
    let config = Config::from_custom_kubeconfig(file, &KubeConfigOptions::default())
        .await
        .map_err(|source| ClientError::Config {
            origin: origin.clone(),
            source,
        })?;
    limited(config, &origin, limits)
}

#[cfg(test)]
mod tests {
    use super::*;

    const KUBECONFIG: &str = r#"
apiVersion: v1
kind: Config
current-context: wds1
clusters:
- name: wds1
  cluster: {server: "https://127.0.0.1:6443"}
- name: its1
  cluster: {server: "https://127.0.0.1:7443"}
users:
- name: admin
  user: {token: not-a-real-token}
contexts:
- name: wds1
  context: {cluster: wds1, user: admin}
- name: its1
  context: {cluster: its1, user: admin, namespace: cluster1}
"#;

    fn kubeconfig_file() -> tempfile::NamedTempFile {
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), KUBECONFIG).unwrap();
        file
    }

    #[tokio::test]
    async fn picks_the_named_context() {
        let file = kubeconfig_file();
        let its = config(Some(file.path()), Some("its1")).await.unwrap();
        assert_eq!(its.cluster_url.to_string(), "https://127.0.0.1:7443/");
        assert_eq!(its.default_namespace, "cluster1");
        let current = config(Some(file.path()), None).await.unwrap();
        assert_eq!(current.cluster_url.to_string(), "https://127.0.0.1:6443/");
        client(Some(file.path()), Some("its1")).await.unwrap();
    }

    #[tokio::test]
    async fn unknown_context_and_missing_file_are_clear_errors() {
        let file = kubeconfig_file();
        let err = config(Some(file.path()), Some("cluster9"))
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("cluster9"), "{err}");
        let err = config(Some(Path::new("/nonexistent/kubeconfig")), None)
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("/nonexistent/kubeconfig"), "{err}");
    }

    #[tokio::test]
    async fn secrets_stay_out_of_error_messages() {
        let file = kubeconfig_file();
        let err = config(Some(file.path()), Some("nope")).await.unwrap_err();
        assert!(!format!("{err} {err:?}").contains("not-a-real-token"));
    }
}
