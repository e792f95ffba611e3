# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The GPUs' own state of a simulated node: what the renderer writes, and the nvidia-smi stand-in.

The state lives where only the stand-in reads it: $GF_SIM_ROOT/var/lib/gf-sim/gpu.json, written
from the profile's NVIDIA GPUs (its ``pci`` list, vendor 0x10de) and its ``gpu_state`` keys (the
faults of tests/sim/faults.py set them):

  gpu_state:
    processes: [{bdf, pid, name, used_mib, uid}]     # compute processes (nvidia-smi --query-compute-apps)
    clock_reasons: {bdf: [hw_slowdown, ...]}         # active clock event reasons (idle GPUs: gpu_idle)
    nvlink_inactive: {bdf: [3, 5]}                   # links printed '<inactive>'
    nvlink_errors: {bdf: {replay: n, recovery: n, crc: n}}
    remapped_rows_pending: [bdf]
    xid: [{bdf, xid, text}]                          # lines of the kernel log (dev/kmsg)

Output formats are the real tool's, as captured on 2 x H200 with driver 580.159.04
(tests/fixtures/real/h200x2/state/): ``--query-gpu=... --format=csv`` with its header and units
(nvsmi_query_gpu.txt), ``--query-compute-apps`` (nvsmi_apps_busy.txt), ``nvlink -s``
(nvsmi_nvlink_s.txt, '<inactive>' as in tests/fixtures/public/gpu_state/nvlink_s_azhpc_diagnostics_73_v100_inactive.txt),
``nvlink -e`` (nvsmi_nvlink_e.txt), an unknown field (nvsmi_query_bad.txt: rc 2). The kernel log
is dev/kmsg below the root, one /dev/kmsg record per line.

