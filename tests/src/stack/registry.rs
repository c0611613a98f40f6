//! The stack's OCI registry: distribution's `registry`, built from the Go module proxy, on
//! [`REGISTRY`] (plain HTTP at the stack address on the host's loopback link, which the real nodes
//! reach from their own network namespaces too) with its storage in `.stack/registry/`. The real
//! nodes pull their images from it, as any node pulls from a registry. `crane` (go-containerregistry,
//! also from the proxy) pushes the image archives that `images/build.sh` packs.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, bail};

use super::{Stack, wait_tcp_at};

/// Where the registry listens: port [`PORT`] at [`super::node::STACK_ADDRESS`].
pub const REGISTRY: &str = "10.88.0.1:22501";
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
        wait_tcp_at(super::node::STACK_ADDRESS, PORT, Duration::from_secs(30))
            .with_context(|| self.procs.tail("registry", 20))
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
        let binary = modified(&self.our_binaries.join(name)).with_context(|| format!("{name} is not built"))?;
        if modified(&pushed).is_some_and(|at| at >= binary) {
            return Ok(image_ref(name));
        }
        let repo = self.state.parent().context("the state directory has a parent")?;
        let profile = match self.our_binaries.file_name().and_then(|n| n.to_str()) {
            Some("debug") | None => "dev",
            Some(other) => other,
        };
        // Packed again unless an archive newer than the binary and the script is there (the
        // images test packs them all).
        let script = repo.join("images/build.sh");
        let newest_input = binary.max(modified(&script).context("images/build.sh")?);
        if modified(&archive).is_none_or(|at| at < newest_input) {
            run(Command::new(&script)
                .args(["--no-build", "--profile", profile, name])
                .env("CARGO_TARGET_DIR", target))
            .with_context(|| format!("packing the {name} image"))?;
        }
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
    /// The stack's static Go `tool` (`kubectl`, `helm`) as an image, for Pods that run it (the
    /// hub chart's `helm test`, its ITS hooks), as users pull one: one layer holding
    /// `/usr/local/bin/<tool>` and a world-writable `/tmp` (helm's homes go there: 65532 may
    /// write nowhere else), run as 65532. No CA bundle: helm pulls charts over plain HTTP only,
    /// as from this registry. Pushed unless the registry has it from this binary already; its
    /// reference.
    pub fn push_tool_image(&self, tool: &str) -> anyhow::Result<String> {
        let binary = self.bin(tool);
        let reference = format!("{REGISTRY}/kubestellar-rs/{tool}:stack");
        let registry = self.state.join("registry");
        // Not `<tool>.pushed`: that marked the kubectl image before it had /tmp.
        let pushed = registry.join(format!("{tool}.tool.pushed"));
        let built = modified(&binary).with_context(|| format!("the stack's {tool} is not built"))?;
        if modified(&pushed).is_some_and(|at| at >= built) {
            return Ok(reference);
        }
        let layer = registry.join(format!("{tool}.layer"));
        let _ = std::fs::remove_dir_all(&layer);
        let root = layer.join("root");
        std::fs::create_dir_all(root.join("usr/local/bin"))?;
        std::fs::copy(&binary, root.join("usr/local/bin").join(tool))?;
        std::fs::create_dir(root.join("tmp"))?;
        std::fs::set_permissions(root.join("tmp"), std::fs::Permissions::from_mode(0o1777))?;
        let tar = layer.join("layer.tar");
        run(Command::new("tar")
            .args(["--owner=0", "--group=0", "--numeric-owner", "-C"])
            .arg(&root)
            .arg("-cf")
            .arg(&tar)
            .args(["usr", "tmp"]))?;
        let crane = self.bin("crane");
        run(Command::new(&crane)
            .args(["append", "--insecure", "--oci-empty-base", "-f"])
            .arg(&tar)
            .args(["-t", &reference]))
        .with_context(|| format!("pushing the {tool} image"))?;
        run(Command::new(&crane).args([
            "mutate",
            "--insecure",
            &format!("--entrypoint=/usr/local/bin/{tool}"),
            "--user=65532",
            "-t",
            &reference,
            &reference,
        ]))
        .with_context(|| format!("setting the {tool} image's entrypoint and user"))?;
        std::fs::remove_dir_all(&layer)?;
        std::fs::write(&pushed, &reference)?;
        Ok(reference)
    }

    /// Packs the chart in `chart_dir` and pushes it to the registry, for what installs a chart
    /// from an OCI registry (the hub chart's ITS hook). The stack's helm, with homes of its own
    /// under `.stack/registry/helm`: the user's helm configuration is neither read nor changed.
    /// The chart's reference and its version.
    pub fn push_chart(&self, chart_dir: &Path) -> anyhow::Result<(String, String)> {
        #[derive(serde::Deserialize)]
        struct ChartMeta {
            name: String,
            version: String,
        }
        let file = chart_dir.join("Chart.yaml");
        let meta: ChartMeta = serde_saphyr::from_str(&std::fs::read_to_string(&file)?)
            .with_context(|| format!("reading {}", file.display()))?;
        let registry = self.state.join("registry");
        let packages = registry.join("charts");
        std::fs::create_dir_all(&packages)?;
        let homes = registry.join("helm");
        let helm = || {
            let mut command = Command::new(self.bin("helm"));
            command
                .env("HELM_CACHE_HOME", homes.join("cache"))
                .env("HELM_CONFIG_HOME", homes.join("config"))
                .env("HELM_DATA_HOME", homes.join("data"));
            command
        };
        run(helm().arg("package").arg(chart_dir).arg("--destination").arg(&packages))
            .with_context(|| format!("packing the chart {}", chart_dir.display()))?;
        let package = packages.join(format!("{}-{}.tgz", meta.name, meta.version));
        let repository = format!("oci://{REGISTRY}/charts");
        run(helm()
            .arg("push")
            .arg(&package)
            .args([repository.as_str(), "--plain-http"]))
        .with_context(|| format!("pushing {}", package.display()))?;
        Ok((format!("{repository}/{}", meta.name), meta.version))
    }
}

/// When `path` was last written, if it exists: what the stack's "pushed" and archive files are
/// judged fresh by.
fn modified(path: &Path) -> Option<std::time::SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// Runs `command`; its standard error in the failure.
fn run(command: &mut Command) -> anyhow::Result<()> {
    let output = command.output()?;
    if !output.status.success() {
        bail!("{}", String::from_utf8_lossy(&output.stderr).trim());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_registry_listens_at_the_stack_address() {
        let expected = format!("{}:{}", super::super::node::STACK_ADDRESS, super::PORT);
        assert_eq!(super::REGISTRY, expected);
    }
}
