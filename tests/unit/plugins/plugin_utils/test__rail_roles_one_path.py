# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""One decision of what a compute rail is (module_utils/_rails.py node_roles), used by every rule
that depends on it: a port down, the devices a collective went through, the benchmark's rails,
the NCCL recommendation and the fleet comparison's places. The nodes are tests/sim profiles read
with the facts modules' readers (tests/sim/node_facts.py)."""

from __future__ import annotations

import copy

import pytest

from ansible_collections.hpc.gpu_fabric.plugins.filter.fabric_bench import bench_node_plan
from ansible_collections.hpc.gpu_fabric.plugins.filter.report import fabric_report
from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _rails
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis import _findings as F
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis import _diagnose, _fleet
from tests.sim import node_facts


@pytest.fixture(scope='module')
def sim(tmp_path_factory):
    cache = {}

    def facts(profile, *faults, **kwargs):
        key = (profile, faults, tuple(kwargs.get('targets') or ()))
        if key not in cache:
            cache[key] = node_facts.read(tmp_path_factory.mktemp('roles'), profile, faults, targets=kwargs.get('targets'))
        return copy.deepcopy(cache[key])
    return facts


def above_info(found):
    return sorted((f['code'], f['host'], f['subject']) for f in found if f['severity'] != 'info')


# ---------------------------------------------------------------------------- a port down

def test_storage_cards_uncabled_second_port_is_info(sim):
    # The dual-port 100GbE storage card with its second port (mlx5_10) without a link partner.
    node = sim('nvidia_h100_8x_ndr_storage', 'port_polling', targets=['mlx5_10'])
    assert [(p['state'], p['phys_state']) for d in node['ib']['devices'] if d['name'] == 'mlx5_10' for p in d['ports']] \
        == [('DOWN', 'Polling')]
    found = _diagnose.diagnose({'n': node})
    assert above_info(found) == []
    down = [f for f in found if f['code'] == F.IB_PORT_DOWN]
    assert [(f['subject'], f['severity']) for f in down] == [('mlx5_10/1', 'info')]
    assert down[0]['evidence']['role'] == 'storage' and 'not a compute rail' in down[0]['cause']
    assert down[0]['at'] == [['hca', 'n', 'mlx5_10']]
    # In a fleet of plain nodes and healthy storage nodes: still nothing above info.
    nodes = {'h1': sim('nvidia_h100_8x_ndr'), 'h2': sim('nvidia_h100_8x_ndr_storage'), 'h3': sim('nvidia_h100_8x_ndr_storage'),
             'h4': node}
    assert above_info(_diagnose.diagnose(nodes)) == []


def test_compute_rail_down_is_still_an_error(sim):
    node = sim('nvidia_h100_8x_ndr_storage', 'port_polling', targets=['mlx5_3'])
    found = [f for f in _diagnose.diagnose({'n': node}) if f['code'] == F.IB_PORT_DOWN]
    assert [(f['subject'], f['severity']) for f in found] == [('mlx5_3/1', 'error')]
    assert 'not a compute rail' not in found[0]['cause']


def test_port_down_by_role_alone():
    ib = {'devices': [{'name': 'mlx5_9', 'hca_type': 'MT4125', 'ports': [
        {'port': 1, 'state': 'DOWN', 'phys_state': 'Disabled', 'link_layer': 'Ethernet', 'rate_gbps': 40.0}]}]}
    assert [f['severity'] for f in _diagnose.ib_findings('n', ib, {'mlx5_9': {'role': 'management', 'why': 'x'}})] == ['info']
    assert [f['severity'] for f in _diagnose.ib_findings('n', ib)] == ['error']      # no roles: every device a rail


def test_port_down_info_is_registered():
    assert 'info' in F.REGISTRY[F.IB_PORT_DOWN].other
    for code in (F.IB_PORT_DOWN, F.ROCE_NO_V2_GID, F.ROCE_QOS_UNKNOWN):
        # User-facing text describes the rule, it names no source file.
        assert '.py' not in ' '.join(F.REGISTRY[code].other.values()), code


# ---------------------------------------------------------------------------- the collective's path

