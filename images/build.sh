#!/usr/bin/env bash
# Builds OCI image archives of our three binaries without a container runtime or daemon:
#
#   images/build.sh [--no-build] [--profile PROFILE] [ks-hub|ks-addon|ks-agent|ks-pod ...]   (default: the first three)
#
# PROFILE is the cargo profile of the binaries, `release` unless said otherwise; the test suite
# packages the `dev` binaries it has built anyway (same packaging, without a second compilation
# of the whole workspace).
#
# Output: $CARGO_TARGET_DIR/images/<name>.oci.tar (default target/images/), an OCI image layout
# (oci-layout, index.json, blobs/sha256/...) in a tar, loadable with e.g.
# `skopeo copy oci-archive:target/images/ks-hub.oci.tar docker://REGISTRY/ks-hub:TAG`,
# `kind load image-archive` or `ctr images import`.
#
# Each image is one layer: the binary at /usr/local/bin/<name> (the entrypoint), exactly
# the shared libraries `ldd` says it loads (glibc's loader, libc, libm, libgcc_s) at the paths the
# binary asks for, the CA bundle, and /etc/passwd, /etc/group, /etc/nsswitch.conf naming the
# non-root user 65532 (`nonroot`, as distroless) that the image runs as. The binaries stay
# glibc-linked (a musl build would be static but trades glibc's allocator for musl's, much slower
# under a multi-threaded tokio runtime), so the image ships the host's glibc that they were linked
# against. The archive is byte-for-byte reproducible: sorted entries, fixed owners and times.
#
# ks-pod (package ks-tests) is the stack's test workload and pause image, for its real nodes; it
# is not a release image.
#
# Names: $KS_IMAGE_REPOSITORY/<name>:<version>, KS_IMAGE_REPOSITORY defaulting to
# ghcr.io/kubestellar-rs (what the charts default to), the version being what `<name> --version`
# prints (the crate version).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
OUT="$TARGET/images"
REPOSITORY="${KS_IMAGE_REPOSITORY:-ghcr.io/kubestellar-rs}"
# Timestamps in layers and config; 0 (1970) unless the caller pins another for a release.
EPOCH="${SOURCE_DATE_EPOCH:-0}"
ALL=(ks-hub ks-addon ks-agent)

log() { printf '[images %(%H:%M:%S)T] %s\n' -1 "$*"; }
die() { echo "images/build.sh: $*" >&2; exit 1; }

build=1
profile=release
names=()
while [ $# -gt 0 ]; do
  case "$1" in
    --no-build) build=0 ;;
    --profile) [ $# -ge 2 ] || die "--profile needs a cargo profile name"; profile="$2"; shift ;;
    -h|--help) sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    ks-hub|ks-addon|ks-agent|ks-pod) names+=("$1") ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
  shift
