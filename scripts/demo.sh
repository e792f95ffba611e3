#!/usr/bin/env bash
# The main job on the embedded simulated cluster, without root:
# renders several simulated GPU nodes (with a few injected faults, among them the
# seed-000 mm_kobj chain), runs validate_fabric.yml over them with local
# connections, and prints the per-node summary.
#
#   bash scripts/demo.sh [CLUSTER]      # CLUSTER: a file or a name in tests/sim/clusters (default: demo)
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

spec=${1:-demo}
out=${GF_DEMO_DIR:-$REPO/out/demo}

gf_venv
# Ansible wants a writable home for its temp files; a service user may have none.
[[ -w ${HOME:-/nonexistent} ]] || export ANSIBLE_REMOTE_TMP=${TMPDIR:-/tmp}/gf-ansible-tmp ANSIBLE_LOCAL_TEMP=${TMPDIR:-/tmp}/gf-ansible-tmp

rm -rf "$out"
mkdir -p "$out"
gf_log "rendering the simulated cluster '$spec' into $out"
(cd "$REPO" && python -m tests.sim.cluster "$spec" "$out" --mode local --python "$(command -v python)")

cd "$REPO"
set +e
ansible-playbook validate_fabric.yml -i "$out/inventory.yml" \
    -e gpu_fabric_hosts=gpu_nodes -e "gpu_fabric_output_dir=$out"
rc=$?
set -e
gf_log ""
gf_log "facts of every node: $out/facts/"
exit "$rc"
