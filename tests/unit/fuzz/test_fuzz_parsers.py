# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Fuzzing every text and JSON parser: no input makes one raise, none takes a second.

Inputs: the captured outputs under tests/fixtures (public, real, seeds), each damaged by
_mutate.mutate (byte flips, lines dropped, duplicated, swapped or glued, truncation, numbers
replaced by 400 or 5000 digits, 1e999, nan, superscript digits, NUL, non-UTF-8 and ANSI
bytes, launcher and quote prefixes, runs of up to 4,096 blanks, tabs, digits or dots inside a
line), some random bytes, and hypothesis' own text and JSON. A parser may answer with a
failure structure; it may not raise. COVERED lists every public parse_* function and file
reader of module_utils and plugin_utils with the entry that runs it, and a test checks the
list against the modules.

Figures (this 2-core machine, python 3.11, ansible-core 2.19; the fuzz directory alone:
``pytest tests/unit/fuzz -p no:cacheprovider``, 35 s wall with test_fuzz_readers):
10,000 seeded inputs per parser, each parser a test (nccl text with outcome, nccl -J JSON
and parse_any/merge by bytes, perftest parse/summarize/outcome, /proc/net/tcp, ibv_devinfo,
sysfs values, host files, gdr/pci values), 10,000 structure mutations of a real -J document,
300 hypothesis JSON documents and 200 hypothesis texts per parser: this file about 19 s. The
slowest single input took 0.11 s (nccl -J bytes: a document whose lines were duplicated into
a long text, read as text), every other parser's under 0.03 s. Found with it and fixed: _nccl
header, device-line and out-of-bounds numbers past int()'s digit limit (ValueError) and -J
integers past a float (OverflowError); _ib port state codes past the digit limit; _host
limits.conf '\u00b2' (str.isdigit() but not int()); _gdr kernel_version digits.

