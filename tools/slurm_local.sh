#!/usr/bin/env bash
# A single-node Slurm on this machine, for testing the batch scripts in jobs/ for real.
#   tools/slurm_local.sh start DIR   munged + slurmctld + slurmd, config and state in DIR;
#                                    prints the SLURM_CONF to export
#   tools/slurm_local.sh stop DIR    stops the daemons started with DIR (munged too, if
#                                    start had to start it), and waits until they are gone
#   tools/slurm_local.sh munge       munged for the machine, which no stop ends (CI runs
#                                    two suites at once: one's stop must not end the
#                                    other's munged)
# SLURMCTLD_PORT and SLURMD_PORT (default 6817, 6818) keep it clear of another Slurm.
# Needs root and Debian's slurm-wlm and munge (tools/setup_env.sh --slurm installs them).
set -euo pipefail
action=${1:?start, stop or munge}

start_munge() {   # munged, unless one answers; prints its pid if this started it
    mkdir -p /run/munge /var/log/munge /var/lib/munge
    [ -s /etc/munge/munge.key ] || mungekey --create --keyfile=/etc/munge/munge.key
    if ! munge -n >/dev/null 2>&1; then
        munged --force
        pgrep -n -x munged
    fi
}

if [ "$action" = munge ]; then
    start_munge >/dev/null
    exit 0
fi
dir=$(realpath -m "${2:?directory}")
conf=$dir/slurm.conf
case $action in
start)
    mkdir -p "$dir/state" "$dir/spool"
    start_munge > "$dir/munged.pid"     # ours, if it started one: stop ends it too
    node=$(hostname -s)
    cat > "$conf" <<CONF
ClusterName=pipekrylov-test
SlurmctldHost=$node(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
SlurmctldPort=${SLURMCTLD_PORT:-6817}
SlurmdPort=${SLURMD_PORT:-6818}
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
NodeName=$node NodeAddr=127.0.0.1 CPUs=$(nproc) State=UNKNOWN
PartitionName=local Nodes=$node Default=YES MaxTime=INFINITE State=UP
CONF
    # slurmd 22.05 autodetects the cgroup version and fails where no cgroup filesystem is
    # mounted (a chroot); nothing here uses cgroups (proctrack/linuxproc, task/none), so
    # pin the v1 plugin there, whose initialization does not look for a mount.
    if [ ! -d /sys/fs/cgroup ] || [ -z "$(ls -A /sys/fs/cgroup 2>/dev/null)" ]; then
        echo "CgroupPlugin=cgroup/v1" > "$dir/cgroup.conf"
    fi
    export SLURM_CONF=$conf
    slurmctld -f "$conf"
    slurmd -f "$conf"
    for _ in $(seq 100); do
        if sinfo -h -o %T 2>/dev/null | grep -q idle; then
            echo "SLURM_CONF=$conf"
            exit 0
        fi
        sleep 0.2
    done
    echo "slurm_local: the node did not become idle; logs in $dir" >&2
    exit 1
    ;;
stop)
    # Wait until they are gone: a daemon left behind keeps files (and, in a chroot, its
    # mounts) busy after the caller is done.
    pids=$(cat "$dir"/slurmd.pid "$dir"/slurmctld.pid "$dir"/munged.pid 2>/dev/null || true)
    for pid in $pids; do kill "$pid" 2>/dev/null || true; done
    for _ in $(seq 50); do
        alive=""
        for pid in $pids; do kill -0 "$pid" 2>/dev/null && alive="$alive $pid"; done
        [ -z "$alive" ] && exit 0
        sleep 0.2
    done
    for pid in $alive; do kill -9 "$pid" 2>/dev/null || true; done
    ;;
*)
    echo "usage: $0 start|stop DIR, or $0 munge" >&2
    exit 2
    ;;
esac
