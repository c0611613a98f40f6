//! The stack plays kubelet for our own images. There is no container runtime here, so when a
//! Deployment whose container runs one of our images (`ks-agent`, `ks-addon`, `ks-hub`) appears
//! on a WEC and the Secrets it mounts exist, the stack runs that binary as a local process with
//! the Deployment's arguments, the Secrets' files and the WEC as its in-cluster API; it stops
//! the process when the Deployment goes away or is scaled to zero, and restarts it when the
//! arguments or the Secrets change.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use futures::{StreamExt, stream};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Container, Secret};
use kube::api::{Api, ListParams};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};

use super::Stack;

/// Process names of local Pods start with this.
pub const POD_PREFIX: &str = "pod-";

/// Our binaries that the stack may run for a Deployment.
const OUR_IMAGES: [&str; 3] = ["ks-agent", "ks-addon", "ks-hub"];

/// A local process standing in for one Deployment's Pod.
#[derive(Debug, PartialEq)]
struct LocalPod {
    /// Process name in `.stack/pids`: `pod-<space>-<namespace>-<deployment>`.
    name: String,
    binary: String,
    args: Vec<String>,
    env: Vec<(String, String)>,
    /// Secret files to write: path → content.
    files: BTreeMap<PathBuf, Vec<u8>>,
}

/// The image's binary name, if it is one of ours: `registry/ks-agent:tag` → `ks-agent`.
fn our_binary(image: &str) -> Option<&'static str> {
    let last = image.rsplit('/').next()?;
    let name = last.split([':', '@']).next()?;
    OUR_IMAGES.into_iter().find(|ours| *ours == name)
}

/// What to run for a Deployment, or `None` when it should not run (not ours, scaled to zero,
/// or a mounted Secret is missing). `pod_dir` is where its files go.
fn local_pod(
    space: &str,
    deployment: &Deployment,
    secrets: &BTreeMap<String, Secret>,
    pod_dir: &Path,
) -> Option<LocalPod> {
    let spec = deployment.spec.as_ref()?;
    if spec.replicas == Some(0) {
        return None;
    }
    let pod = spec.template.spec.as_ref()?;
    let container: &Container = pod.containers.first()?;
    let binary = our_binary(container.image.as_deref()?)?;
    let volumes = pod.volumes.iter().flatten();
    let secret_of = |volume: &str| {
        volumes
            .clone()
            .find(|v| v.name == volume)
            .and_then(|v| v.secret.as_ref())
            .and_then(|s| s.secret_name.clone())
    };
    let mut files = BTreeMap::new();
    let mut mounts = Vec::new();
    for mount in container.volume_mounts.iter().flatten() {
        let Some(secret_name) = secret_of(&mount.name) else {
            continue;
        };
        let secret = secrets.get(&secret_name)?;
        let local = pod_dir.join(mount.mount_path.trim_start_matches('/'));
        for (key, value) in secret.data.iter().flatten() {
            files.insert(local.join(key), value.0.clone());
        }
        mounts.push((mount.mount_path.clone(), local.display().to_string()));
    }
    // Paths inside the Pod become paths under the pod directory.
    let localise = |arg: &str| {
        mounts.iter().fold(arg.to_string(), |arg, (inside, outside)| {
            arg.replace(inside.as_str(), outside)
        })
    };
    let args = container
        .command
        .iter()
        .flatten()
        .skip(1)
        .chain(container.args.iter().flatten())
        .map(|a| localise(a))
        .collect();
    let env = container
        .env
        .iter()
        .flatten()
        .filter_map(|e| Some((e.name.clone(), localise(e.value.as_deref()?))))
        .collect();
    Some(LocalPod {
        name: format!(
            "pod-{space}-{}-{}",
            deployment.namespace().unwrap_or_default(),
            deployment.name_any()
        ),
        binary: binary.to_string(),
        args,
        env,
        files,
    })
}

/// Runs the kubelet loop for every WEC until the process is stopped.
pub async fn run(stack: &Stack, binaries: &Path) -> anyhow::Result<()> {
    let wecs = stack.wec_names();
    let mut tasks = Vec::new();
    for wec in wecs {
        let client = stack.client(&wec).await?;
        let stack = stack.clone();
        let binaries = binaries.to_path_buf();
        tasks.push(tokio::spawn(
            async move { follow(&stack, &wec, client, &binaries).await },
        ));
    }
    for task in tasks {
        task.await??;
    }
    Ok(())
}

async fn follow(stack: &Stack, space: &str, client: Client, binaries: &Path) -> anyhow::Result<()> {
    let deployments: Api<Deployment> = Api::all(client.clone());
    let secrets: Api<Secret> = Api::all(client);
    let config = watcher::Config::default();
    let changes = stream::select(
        watcher(deployments.clone(), config.clone()).map(|e| e.map(|_| ())),
        watcher(secrets.clone(), config).map(|e| e.map(|_| ())),
    );
    tokio::pin!(changes);
    let mut running: BTreeMap<String, LocalPod> = BTreeMap::new();
    while let Some(change) = changes.next().await {
        if let Err(err) = change {
            eprintln!("{space}: watch: {err}");
            continue;
        }
        if let Err(err) = sync(stack, space, &deployments, &secrets, binaries, &mut running).await {
            eprintln!("{space}: {err:#}");
        }
    }
    Ok(())
}

