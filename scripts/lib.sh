# shellcheck shell=bash
# Helpers shared by the project's test scripts. Source it, do not run it:
#
#   . "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
#
# It turns on `set -euo pipefail` for the script that sources it, because every
# helper below assumes that a failed command stops the caller.
#
# Each workaround below says the fact it rests on, as measured on the project's CI
# machines (Debian 12, root, Python 3.11, no Docker, offline except PyPI and
# Debian's archive).

set -euo pipefail

# The collection root (the git checkout), wherever the caller was started from.
# GF_REPO overrides it (e.g. to try the helpers on another checkout); a plain
# REPO from the environment is ignored, as CI systems often set one.
REPO=${GF_REPO:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)}

gf_die() {
    printf 'error: %s\n' "$*" >&2
    exit 1
}

gf_log() {
    printf '%s\n' "$*" >&2
}

# gf_apt_install PKG... : install the Debian packages that are missing.
#
# Only as root and only through apt-get; anyone else gets told what to install,
# since the tests that need these packages (the SSH lab, sanity's shellcheck)
# cannot run without them anyway.
gf_apt_install() {
    local pkg missing=() log
    for pkg in "$@"; do
        # `dpkg -s` also succeeds for a package that was removed but left its
        # config files behind, so ask for the status itself.
        if [[ $(dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null) != installed ]]; then
            missing+=("$pkg")
        fi
    done
    ((${#missing[@]})) || return 0

    if ((EUID != 0)) || ! command -v apt-get >/dev/null; then
        gf_log "error: missing Debian packages: ${missing[*]}"
        gf_log "       install them as root: apt-get install -y ${missing[*]}"
        return 1
    fi

    gf_log "installing Debian packages: ${missing[*]}"
    log=$(mktemp "${TMPDIR:-/tmp}/gf-apt.XXXXXX")
    # A fresh image has no package lists, so a first failure is usually an
    # outdated or empty index: refresh it once and retry.
    if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
            "${missing[@]}" >"$log" 2>&1; then
        if ! { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
                --no-install-recommends "${missing[@]}"; } >"$log" 2>&1; then
            cat "$log" >&2
            rm -f "$log"
            gf_log "error: apt-get could not install: ${missing[*]}"
            return 1
        fi
    fi
    rm -f "$log"
}

# gf_venv : create or update the development virtualenv and put it first on PATH.
#
# The venv lives at ${GF_VENV:-$REPO/.venv}. Requirements are reinstalled only
# when requirements-dev.txt changed (a sha256 stamp inside the venv), so warm
# runs cost nothing. Molecule calls ansible-config, ansible-playbook and pytest
# by name, hence PATH and not just the venv's python.
gf_venv() {
    local venv=${GF_VENV:-$REPO/.venv}
    local python=${GF_PYTHON:-python3}
    local req=$REPO/requirements-dev.txt
    local stamp=$venv/.gf-requirements.sha256
    local want

    [[ -f $req ]] || gf_die "$req is missing"
    command -v "$python" >/dev/null || gf_die "no $python on PATH (set GF_PYTHON)"

    # A venv of gf_venv_compat (one ansible-core and the controller's requirements) is used as
    # it is: GF_VENV=<that venv> bash scripts/demo.sh runs the demo on that ansible-core, and
    # requirements-dev.txt (ansible-lint, molecule) would pull a newer ansible-core into it.
    if [[ -f $venv/$GF_COMPAT_STAMP ]]; then
        gf_log "using $venv as it is ($(_gf_venv_describe "$venv"))"
        _gf_venv_activate "$venv"
        return 0
    fi

    _gf_venv_create "$venv" "$python"

    # The interpreter is part of the stamp: a venv rebuilt on another Python
    # needs its packages again.
    want=$({ cat "$req"; "$venv/bin/python" -VV; } | sha256sum | cut -d' ' -f1)
    if [[ ! -f $stamp || $(<"$stamp") != "$want" ]]; then
        gf_log "installing $req into $venv"
        "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$req" ||
            gf_die "pip could not install $req into $venv"
        printf '%s\n' "$want" >"$stamp"
    fi

    _gf_venv_activate "$venv"
}

# The file that marks a venv of gf_venv_compat (and holds its requirements' stamp).
GF_COMPAT_STAMP=.gf-compat.sha256

# What the playbooks need on the controller besides ansible-core: meta/ee-requirements.txt, the list
# an execution environment gets from meta/execution-environment.yml (comments and blank lines dropped).
mapfile -t GF_CONTROLLER_REQUIREMENTS < <(sed -e 's/#.*//' -e 's/[[:space:]]*$//' -e '/^$/d' "$REPO/meta/ee-requirements.txt")

# gf_venv_compat DIR SPEC [PYTHON] : create or update a virtualenv at DIR with only the
# ansible-core of pip requirement SPEC (e.g. 'ansible-core==2.16.*') and
# GF_CONTROLLER_REQUIREMENTS, on PYTHON (default python3), and put it first on PATH.
#
# For running the playbooks on another ansible-core than the development venv's: the
# oldest that meta/runtime.yml promises, or the newest on a newer Python. Same stamp
# logic as gf_venv (the requirements and the interpreter), so warm runs cost nothing;
# gf_venv (demo.sh) uses such a venv as it is when GF_VENV names it.
gf_venv_compat() {
    local venv=${1:?gf_venv_compat DIR SPEC [PYTHON]} spec=${2:?gf_venv_compat DIR SPEC [PYTHON]}
    local python=${3:-python3}
    local stamp=$venv/$GF_COMPAT_STAMP
    local want

    command -v "$python" >/dev/null || gf_die "no $python (gf_venv_compat $venv)"
    _gf_venv_create "$venv" "$python"

    want=$({ printf '%s\n' "$spec" "${GF_CONTROLLER_REQUIREMENTS[@]}"; "$venv/bin/python" -VV; } |
        sha256sum | cut -d' ' -f1)
    if [[ ! -f $stamp || $(<"$stamp") != "$want" ]]; then
        rm -f "$stamp"
        gf_log "installing $spec into $venv"
        "$venv/bin/python" -m pip install -q --disable-pip-version-check "$spec" \
            "${GF_CONTROLLER_REQUIREMENTS[@]}" ||
            gf_die "pip could not install $spec into $venv"
        printf '%s\n' "$want" >"$stamp"
    fi

    _gf_venv_activate "$venv"
}

# gf_newest_python MIN : print the newest Python interpreter >= MIN (e.g. 3.12) that can
# make a virtualenv: python3.N on PATH or pyenv's ~/.pyenv/versions/3.N.*; nothing (and
# status 1) when there is none. Newer ansible-core releases need newer Pythons (2.20+:
# 3.12 or later), and users' systems do not necessarily have one.
gf_newest_python() {
    local min=${1:?gf_newest_python MIN} candidate version best='' best_version=''
    local pyenv_root=${PYENV_ROOT:-${HOME:-/nonexistent}/.pyenv}
    local candidates=()

    for candidate in python3.{30..10} "$pyenv_root"/versions/3.*/bin/python3; do
        if [[ $candidate == */* ]]; then
            [[ -x $candidate ]] || continue
        else
            candidate=$(command -v "$candidate" 2>/dev/null) || continue
        fi
        candidates+=("$candidate")
    done
    for candidate in "${candidates[@]}"; do
        version=$("$candidate" -c 'import ensurepip, sys, venv; print("%d.%d.%d" % sys.version_info[:3])' 2>/dev/null) ||
            continue
        printf '%s\n%s\n' "$min" "$version" | sort -C -V || continue
        if [[ -z $best_version ]] || ! printf '%s\n%s\n' "$version" "$best_version" | sort -C -V; then
            best=$candidate best_version=$version
        fi
    done
    [[ -n $best ]] || return 1
    printf '%s\n' "$best"
}

# _gf_venv_create VENV PYTHON : make a virtualenv at VENV with PYTHON unless there is one.
_gf_venv_create() {
    local venv=$1 python=$2

    [[ -x $venv/bin/python ]] && return 0
    # Debian and Ubuntu split venv's ensurepip into python3-venv; without it
    # `python3 -m venv` fails half-way and leaves a venv without pip.
    if ! "$python" -c 'import ensurepip, venv' 2>/dev/null; then
        if ((EUID == 0)) && command -v apt-get >/dev/null; then
            gf_apt_install python3-venv
        fi
        "$python" -c 'import ensurepip, venv' 2>/dev/null ||
            gf_die "$python has no venv/ensurepip module; install python3-venv"
    fi
    gf_log "creating virtualenv $venv"
    rm -rf "$venv"
    "$python" -m venv "$venv" || {
        rm -rf "$venv"
        gf_die "could not create a virtualenv at $venv with $python"
    }
}

# _gf_venv_describe VENV : 'ansible-core X on Python Y' of that venv.
_gf_venv_describe() {
    "$1/bin/python" -c 'import platform
try:
    from ansible.release import __version__
except ImportError:
    __version__ = "(none)"
print("ansible-core %s on Python %s" % (__version__, platform.python_version()))'
}

_gf_venv_activate() {
    local venv=$1
    case ":$PATH:" in
        *":$venv/bin:"*) ;;
        *) PATH=$venv/bin:$PATH ;;
    esac
    export PATH
    export VIRTUAL_ENV=$venv
}

# gf_collection_tree : copy the checkout into a fresh
# $TMPDIR/gf-collection.XXXXXX/ansible_collections/hpc/gpu_fabric and print
# that path.
#
# ansible-test only works on a tree under ansible_collections/<ns>/<name>, and
# running it inside the checkout would leave its output there; copying the
# files git knows about (tracked, plus new ones that are not ignored) gives the
# tree a release would contain. The caller removes the temp dir, e.g.
#   tree=$(gf_collection_tree); trap 'rm -rf "${tree%/ansible_collections/*}"' EXIT
gf_collection_tree() {
    local base dest venv_rel
    local venv=${GF_VENV:-$REPO/.venv}

    base=$(mktemp -d "${TMPDIR:-/tmp}/gf-collection.XXXXXX")
    dest=$base/ansible_collections/hpc/gpu_fabric
    mkdir -p "$dest"

    # Never ship a venv or ansible-test's output, even before .gitignore
    # names them: both are large and sanity would test every file in them.
    venv_rel=.venv/
    case $venv in
        "$REPO"/*) venv_rel=${venv#"$REPO"/}/ ;;
    esac

    git -C "$REPO" ls-files -z --cached --others --exclude-standard |
        sort -zu |
        while IFS= read -r -d '' path; do
            case $path in
                # .collections links back to the checkout (for ansible.cfg): the
                # tree is already a collection, and sanity rejects the loop.
                .venv/* | "$venv_rel"* | tests/output/* | .collections/*) continue ;;
            esac
            # A file deleted in the work tree but still in the index.
            [[ -e $REPO/$path || -L $REPO/$path ]] || continue
            printf '%s\0' "$path"
        done |
        tar -C "$REPO" --null --no-recursion -T - -cf - |
        tar -C "$dest" -xf -

    printf '%s\n' "$dest"
}

# gf_plain_output : no colour in anything the test command runs, so that its log is plain text.
#
# molecule colours its own output and, through ANSIBLE_FORCE_COLOR, every ansible-playbook it
# runs whenever TERM names an xterm, terminal or not (should_do_markup in molecule/ansi_output.py
# and enrich/console.py: PY_COLORS, CLICOLOR, FORCE_COLOR, ANSIBLE_FORCE_COLOR, then NO_COLOR
# wins); the molecule step was most of a CI log's lines, nearly all of them with ANSI escapes.
# NO_COLOR (https://no-color.org) also quiets ansible-lint (rich) and PY_COLORS pytest;
# ANSIBLE_NOCOLOR every ansible-playbook run.
gf_plain_output() {
    export NO_COLOR=1 PY_COLORS=0 ANSIBLE_NOCOLOR=1 ANSIBLE_FORCE_COLOR=0
}

# gf_ansible_test_home DIR : make DIR the home directory (HOME) of this shell, for ansible-test.
#
# ansible-test writes below ~/.ansible/test whatever --local says: the sanity tests' venvs
# (create_sanity_virtualenv in _internal/commands/sanity/__init__.py: ~/.ansible/test/venv),
# the get-pip.py cache (~/.ansible/test/cache, _util/target/setup/requirements.py, which
# gf_seed_get_pip fills), and these paths have no option, only HOME. Call it in a subshell.
# Its pip runs get HOME and no PIP_* or XDG_* variable (common_environment in _internal/util.py),
# so pip's user configuration (the package index of an offline machine) is copied along, and
# pip's download cache is linked, so that the wheels are not fetched again.
gf_ansible_test_home() {
    local home=${1:?gf_ansible_test_home DIR} real=${HOME:-} conf
    mkdir -p "$home"
    if [[ -n $real && $real != "$home" ]]; then
        for conf in .config/pip/pip.conf .pip/pip.conf; do
            if [[ -f $real/$conf ]]; then
                mkdir -p "$home/${conf%/*}"
                cp "$real/$conf" "$home/$conf"
            fi
        done
        if [[ -d $real/.cache/pip ]]; then
            mkdir -p "$home/.cache"
            ln -sfn "$real/.cache/pip" "$home/.cache/pip"
        fi
    fi
    # A venv's scripts start with '#!<venv>/bin/python', and Linux reads 127 characters of that
    # line (BINPRM_BUF_SIZE, include/uapi/linux/binfmts.h); ansible-test names its venvs
    # <home>/.ansible/test/venv/sanity.import.plugin/3.NN/<8 hex>/bin/python (65 more, and 2 for #!).
    if ((${#home} > 60)); then
        gf_log "warning: $home is long: ansible-test's venvs below it may get shebangs over 127 characters (set GF_ANSIBLE_TEST_HOME to a shorter directory)"
    fi
    export HOME=$home
}

# gf_seed_get_pip : let ansible-test --venv/--local bootstrap pip offline.
#
# ansible-test fills every venv it makes by running get-pip.py, downloaded from
# ci-files.testing.ansible.com (unreachable from CI here) unless it is already
# cached at ~/.ansible/test/cache/get_pip_<pip version, dots as underscores>.py
# (bootstrap() in ansible_test/_util/target/setup/requirements.py). It runs that
# file as __main__ with pip-install style arguments (quiet_pip.py, GET_PIP), so a
# stand-in that takes pip from the venv's own ensurepip and then installs the
# very versions ansible-test asked for gives the same environment. The versions
# come from get_venv_packages() in _internal/python_requirements.py of the
# installed ansible-test (24.2 in 2.18/2.19, 25.2 in 2.21, 23.1.2 and older ones
# for old Pythons in 2.16), so every version named there is seeded.
# Needs the venv (gf_venv) first.
gf_seed_get_pip() {
    local py=${VIRTUAL_ENV:-${GF_VENV:-$REPO/.venv}}/bin/python
    local pkg reqs setup template cache_dir cache version versions=()
    local marker='# gf_seed_get_pip stand-in for get-pip.py'

    [[ -x $py ]] || gf_die "no virtualenv python at $py; run gf_venv first"
    pkg=$("$py" -c 'import ansible_test, os; print(os.path.dirname(ansible_test.__file__))') ||
        gf_die "ansible-test is not installed in $py's environment"
    reqs=$pkg/_internal/python_requirements.py
    setup=$pkg/_util/target/setup/requirements.py
    [[ -f $reqs && -f $setup ]] || gf_die "ansible-test layout changed: $reqs or $setup is missing"

    # Both facts come from the installed source, and a miss is fatal: a silent
    # no-op would only show up later as "does not have pip available".
    template=$(grep -oE "[~]/[^'\"]*/get_pip_%s[.]py" "$setup" | head -n1) ||
        gf_die "no get_pip cache path in $setup; the get-pip workaround needs updating"
    mapfile -t versions < <(grep -oE "\bpip=['\"][0-9][0-9.]*['\"]" "$reqs" |
        grep -oE '[0-9][0-9.]*[0-9]' | sort -u)
    ((${#versions[@]})) ||
        gf_die "no pip version in $reqs; the get-pip workaround needs updating"

    cache_dir=$("$py" -c 'import os, sys; print(os.path.dirname(os.path.expanduser(sys.argv[1])))' "$template")
    mkdir -p "$cache_dir"
    for version in "${versions[@]}"; do
        cache=$cache_dir/get_pip_${version//./_}.py
        # Keep a genuine get-pip.py that ansible-test downloaded when it could.
        if [[ -f $cache ]] && ! grep -qxF "$marker" "$cache"; then
            continue
        fi
        cat >"$cache" <<PY
$marker
# Written by hpc.gpu_fabric scripts/lib.sh for ansible-test's pip $version bootstrap:
# pip comes from the venv's ensurepip, then pip installs what ansible-test asked for,
# minus the get-pip.py options that pip install does not know.
import subprocess
import sys

args = [arg for arg in sys.argv[1:] if arg not in ('--no-setuptools', '--no-wheel')]
subprocess.check_call([sys.executable, '-m', 'ensurepip', '--default-pip'])
sys.exit(subprocess.call([sys.executable, '-m', 'pip', 'install'] + args))
PY
        gf_log "ansible-test pip $version bootstrap: $cache"
    done
}
