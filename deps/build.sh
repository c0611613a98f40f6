#!/usr/bin/env bash
# Builds the upstream test components (kube-apiserver, etcd, OCM, kwok, helm, jaeger, ...) from
# the Go module proxy at the pins in deps/versions.env, into a cache outside the repo, and copies
# the CRD YAMLs the tests apply. A binary is rebuilt only when its pin, its wrapper go.mod/go.sum,
# its ldflags or the Go toolchain change.
#
#   deps/build.sh [all|NAME...]        build (default: all)
#   deps/build.sh tidy [all|NAME...]   regenerate deps/go/NAME/go.{mod,sum} from versions.env
#
# NAME: kubernetes kubelet etcd ocm kwok helm jaeger kubeflex registry crane crds, or kubestellar (upstream, for `make bench`; not in all)
# Outputs: $KS_CACHE/bin/<bin>-<version> (+ .stamp), symlink $KS_CACHE/bin/<bin> -> it,
#          $KS_CACHE/crds/{ocm-hub,ocm-spoke,kubeflex,kubestellar,kwok-stages}/*.yaml
#          KS_CACHE defaults to $HOME/.cache/kubestellar-rs.
set -euo pipefail

DEPS="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.env
. "$DEPS/versions.env"
KS_CACHE="${KS_CACHE:-$HOME/.cache/kubestellar-rs}"
BIN="$KS_CACHE/bin"

# Never let go fetch another toolchain (only the proxy is reachable, and pins must be reproducible).
export GOTOOLCHAIN=local
# Static binaries; none of the pinned tools needs cgo (OCM >= v1.2.0 no longer links confluent-kafka).
export CGO_ENABLED=0
# -trimpath: no local paths in binaries; -buildvcs=false: the wrapper dirs sit in this repo's git
# tree and VCS stamping would change the binary on every commit. -mod=readonly: build exactly the
# committed go.sum (which also means the checksum database is never needed at build time).
BUILD_GOFLAGS="-trimpath -buildvcs=false -mod=readonly"
# Pinned top-level modules whose tags the checksum database reachable here does not know (lookups
# answer 404; ocm, api and kubestellar tags are known). Only `tidy` needs this (tidy_go learns
# the transitive ones); builds verify against the committed go.sum instead.
TIDY_GONOSUMDB="k8s.io/kubernetes,github.com/kubestellar/kubeflex"

ALL=(kubernetes kubelet etcd ocm kwok helm jaeger kubeflex registry crane crds)
# Built only on request: upstream KubeStellar is what `make bench` compares us with; tests never need it.
OPTIONAL=(kubestellar)
CURRENT="startup"
trap 'rc=$?; if [ $rc -ne 0 ]; then echo "deps/build.sh: FAILED while $CURRENT (exit $rc)" >&2; fi' EXIT

log() { printf '[deps %(%H:%M:%S)T] %s\n' -1 "$*"; }
die() { echo "deps/build.sh: $*" >&2; exit 1; }

# --- per-component facts -------------------------------------------------------------------
# module VERSION of the wrapper's single requirement.
module_of() {
  case "$1" in
    # kubelet is its own wrapper of the same module, so that the real nodes' binaries are not a
    # change of every other Kubernetes binary's build key.
    kubernetes|kubelet) echo "k8s.io/kubernetes $KUBERNETES_VERSION" ;;
    etcd)       echo "go.etcd.io/etcd/server/v3 $ETCD_VERSION" ;;
    ocm)        echo "open-cluster-management.io/ocm $OCM_VERSION" ;;
    kwok)       echo "sigs.k8s.io/kwok $KWOK_VERSION" ;;
    helm)       echo "helm.sh/helm/v3 $HELM_VERSION" ;;
    jaeger)     echo "github.com/jaegertracing/jaeger $JAEGER_VERSION" ;;
    kubeflex)   echo "github.com/kubestellar/kubeflex $KUBEFLEX_VERSION" ;;
    kubestellar) echo "github.com/kubestellar/kubestellar $KUBESTELLAR_VERSION" ;;
    registry)   echo "github.com/distribution/distribution/v3 $REGISTRY_VERSION" ;;
    crane)      echo "github.com/google/go-containerregistry $CRANE_VERSION" ;;
    *) die "unknown component '$1' (known: ${ALL[*]} ${OPTIONAL[*]})" ;;
  esac
}

