# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""plugin_utils/fleet/_tasks.py and _bench.plan_line: each gives what the Jinja it replaced gave (the
expressions below are the ones the playbooks and roles held, rendered with jinja2 and the few
Ansible tests and filters they used), and the filters check their arguments."""

from __future__ import annotations

import ast
import re

import jinja2
import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.hpc.gpu_fabric.plugins.filter import collective as collective_filters
from ansible_collections.hpc.gpu_fabric.plugins.filter import fabric_bench as bench_filters
from ansible_collections.hpc.gpu_fabric.plugins.filter import fabric_summary as summary_filters
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.bench import _bench
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.fleet import _tasks


def _jinja(source, **variables):
    env = jinja2.Environment(undefined=jinja2.ChainableUndefined)
    env.tests['search'] = lambda value, pattern: re.search(pattern, value) is not None
    env.tests['unreachable'] = lambda result: bool(result.get('unreachable', False))
    env.filters['dict2items'] = lambda value: [{'key': k, 'value': v} for k, v in value.items()]
    return env.from_string(source).render(**variables)


# validate.yml, configure.yml, benchmark.yml and offline.yml before failure_record (the variant with 'unreachable').
OLD_RECORD = ("{{ {'stage': 'validate', 'task': ansible_failed_task.name | default(''),"
              " 'msg': (ansible_failed_result.msg | default(ansible_failed_result.stderr | default('failed'))) | string | truncate(2000),"
              " 'unreachable': conn is unreachable} }}")


@pytest.mark.parametrize('result', [
    {'msg': 'boom', 'failed': True},
    {'stderr': 'cat: /sys/class/infiniband: No such file or directory', 'rc': 1, 'failed': True},
    {'failed': True},
    {'msg': None},
    {'msg': ['a', 'list']},
    {'msg': 'word ' * 500},                 # 2500 characters: cut at a word, '...'
    {'msg': 'x' * 2004},                    # within the leeway: kept whole
    {'msg': 'x' * 2006},                    # no space to cut at
])
@pytest.mark.parametrize('unreachable', [False, True])
def test_failure_record_is_what_the_rescues_wrote(result, unreachable):
    task = {'name': 'Read HCAs, ports, GIDs and counters from sysfs', 'action': 'hpc.gpu_fabric.ib_link_facts'}
    old = ast.literal_eval(_jinja(OLD_RECORD, ansible_failed_task=task, ansible_failed_result=result, conn={'unreachable': unreachable}))
    assert _tasks.failure_record(result, 'validate', task, unreachable) == old
    assert summary_filters.failure_record(result, 'validate', task, unreachable) == old


def test_failure_record_of_a_message_and_a_task_name():
    record = _tasks.failure_record('snapshot n1.tar.gz refused: not a tarball', 'offline', 'Unpack each snapshot into its node root')
    assert record == {'stage': 'offline', 'task': 'Unpack each snapshot into its node root',
                      'msg': 'snapshot n1.tar.gz refused: not a tarball', 'unreachable': False}
    assert _tasks.failure_record({'msg': 'm'}, 'benchmark')['task'] == ''
    with pytest.raises(AnsibleFilterError, match='give the stage'):
        summary_filters.failure_record({'msg': 'm'}, '')


OLD_KIND = ("{{ 'absent' if not s.exists else 'a symlink' if s.islnk else 'a directory' if s.isdir else 'a FIFO' if s.isfifo"
            " else 'a character device' if s.ischr else 'a block device' if s.isblk else 'a socket' if s.issock"
            " else 'not a regular file' }}")


@pytest.mark.parametrize('stat', [
    {'exists': False},
    {'exists': True, 'islnk': True, 'isreg': False},
    {'exists': True, 'isdir': True, 'islnk': False},
    {'exists': True, 'isfifo': True},
    {'exists': True, 'ischr': True},
    {'exists': True, 'isblk': True},
    {'exists': True, 'issock': True},
    {'exists': True, 'isreg': True, 'islnk': False, 'isdir': False},
])
def test_file_kind_is_what_the_messages_said(stat):
    assert _tasks.file_kind(stat) == summary_filters.file_kind(stat) == _jinja(OLD_KIND, s=stat)
    # With the stat following links (memlock, nccl_conf) there is no symlink to name: the same words as without islnk.
    followed = dict(stat, islnk=False)
    assert _tasks.file_kind(followed) == _jinja(OLD_KIND.replace("'a symlink' if s.islnk else ", ''), s=followed)


def test_file_kind_refuses_what_is_no_stat():
    with pytest.raises(AnsibleFilterError, match='stat'):
        summary_filters.file_kind('absent')


# validate.yml's discovery play before fabric_discovery.
OLD_DISCOVERY = """
{%- set found = [] -%}
{%- for host in hosts -%}
{%- for device in hostvars[host].gpu_fabric_ib.devices | default([]) -%}
{%- for port in device.ports | default([]) if port.link_layer | default('') == 'InfiniBand' -%}
{%- set _ = found.append({'host': host, 'sm_lid': port.sm_lid | default(0)}) -%}
{%- endfor -%}
{%- endfor -%}
{%- endfor -%}
{{ {'node': (found | first).host if found else None,
    'sm_lids': found | map(attribute='sm_lid') | select('integer') | unique | list} }}"""


def _ib(*ports):
    return {'devices': [{'name': 'mlx5_%d' % i, 'ports': [dict(port=1, **p)]} for i, p in enumerate(ports)]}


@pytest.mark.parametrize('hostvars', [
    {'a': {}, 'b': {'gpu_fabric_ib': _ib({'link_layer': 'Ethernet'})}},
    {'a': {'gpu_fabric_ib': _ib({'link_layer': 'Ethernet'})}, 'b': {'gpu_fabric_ib': _ib({'link_layer': 'InfiniBand', 'sm_lid': 5})},
     'c': {'gpu_fabric_ib': _ib({'link_layer': 'InfiniBand', 'sm_lid': 7}, {'link_layer': 'InfiniBand', 'sm_lid': 5})}},
    {'a': {'gpu_fabric_ib': _ib({'link_layer': 'InfiniBand'}, {'link_layer': 'InfiniBand', 'sm_lid': None},
                                {'link_layer': 'InfiniBand', 'sm_lid': '3'}, {'link_layer': 'InfiniBand', 'sm_lid': True})},
     'b': {'gpu_fabric_ib': {'devices': [{'name': 'mlx5_0'}]}}},
])
def test_fabric_discovery_is_what_the_loop_found(hostvars):
    hosts = sorted(hostvars)
    old = ast.literal_eval(_jinja(OLD_DISCOVERY, hostvars=hostvars, hosts=hosts))
    # The filter reads the facts where Ansible keeps them (ansible_facts), not their deprecated top-level copies.
    hostvars = dict((host, {'ansible_facts': facts}) for host, facts in hostvars.items())
    assert summary_filters.fabric_discovery(hostvars, hosts) == old
    assert summary_filters.fabric_discovery(hostvars, hosts + ['gone']) == old      # a host not in hostvars has no port


def test_fabric_discovery_names_the_first_node_with_an_infiniband_port():
    hostvars = {'n10': {'ansible_facts': {'gpu_fabric_ib': _ib({'link_layer': 'InfiniBand', 'sm_lid': 1})}},
                'n2': {'ansible_facts': {'gpu_fabric_ib': _ib({'link_layer': 'InfiniBand', 'sm_lid': 4})}}}
    assert summary_filters.fabric_discovery(hostvars, ['n2', 'n10']) == {'node': 'n2', 'sm_lids': [4, 1]}
    with pytest.raises(AnsibleFilterError, match='list of inventory names'):
        summary_filters.fabric_discovery(hostvars, 'n2')


# roles/rdma_modules/tasks/main.yml before modules_not_loaded.
OLD_MODULES = """
{%- set ns = namespace(reasons=[]) -%}
{%- for name in failed -%}
{%-   set result = results | selectattr('item', 'equalto', name) | first -%}
{%-   set why = (result.stderr | default('', true) or result.msg | default('', true)) | trim | replace('\n', ' ') -%}
{%-   set lines = log_lines | select('search', name ~ '|' ~ name | replace('_', '-')) | list -%}
{%-   set text = name ~ ': ' ~ (why or 'modprobe succeeded but it is not in /proc/modules') -%}
{%-   set text = text ~ ((' (kernel log: ' ~ lines[-5:] | join(' | ') ~ ')') if lines else '') -%}
{%-   if name == 'nvidia_peermem' and 'not found' not in why and no_ofed -%}
{%-     set text = text ~ '; ' ~ hint -%}
{%-   endif -%}
{%-   set ns.reasons = ns.reasons + [text] -%}
{%- endfor -%}
{{ failed | length }} module(s) did not load: {{ ns.reasons | join('; ') }}"""

# modprobe(8) and kernel messages as kmod and the kernel print them.
MODPROBE = [
    {'item': 'ib_umad', 'rc': 0, 'stdout': '', 'stderr': ''},
    {'item': 'nvidia_peermem', 'rc': 1, 'stdout': '', 'stderr': 'modprobe: ERROR: could not insert \'nvidia_peermem\': Invalid argument\n'},
    {'item': 'ib_ipoib', 'rc': 1, 'stdout': '', 'stderr': ''},
    {'item': 'bogus_mod', 'rc': 1, 'stderr': 'modprobe: FATAL: Module bogus_mod not found in directory /lib/modules/6.8.0-45-generic\n'},
]
KERNEL_LOG = '\n'.join(['[   12.345678] ib-umad: registering', '[   13.000001] nvidia_peermem: module init failed -22',
                        '[   13.5] mlx5_core 0000:17:00.0: something else'] + ['[ 14.%d] ib_umad: line %d' % (i, i) for i in range(7)])
HINT = 'this node has no MLNX OFED'


@pytest.mark.parametrize('failed', [['ib_umad'], ['nvidia_peermem', 'ib_ipoib'], ['bogus_mod', 'nvidia_peermem'], []])
@pytest.mark.parametrize('no_ofed', [False, True])
@pytest.mark.parametrize('log', [KERNEL_LOG, ''])
def test_modules_not_loaded_says_what_the_role_said(failed, no_ofed, log):
    old = _jinja(OLD_MODULES, failed=failed, results=MODPROBE, log_lines=log.splitlines(), no_ofed=no_ofed, hint=HINT)
    assert summary_filters.modules_not_loaded(failed, MODPROBE, log, HINT if no_ofed else None) == old


def test_modules_not_loaded_names_each_module_with_its_reason():
    message = _tasks.modules_not_loaded(['nvidia_peermem'], MODPROBE, KERNEL_LOG, HINT)
    assert message == ("1 module(s) did not load: nvidia_peermem: modprobe: ERROR: could not insert 'nvidia_peermem': Invalid argument"
                       ' (kernel log: [   13.000001] nvidia_peermem: module init failed -22); ' + HINT)
    with pytest.raises(AnsibleFilterError, match='list of module names'):
        summary_filters.modules_not_loaded('ib_umad', MODPROBE)


# roles/fabric_collective/tasks/main.yml before collective_skipped.
OLD_SKIPPED = """{{ 'check mode' if check
   else ('no node has a GPU' if counts | max < 1 else '') if launcher == 'local'
   else 'GPUs of several vendors (' ~ vendors | join(', ') ~ ') cannot run one collective job: '
        ~ 'run it per partition (--limit to the nodes of one vendor)' if vendors | length > 1
   else 'fewer than two nodes (launcher local runs the collective on each node over its own GPUs)'
        if counts | length < 2 else '' }}"""


@pytest.mark.parametrize('counts', [[0, 0], [8, 0], [8], [8, 8, 8]])
@pytest.mark.parametrize('launcher', ['local', 'mpirun', 'srun'])
@pytest.mark.parametrize('vendors', [[], ['nvidia'], ['amd', 'nvidia']])
@pytest.mark.parametrize('check', [False, True])
def test_collective_skipped_is_what_the_role_said(counts, launcher, vendors, check):
    old = _jinja(OLD_SKIPPED, check=check, counts=counts, launcher=launcher, vendors=vendors)
    hosts = ['n%d' % i for i in range(len(counts))]
    # The GPU counts are read for launcher local only (the role passes none otherwise).
    gpus = iter(counts) if launcher == 'local' else None
    assert collective_filters.collective_skipped(hosts, launcher, vendors, check, gpus) == old


def test_collective_skipped_wants_lists():
    with pytest.raises(AnsibleFilterError, match='GPU counts must be a list'):
        collective_filters.collective_skipped(['n1'], 'local', [], False, '8')
    with pytest.raises(AnsibleFilterError, match='nodes must be a list'):
        collective_filters.collective_skipped('n1', 'mpirun', [])


# roles/fabric_bench/tasks/main.yml before bench_plan_line.
OLD_PLAN = """{{ ('not run: ' ~ fleet.skipped) if fleet.skipped is not none else
   (test ~ ' ' ~ mode ~ ': ' ~ summary.rounds ~ ' round(s) of up to '
    ~ (summary.tests_per_round | max | default(0)) ~ ' concurrent tests over '
    ~ (fleet.nodes | length) ~ ' node(s), in ' ~ (memory | join(' and ')) ~ ' memory'
    ~ (' (check mode: no perftest is run)' if check else '')) }}{{
   ('; left out: ' ~ (fleet.excluded | dict2items | map(attribute='key') | zip(fleet.excluded.values())
    | map('join', ': ') | join('; '))) if fleet.excluded else '' }}"""


@pytest.mark.parametrize('fleet, summary', [
    ({'nodes': ['n1', 'n2', 'n3'], 'skipped': None, 'excluded': {}}, {'rounds': 3, 'tests_per_round': [2, 2, 1]}),
    ({'nodes': ['n1', 'n2'], 'skipped': None, 'excluded': {'n3': 'no HCA', 'n4': 'perftest not found'}}, {'rounds': 1, 'tests_per_round': []}),
    ({'nodes': ['n1'], 'skipped': 'fewer than two nodes can take part', 'excluded': {'n2': 'no HCA'}}, {'rounds': 0, 'tests_per_round': [0]}),
])
@pytest.mark.parametrize('memory', [['host'], ['host', 'gpu']])
@pytest.mark.parametrize('check', [False, True])
def test_bench_plan_line_is_what_the_role_said(fleet, summary, memory, check):
    env = jinja2.Environment()
    env.filters['dict2items'] = lambda value: [{'key': k, 'value': v} for k, v in value.items()]
    env.filters['zip'] = zip
    old = env.from_string(OLD_PLAN).render(fleet=fleet, summary=summary, test='ib_write_bw', mode='full', memory=memory, check=check)
    assert bench_filters.bench_plan_line(fleet, summary, 'ib_write_bw', 'full', memory, check) == old
    assert _bench.plan_line(fleet, summary, 'ib_write_bw', 'full', memory, check) == old
    with pytest.raises(AnsibleFilterError, match='fleet plan'):
        bench_filters.bench_plan_line(None, summary, 'ib_write_bw', 'full', memory)


def test_a_message_of_the_playbook_is_kept_whole():
    long = 'snapshot n1.tar.gz: 30 member(s) refused or changed: ' + '; '.join(['sys/x%d: refused (a device)' % i for i in range(200)])
    assert len(long) > 2000
    assert _tasks.failure_record(long, 'offline', 'Unpack each snapshot into its node root')['msg'] == long
    assert _tasks.failure_record({'msg': long}, 'offline')['msg'] == long[:1997].rsplit(' ', 1)[0] + '...'


def test_split_reason_names_the_slice_or_the_nodes_a_limit_leaves_out():
    hosts = ['n%d' % i for i in range(1, 15)]
    assert _tasks.split_reason(hosts, hosts) == ''
    assert _tasks.split_reason(hosts, hosts[:3], slices='1', limited=False) == ''    # no --limit: the run's nodes are all
    assert _tasks.split_reason(hosts, hosts, slices='1', limited=True) == ''          # a limit that keeps every node
    sliced = _tasks.split_reason(hosts, hosts, slices='2', number='1')
    assert sliced.startswith('this run is slice 1 of 2 of a sliced job (AWX job slicing), and the pair mesh')
    assert _tasks.split_reason(hosts, hosts, slices='2.0', number=2).startswith('this run is slice 2 of 2 ')
    assert _tasks.split_reason(hosts, hosts, slices='abc') == ''                       # as Jinja's | int: 0
    # Inventory order, ten named, the rest counted.
    limited = _tasks.split_reason(hosts, ['n1', 'n2'], limited=True)
    assert limited.startswith('--limit leaves out 12 node(s) of gpu_fabric_hosts (n3, n4, n5, n6, n7, n8, n9, n10, n11, n12, ...), ')
    assert 'n13' not in limited and limited.endswith('(a group or host pattern)')