async fn sync(
    stack: &Stack,
    space: &str,
    deployments: &Api<Deployment>,
    secrets: &Api<Secret>,
    binaries: &Path,
    running: &mut BTreeMap<String, LocalPod>,
) -> anyhow::Result<()> {
    let mut by_namespace: BTreeMap<String, BTreeMap<String, Secret>> = BTreeMap::new();
    for secret in secrets.list(&ListParams::default()).await? {
        by_namespace
            .entry(secret.namespace().unwrap_or_default())
            .or_default()
            .insert(secret.name_any(), secret);
    }
    let none = BTreeMap::new();
    let pods_dir = stack.state.join("pods");
    let mut wanted = BTreeSet::new();
    for deployment in deployments.list(&ListParams::default()).await? {
        let namespace = deployment.namespace().unwrap_or_default();
        let dir = pods_dir.join(space).join(&namespace).join(deployment.name_any());
        let Some(pod) = local_pod(space, &deployment, by_namespace.get(&namespace).unwrap_or(&none), &dir) else {
            continue;
        };
        wanted.insert(pod.name.clone());
        if running.get(&pod.name) == Some(&pod) && stack.procs.running(&pod.name).is_some() {
            continue;
        }
        stack.procs.stop(&pod.name, Duration::from_secs(10))?;
        for (path, content) in &pod.files {
            std::fs::create_dir_all(path.parent().context("file path")?)?;
            std::fs::write(path, content)?;
        }
        let kubeconfig = stack.space_kubeconfig(space).display().to_string();
        // All local pods share one host: a free port for their endpoint unless the pod says otherwise.
        let mut env: Vec<(&str, &str)> = vec![("KS_HTTP_ADDRESS", "127.0.0.1:0")];
        env.extend(pod.env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        env.push(("KUBECONFIG", &kubeconfig));
        stack
            .procs
            .ensure(&pod.name, &binaries.join(&pod.binary), &pod.args, &env)?;
        eprintln!("{space}: started {} ({})", pod.name, pod.binary);
        running.insert(pod.name.clone(), pod);
    }
    let gone: Vec<String> = running.keys().filter(|n| !wanted.contains(*n)).cloned().collect();
    for name in gone {
        stack.procs.stop(&name, Duration::from_secs(10))?;
        running.remove(&name);
        eprintln!("{space}: stopped {name}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognises_our_images_only() {
        assert_eq!(our_binary("ghcr.io/example/ks-agent:0.1.0"), Some("ks-agent"));
        assert_eq!(our_binary("ks-agent"), Some("ks-agent"));
        assert_eq!(our_binary("registry:5000/ks-addon@sha256:abc"), Some("ks-addon"));
        assert_eq!(our_binary("nginx:1.27"), None);
        assert_eq!(our_binary("example/ks-agent-extra:1"), None);
    }

    fn deployment(replicas: i32) -> Deployment {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "status-agent", "namespace": "addon-ns"},
            "spec": {
                "replicas": replicas,
                "selector": {},
                "template": {"spec": {
                    "containers": [{
                        "name": "agent", "image": "example/ks-agent:dev",
                        "args": ["--hub-kubeconfig=/managed/hub/kubeconfig", "--cluster-name=cluster1"],
                        "env": [{"name": "CREDS", "value": "/managed/hub"}],
                        "volumeMounts": [{"name": "hub", "mountPath": "/managed/hub"}]
                    }],
                    "volumes": [{"name": "hub", "secret": {"secretName": "addon-status-hub-kubeconfig"}}]
                }}
            }
        }))
        .unwrap()
    }

    fn secrets() -> BTreeMap<String, Secret> {
        let secret: Secret = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "addon-status-hub-kubeconfig"},
            "data": {"kubeconfig": "a3ViZWNvbmZpZw=="}
        }))
        .unwrap();
        BTreeMap::from([("addon-status-hub-kubeconfig".to_string(), secret)])
    }

    #[test]
    fn runs_our_deployment_with_localised_mounts() {
        let pod = local_pod("cluster1", &deployment(1), &secrets(), Path::new("/tmp/pods/x")).unwrap();
        assert_eq!(pod.name, "pod-cluster1-addon-ns-status-agent");
        assert_eq!(pod.binary, "ks-agent");
        assert_eq!(
            pod.args,
            [
                "--hub-kubeconfig=/tmp/pods/x/managed/hub/kubeconfig",
                "--cluster-name=cluster1"
            ]
        );
        assert_eq!(pod.env, [("CREDS".to_string(), "/tmp/pods/x/managed/hub".to_string())]);
        assert_eq!(
            pod.files[Path::new("/tmp/pods/x/managed/hub/kubeconfig")],
            b"kubeconfig"
        );
    }

    #[test]
    fn waits_for_the_secret_and_stops_at_zero_replicas() {
        assert!(local_pod("cluster1", &deployment(1), &BTreeMap::new(), Path::new("/p")).is_none());
        assert!(local_pod("cluster1", &deployment(0), &secrets(), Path::new("/p")).is_none());
    }
}
