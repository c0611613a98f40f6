//! The OCI image archives of our binaries (`make images`, i.e. `images/build.sh`): each is an OCI
//! image layout whose index, manifest, config and layer agree with their digests and sizes, named
//! as the charts expect, running as the non-root user 65532; and its binary, run from the
//! unpacked root filesystem with the image's own loader and libraries (none of the host's),
//! prints the crate version.
//!
//! The images are (re)built first by the same script, once for all tests, from the `dev`
//! binaries that `cargo test --workspace` has built anyway (`--no-build --profile dev`, after
//! [`ks_tests::binaries::build`]): the packaging is the same as `make images`, without another
//! compilation of the binaries (a release build is many minutes on a 2-core CI machine, and even
//! the script's own dev build resolves features differently and compiled them again).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use anyhow::{Context, bail, ensure};
use ks_tests::tools::output;
use serde_json::Value;

const VERSION: &str = env!("CARGO_PKG_VERSION");
/// Where the charts' default images live.
const REPOSITORY: &str = "ghcr.io/kubestellar-rs";
const MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
const CONFIG: &str = "application/vnd.oci.image.config.v1+json";
const LAYER: &str = "application/vnd.oci.image.layer.v1.tar+gzip";

#[test]
fn ks_hub_image_is_valid_and_runs() -> anyhow::Result<()> {
    check_image("ks-hub")
}

#[test]
fn ks_addon_image_is_valid_and_runs() -> anyhow::Result<()> {
    check_image("ks-addon")
}

#[test]
fn ks_agent_image_is_valid_and_runs() -> anyhow::Result<()> {
    check_image("ks-agent")
}

/// The cargo target directory this test binary was built into (`<target>/debug/deps/images-…`).
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    exe.ancestors()
        .nth(3)
        .expect("<target>/<profile>/deps/<test>")
        .to_path_buf()
}

/// Runs `images/build.sh` once per test process; the directory holding the archives.
fn images() -> anyhow::Result<&'static Path> {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let built = BUILT.get_or_init(|| {
        ks_tests::binaries::build().map_err(|e| format!("{e:#}"))?;
        let target = target_dir();
        let status = Command::new(ks_tests::harness::repo_root().join("images/build.sh"))
            .args(["--no-build", "--profile", "dev"])
            .env("CARGO_TARGET_DIR", &target)
            .status()
            .map_err(|e| format!("running images/build.sh: {e}"))?;
        if !status.success() {
            return Err(format!("images/build.sh failed ({status})"));
        }
        Ok(target.join("images"))
    });
    built.as_deref().map_err(|e| anyhow::anyhow!("{e}"))
}

