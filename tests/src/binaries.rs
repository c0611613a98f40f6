//! Our own binaries for end-to-end tests. A test binary of this crate knows only where
//! `ks-stack` is (`env!("CARGO_BIN_EXE_ks-stack")`, handed to the harness as the stack's
//! `our_binaries` directory); the others (`ks-hub`, `ks-addon`, `ks-agent`,
//! `kubectl-kubestellar`) are built into that same cargo target directory by
//! `cargo test --workspace`. Under `cargo test -p ks-tests` alone they could be stale, so
//! [`build`] brings them up to date first.

use std::path::{Path, PathBuf};

/// The binary `name` in `directory` (the stack's `our_binaries`), or a clear error saying how
/// to build it.
pub fn beside(directory: &Path, name: &str) -> anyhow::Result<PathBuf> {
    let path = directory.join(name);
    anyhow::ensure!(
        path.is_file(),
        "{} is missing: build it with `cargo build -p {name}` (or `make build`)",
        path.display()
    );
    Ok(path)
}

/// Brings every binary of the workspace up to date as `cargo test --workspace` builds them, with
/// the cargo that runs this test (`$CARGO`), so that a test never runs a stale one; without
/// `$CARGO` (run outside cargo) it does nothing. Under `make test` it finds nothing to do:
/// - the same command as `make test`'s build, not `cargo build -p NAME`, which resolves the
///   dependencies' features per package and so compiles them again;
/// - without the variables cargo sets for this test process ([`set_by_cargo_for_a_crate`]): a
///   build script that asks to rerun when one of them changes (ring's, on
///   `CARGO_PKG_VERSION_MAJOR`) would see it set here and unset in `make test`'s build, and
///   rebuild itself and everything above it (about a minute, each time the two alternate).
pub fn build() -> anyhow::Result<()> {
    let Some(cargo) = std::env::var_os("CARGO") else {
        return Ok(());
    };
    let mut command = std::process::Command::new(cargo);
    for (name, _) in std::env::vars_os() {
        if name.to_str().is_some_and(set_by_cargo_for_a_crate) {
            command.env_remove(name);
        }
    }
    let status = command
        .args(["test", "--workspace", "--no-run", "--quiet"])
        .current_dir(crate::harness::repo_root())
        .status()?;
    anyhow::ensure!(status.success(), "cargo test --workspace --no-run failed ({status})");
    Ok(())
}

/// Whether cargo sets the environment variable `name` for the crate it builds or runs (its
/// reference, "Environment variables Cargo sets for crates"), as opposed to one that configures
/// cargo itself (`CARGO_TARGET_DIR`, `CARGO_HOME`, ...).
fn set_by_cargo_for_a_crate(name: &str) -> bool {
    name.starts_with("CARGO_PKG_")
        || name.starts_with("CARGO_BIN_EXE_")
        || matches!(
            name,
            "CARGO_MANIFEST_DIR"
                | "CARGO_MANIFEST_PATH"
                | "CARGO_MANIFEST_LINKS"
                | "CARGO_CRATE_NAME"
                | "CARGO_BIN_NAME"
                | "CARGO_PRIMARY_PACKAGE"
                | "CARGO_TARGET_TMPDIR"
                | "CARGO_RUSTC_CURRENT_DIR"
                | "OUT_DIR"
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_binaries_in_the_same_directory_or_says_how_to_build_them() {
        let here = std::env::current_exe().unwrap();
        let name = here.file_name().unwrap().to_str().unwrap().to_string();
        let directory = here.parent().unwrap();
        assert_eq!(beside(directory, &name).unwrap(), here);
        let err = beside(directory, "ks-nothing").unwrap_err().to_string();
        assert!(err.contains("cargo build -p ks-nothing"), "{err}");
    }

    #[test]
    fn keeps_what_configures_cargo_and_drops_what_cargo_sets_for_a_crate() {
        for name in [
            "CARGO_PKG_VERSION_MAJOR",
            "CARGO_PKG_NAME",
            "CARGO_MANIFEST_DIR",
            "CARGO_TARGET_TMPDIR",
        ] {
            assert!(set_by_cargo_for_a_crate(name), "{name}");
        }
        for name in [
            "CARGO_TARGET_DIR",
            "CARGO_HOME",
            "CARGO",
            "RUSTFLAGS",
            "CARGO_BUILD_JOBS",
        ] {
            assert!(!set_by_cargo_for_a_crate(name), "{name}");
        }
    }
}
