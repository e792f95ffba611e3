# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""A new user's first runs: validate_fabric.yml on the machine itself (-i localhost, -c local),
on a one-node inventory of a GPU node without RDMA, and on a pattern that matches nothing.
Fail closed: no run that checked nothing passes, and the report is always written.

The first test runs on this machine for real (the CI machine has no GPU and no RDMA device);
the others on simulated nodes (tests/sim) with the real playbooks.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import yaml

from tests.functional.helpers import recap
from tests.sim import cluster

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_playbook(inventory, out, *extra, env=None):
    env = dict(os.environ, ANSIBLE_NOCOLOR='1', ANSIBLE_FORCE_COLOR='0', **(env or {}))
    cmd = [os.path.join(os.path.dirname(sys.executable), 'ansible-playbook'), os.path.join(REPO, 'validate_fabric.yml'),
           '-i', inventory, '-e', 'gpu_fabric_output_dir=' + out,
           # This machine's pyenv shims are not an interpreter Ansible can discover: the test's own.
           '-e', 'ansible_python_interpreter=' + sys.executable] + list(extra)
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600, check=False)


def report_of(out):
    with open(os.path.join(out, 'report.json')) as handle:
        return json.load(handle)


def roots(report):
    return sorted((f['code'], f['host']) for f in report['findings'] if f['explained_by'] is None and f['severity'] != 'info')


def test_localhost_is_a_node_and_a_machine_without_gpu_or_rdma_fails_closed(tmp_path):
    """`-i localhost, -c local` with the benchmark and the per-node collective on this machine,
    which has neither a GPU nor an RDMA device: the node is reported (not dropped), nothing
    passes, every stage says why it did not run, and the report is written."""
    out = str(tmp_path / 'out')
    result = run_playbook('localhost,', out, '-c', 'local', '-e', 'gpu_fabric_benchmark=true',
                          '-e', 'fabric_collective_launcher=local')
    # 2: a task failed - the exit policy's, after everything was written; nothing else failed.
    assert result.returncode == 2, result.stdout[-4000:]
    assert recap(result)['localhost']['failed'] == 1 and 'rescued=0' in result.stdout
    assert 'exit policy (default: any root-cause error) matched' in result.stdout
    assert 'localhost: 0 RDMA device(s), 0/0 port(s) ACTIVE; 0 GPU(s); GPUDirect RDMA NOT ready' in result.stdout
    report = report_of(out)
    assert list(report['hosts']) == ['localhost'] and report['hosts']['localhost']['status'] == 'error'
    assert report['summary']['hosts'] == 1 and report['summary']['hosts_ok'] == 0
    assert roots(report) == [('HOST_NOTHING_TO_CHECK', 'localhost')]
    codes = dict((f['code'], f) for f in report['findings'])
    # The stages that could not run say why, explained by the root.
    assert 'a pair needs two' in codes['BENCH_NOT_RUN']['cause']
    assert codes['BENCH_NODE_NOT_TESTED']['evidence']['reason'] == 'no RDMA device (HCA) to test on this node'
    assert report['collective']['skipped'] == 'no node has a GPU' and report['collective']['launcher'] == 'local'
    for code in ('BENCH_NOT_RUN', 'BENCH_NODE_NOT_TESTED', 'COLLECTIVE_NOT_RUN'):
        assert codes[code]['explained_by'] == 'HOST_NOTHING_TO_CHECK@localhost/node', code
    for name in ('report.html', 'report.md', 'junit.xml', 'gpu_fabric.prom', 'bench.json', 'facts/localhost.json'):
        assert os.path.getsize(os.path.join(out, name)) > 0, name
    with open(os.path.join(out, 'report.md')) as handle:
        assert '1 host(s): 0 ok, 1 with errors' in handle.read()


def _one_node(dest, name, profile):
    cluster.build({'nodes': [{'name': name, 'profile': profile}]}, dest, 'local', python=sys.executable)
    return os.path.join(dest, 'inventory.yml')


