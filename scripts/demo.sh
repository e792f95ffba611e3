#!/usr/bin/env bash
# The main job on the embedded simulated cluster, without root:
# renders six simulated MetaX GPU nodes with a few injected faults (among them a kernel
# without the mm_kobj export, so no GPUDirect RDMA), runs the whole validate_fabric.yml over them with local
# connections - facts, the pairwise perftest benchmark (progress: step k of N), the
# collective benchmark and its culprit search, the report - and prints a short summary
# with the path of the HTML report.
#
#   bash scripts/demo.sh [CLUSTER [OPTION...]]  # CLUSTER: a file or a name in tests/sim/clusters
#                                               # (default: demo); OPTIONs go to ansible-playbook
#
# GF_DEMO_DIR: where everything goes (default out/demo). Exit status 0 when the report was
# written: the exit policy matching the injected faults is what the demo shows, not a failure.
# Exit status 3 when the benchmark itself broke (BENCH_RUN_BROKEN: its tests never reached the
# simulated hardware, e.g. its beacon port taken by another run on this machine): the demo did
# not show what it is for. The benchmark's ports are perftest_run's defaults; give others with
# -e fabric_bench_beacon_port=N -e fabric_bench_base_port=M to run two demos side by side.
# GF_VENV: the virtualenv (default .venv); one made by gf_venv_compat (scripts/lib.sh) runs the
# demo on its ansible-core, whose version heads ansible.log.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

spec=${1:-demo}
shift $(($# ? 1 : 0))
out=${GF_DEMO_DIR:-$REPO/out/demo}

gf_venv

rm -rf "$out"
mkdir -p "$out"
# Ansible's temp files and async job files: below the demo's own directory unless set. Both
# default below the account's home from the password database (~), not $HOME: a service
# user such as nobody (/nonexistent) has none - every local node would be 'unreachable', and
# the benchmark's async jobs 'could not find job'.
export ANSIBLE_REMOTE_TMP=${ANSIBLE_REMOTE_TMP:-$out/.ansible-tmp} ANSIBLE_LOCAL_TEMP=${ANSIBLE_LOCAL_TEMP:-$out/.ansible-tmp}
export ANSIBLE_ASYNC_DIR=${ANSIBLE_ASYNC_DIR:-$out/.ansible-async}
gf_log "rendering the simulated cluster '$spec' into $out"
(cd "$REPO" && python -m tests.sim.cluster "$spec" "$out" --mode local --python "$(command -v python)")

cd "$REPO"
# Which ansible-core and Python ran it: first in the log (the compat test step reads it).
ansible-playbook --version >"$out/ansible.log"
gf_log "$(head -n1 "$out/ansible.log") ($(command -v ansible-playbook)), $(python -V)"
set +e
# The whole message-size sweep: the report draws bandwidth against message size.
ANSIBLE_NOCOLOR=${ANSIBLE_NOCOLOR:-} ansible-playbook validate_fabric.yml -i "$out/inventory.yml" \
    -e gpu_fabric_hosts=gpu_nodes -e "gpu_fabric_output_dir=$out/report" \
    -e gpu_fabric_benchmark=true -e fabric_bench_all_sizes=true "$@" | tee -a "$out/ansible.log"
rc=${PIPESTATUS[0]}
set -e

if [[ ! -s $out/report/report.json || ! -s $out/report/report.html ]]; then
    gf_die "no report was written (ansible-playbook exited $rc); see $out/ansible.log"
fi
gf_log ""
gf_log "================================================================ summary"
broken=0
python - "$out/report/report.json" <<'EOF' || broken=$?
import json
import sys

report = json.load(open(sys.argv[1]))
s = report['summary']
print('%d hosts: %d ok, %d with errors, %d unreachable; %d root cause(s):' % (
    s['hosts'], s['hosts_ok'], s['hosts_failed'], s['hosts_unreachable'], s['roots']))
for item in report['findings']:
    if item['explained_by'] is None and item['severity'] != 'info':
        symptoms = sum(1 for f in report['findings'] if f['explained_by'] == item['id'])
        print('  %-7s %-26s %-8s %s%s' % (item['severity'], item['code'], item['host'] or 'fleet', item['subject'] or '',
                                        ' (explains %d symptom(s))' % symptoms if symptoms else ''))
search = (report.get('collective') or {}).get('search') or {}
if search.get('culprits'):
    print('collective: the node(s) that slow the fleet down: %s' % ', '.join(search['culprits']))
# The benchmark that broke (never reached the hardware) is no injected fault: the demo failed.
broken = [f for f in report['findings'] if f['code'] == 'BENCH_RUN_BROKEN']
for item in broken:
    print('the benchmark broke: %s' % item['cause'], file=sys.stderr)
sys.exit(3 if broken else 0)
EOF
gf_log ""
gf_log "report:        file://$out/report/report.html"
gf_log "also:          $out/report/{report.json,report.md,junit.xml,gpu_fabric.prom}"
gf_log "node facts:    $out/report/facts/"
((broken == 0 || broken == 3)) || gf_die "the summary of $out/report/report.json could not be printed"
if ((broken == 3)); then
    gf_log "ansible-playbook exited $rc: the benchmark broke (BENCH_RUN_BROKEN above): its tests never reached the"
    gf_log "simulated hardware, so the report does not show the injected faults; free what it names and run again."
    exit 3
fi
((rc == 0)) || gf_log "ansible-playbook exited $rc: the exit policy matched the injected faults, as it should."
exit 0
