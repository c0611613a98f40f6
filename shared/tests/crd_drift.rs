//! The CRDs committed under `config/crds/` must be exactly what the Rust types generate.
//! `make crds` (KS_UPDATE_CRDS=1) rewrites them instead of comparing.

use std::path::PathBuf;

use ks_shared::crds;

fn crd_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../config/crds")
}

#[test]
fn committed_crds_match_the_types() {
    let update = std::env::var("KS_UPDATE_CRDS").is_ok_and(|v| v == "1");
    let dir = crd_dir();
    let mut expected_files = Vec::new();
    let mut drifted = Vec::new();
    for (_, crd) in crds::all() {
        let name = crds::file_name(&crd);
        let yaml = crds::to_yaml(&crd).expect("CRD serialises to YAML");
        let path = dir.join(&name);
        if update {
            std::fs::write(&path, &yaml).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
        } else if std::fs::read_to_string(&path).ok().as_deref() != Some(yaml.as_str()) {
            drifted.push(name.clone());
        }
        expected_files.push(name);
    }
    let mut committed: Vec<String> = std::fs::read_dir(&dir)
        .expect("config/crds exists")
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".yaml"))
        .collect();
    committed.sort();
    expected_files.sort();
    assert_eq!(
        committed, expected_files,
        "config/crds/ holds exactly the generated CRDs"
    );
    assert!(
        drifted.is_empty(),
        "CRDs differ from the Rust types: {drifted:?}; run `make crds` and review the diff"
    );
}

#[test]
fn committed_crds_parse_back_to_the_generated_objects() {
    for (_, crd) in crds::all() {
        let path = crd_dir().join(crds::file_name(&crd));
        let text = std::fs::read_to_string(&path).unwrap();
        let parsed: k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition =
            serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        // Compared without printing: a CRD's debug form runs to pages.
        assert!(
            parsed == crd,
            "{} does not parse back to the generated CRD",
            path.display()
        );
    }
}