def test_one_gpu_node_without_rdma_named_localhost(tmp_path):
    """The real 2 x H200 machine as a one-node inventory whose node is called localhost: no RDMA
    device is an error with its consequence (NCCL's socket transport); the pairwise mesh cannot
    run (one node, no HCA) and says so; the per-node collective runs over its two GPUs."""
    dest = str(tmp_path)
    inventory = _one_node(dest, 'localhost', 'h200x2_no_rdma')
    out = os.path.join(dest, 'out')
    result = run_playbook(inventory, out, '-e', 'gpu_fabric_hosts=gpu_nodes', '-e', 'gpu_fabric_benchmark=true',
                          '-e', 'fabric_collective_launcher=local')
    assert result.returncode == 2, result.stdout[-4000:]
    report = report_of(out)
    assert list(report['hosts']) == ['localhost'] and report['hosts']['localhost']['gpus'] == 2
    assert roots(report) == [('GDR_NO_RDMA_NIC', 'localhost')]
    codes = dict((f['code'], f) for f in report['findings'])
    assert codes['GDR_NO_RDMA_NIC']['evidence']['nccl_path'] == 'socket'
    assert 'socket transport' in codes['GDR_NO_RDMA_NIC']['cause']
    assert codes['BENCH_NOT_RUN']['explained_by'] == 'GDR_NO_RDMA_NIC@localhost/node'
    local = report['collective']['nodes']['hosts']['localhost']
    # The stand-in's NVLink peak for NVIDIA (tests/sim/tools_nccl.py), measured over -g 2.
    assert local['status'] == 'ok' and local['ranks'] == 2 and local['max_busbw_gbs'] > 100
    # No expectation given, no peers: judged against its GPUs' NVLink as NCCL's topology gives it (the stand-in prints
    # the real H200 run's 'totalBw 370.8').
    assert local['verdict']['status'] == 'ok' and local['verdict']['expected_gbs'] == 370.8
    assert 'NVLink' in local['verdict']['basis']
    assert report['collective']['skipped'] is None


def test_a_pattern_that_matches_no_host_fails(tmp_path):
    dest = str(tmp_path)
    inventory = _one_node(dest, 'gpu01', 'nvidia_h100_8x_ndr')
    out = os.path.join(dest, 'out')
    result = run_playbook(inventory, out, '-e', 'gpu_fabric_hosts=no_such_group')
    assert result.returncode == 2, result.stdout[-4000:]
    report = report_of(out)
    assert report['hosts'] == {} and roots(report) == [('RUN_NOTHING_VALIDATED', None)]
    assert 'matched no inventory host' in report['findings'][0]['cause']


def test_per_node_collective_names_the_node_below_its_peers(tmp_path):
    """Launcher local on three nodes at once: the one whose GPU links are slow (the stand-in
    at 120 instead of 327 GB/s) is named against the median of the other two; nothing in its
    facts shows it."""
    dest = str(tmp_path)
    spec = {'nodes': [{'name': 'g%d' % i, 'profile': 'nvidia_h100_8x_ndr', 'env': {'GF_SIM_NVLINK_GBS': '120'} if i == 2 else {}}
                      for i in range(1, 4)]}
    cluster.build(spec, dest, 'local', python=sys.executable)
    out = os.path.join(dest, 'out')
    os.makedirs(out)
    cmd = [os.path.join(os.path.dirname(sys.executable), 'ansible-playbook'), os.path.join(REPO, 'playbooks', 'benchmark.yml'),
           '-i', os.path.join(dest, 'inventory.yml'), '-e', 'gpu_fabric_hosts=gpu_nodes', '-e', 'gpu_fabric_output_dir=' + out,
           '-e', 'fabric_collective_launcher=local', '--tags', 'fabric_collective']
    result = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600, check=False,
                            env=dict(os.environ, ANSIBLE_NOCOLOR='1'))
    assert all(s['failed'] == 0 for s in recap(result).values()), result.stdout[-3000:]
    with open(os.path.join(out, 'collective.json')) as handle:
        outcome = json.load(handle)
    local = outcome['nodes']
    assert local['slow'] == ['g2'] and local['failed'] == []
    assert local['hosts']['g2']['peer_ratio'] < 0.5 and local['hosts']['g1']['peer_ratio'] > 0.9
    assert all(local['hosts'][h]['ranks'] == 8 for h in ('g1', 'g2', 'g3'))


