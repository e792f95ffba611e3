# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The fault catalog: each fault mutates a node profile and names what the facts must show.

``expect`` pairs are (JMESPath over {'ib': gpu_fabric_ib, 'gdr': gpu_fabric_gdr}, value);
``{hca}``, ``{gpu}``, ``{bridge}`` are filled in with the fault's target. The same
catalog drives the unit tests of the facts modules and, later, the diagnosis
accuracy benchmark (every fault alone and in pairs).
"""

from __future__ import annotations

import copy

try:
    from tests.sim import tools_gpu  # the NVIDIA boards the nvidia-smi stand-in knows (their NVLinks)
except ImportError:  # run as a script from tests/sim
    import tools_gpu

# Sizes of the IBTA counters a rising-error fault pushes to saturation (see _ib.COUNTER_BITS).
_SATURATED_LINK_DOWNED = 255


def _hca(profile, target):
    hcas = [h for h in profile.get('hcas', []) if h['ports']]
    if not hcas:
        raise ValueError('profile %s has no HCA to break' % profile.get('name'))
    if target is None:
        # The first HCA that serves GPUs (not a storage NIC): the first one with an IB port
        # or, on RoCE fabrics, simply the first one.
        return hcas[0]
    for hca in hcas:
        if hca['name'] == target:
            return hca
    raise ValueError('no HCA %s in profile %s' % (target, profile.get('name')))


def _pci_by_bdf(profile):
    return dict((dev['bdf'], dev) for dev in profile.get('pci', []))


def _gpus(profile):
    return sorted(dev['bdf'] for dev in profile.get('pci', []) if dev.get('kind') == 'gpu')


def _chain(profile, bdf):
    by_bdf = _pci_by_bdf(profile)
    chain = []
    dev = by_bdf[bdf]
    while dev.get('parent'):
        chain.insert(0, dev['parent'])
        dev = by_bdf[dev['parent']]
    return chain


def port_down(profile, target):
    hca = _hca(profile, target)
    # A disabled port reads DOWN / Disabled with the base rate (ibstat fixture
    # gpud_h100_ib_some_disabled: "State: Down, Physical state: Disabled, Rate: 40").
    hca['ports'][0].update(state='DOWN', phys_state='Disabled', rate='40 Gb/sec (4X QDR)')
    return {'hca': hca['name']}


def port_polling(profile, target):
    hca = _hca(profile, target)
    # Cable unplugged or remote end down: PORT_DOWN / POLLING (ibv_devinfo fixture heioy_mlx4_v_port2_polling_sdr).
    hca['ports'][0].update(state='DOWN', phys_state='Polling', rate='10 Gb/sec (4X SDR)')
    return {'hca': hca['name']}


def rate_degraded_1x(profile, target):
    hca = _hca(profile, target)
    rate = hca['ports'][0].get('rate', '400 Gb/sec (4X NDR)')
    gbps, rest = rate.split(' ', 1)
    lanes = int(rest.split('(')[1].split('X')[0])
    speed = rest.split('X', 1)[1].strip(' )')
    # Width trained down to 1X: a quarter of the rate (sysfs_ib/procfs_mlx5_0_1x_edr_hwcounters: "25 Gb/sec (1X EDR)").
    hca['ports'][0]['rate'] = '%g Gb/sec (1X %s)' % (float(gbps) / lanes, speed)
    return {'hca': hca['name']}


def peermem_not_loaded(profile, target):
    peers = profile.get('memory_peers', [])
    if not peers:
        raise ValueError('profile %s has no peer-memory module' % profile.get('name'))
    module = peers[0]['module']
    if 'peer' not in module:
        # amdgpu and metax register their peer-memory client themselves: unloading
        # them removes the GPU driver, which is not this fault.
        raise ValueError('%s is the GPU driver, not a separate peer-memory module' % module)
    profile['modules'] = [m for m in profile['modules'] if m != module]
    return {'module': module, 'client': peers[0]['client']}


def mm_kobj_not_exported(profile, target):
    # Seed 000: RHEL 9.6 dropped EXPORT_SYMBOL_GPL(mm_kobj); OFED rebuilt for it
    # cannot define HAVE_MM_KOBJ_EXPORTED, so memory_peers never appears.
    profile['kernel'].update(release='5.14.0-570.12.1.el9_6.x86_64', exports_mm_kobj=False)
    profile['ofed']['have_mm_kobj_exported'] = False
    return {'client': profile['memory_peers'][0]['client']}


def ofed_stale_build(profile, target):
    # The kernel exports mm_kobj, but OFED was built against one that did not:
    # the fix is a rebuild against this kernel (role ofed_peermem), not a kernel change.
    profile['kernel']['exports_mm_kobj'] = True
    profile['ofed']['have_mm_kobj_exported'] = False
    return {'client': profile['memory_peers'][0]['client']}


def acs_enabled(profile, target):
    gpu = target or _gpus(profile)[0]
    by_bdf = _pci_by_bdf(profile)
    host = _host_of(profile, gpu)
    if not any(_host_of(profile, h['pci']) == host for h in profile.get('hcas', [])):
        raise ValueError('no NIC shares a host bridge with %s: ACS is not on a GPU<->NIC path' % gpu)
    # The downstream port the GPU hangs off: where P2P requests enter the switch.
    bridge = by_bdf[gpu]['parent']
    # lspci_acs/gpud_pmc_sierra_acs_enabled: 'SrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+'.
    by_bdf[bridge]['acs'] = {'cap': 0x5f, 'ctl': 0x1d}
    return {'gpu_bdf': gpu, 'bridge': bridge}


def cross_numa(profile, target):
    hca = _hca(profile, target)
    by_bdf = _pci_by_bdf(profile)
    nic = by_bdf[hca['pci']]
    numas = profile.get('host_bridges', {})
    gpu = _nearest_gpu(profile, hca['pci'])
    if gpu is None or _numa_of(profile, gpu) != _numa_of(profile, hca['pci']):
        raise ValueError('%s has no GPU on its own NUMA node to be moved away from' % hca['name'])
    other = sorted(set(v['numa'] for v in numas.values()) - {_numa_of(profile, gpu)})
    if not other:
        raise ValueError('profile %s has a single NUMA node' % profile.get('name'))
    # Re-seat the HCA in a slot of the other socket: a new host bridge and root port there.
    numas['pci0000:f0'] = {'numa': other[0]}
    profile['pci'].append({'bdf': '0000:f0:01.0', 'kind': 'bridge', 'host': 'pci0000:f0', 'acs': {'cap': 0x5f, 'ctl': 0}})
    nic['parent'] = '0000:f0:01.0'
    return {'hca': hca['name'], 'gpu_bdf': gpu}


def _host_of(profile, bdf):
    chain = _chain(profile, bdf)
    by_bdf = _pci_by_bdf(profile)
    return (by_bdf[chain[0]] if chain else by_bdf[bdf])['host']


def _numa_of(profile, bdf):
    return profile['host_bridges'][_host_of(profile, bdf)]['numa']


def _nearest_gpu(profile, nic_bdf):
    """The GPU that shared the NIC's switch before the fault (longest common bridge chain)."""
    nic_chain = _chain(profile, nic_bdf)
    best = None
    for gpu in _gpus(profile):
        chain = _chain(profile, gpu)
        common = 0
        while common < min(len(chain), len(nic_chain)) and chain[common] == nic_chain[common]:
            common += 1
        if best is None or common > best[0]:
            best = (common, gpu)
    return best[1] if best else None


