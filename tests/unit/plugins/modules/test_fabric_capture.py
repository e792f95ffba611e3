# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""fabric_capture: a snapshot reads back as the node it was taken from.

The property: the facts modules (ib_link_facts, gdr_facts, roce_qos_facts - the modules
themselves, so that a reader added to them and not to the capture fails here) return the
same facts and warnings on a simulated node and on its unpacked snapshot; and the tarball
holds nothing the readers did not read (checked against an independent tracer, not against
the recorder's own notes). The DCB tools' outputs the capture saves give roce_qos_facts
(from_log) on the snapshot the DCB settings the tools gave on the node.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import stat
import tarfile

import pytest

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _capture, _roce
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._sysroot import SysRoot
from ansible_collections.hpc.gpu_fabric.plugins.modules import fabric_capture, gdr_facts, ib_link_facts, roce_qos_facts
from tests.functional.helpers import tree_hash
from tests.sim import cluster, faults
from tests.unit.plugins.modules.utils import run_module

# Profiles with and without faults: every layer the readers see (IB, RoCE, PCI tree and
# ACS, peer memory and the mm_kobj chain, OFED build, host settings where the sim has them).
CASES = [
    ('nvidia_h100_8x_ndr',),
    ('nvidia_h100_8x_ndr', 'rate_degraded_1x', 'error_counters'),
    ('nvidia_h100_8x_ndr', 'cross_numa', 'peermem_not_loaded'),
    ('metax_c500_cx7', 'mm_kobj_not_exported'),
    ('metax_c500_cx7', 'ofed_stale_build', 'port_down'),
    ('amd_mi300x_roce', 'acs_enabled', 'roce_no_v2_gid'),
    ('homelab_cx4', 'port_polling'),
    ('no_rdma_vm',),
    ('h200x2_no_rdma',),
    ('nvidia_h100_8x_ndr', 'governor_powersave', 'memlock_limited', 'modules_not_persistent'),
    # PCIe link status and capability of both ends, IOMMU groups, /sys/class/iommu and /proc/cmdline.
    ('nvidia_h100_8x_ndr', 'pcie_link_degraded', 'pcie_bridge_slow', 'iommu_translated'),
]
CASES = [case for case in CASES if all(name in faults.CATALOG for name in case[1:])]


def capture(root, dest, monkeypatch, **options):
    result, failed = run_module(fabric_capture.main, dict(root=root, dest=dest, **options), monkeypatch)
    assert not failed, result
    return result


def extract(tarball, dest):
    os.makedirs(dest)
    with tarfile.open(tarball) as tar:
        # 'tar', not 'data': links into /dev are kept absolute on purpose (_capture._device_target).
        tar.extractall(dest, filter='tar')
        names = tar.getnames()
    with open(os.path.join(dest, _capture.MANIFEST)) as handle:
        return names, json.load(handle)


def facts_of(root, monkeypatch):
    """What the facts modules return for root, without the root itself."""
    facts = {}
    for name, main in (('ib', ib_link_facts.main), ('gdr', gdr_facts.main), ('roce', roce_qos_facts.main)):
        result, failed = run_module(main, {'root': root}, monkeypatch)
        assert not failed, result
        value = dict(result['ansible_facts']['gpu_fabric_%s' % name])
        assert value.pop('root') == root
        facts[name] = (value, result['warnings'])
    return facts


class Tracer(SysRoot):
    """Independent of the recorder: the real host path of every successful read."""

    def __init__(self, root):
        super(Tracer, self).__init__(root)
        # Host paths read and listed (real paths); node paths asked for (their links count).
        self.read, self.listed, self.touched = set(), set(), set()

    def _real(self, rel):
        self.touched.add(rel)
        return os.path.realpath(self.path(rel))

    def text(self, rel, quiet=False):
        value = super(Tracer, self).text(rel, quiet)
        if value is not None:
            self.read.add(self._real(rel))
        return value

    def binary(self, rel, size=4096):
        value = super(Tracer, self).binary(rel, size)
        if value is not None:
            self.read.add(self._real(rel))
        return value

    def cached(self, rel):
        value = super(Tracer, self).cached(rel)
        if value is not None:
            self.read.add(self._real(rel))
        return value

    def listdir(self, rel):
        names = super(Tracer, self).listdir(rel)
        self.listed.add(self._real(rel))
        return names

    def exists(self, rel):
        self.touched.add(rel)
        return super(Tracer, self).exists(rel)

    def isdir(self, rel):
        self.touched.add(rel)
        return super(Tracer, self).isdir(rel)

    def resolve(self, rel):
        self.touched.add(rel)
        return super(Tracer, self).resolve(rel)


def links_on_the_way(root, rel):
    """Host paths of the symlinks met while following rel below root (absolute targets re-rooted)."""
    found, parts, done = [], [p for p in rel.split('/') if p], root
    for _hop in range(200):
        if not parts:
            break
        name = parts.pop(0)
        if name == '..':
            done = os.path.dirname(done) if done != root else root
            continue
        path = os.path.join(done, name)
        if not os.path.islink(path):
            done = path
            continue
        found.append(path)
        target = os.readlink(path)
        if target.startswith('/dev/'):
            break
        if target.startswith('/'):
            done = root
        parts = [p for p in target.split('/') if p] + parts
    return found


def check_only_what_was_read(source, extracted, names, manifest):
    tracer = Tracer(source)
    for reader in _capture.READERS.values():
        reader(tracer)
    placeholders = set(manifest['placeholders'])
    allowed_links = set()
    for rel in tracer.touched:
        allowed_links.update(links_on_the_way(source, rel))
    for name in names:
        if name == _capture.MANIFEST or (name + '/').startswith('.gpu_fabric_commands/'):
            continue    # no node file: the DCB tools' outputs (test_dcb_outputs_are_saved_and_read_back)
        path = os.path.join(extracted, name)
        origin = os.path.join(source, name)
        info = os.lstat(path)
        if stat.S_ISREG(info.st_mode):
            if '/' + name in placeholders:
                # Only listed or tested, never opened: empty, and an entry of a listed directory or a tested path.
                assert info.st_size == 0, name
                assert os.path.dirname(origin) in tracer.listed or any(
                    os.path.realpath(os.path.join(source, t.lstrip('/'))) == origin for t in tracer.touched), name
            else:
                assert origin in tracer.read, 'stored but never read: %s' % name
                with open(origin, 'rb') as a, open(path, 'rb') as b:
                    assert a.read() == b.read(), name
        elif stat.S_ISLNK(info.st_mode):
            assert origin in allowed_links or os.path.dirname(origin) in tracer.listed, 'link never followed: %s' % name
            target = os.readlink(path)
            assert not target.startswith('/') or target.startswith('/dev/'), (name, target)


@pytest.mark.parametrize('case', CASES, ids=['+'.join(case) for case in CASES])
def test_snapshot_gives_the_same_facts(case, sim_root, monkeypatch, tmp_path):
    source, _contexts = sim_root(*case)
    dest = str(tmp_path / 'node.tar.gz')
    result = capture(source, dest, monkeypatch)
    assert result['changed'] and result['dest'] == dest and result['archive_bytes'] == os.path.getsize(dest)
    assert result['skipped'] == [] and result['warnings'] == []
    extracted = str(tmp_path / 'root')
    names, manifest = extract(dest, extracted)
    assert manifest['schema'] == _capture.MANIFEST_SCHEMA and manifest['readers'] == ['ib', 'gdr', 'roce']
    # Below another root the DCB tools are not run unless asked (qos_tools=always): nothing saved.
    assert result['commands'] == manifest['commands'] == [] and not any(n.startswith('.gpu_fabric_commands') for n in names)
    regular = [n for n in names if n != _capture.MANIFEST and stat.S_ISREG(os.lstat(os.path.join(extracted, n)).st_mode)]
    assert result['files'] == manifest['counts']['files'] == len(regular)
    assert facts_of(extracted, monkeypatch) == facts_of(source, monkeypatch)
    check_only_what_was_read(source, extracted, names, manifest)


def test_check_mode_writes_nothing(sim_root, monkeypatch, tmp_path):
    source, _contexts = sim_root('metax_c500_cx7', 'mm_kobj_not_exported')
    before = tree_hash(str(tmp_path)), tree_hash(source)
    checked = capture(source, str(tmp_path / 'node.tar.gz'), monkeypatch, _ansible_check_mode=True)
    assert (tree_hash(str(tmp_path)), tree_hash(source)) == before
    assert checked['changed'] is True and checked['archive_bytes'] is None
    written = capture(source, str(tmp_path / 'node.tar.gz'), monkeypatch)
    for key in ('files', 'links', 'directories', 'placeholders', 'bytes'):
        assert checked[key] == written[key] > 0 or key == 'placeholders'


def test_bad_arguments(monkeypatch, tmp_path):
    result, failed = run_module(fabric_capture.main, {'root': str(tmp_path / 'nope'), 'dest': str(tmp_path / 'x.tar.gz')}, monkeypatch)
    assert failed and 'not a directory' in result['msg']
    result, failed = run_module(fabric_capture.main, {'dest': str(tmp_path / 'no' / 'x.tar.gz')}, monkeypatch)
    assert failed and 'does not exist' in result['msg']
    result, failed = run_module(fabric_capture.main, {'dest': str(tmp_path / 'x.tar.gz'), 'readers': ['ib', 'nccl']}, monkeypatch)
    assert failed and 'nccl' in result['msg']


def test_only_the_ib_reader(sim_root, monkeypatch, tmp_path):
    source, _contexts = sim_root('nvidia_h100_8x_ndr')
    result = capture(source, str(tmp_path / 'ib.tar.gz'), monkeypatch, readers=['ib'])
    names, _manifest = extract(str(tmp_path / 'ib.tar.gz'), str(tmp_path / 'root'))
    assert not any(n.startswith('proc/') or n.startswith('usr/') for n in names)
    assert result['files'] > 1000   # 9 HCAs: GID tables and counters
    ib, _warnings = facts_of(str(tmp_path / 'root'), monkeypatch)['ib']
    assert ib == facts_of(source, monkeypatch)['ib'][0]


def test_sysfs_corners(sim_root, monkeypatch, tmp_path):
    """Short reads, unreadable files, absolute links and links into /dev."""
    source = str(tmp_path / 'node')
    shutil.copytree(sim_root('nvidia_h100_8x_ndr')[0], source, symlinks=True)
    # A bridge on a GPU<->NIC path: its ACS is read.
    on_path = _capture.READERS['gdr'](SysRoot(source))['acs'][0]['pci_address']
    bridge = os.path.realpath(os.path.join(source, 'sys/bus/pci/devices', on_path))
    # A user that is not root reads 64 bytes of a 4096-byte config space (drivers/pci/pci-sysfs.c).
    with open(os.path.join(bridge, 'config'), 'r+b') as handle:
        handle.truncate(64)
    # A counter that does not read (EISDIR here; EINVAL/EACCES on a node): left out, noted.
    counters = os.path.realpath(os.path.join(source, 'sys/class/infiniband/mlx5_0/ports/1/counters'))
    os.unlink(os.path.join(counters, 'symbol_error'))
    os.mkdir(os.path.join(counters, 'symbol_error'))
    # An absolute symlink (only ever resolved): stored relative to the node root.
    driver = os.path.join(os.path.realpath(os.path.join(source, 'sys/class/infiniband/mlx5_1/device')), 'driver')
    os.unlink(driver)
    os.symlink('/sys/bus/pci/drivers/mlx5_core', driver)
    # A modules-load.d file masked by a link to /dev/null: the link's text is the fact.
    os.makedirs(os.path.join(source, 'etc/modules-load.d'), exist_ok=True)
    os.makedirs(os.path.join(source, 'usr/lib/modules-load.d'), exist_ok=True)
    with open(os.path.join(source, 'usr/lib/modules-load.d/rdma.conf'), 'w') as handle:
        handle.write('ib_srp\n')
    os.symlink('/dev/null', os.path.join(source, 'etc/modules-load.d/rdma.conf'))

    result = capture(source, str(tmp_path / 'node.tar.gz'), monkeypatch)
    rel_counter = '/' + os.path.relpath(os.path.join(counters, 'symbol_error'), source)
    assert result['skipped'] == [{'path': rel_counter, 'reason': 'Is a directory'}]
    assert any('symbol_error' in w for w in result['warnings'])
    extracted = str(tmp_path / 'root')
    names, manifest = extract(str(tmp_path / 'node.tar.gz'), extracted)
    assert os.path.getsize(os.path.join(extracted, os.path.relpath(bridge, source), 'config')) == 64
    assert not os.path.lexists(os.path.join(extracted, rel_counter.lstrip('/')))
    stored_driver = os.path.join(extracted, os.path.relpath(driver, source))
    assert not os.readlink(stored_driver).startswith('/') and os.path.basename(os.readlink(stored_driver)) == 'mlx5_core'
    assert manifest['rewritten_links'] == [{'path': '/' + os.path.relpath(driver, source),
                                            'target': '/sys/bus/pci/drivers/mlx5_core', 'stored': os.readlink(stored_driver)}]
    assert os.readlink(os.path.join(extracted, 'etc/modules-load.d/rdma.conf')) == '/dev/null'

    live, offline = facts_of(source, monkeypatch), facts_of(extracted, monkeypatch)
    assert offline['ib'][0] == live['ib'][0] and offline['gdr'] == live['gdr']
    assert any('ACS unknown' in w for w in live['gdr'][1])
    if 'host' in live['gdr'][0]:
        assert 'ib_srp' not in live['gdr'][0]['host']['modules_persistent']
    # What cannot be carried: the read error itself (the snapshot lacks the file, quietly).
    assert [w for w in live['ib'][1] if 'symbol_error' not in w] == offline['ib'][1]


def test_reads_that_bypass_sysroot_methods_are_captured(sim_root, monkeypatch, tmp_path):
    """A reader that builds a host path with path() and opens it itself still ends up in the snapshot."""
    source, _contexts = sim_root('homelab_cx4')

    def reader(sysroot, run=None):
        with open(sysroot.path('/proc/sys/kernel/osrelease')) as handle:
            return handle.read()

    monkeypatch.setitem(_capture.READERS, 'raw', reader)
    facts, members, notes, _warnings = _capture.capture(source, ['raw'])
    assert notes['raw_paths'] == ['/proc/sys/kernel/osrelease']
    assert members['proc/sys/kernel/osrelease']['data'].decode() == facts['raw']


def test_live_root_of_this_machine(monkeypatch, tmp_path):
    """The real /sys and /proc: sysfs symlinks, /proc files that stat as 0 bytes, attributes
    that stat as 4096. The facts the capture saw are exactly what its snapshot gives."""
    facts, members, notes, warnings = _capture.capture('/', ['ib', 'gdr'])
    dest = str(tmp_path / 'live.tar.gz')
    with open(dest, 'wb') as handle:
        _capture.write_tar(handle, members, _capture.manifest('/', ['ib', 'gdr'], members, notes, warnings))
    extracted = str(tmp_path / 'root')
    extract(dest, extracted)
    snapshot = SysRoot(extracted)
    assert dict((name, _capture.READERS[name](snapshot)) for name in facts) == facts
    if 'proc/modules' in members and os.stat('/proc/modules').st_size == 0:
        assert os.path.getsize(os.path.join(extracted, 'proc/modules')) == len(members['proc/modules']['data']) > 0


def test_unreadable_file_is_noted_not_fatal(monkeypatch, tmp_path):
    """EACCES (a 0400 file read by a user) as the recorder meets it."""
    root = tmp_path / 'node'
    (root / 'proc/sys/kernel').mkdir(parents=True)
    (root / 'proc/sys/kernel/osrelease').write_text('6.8.0-45-generic\n')
    (root / 'proc/modules').write_text('mlx5_ib 479232 0 - Live 0x0\n')
    real_open = os.open

    def deny(path, flags, *args, **kwargs):
        if str(path).endswith('/proc/modules'):
            raise OSError(errno.EACCES, 'Permission denied', path)
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, 'open', deny)
    recorder = _capture.RecordingSysRoot(str(root))
    assert recorder.text('/proc/modules') is None and recorder.text('/proc/sys/kernel/osrelease') == '6.8.0-45-generic'
    assert recorder.text('/proc/nothing') is None
    members, notes = _capture.plan(recorder)
    assert notes['skipped'] == [{'path': '/proc/modules', 'reason': 'Permission denied'}]
    assert 'proc/modules' not in members and members['proc/sys/kernel/osrelease']['data'] == b'6.8.0-45-generic\n'
    assert recorder.warnings == ['cannot read /proc/modules: Permission denied']


