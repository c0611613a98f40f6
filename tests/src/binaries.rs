//! Our own binaries for end-to-end tests. A test binary of this crate knows only where
//! `ks-stack` is (`env!("CARGO_BIN_EXE_ks-stack")`, handed to the harness as the stack's
//! `our_binaries` directory); the others are built into that same cargo target directory by `cargo build --workspace --bins` (`make build`) and by
//! `cargo test --workspace`, whose `ks-agent`, `ks-hub` and `ks-addon` tests need them. Under
//! `cargo test -p ks-tests` alone they could be stale, so [`build`] brings one up to date.

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

/// Builds the binary `name` of package `name` with the cargo that runs this test (`$CARGO`),
/// so that a test never runs a stale one; without `$CARGO` (run outside cargo) it does nothing.
pub fn build(name: &str) -> anyhow::Result<()> {
    let Some(cargo) = std::env::var_os("CARGO") else {
        return Ok(());
    };
    let status = std::process::Command::new(cargo)
        .args(["build", "--quiet", "--package", name, "--bin", name])
        .current_dir(crate::harness::repo_root())
        .status()?;
    anyhow::ensure!(status.success(), "cargo build -p {name} failed ({status})");
    Ok(())
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
}
