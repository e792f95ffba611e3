# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Diagnosis: pure rules over every host's facts and the benchmark results -> findings.

Bottom-up, the order in which a slow cross-node collective is debugged: the IB layer (ports, rates, counters, MTU, RoCE GIDs), then
IB+GPU (peer memory and why, ACS, NUMA), then what the benchmarks measured (pairs, GPU vs
host memory, the collective). A finding (docs/report.md, findings[]): code, layer, severity, host, subject,
evidence, cause, remedy. A higher-layer finding that a lower-layer one on the same host
explains gets ``explained_by`` (that finding's id): the report shows the roots, each with
the symptoms it causes, not twenty symptoms.

The rules live in rules/ and in the layer modules (_fleet.py, _fabric.py, _roce_rules.py,
_pcie_rules.py, _search_findings.py), each declared with what it produces and reads (_rule.py);
the engine (_engine.py) orders and runs them; the linker (_linker.py) links causes. This module
is the entry point its callers use.
"""

from __future__ import annotations

from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis._engine import diagnose
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis._findings import LAYERS
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis._linker import (
    PAIR_SYMPTOMS, collective_path, complete_paths, link_causes, unexplained_findings)
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis.rules._bench import bench_findings, pair_path, pair_subject
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis.rules._collective import collective_findings, local_collective_findings
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis.rules._node import (
    MEMLOCK_NEEDED_BYTES, gdr_findings, gpu_net_path, host_findings, ib_findings, mtu_findings)

__all__ = ('LAYERS', 'MEMLOCK_NEEDED_BYTES', 'PAIR_SYMPTOMS', 'bench_findings', 'collective_findings', 'collective_path',
           'complete_paths', 'diagnose', 'gdr_findings', 'gpu_net_path', 'host_findings', 'ib_findings', 'link_causes',
           'local_collective_findings', 'mtu_findings', 'pair_path', 'pair_subject', 'unexplained_findings')