def roce_no_v2_gid(profile, target):
    roce = [h for h in profile.get('hcas', []) if h['ports'][0].get('link_layer') == 'Ethernet']
    if not roce:
        raise ValueError('profile %s has no RoCE port' % profile.get('name'))
    hca = roce[0] if target is None else _hca(profile, target)
    hca['ports'][0]['roce_v2'] = False
    return {'hca': hca['name']}


def error_counters(profile, target):
    hca = _hca(profile, target)
    hca['ports'][0]['counters'] = {'symbol_error': 4137, 'port_rcv_errors': 512,
                                   'link_downed': _SATURATED_LINK_DOWNED, 'link_error_recovery': 17}
    return {'hca': hca['name']}


def governor_powersave(profile, target):
    if not profile.get('cpu_governor'):
        raise ValueError('profile %s has no cpufreq (a VM): no governor to change' % profile.get('name'))
    if profile['cpu_governor'] == 'powersave':
        raise ValueError('profile %s runs powersave already' % profile.get('name'))
    # Seed 002 before 'cpupower frequency-set -g performance': intel_pstate's default governor.
    profile['cpu_governor'] = 'powersave'
    return {'cpus': profile.get('cpus', 8)}


# MLOCK_LIMIT before Linux 5.16 (include/uapi/linux/resource.h: 64 KiB, 'GPG2 wants 64kB'), what a
# node, or a container, gets when nothing raises it.
_MEMLOCK_DEFAULT_OLD = 64 * 1024


def memlock_limited(profile, target):
    if not profile.get('hcas'):
        raise ValueError('profile %s has no RDMA device: nothing registers memory' % profile.get('name'))
    # render_host writes limits.d/rdma.conf only for an unlimited node: the entry goes too.
    profile['memlock'] = _MEMLOCK_DEFAULT_OLD
    return {'bytes': _MEMLOCK_DEFAULT_OLD}


def services_memlock_8m(profile, target):
    if not profile.get('hcas'):
        raise ValueError('profile %s has no RDMA device: nothing registers memory' % profile.get('name'))
    # A drop-in read after system.conf (systemd-system.conf(5)) brings back systemd's 8M default for
    # services; logins keep their limits.d entry.
    profile.setdefault('system_conf_d', {})['99-memlock.conf'] = '8M'
    return {'file': '/etc/systemd/system.conf.d/99-memlock.conf'}


# The modules nothing else loads at boot (plugin_utils/diagnosis/_diagnose.py PEER_MODULES, RDMA_USER_MODULES):
# the peer-memory module everywhere, the RDMA user-space modules where MLNX OFED's openibd does not.
_PEER_MODULES = ('nvidia_peermem', 'nv_peer_mem')
_RDMA_USER_MODULES = ('ib_uverbs', 'ib_umad', 'rdma_ucm', 'ib_ipoib')