done
# cargo puts the dev profile's output in target/debug.
profile_dir="$profile"
[ "$profile" = dev ] && profile_dir=debug
[ ${#names[@]} -gt 0 ] || names=("${ALL[@]}")

if [ "$build" = 1 ]; then
  # One cargo invocation, so the three binaries share one compilation of their dependencies.
  t0=$SECONDS
  packages=()
  for name in "${names[@]}"; do
    if [ "$name" = ks-pod ]; then packages+=(--package ks-tests --bin ks-pod); else packages+=(--package "$name" --bin "$name"); fi
  done
  log "cargo build --profile $profile ${names[*]}"
  (cd "$ROOT" && "${CARGO:-cargo}" build --profile "$profile" --locked "${packages[@]}")
  log "$profile build: $((SECONDS - t0))s"
fi

# Files of the layer that are the same for every image.
write_etc() {
  local root="$1"
  mkdir -p "$root/etc/ssl/certs" "$root/tmp"
  chmod 1777 "$root/tmp"
  printf '%s\n' 'root:x:0:0:root:/root:/sbin/nologin' 'nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin' \
    >"$root/etc/passwd"
  printf '%s\n' 'root:x:0:' 'nonroot:x:65532:' >"$root/etc/group"
  # glibc resolves names through NSS; without this file it would try DNS before /etc/hosts.
  echo 'hosts: files dns' >"$root/etc/nsswitch.conf"
  install -m 0644 /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
}

# Copies `binary`'s dynamic loader and libraries to the same absolute paths under `root`.
# `ldd` prints "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)" and, for the loader,
# "/lib64/ld-linux-x86-64.so.2 (0x...)"; linux-vdso is in the kernel and has no file.
copy_libraries() {
  local binary="$1" root="$2" path
  ldd "$binary" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}' | sort -u |
    while read -r path; do
      mkdir -p "$root$(dirname "$path")"
      # -L: the file itself, not the host's symlink chain (e.g. merged /usr).
      cp -L "$path" "$root$path"
      chmod 0755 "$root$path"
    done
  ldd "$binary" | grep -q 'not found' && die "$binary: a shared library was not found: $(ldd "$binary")"
  return 0
}

# A deterministic tar of `dir`'s contents (no "./" prefix).
reproducible_tar() {
  local dir="$1" out="$2"
  (cd "$dir" && find . -mindepth 1 -maxdepth 1 -printf '%P\n' | sort |
    tar --sort=name --mtime="@$EPOCH" --owner=0 --group=0 --numeric-owner --format=posix \
      --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
      -cf "$out" --files-from=-)
}

sha() { sha256sum "$1" | cut -d' ' -f1; }
size() { stat -c %s "$1"; }

# Puts `file` into the layout's blobs; prints its digest hex.
add_blob() {
  local file="$1" layout="$2" digest
  digest="$(sha "$file")"
  mv "$file" "$layout/blobs/sha256/$digest"
  echo "$digest"
}

build_image() {
  local name="$1" binary="$TARGET/$profile_dir/$1" version ref work root layout
  local layer_tar diff_id layer layer_size config config_size manifest manifest_size t0=$SECONDS
  [ -x "$binary" ] || die "$binary is missing: run images/build.sh without --no-build"
  version="$("$binary" --version | awk '{print $2}')"
  [ -n "$version" ] || die "$binary --version printed no version"
  ref="$REPOSITORY/$name:$version"
  work="$(mktemp -d "$OUT/.$name.XXXXXX")"
  root="$work/rootfs"; layout="$work/layout"
  mkdir -p "$root/usr/local/bin" "$layout/blobs/sha256"

  install -m 0755 "$binary" "$root/usr/local/bin/$name"
  copy_libraries "$binary" "$root"
  write_etc "$root"

  layer_tar="$work/layer.tar"
  reproducible_tar "$root" "$layer_tar"
  diff_id="$(sha "$layer_tar")"
  # gzip's default level: a third of -9's time on a debug build of ks-hub (4 s against 13), for 1 % more bytes.
  gzip -n -6 "$layer_tar"
  layer_size="$(size "$layer_tar.gz")"
  layer="$(add_blob "$layer_tar.gz" "$layout")"

  # The image config (OCI image spec, config.md). Fields are fixed strings and hex digests,
  # so plain printf produces valid JSON.
  printf '%s' "{\"architecture\":\"amd64\",\"os\":\"linux\",\"created\":\"$(date -u -d "@$EPOCH" +%Y-%m-%dT%H:%M:%SZ)\",\
\"config\":{\"User\":\"65532:65532\",\"Entrypoint\":[\"/usr/local/bin/$name\"],\
\"Env\":[\"PATH=/usr/local/bin:/usr/bin:/bin\",\"SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt\"],\"WorkingDir\":\"/\",\
\"Labels\":{\"org.opencontainers.image.title\":\"$name\",\"org.opencontainers.image.version\":\"$version\",\
\"org.opencontainers.image.licenses\":\"Apache-2.0\"}},\
\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[\"sha256:$diff_id\"]},\
\"history\":[{\"created_by\":\"images/build.sh\"}]}" >"$work/config.json"
  config_size="$(size "$work/config.json")"
  config="$(add_blob "$work/config.json" "$layout")"

  printf '%s' "{\"schemaVersion\":2,\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\",\
\"config\":{\"mediaType\":\"application/vnd.oci.image.config.v1+json\",\"digest\":\"sha256:$config\",\"size\":$config_size},\
\"layers\":[{\"mediaType\":\"application/vnd.oci.image.layer.v1.tar+gzip\",\"digest\":\"sha256:$layer\",\"size\":$layer_size}]}" \
    >"$work/manifest.json"
  manifest_size="$(size "$work/manifest.json")"
  manifest="$(add_blob "$work/manifest.json" "$layout")"

  # ref.name carries the full reference (skopeo's and podman's convention); containerd reads
  # io.containerd.image.name.
  printf '%s' "{\"schemaVersion\":2,\"mediaType\":\"application/vnd.oci.image.index.v1+json\",\
\"manifests\":[{\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\",\"digest\":\"sha256:$manifest\",\"size\":$manifest_size,\
\"platform\":{\"architecture\":\"amd64\",\"os\":\"linux\"},\
\"annotations\":{\"org.opencontainers.image.ref.name\":\"$ref\",\"io.containerd.image.name\":\"$ref\"}}]}" \
    >"$layout/index.json"
  printf '%s' '{"imageLayoutVersion":"1.0.0"}' >"$layout/oci-layout"

  reproducible_tar "$layout" "$work/image.tar"
  mv "$work/image.tar" "$OUT/$name.oci.tar"
  rm -rf "$work"
  log "$OUT/$name.oci.tar: $ref, $((layer_size / 1024)) KiB compressed layer, sha256:$manifest ($((SECONDS - t0))s)"
}

mkdir -p "$OUT"
for name in "${names[@]}"; do build_image "$name"; done