def _without(folder, names):
    """A folder of links to the programs of /usr/bin and /bin, less ``names``: a PATH on which they are missing."""
    os.makedirs(folder)
    for top in ('/usr/bin', '/bin'):
        for name in sorted(os.listdir(top)) if os.path.isdir(top) else []:
            if name not in names and not os.path.lexists(os.path.join(folder, name)):
                os.symlink(os.path.join(top, name), os.path.join(folder, name))
    return folder


def test_missing_tools_leave_a_node_out_and_fail_the_collective_with_why(tmp_path):
    """Three nodes, one without perftest on its PATH, and a launcher (srun) that no node has: the
    mesh tests the other two and names the third with why; the collective is a failed result
    that says srun is missing; nothing crashes and no node is lost."""
    dest = str(tmp_path)
    # No node has srun, though the machine may (the test command installs Slurm's client for the quarantine tests):
    # the system's programs through a folder of links that leaves the launcher out, instead of /usr/bin and /bin.
    system = _without(os.path.join(dest, 'system-bin'), ('srun', 'mpirun'))
    spec = {'nodes': [{'name': 'n%d' % i, 'profile': 'nvidia_h100_8x_ndr',
                       'env': {'PATH': (cluster.SIM_BIN + ':' if i != 3 else '') + system + ':/usr/local/sbin:/usr/sbin:/sbin'}}
                      for i in range(1, 4)]}
    cluster.build(spec, dest, 'local', python=sys.executable)
    out = os.path.join(dest, 'out')
    result = run_playbook(os.path.join(dest, 'inventory.yml'), out, '-e', 'gpu_fabric_hosts=gpu_nodes',
                          '-e', 'gpu_fabric_benchmark=true', '-e', 'fabric_collective_launcher=srun',
                          '-e', '{"fabric_bench_memory": ["host"], "fabric_bench_hcas": ["mlx5_0"]}',
                          # Its own ports: a user's demo (scripts/demo.sh, the defaults) or another test may run
                          # on the same 127.0.1.x addresses at the same time.
                          '-e', 'fabric_bench_beacon_port=25514', '-e', 'fabric_bench_base_port=25515')
    assert result.returncode == 2, result.stdout[-4000:]
    assert all(s['failed'] == 0 for h, s in recap(result).items() if h != 'localhost'), result.stdout[-3000:]
    report = report_of(out)
    found = dict(((f['code'], f['host']), f) for f in report['findings'])
    assert found[('BENCH_NODE_NOT_TESTED', 'n3')]['evidence']['reason'].startswith(
        'perftest cannot run here: ib_write_bw not found on PATH')
    assert report['bench']['skipped'] is None and report['bench']['excluded'] == {
        'n3': found[('BENCH_NODE_NOT_TESTED', 'n3')]['evidence']['reason']}
    assert [(p['server'], p['client'], p['verdict']) for p in report['bench']['pairs']] in (
        [('n1', 'n2', 'ok')], [('n2', 'n1', 'ok')])
    failed = found[('COLLECTIVE_FAILED', None)]
    assert 'srun not found on PATH' in failed['cause'], failed
    assert report['collective']['fleet']['failure']['kind'] == 'not_run'
    assert all(report['hosts'][h]['status'] != 'unreachable' for h in ('n1', 'n2', 'n3'))


def _split_host(dest):
    """Two simulated nodes replaying the real split 4 x H200 host (tests/fixtures/real/h200x4-split):
    nodeA over GPUs 0,1; nodeB over GPUs 2,3 with NCCL_P2P_DISABLE=1 and NCCL_SHM_DISABLE=1."""
    split = os.path.join(REPO, 'tests', 'fixtures', 'real', 'h200x4-split')
    spec = {'nodes': [
        {'name': 'nodeA', 'profile': 'h200x2_no_rdma', 'env': {'GF_SIM_NCCL_REPLAY': os.path.join(split, 'playbook-nodeA.txt')},
         'vars': {'fabric_collective_env': {'CUDA_VISIBLE_DEVICES': '0,1', 'NCCL_NVLS_ENABLE': '0'}}},
        {'name': 'nodeB', 'profile': 'h200x2_no_rdma', 'env': {'GF_SIM_NCCL_REPLAY': os.path.join(split, 'playbook-nodeB.txt')},
         'vars': {'fabric_collective_env': {'CUDA_VISIBLE_DEVICES': '2,3', 'NCCL_P2P_DISABLE': '1', 'NCCL_SHM_DISABLE': '1',
                                            'NCCL_NVLS_ENABLE': '0'}}}]}
    cluster.build(spec, dest, 'local', python=sys.executable)


