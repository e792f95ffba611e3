#!/usr/bin/env bash
# Every test of hpc.gpu_fabric, with its own set-up (virtualenv, packages):
#   unit tests (pytest), ansible-test sanity (zero ignores), ansible-lint
#   (production profile), and functional runs of the playbooks through
#   ansible-playbook on simulated nodes: over real SSH between network-namespace
#   nodes when root, with local-connection nodes otherwise; and compat: the demo
#   (scripts/demo.sh) and a parse of every playbook and task file on the oldest
#   ansible-core that meta/runtime.yml promises and on the newest one, which needs the
#   newest Python found (python3.N on PATH or under ~/.pyenv/versions; without one >= 3.12,
#   the dev venv's ansible-core is the newest tested, and the log says so).
#
#   bash scripts/test.sh              # everything
#   bash scripts/test.sh units lint   # a subset: units sanity lint functional molecule compat
#
# molecule runs the netns scenario (real SSH) when root and the localhost scenario
# otherwise; GF_MOLECULE_SCENARIOS="localhost netns" runs both.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

steps=("$@")
((${#steps[@]})) || steps=(units sanity lint functional molecule compat)

if ((EUID == 0)); then
    # Without shellcheck, sanity skips its shellcheck test; openssh-server runs the SSH lab.
    # chromium: the HTML report is checked in a real headless browser (tests/browser.py).
    # slurmctld, slurmd, munge, slurm-client: act.yml drains and resumes nodes of a real Slurm started by the
    # test (tests/lab/slurm.py; its own slurm.conf, ports and munge socket, whatever the packages start).
    gf_apt_install shellcheck openssh-server iproute2 chromium slurmctld slurmd munge slurm-client ||
        gf_log "warning: could not install test packages"
fi
gf_venv

# A simulated node is ~2,500 small files: rendering one and removing it took 2.3 s on this disk
# and 0.2 s on tmpfs (measured on the CI kind of machine), and the accuracy benchmark renders
# hundreds. The run's temp files (the tree below included) go to /dev/shm when it is a tmpfs
# with 8 GiB free, else where TMPDIR says; GF_TEST_TMP names another place.
if [[ -n ${GF_TEST_TMP:-} ]]; then
    export TMPDIR=$GF_TEST_TMP
elif [[ $(stat -f -c %T /dev/shm 2>/dev/null) == tmpfs && -w /dev/shm ]] &&
        (($(df -Pk /dev/shm | awk 'NR == 2 { print $4 }') > 8 * 1024 * 1024)); then
    export TMPDIR=/dev/shm
fi
tree=$(gf_collection_tree)
base=${tree%/ansible_collections/*}
trap 'rm -rf "$base"' EXIT
# Every temp file of every step (pytest's basetemp, rendered simulator trees, Chromium's
# scratch dirs, whatever a test forgets) lands under $base and goes with it: CI machines are
# reused, and a run that leaked ~300,000 inodes into /tmp filled a disk there.
export TMPDIR=$base/tmp
mkdir -p "$TMPDIR"
# Ansible's own files too, which default below the home directory and stayed there: ANSIBLE_HOME
# (~/.ansible) holds ansible-core's local temp files and galaxy cache, and
# molecule's scenario directories (its ansible-compat runtime is not isolated, so its cache dir is
# ANSIBLE_HOME: ansible_compat/prerun.py get_cache_dir); local-connection nodes put their remote
# temp files in ~/.ansible/tmp. The async job files of local-connection nodes (the culprit search's
# collective runs, the benchmark's sequences) default to ~/.ansible_async, not below ANSIBLE_HOME
# (ansible-core's async_dir shell option): ANSIBLE_ASYNC_DIR puts them here too. A module inherits
# that variable, and module_utils/_process.py ParentWatch takes a module for an async job, one meant
# to outlive the controller, only when async_wrapper is its parent as well
# (tests/unit/plugins/module_utils/test__process_parent.py); tests that look at their async job
# files still give ansible_async_dir inside their own directory.
export ANSIBLE_HOME=$base/ansible
export ANSIBLE_REMOTE_TMP=$ANSIBLE_HOME/tmp
export ANSIBLE_ASYNC_DIR=$ANSIBLE_HOME/async
# The SSH connection's control sockets do not follow ANSIBLE_HOME: control_path_dir defaults to
# ~/.ansible/cp (ansible/plugins/connection/ssh.py), where the netns scenario left its directory.
export ANSIBLE_SSH_CONTROL_PATH_DIR=$ANSIBLE_HOME/cp
mkdir -p "$ANSIBLE_HOME"
# The log is plain text, whatever TERM says (gf_plain_output).
gf_plain_output
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
# A subshell: HOME points into a cache directory for ansible-test only. ansible-test keeps its
# sanity venvs and the get-pip.py cache below ~/.ansible/test (create_sanity_virtualenv in
# _internal/commands/sanity/__init__.py, bootstrap in _util/target/setup/requirements.py), which
# stayed in the home directory after every run; gf_ansible_test_home says what comes along.
# That home is a cache beside the compat venvs (GF_ANSIBLE_TEST_HOME, default
# ~/.cache/hpc.gpu_fabric/ansible-test): made in the run's temp dir, its 9 venvs were made again on
# every run, and the sanity step took 455 s instead of about 110 (measured here, the machine loaded).
step_sanity() (
    gf_ansible_test_home "${GF_ANSIBLE_TEST_HOME:-${XDG_CACHE_HOME:-${HOME:-$base}/.cache}/hpc.gpu_fabric/ansible-test}"
    gf_seed_get_pip
    # --local: the tree is new every run, and --venv would rebuild its venvs in it
    # (15-19 s against 6-7 s measured here); the requirements are in our venv.
    cd "$tree" && ansible-test sanity --local --python "$pyver" --color no
)
# antsibull-changelog lint checks changelogs/fragments/ and changelog.yaml (about a second).
step_lint() { (cd "$REPO" && ansible-lint --offline -q && antsibull-changelog lint); }
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
# The netns lab (its rendered roots, SSH keys and the nodes' sshd logs) lives in
# GF_MOLECULE_NETNS_DIR (molecule/netns/molecule.yml), here in the run's temp dir, and its
# destroy removes it: one that leaves it, or a node's namespace, behind fails the step.
step_molecule() {
    local scenario scenarios lab=$base/molecule-netns left
    scenarios=${GF_MOLECULE_SCENARIOS:-$( ((EUID == 0)) && echo netns || echo localhost)}
    for scenario in $scenarios; do
        (cd "$tree" && GF_MOLECULE_NETNS_DIR=$lab molecule test -s "$scenario") || return 1
    done
    if [[ -e $lab ]]; then
        gf_log "error: the netns scenario's destroy left its lab directory behind: $lab"
        return 1
    fi
    if [[ " $scenarios " == *" netns "* ]]; then
        left=$(ip netns list 2>/dev/null | awk '/^gf-node[0-9]/ { printf "%s ", $1 }')
        [[ -z $left ]] || { gf_log "error: the netns scenario's destroy left network namespaces behind: $left"; return 1; }
    fi
}

# The promise of meta/runtime.yml (requires_ansible: '>=2.16.0'): the oldest ansible-core it
# allows, and the newest that pip finds for the newest Python here (2.20+ need Python >= 3.12).
# Their venvs are kept in GF_COMPAT_DIR (default ~/.cache/hpc.gpu_fabric) and reused while
# their requirements stand (gf_venv_compat). The two demos run at once, one per core: 51 s
# measured on 2 cores with the venvs made, 78 s when they have to be made (no pip cache).
step_compat() {
    local dir=${GF_COMPAT_DIR:-${XDG_CACHE_HOME:-${HOME:-${TMPDIR:-/tmp}}/.cache}/hpc.gpu_fabric}
    local oldest oldest_venv newest_python newest_venv='' pid venvs=() names=() venv
    oldest=$(python -c 'import re, sys, yaml
spec = yaml.safe_load(open(sys.argv[1]))["requires_ansible"]
print(re.match(r"\s*>=\s*(\d+[.]\d+)", spec).group(1))' "$tree/meta/runtime.yml") ||
        { gf_log "error: no '>=X.Y' in requires_ansible of meta/runtime.yml"; return 1; }
    oldest_venv=$dir/ansible-core-$oldest
    # Both venvs at once (pip mostly waits on the network); subshells, as gf_die exits.
    (gf_venv_compat "$oldest_venv" "ansible-core==$oldest.*") &
    pid=$!
    if newest_python=$(gf_newest_python 3.12); then
        newest_venv=$dir/ansible-core-newest-py$("$newest_python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
        (gf_venv_compat "$newest_venv" ansible-core "$newest_python") || newest_venv=''
    fi
    wait "$pid" || return 1
    if [[ -z $newest_venv ]]; then
        gf_log "compat: no Python >= 3.12 that installs ansible-core (python3.N on PATH, ~/.pyenv/versions):" \
            "the newest tested is the dev venv's, $(_gf_venv_describe "$VIRTUAL_ENV")"
        newest_venv=$VIRTUAL_ENV
    fi
    venvs=("$oldest_venv" "$newest_venv")
    for venv in "${venvs[@]}"; do
        names+=("$(_gf_venv_describe "$venv")")
    done
    gf_log "compat: testing ${names[0]} (oldest promised) and ${names[1]} (newest)"
    # Its own --basetemp (removed with the tree): pytest prunes its default one at the start of a
    # session, and deleting the other steps' simulated clusters there cost 20-40 s here.
    (cd "$tree" && GF_COMPAT_VENVS=$(IFS=:; echo "${venvs[*]}") python -m pytest -q -p no:cacheprovider -rs \
        -n "${#venvs[@]}" --basetemp="$base/compat" --durations=2 tests/compat)
}

for step in "${steps[@]}"; do
    case $step in
        units | sanity | lint | functional | molecule | compat) run_step "$step" "step_$step" ;;
        *) gf_die "unknown step $step (units sanity lint functional molecule compat)" ;;
    esac
done

if ((${#failed[@]})); then
    gf_log "FAILED: ${failed[*]}"
    exit 1
fi
gf_log "all passed: ${steps[*]}"