def modules_not_persistent(profile, target):
    loaded = profile.get('modules', [])
    candidates = [m for m in _PEER_MODULES if m in loaded]
    if not profile.get('ofed'):
        candidates += [m for m in _RDMA_USER_MODULES if m in loaded]
    files = profile.get('modules_load_d')
    # Without modules_load_d, render_host lists every one of them (PERSISTED_MODULES).
    listed = set(candidates) if files is None else set(m.replace('-', '_') for names in files.values() for m in names)
    listed &= set(candidates)
    if target is not None and target not in listed:
        raise ValueError('%s is not a loaded module that profile %s loads at boot' % (target, profile.get('name')))
    if not listed:
        raise ValueError('profile %s lists no module in modules-load.d that only it brings back' % profile.get('name'))
    # Seed 002 loaded nvidia-peermem with modprobe; without its hpc.conf it is gone after a reboot.
    module = target or [m for m in candidates if m in listed][0]
    profile.setdefault('not_persistent', []).append(module)
    return {'module': module}


def hca_missing(profile, target):
    hca = _hca(profile, target)
    # An HCA that did not enumerate (no link training on the slot, a card that failed its
    # firmware load: mlx5_core never probes it) is in neither the PCI tree nor
    # /sys/class/infiniband; its ports, netdev and routes go with it. Nothing on the node
    # itself looks wrong: only its peers show the gap (plugin_utils/diagnosis/_fleet.py).
    profile['hcas'] = [h for h in profile['hcas'] if h is not hca]
    profile['pci'] = [dev for dev in profile['pci'] if dev['bdf'] != hca['pci']]
    return {'hca': hca['name'], 'bdf': hca['pci']}


def _older(fw_ver):
    """'28.41.1000' -> '28.39.1000': two firmware releases back (the middle field counts
    releases in the ConnectX firmware numbering, 28.39 -> 28.41 -> 28.42 ...)."""
    major, minor, rest = fw_ver.split('.', 2)
    return '%s.%d.%s' % (major, max(int(minor) - 2, 0), rest)


def fw_mismatch(profile, target):
    hca = _hca(profile, target)
    model = hca.get('hca_type', 'MT4129')
    # Every HCA of the model on the older firmware, as after a card swap or a node that
    # missed a firmware campaign: the node is consistent in itself, unlike its peers.
    old = _older(hca.get('fw_ver', '28.41.1000'))
    for other in profile['hcas']:
        if other.get('hca_type', 'MT4129') == model:
            other['fw_ver'] = old
    return {'hca': hca['name'], 'fw_ver': old}


# ---------------------------------------------------------------------------- RoCE lossless
# The node-wide settings (trust, PFC, ECN, CNP, ToS) are what a configuration script sets on
# every RoCE port at once (tests/sim/tools_qos.py qos_of); MTU and counters are per port.

def _roce_hcas(profile):
    roce = [h for h in profile.get('hcas', []) if h['ports'] and h['ports'][0].get('link_layer') == 'Ethernet']
    if not roce:
        raise ValueError('profile %s has no RoCE port' % profile.get('name'))
    return roce


def _roce_qos(profile, **values):
    _roce_hcas(profile)
    profile.setdefault('roce_qos', {}).update(values)


def roce_trust_pcp(profile, target):
    # mlx5's default trust state is pcp (mlnx_qos prints 'Priority trust state: pcp' until --trust dscp).
    _roce_qos(profile, trust='pcp')
    return {}


def roce_pfc_off(profile, target):
    _roce_qos(profile, pfc=[])
    return {}


def roce_ecn_off(profile, target):
    # The ECN default of a port where nobody enabled it for the RDMA priority.
    _roce_qos(profile, ecn=[])
    return {}


def roce_cnp_lossy(profile, target):
    # CNPs on priority 0: the TC of best-effort traffic, no PFC, not strict.
    _roce_qos(profile, cnp_prio=0, cnp_dscp=0)
    return {}


def roce_tos_default(profile, target):
    # The kernel's RDMA CM ToS 0 (no configfs entry): DSCP 0 -> priority 0, PFC is on 3.
    _roce_qos(profile, tos=None)
    return {}


def roce_pfc_prio4(profile, target):
    # A lossless setup in itself (PFC, ECN and the DSCP 26 entry all on priority 4), unlike its peers' 3.
    _roce_qos(profile, pfc=[4], ecn=[4], dscp2prio={26: 4})
    return {}


def roce_mtu_low(profile, target):
    hca = _roce_hcas(profile)[0] if target is None else _hca(profile, target)
    hca['ports'][0]['netdev_mtu'] = 1500
    return {'hca': hca['name']}


def roce_congestion(profile, target):
    hca = _roce_hcas(profile)[0] if target is None else _hca(profile, target)
    # A lossy path: go-back-N retransmissions (out_of_sequence at the responder, timeouts at the
    # requester) and CNPs handled, as hw_counters show them after drops.
    hca['ports'][0]['hw_counters'] = {'out_of_sequence': 48211, 'packet_seq_err': 1730, 'local_ack_timeout_err': 96}
    hca['ports'][0].setdefault('qos', {})['counters'] = {'rp_cnp_handled': 912334, 'np_cnp_sent': 887102}
    return {'hca': hca['name']}


