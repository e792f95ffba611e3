# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The collective benchmark over a simulated fleet (role fabric_collective through
benchmark.yml) and collective_bench's failure kinds against the nccl-tests / mpirun
stand-ins (tests/sim/tools_nccl.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import yaml

from ansible_collections.hpc.gpu_fabric.plugins.modules import collective_bench
from tests.functional.helpers import recap
from tests.sim import cluster
from tests.unit.plugins.modules.utils import run_module

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _fleet(dest, wrong_node=None):
    spec = {'nodes': [{'name': 'm%d' % i, 'profile': 'metax_c500_cx7', 'faults': ['mm_kobj_not_exported'] if i == 4 else []}
                      for i in range(1, 7)]}
    inventory = cluster.build(spec, dest, 'local', python=sys.executable)
    hosts = inventory['all']['children']['gpu_nodes']['hosts']
    if wrong_node:
        hosts[wrong_node]['gpu_fabric_environment']['GF_SIM_NCCL_WRONG'] = '2'
        cluster.write_hosts_file(hosts, os.path.join(dest, 'sim_hosts.json'))
        with open(os.path.join(dest, 'inventory.yml'), 'w') as handle:
            yaml.safe_dump(inventory, handle)
    return hosts


def test_seed000_node_without_gdr_and_a_corrupting_node_are_named(tmp_path):
    """Seed 000 on six MetaX nodes: m4's kernel does not export mm_kobj, so MCCL has no
    GPUDirect RDMA there and the whole ring slows down; m2 returns wrong data. The fleet
    run is judged (corruption wins over speed), then the search names both nodes."""
    dest = str(tmp_path)
    _fleet(dest, wrong_node='m2')
    out = os.path.join(dest, 'out')
    os.makedirs(out)
    cmd = [os.path.join(os.path.dirname(sys.executable), 'ansible-playbook'), os.path.join(REPO, 'playbooks', 'benchmark.yml'),
           '-i', os.path.join(dest, 'inventory.yml'), '-e', 'gpu_fabric_hosts=gpu_nodes', '-e', 'gpu_fabric_output_dir=' + out,
           '--tags', 'fabric_collective']
    result = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600, check=False,
                            env=dict(os.environ, ANSIBLE_NOCOLOR='1'))
    stats = recap(result)
    assert all(s['failed'] == 0 and s['unreachable'] == 0 for s in stats.values()), result.stdout[-3000:]
    with open(os.path.join(out, 'collective.json')) as handle:
        outcome = json.load(handle)
    # Three 200 Gb/s... the metax node's ACTIVE ports / 8, the same on every node.
    assert outcome['expected']['gbs'] > 0 and outcome['expected']['below_median'] == []
    assert outcome['skipped'] is None   # a real null, not the text 'None'
    fleet = outcome['fleet']
    assert fleet['verdict']['status'] == 'corrupt' and fleet['wrong_total'] > 0
    assert fleet['transport']['gdr'] is False            # "GPU Direct RDMA Disabled" printed for m4
    search = outcome['search']
    assert sorted(search['culprits']) == ['m2', 'm4'] and search['unresolved'] == [] and search['pairs'] == []
    # m4's facts already show it (no GPUDirect RDMA): named from them, no run spent on it.
    assert search['basis'] == {'m4': 'facts', 'm2': 'runs'}
    runs = search['runs']
    assert not any('m4' in r['hosts'] for r in runs)
    assert runs[0]['step'] == 'trial' and runs[0]['status'] == 'corrupt'   # the others without m4: m2's wrong data
    assert all(r['status'] == 'ok' for r in runs if 'm2' not in r['hosts'])
    assert search['rounds'] <= len(runs)


def _module(monkeypatch, hosts_file, env_root, **args):
    monkeypatch.setenv('PATH', os.path.join(REPO, 'tests', 'sim', 'bin') + os.pathsep + os.environ['PATH'])
    monkeypatch.setenv('GF_SIM_HOSTS', hosts_file)
    monkeypatch.setenv('GF_SIM_ROOT', env_root)
    monkeypatch.setenv('GF_SIM_PYTHON', sys.executable)
    base = {'launcher': 'mpirun', 'hosts': ['m1', 'm3'], 'slots_per_host': 8, 'min_bytes': '1M', 'max_bytes': '32M',
            'step_factor': 4, 'timeout': 20}
    base.update(args)
    return run_module(collective_bench.main, base, monkeypatch)


def test_collective_bench_failure_kinds_and_nothing_left(monkeypatch, tmp_path):
    dest = str(tmp_path)
    hosts = _fleet(dest)
    table = os.path.join(dest, 'sim_hosts.json')
    root = hosts['m1']['gpu_fabric_root']
    # Healthy pair, judged against the NICs; text and -J JSON of the stand-in agree.
    text, failed = _module(monkeypatch, table, root, output_format='text', expected_busbw_gbs=50.0)
    data, _failed = _module(monkeypatch, table, root, output_format='json', expected_busbw_gbs=50.0)
    assert not failed and text['status'] == 'ok' and text['transport']['gdr'] is True and text['transport']['net'] == 'IB'
    assert text['avg_busbw_gbs'] == data['avg_busbw_gbs'] and text['max_busbw_gbs'] == data['max_busbw_gbs']
    assert len(text['hosts']) == 2 and text['verdict']['status'] == 'ok'
    # The binary is missing on the nodes: mpirun says so, the module names the kind.
    missing, failed = _module(monkeypatch, table, root, binary='/opt/none/all_reduce_perf')
    assert not failed and missing['status'] == 'failed' and missing['failure']['kind'] == 'missing_binary'
    # mpirun cannot start: a host it cannot resolve.
    lost, _failed = _module(monkeypatch, table, root, hosts=['m1', 'gone-node'])
    assert lost['failure']['kind'] == 'launch_failed' and 'gone-node' in lost['failure']['message']
    # Too few slots for the ranks asked for.
    slots, _failed = _module(monkeypatch, table, root, processes=24)
    assert slots['failure']['kind'] == 'launch_failed' and 'not enough slots' in slots['failure']['message']
    # A rank that hangs: killed at the timeout with the whole process group.
    hosts['m3']['gpu_fabric_environment']['GF_SIM_NCCL_HANG'] = '1'
    cluster.write_hosts_file(hosts, table)
    hung, _failed = _module(monkeypatch, table, root, timeout=3)
    assert hung['status'] == 'failed' and hung['failure']['kind'] == 'timeout'
    # This test's runs only (-e 32M: the other tests that run beside it in parallel use 64M or the role's 1G).
    left = subprocess.run(['pgrep', '-f', 'tools_nccl.py all_reduce_perf -b 1M -e 32M'], capture_output=True, text=True, check=False)
    assert left.stdout == ''
