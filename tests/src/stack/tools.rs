//! The command-line tools users run against the stack (kubectl, helm, our kubectl plugin), and
//! the `env` file that puts them and the stack's kubeconfig in a shell.

use std::path::Path;

use anyhow::Context;

use super::Stack;

impl Stack {
    /// Runs `program` (kubectl, helm, a kubectl plugin) against the stack's kubeconfig; what it
    /// printed, or an error with its standard error.
    pub fn tool(&self, program: &Path, args: &[&str]) -> anyhow::Result<String> {
        let output = std::process::Command::new(program)
            .args(args)
            .env("KUBECONFIG", self.kubeconfig())
            .output()
            .with_context(|| format!("running {}", program.display()))?;
        anyhow::ensure!(
            output.status.success(),
            "{} {} failed: {}",
            program.file_name().unwrap_or_default().to_string_lossy(),
            args.first().copied().unwrap_or_default(),
            String::from_utf8_lossy(&output.stderr)
        );
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }

    /// `helm` from `make deps` against the stack's kubeconfig; what it printed.
    pub fn helm(&self, args: &[&str]) -> anyhow::Result<String> {
        self.tool(&self.bin("helm"), args)
    }

    pub(super) fn write_env(&self) -> anyhow::Result<()> {
        let env = format!(
            "# Source this file to use the stack: `source .stack/env`.\nexport KUBECONFIG={}\nexport PATH={}:{}:$PATH\n",
            self.kubeconfig().display(),
            self.cache.join("bin").display(),
            // Our binaries, the kubectl plugin `kubectl-kubestellar` among them.
            self.our_binaries.display()
        );
        std::fs::write(self.state.join("env"), env)?;
        Ok(())
    }
}