# ---------------------------------------------------------------------------- PCIe links, IOMMU
# What the simulator renders a link at is the lower of its two ends' maxima (render.pcie_links); a
# fault sets the status it trained at instead (``link_status``), on the device below the link.

def _link_max(profile, bdf):
    from tests.sim import render   # the link table lives with the renderer
    return render.pcie_links(profile)[bdf]


def pcie_link_degraded(profile, target):
    hca = _hca(profile, target)
    dev = _pci_by_bdf(profile)[hca['pci']]
    link = _link_max(profile, hca['pci'])
    # A card that trained half its lanes (x16 -> x8): a reseat, a riser, a slot bifurcated wrong, as
    # nokyan/resources#512's '16.0 GT/s PCIe' x8 under a 32.0 GT/s x16 maximum (fixtures/public/sysfs_pci).
    dev['link_status'] = {'width': link['width'] // 2}
    return {'hca': hca['name'], 'bdf': hca['pci'], 'width': link['width'] // 2}


def pcie_bridge_slow(profile, target):
    hca = _hca(profile, target)
    chain = _chain(profile, hca['pci'])
    if len(chain) < 2:
        raise ValueError('%s hangs off its root port: no switch link above it' % hca['name'])
    # The switch's own link to the root port trained a generation down (32 -> 16 GT/s), lanes intact:
    # everything below the switch shares the slower link.
    link = _link_max(profile, chain[1])
    _pci_by_bdf(profile)[chain[1]]['link_status'] = {'speed': link['speed'] / 2}
    return {'hca': hca['name'], 'bridge': chain[1], 'speed': link['speed'] / 2}


def gpu_link_narrow(profile, target):
    gpu = target or _gpus(profile)[0]
    link = _link_max(profile, gpu)
    # Fewer lanes on a GPU is a fault whatever its load (an idle GPU lowers its speed, not its width).
    _pci_by_bdf(profile)[gpu]['link_status'] = {'width': link['width'] // 2}
    return {'gpu_bdf': gpu, 'width': link['width'] // 2}


def iommu_translated(profile, target):
    if (profile.get('iommu') or {}).get('mode') == 'off':
        raise ValueError('profile %s has no IOMMU' % profile.get('name'))
    # Booted with the IOMMU on and no iommu=pt: recent kernels' default domain for every device is
    # DMA-FQ (translated, lazy flush; drivers/iommu/iommu.c, CONFIG_IOMMU_DEFAULT_DMA_LAZY).
    profile['iommu'] = dict(profile.get('iommu') or {}, mode='DMA-FQ', cmdline='intel_iommu=on')
    return {}


_ROCE_PORT0 = "roce.ports[?hca=='{hca}'] | [0]"


def peermem_driver_mismatch(profile, target):
    # The NVIDIA driver was updated and reloaded (/proc/driver/nvidia/version, the packages on disk) while
    # the nvidia_peermem of the old build stayed loaded: its /sys/module/nvidia_peermem/version is the old one.
    driver = profile.get('nvidia_driver')
    old = (profile.get('module_versions') or {}).get('nvidia_peermem')
    if not driver or not old or 'nvidia_peermem' not in profile.get('modules', []):
        raise ValueError('profile %s has no loaded nvidia_peermem' % profile.get('name'))
    new = '570.133.20' if driver['version'] != '570.133.20' else '575.57.08'
    driver['version'] = new
    profile['module_files'] = {'nvidia': new, 'nvidia-peermem': new}
    return {'module': 'nvidia_peermem', 'old': old, 'new': new}


# A ConnectX whose mlx5_core probe failed, as the kernel logs it (pocopico/rp-ext issue 129, ConnectX-4 Lx:
# tests/fixtures/public/kmsg/mlx5_probe_failed.txt): the function stays on the bus with no driver bound.
MLX5_PROBE_FAILED = ('mlx5_core {bdf}: firmware version: 28.41.1000', 'mlx5_core {bdf}: handle_hca_cap failed',
                     'mlx5_core {bdf}: mlx5_load_one failed with error code -22', 'mlx5_core: probe of {bdf} failed with error -22')


def rdma_unbound(profile, target):
    hca = _hca(profile, target)
    dev = _pci_by_bdf(profile).get(hca['pci'])
    if dev is None or dev.get('vendor') != 0x15b3:
        raise ValueError('profile %s: HCA %s is no Mellanox PCI function' % (profile.get('name'), hca['name']))
    profile['hcas'] = [h for h in profile['hcas'] if h is not hca]
    dev['driver'] = None
    profile['kmsg'] = list(profile.get('kmsg') or []) + [
        [6 if index == 0 else 3, 5.3 + index * 0.1, line.format(bdf=hca['pci'])] for index, line in enumerate(MLX5_PROBE_FAILED)]
    return {'hca': hca['name'], 'bdf': hca['pci']}


def gpus_outnumber_rails(profile, target):
    # One compute HCA fewer than GPUs on a rail-optimised node (every node of the fleet alike: the fleet
    # comparison sees nothing): its GPU reaches its neighbour's NIC, which then serves two.
    gpus = _gpus(profile)
    rails = [h for h in profile.get('hcas', []) if h['ports']]
    if len(rails) < 2 or len(rails) < len(gpus):
        raise ValueError('profile %s has fewer compute rails than GPUs already' % profile.get('name'))
    return hca_missing(profile, target)


def _fault(mutate, description, expect):
    return {'mutate': mutate, 'description': description, 'expect': expect}


def dcbx_willing_host(profile, target):
    # lldpad runs on the node and sends willing PFC and ETS TLVs (lldptool -T -V PFC willing=yes):
    # the switch's next LLDP exchange sets the port, over what roce_qos set.
    _roce_qos(profile, lldp_willing=True)
    return {}


def dcbx_firmware(profile, target):
    # The NIC's firmware runs DCBX (mlnx_qos -d fw: 'DCBX mode: Firmware controlled').
    _roce_qos(profile, dcbx_mode='firmware')
    return {}


# name -> the mutation, what it is in words, and what the facts must then show.
CATALOG = {
    'port_down': _fault(port_down, 'An HCA port is down (State Down, Physical state Disabled).', [
        ("ib.devices[?name=='{hca}'] | [0].ports[0].state", 'DOWN'),
        ("ib.devices[?name=='{hca}'] | [0].ports[0].phys_state", 'Disabled'),
    ]),
    'port_polling': _fault(port_polling, 'An HCA port has no link partner (DOWN / Polling).', [
        ("ib.devices[?name=='{hca}'] | [0].ports[0].state", 'DOWN'),
        ("ib.devices[?name=='{hca}'] | [0].ports[0].phys_state", 'Polling'),
    ]),
    'rate_degraded_1x': _fault(rate_degraded_1x, 'A link trained at 1X width: a quarter of its rate.', [
        ("ib.devices[?name=='{hca}'] | [0].ports[0].width", '1X'),
    ]),
    # gdr_ready stays true where dma-buf stands in (NVIDIA open module, AMD): the diagnosis
    # weighs that; the facts must show the missing module and the undetected path.
    'peermem_not_loaded': _fault(peermem_not_loaded, 'The GPU peer-memory module is not loaded.', [
        ("contains(gdr.peer_memory.modules_loaded, '{module}')", False),
        ("contains(keys(gdr.peer_memory.clients), '{client}')", False),
        ("gdr.peer_memory.paths.*.detected | contains(@, `false`)", True),
    ]),
    'mm_kobj_not_exported': _fault(
        mm_kobj_not_exported,
        'Seed 000: the kernel does not export mm_kobj, OFED was built without HAVE_MM_KOBJ_EXPORTED, '
        'memory_peers is missing.', [
            ("gdr.kernel.mm_kobj_exported", False),
            ("gdr.ofed.have_mm_kobj_exported", False),
            ("gdr.peer_memory.memory_peers_present", False),
        ]),
    'ofed_stale_build': _fault(
        ofed_stale_build,
        'OFED built against another kernel: this kernel exports mm_kobj but OFED lacks HAVE_MM_KOBJ_EXPORTED.', [
            ("gdr.kernel.mm_kobj_exported", True),
            ("gdr.ofed.have_mm_kobj_exported", False),
            ("gdr.peer_memory.memory_peers_present", False),
        ]),
    'acs_enabled': _fault(acs_enabled, 'ACS redirects P2P on the downstream port above a GPU.', [
        ("gdr.acs[?pci_address=='{bridge}'] | [0].redirects_p2p", True),
        ("gdr.topology[?acs_redirect] | length(@) > `0`", True),
        ("gdr.gdr_ready", False),
    ]),
    'cross_numa': _fault(cross_numa, 'An HCA sits on the other NUMA node than the GPU it served.', [
        ("gdr.topology[?nic=='{hca}' && distance=='SYS'] | length(@) > `0`", True),
        ("gdr.gpus[?pci_address=='{gpu_bdf}'] | [0].nearest_nic == '{hca}'", False),
    ]),
    'roce_no_v2_gid': _fault(roce_no_v2_gid, 'A RoCE port has only RoCE v1 GIDs (no v2 entry for NCCL_IB_GID_INDEX).', [
        ("ib.devices[?name=='{hca}'] | [0].ports[0].gids[?type=='RoCE v2'] | length(@)", 0),
        ("ib.devices[?name=='{hca}'] | [0].ports[0].gids | length(@) > `0`", True),
    ]),
    'error_counters': _fault(error_counters, 'Symbol and receive errors on a port, link_downed saturated at 255.', [
        ("ib.devices[?name=='{hca}'] | [0].ports[0].counters.symbol_error", 4137),
        ("contains(ib.devices[?name=='{hca}'] | [0].ports[0].counters_saturated, 'link_downed')", True),
    ]),
    # The host layer (gdr_facts host): HOST_CPU_GOVERNOR, HOST_MEMLOCK_LIMITED, HOST_MODULES_NOT_PERSISTENT.
    'governor_powersave': _fault(governor_powersave, 'Every CPU runs the powersave governor (seed 002 before cpupower).', [
        ("gdr.host.cpu_governors.powersave == `{cpus}`", True),
        ("gdr.host.cpu_governors.performance", None),
    ]),
    'memlock_limited': _fault(memlock_limited, 'Locked memory limited to 64 KiB (the pre-5.16 kernel default), no limits.d entry.', [
        ("gdr.host.memlock.soft", 65536),
        ("gdr.host.memlock.hard", 65536),
        ("length(gdr.host.memlock.limits_conf[?bytes=='unlimited'])", 0),
    ]),
    'services_memlock_8m': _fault(services_memlock_8m, 'A system.conf.d drop-in sets DefaultLimitMEMLOCK=8M: services and their jobs get 8 MiB.', [
        ("gdr.host.memlock.systemd[-1].soft", 8388608),
        ("gdr.host.memlock.systemd[-1].file == '{file}'", True),
    ]),
    'modules_not_persistent': _fault(
        modules_not_persistent, 'A module loaded now (modprobe) that no modules-load.d file lists: gone after a reboot.', [
            ("contains(gdr.host.modules_loaded, '{module}')", True),
            ("contains(keys(gdr.host.modules_persistent), '{module}')", False),
        ]),
    # Faults only a comparison with the node's peers can see (plugin_utils/diagnosis/_fleet.py).
    'hca_missing': _fault(hca_missing, 'An HCA did not enumerate: absent from the PCI tree and /sys/class/infiniband.', [
        ("length(ib.devices[?name=='{hca}'])", 0),
        ("length(gdr.nics[?name=='{hca}'])", 0),
        ("length(gdr.topology[?nic=='{hca}'])", 0),
    ]),
    'fw_mismatch': _fault(fw_mismatch, 'The node\'s HCAs of one model run older firmware than its peers.', [
        ("ib.devices[?name=='{hca}'] | [0].fw_ver == '{fw_ver}'", True),
    ]),
    # PCIe links and the IOMMU (module_utils/_pcie.py): PCIE_LINK_DEGRADED, HOST_IOMMU_TRANSLATED.
    'pcie_link_degraded': _fault(pcie_link_degraded, 'An HCA\'s PCIe link trained half its lanes (x16 -> x8).', [
        ("gdr.pcie_links[?downstream=='{bdf}'] | [0].width == `{width}`", True),
        ("gdr.pcie_links[?downstream=='{bdf}'] | [0].width_degraded", True),
        ("gdr.pcie_links[?downstream=='{bdf}'] | [0].degraded", True),
    ]),
    'pcie_bridge_slow': _fault(pcie_bridge_slow, 'The PCIe switch above an HCA trained a generation down (32 -> 16 GT/s).', [
        ("gdr.pcie_links[?downstream=='{bridge}'] | [0].speed_degraded", True),
        ("contains(gdr.pcie_links[?downstream=='{bridge}'] | [0].nics, '{hca}')", True),
    ]),
    'gpu_link_narrow': _fault(gpu_link_narrow, 'A GPU\'s PCIe link trained half its lanes (x16 -> x8).', [
        ("gdr.pcie_links[?downstream=='{gpu_bdf}'] | [0].kind", 'gpu'),
        ("gdr.pcie_links[?downstream=='{gpu_bdf}'] | [0].width_degraded", True),
    ]),
    'iommu_translated': _fault(iommu_translated, 'The IOMMU translates the DMA of every device (no iommu=pt).', [
        ("gdr.iommu.mode", 'translated'),
        ("gdr.iommu.cmdline_mode", None),
        ("length(gdr.iommu.translated) > `0`", True),
    ]),
}
CATALOG.update({
    'roce_trust_pcp': _fault(roce_trust_pcp, 'The RoCE ports trust PCP: untagged RoCE v2 traffic lands on priority 0.', [
        ("roce.ports[0].trust", 'pcp')]),
    'roce_pfc_off': _fault(roce_pfc_off, 'PFC enabled on no priority of the RoCE ports.', [
        ("roce.ports[0].pfc", [])]),
    'roce_ecn_off': _fault(roce_ecn_off, 'ECN (roce_np, roce_rp) off for the RDMA priority.', [
        ("roce.ports[0].ecn_np.\"3\"", False), ("roce.ports[0].ecn_rp.\"3\"", False)]),
    'roce_cnp_lossy': _fault(roce_cnp_lossy, 'CNPs sent on priority 0 (no PFC, not strict).', [
        ("roce.ports[0].cnp_prio", 0)]),
    'roce_tos_default': _fault(roce_tos_default, 'No RDMA CM ToS set: the kernel default 0 lands on a lossy priority.', [
        ("roce.ports[0].roce_tos", 0)]),
    'roce_pfc_prio4': _fault(roce_pfc_prio4, 'Lossless on priority 4 where the peers use 3 (consistent, but unlike the fleet).', [
        ("roce.ports[0].pfc", [4])]),
    'roce_mtu_low': _fault(roce_mtu_low, 'A RoCE netdev at MTU 1500: RDMA MTU 1024.', [
        (_ROCE_PORT0 + ".netdev_mtu", 1500), (_ROCE_PORT0 + ".active_mtu", 1024)]),
    'roce_congestion': _fault(roce_congestion, 'RoCE loss counters: out-of-sequence, sequence errors, ACK timeouts.', [
        (_ROCE_PORT0 + ".counters.out_of_sequence", 48211)]),
    'dcbx_willing_host': _fault(dcbx_willing_host, 'lldpad sends willing PFC/ETS TLVs: the switch overrides what roce_qos set.', [
        ("roce.ports[0].dcbx.lldp_willing", True), ("roce.ports[0].dcbx.manager", 'switch')]),
    'dcbx_firmware': _fault(dcbx_firmware, 'The NIC firmware runs DCBX (Firmware controlled): the switch overrides the host.', [
        ("roce.ports[0].dcbx.mode", 'firmware'), ("roce.ports[0].dcbx.manager", 'switch')]),
})


CATALOG.update({
    'peermem_driver_mismatch': _fault(
        peermem_driver_mismatch, 'The NVIDIA driver was updated and reloaded while nvidia_peermem of the old build stayed loaded.', [
            ("gdr.peer_memory_build[?module=='{module}'] | [0].state", 'mismatch'),
            ("gdr.peer_memory_build[?module=='{module}'] | [0].loaded_version == '{old}'", True),
            ("gdr.peer_memory_build[?module=='{module}'] | [0].driver_version == '{new}'", True),
            ("gdr.peer_memory_build[?module=='{module}'] | [0].file_version == '{new}'", True),
        ]),
    'rdma_unbound': _fault(
        rdma_unbound, 'A ConnectX function whose mlx5_core probe failed: on the PCI bus, no driver, no RDMA device.', [
            ("gdr.rdma_unbound[?bdf=='{bdf}'] | [0].driver", None),
            ("gdr.rdma_unbound[?bdf=='{bdf}'] | [0].log[-1] == 'mlx5_core: probe of {bdf} failed with error -22'", True),
            ("contains(ib.devices[*].name, '{hca}')", False),
        ]),
    'gpus_outnumber_rails': _fault(
        gpus_outnumber_rails, 'A rail-optimised node with one compute HCA fewer than GPUs (on every node alike).', [
            ("contains(ib.devices[*].name, '{hca}')", False),
        ]),
})


def applies(profile, name):
    """Can fault ``name`` be injected into ``profile``?"""
    try:
        CATALOG[name]['mutate'](copy.deepcopy(profile), None)
    except (ValueError, KeyError, IndexError, TypeError):
        return False
    return True


def apply(profile, name, target=None):
    """Mutate ``profile`` in place; returns the values the expectations are filled with."""
    if name not in CATALOG:
        raise ValueError('unknown fault %s (known: %s)' % (name, ', '.join(sorted(CATALOG))))
    profile.setdefault('faults', []).append(name)
    return CATALOG[name]['mutate'](profile, target) or {}


def expectations(name, context):
    return [(expr.format(**context), value) for expr, value in CATALOG[name]['expect']]


# ---------------------------------------------------------------------------- the GPUs' own state
# Keys of the profile's gpu_state (tests/sim/tools_gpu.py), which the nvidia-smi stand-in and the
# simulated kernel log print in the real formats. Only on NVIDIA GPUs (the stand-in is nvidia-smi).
def _nvidia_gpu(profile, target):
    gpus = [dev['bdf'] for dev in profile.get('pci', []) if dev.get('kind') == 'gpu' and int(dev.get('vendor', 0x10de)) == 0x10de]
    if not gpus:
        raise ValueError('profile %s has no NVIDIA GPU' % profile.get('name'))
    gpu = target or sorted(gpus)[-1]
    if gpu not in gpus:
        raise ValueError('no NVIDIA GPU %s in profile %s' % (gpu, profile.get('name')))
    return gpu, profile.setdefault('gpu_state', {})


def gpu_busy(profile, target):
    gpu, state = _nvidia_gpu(profile, target)
    # As on the real node (tests/fixtures/real/h200x2/state/nvsmi_apps_busy.txt): python3 running matrix products.
    state.setdefault('processes', []).append({'bdf': gpu, 'pid': 3294, 'name': 'python3', 'used_mib': 1644, 'uid': 1000})
    return {'gpu_bdf': gpu}


def gpu_throttled(profile, target):
    gpu, state = _nvidia_gpu(profile, target)
    state.setdefault('clock_reasons', {})[gpu] = ['hw_slowdown', 'hw_thermal_slowdown']
    return {'gpu_bdf': gpu}


def gpu_nvlink_down(profile, target):
    gpu, state = _nvidia_gpu(profile, target)
    device = int(next(dev for dev in profile['pci'] if dev['bdf'] == gpu).get('device', 0x2330))
    if not tools_gpu.MODELS.get(device, tools_gpu.DEFAULT_MODEL)[1]:
        raise ValueError('GPU %s of profile %s has no NVLink' % (gpu, profile.get('name')))
    state.setdefault('nvlink_inactive', {})[gpu] = [3, 5]
    return {'gpu_bdf': gpu}


def gpu_xid79(profile, target):
    gpu, state = _nvidia_gpu(profile, target)
    state.setdefault('xid', []).append({'bdf': gpu, 'xid': 79, 'text': 'pid=4242, name=python3, GPU has fallen off the bus.'})
    return {'gpu_bdf': gpu}


def gpu_remap_pending(profile, target):
    gpu, state = _nvidia_gpu(profile, target)
    state.setdefault('remapped_rows_pending', []).append(gpu)
    return {'gpu_bdf': gpu}


CATALOG.update({
    'gpu_busy': _fault(gpu_busy, 'Another job (python3, 1644 MiB) runs on a GPU.', [
        ("gpu.processes[?bdf=='{gpu_bdf}'] | [0].name", 'python3')]),
    'gpu_throttled': _fault(gpu_throttled, 'A GPU\'s clocks held down by hardware (thermal) slowdown.', [
        ("contains(gpu.gpus[?bdf=='{gpu_bdf}'] | [0].clock_reasons, 'hw_slowdown')", True)]),
    'gpu_nvlink_down': _fault(gpu_nvlink_down, 'Two NVLinks of a GPU inactive (links 3 and 5).', [
        ("gpu.gpus[?bdf=='{gpu_bdf}'] | [0].nvlink.inactive", [3, 5])]),
    'gpu_xid79': _fault(gpu_xid79, 'XID 79 in the kernel log: a GPU fell off the bus.', [
        ("gpu.xid[?bdf=='{gpu_bdf}'] | [0].xid", 79)]),
    'gpu_remap_pending': _fault(gpu_remap_pending, 'A row remap pending on a GPU (applied at the next reset).', [
        ("gpu.gpus[?bdf=='{gpu_bdf}'] | [0].remapped_rows_pending", True)]),
})


# ---------------------------------------------------------------------------- faults under load
# They show in no fact at rest: only in the counters each pair test's window reads (the PCIe AER files, the
# mlx5 congestion counters, ethtool -S, the PCIe link sampled during the test), which tests/sim/tools_window.py
# moves at each perftest run of the simulated node. So they are not in CATALOG (whose faults the facts show);
# the accuracy benchmark (tests/bench/_accuracy_window.py) and the window tests inject them.

def _window(profile, target, spec, roce=False):
    hca = (_roce_hcas(profile)[0] if target is None else _hca(profile, target)) if roce else _hca(profile, target)
    profile.setdefault('window', {})[hca['name']] = spec
    return {'hca': hca['name'], 'bdf': hca['pci']}


def pcie_replays(profile, target):
    # Correctable errors by thousands per test (a marginal riser or slot): the HCA counts receiver and link-layer
    # errors, the port above it (its link partner) the replays it had to send.
    return _window(profile, target, {'aer': {'RxErr': 40, 'BadTLP': 2600, 'BadDLLP': 1400, 'Rollover': 3, 'Timeout': 800},
                                     'aer_link': {'BadDLLP': 900, 'Timeout': 450}})


def pcie_retraining(profile, target):
    # The link drops to Gen4 and back while the test runs (a link that retrains many times a minute).
    return _window(profile, target, {'retrain': [[32.0, 16], [16.0, 16], [32.0, 16]]})


def pfc_pause_storm(profile, target):
    # The switch pauses the port's priority 3 for 30 % of the test, and the NIC reports storm warnings.
    return _window(profile, target, {'pause': {'rx': {3: 0.3}}, 'storm': 2}, roce=True)


def cc_unhandled(profile, target):
    # The receivers send CNPs, this HCA (as sender) handles none: its reaction point is off or the CNPs are dropped.
    return _window(profile, target, {'cc': 'unhandled'}, roce=True)


def lossless_loss(profile, target):
    # Go-back-N on a PFC-enabled priority: a switch port that drops what it should pause.
    return _window(profile, target, {'loss': {'out_of_sequence': 3100, 'packet_seq_err': 120, 'local_ack_timeout_err': 8}},
                   roce=True)


def congestion_healthy(profile, target):
    # Healthy congestion (the trap): CNPs sent and handled, a little pause time, no loss, bandwidth within its threshold.
    return _window(profile, target, {'cc': 'healthy', 'pause': {'tx': {3: 0.02}}}, roce=True)


# name -> (mutation, words, the code the window rules must give: None for the healthy trap).
WINDOW_FAULTS = {
    'pcie_replays': (pcie_replays, 'PCIe AER correctable errors by thousands per test on an HCA whose link trained fine.',
                     'PCIE_ERRORS_UNDER_LOAD'),
    'pcie_retraining': (pcie_retraining, 'An HCA\'s PCIe link changes speed while the tests run.', 'PCIE_LINK_RETRAINING'),
    'pfc_pause_storm': (pfc_pause_storm, 'The switch pauses priority 3 of a RoCE port 30 % of the test; storm warnings.',
                        'ROCE_PFC_PAUSE_STORM'),
    'cc_unhandled': (cc_unhandled, 'CNPs sent to a RoCE HCA that handles none of them.', 'ROCE_CC_NOT_WORKING'),
    'lossless_loss': (lossless_loss, 'RoCE loss counters rise under load on the PFC-enabled priority.', 'ROCE_LOSSLESS_LOSS'),
    'congestion_healthy': (congestion_healthy, 'Healthy congestion: CNPs sent and handled, 2 % pause time, no loss.', None),
}


def apply_window(profile, name, target=None):
    """Inject a WINDOW_FAULTS fault into ``profile``; returns {'hca', 'bdf'} of its target."""
    if name not in WINDOW_FAULTS:
        raise ValueError('unknown window fault %s (known: %s)' % (name, ', '.join(sorted(WINDOW_FAULTS))))
    profile.setdefault('faults', []).append(name)
    return WINDOW_FAULTS[name][0](profile, target)
