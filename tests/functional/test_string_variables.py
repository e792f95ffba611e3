# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Every numeric and boolean role variable in its string form, as `-e name=value` gives it.

One validate_fabric.yml run (remediation, lossless RoCE, the pairwise and the collective
benchmark) on two simulated RoCE nodes, every such variable given as key=value text. Before,
`-e fabric_bench_dead_after=30` crashed the benchmark on every node ('int' + str in
roles/fabric_bench/tasks/sequence.yml). tests/unit/test_role_variable_types.py checks every use
statically; this run proves the string forms end to end.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.functional.helpers import recap
from tests.sim import cluster

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# key=value: every value arrives as a string. The defaults' values, except where a smaller one
# keeps the run short; ports of their own (tests run in parallel on 127.0.1.x).
STRINGS = [
    'fabric_bench_k=2', 'fabric_bench_seed=3', 'fabric_bench_size=65536', 'fabric_bench_all_sizes=false', 'fabric_bench_iterations=100',
    'fabric_bench_bw_ratio=0.9', 'fabric_bench_gpu_ratio=0.9', 'fabric_bench_lat_max_us=5',
    'fabric_bench_base_port=21515', 'fabric_bench_beacon_port=21514', 'fabric_bench_timeout=20', 'fabric_bench_wait_for_server=15',
    'fabric_bench_dead_after=30', 'fabric_bench_start_grace=60',
    'fabric_collective_ranks_per_node=8', 'fabric_collective_step_factor=4', 'fabric_collective_expected_busbw_gbs=10.5',
    'fabric_collective_healthy_ratio=0.8', 'fabric_collective_warn_ratio=0.6', 'fabric_collective_find_culprits=false',
    'fabric_collective_suspect_facts=false', 'fabric_collective_timeout=120',
    'memlock_include_root=true', 'memlock_systemd=true', 'memlock_verify=false',
    'ofed_peermem_rebuild=false', 'ofed_peermem_rebuild_timeout=600', 'ofed_peermem_fail=false',
    'pcie_acs_persist=false', 'rdma_modules_peermem=true', 'rdma_modules_load_now=true',
    'roce_qos_priority=3', 'roce_qos_dscp=26', 'roce_qos_ecn=true', 'roce_qos_cnp_dscp=48', 'roce_qos_cnp_priority=6', 'roce_qos_tos=106',
    'roce_qos_persist=false',
]


def test_every_numeric_and_boolean_variable_as_a_string(tmp_path):
    dest = str(tmp_path)
    spec = {'nodes': [{'name': 'r1', 'profile': 'amd_mi300x_roce'}, {'name': 'r2', 'profile': 'amd_mi300x_roce'}]}
    cluster.build(spec, dest, 'local', python=sys.executable)
    out = os.path.join(dest, 'out')
    args = []
    for pair in STRINGS + ['gpu_fabric_hosts=gpu_nodes', 'gpu_fabric_output_dir=' + out, 'gpu_fabric_remediate=true',
                           'gpu_fabric_benchmark=true', 'gpu_fabric_roce_qos=true', 'ansible_async_dir=' + os.path.join(dest, 'async'),
                           # What the report finds is other tests' business: only a failed task fails this run.
                           "gpu_fabric_exit_policy=findings[?code=='NO_SUCH_CODE']"]:
        args += ['-e', pair]
    cmd = [os.path.join(os.path.dirname(sys.executable), 'ansible-playbook'), os.path.join(REPO, 'validate_fabric.yml'),
           '-i', os.path.join(dest, 'inventory.yml')] + args
    result = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=900, check=False,
                            env=dict(os.environ, ANSIBLE_NOCOLOR='1'))
    said = result.stdout + result.stderr
    assert 'unsupported operand' not in said and 'Conditional result' not in said, said[-4000:]
    stats = recap(result)
    assert all(stats[h]['failed'] == 0 and stats[h]['rescued'] == 0 for h in ('r1', 'r2', 'localhost')), said[-4000:]
    with open(os.path.join(out, 'report.json')) as handle:
        report = json.load(handle)
    assert not [f for f in report['findings'] if f['code'] == 'HOST_TASK_FAILED'], report['findings']
    bench = report['bench']
    # The thresholds given as text are numbers in the report; every pair was measured.
    assert bench['thresholds'] == {'bw_ratio': 0.9, 'gpu_ratio': 0.9, 'lat_max_us': 5.0}
    assert bench['pairs'] and all(p['verdict'] in ('ok', 'low') for p in bench['pairs']), bench['pairs'][:3]
    collective = report['collective']
    assert collective['expected']['gbs'] == 10.5 and collective['ranks_per_node'] == 8, collective.get('expected')