Since (same machine, under the load of other jobs, so CPU seconds): 14 parsers at 10,000 inputs
each, 30.4 s of CPU for all (nccl_text 7.2, nccl_json_bytes 6.5, perftest 4.7, ibdiag 2.4,
sysfs_values 2.0, roce_qos 1.6, report_files 1.3, host_files 1.0, the others under 1); the
slowest input 0.15 s. Found and fixed: a baseline or bench.json of 20 kB of '[' made
_report_stage raise RecursionError. Each parser stops at BUDGET_S of wall clock (a warning
says how many inputs it ran): the inputs are seeded, so a cut run is a prefix of the full one.
"""

from __future__ import annotations

import atexit
import inspect
import json
import os
import random
import shutil
import sys
import tempfile
import time
import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _gdr, _host, _ib, _ibdiag, _nccl, _pci, _pcie, _perftest, _process, _roce, _slurm, _sysroot
from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _aer, _ethtool, _gpu_state, _nccl_conf, _peermem
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis import _inventory
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.fleet import _offline
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.report import _report_stage
from tests.unit.fuzz import _mutate

PER_PARSER = 10000
# A parser that takes longer than this on one input of a few kB has gone quadratic.
DEADLINE_S = 1.0
# Wall-clock budget of one parser's inputs: on a machine so slow (or so busy) that the 10,000 do
# not fit, the test stops there, says how many it ran (a warning) and fails below MIN_INPUTS.
# The inputs are the same on every run (seeded), so a shorter run is a prefix of the full one.
BUDGET_S = float(os.environ.get('GF_FUZZ_BUDGET_S', '30'))
MIN_INPUTS = 2000


def _perftest_all(text):
    parsed = _perftest.parse_output(text, text[:300])
    _perftest.summarize(parsed['results'])
    return _perftest.outcome(parsed, 1, 'client', text[-300:])


def _ib_values(text):
    return (_ib.parse_rate(text), _ib.parse_state(text), _ib.gid_ipv4(text), _ib.parse_counters({'symbol_error': text, 'x': text}),
            _sysroot.parse_int(text), _sysroot.parse_int(text, 16), _sysroot.parse_hex(text), _sysroot.parse_numa(text))


def _host_all(text):
    return (_host.parse_value(text), _host.parse_proc_limits(text), _host.parse_cap_ipc_lock(text), _host.parse_limits_conf(text, '/p'),
            _host.parse_systemd_size(text), _host.parse_system_conf('[Manager]\n' + text, '/p'),
            _host.parse_module_list(text), _host.parse_module_list(text, debian=True), _host.parse_proc_modules(text),
            _host.parse_default_route(text))


def _gdr_pci(text):
    return (_gdr.parse_modules(text), _gdr.parse_ofed_version(text), _gdr.kernel_version(text),
            _gdr.symvers_exports(text, 'mm_kobj'), _gdr.symvers_exports(text.encode('utf-8', 'surrogateescape'), 'mm_kobj'),
            _pci.normalise_bdf(text), _pci.split_device_path(text),
            _pci.parse_acs(text.encode('utf-8', 'surrogateescape')))


def _pcie_all(text):
    """The PCIe link values, the IOMMU words of a command line, the PCI Express port type of a config dump."""
    params = _pcie.parse_cmdline(text)
    return (_pcie.parse_speed(text), _pcie.parse_width(text), params, _pcie.cmdline_mode(params),
            _pcie.express_type(text.encode('utf-8', 'surrogateescape')), _pcie.link_gbps(_pcie.parse_speed(text), _pcie.parse_width(text)))


def _ibdiag_all(text):
    """Every infiniband-diags parser of the fabric (module_utils/_ibdiag.py) and their merge."""
    unread = {}
    linkinfo, netdiscover = _ibdiag.parse_iblinkinfo(text), _ibdiag.parse_ibnetdiscover(text)
    return (_ibdiag.topology(linkinfo, netdiscover), _ibdiag.parse_sminfo(text), _ibdiag.parse_saquery_sminfo(text),
            _ibdiag.parse_perfquery(text, unread), unread, _ibdiag.guid(text[:40]), _ibdiag.parse_ibqueryerrors(text))


def _roce_all(text):
    """Every DCB parser of roce_qos_facts (module_utils/_roce.py), a saved output's header, and the
    whole choice between mlnx_qos and dcb with every tool answering ``text``."""
    argv = _roce.qos_argv('mlnx_qos', 'eth0')
    answer, _problem = _roce.parse_saved(text, argv)
    fields = _roce._tool_qos(lambda argv: (0, text), 'eth0')
    json.dumps(fields)
    return (_roce.parse_mlnx_qos(text), _roce.parse_dcb_pfc(text), _roce.parse_dcb_app(text), _roce.dcb_app_conflicts(text),
            _roce.parse_dcb_ets(text), _roce.parse_dcb_apptrust(text), answer, _roce.parse_saved(_roce.SAVED_MAGIC + '\n' + text))


_SCRATCH = []


def _scratch_file():
    """A file of this process's own, where the report files' readers read the inputs from."""
    if not _SCRATCH:
        where = tempfile.mkdtemp(prefix='gf-fuzz-', dir='/dev/shm' if os.access('/dev/shm', os.W_OK) else None)
        atexit.register(shutil.rmtree, where, True)
        _SCRATCH.append(os.path.join(where, 'report.json'))
    return _SCRATCH[0]


def _report_files(text):
    """The baseline report.json and bench.json readers (plugin_utils/report/_report_stage.py): the
    document, or ValueError saying why."""
    path = _scratch_file()
    with open(path, 'w', encoding='utf-8', errors='surrogateescape') as handle:
        handle.write(text)
    found = []
    for read in (_report_stage.read_baseline, _report_stage.read_bench):
        try:
            found.append(json.dumps(read(path)))
        except ValueError as exc:
            assert str(exc)
    return found


def _offline_names(text):
    """The log names of an offline run (plugin_utils/fleet/_offline.py classify): a line a path."""
    return _offline.classify(text.splitlines())


# Lines the host parsers look for, so that mutations reach their number handling.
_HOST_LINES = (b'* soft memlock 65536\n@rdma hard memlock unlimited\n[Manager]\nDefaultLimitMEMLOCK=8M:infinity\n'
               b'Max locked memory         8388608              8388608              bytes\nCapEff:\t000001ffffffffff\n'
               b'Iface\tDestination\tGateway\tFlags\tRefCnt\tUse\tMetric\tMask\nens3\t00000000\t0101A8C0\t0003\t0\t0\t100\t00000000\n')
_GDR_LINES = (b'5.15.0-105-generic\nnv_peer_mem 16384 0 - Live 0x0\nMLNX_OFED_LINUX-23.10-1.1.9.0:\n'
              b'0x12345678\tmm_kobj\tvmlinux\tEXPORT_SYMBOL_GPL\n/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0\n10:00.0\n')


def _slurm_all(text):
    """scontrol's node records, whole output and each line alone (module_utils/_slurm.py): a SlurmOutputError is the
    parser's answer to output without a node (or too much), anything else is a fault."""
    try:
        nodes = _slurm.parse_nodes(text)
    except _slurm.SlurmOutputError:
        nodes = None
    return nodes, [_slurm.parse_record(line) for line in text.splitlines()[:50]]


