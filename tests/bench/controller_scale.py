# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""What the controller spends on a large pairwise benchmark, stage by stage, without nodes.

Target: 1,024 nodes x 8 rails (ring and random pairing) and 256 nodes x 8 rails
(full mesh), each controller stage under 60 s and under 2 GiB. Synthetic facts (one rendered
nvidia_h100_8x_ndr node, copied per host) and synthetic perftest_run sequence results of the
real shape (every test with its parsed result rows, a failed one with perftest's banner and
command too, every step with the time of its error-counter read (none rises), as perftest_run
returns them) stand in for the nodes; a few faults are planted (a
degraded rail, a failed rail, a slow link, slow GPU memory on one node) so that judging and
diagnosis have something to find.

Stages, each in a fresh Python process so that its peak memory is its own; the filters are
called as the roles and plays call them:
  plan        - bench_node_plan per node, bench_fleet_plan, pair_schedule_summary, and per node
                pair_schedule(expand, node) + bench_sequence (role fabric_bench, sequence.yml);
  records     - per node, what perftest_collect does with the node's finished job (sequence.yml,
                "Wait for every node's steps and keep their records"): its raw result (JSON, as
                async_status returns it) turned into records, written to a file on the controller
                (fabric_bench_records_dir) - in worker processes, one per core, as Ansible's forks
                run that task, each holding one node's raw result at a time (cpu_seconds: all of
                their time together; worker_peak_rss_mib: the largest worker);
  judge       - bench_report over every node's records file (benchmark.yml, "Judge the pairs");
  diagnose    - fabric_report: _diagnose and report.json's content (report.yml);
  report_json - report.json's text (plugin_utils/report/_report_stage.py report_json), written (fabric_report_write);
  report_html - report_html, written;
  report_rest - report_markdown, report_junit, report_prometheus.
(synth_facts and synth_nodes make the input and are printed too, marked "input": not controller work.)

Memory: peak_rss_mib is the process's ru_maxrss (interpreter and the stage's loaded input
included); input_rss_mib is ru_maxrss once the input is loaded, before the stage runs;
stage_mib = peak_rss_mib - input_rss_mib is what the stage itself added to the high-water
mark (0 when it stayed below what loading the input took). With --tracemalloc the stage's own
Python allocations (tracemalloc peak) are printed too, at the cost of a slower stage.

