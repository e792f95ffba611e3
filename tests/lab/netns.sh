#!/usr/bin/env bash
# A lab of N Linux "nodes" reachable over real SSH, without Docker or VMs.
#
#   tests/lab/netns.sh up N [ROOTDIR_PREFIX]   start nodes 1..N (stops any old lab first)
#   tests/lab/netns.sh down                    stop every node, remove the network
#   tests/lab/netns.sh kill-node K             kill node K's processes (a dead node)
#
# Each node is a network namespace gf-nodeK plugged into the bridge gfbr0
# (10.251.0.0/24, the host is 10.251.0.1, node K is 10.251.0.(10+K)), with a
# private copy-on-write root: an overlay of the host's / whose writes land in a
# tmpfs that lives as long as the node, so roles that write /etc on a node
# leave the host untouched. Each node runs its own sshd on its address,
# key-only, root allowed, with a lab key in $LAB_DIR (default /tmp/gf-lab).
#
# If ROOTDIR_PREFIX is given and ${ROOTDIR_PREFIX}K is a directory (e.g. a
# simulator snapshot root), node K gets that tree at the real paths: its
# sys/<dir> subtrees are merged over /sys/<dir> with a read-only overlay
# (sysfs refuses mkdir, but an overlay over /sys/class keeps net/ and adds
# infiniband/), everything else except proc/ is copied into the node's
# writable layer, and the tree itself is also bind-mounted at its own path.
# proc/ cannot be overlaid (procfs): modules read it through their `root`
# option instead.
#
# `up` prints one line per node, "nodeK 10.251.0.(10+K)", and writes:
#   $LAB_DIR/id_ed25519   private key authorised for root on every node
#   $LAB_DIR/ssh_config   for `ssh -F`: Host nodeK -> address, user, key, no
#                         host key checks (the nodes' host key is throw-away)
#   $LAB_DIR/nodes        the same lines as printed
#   $LAB_DIR/log/         each node's sshd log
# so an inventory needs, per node: ansible_host=<address> ansible_user=root
# ansible_ssh_private_key_file=$LAB_DIR/id_ed25519
# ansible_ssh_common_args='-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null'
#
# Needs root (namespaces, mounts, bridge). Per node: ip netns + a veth into the bridge, then
# unshare --uts --mount, a tmpfs+overlay copy-on-write root (lowerdir=/), proc, /sys and /dev,
# chroot and sshd bound to the node address (UsePAM no, StrictModes no, key-only root login).
# Only traffic to this private range is ever generated.

set -euo pipefail

SELF=$(readlink -f "${BASH_SOURCE[0]}")
# shellcheck source-path=SCRIPTDIR/../..
# shellcheck source=scripts/lib.sh
. "$(dirname "$SELF")/../../scripts/lib.sh"

export LAB_DIR=${LAB_DIR:-/tmp/gf-lab}
BRIDGE=gfbr0
NET=10.251.0
NETNS_PREFIX=gf-node
VETH_PREFIX=gf-veth
# Addresses are 10.251.0.(10+K) and .255 is broadcast.
MAX_NODES=244
SSHD=/usr/sbin/sshd

usage() {
    sed -n '4,6s/^# \{0,1\}//p' "$SELF" >&2
    exit 2
}

node_ip() {
    printf '%s.%d\n' "$NET" $((10 + $1))
}

require_root() {
    ((EUID == 0)) || gf_die "the SSH lab needs root (network namespaces, mounts, a bridge)"
}

# Namespaces of this lab, whatever N the last `up` used.
lab_netns() {
    ip netns list | awk -v p="^${NETNS_PREFIX}[0-9]+\$" '$1 ~ p { print $1 }'
}

