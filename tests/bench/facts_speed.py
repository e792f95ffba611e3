# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""How long ib_link_facts + gdr_facts take on the 8-GPU / 8-HCA profile.

Target (issue: foundation): under 150 ms of module time together, no external
tool spawned on the default path. Three figures per run:

  readers   - the module_utils work both modules do, in-process (median, min);
  main()    - both modules' main() in-process, argument parsing and JSON out included;
  process   - each module file executed by a fresh interpreter with a JSON args
              file, as Ansible runs it on the node after unpacking, minus nothing:
              interpreter start and `import ansible.module_utils.basic` included
              (shown separately as the import baseline).

Usage: python -m tests.bench.facts_speed [PROFILE] [--runs N]
Needs ansible_collections.hpc.gpu_fabric importable (scripts/test.sh sets PYTHONPATH).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import redirect_stdout

from tests.sim import render


def _timed(func, runs):
    samples = []
    for _run in range(runs):
        start = time.perf_counter()
        func()
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples), min(samples)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n', 1)[0])
    parser.add_argument('profile', nargs='?', default='nvidia_h100_8x_ndr')
    parser.add_argument('--runs', type=int, default=20)
    args = parser.parse_args(argv)

    from ansible.module_utils import basic
    from ansible_collections.hpc.gpu_fabric.plugins.module_utils._gdr import read_gdr
    from ansible_collections.hpc.gpu_fabric.plugins.module_utils._ib import list_rdma_devices, read_ib
    from ansible_collections.hpc.gpu_fabric.plugins.module_utils._sysroot import SysRoot
    from ansible_collections.hpc.gpu_fabric.plugins.modules import gdr_facts, ib_link_facts
    from tests.unit.plugins.modules.utils import patch_module_args

    work = tempfile.mkdtemp(prefix='gf-bench-')
    root = os.path.join(work, 'root')
    render.render(render.load_profile(args.profile), root)

    def readers():
        sysroot = SysRoot(root)
        read_ib(sysroot)
        read_gdr(sysroot, list_rdma_devices(sysroot))

    def mains():
        for module in (ib_link_facts, gdr_facts):
            with patch_module_args({'root': root}), redirect_stdout(io.StringIO()):
                try:
                    module.main()
                except SystemExit:
                    pass

    # No external tool on the default path: any attempt to spawn one fails the benchmark.
    def refuse(*_args, **_kwargs):
        raise AssertionError('an external command was spawned')
    saved = (subprocess.Popen, basic.AnsibleModule.run_command)
    subprocess.Popen = refuse
    basic.AnsibleModule.run_command = refuse
    try:
        reader_ms = _timed(readers, args.runs)
        main_ms = _timed(mains, args.runs)
    finally:
        subprocess.Popen, basic.AnsibleModule.run_command = saved

    args_file = os.path.join(work, 'args.json')
    with open(args_file, 'w') as handle:
        json.dump({'ANSIBLE_MODULE_ARGS': {'root': root}}, handle)
    env = dict(os.environ)
    modules_dir = os.path.dirname(ib_link_facts.__file__)

    def processes():
        for name in ('ib_link_facts', 'gdr_facts'):
            subprocess.run([sys.executable, os.path.join(modules_dir, name + '.py'), args_file],
                           env=env, check=True, capture_output=True)

    def import_baseline():
        for _run in range(2):
            subprocess.run([sys.executable, '-c', 'import ansible.module_utils.basic'], env=env, check=True)

    process_ms = _timed(processes, max(3, args.runs // 4))
    baseline_ms = _timed(import_baseline, max(3, args.runs // 4))
    result = {
        'profile': args.profile,
        'readers_ms': {'median': round(reader_ms[0], 1), 'min': round(reader_ms[1], 1)},
        'main_both_ms': {'median': round(main_ms[0], 1), 'min': round(main_ms[1], 1)},
        'process_both_ms': {'median': round(process_ms[0], 1), 'min': round(process_ms[1], 1)},
        'interpreter_and_import_baseline_both_ms': {'median': round(baseline_ms[0], 1)},
        'external_tools_spawned': 0,
    }
    print(json.dumps(result, indent=2))
    return 0


if __name__ == '__main__':
    sys.exit(main())