fn check_image(name: &str) -> anyhow::Result<()> {
    let archive = images()?.join(format!("{name}.oci.tar"));
    let work = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("image-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    let (layout, rootfs) = (work.join("layout"), work.join("rootfs"));
    std::fs::create_dir_all(&layout)?;
    std::fs::create_dir_all(&rootfs)?;
    let checked = unpack_and_check(name, &archive, &layout, &rootfs)
        .and_then(|()| run_version(name, &rootfs))
        .with_context(|| format!("{}", archive.display()));
    std::fs::remove_dir_all(&work)?;
    checked
}

/// Checks the layout from index.json down, unpacking the layers into `rootfs`.
fn unpack_and_check(name: &str, archive: &Path, layout: &Path, rootfs: &Path) -> anyhow::Result<()> {
    output(Command::new("tar").arg("-xf").arg(archive).arg("-C").arg(layout))?;
    let oci_layout: Value = serde_json::from_slice(&std::fs::read(layout.join("oci-layout"))?)?;
    ensure!(oci_layout["imageLayoutVersion"] == "1.0.0", "oci-layout: {oci_layout}");

    let index: Value = serde_json::from_slice(&std::fs::read(layout.join("index.json"))?)?;
    ensure!(index["schemaVersion"] == 2, "index.json schemaVersion: {index}");
    let [manifest_descriptor] = index["manifests"].as_array().map(Vec::as_slice).unwrap_or_default() else {
        bail!("index.json should list exactly one manifest: {index}");
    };
    let reference = format!("{REPOSITORY}/{name}:{VERSION}");
    ensure!(
        manifest_descriptor["annotations"]["org.opencontainers.image.ref.name"] == reference.as_str(),
        "index.json should name the image {reference}: {manifest_descriptor}"
    );
    let manifest: Value = serde_json::from_slice(&blob(layout, manifest_descriptor, MANIFEST)?)?;
    ensure!(manifest["schemaVersion"] == 2, "manifest schemaVersion: {manifest}");

    let config: Value = serde_json::from_slice(&blob(layout, &manifest["config"], CONFIG)?)?;
    ensure!(
        config["os"] == "linux" && config["architecture"] == "amd64",
        "platform: {config}"
    );
    ensure!(
        config["config"]["User"] == "65532:65532",
        "not the non-root user: {config}"
    );
    let entrypoint = format!("/usr/local/bin/{name}");
    ensure!(
        config["config"]["Entrypoint"] == serde_json::json!([entrypoint]),
        "entrypoint: {config}"
    );

    let layers = manifest["layers"].as_array().context("manifest without layers")?;
    let diff_ids = config["rootfs"]["diff_ids"]
        .as_array()
        .context("config without diff_ids")?;
    ensure!(
        !layers.is_empty() && layers.len() == diff_ids.len(),
        "layers {layers:?} vs diff_ids {diff_ids:?}"
    );
    for (layer, diff_id) in layers.iter().zip(diff_ids) {
        blob(layout, layer, LAYER)?;
        let compressed = blob_path(layout, layer)?;
        // The diff_id is the digest of the uncompressed layer.
        let uncompressed = output(
            Command::new("sh")
                .arg("-c")
                .arg("gzip -dc \"$0\" | sha256sum")
                .arg(&compressed),
        )?;
        let digest = format!("sha256:{}", uncompressed.split_whitespace().next().unwrap_or_default());
        ensure!(
            *diff_id == digest.as_str(),
            "diff_id {diff_id} but the layer is {digest}"
        );
        output(Command::new("tar").arg("-xzf").arg(&compressed).arg("-C").arg(rootfs))?;
    }

    let passwd = std::fs::read_to_string(rootfs.join("etc/passwd"))?;
    ensure!(
        passwd.lines().any(|l| l.contains(":65532:65532:")),
        "/etc/passwd: {passwd}"
    );
    let ca = std::fs::metadata(rootfs.join("etc/ssl/certs/ca-certificates.crt")).context("CA bundle")?;
    ensure!(ca.len() > 0, "empty CA bundle");
    Ok(())
}

/// Runs the entrypoint's `--version` from `rootfs` with the image's dynamic loader and libraries.
fn run_version(name: &str, rootfs: &Path) -> anyhow::Result<()> {
    let binary = rootfs.join("usr/local/bin").join(name);
    let Some(interpreter) = elf_interpreter(&std::fs::read(&binary)?)? else {
        // A static binary needs nothing from the image.
        let printed = output(Command::new(&binary).arg("--version").env_clear())?;
        return expect_version(name, &printed);
    };
    let loader = rootfs.join(interpreter.trim_start_matches('/'));
    ensure!(
        loader.is_file(),
        "the image lacks the loader {interpreter} the binary asks for"
    );
    let library_path = library_dirs(rootfs)?.join(":");
    // ld.so falls back to the host's system directories for a library the path lacks, so check
    // first that every library resolves inside the image.
    let listed = output(
        Command::new(&loader)
            .args(["--library-path", &library_path, "--list"])
            .arg(&binary)
            .env_clear(),
    )?;
    for line in listed.lines().filter(|l| l.contains("=>")) {
        let resolved = line.split("=>").nth(1).unwrap_or_default().trim();
        ensure!(
            resolved.starts_with(&*rootfs.to_string_lossy()),
            "{name} loads a library from outside the image: {line}\n{listed}"
        );
    }
    let printed = output(
        Command::new(&loader)
            .args(["--library-path", &library_path])
            .arg(&binary)
            .arg("--version")
            .env_clear(),
    )?;
    expect_version(name, &printed)
}

fn expect_version(name: &str, printed: &str) -> anyhow::Result<()> {
    let expected = format!("{name} {VERSION}");
    ensure!(
        printed.trim() == expected,
        "--version printed {printed:?}, expected {expected:?}"
    );
    Ok(())
}

/// Every directory of `rootfs` holding a shared library (`*.so*`).
fn library_dirs(rootfs: &Path) -> anyhow::Result<Vec<String>> {
    let mut dirs = Vec::new();
    let mut pending = vec![rootfs.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let mut has_library = false;
        for entry in std::fs::read_dir(&dir)? {
            let entry = entry?;
            let file_type = entry.file_type()?;
            if file_type.is_dir() {
                pending.push(entry.path());
            } else if entry.file_name().to_string_lossy().contains(".so") {
                has_library = true;
            }
        }
        if has_library {
            dirs.push(dir.to_string_lossy().into_owned());
        }
    }
    dirs.sort();
    Ok(dirs)
}

/// The ELF program interpreter (PT_INTERP) of a 64-bit little-endian executable, if any.
fn elf_interpreter(elf: &[u8]) -> anyhow::Result<Option<String>> {
    const PT_INTERP: u32 = 3;
    ensure!(elf.get(..5) == Some(b"\x7fELF\x02".as_slice()), "not a 64-bit ELF file");
    let number = |at: usize, width: usize| -> anyhow::Result<u64> {
        let bytes = elf.get(at..at + width).context("truncated ELF file")?;
        Ok(bytes.iter().rev().fold(0, |n, b| (n << 8) | u64::from(*b)))
    };
    let (offset, size, count) = (number(0x20, 8)?, number(0x36, 2)?, number(0x38, 2)?);
    for index in 0..count {
        let header = usize::try_from(offset + index * size)?;
        if number(header, 4)? == u64::from(PT_INTERP) {
            let (start, length) = (
                usize::try_from(number(header + 8, 8)?)?,
                usize::try_from(number(header + 32, 8)?)?,
            );
            let path = elf.get(start..start + length).context("truncated PT_INTERP")?;
            return Ok(Some(String::from_utf8_lossy(path).trim_end_matches('\0').to_string()));
        }
    }
    Ok(None)
}

/// The blob a descriptor names, after checking its media type, size and digest.
fn blob(layout: &Path, descriptor: &Value, media_type: &str) -> anyhow::Result<Vec<u8>> {
    ensure!(
        descriptor["mediaType"] == media_type,
        "expected a {media_type}: {descriptor}"
    );
    let path = blob_path(layout, descriptor)?;
    let bytes = std::fs::read(&path).with_context(|| format!("blob of {descriptor}"))?;
    ensure!(
        descriptor["size"].as_u64() == Some(bytes.len() as u64),
        "{descriptor}: the blob has {} bytes",
        bytes.len()
    );
    let printed = output(Command::new("sha256sum").arg(&path))?;
    let digest = format!("sha256:{}", printed.split_whitespace().next().unwrap_or_default());
    ensure!(
        descriptor["digest"] == digest.as_str(),
        "{descriptor}: the blob's digest is {digest}"
    );
    Ok(bytes)
}

fn blob_path(layout: &Path, descriptor: &Value) -> anyhow::Result<PathBuf> {
    let digest = descriptor["digest"].as_str().context("descriptor without digest")?;
    let hex = digest.strip_prefix("sha256:").context("not a sha256 digest")?;
    ensure!(
        hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()),
        "bad digest {digest}"
    );
    Ok(layout.join("blobs/sha256").join(hex))
}