Usage: tools_gpu.py nvidia-smi ARGS...   (tests/sim/bin/nvidia-smi calls it)
"""

from __future__ import annotations

import hashlib
import json
import os
import sys

STATE = 'var/lib/gf-sim/gpu.json'
# Board names by PCI device id (nvidia-smi's 'name'); NVLinks of the SXM boards (18 on H100/H200:
# nvsmi_nvlink_s.txt) and their per-link rate.
MODELS = {0x2335: ('NVIDIA H200', 18, 26.562, 143771, 700.0), 0x2330: ('NVIDIA H100 80GB HBM3', 18, 26.562, 81559, 700.0)}
DEFAULT_MODEL = ('NVIDIA GPU', 0, None, 81559, 400.0)
# The field units of the real header (nvsmi_query_gpu.txt).
UNITS = {'power.draw': 'W', 'power.limit': 'W', 'enforced.power.limit': 'W', 'clocks.current.sm': 'MHz', 'clocks.max.sm': 'MHz',
         'clocks.current.memory': 'MHz', 'clocks.max.memory': 'MHz', 'utilization.gpu': '%', 'memory.used': 'MiB',
         'memory.total': 'MiB', 'used_memory': 'MiB'}
REASON_BITS = {'gpu_idle': 0x1, 'applications_clocks_setting': 0x2, 'sw_power_cap': 0x4, 'hw_slowdown': 0x8, 'sync_boost': 0x10,
               'sw_thermal_slowdown': 0x20, 'hw_thermal_slowdown': 0x40, 'hw_power_brake_slowdown': 0x80}
OLD, NEW = 'clocks_throttle_reasons.', 'clocks_event_reasons.'


def _uuid(hostname, bdf):
    digest = hashlib.sha1(('%s/%s' % (hostname, bdf)).encode()).hexdigest()
    return 'GPU-%s-%s-%s-%s-%s' % (digest[:8], digest[8:12], digest[12:16], digest[16:20], digest[20:32])


def _write(root, rel, content):
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, 'w') as handle:
        handle.write(content)


def render_gpu(root, profile):
    """Write the GPU state of ``profile`` for the stand-in and the kernel log (nothing on a node without NVIDIA GPUs)."""
    nvidia = [dev for dev in profile.get('pci', []) if dev.get('kind') == 'gpu' and int(dev.get('vendor', 0x10de)) == 0x10de]
    if not nvidia:
        return
    state = dict(profile.get('gpu_state') or {})
    hostname = profile.get('hostname', profile.get('name', 'node'))
    gpus = []
    for index, dev in enumerate(sorted(nvidia, key=lambda d: d['bdf'])):
        name, links, speed, memory, power = MODELS.get(int(dev.get('device', 0x2330)), DEFAULT_MODEL)
        gpus.append({'bdf': dev['bdf'], 'index': index, 'uuid': _uuid(hostname, dev['bdf']), 'name': name, 'links': links,
                     'speed': speed, 'memory_total': memory, 'power_limit': power})
    driver = (profile.get('nvidia_driver') or {}).get('version') or '580.159.04'
    _write(root, STATE, json.dumps({'driver': driver, 'gpus': gpus, 'state': state}, sort_keys=True))
    lines = ['6,%d,%d,-;NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  %s  Release Build  (nixbld@)' % (1000, 664940, driver)]
    for number, event in enumerate(state.get('xid') or []):
        bus = event['bdf'].rsplit('.', 1)[0]
        text = event.get('text') or 'pid=4242, name=python3'
        lines.append('3,%d,%d,-;NVRM: Xid (PCI:%s): %d, %s' % (2000 + number, 1843308145 + number, bus, int(event['xid']), text))
    _write(root, 'dev/kmsg', '\n'.join(lines) + '\n')
    for process in state.get('processes') or []:
        _write(root, 'proc/%d/status' % int(process['pid']), 'Name:\t%s\nState:\tR (running)\nPid:\t%d\nUid:\t%d\t%d\t%d\t%d\n' % (
            process['name'][:15], int(process['pid']), int(process.get('uid', 0)), int(process.get('uid', 0)),
            int(process.get('uid', 0)), int(process.get('uid', 0))))
    users = {0: 'root', 1000: 'alice', 1001: 'bob', 998: 'nvidia-dcgm'}
    _write(root, 'etc/passwd', ''.join('%s:x:%d:%d::/home/%s:/bin/sh\n' % (name, uid, uid, name) for uid, name in sorted(users.items())))


def _fmt(field, value):
    if value is None:
        return '[N/A]'
    unit = UNITS.get(field)
    return '%s %s' % (value, unit) if unit else str(value)


def _values(gpu, state):
    """{field: value} of one GPU as nvidia-smi prints them (its unit added by _fmt)."""
    bdf = gpu['bdf']
    busy = [p for p in state.get('processes') or [] if p['bdf'] == bdf]
    reasons = list((state.get('clock_reasons') or {}).get(bdf) or ([] if busy else ['gpu_idle']))
    held = [r for r in reasons if r != 'gpu_idle']
    mask = sum(REASON_BITS.get(r, 0) for r in reasons)
    used = sum(int(p.get('used_mib') or 0) for p in busy)
    sm = 1980 if busy and not held else 1200 if held else 345
    values = {
        'index': gpu['index'], 'pci.bus_id': '0000' + gpu['bdf'].upper(), 'uuid': gpu['uuid'],
        'name': gpu['name'], 'driver_version': None, 'vbios_version': '96.00.A5.00.1A', 'persistence_mode': 'Enabled',
        'compute_mode': 'Default', 'pstate': 'P0', 'temperature.gpu': 88 if 'hw_thermal_slowdown' in reasons else 56 if busy else 35,
        'power.draw': '%.2f' % (683.51 if busy else 80.12), 'power.limit': '%.2f' % gpu['power_limit'],
        'enforced.power.limit': '%.2f' % gpu['power_limit'], 'clocks.current.sm': sm, 'clocks.max.sm': 1980,
        'clocks.current.memory': 3201, 'clocks.max.memory': 3201, 'clocks_event_reasons.active': '0x%016x' % mask,
        'utilization.gpu': 100 if busy else 0, 'memory.used': used, 'memory.total': gpu['memory_total'],
        'ecc.errors.uncorrected.volatile.total': 0, 'retired_pages.pending': None,
        'remapped_rows.pending': 'Yes' if bdf in (state.get('remapped_rows_pending') or []) else 'No', 'remapped_rows.failure': 'No',
        'pcie.link.gen.current': 5, 'pcie.link.gen.max': 5, 'pcie.link.width.current': 16, 'pcie.link.width.max': 16,
    }
    for reason, _bit in REASON_BITS.items():
        values[NEW + reason] = 'Active' if reason in reasons else 'Not Active'
    return values


def query_gpu(data, fields, fmt):
    state = data['state']
    known = set(_values(data['gpus'][0], state)) | set(OLD + r for r in REASON_BITS) if data['gpus'] else set()
    for field in fields:
        if field not in known:
            return 2, 'Field "%s" is not a valid field to query.\n\n' % field, ''
    header = 'noheader' not in fmt
    units = 'nounits' not in fmt
    lines = []
    shown = [NEW + f[len(OLD):] if f.startswith(OLD) else f for f in fields]
    if header:
        lines.append(', '.join('%s [%s]' % (f, UNITS[f]) if units and f in UNITS else f for f in shown))
    for gpu in data['gpus']:
        values = _values(gpu, state)
        values['driver_version'] = data['driver']
        lines.append(', '.join(_fmt(f, values[f]) if units else ('[N/A]' if values[f] is None else str(values[f])) for f in shown))
    return 0, '\n'.join(lines) + '\n', ''


def query_apps(data, fields, fmt):
    by_bdf = dict((gpu['bdf'], gpu) for gpu in data['gpus'])
    names = {'used_memory': 'used_gpu_memory'}
    units = 'nounits' not in fmt
    lines = []
    if 'noheader' not in fmt:
        lines.append(', '.join('%s [MiB]' % names[f] if f == 'used_memory' and units else names.get(f, f) for f in fields))
    for process in data['state'].get('processes') or []:
        gpu = by_bdf.get(process['bdf'])
        if gpu is None:
            continue
        row = {'gpu_bus_id': '0000' + gpu['bdf'].upper(), 'gpu_uuid': gpu['uuid'], 'pid': process['pid'], 'process_name': process['name'],
               'used_memory': '%d MiB' % process['used_mib'] if units else str(process['used_mib'])}
        lines.append(', '.join(str(row.get(f, '[N/A]')) for f in fields))
    return 0, '\n'.join(lines) + '\n', ''


def nvlink(data, flag):
    state = data['state']
    lines = []
    for gpu in data['gpus']:
        lines.append('GPU %d: %s (UUID: %s)' % (gpu['index'], gpu['name'], gpu['uuid']))
        inactive = set((state.get('nvlink_inactive') or {}).get(gpu['bdf']) or [])
        errors = (state.get('nvlink_errors') or {}).get(gpu['bdf']) or {}
        for link in range(gpu['links']):
            if flag == '-s':
                lines.append('\t Link %d: %s' % (link, '<inactive>' if link in inactive else '%.3f GB/s' % gpu['speed']))
            else:
                # The counts of a fault on the GPU's first link.
                lines.append('\t Link %d: Replay Errors: %d' % (link, errors.get('replay', 0) if link == 0 else 0))
                lines.append('\t Link %d: Recovery Errors: %d' % (link, errors.get('recovery', 0) if link == 0 else 0))
                lines.append('\t Link %d: CRC Errors: %d' % (link, errors.get('crc', 0) if link == 0 else 0))
                lines.append('')
    return 0, '\n'.join(lines) + '\n', ''


def answer(root, argv):
    """(rc, stdout, stderr) of ``nvidia-smi ARGS`` on the simulated node at ``root``."""
    try:
        with open(os.path.join(root, STATE)) as handle:
            data = json.load(handle)
    except OSError:
        # The real tool where no driver answers (no NVIDIA GPU, driver not loaded).
        return 9, 'NVIDIA-SMI has failed because it couldn\'t communicate with the NVIDIA driver. ' \
                  'Make sure that the latest NVIDIA driver is installed and running.\n\n', ''
    args = list(argv)
    fmt = next((a.split('=', 1)[1] for a in args if a.startswith('--format=')), '')
    for arg in args:
        if arg.startswith('--query-gpu='):
            return query_gpu(data, arg.split('=', 1)[1].split(','), fmt)
        if arg.startswith('--query-compute-apps='):
            return query_apps(data, arg.split('=', 1)[1].split(','), fmt)
    if args[:1] == ['nvlink'] and args[1:2] in (['-s'], ['-e']):
        return nvlink(data, args[1])
    return 2, '', 'nvidia-smi (simulator stand-in): %s is not simulated\n' % ' '.join(args)


def read_facts(root, parts=('gpus', 'processes', 'nvlink', 'xid')):
    """gpu_fabric_gpu of the simulated node at ``root`` as gpu_state_facts reads it (the stand-in answered in-process)."""
    # Here, not at the top: the stand-in itself runs without the collection importable.
    from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _gpu_state  # pylint: disable=import-outside-toplevel
    from ansible_collections.hpc.gpu_fabric.plugins.module_utils._sysroot import SysRoot  # pylint: disable=import-outside-toplevel

    def run(argv):
        rc, out, err = answer(root, argv[1:])
        return out, err, None if rc == 0 else 'rc %d: %s' % (rc, (err or out).strip().splitlines()[-1][:200] if (err or out).strip() else '')

    sysroot = SysRoot(root)
    present = os.path.exists(os.path.join(root, STATE))

    def kernel_log():
        text = sysroot.text('dev/kmsg', quiet=True)
        return (text, None) if text is not None else ('', 'no kernel log below the root (dev/kmsg)')
    facts = _gpu_state.read_gpu_state(run, 'nvidia-smi' if present else None, sysroot, kernel_log, parts)
    facts['monitoring_agents'] = []
    return facts


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    root = os.environ.get('GF_SIM_ROOT')
    if not root or not os.path.isdir(root):
        sys.stderr.write('%s: GF_SIM_ROOT is not a simulated node root\n' % (argv[0] if argv else 'tools_gpu'))
        return 1
    rc, out, err = answer(root, argv[1:])
    sys.stdout.write(out)
    sys.stderr.write(err)
    return rc


if __name__ == '__main__':
    sys.exit(main())
