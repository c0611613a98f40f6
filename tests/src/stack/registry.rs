//! The stack's OCI registry: distribution's `registry`, built from the Go module proxy, on
//! [`REGISTRY`] (plain HTTP on loopback) with its storage in `.stack/registry/`. The real node
//! pulls its images from it, as any node pulls from a registry. `crane` (go-containerregistry,
//! also from the proxy) pushes the image archives that `images/build.sh` packs.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, bail};

use super::{Stack, wait_tcp};

/// Where the registry listens.
pub const REGISTRY: &str = "127.0.0.1:22501";
const PORT: u16 = 22501;

/// The reference of our image `name` (as `images/build.sh` names it, the crate's version) in the
/// stack's registry.
pub fn image_ref(name: &str) -> String {
    format!("{REGISTRY}/kubestellar-rs/{name}:{}", env!("CARGO_PKG_VERSION"))
}

impl Stack {
    pub(super) fn start_registry(&self) -> anyhow::Result<()> {
        let dir = self.state.join("registry");
        std::fs::create_dir_all(&dir)?;
        let config = dir.join("config.yml");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog: {{level: warn}}\nstorage:\n  filesystem: {{rootdirectory: {}}}\nhttp:\n  addr: {REGISTRY}\n",
                dir.join("data").display()
            ),
        )?;
        self.procs.ensure(
            "registry",
            &self.bin("registry"),
            &["serve".into(), config.display().to_string()],
            &[],
        )?;
        wait_tcp(PORT, Duration::from_secs(30)).with_context(|| self.procs.tail("registry", 20))
    }

    /// Packs our image `name` from the binary built beside the stack's and pushes it to the
    /// registry, unless the registry has that build already; its reference.
    pub fn push_image(&self, name: &str) -> anyhow::Result<String> {
        let target = self
            .our_binaries
            .parent()
            .context("the binaries' directory has a parent")?;
        let archive = target.join("images").join(format!("{name}.oci.tar"));
        let pushed = self.state.join("registry").join(format!("{name}.pushed"));
        let modified = |path: &Path| std::fs::metadata(path).and_then(|m| m.modified()).ok();
        let binary = modified(&self.our_binaries.join(name)).with_context(|| format!("{name} is not built"))?;
        if modified(&pushed).is_some_and(|at| at >= binary) {
            return Ok(image_ref(name));
        }
        let repo = self.state.parent().context("the state directory has a parent")?;
        let profile = match self.our_binaries.file_name().and_then(|n| n.to_str()) {
            Some("debug") | None => "dev",
            Some(other) => other,
        };
        run(Command::new(repo.join("images/build.sh"))
            .args(["--no-build", "--profile", profile, name])
            .env("CARGO_TARGET_DIR", target))
        .with_context(|| format!("packing the {name} image"))?;
        // crane pushes an OCI image layout from a directory.
        let layout = self.state.join("registry").join(format!("{name}.layout"));
        let _ = std::fs::remove_dir_all(&layout);
        std::fs::create_dir_all(&layout)?;
        run(Command::new("tar").arg("-xf").arg(&archive).arg("-C").arg(&layout))?;
        let reference = image_ref(name);
        run(Command::new(self.bin("crane"))
            .args(["push", "--insecure"])
            .arg(&layout)
            .arg(&reference))
        .with_context(|| format!("pushing {reference}"))?;
        std::fs::remove_dir_all(&layout)?;
        std::fs::write(&pushed, &reference)?;
        Ok(reference)
    }
}

impl Stack {
    /// The stack's kubectl (a static binary) as an image, for Pods that run kubectl (the hub
    /// chart's `helm test`), as users pull one: one layer holding `/usr/local/bin/kubectl`, run
    /// as 65532. Pushed unless the registry has it from this binary already; its reference.
    pub fn push_kubectl_image(&self) -> anyhow::Result<String> {
        let binary = self.bin("kubectl");
        let reference = format!("{REGISTRY}/kubestellar-rs/kubectl:stack");
        let pushed = self.state.join("registry").join("kubectl.pushed");
        let modified = |path: &Path| std::fs::metadata(path).and_then(|m| m.modified()).ok();
        let built = modified(&binary).context("the stack's kubectl is not built")?;
        if modified(&pushed).is_some_and(|at| at >= built) {
            return Ok(reference);
        }
        let layer = self.state.join("registry").join("kubectl.layer");
        let _ = std::fs::remove_dir_all(&layer);
        std::fs::create_dir_all(layer.join("root/usr/local/bin"))?;
        std::fs::copy(&binary, layer.join("root/usr/local/bin/kubectl"))?;
        let tar = layer.join("layer.tar");
        run(Command::new("tar")
            .args(["--owner=0", "--group=0", "--numeric-owner", "-C"])
            .arg(layer.join("root"))
            .arg("-cf")
            .arg(&tar)
            .arg("usr"))?;
        let crane = self.bin("crane");
        run(Command::new(&crane)
            .args(["append", "--insecure", "--oci-empty-base", "-f"])
            .arg(&tar)
            .args(["-t", &reference]))
        .context("pushing the kubectl image")?;
        run(Command::new(&crane).args([
            "mutate",
            "--insecure",
            "--entrypoint=/usr/local/bin/kubectl",
            "--user=65532",
            "-t",
            &reference,
            &reference,
        ]))
        .context("setting the kubectl image's entrypoint and user")?;
        std::fs::remove_dir_all(&layer)?;
        std::fs::write(&pushed, &reference)?;
        Ok(reference)
    }
}

/// Runs `command`; its standard error in the failure.
fn run(command: &mut Command) -> anyhow::Result<()> {
    let output = command.output()?;
    if !output.status.success() {
        bail!("{}", String::from_utf8_lossy(&output.stderr).trim());
    }
    Ok(())
}
