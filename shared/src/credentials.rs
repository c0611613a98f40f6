//! Credentials change under a running process: OCM rotates an add-on agent's client certificate
//! by rewriting the Secret mounted as its hub kubeconfig. A client reads them once, when it is
//! made, so the files are checked now and then and a change is answered by a restart.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// What a kubeconfig and the files it names (client certificate and key, certificate
/// authority; relative to its directory) hold now. Unreadable files count as empty.
pub fn fingerprint(kubeconfig: &Path) -> Vec<u8> {
    let mut content = std::fs::read(kubeconfig).unwrap_or_default();
    let Ok(config) = kube::config::Kubeconfig::read_from(kubeconfig) else {
        return content;
    };
    let directory = kubeconfig.parent().unwrap_or(Path::new("."));
    let users = config.auth_infos.iter().filter_map(|a| a.auth_info.as_ref());
    let clusters = config.clusters.iter().filter_map(|c| c.cluster.as_ref());
    let named = users
        .flat_map(|u| [u.client_certificate.clone(), u.client_key.clone()])
        .chain(clusters.map(|c| c.certificate_authority.clone()))
        .flatten();
    for file in named {
        content.extend(std::fs::read(directory.join(file)).unwrap_or_default());
    }
    content
}

/// Resolves once the kubeconfig at `path`, or a file it names, differs from what it holds at
/// this call (before the client is made from it); looked at every `every`.
pub fn changed(path: PathBuf, every: Duration) -> impl std::future::Future<Output = ()> {
    let before = fingerprint(&path);
    async move {
        loop {
            tokio::time::sleep(every).await;
            if fingerprint(&path) != before {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_certificate_beside_the_kubeconfig_changes_the_fingerprint() {
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("kubeconfig");
        std::fs::write(
            &kubeconfig,
            "apiVersion: v1\nkind: Config\nclusters: [{name: hub, cluster: {server: \"https://hub:6443\"}}]\n\
             users: [{name: agent, user: {client-certificate: tls.crt, client-key: tls.key}}]\n\
             contexts: [{name: hub, context: {cluster: hub, user: agent}}]\ncurrent-context: hub\n",
        )
        .unwrap();
        std::fs::write(dir.path().join("tls.crt"), "certificate 1").unwrap();
        std::fs::write(dir.path().join("tls.key"), "key 1").unwrap();
        let before = fingerprint(&kubeconfig);
        assert_eq!(fingerprint(&kubeconfig), before);
        std::fs::write(dir.path().join("tls.crt"), "certificate 2").unwrap();
        assert_ne!(fingerprint(&kubeconfig), before);
    }
}
