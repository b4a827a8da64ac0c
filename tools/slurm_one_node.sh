#!/usr/bin/env bash
# A one-node Slurm cluster on this machine, to try (and test) `grade-all --executor slurm`
# without a real cluster. Debian/Ubuntu, as root. Safe to run again: it installs what is
# missing, rewrites the configuration, and starts only the daemons that are not running.
#
#   bash tools/slurm_one_node.sh           # then: sinfo; sbatch --wrap hostname
#   bash tools/slurm_one_node.sh --stop    # stop the daemons (the packages stay)
#
# The settings are those that start inside a container without systemd or a writable
# cgroup tree: processes are tracked through /proc (proctrack/linuxproc), tasks are not
# bound to cores (task/none), and slurmd does not ask systemd for a cgroup (IgnoreSystemd).
# The node offers the machine's cores and most of its memory; GPUs, where /dev/nvidia*
# exist, as gres gpu (Debian's build has no NVML, so they are listed by hand).
set -euo pipefail

if [ "$(id -u)" != 0 ]; then
  echo "slurm_one_node: run as root (it installs packages and starts daemons)" >&2
  exit 2
fi

if [ "${1:-}" = "--stop" ]; then
  for daemon in slurmd slurmctld; do
    pid=$(cat "/run/$daemon.pid" 2>/dev/null || true)
    [ -n "$pid" ] && kill "$pid" 2>/dev/null || true
  done
  exit 0
fi

if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v munged >/dev/null; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    slurm-wlm slurm-client munge >/dev/null
fi

host=$(hostname -s)
cpus=$(nproc)
# Leave 2 GiB to the system; Slurm counts memory in MiB.
mem_mib=$(( $(awk '/MemTotal/ {print int($2 / 1024)}' /proc/meminfo) - 2048 ))
gpu_devices=(/dev/nvidia[0-9]*)
[ -e "${gpu_devices[0]}" ] || gpu_devices=()
gpus=${#gpu_devices[@]}

# munge authenticates every message between the Slurm commands and daemons.
install -d -o munge -g munge -m 0700 /etc/munge /var/lib/munge /var/log/munge
install -d -o munge -g munge -m 0755 /run/munge
if [ ! -s /etc/munge/munge.key ]; then
  dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key status=none
fi
chown munge:munge /etc/munge/munge.key
chmod 0400 /etc/munge/munge.key
if ! munge -n </dev/null >/dev/null 2>&1; then
  bash "$(dirname "$0")/start_daemon.sh" runuser -u munge -- /usr/sbin/munged
  for _ in $(seq 50); do munge -n </dev/null >/dev/null 2>&1 && break; sleep 0.1; done
fi

install -d -m 0755 /etc/slurm /var/spool/slurmctld /var/spool/slurmd /var/log/slurm
gres_types=""
node_gres=""
: >/etc/slurm/gres.conf
if [ "$gpus" -gt 0 ]; then
  gres_types="GresTypes=gpu"
  node_gres="Gres=gpu:$gpus"
  for dev in "${gpu_devices[@]}"; do echo "NodeName=$host Name=gpu File=$dev" >>/etc/slurm/gres.conf; done
fi
config=$(cat <<EOF
# Written by tools/slurm_one_node.sh: a one-node cluster for trying grade-all --executor slurm.
ClusterName=grader
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=1024
MpiDefault=none
ReturnToService=2
JobAcctGatherType=jobacct_gather/none
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
$gres_types
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem_mib $node_gres State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
)
cat >/etc/slurm/cgroup.conf <<EOF
CgroupPlugin=cgroup/v1
IgnoreSystemd=yes
EOF

running() { [ -s "/run/$1.pid" ] && kill -0 "$(cat "/run/$1.pid")" 2>/dev/null; }
if [ "$(cat /etc/slurm/slurm.conf 2>/dev/null)" != "$config" ]; then
  echo "$config" >/etc/slurm/slurm.conf
  # A daemon started under another configuration would not see the change.
  for daemon in slurmd slurmctld; do
    if running "$daemon"; then
      kill "$(cat "/run/$daemon.pid")"
      for _ in $(seq 50); do running "$daemon" || break; sleep 0.1; done
    fi
  done
fi
# Through start_daemon.sh: a daemon must not keep a pipe of whoever runs this script.
running slurmctld || bash "$(dirname "$0")/start_daemon.sh" /usr/sbin/slurmctld
running slurmd || bash "$(dirname "$0")/start_daemon.sh" /usr/sbin/slurmd

for _ in $(seq 60); do
  state=$(sinfo -h -n "$host" -o %T 2>/dev/null || true)
  case "$state" in
    idle*|mixed*|allocated*|completing*)
      echo "slurm_one_node: node $host up ($cpus CPUs, $mem_mib MiB, $gpus GPUs), partition debug"
      exit 0 ;;
    down*|drain*)
      scontrol update nodename="$host" state=resume 2>/dev/null || true ;;
  esac
  sleep 1
done
echo "slurm_one_node: the node did not come up; see /var/log/slurm/slurmctld.log and slurmd.log" >&2
sinfo >&2 || true
exit 1
