# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The facts play at scale: validate_fabric.yml without the benchmark (validate, then the report)
over N simulated nodes (tests/sim, local connection, profile nvidia_h100_8x_ndr), with the memory of
ansible-playbook and its forks (tests/bench/tree_memory.py).

The nodes' modules run on this machine too (local connection): the wall time holds their work as
well as the controller's, on the machine's cores; peak_pss_matched_mib is ansible-playbook and its
forks only, peak_pss_mib everything (the modules included). The fabric discovery is off (the
simulated nodes share no fabric). Prints one JSON line per size.

Usage: python -m tests.bench.facts_play_scale [--nodes 100 300] [--forks 50]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile

import yaml

from tests.bench import tree_memory
from tests.sim import cluster

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def measure(count, forks, profile='nvidia_h100_8x_ndr'):
    work = tempfile.mkdtemp(prefix='gf-facts-scale-')
    try:
        spec = {'nodes': [{'name': 'g%04d' % index, 'profile': profile} for index in range(count)]}
        inventory = cluster.build(spec, work, 'local', python=sys.executable)
        with open(os.path.join(work, 'inventory.yml'), 'w') as handle:
            yaml.safe_dump(inventory, handle)
        argv = [os.path.join(os.path.dirname(sys.executable), 'ansible-playbook'), os.path.join(REPO, 'validate_fabric.yml'),
                '-i', os.path.join(work, 'inventory.yml'), '-e', 'gpu_fabric_hosts=gpu_nodes',
                '-e', 'gpu_fabric_output_dir=' + os.path.join(work, 'out'), '-e', 'gpu_fabric_discover_fabric=false']
        saved = dict(os.environ)
        os.environ.update(ANSIBLE_FORKS=str(forks), ANSIBLE_NOCOLOR='1')
        try:
            with open(os.devnull, 'w') as quiet:
                row = tree_memory.measure(argv, 0.5, 'ansible-playbook', stdout=quiet, cwd=REPO)
        finally:
            os.environ.clear()
            os.environ.update(saved)
        row.update(nodes=count, forks=forks)
        return row
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n', 1)[0])
    parser.add_argument('--nodes', type=int, nargs='+', default=[100, 300])
    parser.add_argument('--forks', type=int, default=50)
    args = parser.parse_args(argv)
    for count in args.nodes:
        print(json.dumps(measure(count, args.forks)), flush=True)
    return 0


if __name__ == '__main__':
    sys.exit(main())