REAL_SNAPSHOT = os.path.join(os.path.dirname(__file__), '..', '..', '..', 'fixtures', 'real', 'h200-vm-snapshot')


def test_a_real_gpu_nodes_snapshot_gives_its_live_facts(monkeypatch, tmp_path):
    """The GPU machine captured by capture.yml: the facts read from its unpacked snapshot equal
    those validate_fabric.yml gathered on the live node (tests/fixtures/real/h200-vm-snapshot)."""
    root = str(tmp_path / 'vm')
    names, manifest = extract(os.path.join(REAL_SNAPSHOT, 'vm.tar.gz'), root)
    assert 'proc/kallsyms' in names and manifest
    with open(os.path.join(REAL_SNAPSHOT, 'live_facts.json')) as handle:
        live = json.load(handle)
    facts = facts_of(root, monkeypatch)

    def values(item):
        # The words of reasons, notes and chains are the code's and may be reworded since the
        # capture; every value read from the node must be the same, and so must their number.
        if isinstance(item, dict):
            return dict((k, len(v) if k in ('reasons', 'notes', 'chain') else values(v)) for k, v in item.items())
        return [values(v) for v in item] if isinstance(item, list) else item

    # Read since the capture (issue 22): the snapshot holds no PCIe link attribute and no IOMMU
    # directory, so they are unknown - never 'not degraded' or 'off'.
    later = dict((key, facts['gdr'][0].pop(key)) for key in ('pcie_links', 'iommu', 'peer_memory_build', 'rdma_unbound'))
    # No peer-memory module loaded or installed, no RDMA-capable PCI function (plugins/module_utils/_peermem.py).
    assert later['peer_memory_build'] == [] and later['rdma_unbound'] == []
    assert [(link['downstream'], link['kind'], link['degraded']) for link in later['pcie_links']] == [('0000:00:06.0', 'gpu', None)]
    assert (later['iommu']['mode'], [d['mode'] for d in later['iommu']['devices']]) == ('unknown', ['unknown'])
    for name in ('ib', 'gdr'):
        expected = dict(live[name])
        assert expected.pop('root') == '/'
        assert values(facts[name][0]) == values(expected), name
    # What the node is: one H200, no RDMA device, no peer-memory client, dma-buf possible.
    gdr = facts['gdr'][0]
    assert [g['device_id'] for g in gdr['gpus']] == ['0x2335'] and gdr['nics'] == [] and gdr['gdr_ready'] is False
    assert facts['ib'][0]['devices'] == [] and gdr['dmabuf']['possible'] is True


