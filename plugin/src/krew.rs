//! The krew manifest (`krew/kubestellar.yaml`) agrees with the binary it installs: its name, bin,
//! version, homepage and platforms.

use std::collections::BTreeSet;

use serde_json::Value;

const MANIFEST: &str = include_str!("../krew/kubestellar.yaml");
/// What the manifest says each archive's checksum is until a release fills it in.
const PLACEHOLDER: &str = "FILLED-IN-AT-RELEASE";

fn manifest() -> Value {
    serde_saphyr::from_str(MANIFEST).expect("the krew manifest is YAML")
}

/// What is wrong with one platform of the manifest, if anything.
fn platform_problems(platform: &Value, homepage: &str, version: &str) -> Vec<String> {
    let labels = &platform["selector"]["matchLabels"];
    let (os, arch) = (
        labels["os"].as_str().unwrap_or("?"),
        labels["arch"].as_str().unwrap_or("?"),
    );
    let uri = platform["uri"].as_str().unwrap_or_default();
    let archive = format!("{homepage}/releases/download/{version}/kubectl-kubestellar-{os}-{arch}.tar.gz");
    let sha256 = platform["sha256"].as_str().unwrap_or_default();
    let checksum = sha256 == PLACEHOLDER || (sha256.len() == 64 && sha256.chars().all(|c| c.is_ascii_hexdigit()));
    [
        (uri == archive, format!("{os}/{arch}: uri {uri:?} is not {archive:?}")),
        (
            checksum,
            format!("{os}/{arch}: sha256 {sha256:?} is neither a checksum nor {PLACEHOLDER}"),
        ),
        (
            platform["bin"] == "kubectl-kubestellar",
            format!("{os}/{arch}: bin is not kubectl-kubestellar"),
        ),
    ]
    .into_iter()
    .filter(|(holds, _)| !holds)
    .map(|(_, problem)| problem)
    .collect()
}

#[test]
fn the_krew_manifest_installs_this_binary() {
    let manifest = manifest();
    assert_eq!(manifest["apiVersion"], "krew.googlecontainertools.github.com/v1alpha2");
    assert_eq!(manifest["kind"], "Plugin");
    // kubectl runs the plugin `kubestellar` as the binary kubectl-kubestellar.
    assert_eq!(
        format!("kubectl-{}", manifest["metadata"]["name"].as_str().unwrap_or_default()),
        env!("CARGO_PKG_NAME")
    );
    let spec = &manifest["spec"];
    let version = format!("v{}", env!("CARGO_PKG_VERSION"));
    assert_eq!(spec["version"], version.as_str());
    let homepage = env!("CARGO_PKG_REPOSITORY");
    assert_eq!(spec["homepage"], homepage);
    let short = spec["shortDescription"].as_str().unwrap_or_default();
    assert!(
        !short.is_empty() && short.len() <= 80 && short.contains("KubeStellar"),
        "shortDescription {short:?}: krew lists it on one line"
    );
    let platforms = spec["platforms"].as_array().expect("platforms");
    let covered: BTreeSet<(String, String)> = platforms
        .iter()
        .map(|p| {
            let labels = &p["selector"]["matchLabels"];
            (labels["os"].to_string(), labels["arch"].to_string())
        })
        .collect();
    let wanted: BTreeSet<(String, String)> = ["linux", "darwin"]
        .iter()
        .flat_map(|os| ["amd64", "arm64"].map(|arch| (format!("{os:?}"), format!("{arch:?}"))))
        .collect();
    assert_eq!((covered, platforms.len()), (wanted, 4));
    let problems: Vec<String> = platforms
        .iter()
        .flat_map(|p| platform_problems(p, homepage, &version))
        .collect();
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn a_platform_with_another_binary_or_archive_is_named() {
    let platform = serde_json::json!({
        "selector": {"matchLabels": {"os": "linux", "arch": "amd64"}},
        "uri": "https://example.invalid/x/releases/download/v0.1.0/other-linux-amd64.tar.gz",
        "sha256": "abc",
        "bin": "kubectl-other",
    });
    let problems = platform_problems(&platform, "https://example.invalid/x", "v0.1.0");
    assert_eq!(problems.len(), 3, "{problems:#?}");
    assert!(problems[0].starts_with("linux/amd64: uri"), "{problems:#?}");
}