GPU_STATE_PARSERS = (_gpu_state.parse_query_gpu, _gpu_state.parse_compute_apps, _gpu_state.parse_nvlink_status,
                     _gpu_state.parse_nvlink_errors, _gpu_state.parse_xid)

PARSERS = {
    'nccl_text': (lambda text: _nccl.outcome(_nccl.parse_text(text, text[:200]), 1),
                  # real/h200x2's nccl-tests outputs, and two of its NCCL logs with ENV lines (state/: not its nvidia-smi outputs).
                  ('public/nccl_tests', 'public/nccl_info', 'public/misc', 'seeds', 'real/h200x2/all_reduce_perf_g2.txt',
                   'real/h200x2/all_gather_perf_g2.txt', 'real/h200x2/all_reduce_bad_g3.txt', 'real/h200x2/state/nccl_maxnch1.txt',
                   'real/h200x2/state/nccl_conffile.txt'), ()),
    'nccl_json_bytes': (lambda text: _nccl.outcome(_nccl.merge(_nccl.parse_any(text), _nccl.parse_text('')), 0),
                        ('real/h200x2/all_reduce.json', 'real/h200-vm-snapshot/capture.json'), ()),
    'perftest': (_perftest_all, ('public/perftest', 'real/cpu-vm-no-rdma'), ()),
    'proc_net_tcp': (lambda text: _process.parse_proc_net_tcp(text, 18515), ('real/host',),
                     (b'  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n'
                      b'   0: 00000000:4853 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 12345 1\n',)),
    'ibv_devinfo': (_ib.parse_ibv_devinfo, ('public/ibv_devinfo', 'real/cpu-vm-no-rdma'), ()),
    'sysfs_values': (_ib_values, ('public/sysfs_ib',),
                     (b'400 Gb/sec (4X NDR)', b'4: ACTIVE', b'fe80:0000:0000:0000:0000:ffff:0a07:6011', b'0x10de', b'-1')),
    'host_files': (_host_all, ('real/host',), (_HOST_LINES,)),
    'ibdiag': (_ibdiag_all, ('public/iblinkinfo', 'public/ibnetdiscover', 'public/sminfo', 'public/saquery', 'public/perfquery',
                             'public/ibqueryerrors'), ()),
    'pcie_values': (_pcie_all, ('public/sysfs_pci', 'public/lspci_link', 'real/h200x4-vm'),
                    (b'16.0 GT/s PCIe', b'8 GT/s', b'16', b'Unknown speed', b'ro intel_iommu=on iommu=pt iommu.passthrough=0 -- x')),
    'roce_qos': (_roce_all, ('public/mlnx_qos', 'public/dcb'),
                 (_roce.saved_text(_roce.qos_argv('mlnx_qos', 'eth0'), (
                     0, 'PFC configuration:\n  priority 0 1 2 3 4 5 6 7\n  enabled  0 0 0 1 0 0 0 0\n')).encode(),
                  b'dcb apptrust show dev eth0\norder dscp pcp\n')),
    'gdr_pci_values': (_gdr_pci, ('public/ofed_info', 'real/host/h100_vm_proc_modules.txt', 'real/h200x2/pci_sysfs.txt'),
                       (_GDR_LINES,)),
    'slurm': (_slurm_all, ('public/scontrol', 'real/slurm-lab'), ()),
    'nccl_size': (_nccl.parse_size, (), (b'8', b'1K', b'64M', b'8G', b' 128 MB ', b'1T')),
    'offline_names': (_offline_names, (), (b'/logs/n1__n2__0__host.txt\n/logs/n1__n2__mlx5_1__gpu.log\n/logs/all_reduce.json\n'
                                           b'/logs/a_b__c_d__1__gpu.txt\n/logs/run.log\n/logs/notes.md\n',)),
    # The PCIe AER files and ethtool -S (tests/unit/plugins/module_utils/test_fuzz_aer_ethtool_window.py fuzzes them too).
    'aer': (lambda text: (_aer.parse_aer(text), _aer.parse_count(text)), ('public/aer',),
            (b'RxErr 0\nBadTLP 2600\nBadDLLP 1400\nRollover 3\nTimeout 800\nNonFatalErr 0\nCorrIntErr 0\nHeaderOF 0\nTOTAL_ERR_COR 4803\n',
             b'17\n')),
    'ethtool': (lambda text: _ethtool.pfc(_ethtool.parse_stats(text)['counters']), ('public/ethtool',),
                (b'NIC statistics:\n     rx_prio3_pause: 1523\n     rx_prio3_pause_duration: 48736\n     tx_pause_storm_warning_events: 2\n',)),
    # nvidia-smi's outputs and the kernel log's XID lines (module_utils/_gpu_state.py), on the real and public outputs.
    'gpu_state': (lambda text: [parse(text.decode('utf-8', 'replace') if isinstance(text, bytes) else text) for parse in GPU_STATE_PARSERS],
                  ('public/gpu_state', 'real/h200x2/state/nvsmi_query_gpu.txt', 'real/h200x2/state/nvsmi_apps_busy.txt',
                   'real/h200x2/state/nvsmi_nvlink_s.txt', 'real/h200x2/state/nvsmi_nvlink_e.txt', 'real/h200x2/state/dmesg_xid.txt'), ()),
    # NCCL's configuration files as NCCL reads them (module_utils/_nccl_conf.py).
    'nccl_conf': (lambda text: _nccl_conf.parse_conf(text.encode('utf-8', 'surrogateescape') if isinstance(text, str) else text), (),
                  (b'NCCL_MAX_NCHANNELS=2\n# comment\nNCCL_ALGO=Ring\n', b'NCCL_PROTO=Simple\r\nNCCL_NTHREADS=64\n')),
    # The kernel log's records and a module's .modinfo (module_utils/_peermem.py); gpu_fabric_expected as -e gives it (a string).
    'peermem': (lambda text: (_peermem.parse_kmsg(text.decode('utf-8', 'replace') if isinstance(text, bytes) else text),
                              _peermem.parse_modinfo(text.encode('utf-8', 'surrogateescape') if isinstance(text, str) else text)),
                ('public/kmsg', 'real/h200x2/state/kmsg_records.txt'), (b'version=580.159.04\0vermagic=6.8.0 SMP mod_unload\0',)),
    'expected': (lambda text: _inventory.parse_expected(text.decode('utf-8', 'replace') if isinstance(text, bytes) else text), (),
                 (b'{"gpus": 8, "gpus_per_rail": 1, "hcas": {"compute": {"count": 8, "rate_gbps": 400}}}', b'{"hcas": {"storage": 2}}')),
    'report_files': (_report_files, (),
                     (json.dumps({'schema': 'hpc.gpu_fabric/report', 'schema_version': 1, 'summary': {'hosts': 2, 'errors': 0},
                                  'hosts': {'n1': {'status': 'ok', 'ports': 8}}, 'findings': [],
                                  'pairs': [{'server': 'n1', 'client': 'n2', 'bw_gbps': 392.5, 'status': 'ok'}]}).encode(),)),
}