# binary=package lines.
bins_of() {
  case "$1" in
    kubernetes) printf '%s\n' kube-apiserver=k8s.io/kubernetes/cmd/kube-apiserver \
                  kube-controller-manager=k8s.io/kubernetes/cmd/kube-controller-manager \
                  kube-scheduler=k8s.io/kubernetes/cmd/kube-scheduler \
                  kubectl=k8s.io/kubernetes/cmd/kubectl ;;
    # A real node's kubelet, and the kube-proxy that gives its Pods the Services (`kubernetes`).
    kubelet)    printf '%s\n' kubelet=k8s.io/kubernetes/cmd/kubelet kube-proxy=k8s.io/kubernetes/cmd/kube-proxy ;;
    # etcd's main package is the server module root (server/main.go).
    etcd)       echo etcd=go.etcd.io/etcd/server/v3 ;;
    # Upstream names: cmd/addon is the binary of the "addon-manager" image (run as `addon manager`);
    # placement (`placement controller`) decides Placements, e.g. for add-on install strategies.
    ocm)        printf '%s\n' registration=open-cluster-management.io/ocm/cmd/registration \
                  registration-operator=open-cluster-management.io/ocm/cmd/registration-operator \
                  addon=open-cluster-management.io/ocm/cmd/addon \
                  placement=open-cluster-management.io/ocm/cmd/placement ;;
    kwok)       echo kwok=sigs.k8s.io/kwok/cmd/kwok ;;
    helm)       echo helm=helm.sh/helm/v3/cmd/helm ;;
    jaeger)     echo jaeger=github.com/jaegertracing/jaeger/cmd/jaeger ;;
    # The KubeFlex operator (its image's /manager): reconciles ControlPlanes and runs their hooks.
    kubeflex)   echo kubeflex-controller-manager=github.com/kubestellar/kubeflex/cmd/manager ;;
    # The two hub processes of upstream's core chart (the WDS controller-manager and the OCM transport).
    kubestellar) printf '%s\n' kubestellar-controller-manager=github.com/kubestellar/kubestellar/cmd/controller-manager \
                  ocm-transport-controller=github.com/kubestellar/kubestellar/pkg/transport/ocm-transport-controller ;;
    # The stack's OCI registry, which the real node pulls from, and the client that pushes to it.
    registry)   echo registry=github.com/distribution/distribution/v3/cmd/registry ;;
    crane)      echo crane=github.com/google/go-containerregistry/cmd/crane ;;
  esac
}

