//! Kubeconfig files for the stack's spaces: one per space for the upstream processes, the
//! bootstrap one OCM agents join with, and a merged one with a context per space for users, tests
//! and the clients they make.

use std::path::{Path, PathBuf};

use anyhow::Context;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use kube::Client;
use serde_json::json;

use super::pki::{ClientIdentity, Pki};
use super::{ADMIN, BOOTSTRAP, Stack};

/// A kubeconfig (as YAML) with one context per `(name, port)`, all as `who`; the first is current.
pub fn render(pki: &Pki, who: &ClientIdentity, spaces: &[(String, u16)]) -> anyhow::Result<String> {
    render_at(pki, who, spaces, std::net::Ipv4Addr::LOCALHOST)
}

/// [`render`], with the servers at `host`.
pub fn render_at(
    pki: &Pki,
    who: &ClientIdentity,
    spaces: &[(String, u16)],
    host: std::net::Ipv4Addr,
) -> anyhow::Result<String> {
    let read = |p: &Path| -> anyhow::Result<String> { Ok(STANDARD.encode(std::fs::read(p)?)) };
    let ca = read(&pki.ca_cert())?;
    let user = json!({
        "name": who.file,
        "user": {
            "client-certificate-data": read(&pki.client_cert(who))?,
            "client-key-data": read(&pki.client_key(who))?,
        }
    });
    let clusters: Vec<_> = spaces
        .iter()
        .map(|(name, port)| {
            json!({"name": name, "cluster": {"server": format!("https://{host}:{port}"), "certificate-authority-data": ca}})
        })
        .collect();
    let contexts: Vec<_> = spaces
        .iter()
        .map(|(name, _)| json!({"name": name, "context": {"cluster": name, "user": who.file}}))
        .collect();
    let config = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": spaces.first().map(|(n, _)| n.clone()).unwrap_or_default(),
        "clusters": clusters,
        "contexts": contexts,
        "users": [user],
    });
    Ok(serde_saphyr::to_string(&config)?)
}

impl Stack {
    /// The merged kubeconfig with a context per space.
    pub fn kubeconfig(&self) -> PathBuf {
        self.state.join("kubeconfig")
    }

    /// The kubeconfig of one space (its context only), its credentials inline.
    pub fn space_kubeconfig(&self, space: &str) -> PathBuf {
        self.state.join("kubeconfigs").join(format!("{space}.kubeconfig"))
    }

    /// The admin kubeconfig of one space (as [`Stack::space_kubeconfig`]) with its server at
    /// `host`: [`Stack::api_host`] for one that Pods on a real node read.
    pub fn space_kubeconfig_at(&self, space: &str, host: std::net::Ipv4Addr) -> anyhow::Result<String> {
        render_at(
            &self.pki(),
            &ADMIN,
            &[(space.to_string(), self.space(space)?.port)],
            host,
        )
    }

    pub(super) fn bootstrap_kubeconfig(&self) -> PathBuf {
        self.state.join("kubeconfigs").join("its1-bootstrap.kubeconfig")
    }

    /// An admin client for a space's context.
    pub async fn client(&self, context: &str) -> anyhow::Result<Client> {
        Ok(ks_shared::client::client(Some(&self.kubeconfig()), Some(context)).await?)
    }

    pub(super) fn write_kubeconfigs(&self, pki: &Pki) -> anyhow::Result<()> {
        std::fs::create_dir_all(self.state.join("kubeconfigs"))?;
        let all: Vec<(String, u16)> = self.spaces().iter().map(|s| (s.name.clone(), s.port)).collect();
        std::fs::write(self.kubeconfig(), render(pki, &ADMIN, &all)?)?;
        for space in &all {
            std::fs::write(
                self.space_kubeconfig(&space.0),
                render(pki, &ADMIN, std::slice::from_ref(space))?,
            )?;
        }
        let its = all.iter().find(|s| s.0 == "its1").cloned().context("its1")?;
        // The OCM agents hand the ITS's address on to add-on agents, which may run in Pods.
        std::fs::write(
            self.bootstrap_kubeconfig(),
            render_at(pki, &BOOTSTRAP, &[its], self.api_host())?,
        )?;
        Ok(())
    }
}