# Every public parser of module_utils and plugin_utils and the PARSERS entry that runs it (the
# readers of whole roots, read_ib/read_gdr/read_host, are test_fuzz_readers.py's).
COVERED = {
    '_gdr': {'parse_modules': 'gdr_pci_values', 'parse_ofed_version': 'gdr_pci_values'},
    '_host': dict((name, 'host_files') for name in (
        'parse_value', 'parse_proc_limits', 'parse_cap_ipc_lock', 'parse_limits_conf', 'parse_systemd_size',
        'parse_system_conf', 'parse_module_list', 'parse_proc_modules', 'parse_default_route')),
    '_ib': {'parse_rate': 'sysfs_values', 'parse_state': 'sysfs_values', 'parse_counters': 'sysfs_values',
            'parse_ibv_devinfo': 'ibv_devinfo'},
    '_ibdiag': dict((name, 'ibdiag') for name in (
        'parse_iblinkinfo', 'parse_ibnetdiscover', 'parse_sminfo', 'parse_saquery_sminfo', 'parse_perfquery',
        'parse_ibqueryerrors')),
    '_nccl': {'parse_size': 'nccl_size', 'parse_text': 'nccl_text', 'parse_json': 'nccl_json_bytes',
              'parse_any': 'nccl_json_bytes'},
    '_pci': {'parse_acs': 'gdr_pci_values'},
    '_pcie': {'parse_speed': 'pcie_values', 'parse_width': 'pcie_values', 'parse_cmdline': 'pcie_values'},
    '_perftest': {'parse_output': 'perftest'},
    '_process': {'parse_proc_net_tcp': 'proc_net_tcp'},
    '_roce': dict([(name, 'roce_qos') for name in (
        'parse_mlnx_qos', 'parse_dcb_pfc', 'parse_dcb_app', 'parse_dcb_ets', 'parse_dcb_apptrust', 'parse_saved')]
        + [('parse_dcb_pfc_stats', 'test_fuzz_dcbx_rdma_stat_aer_log.py')]),
    '_slurm': {'parse_nodes': 'slurm', 'parse_record': 'slurm'},
    '_sysroot': {'parse_int': 'sysfs_values', 'parse_hex': 'sysfs_values', 'parse_numa': 'sysfs_values'},
    '_offline': {'classify': 'offline_names'},
    '_report_stage': {'read_baseline': 'report_files', 'read_bench': 'report_files'},
    '_bench': {'read_records': 'test_fuzz_records.py'},
    # Fuzzed, and their linearity measured, in tests/unit/plugins/module_utils/test_fuzz_dcbx_rdma_stat_aer_log.py.
    '_dcbx': dict((name, 'test_fuzz_dcbx_rdma_stat_aer_log.py') for name in ('parse_lldptool', 'parse_dcb_dcbx', 'parse_mlnx_qos_dcbx')),
    '_rdma_stat': {'parse_rdma_statistic': 'test_fuzz_dcbx_rdma_stat_aer_log.py'},
    '_aer_log': {'parse_aer_log': 'test_fuzz_dcbx_rdma_stat_aer_log.py'},
    '_aer': {'parse_aer': 'aer', 'parse_count': 'aer'},
    '_ethtool': {'parse_stats': 'ethtool'},
    '_gpu_state': dict((name, 'gpu_state') for name in (
        'parse_query_gpu', 'parse_compute_apps', 'parse_nvlink_status', 'parse_nvlink_errors', 'parse_xid')),
    '_nccl_conf': {'parse_conf': 'nccl_conf'},
    '_peermem': {'parse_kmsg': 'peermem', 'parse_modinfo': 'peermem'},
    '_inventory': {'parse_expected': 'expected'},
}