--ansible also runs the data path through ansible-playbook itself: an inventory of N hosts (no
connection is made: set_fact only), each host's plan and the path of its records file put in
hostvars as the role puts them (--keep-raw: its steps, raw result and records themselves, as the
role kept them before perftest_collect), then the "Judge the pairs" play of playbooks/benchmark.yml
and playbooks/report.yml as they are. Printed:
  seconds               - ansible-playbook's wall time;
  setup_seconds         - from its start to the last node's result of the input set-up play (the
                          synthetic results put in hostvars: in a real run, the nodes' own work);
  controller_seconds    - from there to the last file written in the output directory (bench.json,
                          the report's files): the controller's own time. Timed by the task callback
                          tests/bench/callbacks/gf_task_times.py and the files' mtimes (one clock);
  setup_cpu_seconds, controller_cpu_seconds - the CPU time of ansible-playbook and its workers over
                          the same spans: other processes on the machine's cores inflate wall time,
                          much less CPU time;
  direct_seconds, direct_cpu_seconds - the same stages called directly (judge to report_rest, when
                          they ran in the same invocation), controller_vs_direct and
                          controller_cpu_vs_direct_cpu the ratios;
  peak_rss_mib          - the largest process's peak RSS (RUSAGE_CHILDREN); slowest_tasks; controller_tasks
                          (each task after the input set-up play, in order, and its seconds).
Targets: controller_seconds under 60 s (180 s for a full mesh) and peak_rss_mib under 2 GiB
(within_target); within 2x of the direct stages (within_2x).

Prints one JSON line per (case, stage). Usage (from the checkout, collection importable):
  python -m tests.bench.controller_scale [--cases 64:ring 1024:random 256:full ...] [--ansible] [--tracemalloc]
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import pickle
import resource
import signal
import subprocess
import sys
import tempfile
import time
import zlib

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TARGET_S = 60.0
TARGET_MIB = 2048.0
# --ansible: the controller's own time (controller_seconds) for a full mesh, whose pairs are N^2.
TARGET_FULL_S = 180.0
# What the direct stages are to the controller's time in ansible-playbook (controller_seconds).
CONTROLLER_STAGES = ('judge', 'diagnose', 'report_json', 'report_html', 'report_rest')
PROFILE = 'nvidia_h100_8x_ndr'
DEFAULT_CASES = ('64:ring', '64:random', '64:full', '256:ring', '256:random', '256:full', '1024:ring', '1024:random')
STAGES = ('synth_facts', 'plan', 'synth_nodes', 'records', 'judge', 'diagnose', 'report_json', 'report_html', 'report_rest')
INPUT_STAGES = ('synth_facts', 'synth_nodes')
MEMORIES = ['host', 'gpu']
RUN_ID = 'gf-scale-1'

BASE_PORT = 18515
RAILS = 8
HCAS = ['mlx5_%d' % index for index in range(RAILS)]


def _names(count):
    return ['gpu%04d' % index for index in range(count)]


def _load(work, name):
    with open(os.path.join(work, name + '.pkl'), 'rb') as handle:
        return pickle.load(handle)


def _dump(work, name, value):
    with open(os.path.join(work, name + '.pkl'), 'wb') as handle:
        pickle.dump(value, handle, protocol=pickle.HIGHEST_PROTOCOL)


def _mib_rss():
    # Linux: ru_maxrss in KiB (getrusage(2)).
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


# ---------------------------------------------------------------------------- synthetic input

def _perftest_output():
    """A real ib_write_bw client printout parsed as perftest_run parses it: the settings a failed
    synthetic test carries (as perftest_run returns them in a sequence)."""
    from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _perftest
    path = os.path.join(REPO, 'tests', 'fixtures', 'public', 'perftest', 'seed001_cuda_ib_write_bw_mib.txt')
    with open(path) as handle:
        text = ''.join(line for line in handle if not line.startswith('## '))
    return _perftest.parse_output(text)


def _fault(case_nodes, server, client, rail, memory):
    """Bandwidth (Gb/s) or a failure for one test: a few planted faults, the rest healthy."""
    index = dict((name, i) for i, name in enumerate(case_nodes))
    ends = (index[server], index[client])
    if 9 in ends and rail == 6:
        return None                                  # node 9's rail 6 fails every test
    if 5 in ends and rail == 3:
        return 200.0                                 # node 5's rail 3 at half rate
    if set(ends) == {1, 2} and rail == 0:
        return 300.0                                 # one slow link
    if memory == 'gpu' and 12 in ends:
        return 250.0                                 # node 12's GPU memory slow
    return 392.0 - zlib.crc32(('%s %s %s %s' % (server, client, rail, memory)).encode()) % 7 * 0.5


def synth_facts(work, count, mode):
    from tests.bench import diagnosis_accuracy
    facts = diagnosis_accuracy.node_facts(PROFILE)
    frozen = pickle.dumps(facts)
    hostvars = dict((name, {'ansible_facts': {'gpu_fabric_ib': pickle.loads(frozen)['ib'],
                                              'gpu_fabric_gdr': pickle.loads(frozen)['gdr']}})
                    for name in _names(count))
    _dump(work, 'facts', hostvars)
    return {'hosts': len(hostvars)}


def synth_nodes(work, count, mode):
    """Every node's perftest_run sequence result, in its real shape."""
    from ansible_collections.hpc.gpu_fabric.plugins.module_utils._ib import error_counters
    plan = _load(work, 'plan')
    facts = _load(work, 'facts')
    nodes = _names(count)
    parsed = _perftest_output()
    counters = error_counters(facts[nodes[0]]['ansible_facts']['gpu_fabric_ib']['devices'])
    results = {}
    tests = 0
    os.makedirs(os.path.join(work, 'results'), exist_ok=True)
    for me in nodes:
        steps = []
        for number, step in enumerate(plan['steps'][me], 1):
            done = []
            for test in step['tests']:
                bw = _fault(nodes, test['server'], test['client'], test['rail'], test['memory'])
                entry = dict(test)
                entry.pop('peer', None)
                entry.update(tool_warnings=[], units='MiB/sec', rc=0, attempts=1, elapsed_s=3.2)
                if bw is None:
                    # Only a test that did not end ok carries perftest's banner, command and output back.
                    entry.update(status='failed', results=[], summary={}, rc=-9, stdout='', stderr='',
                                 failure={'kind': 'timeout', 'message': 'no answer from the peer within 60 s'},
                                 settings=copy.deepcopy(parsed['settings']),
                                 cmd=['ib_write_bw', '-d', test.get('device') or 'mlx5_0', '-p', str(test['tcp_port']),
                                      '-s', '8388608', '-F', '--report_gbits'] + ([test['peer']] if test['side'] == 'client' else []))
                else:
                    row = {'bytes': 8388608, 'iterations': 5000, 'bw_peak_gbps': bw + 0.4, 'bw_avg_gbps': bw,
                           'msg_rate_mpps': round(bw / 67.1, 6)}
                    entry.update(status='ok', failure=None, results=[row],
                                 summary={'bytes': 8388608, 'bw_peak_gbps': bw + 0.4, 'bw_avg_gbps': bw})
                done.append(entry)
                tests += 1
            # No error counter rises on the synthetic fabric: each step sends the time of its read only.
            steps.append({'step': number, 'elapsed_s': 3.4, 'counters_same_at': 1795660177.5 + 3.4 * number, 'tests': done})
        results[me] = {'status': 'ok', 'steps': steps, 'counters_start': copy.deepcopy(counters), 'finished': 1,
                       'changed': False, 'elapsed_s': 3.4 * len(steps)}
        # One file per node, JSON as async_status returns it: the controller gets each node's result on its own.
        with open(os.path.join(work, 'results', me + '.json'), 'w') as handle:
            json.dump(results.pop(me), handle)
    return {'tests': tests}


# ---------------------------------------------------------------------------- controller stages

def stage_plan(work, count, mode):
    from ansible_collections.hpc.gpu_fabric.plugins.filter import fabric_bench, pair_schedule
    facts = _load(work, 'facts')
    nodes = _names(count)

    def run():
        hostvars = {}
        for host in nodes:
            node = facts[host]['ansible_facts']
            # 8 rails: the profile's 8 compute HCAs, as fabric_bench_hcas names them (its 9th is the storage NIC).
            plan = fabric_bench.bench_node_plan(node['gpu_fabric_ib'], node['gpu_fabric_gdr'], HCAS)
            plan['address'] = '10.0.%d.%d' % (nodes.index(host) // 250, nodes.index(host) % 250 + 1)
            hostvars[host] = {'fabric_bench_plan': plan, '__fabric_bench_tool': {'status': 'skipped'}}
        fleet = fabric_bench.bench_fleet_plan(hostvars, nodes)
        rails = dict((host, hostvars[host]['fabric_bench_plan']['hcas']) for host in fleet['nodes'])
        summary = pair_schedule.pair_schedule_summary(fleet['nodes'], rails, mode=mode, k=2, seed=0)
        plans = dict((host, hostvars[host]['fabric_bench_plan']) for host in fleet['nodes'])
        steps = {}
        for host in fleet['nodes']:
            rounds = pair_schedule.pair_schedule(fleet['nodes'], rails, mode=mode, k=2, seed=0, expand=True, node=host)['rounds']
            steps[host] = fabric_bench.bench_sequence(host, rounds, plans, MEMORIES, BASE_PORT)
        return {'fleet': fleet, 'plans': plans, 'summary': summary, 'steps': steps}
    return run, lambda out: (_dump(work, 'plan', out), {'rounds': out['summary']['rounds'],
                                                        'steps_per_node': len(out['steps'][nodes[0]])})[1]


_COLLECT = {}


def _collect_node(host):
    """perftest_collect's work for one node, in a worker: its finished job's result (async_status's
    JSON), its records, its records file."""
    from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.bench import _bench
    work = _COLLECT['work']
    with open(os.path.join(work, 'results', host + '.json')) as handle:
        raw = json.load(handle)
    kept = _bench.sequence_records(host, _COLLECT['plan']['steps'][host], raw)
    del raw
    return host, _bench.write_records(os.path.join(work, 'bench-records'), host, kept, RUN_ID), len(kept)


def stage_records(work, count, mode):
    import multiprocessing
    _COLLECT.update(work=work, plan=_load(work, 'plan'))
    # Ansible runs the task for the nodes in its forks (ansible.cfg: 50), each node's in one worker
    # process: here one worker per core. cpu_seconds is what all of them spent (the time of one).
    workers = os.cpu_count() or 1

    def run():
        files, records = {}, 0
        with multiprocessing.get_context('fork').Pool(workers) as pool:
            for host, path, kept in pool.imap_unordered(_collect_node, _COLLECT['plan']['fleet']['nodes'], chunksize=4):
                files[host] = path
                records += kept
        return {'files': files, 'records': records}

    def finish(out):
        _dump(work, 'records', out['files'])
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        return {'records': out['records'], 'workers': workers, 'cpu_seconds': round(children.ru_utime + children.ru_stime, 1),
                'worker_peak_rss_mib': round(children.ru_maxrss / 1024.0, 1),
                'files_mib': round(sum(os.path.getsize(p) for p in out['files'].values()) / 2.0 ** 20, 1)}
    return run, finish


def _bench_hostvars(work):
    plan, files = _load(work, 'plan'), _load(work, 'records')
    return dict((host, {'fabric_bench_records': [], 'fabric_bench_records_file': files[host], 'fabric_bench_records_run': RUN_ID,
                        'fabric_bench_plan': plan['plans'][host], 'fabric_bench_fleet': plan['fleet']})
                for host in plan['fleet']['nodes'])


def stage_judge(work, count, mode):
    from ansible_collections.hpc.gpu_fabric.plugins.filter import fabric_bench
    hostvars = _bench_hostvars(work)
    options = {'bw_ratio': None, 'gpu_ratio': None, 'lat_max_us': None}

    def run():
        return fabric_bench.bench_report(hostvars, _names(count), options)
    return run, lambda out: (_dump(work, 'bench', out), {'pairs': len(out['pairs']), 'verdicts': out['verdicts']})[1]


def stage_diagnose(work, count, mode):
    from ansible_collections.hpc.gpu_fabric.plugins.filter import report
    facts, bench = _load(work, 'facts'), _load(work, 'bench')
    for host, entry in facts.items():
        entry['gpu_fabric_stages'] = ['validate', 'benchmark']

    def run():
        return report.fabric_report(facts, _names(count), bench, None, '2026-11-24T00:00:00+00:00')
    return run, lambda out: (_dump(work, 'report', out), {'findings': len(out['findings']), 'roots': out['summary']['roots']})[1]


def _writer(work, name, render):
    report = _load(work, 'report')
    path = os.path.join(work, name)

    def run():
        text = render(report)
        with open(path, 'w') as handle:
            handle.write(text)
        return len(text.encode('utf-8'))
    return run, lambda size: {'bytes': size}


def stage_report_json(work, count, mode):
    from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.report import _report_stage
    # As the report action writes it (plugin_utils/report/_report_stage.py report_json).
    return _writer(work, 'report.json', _report_stage.report_json)


def stage_report_html(work, count, mode):
    from ansible_collections.hpc.gpu_fabric.plugins.filter.report import FilterModule
    return _writer(work, 'report.html', FilterModule().filters()['report_html'])


def stage_report_rest(work, count, mode):
    from ansible_collections.hpc.gpu_fabric.plugins.filter.report import FilterModule
    filters = FilterModule().filters()
    return _writer(work, 'report.rest', lambda report: filters['report_markdown'](report, '/out/report.html')
                   + filters['report_junit'](report) + filters['report_prometheus'](report, 0))


STAGE_FUNCS = {'plan': stage_plan, 'records': stage_records, 'judge': stage_judge, 'diagnose': stage_diagnose,
               'report_json': stage_report_json, 'report_html': stage_report_html, 'report_rest': stage_report_rest}


def run_stage(stage, work, count, mode, trace=False):
    """In the child: load the input, run the stage, print one JSON object."""
    if stage in INPUT_STAGES:
        start = time.perf_counter()
        extra = (synth_facts if stage == 'synth_facts' else synth_nodes)(work, count, mode)
        print(json.dumps(dict(extra, seconds=round(time.perf_counter() - start, 3), peak_rss_mib=round(_mib_rss(), 1))))
        return
    run, finish = STAGE_FUNCS[stage](work, count, mode)
    loaded = _mib_rss()
    if trace:
        import tracemalloc
        tracemalloc.start()
    start, cpu = time.perf_counter(), time.process_time()
    out = run()
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    peak = _mib_rss()
    result = {'seconds': round(seconds, 3), 'cpu_seconds': round(cpu, 3), 'input_rss_mib': round(loaded, 1), 'peak_rss_mib': round(peak, 1),
              'stage_mib': round(max(0.0, peak - loaded), 1)}
    if trace:
        result['tracemalloc_peak_mib'] = round(tracemalloc.get_traced_memory()[1] / 2.0 ** 20, 1)
        tracemalloc.stop()
    result.update(finish(out))
    print(json.dumps(result))


def measure_case(count, mode, trace=False, timeout=900, keep=None):
    """Every stage of one case, each in its own process; yields one dict per stage."""
    with tempfile.TemporaryDirectory(prefix='gf-scale-') as work:
        for stage in STAGES:
            argv = [sys.executable, '-m', 'tests.bench.controller_scale', '--stage', stage, '--work', work,
                    '--nodes', str(count), '--mode', mode] + (['--tracemalloc'] if trace else [])
            row = {'nodes': count, 'rails': RAILS, 'mode': mode, 'stage': stage, 'input': stage in INPUT_STAGES}
            try:
                done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=timeout, check=False)
            except subprocess.TimeoutExpired:
                row.update(error='ran past %d s' % timeout)
                yield row
                return
            if done.returncode != 0:
                row.update(error=(done.stderr.strip().splitlines() or ['exit %d' % done.returncode])[-1])
                yield row
                return
            row.update(json.loads(done.stdout.strip().splitlines()[-1]))
            if not row['input']:
                row['within_target'] = row['seconds'] < TARGET_S and max(row['peak_rss_mib'],
                                                                         row.get('worker_peak_rss_mib', 0)) < TARGET_MIB
            yield row
        if keep:
            for name in ('report.json', 'report.html'):
                if os.path.exists(os.path.join(work, name)):
                    os.replace(os.path.join(work, name), os.path.join(keep, '%d_%s_%s' % (count, mode, name)))


# ---------------------------------------------------------------------------- through Ansible

# Serves each host its share of the synthetic data from a file of its own (in the benchmark,
# the node's module result), so that what Ansible holds is what it would hold after the run.
SYNTH_FILTER = '''
import pickle, os

def gf_synthetic(host, work):
    with open(os.path.join(work, 'hosts', host + '.pkl'), 'rb') as handle:
        return pickle.load(handle)

class FilterModule(object):
    def filters(self):
        return {'gf_synthetic': gf_synthetic}
'''

# What the role leaves in hostvars on every node: its plan and the path of its records file;
# facts as ib_link_facts/gdr_facts return them. --keep-raw: as the role did before
# perftest_collect, the steps, the raw sequence result (registered by async_status, all nodes at
# once) and the records themselves (NODE_PLAY_KEEP_RAW).
NODE_PLAY_NAME = 'Synthetic benchmark results, as the fabric_bench role leaves them'
NODE_PLAY = '''
- name: %s
  hosts: gpu_nodes
  gather_facts: false
  tasks:
    # As role fabric_bench sets it: run_once, one value every node of the play shares (the fleet
    # plan holds every node's plan: one copy per node would be N x N plans).
    - name: The fleet plan
      ansible.builtin.set_fact:
        fabric_bench_fleet: "{{ (ansible_play_hosts | first | gf_synthetic(gf_work)).fleet }}"
      run_once: true
    - name: Facts of the node
      ansible.builtin.set_fact:
        gpu_fabric_ib: "{{ __data.facts.gpu_fabric_ib }}"
        gpu_fabric_gdr: "{{ __data.facts.gpu_fabric_gdr }}"
        cacheable: true
      vars:
        __data: "{{ inventory_hostname | gf_synthetic(gf_work) }}"
    - name: Plan and records file, as roles/fabric_bench/tasks/sequence.yml leaves them
      ansible.builtin.set_fact:
        fabric_bench_plan: "{{ __data.plan }}"
        fabric_bench_records: []
        fabric_bench_records_file: "{{ __data.records_file }}"
        fabric_bench_records_run: "{{ __data.run_id }}"
        gpu_fabric_stages: [validate, benchmark]
        # As playbooks/validate.yml records it on every node it validated.
        __gpu_fabric_seen: {address: '', nccl: [{}, {}]}
      vars:
        __data: "{{ inventory_hostname | gf_synthetic(gf_work) }}"
''' % NODE_PLAY_NAME
# --keep-raw: instead of the last task of NODE_PLAY (the tasks are chosen here, not by a `when`: a
# skipped task still costs a pass over every host).
NODE_PLAY_KEEP_RAW = NODE_PLAY[:NODE_PLAY.index('    - name: Plan and records file')] + '''
    - name: Steps, raw result and records in hostvars, as the role kept them before perftest_collect
      ansible.builtin.set_fact:
        fabric_bench_plan: "{{ __data.plan }}"
        __fabric_bench_steps: "{{ __data.steps }}"
        __fabric_bench_done: "{{ __data.result }}"
        gpu_fabric_stages: [validate, benchmark]
        __gpu_fabric_seen: {address: '', nccl: [{}, {}]}
      vars:
        __data: "{{ inventory_hostname | gf_synthetic(gf_work) }}"
    - name: Records, then steps and raw result dropped (the old "Keep the results")
      ansible.builtin.set_fact:
        fabric_bench_records: "{{ inventory_hostname | hpc.gpu_fabric.bench_sequence_records(__fabric_bench_steps, __fabric_bench_done) }}"
        __fabric_bench_steps: []
        __fabric_bench_done: {}
'''


def _controller_times(row, times, out, started):
    """setup_seconds and controller_seconds of a run: the input set-up play's last host result (the
    task callback's times) and the last file written in ``out``, both on time.time()'s clock."""
    with open(times) as handle:
        tasks = [json.loads(line) for line in handle if line.strip()]
    row['slowest_tasks'] = [(t['task'], round(t['s'], 1)) for t in sorted(tasks, key=lambda t: -t['s'])[:5]]
    setup = max([t for t in tasks if t.get('play') == NODE_PLAY_NAME and t.get('last_result')] or [None],
                key=lambda t: t['last_result'] if t else 0)
    written = [os.path.getmtime(os.path.join(top, name)) for top, _dirs, names in os.walk(out) for name in names]
    if setup is None or not written:
        row['error'] = row.get('error') or 'no input set-up result or no file written: controller_seconds not measured'
        return
    row.update(setup_seconds=round(setup['last_result'] - started, 1), controller_seconds=round(max(written) - setup['last_result'], 1))
    # Where the controller's time goes: each task after the input set-up play, in order.
    row['controller_tasks'] = [(t['task'], t['s']) for t in tasks if t.get('start', 0) >= setup['last_result'] - 0.01]
    # CPU time over the same span, to the result of the task that wrote the last file: what a
    # busy machine (other processes on its cores) does not inflate as it does wall time.
    writer = min([t for t in tasks if t.get('last_result') and t['last_result'] >= max(written) - 0.01] or [None],
                 key=lambda t: t['last_result'] if t else 0)
    if writer and writer.get('cpu_at_last_result') is not None and setup.get('cpu_at_last_result') is not None:
        row.update(setup_cpu_seconds=round(setup['cpu_at_last_result'], 1),
                   controller_cpu_seconds=round(writer['cpu_at_last_result'] - setup['cpu_at_last_result'], 1))


def ansible_case(count, mode, timeout=900, keep_raw=False, direct=None):
    """ansible-playbook over N hosts with the case's data in hostvars, then the judge and report plays.
    ``direct``: the wall and CPU seconds of the same stages called directly (CONTROLLER_STAGES), when measured."""
    import yaml
    with tempfile.TemporaryDirectory(prefix='gf-scale-ansible-') as work:
        for stage in ('synth_facts', 'plan', 'synth_nodes', 'records'):
            done = subprocess.run([sys.executable, '-m', 'tests.bench.controller_scale', '--stage', stage, '--work', work,
                                   '--nodes', str(count), '--mode', mode], cwd=REPO, capture_output=True, text=True, check=False)
            if done.returncode:
                return {'nodes': count, 'mode': mode, 'stage': 'ansible', 'error': done.stderr.strip()[-400:]}
        facts, plan, files = (_load(work, name) for name in ('facts', 'plan', 'records'))
        os.makedirs(os.path.join(work, 'hosts'))
        os.makedirs(os.path.join(work, 'filter_plugins'))
        hostvars_bytes = 0
        for host in plan['fleet']['nodes']:
            data = {'facts': facts[host]['ansible_facts'], 'plan': plan['plans'][host], 'records_file': files[host], 'run_id': RUN_ID}
            if host == plan['fleet']['nodes'][0]:
                data['fleet'] = plan['fleet']     # the run_once task reads it from the first node
            if keep_raw:
                with open(os.path.join(work, 'results', host + '.json')) as handle:
                    data.update(steps=plan['steps'][host], result=json.load(handle))
            hostvars_bytes += len(json.dumps(data))
            _dump(os.path.join(work, 'hosts'), host, data)
        del facts, plan, files
        with open(os.path.join(work, 'filter_plugins', 'gf_synthetic.py'), 'w') as handle:
            handle.write(SYNTH_FILTER)
        with open(os.path.join(REPO, 'playbooks', 'benchmark.yml')) as handle:
            judge = [play for play in yaml.safe_load(handle) if play.get('name') == 'Judge the pairs'][0]
        judge['hosts'] = 'localhost'
        judge['vars_files'] = [os.path.join(REPO, 'playbooks', 'vars', 'nodes.yml')]
        with open(os.path.join(work, 'scale.yml'), 'w') as handle:
            handle.write('---' + (NODE_PLAY_KEEP_RAW if keep_raw else NODE_PLAY) + yaml.safe_dump([judge], sort_keys=False)
                         + '- name: Report\n  ansible.builtin.import_playbook: %s\n' % os.path.join(REPO, 'playbooks', 'report.yml'))
        with open(os.path.join(work, 'inventory.ini'), 'w') as handle:
            handle.write('[gpu_nodes]\n' + ''.join('%s ansible_connection=local\n' % h for h in _names(count)))
        times = os.path.join(work, 'times.jsonl')
        env = dict(os.environ, ANSIBLE_NOCOLOR='1', GF_TASK_TIMES=times, ANSIBLE_CALLBACKS_ENABLED='gf_task_times',
                   ANSIBLE_CALLBACK_PLUGINS=os.path.join(REPO, 'tests', 'bench', 'callbacks'),
                   ANSIBLE_FILTER_PLUGINS=os.path.join(work, 'filter_plugins'))
        argv = [os.path.join(os.path.dirname(sys.executable), 'ansible-playbook'), os.path.join(work, 'scale.yml'),
                '-i', os.path.join(work, 'inventory.ini'), '-e', 'gf_work=%s' % work,
                '-e', 'gpu_fabric_output_dir=%s' % os.path.join(work, 'out'), '-e', "gpu_fabric_exit_policy=findings[?code=='NO_SUCH_CODE']",
                '-e', 'ansible_python_interpreter=%s' % sys.executable]
        row = {'nodes': count, 'rails': RAILS, 'mode': mode, 'stage': 'ansible', 'input': False, 'keep_raw': keep_raw,
               'hostvars_json_mib': round(hostvars_bytes / 2.0 ** 20, 1)}
        script = ('import resource, subprocess, sys, json, time; w = time.time(); t = time.perf_counter(); '
                  'p = subprocess.run(sys.argv[1:], capture_output=True, text=True); '
                  'print(json.dumps({"rc": p.returncode, "seconds": time.perf_counter() - t, "started": w, '
                  '"tail": (p.stdout + p.stderr)[-600:], "console_lines": len(p.stdout.splitlines()), '
                  '"failed": [line[:2000] for line in p.stdout.splitlines() if line.startswith(("fatal:", "failed:"))][:3], '
                  '"peak_rss_mib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024.0}))')
        # Its own process group: past the timeout, ansible-playbook and its workers are killed too, not
        # only the wrapper (they would run on, and load the machine, for the next case).
        wrapper = subprocess.Popen([sys.executable, '-c', script] + argv, cwd=REPO, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
        try:
            stdout, _stderr = wrapper.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(wrapper.pid, signal.SIGKILL)
            wrapper.communicate()
            row.update(error='ran past %d s' % timeout)
            return row
        measured = json.loads(stdout)
        row.update(seconds=round(measured['seconds'], 1), peak_rss_mib=round(measured['peak_rss_mib'], 1),
                   console_lines=measured['console_lines'])
        if measured['rc']:
            # The tasks that failed (the console's "fatal:" lines), else the console's tail.
            row['error'] = '\n'.join(measured['failed']) or measured['tail']
        written = os.path.join(work, 'out', 'report.json')
        if os.path.exists(written):
            # What came out, so that a run that judged nothing cannot pass for a fast one.
            with open(written) as handle:
                report = json.load(handle)
            row.update(report_hosts=report['summary']['hosts'], report_findings=len(report['findings']),
                       report_pairs=len((report.get('bench') or {}).get('pairs') or []),
                       report_html_bytes=os.path.getsize(os.path.join(work, 'out', 'report.html')))
        else:
            row['error'] = row.get('error') or 'no report.json written'
        if os.path.exists(times):
            _controller_times(row, times, os.path.join(work, 'out'), measured['started'])
        else:
            row['error'] = row.get('error') or 'no task times written: controller_seconds not measured'
        if direct is not None:
            direct, direct_cpu = direct
            row.update(direct_seconds=round(direct, 1), direct_cpu_seconds=round(direct_cpu, 1))
            if 'controller_seconds' in row:
                row.update(controller_vs_direct=round(row['controller_seconds'] / max(direct, 0.001), 1),
                           within_2x=row['controller_seconds'] <= 2 * direct)
            if 'controller_cpu_seconds' in row:
                row['controller_cpu_vs_direct_cpu'] = round(row['controller_cpu_seconds'] / max(direct_cpu, 0.001), 1)
        limit = TARGET_FULL_S if mode == 'full' else TARGET_S
        row['within_target'] = (not row.get('error') and row['controller_seconds'] < limit and row['peak_rss_mib'] < TARGET_MIB)
        return row


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n', 1)[0])
    parser.add_argument('--cases', nargs='+', default=list(DEFAULT_CASES), help='NODES:MODE (ring, random, full)')
    parser.add_argument('--ansible', action='store_true', help='also run the data path through ansible-playbook')
    parser.add_argument('--ansible-only', action='store_true')
    parser.add_argument('--keep-raw', action='store_true',
                        help='ansible: keep the steps and raw results in hostvars, as the role did before the per-node layout')
    parser.add_argument('--tracemalloc', action='store_true')
    parser.add_argument('--keep', help='a directory to keep each case\'s report.json and report.html in')
    parser.add_argument('--timeout', type=int, default=900, help='seconds one stage may take before the case stops')
    parser.add_argument('--stage', help=argparse.SUPPRESS)
    parser.add_argument('--work', help=argparse.SUPPRESS)
    parser.add_argument('--nodes', type=int, help=argparse.SUPPRESS)
    parser.add_argument('--mode', help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.stage:
        run_stage(args.stage, args.work, args.nodes, args.mode, args.tracemalloc)
        return 0
    missed = 0
    for case in args.cases:
        count, mode = case.split(':')
        rows = [] if args.ansible_only else list(measure_case(int(count), mode, args.tracemalloc, args.timeout, args.keep))
        if args.ansible or args.ansible_only:
            direct = [(r['seconds'], r['cpu_seconds']) for r in rows if r['stage'] in CONTROLLER_STAGES and 'seconds' in r]
            rows.append(ansible_case(int(count), mode, args.timeout, args.keep_raw,
                                     [sum(column) for column in zip(*direct)] if len(direct) == len(CONTROLLER_STAGES) else None))
        for row in rows:
            missed += bool(row.get('error')) or row.get('within_target') is False
            print(json.dumps(row), flush=True)
    return 1 if missed else 0


if __name__ == '__main__':
    sys.exit(main())