def _sim_tools(monkeypatch, source, installed):
    """The DCB stand-ins (tests/sim/bin) acting on ``source``, as the only tools ``installed``:
    get_bin_path finds nothing else (this machine may have a real dcb in /sbin)."""
    from ansible.module_utils import basic
    monkeypatch.setenv('GF_SIM_ROOT', source)
    monkeypatch.setattr(basic.AnsibleModule, 'get_bin_path', lambda self, name, *args, **kwargs:
                        os.path.join(cluster.SIM_BIN, name) if name in installed else None)


def _roce_facts(monkeypatch, root, **options):
    result, failed = run_module(roce_qos_facts.main, dict(root=root, **options), monkeypatch)
    assert not failed, result
    return result['ansible_facts']['gpu_fabric_roce'], result['warnings']


@pytest.mark.parametrize('case, installed, source, kinds', [
    # lldptool not installed: saved so (one call: without lldpad the ETS TLV is not asked).
    (('amd_mi300x_roce',), ('mlnx_qos', 'dcb'), 'mlnx_qos', ['lldptool_pfc', 'mlnx_qos']),
    (('amd_mi300x_roce', 'roce_pfc_off'), ('mlnx_qos', 'dcb'), 'mlnx_qos', ['lldptool_pfc', 'mlnx_qos']),
    # Without mlnx_qos the capture saves that, and dcb's five outputs (dcbx too): read back as on the node.
    (('amd_mi300x_roce', 'roce_pfc_off'), ('dcb',), 'dcb',
     ['dcb_app', 'dcb_apptrust', 'dcb_dcbx', 'dcb_ets', 'dcb_pfc', 'lldptool_pfc', 'mlnx_qos']),
    # lldpad running, willing: both TLVs saved, and the snapshot says the switch manages, as the node did.
    (('amd_mi300x_roce', 'dcbx_willing_host'), ('mlnx_qos', 'lldptool'), 'mlnx_qos', ['lldptool_ets', 'lldptool_pfc', 'mlnx_qos']),
])
def test_dcb_outputs_are_saved_and_read_back(case, installed, source, kinds, sim_root, monkeypatch, tmp_path):
    node, _contexts = sim_root(*case)
    _sim_tools(monkeypatch, node, installed)
    dest = str(tmp_path / 'node.tar.gz')
    result = capture(node, dest, monkeypatch, qos_tools='always')
    assert result['warnings'] == []
    names, manifest = extract(dest, str(tmp_path / 'root'))
    saved = sorted(n for n in names if n.startswith(_roce.SAVED_DIR + '/'))
    live, live_warnings = _roce_facts(monkeypatch, node, qos_tools='always')
    netdevs = [port['netdev'] for port in live['ports']]
    assert len(netdevs) == 8 and all(port['source'] == source for port in live['ports'])
    assert saved == sorted('%s/%s.%s.txt' % (_roce.SAVED_DIR, n, k) for n in netdevs for k in kinds)
    assert manifest['commands'] == result['commands'] and len(result['commands']) == len(saved)
    first = dict((c['command'], c) for c in result['commands'])['mlnx_qos -i %s' % netdevs[0]]
    assert (first['rc'], first['error']) == ((0, None) if source == 'mlnx_qos' else (None, 'not installed'))
    with open(os.path.join(str(tmp_path / 'root'), _roce.SAVED_DIR, netdevs[0] + '.mlnx_qos.txt')) as handle:
        text = handle.read()
    assert text.startswith(_roce.SAVED_MAGIC + '\n# command: mlnx_qos -i %s\n' % netdevs[0])
    assert ('# rc: 0\nDCBX mode' in text) if source == 'mlnx_qos' else text.endswith('# error: not installed\n')

    # The snapshot, its saved outputs read instead of the tools: the same ports, field by field.
    root = str(tmp_path / 'root')
    offline, offline_warnings = _roce_facts(monkeypatch, root, from_log=[os.path.join(root, _roce.SAVED_DIR)])
    assert offline['ports'] == live['ports'] and offline_warnings == live_warnings == []
    assert offline['from_log']['refused'] == offline['from_log']['unused'] == []
    assert len(offline['from_log']['read']) == len(saved)
    assert [p['pfc'] for p in offline['ports']] == [[] if 'roce_pfc_off' in case else [3]] * 8
    assert [p['dcbx']['manager'] for p in offline['ports']] == ['switch' if 'dcbx_willing_host' in case else 'host'] * 8
    # Without from_log the snapshot's DCB settings are unknown, said so (fail closed).
    unread, _warnings = _roce_facts(monkeypatch, root)
    assert all(p['source'] is None and p['pfc'] is None and 'not run' in p['source_reason'] for p in unread['ports'])


