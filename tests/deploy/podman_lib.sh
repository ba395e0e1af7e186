# Shared by the tests that run hvx's image with podman (container_test.sh, mpijob_test.sh).
# Sourced after tests/train/lib.sh (check). Expects CONTAINERS_CONF exported.

# podman_ready: skips (prints SKIPPED, exits 0) where the image cannot be built and run here.
podman_ready() {
    export PATH=$PATH:/usr/sbin:/sbin  # runc, and what mmdebstrap runs
    local reason
    [[ $(id -u) == 0 ]] || podman_skip "needs root for podman's networks (uid $(id -u))"
    command -v podman >/dev/null || podman_skip "podman is not installed (tools/setup installs Debian's)"
    command -v runc >/dev/null || podman_skip "runc is not installed (tools/setup installs Debian's)"
    [[ -z ${HVX_TORCH_PYTHON:-} ]] ||
        podman_skip "the programs are built against PyPI's torch (HVX_TORCH_PYTHON); the image has Debian's LibTorch"
    reason=$(podman info --format '{{.Host.OCIRuntime.Name}}' 2>&1) || podman_skip "podman cannot run here: $reason"
}
podman_skip() { echo "SKIPPED: $*"; exit 0; }

# build_image BUILD_IMAGE TAG CONFIGS_DIR [--gpu]: the image from the recipe, with HVXRUN, RANK,
# TRAIN's programs, hvx_info and the configs in CONFIGS_DIR; exits the test when it does not build.
build_image() {
    local build=$1 tag=$2 configs=$3 start rc limit=900
    shift 3
    [[ ${1:-} == --gpu ]] && limit=1500  # 3.6 GB of the torch wheel's libraries to stage
    start=$(date +%s)
    # hvx_info: stage.sh finds it beside hvxrun in the build's tree (the tests' data bring it).
    HVXRUN=$HVXRUN HVXRUN_RANK=$RANK HVX_TRAIN=$TRAIN HVX_CONFIGS=$configs \
        timeout -k 5 "$limit" "$build" "$@" "$tag" >"$T/build.out" 2>&1
    rc=$?
    check "the image builds from the recipe (rc $rc, $(($(date +%s) - start)) s)" $rc
    [[ $rc == 0 ]] || { tail -n 30 "$T/build.out"; exit 1; }
    echo "image: $(podman image inspect --format '{{.Size}}' "$tag") bytes"
}

# podman_network NAME SUBNET(/24 prefix, "10.89.231") [ARGS...]: a network of the test's own
# (ARGS to `podman network create`, e.g. --disable-dns), removed at exit together with the
# containers named hvxct-*.
podman_network() {
    podman_net=$1
    podman network rm -f "$podman_net" >/dev/null 2>&1
    podman network create --subnet "$2.0/24" "${@:3}" "$podman_net" >/dev/null ||
        { echo "FAIL: podman network create $podman_net"; exit 1; }
    trap podman_cleanup EXIT
}
podman_containers_gone() {
    local ids
    ids=$(podman ps -a --filter name='^hvxct-' --format '{{.Names}}')
    [[ -z $ids ]] || podman rm -f -t 0 $ids >/dev/null 2>&1
}
podman_cleanup() { podman_containers_gone; podman network rm -f "$podman_net" >/dev/null 2>&1; }