def test_collective_path_without_nccl_hcas_is_the_compute_rails(sim):
    node = sim('nvidia_h100_8x_ndr_storage')
    hcas = [place[2] for place in _diagnose.collective_path('n', node) if place[0] == 'hca']
    assert hcas == ['mlx5_%d' % i for i in range(8)]
    # The HCAs NCCL names are the path, whatever their role.
    assert [p[2] for p in _diagnose.collective_path('n', node, ['mlx5_9']) if p[0] == 'hca'] == ['mlx5_9']
    # A culprit whose run named no HCA: a storage port's root does not explain it.
    culprit = {'code': F.COLLECTIVE_CULPRIT, 'host': 'n', 'path': [], 'evidence': {}}
    roles = {'n': _rails.node_roles(node)}
    _diagnose.complete_paths([culprit], {'n': node}, collective={'fleet': {'transport': {}}}, roles=roles)
    assert ['hca', 'n', 'mlx5_9'] not in culprit['path'] and ['hca', 'n', 'mlx5_10'] not in culprit['path']
    assert ['hca', 'n', 'mlx5_7'] in culprit['path']


# ---------------------------------------------------------------------------- one compute set

def test_nccl_ib_hca_gives_the_same_compute_rails_to_bench_recommendation_and_diagnosis(sim):
    node = sim('nvidia_h100_8x_ndr_storage')
    # mlx5_3 is rail-like (the rails' model, near a GPU) but the job's NCCL_IB_HCA leaves it out.
    env = {'NCCL_IB_HCA': '=mlx5_0,mlx5_1,mlx5_2,mlx5_4,mlx5_5,mlx5_6,mlx5_7'}
    wanted = ['mlx5_0', 'mlx5_1', 'mlx5_2', 'mlx5_4', 'mlx5_5', 'mlx5_6', 'mlx5_7']
    # The benchmark's rails, as role fabric_bench passes the settings (and as a plain string).
    assert bench_node_plan(node['ib'], node['gdr'], [], [env, {}])['hcas'] == wanted
    assert bench_node_plan(node['ib'], node['gdr'], [], [{}, env])['hcas'] == wanted
    assert bench_node_plan(node['ib'], node['gdr'], [], env['NCCL_IB_HCA'])['hcas'] == wanted
    assert bench_node_plan(node['ib'], node['gdr'], [], [{}, {}])['hcas'] == wanted[:3] + ['mlx5_3'] + wanted[3:]

    def report(target, **hv):
        facts = {'gpu_fabric_ib': target['ib'], 'gpu_fabric_gdr': target['gdr']}
        return fabric_report({'n': dict(hv, ansible_facts=facts)}, ['n'])

    def recommended(built):
        value = built['hosts']['n']['nccl']['settings']['NCCL_IB_HCA']
        return [entry.split(':')[0] for entry in value.lstrip('=').split(',')]
    # The NCCL recommendation of the report, from the same hostvars.
    assert recommended(report(node, fabric_collective_env=env)) == wanted
    assert recommended(report(node, nccl_conf_overrides=env)) == wanted
    assert recommended(report(node)) == wanted[:3] + ['mlx5_3'] + wanted[3:]
    # The diagnosis: mlx5_3 down is not a compute rail's fault there either.
    down = sim('nvidia_h100_8x_ndr_storage', 'port_polling', targets=['mlx5_3'])
    found = [f for f in report(down, fabric_collective_env=env)['findings'] if f['code'] == F.IB_PORT_DOWN]
    assert [(f['subject'], f['severity'], f['evidence']['role']) for f in found] == [('mlx5_3/1', 'info', 'storage')]
    # Without the setting, mlx5_3 is a rail (and down: an error).
    assert [f['severity'] for f in report(down)['findings'] if f['code'] == F.IB_PORT_DOWN] == ['error']


# ---------------------------------------------------------------------------- fleet places

def test_fleet_places_of_rails_and_model_name_only_compute_rails(sim):
    node = sim('nvidia_h100_8x_ndr_storage')
    ctx = {'roles': {'n': _rails.node_roles(node)}}
    # A model no peer has: the compute rails, never the storage card of another model.
    places = _fleet._places('hca_model', 'n', node, ('MT4129',), ('MT4123',), ctx)
    assert places == [('hca', 'n', 'mlx5_%d' % i) for i in range(8)]
    # Rails: more 100 GbE Ethernet ports than the peers - none of them a compute rail: the node.
    assert _fleet._places('rails', 'n', node, (('Ethernet', 100.0),) * 2, (), ctx) == [('node', 'n')]
    assert _fleet._places('rails', 'n', node, (('InfiniBand', 400.0),) * 8, (), ctx) == [('hca', 'n', 'mlx5_%d' % i) for i in range(8)]
