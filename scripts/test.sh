#!/usr/bin/env bash
# Every test of hpc.gpu_fabric, with its own set-up (virtualenv, packages):
#   unit tests (pytest), ansible-test sanity (zero ignores), ansible-lint
#   (production profile), and functional runs of the playbooks through
#   ansible-playbook on simulated nodes: over real SSH between network-namespace
#   nodes when root, with local-connection nodes otherwise.
#
#   bash scripts/test.sh              # everything
#   bash scripts/test.sh units lint   # a subset: units sanity lint functional molecule
#
# molecule runs the netns scenario (real SSH) when root and the localhost scenario
# otherwise; GF_MOLECULE_SCENARIOS="localhost netns" runs both.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

steps=("$@")
((${#steps[@]})) || steps=(units sanity lint functional molecule)

if ((EUID == 0)); then
    # Without shellcheck, sanity skips its shellcheck test; openssh-server runs the SSH lab.
    # chromium: the HTML report is checked in a real headless browser (tests/browser.py).
    gf_apt_install shellcheck openssh-server iproute2 chromium || gf_log "warning: could not install test packages"
fi
gf_venv

tree=$(gf_collection_tree)
base=${tree%/ansible_collections/*}
trap 'rm -rf "$base"' EXIT
# The copy is importable as ansible_collections.hpc.gpu_fabric, and its tests as tests.*.
export PYTHONPATH=$base:$tree
export ANSIBLE_COLLECTIONS_PATH=$base
pyver=$(python -c 'import sys; print("%d.%d" % sys.version_info[:2])')

failed=()
run_step() {
    local name=$1 start rc
    shift
    gf_log "=== $name"
    start=$SECONDS
    set +e
    "$@"
    rc=$?
    set -e
    gf_log "=== $name: $( ((rc == 0)) && echo ok || echo "FAILED (rc $rc)") in $((SECONDS - start)) s"
    ((rc == 0)) || failed+=("$name")
}

step_units() { (cd "$tree" && python -m pytest -q -p no:cacheprovider -n 2 tests/unit); }
step_sanity() {
    gf_seed_get_pip
    # --local: the tree is new every run, and --venv would rebuild its venvs in it
    # (15-19 s against 6-7 s measured here); the requirements are in our venv.
    (cd "$tree" && ansible-test sanity --local --python "$pyver" --color no)
}
step_lint() { (cd "$REPO" && ansible-lint --offline -q); }
# One worker per core, two to four: the tests are ansible-playbook runs, one per simulated
# cluster, each in its own tmp dir, and CPU-bound (two workers on a 2-core machine: ~16 min).
# Artefacts (the report's screenshot) go to the checkout's out/artifacts, not to the copy.
step_functional() {
    local workers
    workers=$(nproc 2>/dev/null || echo 2)
    ((workers < 2)) && workers=2
    ((workers > 4)) && workers=4
    (cd "$tree" && GF_ARTIFACTS_DIR=${GF_ARTIFACTS_DIR:-$REPO/out/artifacts} python -m pytest -q -p no:cacheprovider -rs \
        -n "$workers" --durations=15 tests/functional)
}
step_molecule() {
    local scenario scenarios
    scenarios=${GF_MOLECULE_SCENARIOS:-$( ((EUID == 0)) && echo netns || echo localhost)}
    for scenario in $scenarios; do
        (cd "$tree" && molecule test -s "$scenario") || return 1
    done
}

for step in "${steps[@]}"; do
    case $step in
        units | sanity | lint | functional | molecule) run_step "$step" "step_$step" ;;
        *) gf_die "unknown step $step (units sanity lint functional molecule)" ;;
    esac
done

if ((${#failed[@]})); then
    gf_log "FAILED: ${failed[*]}"
    exit 1
fi
gf_log "all passed: ${steps[*]}"