def test_a_node_without_dcb_tools_is_captured_and_said_so(sim_root, monkeypatch, tmp_path):
    node, _contexts = sim_root('amd_mi300x_roce')
    _sim_tools(monkeypatch, node, ())
    result = capture(node, str(tmp_path / 'node.tar.gz'), monkeypatch, qos_tools='always')
    assert len(result['warnings']) == 8 and 'not in the snapshot: mlnx_qos not installed; dcb (iproute2) not installed' in result['warnings'][0]
    assert set((c['rc'], c['error']) for c in result['commands']) == {(None, 'not installed')} and len(result['commands']) == 16
    root = str(tmp_path / 'root')
    extract(str(tmp_path / 'node.tar.gz'), root)
    offline, _warnings = _roce_facts(monkeypatch, root, from_log=[os.path.join(root, _roce.SAVED_DIR)])
    port = offline['ports'][0]
    assert port['source'] is None and port['pfc'] is None
    assert 'mlnx_qos was not installed on the node' in port['source_reason'] and 'dcb was not installed on the node' in port['source_reason']


def test_a_hung_tool_costs_one_timeout(sim_root, monkeypatch):
    node, _contexts = sim_root('amd_mi300x_roce')
    asked = []

    def run(argv):
        asked.append(argv)
        return (124, '') if argv[0] == 'mlnx_qos' else None
    facts, members, notes, warnings = _capture.capture(node, ['roce'], run)
    assert [a[0] for a in asked].count('mlnx_qos') == 1 and len(warnings) == 8
    errors = [c['error'] for c in notes['commands'] if c['command'].startswith('mlnx_qos')]
    assert errors[0] == 'timed out (or rc 124)' or errors.count('timed out (or rc 124)') == 1
    assert sum(1 for e in errors if e and e.startswith('not run: mlnx_qos timed out')) == 7
    assert all(p['source'] is None for p in facts['roce'])