# Version strings the upstream release builds stamp in with -X (without them e.g. kube-apiserver's
# /version says v0.0.0-master+$Format:%H$ and helm says v3.22+unreleased). Run in the wrapper dir.
ldflags_of() {
  local v minor
  case "$1" in
    kubernetes|kubelet)
      v="$KUBERNETES_VERSION"; minor="${v#v1.}"; minor="${minor%%.*}"
      echo "-s -w -X k8s.io/component-base/version.gitVersion=$v -X k8s.io/component-base/version.gitMajor=1" \
           "-X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean" \
           "-X k8s.io/client-go/pkg/version.gitVersion=$v -X k8s.io/client-go/pkg/version.gitMajor=1" \
           "-X k8s.io/client-go/pkg/version.gitMinor=$minor -X k8s.io/client-go/pkg/version.gitTreeState=clean" ;;
    etcd) echo "-s -w" ;;   # etcd's version is a constant in go.etcd.io/etcd/api/v3/version
    ocm)
      v="$OCM_VERSION"; minor="${v#v1.}"; minor="${minor%%.*}"
      echo "-s -w -X open-cluster-management.io/ocm/pkg/version.versionFromGit=$v" \
           "-X open-cluster-management.io/ocm/pkg/version.majorFromGit=1" \
           "-X open-cluster-management.io/ocm/pkg/version.minorFromGit=$minor" ;;
    kwok) echo "-s -w" ;;   # sigs.k8s.io/kwok/pkg/consts.Version is already the tag's version in source
    helm)
      # Like helm's Makefile: default KubeVersion for `helm template` follows the client-go it links.
      v="$(go list -m -f '{{.Version}}' k8s.io/client-go)"; v="${v#v0.}"; minor="${v%%.*}"
      echo "-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION" \
           "-X helm.sh/helm/v3/internal/version.metadata= -X helm.sh/helm/v3/internal/version.gitTreeState=clean" \
           "-X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=$minor" \
           "-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$minor" ;;
    jaeger) echo "-s -w -X github.com/jaegertracing/jaeger/internal/version.latestVersion=$JAEGER_V2_VERSION" ;;
    kubeflex) echo "-s -w -X main.Version=$KUBEFLEX_VERSION" ;;
    kubestellar) echo "-s -w -X k8s.io/component-base/version.gitVersion=$KUBESTELLAR_VERSION -X k8s.io/client-go/pkg/version.gitVersion=$KUBESTELLAR_VERSION" ;;
    registry) echo "-s -w -X github.com/distribution/distribution/v3/version.version=$REGISTRY_VERSION" ;;
    crane) echo "-s -w" ;;
  esac
}

