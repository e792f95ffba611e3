# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Run time of the fabric discovery and analysis, on the simulated pod and on
synthetic topologies up to 2,000 nodes, with the controller's peak memory.

Per topology (tests/sim/fabric.py model; 8 rails per node):
  discover_s     ib_fabric_facts' own discover() over the stand-ins' outputs, in-process
                 (formatting and parsing iblinkinfo, ibnetdiscover, sminfo and two perfquery
                 reads of every switch; the tools' own fabric walk is not simulated);
  stand_ins_s    the same tools run as processes (the pod only: the module's real path);
  analysis_s     the controller's _diagnose.diagnose() over every node's facts and the fabric;
  peak_mib       tracemalloc peak of the analysis (the facts of all nodes held in memory);
  links          links in the topology.
``extrapolated`` fits time and memory per node over the synthetic sizes (least squares through
the measured points) and states the 2,000-node figures against the measured ones.

Usage: python -m tests.bench.fabric_scale [--sizes 250,500,1000,2000]   (prints JSON)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import tracemalloc

from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis import _diagnose
from tests.bench import diagnosis_accuracy
from tests.sim import fabric as sim_fabric, tools_ibdiags

SIM_BIN = os.path.join(os.path.dirname(os.path.abspath(sim_fabric.__file__)), 'bin')


def measure(base, nodes, leaves, spines, uplinks, processes=False):
    model = sim_fabric.model(nodes=nodes, rails=8, leaves=leaves, spines=spines, uplinks_per_spine=uplinks)
    with tempfile.TemporaryDirectory(prefix='gf-scale-') as directory:
        path = sim_fabric.write(model, os.path.join(directory, 'fabric.json'))
        started = time.perf_counter()
        facts = tools_ibdiags.fabric_facts(path, [1], interval=0.001)
        discover_s = time.perf_counter() - started
        stand_ins_s = None
        if processes:
            env = dict(os.environ, GF_SIM_FABRIC=path, GF_SIM_PYTHON=sys.executable)
            started = time.perf_counter()
            calls = [['iblinkinfo'], ['ibnetdiscover'], ['sminfo'], ['saquery', 'SMIR']]
            calls += [['perfquery', '-x', '-l', str(s['lid'])] for s in model['switches'].values()] * 2
            for call in calls:
                subprocess.run([os.path.join(SIM_BIN, call[0])] + call[1:], env=env, capture_output=True, check=False)
            stand_ins_s = time.perf_counter() - started
    # The controller holds every node's facts and the fabric's: traced from here.
    tracemalloc.start()
    hosts = dict((name, sim_fabric.node_facts(model, base, name)) for name in model['hosts'])
    hosts[sorted(hosts)[0]]['fabric'] = facts
    started = time.perf_counter()
    found = _diagnose.diagnose(hosts)
    analysis_s = time.perf_counter() - started
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return {'nodes': nodes, 'switches': len(model['switches']), 'links': len(model['links']),
            'discover_s': round(discover_s, 3), 'stand_ins_s': round(stand_ins_s, 3) if stand_ins_s is not None else None,
            'analysis_s': round(analysis_s, 3), 'peak_mib': round(peak / 2.0 ** 20, 1),
            'findings_above_info': len([f for f in found if f['severity'] != 'info'])}


def _fit(points):
    """Least-squares line y = a + b*x."""
    n = float(len(points))
    mx = sum(x for x, _y in points) / n
    my = sum(y for _x, y in points) / n
    var = sum((x - mx) ** 2 for x, _y in points)
    slope = sum((x - mx) * (y - my) for x, y in points) / var if var else 0.0
    return my - slope * mx, slope


def run(sizes=(250, 500, 1000, 2000)):
    base = diagnosis_accuracy.node_facts('nvidia_h100_8x_ndr')
    pod = measure(base, 16, 4, 2, 4, processes=True)
    synthetic = [measure(base, n, 8, 8, max(4, n // 64)) for n in sizes]
    fits = {}
    for field in ('discover_s', 'analysis_s', 'peak_mib'):
        intercept, slope = _fit([(r['nodes'], r[field]) for r in synthetic[:-1]] or [(0, 0), (1, 0)])
        fits[field] = {'per_1000_nodes': round(slope * 1000, 3), 'predicted_2000': round(intercept + slope * 2000, 3),
                       'measured_2000': [r[field] for r in synthetic if r['nodes'] == 2000][0] if 2000 in sizes else None}
    return {'pod': pod, 'synthetic': synthetic, 'extrapolated': fits,
            'note': 'synthetic topologies: 8 rails per node on 8 leaf groups and 8 spines (switch radix not modelled; '
                    'the work grows with ports and links); the fit uses the sizes below 2,000 and is checked against the '
                    'measured 2,000-node run'}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n', 1)[0])
    parser.add_argument('--sizes', default='250,500,1000,2000')
    args = parser.parse_args(argv)
    print(json.dumps(run(tuple(int(s) for s in args.sizes.split(','))), indent=1))
    return 0


if __name__ == '__main__':
    sys.exit(main())
