# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""module_utils/_rails.py: what role each RDMA device plays, and the position order, on nodes
the simulator renders (tests/sim/profiles) and read with the facts modules' own readers."""

from __future__ import annotations

import copy

import pytest

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _rails
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._ib import list_rdma_devices
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._sysroot import SysRoot
from tests.sim import node_facts


@pytest.fixture(scope='module')
def sim(tmp_path_factory):
    cache = {}

    def facts(profile, *faults, **kwargs):
        key = (profile, faults, tuple(kwargs.get('targets') or ()))
        if key not in cache:
            root = tmp_path_factory.mktemp('rails')
            cache[key] = (node_facts.read(root, profile, faults, targets=kwargs.get('targets')), str(root))
        return copy.deepcopy(cache[key][0]), cache[key][1]
    return facts


def roles_of(facts, ib_hca=None):
    return dict((name, entry['role']) for name, entry in _rails.roles(facts['ib'], facts['gdr'], ib_hca).items())


def test_position_order_is_pci_then_natural_name_never_text():
    names = ['mlx5_10', 'mlx5_2', 'mlx5_1', 'mlx5_11']
    assert sorted(names, key=_rails.position_key) == ['mlx5_1', 'mlx5_2', 'mlx5_10', 'mlx5_11']
    devices = [{'name': 'mlx5_0', 'pci_address': '0000:e1:00.0'}, {'name': 'mlx5_10', 'pci_address': '0000:1b:00.0'},
               {'name': 'mlx5_2', 'pci_address': '0000:1b:00.1'}, {'name': 'rxe0'}, {'name': 'mlx5_9', 'pci_address': '10000:01:00.0'}]
    # Bus 1b before e1 whatever the names; a VMD domain (5 hex digits) after domain 0000; no address last.
    assert [d['name'] for d in _rails.ordered(devices)] == ['mlx5_10', 'mlx5_2', 'mlx5_0', 'mlx5_9', 'rxe0']


@pytest.mark.parametrize('value, name, selected', [
    ('mlx5_1', 'mlx5_10', True),           # a prefix: NCCL's matchIfList without '='
    ('=mlx5_1', 'mlx5_10', False),         # exact names
    ('=mlx5_0:1,mlx5_1:1', 'mlx5_1', True),
    ('^mlx5_8', 'mlx5_8', False),          # excluded
    ('^mlx5_8', 'mlx5_0', True),
    ('^=mlx5_1', 'mlx5_10', True),
    ('', 'mlx5_0', None), (None, 'mlx5_0', None),
])
def test_nccl_ib_hca_selects_as_nccl_does(value, name, selected):
    assert _rails.ib_hca_selects(value, name) is selected


def test_rdma_devices_listed_by_position_with_twelve_hcas(sim):
    facts, root = sim('nvidia_h100_8x_ndr_12hca')
    listed = list_rdma_devices(SysRoot(root))
    # Text order would be mlx5_0, mlx5_1, mlx5_10, mlx5_11, mlx5_2, ...
    assert [name for name, _pci in listed] == ['mlx5_%d' % i for i in range(12)]
    assert [d['name'] for d in facts['ib']['devices']] == ['mlx5_%d' % i for i in range(12)]
    assert [n['name'] for n in facts['gdr']['nics']] == ['mlx5_%d' % i for i in range(12)]


def test_extra_storage_card_and_management_port_are_no_rails(sim):
    storage = roles_of(sim('nvidia_h100_8x_ndr_storage')[0])
    assert [n for n, r in storage.items() if r == 'compute'] == ['mlx5_%d' % i for i in range(8)]
    # The BlueField-3 carries the default route: management; the ConnectX-6 Dx near no GPU: storage.
    assert (storage['mlx5_8'], storage['mlx5_9'], storage['mlx5_10']) == ('management', 'storage', 'storage')
    twelve = sim('nvidia_h100_8x_ndr_12hca')[0]
    assert _rails.compute(twelve['ib'], twelve['gdr']) == ['mlx5_%d' % i for i in range(2, 10)]
    assert roles_of(twelve)['mlx5_0'] == 'storage' and roles_of(twelve)['mlx5_11'] == 'storage'
    management = _rails.roles(*[sim('amd_mi300x_roce_mgmt')[0][k] for k in ('ib', 'gdr')])
    assert management['mlx5_8']['role'] == 'management' and 'eno8303 carries the default route' in management['mlx5_8']['why']
    assert management['mlx5_8']['gpu_distance'] in ('NODE', 'SYS')
    assert all(management['mlx5_%d' % i]['role'] == 'compute' for i in range(8))


def test_nccl_ib_hca_decides_where_it_selects_something(sim):
    facts = sim('amd_mi300x_roce_mgmt')[0]
    assert roles_of(facts, '=mlx5_0:1,mlx5_1:1')['mlx5_2'] == 'storage'
    assert roles_of(facts, '=mlx5_0:1,mlx5_1:1')['mlx5_1'] == 'compute'
    assert roles_of(facts, '^mlx5_8')['mlx5_8'] == 'management' and roles_of(facts, '^mlx5_8')['mlx5_7'] == 'compute'
    # A value that selects none of this node's devices (another node's names) is not used.
    assert roles_of(facts, '=ib_rail0') == roles_of(facts)


@pytest.mark.parametrize('fault', ['cross_numa', 'rate_degraded_1x', 'port_down'])
def test_a_faulty_rail_stays_a_rail(sim, fault):
    # The role comes from the model, which a fault cannot change: a rail in the wrong slot, trained
    # down or down is still a compute rail (and its own rule names the fault).
    facts = sim('nvidia_h100_8x_ndr', fault, targets=['mlx5_3'])[0]
    assert roles_of(facts)['mlx5_3'] == 'compute'
    assert _rails.compute(facts['ib'], facts['gdr']) == ['mlx5_%d' % i for i in range(8)]


def test_without_gpus_or_model_every_device_by_rate():
    ib = {'devices': [{'name': 'mlx5_0', 'ports': [{'rate_gbps': 400.0}]}, {'name': 'mlx5_1', 'ports': [{'rate_gbps': 100.0}]}]}
    # No GPU: the topology cannot tell; every device is a rail.
    assert set(e['role'] for e in _rails.roles(ib, {'gpus': []}).values()) == set(['compute'])
    gdr = {'gpus': [{'name': 'GPU0'}], 'topology': [
        {'gpu': 'GPU0', 'nic': 'mlx5_0', 'distance': 'PIX'}, {'gpu': 'GPU0', 'nic': 'mlx5_1', 'distance': 'SYS'}]}
    # No model: the rails' full rate decides, and the slower NIC near no GPU is not a rail.
    found = _rails.roles(ib, gdr)
    assert found['mlx5_0']['role'] == 'compute' and found['mlx5_1']['role'] == 'storage'
    assert 'model unknown' in found['mlx5_1']['why']