# --- tidy: (re)generate a wrapper module from versions.env ------------------------------------
# The wrapper requires the upstream module and keeps its `go`/`godebug` lines (so GODEBUG defaults
# match upstream builds) and its versioned replace lines (dependencies ignore replaces, so they
# must be copied). Local-path replaces are handled specially: kubernetes' ./staging/src/X become
# X => X v0.MINOR.PATCH (the published twins); others (etcd's ../api, FORBIDDEN_DEPENDENCY) are
# dropped because the release go.mod already requires those modules at the same tag.
tidy_one() {
  local c="$1" mod ver dir gomod line lhs lver rhs rver b pkg replaces
  read -r mod ver <<<"$(module_of "$c")"
  dir="$DEPS/go/$c"; mkdir -p "$dir"
  CURRENT="tidy $c ($mod@$ver)"
  log "tidy $c: $mod@$ver"
  gomod="$(GONOSUMDB="$TIDY_GONOSUMDB" GOFLAGS= go mod download -json "$mod@$ver" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')"
  [ -f "$gomod" ] || die "tidy $c: could not download $mod@$ver"
  rm -f "$dir/go.sum"
  {
    echo "// Generated by \`deps/build.sh tidy $c\` from deps/versions.env; edit the pin there, not here."
    echo "module kubestellar-rs/deps/$c"
    echo
    echo "go $(awk '$1=="go"{print $2; exit}' "$gomod")"
    awk '/^godebug \(/{b=1;next} b&&/^\)/{b=0;next} /^godebug /{print;next} b&&NF{print "godebug " $1}' "$gomod"
    echo
    echo "tool ("
    bins_of "$c" | while IFS== read -r b pkg; do printf '\t%s\n' "$pkg"; done
    echo ")"
    echo
    echo "require $mod $ver"
    echo
    replaces="$(awk '/^replace \(/{b=1;next} b&&/^\)/{b=0;next} /^replace /{sub(/^replace /,"");print;next} b&&NF{print}' "$gomod" |
      sed 's,//.*,,' | while read -r line; do
        [ -n "$line" ] || continue
        lhs="${line%%=>*}"; rhs="${line#*=>}"
        read -r lhs lver <<<"$lhs"; read -r rhs rver <<<"$rhs"
        case "$rhs" in
          ./staging/src/*) printf '\t%s => %s %s\n' "$lhs" "$lhs" "v0.${ver#v1.}" ;;
          .*|/*) ;;  # local path inside the upstream repo: not usable from the proxy
          *) printf '\t%s\n' "$lhs${lver:+ $lver} => $rhs${rver:+ $rver}" ;;
        esac
      done)"
    if [ -n "$replaces" ]; then printf '\nreplace (\n%s\n)\n' "$replaces"; fi
  } >"$dir/go.mod"
  (cd "$dir" && tidy_go)
}

# `go mod tidy` in the current dir. The checksum database reachable here lacks many tags (lookups
# answer 404 and tidy fails), so modules it reports missing are added to GONOSUMDB and tidy is
# retried; everything the database does know stays verified. Printed so the trust gap is visible.
tidy_go() {
  local nosum="$TIDY_GONOSUMDB" errf new round
  errf="$(mktemp)"
  # A failing tidy often names just one missing module; jaeger's graph needs about 80 rounds
  # (each is quick once the modules are downloaded).
  for round in $(seq 1 200); do
    if GONOSUMDB="$nosum" GOFLAGS=-mod=mod go mod tidy 2>"$errf"; then
      rm -f "$errf"; log "  not in the checksum DB (hash taken from the proxy): $nosum"; return 0
    fi
    # lookup URLs use the case-encoded path (!x = X); decode it for GONOSUMDB.
    new="$(grep -o 'sumdb/[^ ]*/lookup/[^@ ]*@' "$errf" | sed 's,.*/lookup/,,; s,@$,,; s/!\([a-z]\)/\U\1/g' | sort -u | paste -sd, -)"
    if [ -z "$new" ]; then grep -v '^go: downloading' "$errf" >&2; rm -f "$errf"; return 1; fi
    nosum="$nosum,$new"
  done
  rm -f "$errf"; die "go mod tidy still failing after 200 rounds of GONOSUMDB additions"
}

# The CRD module hashes live in deps/go/crds/go.sum so `crds` verifies downloads against the repo
# (the checksum database here lacks some of these tags). The module has no code on purpose.
tidy_crds() {
  local dir="$DEPS/go/crds" m
  CURRENT="tidy crds"; log "tidy crds"
  mkdir -p "$dir"; rm -f "$dir/go.sum"
  printf '%s\n' "// Generated by \`deps/build.sh tidy crds\`: only go.sum matters (hashes of the CRD source modules)." \
    "module kubestellar-rs/deps/crds" "" "go 1.24.0" >"$dir/go.mod"
  (
    cd "$dir"
    # `go mod download` does not record modules the go.mod does not require, so write the
    # go.sum lines (zip hash and go.mod hash) from its JSON output.
    for m in "open-cluster-management.io/api@$OCM_API_VERSION" "github.com/kubestellar/kubeflex@$KUBEFLEX_VERSION" \
             "github.com/kubestellar/kubestellar@$KUBESTELLAR_VERSION"; do
      GONOSUMDB="$TIDY_GONOSUMDB" GOFLAGS= go mod download -json "$m" | awk -v m="${m%@*}" -v v="${m#*@}" -F'"' '
        $2=="Sum" {print m " " v " " $4} $2=="GoModSum" {print m " " v "/go.mod " $4}'
    done >go.sum
    [ "$(wc -l <go.sum)" -eq 6 ] || die "tidy crds: expected 6 go.sum lines, got: $(cat go.sum)"
  )
}

# --- build ---------------------------------------------------------------------------------
# Fail early if a pin changed but the wrapper was not re-tidied (it would build the old version).
check_wrapper() {
  local c="$1" mod ver got
  read -r mod ver <<<"$(module_of "$c")"
  [ -f "$DEPS/go/$c/go.sum" ] || die "$c: deps/go/$c/go.sum missing; run: deps/build.sh tidy $c"
  got="$(cd "$DEPS/go/$c" && GOFLAGS=-mod=readonly go list -m -f '{{.Version}}' "$mod")"
  [ "$got" = "$ver" ] || die "$c: deps/go/$c pins $mod $got but versions.env says $ver; run: deps/build.sh tidy $c"
  if [ "$c" = kubernetes ] || [ "$c" = kubelet ]; then
    got="$(cd "$DEPS/go/$c" && GOFLAGS=-mod=readonly go list -m -f '{{with .Replace}}{{.Version}}{{else}}{{.Version}}{{end}}' k8s.io/api)"
    [ "$got" = "v0.${ver#v1.}" ] || die "$c: staging k8s.io/api is $got, expected v0.${ver#v1.}; run: deps/build.sh tidy $c"
  fi
}

build_component() {
  local c="$1" mod ver dir ldf name pkg out key t0 dt size
  read -r mod ver <<<"$(module_of "$c")"
  dir="$DEPS/go/$c"
  CURRENT="checking wrapper deps/go/$c"
  check_wrapper "$c"
  ldf="$(cd "$dir" && ldflags_of "$c")"
  mkdir -p "$BIN"
  while IFS== read -r name pkg; do
    out="$BIN/$name-$ver"
    # Stamp key: everything that changes the binary besides the version in the file name.
    key="$( { cat "$dir/go.mod" "$dir/go.sum"; echo "$pkg|$ldf|CGO_ENABLED=$CGO_ENABLED|$BUILD_GOFLAGS"; go version; } | sha256sum | cut -c1-16)"
    if [ -x "$out" ] && [ "$(cat "$out.stamp" 2>/dev/null)" = "$key" ]; then
      log "$name $ver: up to date ($out)"
    else
      CURRENT="building $name from $pkg@$ver (wrapper deps/go/$c)"
      log "$name $ver: building $pkg ..."
      t0=$SECONDS
      rm -f "$out" "$out.stamp"
      # Build to a temp name and rename, so an interrupted build never leaves a usable-looking file.
      (cd "$dir" && GOFLAGS="$BUILD_GOFLAGS" go build -ldflags "$ldf" -o "$out.tmp.$$" "$pkg")
      mv "$out.tmp.$$" "$out"
      echo "$key" >"$out.stamp"
      dt=$((SECONDS - t0)); size="$(du -m "$out" | cut -f1)"
      log "$name $ver: built in ${dt}s (${size} MiB)"
    fi
    ln -sfn "$name-$ver" "$BIN/$name"
  done < <(bins_of "$c")
}

# Copy exactly the CRD files listed below (names checked against the pinned tags) into
# $KS_CACHE/crds/<set>/, replacing what was there, so the directory holds only the pinned set.
copy_crds() {
  local set="$1" src="$2"; shift 2
  local dst="$KS_CACHE/crds/$set" f
  rm -rf "$dst"; mkdir -p "$dst"
  for f in "$@"; do
    [ -f "$src/$f" ] || die "crds: $f not found in $src (did the pinned tag rename it?)"
    install -m 0644 "$src/$f" "$dst/"
  done
  log "crds/$set: $# files"
}

module_dir() {
  # Download inside a wrapper (default deps/go/crds) so its committed go.sum verifies the zip.
  local d wrapper="${2:-crds}"
  grep -q "^${1%@*} ${1#*@} " "$DEPS/go/$wrapper/go.sum" ||
    die "crds: $1 is not in deps/go/$wrapper/go.sum (pin changed?); run: deps/build.sh tidy $wrapper"
  d="$(cd "$DEPS/go/$wrapper" && GOFLAGS=-mod=readonly go mod download -json "$1" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')"
  [ -d "$d" ] || die "crds: could not download $1"
  echo "$d"
}

build_crds() {
  local api kflex ks t0=$SECONDS
  CURRENT="fetching CRD modules"
  log "crds: open-cluster-management.io/api@$OCM_API_VERSION kubeflex@$KUBEFLEX_VERSION kubestellar@$KUBESTELLAR_VERSION"
  api="$(module_dir "open-cluster-management.io/api@$OCM_API_VERSION")"
  kflex="$(module_dir "github.com/kubestellar/kubeflex@$KUBEFLEX_VERSION")"
  ks="$(module_dir "github.com/kubestellar/kubestellar@$KUBESTELLAR_VERSION")"
  CURRENT="copying CRDs"
  # Hub. The three addon CRDs are taken from addon/v1beta1/: those files define the same CRDs as
  # addon/v1alpha1/ but serve both v1alpha1 (storage) and v1beta1 (conversion strategy None; the
  # real cluster-manager adds a conversion webhook). addontemplates exists only in v1alpha1.
  copy_crds ocm-hub "$api" \
    cluster/v1/0000_00_clusters.open-cluster-management.io_managedclusters.crd.yaml \
    cluster/v1beta2/0000_00_clusters.open-cluster-management.io_managedclustersets.crd.yaml \
    cluster/v1beta2/0000_01_clusters.open-cluster-management.io_managedclustersetbindings.crd.yaml \
    cluster/v1beta1/0000_02_clusters.open-cluster-management.io_placements.crd.yaml \
    cluster/v1beta1/0000_03_clusters.open-cluster-management.io_placementdecisions.crd.yaml \
    cluster/v1alpha1/0000_05_clusters.open-cluster-management.io_addonplacementscores.crd.yaml \
    work/v1/0000_00_work.open-cluster-management.io_manifestworks.crd.yaml \
    work/v1alpha1/0000_00_work.open-cluster-management.io_manifestworkreplicasets.crd.yaml \
    addon/v1beta1/0000_00_addon.open-cluster-management.io_clustermanagementaddons.crd.yaml \
    addon/v1beta1/0000_01_addon.open-cluster-management.io_managedclusteraddons.crd.yaml \
    addon/v1beta1/0000_02_addon.open-cluster-management.io_addondeploymentconfigs.crd.yaml \
    addon/v1alpha1/0000_03_addon.open-cluster-management.io_addontemplates.crd.yaml
  copy_crds ocm-spoke "$api" \
    work/v1/0000_01_work.open-cluster-management.io_appliedmanifestworks.crd.yaml \
    cluster/v1alpha1/0000_02_clusters.open-cluster-management.io_clusterclaims.crd.yaml
  copy_crds kubeflex "$kflex" \
    config/crd/bases/tenancy.kflex.kubestellar.org_controlplanes.yaml \
    config/crd/bases/tenancy.kflex.kubestellar.org_postcreatehooks.yaml
  copy_crds kubestellar "$ks" \
    config/crd/bases/control.kubestellar.io_bindingpolicies.yaml \
    config/crd/bases/control.kubestellar.io_bindings.yaml \
    config/crd/bases/control.kubestellar.io_combinedstatuses.yaml \
    config/crd/bases/control.kubestellar.io_customtransforms.yaml \
    config/crd/bases/control.kubestellar.io_statuscollectors.yaml
  # kwok refuses to start without stages; its "fast" ones make Nodes Ready and Pods Running at once.
  copy_crds kwok-stages "$(module_dir "sigs.k8s.io/kwok@$KWOK_VERSION" kwok)" \
    kustomize/stage/node/fast/node-initialize.yaml \
    kustomize/stage/pod/fast/pod-ready.yaml \
    kustomize/stage/pod/fast/pod-complete.yaml \
    kustomize/stage/pod/fast/pod-delete.yaml
  log "crds: done in $((SECONDS - t0))s ($KS_CACHE/crds)"
}

# --- main ----------------------------------------------------------------------------------
expand() { if [ $# -eq 0 ] || [ "$1" = all ]; then echo "${ALL[*]}"; else echo "$*"; fi; }

case "${1:-all}" in
  -h|--help|help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  tidy)
    shift
    for c in $(expand "$@"); do
      if [ "$c" = crds ]; then tidy_crds; else module_of "$c" >/dev/null; tidy_one "$c"; fi
    done
    CURRENT="done"; log "tidy done; commit deps/go/*/go.{mod,sum}" ;;
  *)
    for c in $(expand "$@"); do [ "$c" = crds ] || module_of "$c" >/dev/null; done
    log "cache: $KS_CACHE ($(go version))"
    T0=$SECONDS
    for c in $(expand "$@"); do
      t=$SECONDS
      if [ "$c" = crds ]; then build_crds; else build_component "$c"; fi
      log "== $c finished in $((SECONDS - t))s"
    done
    CURRENT="done"; log "all requested components ready in $((SECONDS - T0))s: $BIN" ;;
esac