def test_one_host_split_in_two_nodes_names_the_transport_on_the_node_that_forbids_p2p(tmp_path):
    """The real run of one 4 x H200 host split into two inventory nodes by CUDA_VISIBLE_DEVICES, the second
    with NCCL_P2P_DISABLE=1 and NCCL_SHM_DISABLE=1 (tests/fixtures/real/h200x4-split/README.md): each
    simulated node replays its node's real output through validate_fabric.yml, launcher local, two ranks."""
    dest = str(tmp_path)
    _split_host(dest)
    out = os.path.join(dest, 'out')
    result = run_playbook(os.path.join(dest, 'inventory.yml'), out, '-e', 'gpu_fabric_hosts=gpu_nodes',
                          '-e', 'gpu_fabric_benchmark=true', '-e', 'fabric_collective_launcher=local',
                          '-e', 'fabric_collective_ranks_per_node=2')
    assert result.returncode == 2, result.stdout[-4000:]
    report = report_of(out)
    found = dict(((f['code'], f['host']), f) for f in report['findings'])
    root = found[('COLLECTIVE_GPUS_NOT_P2P', 'nodeB')]
    assert root['explained_by'] is None and 'via NET/Socket' in root['cause']
    assert 'NCCL_P2P_DISABLE=1 and NCCL_SHM_DISABLE=1' in root['cause']
    for code in ('COLLECTIVE_BUSBW_LOW', 'COLLECTIVE_NODE_SLOW'):
        assert found[(code, 'nodeB')]['explained_by'] == root['id']
    assert not [key for key in found if key[1] == 'nodeA' and found[key]['layer'] == 'collective']
    hosts = report['collective']['nodes']['hosts']
    # Each node against its NVLink (NCCL's topology of the run) and against its peer.
    assert hosts['nodeA']['verdict']['status'] == 'ok' and hosts['nodeA']['verdict']['expected_gbs'] == 370.8
    assert hosts['nodeB']['verdict']['status'] == 'low' and hosts['nodeB']['peer_ratio'] < 0.05
    assert report['collective']['nodes']['slow'] == ['nodeB']


def test_a_node_whose_facts_fail_costs_the_healthy_nodes_nothing(tmp_path):
    """The split host of the test above, plus node0 whose facts fail (its root is not there). On the
    GPU machine such a node failed the collective's set-up on every node, and the healthy nodes'
    results were lost; it is left out of the benchmark, named by the task that failed."""
    dest = str(tmp_path)
    _split_host(dest)
    path = os.path.join(dest, 'inventory.yml')
    with open(path) as handle:
        inventory = yaml.safe_load(handle)
    # First in the inventory (sorted): the collective's result is kept on the nodes that ran it.
    inventory['all']['children']['gpu_nodes']['hosts']['node0'] = {
        'ansible_connection': 'local', 'ansible_python_interpreter': sys.executable,
        'gpu_fabric_root': os.path.join(dest, 'no-such-root')}
    with open(path, 'w') as handle:
        yaml.safe_dump(inventory, handle)
    out = os.path.join(dest, 'out')
    result = run_playbook(path, out, '-e', 'gpu_fabric_hosts=gpu_nodes', '-e', 'gpu_fabric_benchmark=true',
                          '-e', 'fabric_collective_launcher=local', '-e', 'fabric_collective_ranks_per_node=2')
    assert result.returncode == 2, result.stdout[-4000:]
    report = report_of(out)
    failed = [f for f in report['findings'] if f['code'] == 'HOST_TASK_FAILED']
    assert [(f['host'], f['evidence']['stage']) for f in failed] == [('node0', 'validate')], failed
    with open(os.path.join(out, 'collective.json')) as handle:
        assert sorted(json.load(handle)['nodes']['hosts']) == ['nodeA', 'nodeB']
    hosts = report['collective']['nodes']['hosts']
    assert sorted(hosts) == ['nodeA', 'nodeB'], hosts
    assert hosts['nodeA']['verdict']['status'] == 'ok' and hosts['nodeB']['verdict']['status'] == 'low'
    root = [f for f in report['findings'] if f['code'] == 'COLLECTIVE_GPUS_NOT_P2P']
    assert [f['host'] for f in root] == ['nodeB'] and root[0]['explained_by'] is None


