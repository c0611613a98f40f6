//! Creating a run's objects as users do: one YAML file per namespace (its BindingPolicy, the
//! Namespace, its objects), each applied with `kubectl apply -f` (client-side apply) in the
//! WDS, several kubectl processes at once.

use std::path::{Path, PathBuf};

use futures::{StreamExt, TryStreamExt};
use ks_tests::stack::Stack;
use serde_json::{Value, json};

use super::WDS;

/// The label selecting one namespace's objects (and the Namespace itself).
pub const LABEL: &str = "bench.kubestellar.io/bulk";

/// One namespace of a run: its name (also its policy's), and how many objects it holds.
pub struct Spread {
    pub namespace: String,
    pub objects: usize,
}

/// `objects` spread over `namespaces` namespaces `<prefix>-<k>` as evenly as they go.
pub fn spread(prefix: &str, objects: usize, namespaces: usize) -> Vec<Spread> {
    let namespaces = namespaces.clamp(1, objects.max(1));
    (0..namespaces)
        .map(|k| Spread {
            namespace: format!("{prefix}-{k}"),
            objects: objects / namespaces + usize::from(k < objects % namespaces),
        })
        .collect()
}

/// The documents of one namespace's file: its policy (selecting the namespace's label, for the
/// WECs `clusters` select), the Namespace and its objects, half ConfigMaps, half Deployments of
/// 0 replicas.
pub fn documents(spread: &Spread, clusters: &Value) -> Vec<Value> {
    let ns = &spread.namespace;
    let label = json!({LABEL: ns});
    let mut documents = vec![
        json!({"apiVersion": "control.kubestellar.io/v1alpha1", "kind": "BindingPolicy", "metadata": {"name": ns},
               "spec": {"clusterSelectors": clusters, "downsync": [{"objectSelectors": [{"matchLabels": label}]}]}}),
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": label}}),
    ];
    documents.extend((0..spread.objects).map(|n| {
        let name = format!("o-{n}");
        if n % 2 == 0 {
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": ns, "labels": label},
                   "data": {"n": n.to_string()}})
        } else {
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": ns, "labels": label},
                   "spec": {"replicas": 0, "selector": {"matchLabels": {"app": name}},
                            "template": {"metadata": {"labels": {"app": name}},
                                         "spec": {"containers": [{"name": "c", "image": "nginx:1.27"}]}}}})
        }
    }));
    documents
}

/// Writes one YAML file per namespace into `dir`; their paths.
pub fn write_files(dir: &Path, spreads: &[Spread], clusters: &Value) -> anyhow::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    spreads
        .iter()
        .map(|spread| {
            let mut yaml = String::new();
            for document in documents(spread, clusters) {
                yaml.push_str("---\n");
                yaml.push_str(&serde_saphyr::to_string(&document)?);
            }
            let path = dir.join(format!("{}.yaml", spread.namespace));
            std::fs::write(&path, yaml)?;
            Ok(path)
        })
        .collect()
}

/// `kubectl apply -f <file>` in the WDS for every file, `parallel` kubectl processes at once.
pub async fn apply(stack: &Stack, files: &[PathBuf], parallel: usize) -> anyhow::Result<()> {
    let kubectl = stack.cache.join("bin").join("kubectl");
    futures::stream::iter(files.iter().cloned())
        .map(|file| {
            let (stack, kubectl) = (stack.clone(), kubectl.clone());
            async move {
                tokio::task::spawn_blocking(move || {
                    let file = file.to_string_lossy().into_owned();
                    stack
                        .tool(&kubectl, &["--context", WDS, "apply", "-f", &file])
                        .map(|_| ())
                })
                .await?
            }
        })
        .buffer_unordered(parallel.max(1))
        .try_collect::<Vec<()>>()
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_spread_evenly_half_and_half() {
        let spreads = spread("bench-bulk-1", 1003, 4);
        assert_eq!(
            spreads.iter().map(|s| s.objects).collect::<Vec<_>>(),
            [251, 251, 251, 250]
        );
        let docs = documents(&spreads[0], &json!([]));
        assert_eq!(docs[0]["kind"], "BindingPolicy");
        assert_eq!(docs[1]["kind"], "Namespace");
        let kinds = |k: &str| docs.iter().filter(|d| d["kind"] == k).count();
        assert_eq!((kinds("ConfigMap"), kinds("Deployment")), (126, 125));
        assert_eq!(spread("p", 3, 10).len(), 3, "no empty namespaces");
    }

    #[test]
    fn the_files_read_back_as_the_documents() {
        let dir = std::env::temp_dir().join(format!("ks-bench-yaml-{}", std::process::id()));
        let spreads = spread("bench-bulk-2", 4, 1);
        let clusters = json!([{"matchLabels": {"location-group": "edge"}}]);
        let files = write_files(&dir, &spreads, &clusters).unwrap();
        let text = std::fs::read_to_string(&files[0]).unwrap();
        let back: Vec<Value> = text
            .split("---\n")
            .filter(|d| !d.trim().is_empty())
            .map(|d| serde_saphyr::from_str(d).unwrap())
            .collect();
        assert_eq!(back, documents(&spreads[0], &clusters));
        std::fs::remove_dir_all(dir).unwrap();
    }
}