# Kill every process in a node's namespace: sshd and the sessions it forked.
# Once the last one is gone the node's mount namespace and tmpfs go with it.
kill_netns_pids() {
    local ns=$1 pids i
    mapfile -t pids < <(ip netns pids "$ns" 2>/dev/null)
    ((${#pids[@]})) || return 0
    kill -TERM "${pids[@]}" 2>/dev/null || true
    for ((i = 0; i < 20; i++)); do
        mapfile -t pids < <(ip netns pids "$ns" 2>/dev/null)
        ((${#pids[@]})) || return 0
        sleep 0.1
    done
    kill -KILL "${pids[@]}" 2>/dev/null || true
    for ((i = 0; i < 20; i++)); do
        mapfile -t pids < <(ip netns pids "$ns" 2>/dev/null)
        ((${#pids[@]})) || return 0
        sleep 0.1
    done
    gf_log "warning: processes still in $ns after SIGKILL: ${pids[*]}"
}

cmd_down() {
    require_root
    local ns link
    for ns in $(lab_netns); do
        kill_netns_pids "$ns"
        # Deleting the namespace destroys its end of the veth, and with it the
        # host end.
        ip netns delete "$ns" || gf_log "warning: could not delete netns $ns"
    done
    # Host ends left over from a half-finished `up`.
    for link in $(ip -o link show | awk -F': ' -v p="^${VETH_PREFIX}[0-9]+(@|\$)" '$2 ~ p { sub(/@.*/, "", $2); print $2 }'); do
        ip link delete "$link" 2>/dev/null || true
    done
    if ip link show "$BRIDGE" >/dev/null 2>&1; then
        ip link delete "$BRIDGE"
    fi
    # Ansible's ssh ControlPersist masters would otherwise linger for their
    # timeout holding sockets to addresses that no longer exist. Needs
    # CONFIG_INET_DIAG_DESTROY; harmless where it is missing.
    ss -K dst "$NET.0/24" >/dev/null 2>&1 || true
    rm -rf "${LAB_DIR:?}"/node[0-9]*
}

cmd_kill_node() {
    require_root
    local k=${1:-}
    [[ $k =~ ^[0-9]+$ ]] || usage
    ip netns list | awk '{ print $1 }' | grep -qx "$NETNS_PREFIX$k" ||
        gf_die "no node $k (netns $NETNS_PREFIX$k) is up"
    # The namespace and its address stay, so the node answers with "connection
    # refused" on port 22, like a host whose sshd died.
    kill_netns_pids "$NETNS_PREFIX$k"
}

# Runs inside `ip netns exec gf-nodeK unshare --uts --mount`: builds the
# node's root and starts its sshd there. The mounts are private to this mount
# namespace, so the host sees none of them.
node_boot() {
    local k=$1 n=$2 snap=$3
    local name=node$k ip base merged d sub i
    ip=$(node_ip "$k")
    base=$LAB_DIR/$name
    merged=$base/merged

    hostname "$name"

    # The upper layer must be a filesystem other than /: overlayfs refuses an
    # upperdir inside its own lowerdir ("overlapping layers"). A tmpfs also
    # makes every node start clean.
    mount -t tmpfs -o mode=0755 "gf-lab-$name" "$base"
    mkdir "$base/upper" "$base/work" "$merged"
    if [[ -n $snap ]]; then
        tar -C "$snap" --exclude=./sys --exclude=./proc -cf - . | tar -C "$base/upper" -xf -
    fi
    mount -t overlay overlay \
        -o "lowerdir=/,upperdir=$base/upper,workdir=$base/work" "$merged"

    mount -t proc proc "$merged/proc"
    # /sys here is the sysfs `ip netns exec` mounted for this namespace, so
    # /sys/class/net shows the node's own interfaces.
    mount --rbind /sys "$merged/sys"
    mount --rbind /dev "$merged/dev"
    mount -t tmpfs -o mode=0755 "gf-lab-$name-run" "$merged/run"
    mkdir -m 0755 "$merged/run/sshd"

    if [[ -n $snap ]]; then
        if [[ -d $snap/sys ]]; then
            for d in "$snap"/sys/*/; do
                sub=$(basename "$d")
                if [[ ! -d /sys/$sub ]]; then
                    gf_log "warning: $name: /sys/$sub does not exist, $d not merged"
                    continue
                fi
                mount -t overlay overlay -o "lowerdir=$d:/sys/$sub" "$merged/sys/$sub"
            done
        fi
        mkdir -p "$merged$snap"
        mount --rbind "$snap" "$merged$snap"
    fi

    # sshd logs to the host-visible lab directory, not to a syslog nobody runs.
    mkdir -p "$merged$LAB_DIR/log"
    mount --bind "$LAB_DIR/log" "$merged$LAB_DIR/log"

    # A fresh root home, as on a new machine: through the overlay the node
    # would see the host's, whose dotfiles may put e.g. a pyenv shim first on
    # PATH and derail Ansible's interpreter discovery. The lab key lives here,
    # so the host's /root/.ssh is never read or written.
    mount -t tmpfs -o mode=0700 "gf-lab-$name-root" "$merged/root"
    for d in .bashrc .profile; do
        if [[ -f /usr/share/base-files/dot$d ]]; then
            cp /usr/share/base-files/dot$d "$merged/root/$d"
        elif [[ -f /etc/skel/$d ]]; then
            cp "/etc/skel/$d" "$merged/root/$d"
        fi
    done
    if [[ -n $snap && -d $snap/root ]]; then
        cp -a "$snap/root/." "$merged/root/"
    fi
    install -d -m 0700 "$merged/root/.ssh"
    install -m 0600 "$LAB_DIR/id_ed25519.pub" "$merged/root/.ssh/authorized_keys"
    install -m 0600 "$LAB_DIR/ssh_host_ed25519_key" "$merged/etc/ssh/gf_lab_host_ed25519_key"
    printf '%s\n' "$name" >"$merged/etc/hostname"
    {
        grep -v "[[:space:]]${NETNS_PREFIX}[0-9]" /etc/hosts || true
        for ((i = 1; i <= n; i++)); do
            printf '%s\tnode%d %s%d\n' "$(node_ip "$i")" "$i" "$NETNS_PREFIX" "$i"
        done
    } >"$merged/etc/hosts"

    # UsePAM no: there is no PAM session to open in a chroot without logind.
    # StrictModes no: the lab lives under world-writable /tmp.
    # MaxStartups/MaxSessions: ansible forks and ControlPersist multiplexing.
    cat >"$merged/etc/ssh/gf_lab_sshd_config" <<EOF
ListenAddress $ip
Port 22
HostKey /etc/ssh/gf_lab_host_ed25519_key
PidFile /run/sshd.pid
UsePAM no
StrictModes no
PermitRootLogin prohibit-password
PubkeyAuthentication yes
AuthorizedKeysFile .ssh/authorized_keys
PasswordAuthentication no
KbdInteractiveAuthentication no
UseDNS no
PrintMotd no
MaxStartups 100:30:200
MaxSessions 50
AcceptEnv LANG LC_*
Subsystem sftp internal-sftp
EOF

    chroot "$merged" "$SSHD" -t -f /etc/ssh/gf_lab_sshd_config
    # sshd daemonises; it keeps this mount namespace alive after we return.
    chroot "$merged" "$SSHD" -f /etc/ssh/gf_lab_sshd_config -E "$LAB_DIR/log/$name-sshd.log"
}

# A TCP connect through the bridge proves the whole path, not just a listening
# socket. sshd logs each probe as "kex_exchange_identification: Connection
# closed by remote host"; that line is expected.
wait_ssh_port() {
    local ip=$1 i
    for ((i = 0; i < 100; i++)); do
        if timeout 1 bash -c "exec 3<>/dev/tcp/$ip/22" 2>/dev/null; then
            return 0
        fi
        sleep 0.1
    done
    return 1
}

up_failed() {
    local rc=$?
    trap - EXIT
    if ((rc != 0)); then
        gf_log "error: lab did not come up (exit $rc); removing what was created"
        gf_log "       sshd logs, if any: $LAB_DIR/log/"
        cmd_down || true
    fi
    exit "$rc"
}

cmd_up() {
    require_root
    local n=${1:-} prefix=${2:-}
    local k ns veth ip snap
    if ! [[ $n =~ ^[0-9]+$ ]] || ((n < 1 || n > MAX_NODES)); then
        gf_die "N must be a number from 1 to $MAX_NODES, got '$n'"
    fi

    local tool
    for tool in ip unshare chroot ss ssh-keygen tar; do
        command -v "$tool" >/dev/null || gf_die "$tool is missing"
    done
    [[ -x $SSHD ]] || gf_apt_install openssh-server
    [[ -x $SSHD ]] || gf_die "$SSHD is missing after installing openssh-server"

    # The range must be ours alone: anything else routing it would get the
    # lab's traffic or break it.
    if ip -4 route show "$NET.0/24" | grep -v "dev $BRIDGE" | grep -q .; then
        gf_die "$NET.0/24 is already routed on this host: $(ip -4 route show "$NET.0/24")"
    fi

    cmd_down
    trap up_failed EXIT

    install -d -m 0700 "$LAB_DIR"
    install -d -m 0755 "$LAB_DIR/log"
    # Keys survive `down`, so an inventory written once keeps working.
    if [[ ! -f $LAB_DIR/id_ed25519 ]]; then
        ssh-keygen -q -t ed25519 -N '' -C gf-lab -f "$LAB_DIR/id_ed25519"
    fi
    if [[ ! -f $LAB_DIR/ssh_host_ed25519_key ]]; then
        ssh-keygen -q -t ed25519 -N '' -C gf-lab-host -f "$LAB_DIR/ssh_host_ed25519_key"
    fi

    ip link add "$BRIDGE" type bridge
    ip addr add "$NET.1/24" dev "$BRIDGE"
    ip link set "$BRIDGE" up

    for ((k = 1; k <= n; k++)); do
        ns=$NETNS_PREFIX$k
        veth=$VETH_PREFIX$k
        ip=$(node_ip "$k")
        snap=
        if [[ -n $prefix && -d $prefix$k ]]; then
            snap=$(readlink -f "$prefix$k")
        elif [[ -n $prefix ]]; then
            gf_log "warning: no $prefix$k; node$k gets the plain host root"
        fi

        ip netns add "$ns"
        ip link add "$veth" type veth peer name eth0 netns "$ns"
        ip link set "$veth" master "$BRIDGE" up
        ip -n "$ns" link set lo up
        ip -n "$ns" addr add "$ip/24" dev eth0
        ip -n "$ns" link set eth0 up

        mkdir -p "$LAB_DIR/node$k"
        ip netns exec "$ns" unshare --uts --mount --propagation private -- \
            "$SELF" __boot "$k" "$n" "$snap" ||
            gf_die "node$k did not start (see above, and $LAB_DIR/log/node$k-sshd.log)"
    done

    for ((k = 1; k <= n; k++)); do
        wait_ssh_port "$(node_ip "$k")" ||
            gf_die "node$k: nothing listens on $(node_ip "$k"):22; see $LAB_DIR/log/node$k-sshd.log"
    done

    {
        for ((k = 1; k <= n; k++)); do
            printf 'Host node%d\n    HostName %s\n' "$k" "$(node_ip "$k")"
        done
        cat <<EOF
Host node* $NET.*
    User root
    IdentityFile $LAB_DIR/id_ed25519
    IdentitiesOnly yes
    StrictHostKeyChecking no
    UserKnownHostsFile /dev/null
    LogLevel ERROR
EOF
    } >"$LAB_DIR/ssh_config"
    for ((k = 1; k <= n; k++)); do
        printf 'node%d %s\n' "$k" "$(node_ip "$k")"
    done >"$LAB_DIR/nodes"

    trap - EXIT
    cat "$LAB_DIR/nodes"
}

case ${1:-} in
    up)
        shift
        (($# >= 1 && $# <= 2)) || usage
        cmd_up "$@"
        ;;
    down)
        (($# == 1)) || usage
        cmd_down
        ;;
    kill-node)
        (($# == 2)) || usage
        cmd_kill_node "$2"
        ;;
    __boot)
        # Internal: the per-node half of `up`, run inside the node's namespaces.
        shift
        node_boot "$@"
        ;;
    *)
        usage
        ;;
esac
