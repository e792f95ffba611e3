# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The registry of finding codes is the one owner: what the rules produce, what the docs list."""

from __future__ import annotations

import os
import re

import pytest

from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis import _findings
from tests import docs_table

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
PLUGINS = os.path.join(REPO, 'plugins')
# The files whose rules make findings.
RULES = ('plugins/plugin_utils/diagnosis/rules/_node.py', 'plugins/plugin_utils/diagnosis/rules/_bench.py',
         'plugins/plugin_utils/diagnosis/rules/_window.py',
         'plugins/plugin_utils/diagnosis/rules/_collective.py', 'plugins/plugin_utils/diagnosis/rules/_run.py',
         # Pair symptoms no root explains, said once on their device.
         'plugins/plugin_utils/diagnosis/_linker.py', 'plugins/plugin_utils/diagnosis/_fleet.py',
         'plugins/plugin_utils/diagnosis/_fabric.py',
         # Culprit search (group testing): culprits, bad pairs, unresolved nodes.
         'plugins/plugin_utils/diagnosis/_search_findings.py',
         # RoCE lossless.
         'plugins/plugin_utils/diagnosis/_roce_rules.py',
         # PCIe links and the IOMMU.
         'plugins/plugin_utils/diagnosis/_pcie_rules.py',
         # NCCL's settings.
         'plugins/plugin_utils/diagnosis/rules/_nccl_settings.py',
         # The GPUs' own state.
         'plugins/plugin_utils/diagnosis/rules/_gpu.py',
         # A slow node no root explains, against its peers or its baseline.
         'plugins/plugin_utils/diagnosis/rules/_differential.py',
         # RDMA functions without an RDMA device, the expected inventory.
         'plugins/plugin_utils/diagnosis/_inventory.py')
CODE_LITERAL = re.compile(r"""['"]((?:IB|ROCE|MTU|FLEET|GDR|GPU|HOST|RUN|BENCH|COLLECTIVE|FABRIC|PCIE|INVENTORY|RDMA|NODE|BASELINE)_[A-Z0-9_]+)['"]""")
CODE_CONSTANT = re.compile(r'\b(?:F|_findings)\.([A-Z][A-Z0-9_]+)\b')


def _sources():
    for top, _dirs, files in os.walk(PLUGINS):
        for name in files:
            if name.endswith('.py') and name != '_findings.py':
                path = os.path.join(top, name)
                with open(path, encoding='utf-8') as handle:
                    yield os.path.relpath(path, REPO), handle.read()


def test_every_code_in_the_source_is_registered():
    used = set()
    for path, text in _sources():
        for code in CODE_LITERAL.findall(text) + [c for c in CODE_CONSTANT.findall(text)
                                                  if c not in ('EXPLAINS', 'REGISTRY', 'PEER_BLOCKER_CODES')]:
            used.add((path, code))
    unknown = sorted((path, code) for path, code in used if code not in _findings.REGISTRY)
    assert unknown == []


def test_every_registered_code_is_produced_by_a_rule():
    produced = set()
    for path, text in _sources():
        if path in RULES:
            produced.update(CODE_LITERAL.findall(text))
            produced.update(CODE_CONSTANT.findall(text))
            if 'PEER_BLOCKER_CODES' in text:
                # A node's peer-memory blocker kind (_gdr.peer_verdict), named by the registry's table.
                produced.update(_findings.PEER_BLOCKER_CODES.values())
    assert sorted(set(_findings.REGISTRY) - produced) == []


def test_explains_names_registered_codes_only():
    for root, entry in _findings.REGISTRY.items():
        assert set(entry.explains) <= set(_findings.REGISTRY), root
        assert root not in entry.explains


def test_docs_table_is_the_registry():
    with open(docs_table.DOC, encoding='utf-8') as handle:
        text = handle.read()
    assert docs_table.rendered(text) == text, 'run: PYTHONPATH=.collections python -m tests.docs_table'


def test_finding_takes_layer_severity_and_remedy_from_the_registry():
    item = _findings.finding(_findings.IB_PORT_DOWN, 'n1', 'mlx5_0/1', {}, 'down', device='mlx5_0', at=[('hca', 'n1', 'mlx5_0')])
    assert (item['layer'], item['severity'], item['id']) == ('ib', 'error', 'IB_PORT_DOWN@n1/mlx5_0/1')
    assert 'ibstat mlx5_0' in item['remedy']
    low = _findings.finding(_findings.BENCH_GPU_MEMORY_LOW, None, 'a->b', {}, 'far', severity='info', remedy='no_gpu_near')
    assert low['severity'] == 'info' and low['remedy'].startswith('leave this HCA out')


@pytest.mark.parametrize('code, kwargs, words', [
    ('NOT_A_CODE', {}, 'not registered'),
    ('IB_PORT_DOWN', {'severity': 'warning'}, 'severity'),     # error, or info on a storage or management port
    ('IB_PORT_DOWN', {'layer': 'collective'}, 'layer'),
    ('GPU_NIC_FAR', {'remedy': 'nope'}, 'remedy'),
])
def test_finding_refuses_what_the_registry_does_not_know(code, kwargs, words):
    with pytest.raises(ValueError, match=words):
        _findings.finding(code, 'n1', 's', {}, 'cause', device='d', **kwargs)