def _public_parsers():
    """{module: [name]} of the public parse_* functions and file readers of the two packages and
    plugin_utils' folders."""
    from ansible_collections.hpc.gpu_fabric.plugins import module_utils, plugin_utils
    found = {}
    for package in (module_utils, plugin_utils):
        top = list(package.__path__)[0]
        for folder, _dirs, files in sorted(os.walk(top)):
            dotted = '.'.join([package.__name__] + os.path.relpath(folder, top).split(os.sep)).replace('.' + os.curdir, '')
            for file_name in sorted(files):
                if not file_name.endswith('.py') or file_name == '__init__.py':
                    continue
                module = __import__('%s.%s' % (dotted, file_name[:-3]), fromlist=['x'])
                names = [name for name, value in vars(module).items() if inspect.isfunction(value) and value.__module__ == module.__name__
                         and (name.startswith('parse_') or name.endswith('from_log')
                              or (package is plugin_utils and name.startswith('read_')) or name == 'classify' and file_name == '_offline.py')]
                if names:
                    found[file_name[:-3]] = sorted(names)
    return found


def test_every_public_parser_is_fuzzed():
    assert _public_parsers() == dict((module, sorted(names)) for module, names in COVERED.items())
    for module, names in COVERED.items():
        for name, entry in names.items():
            assert entry in PARSERS or entry in ('test_fuzz_records.py', 'test_fuzz_dcbx_rdma_stat_aer_log.py'), (module, name)