def test_a_threshold_the_judging_refuses_stops_the_benchmark_before_any_pair_and_the_report_says_why(tmp_path):
    """-e fabric_bench_bw_ratio=0 (the role's argument_specs take 0 as a float): role fabric_bench refuses it
    before any pair runs, the judging refuses it too, and still the report is written - it names the judging's
    failure and the run fails (a failed judge task once dropped localhost and no report was written)."""
    dest = str(tmp_path)
    cluster.build({'nodes': [{'name': 'n%d' % i, 'profile': 'nvidia_h100_8x_ndr'} for i in (1, 2)]}, dest, 'local', python=sys.executable)
    out = os.path.join(dest, 'out')
    result = run_playbook(os.path.join(dest, 'inventory.yml'), out, '-e', 'gpu_fabric_hosts=gpu_nodes',
                          '-e', 'gpu_fabric_benchmark=true', '-e', 'gpu_fabric_collective_enabled=false',
                          '-e', 'fabric_bench_bw_ratio=0', '-e', '{"fabric_bench_memory": ["host"], "fabric_bench_hcas": ["mlx5_0"]}')
    assert result.returncode == 2, result.stdout[-4000:]
    report = report_of(out)
    assert "the benchmark judging failed: bw_ratio must be a positive number, got '0'" in result.stdout, result.stdout[-4000:]
    # The role's check, before any pair ran: each node's rescued failure names the variable; no records, no bench.json.
    assert "fabric_bench_bw_ratio must be a positive number, got '0'" in json.dumps(report['findings'])
    # Named on every node alike, not on the first one as if it were at fault.
    failed = sorted(f['host'] for f in report['findings'] if f['code'] == 'HOST_TASK_FAILED' and 'fabric_bench_bw_ratio' in f['cause'])
    assert failed == ['n1', 'n2'], failed
    assert report['bench'] is None and not os.path.exists(os.path.join(out, 'bench.json'))
    assert not os.path.exists(os.path.join(out, 'bench-records'))


def test_a_mistyped_role_variable_is_one_line_whether_or_not_its_role_runs(tmp_path):
    """Every -e value is a string: one its role would refuse is said in one line naming the variable, the value and
    what is expected - in the console and in the report - without the benchmark (whose role the value is for) and
    with it, where role argument validation printed the role's whole argument spec. The node's facts are kept."""
    line = "fabric_bench_bw_ratio='abc' is not a number (float), as role fabric_bench expects"
    # Plain; with the benchmark; in --check, where configure.yml (the drift, on this machine) refuses it first.
    for name, extra in (('plain', []), ('bench', ['-e', 'gpu_fabric_benchmark=true']), ('check', ['--check'])):
        out = str(tmp_path / name)
        result = run_playbook('localhost,', out, '-c', 'local', '-e', 'fabric_bench_bw_ratio=abc', *extra)
        assert result.returncode == 2, result.stdout[-4000:]
        console = result.stdout + result.stderr
        assert [text for text in console.splitlines() if line in text], console[-4000:]
        assert '_AnsibleTaggedStr' not in console and 'argument_spec' not in console, console[-4000:]
        # The lines about it: each play that refuses it (configure.yml too in --check) prints the task's error and its
        # result, and the report its root cause; each line short.
        about = [text for text in console.splitlines() if 'fabric_bench_bw_ratio' in text]
        assert len(about) <= (5 if name == 'check' else 3) and max(len(text) for text in about) <= 200, console[-4000:]
        report = report_of(out)
        # Once in the report, also where configure.yml and validate.yml both refused it.
        failed = [f for f in report['findings'] if f['code'] == 'HOST_TASK_FAILED']
        assert len(failed) == 1 and line in failed[0]['cause'] and len(failed[0]['cause']) < 300, failed
        with open(os.path.join(out, 'report.md')) as handle:
            text = handle.read()
        assert line in text and '_AnsibleTaggedStr' not in text and 'argument_spec' not in text
        # Validated all the same: its facts are in the report.
        assert os.path.getsize(os.path.join(out, 'facts', 'localhost.json')) > 0
        assert report['hosts']['localhost']['status'] == 'error'
