//! Kubeconfig files for the stack's spaces: one per space for the upstream processes, and a
//! merged one with a context per space for users and tests.

use std::path::Path;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::json;

use super::pki::{ClientIdentity, Pki};

/// A kubeconfig (as YAML) with one context per `(name, port)`, all as `who`; the first is current.
pub fn render(pki: &Pki, who: &ClientIdentity, spaces: &[(String, u16)]) -> anyhow::Result<String> {
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
            json!({"name": name, "cluster": {"server": format!("https://127.0.0.1:{port}"), "certificate-authority-data": ca}})
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