@pytest.mark.parametrize('name', sorted(PARSERS))
def test_parser_survives_mutated_fixtures(name, record_property):
    parse, dirs, extra = PARSERS[name]
    corpus = _mutate.fixtures(*dirs) + list(extra)
    clock = _mutate.Clock(DEADLINE_S)
    start, cpu = time.monotonic(), time.process_time()
    for rng, data in _mutate.inputs(sum(map(ord, name)), corpus, PER_PARSER):
        if time.monotonic() - start > BUDGET_S:
            break
        text = _mutate.decode(rng, data)
        try:
            clock.run(parse, text)
        except Exception as exc:  # the point of the test: name the input that raised
            pytest.fail('%s raised %r on %r' % (name, exc, text[:300]))
    took = time.monotonic() - start
    record_property('inputs', clock.count)
    sys.stderr.write('fuzz %s: %d inputs in %.1f s (%.1f s of CPU), slowest %.3f s\n'
                     % (name, clock.count, took, time.process_time() - cpu, clock.slowest[0]))
    if clock.count < PER_PARSER:
        warnings.warn('fuzz %s: %d of %d inputs within its %.0f s budget' % (name, clock.count, PER_PARSER, BUDGET_S))
    assert clock.count >= MIN_INPUTS, '%s: %d inputs in %.0f s' % (name, clock.count, took)
    assert clock.slowest[0] < DEADLINE_S, 'slowest input took %.2f s: %r' % (clock.slowest[0], clock.slowest[1][0][:300])


def test_nccl_json_survives_mutated_documents():
    """Wrong types, missing keys, numbers past a float or int() anywhere in a real -J document."""
    docs = [json.loads(data) for data in _mutate.fixtures('real/h200x2/all_reduce.json')]
    rng = random.Random(7)
    clock = _mutate.Clock(DEADLINE_S)
    for _index in range(PER_PARSER):
        text = _mutate.mutate_json(rng, rng.choice(docs))
        try:
            parsed = clock.run(_nccl.parse_json, text)
            _nccl.outcome(parsed, 0)
            json.dumps(parsed)
        except Exception as exc:
            pytest.fail('parse_json raised %r on %r' % (exc, text[:300]))
    assert clock.slowest[0] < DEADLINE_S


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
                    lambda children: st.lists(children, max_size=4) | st.dictionaries(
                        st.sampled_from(['results', 'config', 'args', 'devices', 'size', 'count', 'out_of_place',
                                         'in_place', 'time', 'alg_bw', 'bus_bw', 'nwrong', 'average_bus_bandwidth',
                                         'bandwidth', 'out_of_bounds', 'errors', 'nccl_version', 'validation', 'x']),
                        children, max_size=6), max_leaves=20)


@settings(max_examples=300, derandomize=True, database=None, deadline=1000)
@given(JSON)
def test_nccl_json_survives_any_document(doc):
    text = json.dumps(doc)
    status, _failure = _nccl.outcome(_nccl.parse_json(text), 0)
    assert status in ('ok', 'failed')


@pytest.mark.parametrize('name', sorted(PARSERS))
@settings(max_examples=200, derandomize=True, database=None, deadline=1000)
@given(text=st.text(alphabet=st.characters(codec='utf-8', exclude_categories=()), max_size=300)
       | st.binary(max_size=300).map(lambda data: data.decode('utf-8', 'surrogateescape')))
def test_parser_survives_any_text(name, text):
    PARSERS[name][0](text)
