# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""A run that holds only part of the nodes refuses the cross-host stages before any pair runs.

validate_fabric.yml with the benchmark on a local simulated cluster of three nodes: as one slice
of an AWX sliced job (the slice variables as extra variables, strings as -e gives them), and with
a --limit that leaves a node of gpu_fabric_hosts out. The facts and the report run; no pair test and
no collective runs; the report says why (BENCH_NOT_RUN, COLLECTIVE_NOT_RUN) and the run fails.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml

from tests.sim import cluster

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Ports of their own: functional tests may run in parallel on the same 127.0.1.x addresses.
OPTIONS = {'fabric_bench_hcas': ['mlx5_0'], 'fabric_bench_memory': ['host'], 'fabric_bench_base_port': 26515,
           'fabric_bench_beacon_port': 26514, 'gpu_fabric_benchmark': True}


def _run(tmp_path, *extra):
    dest = str(tmp_path)
    spec = {'nodes': [{'name': 'n%d' % i, 'profile': 'nvidia_h100_8x_ndr'} for i in (1, 2, 3)]}
    inventory = cluster.build(spec, dest, 'local', python=sys.executable)
    with open(os.path.join(dest, 'inventory.yml'), 'w') as handle:
        yaml.safe_dump(inventory, handle)
    out = os.path.join(dest, 'out')
    cmd = [os.path.join(os.path.dirname(sys.executable), 'ansible-playbook'), os.path.join(REPO, 'validate_fabric.yml'),
           '-i', os.path.join(dest, 'inventory.yml'), '-e', 'gpu_fabric_hosts=gpu_nodes', '-e', 'gpu_fabric_output_dir=' + out,
           '-e', json.dumps(OPTIONS), '-e', 'ansible_async_dir=' + os.path.join(dest, 'async')] + list(extra)
    result = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600, check=False,
                            env=dict(os.environ, ANSIBLE_NOCOLOR='1'))
    with open(os.path.join(out, 'report.json')) as handle:
        return result, json.load(handle), out


@pytest.mark.parametrize('split', ['slice', 'tower_slice', 'limit'])
def test_a_run_with_part_of_the_nodes_refuses_the_benchmark_and_says_why(tmp_path, split):
    extra = {'slice': ['-e', 'awx_job_slice_count=2', '-e', 'awx_job_slice_number=1'],
             'tower_slice': ['-e', 'tower_job_slice_count=3', '-e', 'tower_job_slice_number=2'],
             # localhost in the limit: the judging and the report run there (a --limit without it leaves them no host).
             'limit': ['--limit', 'n1,n2,localhost']}[split]
    result, report, out = _run(tmp_path, *extra)
    why = {'slice': 'this run is slice 1 of 2 of a sliced job (AWX job slicing)',
           'tower_slice': 'this run is slice 2 of 3 of a sliced job (AWX job slicing)',
           'limit': '--limit leaves out 1 node(s) of gpu_fabric_hosts (n3)'}[split]
    # The run fails (the exit policy: BENCH_NOT_RUN is an error), after the report is written.
    assert result.returncode != 0 and 'exit policy' in result.stdout, result.stdout[-3000:]
    assert 'not run: ' + why in result.stdout, result.stdout[-3000:]
    # Before any pair: the role never planned a round, no node has a records file, no pair was judged.
    assert 'fabric_bench : Plan the rounds' not in result.stdout
    assert 'fabric_collective' not in result.stdout
    assert not os.listdir(os.path.join(out, 'bench-records')) if os.path.isdir(os.path.join(out, 'bench-records')) else True
    assert report['bench']['pairs'] == [] and why in report['bench']['skipped'], report['bench']
    findings = dict((f['code'], f) for f in report['findings'])
    assert why in findings['BENCH_NOT_RUN']['evidence']['skipped'] and findings['BENCH_NOT_RUN']['severity'] == 'error'
    assert why in findings['COLLECTIVE_NOT_RUN']['evidence']['skipped']
    # The run's own doing: marked so, and explained by no node's finding.
    for code in ('BENCH_NOT_RUN', 'COLLECTIVE_NOT_RUN'):
        assert findings[code]['evidence'].get('split') is True and findings[code]['explained_by'] is None, findings[code]
    # The facts ran on the nodes of the run, and none of them is blamed for the refusal.
    nodes = ['n1', 'n2'] if split == 'limit' else ['n1', 'n2', 'n3']
    assert sorted(report['hosts']) == nodes, sorted(report['hosts'])
    assert [report['hosts'][h]['status'] for h in nodes] == ['ok'] * len(nodes), report['hosts']
    assert not [f for f in report['findings'] if f['code'] in ('HOST_LOST', 'HOST_TASK_FAILED')], report['findings']


def test_a_limit_that_keeps_every_node_runs_the_benchmark(tmp_path):
    """--limit on all of gpu_fabric_hosts (and localhost), and slice variables of an unsliced job (count 1): the
    run holds every node, so the mesh runs."""
    result, report, _out = _run(tmp_path, '--limit', 'n1,n2,n3,localhost', '-e', 'awx_job_slice_count=1', '-e', 'awx_job_slice_number=1',
                                '-e', 'gpu_fabric_collective_enabled=false')
    assert result.returncode == 0, result.stdout[-3000:]
    assert 'not run: ' not in result.stdout
    assert report['bench']['skipped'] is None and len(report['bench']['pairs']) == 3, report['bench']
    assert not [f for f in report['findings'] if f['code'] in ('BENCH_NOT_RUN', 'COLLECTIVE_NOT_RUN')], report['findings']


def test_a_limit_without_localhost_is_refused_before_any_node_is_touched(tmp_path):
    """The judging and the report run on the controller (plays on localhost), which --limit filters like any host: a
    limit of nodes only is refused at the start, naming the fix, before a fact is read or a node is changed."""
    dest = str(tmp_path)
    spec = {'nodes': [{'name': 'n%d' % i, 'profile': 'nvidia_h100_8x_ndr'} for i in (1, 2)]}
    inventory = cluster.build(spec, dest, 'local', python=sys.executable)
    with open(os.path.join(dest, 'inventory.yml'), 'w') as handle:
        yaml.safe_dump(inventory, handle)
    out = os.path.join(dest, 'out')
    cmd = [os.path.join(os.path.dirname(sys.executable), 'ansible-playbook'), os.path.join(REPO, 'validate_fabric.yml'),
           '-i', os.path.join(dest, 'inventory.yml'), '-e', 'gpu_fabric_hosts=gpu_nodes', '-e', 'gpu_fabric_output_dir=' + out,
           '-e', 'gpu_fabric_remediate=true', '--limit', 'n1,n2']
    result = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600, check=False,
                            env=dict(os.environ, ANSIBLE_NOCOLOR='1'))
    assert result.returncode != 0, result.stdout[-3000:]
    assert "--limit 'n1,n2' leaves out localhost" in result.stdout and "--limit 'n1,n2,localhost'" in result.stdout, result.stdout[-3000:]
    # Nothing ran after the refusal: no configure role, no facts task, nothing written.
    assert 'Read the facts' not in result.stdout and 'hpc.gpu_fabric.' not in result.stdout.split('Refuse a --limit')[1], result.stdout[-3000:]
    assert not os.path.exists(out)
