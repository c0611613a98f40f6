//! Upstream sources fetched through the Go module proxy (`go mod download`), never from the
//! internet directly. The Go module cache keeps them between runs.

use std::path::PathBuf;
use std::process::Command;

/// Upstream KubeStellar, whose CRDs ours must stay compatible with.
pub const KUBESTELLAR_MODULE: &str = "github.com/kubestellar/kubestellar";
pub const KUBESTELLAR_VERSION: &str = "v0.30.0";

/// The directory of `module@version` in the Go module cache, downloading it if needed.
pub fn module_dir(module: &str, version: &str) -> Result<PathBuf, String> {
    let target = format!("{module}@{version}");
    let output = Command::new("go")
        .args(["mod", "download", "-json", &target])
        .env("GOTOOLCHAIN", "local")
        .env("GOFLAGS", "-mod=mod")
        .output()
        .map_err(|e| format!("cannot run `go` (is Go installed and on PATH?): {e}"))?;
    let info: serde_json::Value = serde_json::from_slice(&output.stdout).map_err(|e| {
        format!(
            "`go mod download -json {target}` printed no JSON ({e}): {}",
            String::from_utf8_lossy(&output.stderr)
        )
    })?;
    if let Some(error) = info["Error"].as_str() {
        return Err(format!("go mod download {target}: {error}"));
    }
    info["Dir"]
        .as_str()
        .map(PathBuf::from)
        .ok_or_else(|| format!("go mod download {target}: no Dir in {info}"))
}
