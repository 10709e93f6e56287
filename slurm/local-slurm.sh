#!/usr/bin/env bash
# A throw-away Slurm "cluster" on 127.0.0.1 for Saturn's tests: munged, slurmctld and one slurmd
# per virtual node, all from Debian's packages, with every file (config, keys, state, logs,
# fake GPUs) under one base directory. /etc is never read or written. It installs nothing:
# scripts/install-deps.sh --tests installs slurmctld, slurmd and munge.
#
# Usage: local-slurm.sh start|stop|status|env
#   start   write the config, start the daemons, wait until the node(s) are idle
#   stop    cancel our jobs, then stop only the daemons we started (PIDs from our PID files)
#   status  say which of our daemons run; sinfo/squeue when the controller answers
#   env     print "export SLURM_CONF=..." for clients (sbatch, squeue, scontrol, ...)
# Settings (environment):
#   SATURN_SLURM_DIR    base directory (default ${TMPDIR:-/tmp}/saturn-slurm)
#   SATURN_SLURM_NODES  virtual nodes (default 1; >1 gives node01..nodeNN on this host)
#   SATURN_SLURM_CPUS   CPUs each node advertises (default 8, more than the cores on purpose)
#   SATURN_SLURM_GPUS   fake GPUs per node (default 2; character devices under the base dir)
#   SATURN_SLURM_PORT   controller port; slurmd uses the next ones (default 26817)
#
# Choices, each for a pitfall seen in ../shared/reference/hpc-notes.md §2:
#  * no cgroups (proctrack/linuxproc, task/none): containers have none that work;
#  * fake GPUs must be character devices (mknod c 1 3), or Slurm sets no CUDA_VISIBLE_DEVICES;
#  * cred_expire=10: a requeued job otherwise waits 120+ s before it may start again;
#  * PMIx client dirs under the base dir: job ids restart at 1 with "slurmctld -c", and a stale
#    /tmp/spmix_appdir_* of an earlier cluster makes srun --mpi=pmix fail;
#  * ports other than the reference recipe's 16817/16818, so both can run side by side.
set -eEuo pipefail

BASE=${SATURN_SLURM_DIR:-${TMPDIR:-/tmp}/saturn-slurm}
NNODES=${SATURN_SLURM_NODES:-1}
NCPUS=${SATURN_SLURM_CPUS:-8}
NGPUS=${SATURN_SLURM_GPUS:-2}
PORT=${SATURN_SLURM_PORT:-26817}
CONF=$BASE/slurm.conf
HOST=$(hostname -s)

log() { printf '[local-slurm] %s\n' "$*" >&2; }
# During `start`, a failure also stops what did start (and shows the daemons' logs): exit does
# not run the ERR trap, and a test that retries must not find our daemons still running.
STARTING=0
die() {
  log "error: $*"
  if [[ $STARTING == 1 ]]; then
    STARTING=0
    trap - ERR
    tail_logs
    log "start failed; stopping what started"
    stop
  fi
  exit 1
}

if [[ "$NNODES" -gt 1 ]]; then
  NODES=$(seq -f 'node%02g' 1 "$NNODES" | tr '\n' ' ')
  NODESPEC="node[01-$(printf %02d "$NNODES")]"
else
  NODES=$HOST
  NODESPEC=$HOST
fi

# Every daemon PID file we may own; slurmd first so that nodes go before the controller.
pid_files() {
  local n
  for n in $NODES; do echo "$BASE/run/slurmd-$n.pid"; done
  echo "$BASE/run/slurmctld.pid"
  echo "$BASE/munge/munged.pid"
}

alive() {  # alive PIDFILE: the process named in PIDFILE runs
  [[ -s "$1" ]] && kill -0 "$(cat "$1")" 2>/dev/null
}

check_tools() {
  local missing=() t
  for t in munged mungekey munge slurmctld slurmd sbatch squeue sinfo scontrol scancel; do
    command -v "$t" >/dev/null 2>&1 || missing+=("$t")
  done
  if [[ ${#missing[@]} -gt 0 ]]; then
    log "missing: ${missing[*]} (install with: scripts/install-deps.sh --tests)"
    exit 3
  fi
}

write_config() {
  mkdir -p "$BASE"/{munge,state,spool,log,run,dev,pmix}
  local n i
  for n in $NODES; do mkdir -p "$BASE/spool/$n"; done  # slurmd wants spool/<node> to exist
  # munged needs its socket directory world-executable and its key private.
  chmod 755 "$BASE" "$BASE/munge"
  [[ -f "$BASE/munge/munge.key" ]] || mungekey -c -k "$BASE/munge/munge.key"
  chmod 400 "$BASE/munge/munge.key"
  for ((i = 0; i < NGPUS; i++)); do
    if [[ ! -c "$BASE/dev/nvidia$i" ]]; then
      rm -f "$BASE/dev/nvidia$i"
      mknod "$BASE/dev/nvidia$i" c 1 3 || die "mknod $BASE/dev/nvidia$i failed (needs root); set SATURN_SLURM_GPUS=0 to run without fake GPUs"
    fi
  done

  local gres_node="" gres_types=""
  if [[ "$NGPUS" -gt 0 ]]; then gres_node="Gres=gpu:$NGPUS"; gres_types="GresTypes=gpu"; fi
  cat >"$CONF" <<EOF
ClusterName=saturntest
SlurmctldHost=$HOST(127.0.0.1)
SlurmctldPort=$PORT
SlurmdPort=$((PORT + 1))
SrunPortRange=$((PORT + 100))-$((PORT + 299))
CommunicationParameters=NoCtldInAddrAny,NoInAddrAny
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$BASE/munge/munge.socket,cred_expire=10
StateSaveLocation=$BASE/state
SlurmdSpoolDir=$BASE/spool/%n
SlurmctldPidFile=$BASE/run/slurmctld.pid
SlurmdPidFile=$BASE/run/slurmd-%n.pid
SlurmctldLogFile=$BASE/log/slurmctld.log
SlurmdLogFile=$BASE/log/slurmd-%n.log
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
JobRequeue=1
MinJobAge=300
KillWait=5
InactiveLimit=0
Waittime=0
$gres_types
EOF
  if [[ "$NNODES" -gt 1 ]]; then
    echo "NodeName=$NODESPEC NodeHostname=$HOST NodeAddr=127.0.0.1 Port=$((PORT + 2))-$((PORT + 1 + NNODES)) CPUs=$NCPUS $gres_node State=UNKNOWN" >>"$CONF"
  else
    echo "NodeName=$HOST NodeAddr=127.0.0.1 CPUs=$NCPUS $gres_node State=UNKNOWN" >>"$CONF"
  fi
  echo "PartitionName=debug Nodes=$NODESPEC Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO" >>"$CONF"
  echo "PMIxCliTmpDirBase=$BASE/pmix" >"$BASE/mpi.conf"
  : >"$BASE/gres.conf"
  if [[ "$NGPUS" -gt 0 ]]; then
    for n in $NODES; do
      echo "NodeName=$n Name=gpu File=$BASE/dev/nvidia[0-$((NGPUS - 1))]" >>"$BASE/gres.conf"
    done
  fi
}

wait_for_pid_file() {  # the daemons fork into the background and write their PID file
  local f=$1 _
  for _ in $(seq 1 100); do alive "$f" && return 0; sleep 0.1; done
  die "no live process in $f after 10 s; see $BASE/log"
}

# A Slurm client whose controller does not answer retries for ~9 s before it fails, so every
# client call here has a time limit, and every wait is bounded in seconds, not in iterations.
client() {  # client SECONDS CMD...: CMD with its output, or a failure after SECONDS
  timeout --kill-after=2 "$@"
}

tail_logs() {  # the last lines of every daemon log, for a failure message
  local f
  for f in "$BASE"/log/* "$BASE/munge/munged.log"; do
    [[ -f "$f" ]] || continue
    log "--- $f (last 15 lines)"
    tail -n 15 "$f" >&2 || true
  done
}

# Ports in the kernel's ephemeral range may be taken at any moment by an outgoing connection
# (MPI's TCP wire-up of a test running beside us, srun), and slurmctld then cannot listen.
check_port_range() {
  local range lo hi
  range=$(cat /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null) || return 0
  read -r lo hi <<<"$range"
  if ((PORT + 299 >= lo && PORT <= hi)); then
    log "warning: ports $PORT-$((PORT + 299)) overlap the ephemeral range $lo-$hi; an outgoing connection may take one first (choose SATURN_SLURM_PORT below $((lo - 300)))"
  fi
}

# munged refuses a socket whose directory or any parent is not world-executable (a+x).
check_search_permissions() {
  local d
  d=$(dirname "$BASE")  # $BASE itself is made 755 below
  while [[ "$d" != / && -n "$d" ]]; do
    if [[ -d "$d" && $(($(stat -c '%#a' "$d") & 0111)) != $((0111)) ]]; then
      die "$d is not world-executable (mode $(stat -c %a "$d")), which munged requires of every directory above its socket; chmod a+x it or choose another SATURN_SLURM_DIR"
    fi
    d=$(dirname "$d")
  done
}

start() {
  check_tools
  local f
  for f in $(pid_files); do
    alive "$f" && die "already running ($f); run: $0 stop"
  done
  check_search_permissions
  check_port_range
  local port
  for port in "$PORT" $((PORT + 1)); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      die "port $port on 127.0.0.1 is in use (another Slurm?); choose others with SATURN_SLURM_PORT"
    fi
  done
  # From here on a failure stops whatever did start (die, or a command that fails).
  STARTING=1
  trap 'die "a command of the start failed (line $LINENO)"' ERR
  write_config
  munged --socket="$BASE/munge/munge.socket" --key-file="$BASE/munge/munge.key" \
    --pid-file="$BASE/munge/munged.pid" --log-file="$BASE/munge/munged.log" \
    --seed-file="$BASE/munge/munged.seed"
  wait_for_pid_file "$BASE/munge/munged.pid"
  client 10 munge -S "$BASE/munge/munge.socket" -n | client 10 unmunge -S "$BASE/munge/munge.socket" >/dev/null \
    || die "munge credential round trip failed; see $BASE/munge/munged.log"
  # -c: a fresh cluster every time, no jobs from an earlier run.
  slurmctld -f "$CONF" -c
  wait_for_pid_file "$BASE/run/slurmctld.pid"
  local n
  if [[ "$NNODES" -gt 1 ]]; then
    for n in $NODES; do slurmd -f "$CONF" -N "$n"; done
  else
    slurmd -f "$CONF"
  fi
  for n in $NODES; do wait_for_pid_file "$BASE/run/slurmd-$n.pid"; done
  export SLURM_CONF=$CONF
  # Until the controller answers and every node is idle: 45 s at most, and at once when a
  # daemon has died (slurmctld exits after writing its PID file when it cannot listen).
  local idle=0 f until=$((SECONDS + 45))
  while ((SECONDS < until)); do
    for f in $(pid_files); do
      alive "$f" || die "$(basename "$f" .pid) exited during start-up"
    done
    idle=$(client 5 sinfo -h -N -o '%T' 2>/dev/null | grep -cE '^(idle|mixed|allocated)' || true)
    [[ "$idle" -ge "$NNODES" ]] && break
    sleep 0.2
  done
  [[ "$idle" -ge "$NNODES" ]] ||
    die "nodes did not become idle within 45 s (the controller did not answer, or slurmd did not register)"
  STARTING=0
  trap - ERR
  log "up: $NNODES node(s) $NODESPEC, $NCPUS CPUs and $NGPUS GPUs each; export SLURM_CONF=$CONF"
}

stop() {
  export SLURM_CONF=$CONF
  local _ f pid
  # Jobs first: their slurmstepd processes are not ours by PID file and would outlive slurmd.
  if alive "$BASE/run/slurmctld.pid"; then
    client 10 scancel --quiet --user="$(id -un)" 2>/dev/null || true
    local until=$((SECONDS + 20)) listed=unknown
    while ((SECONDS < until)); do
      listed=$(client 5 squeue -h -o %i 2>/dev/null) || listed=unknown
      [[ -z "$listed" ]] && break
      sleep 0.2
    done
    [[ -z "$listed" ]] || log "warning: jobs still listed (or squeue did not answer) after 20 s"
  fi
  for f in $(pid_files); do
    alive "$f" || { rm -f "$f"; continue; }
    pid=$(cat "$f")
    kill -TERM "$pid"
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then
      log "pid $pid ($(basename "$f" .pid)) ignored SIGTERM for 10 s; sending SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
    fi
    log "stopped $(basename "$f" .pid) (pid $pid)"
    rm -f "$f"
  done
}

status() {
  local f running=0
  for f in $(pid_files); do
    if alive "$f"; then
      log "$(basename "$f" .pid): running (pid $(cat "$f"))"
      running=1
    else
      log "$(basename "$f" .pid): not running"
    fi
  done
  if alive "$BASE/run/slurmctld.pid"; then
    SLURM_CONF=$CONF client 10 sinfo -N -o '%N %T %c %G' || true
    SLURM_CONF=$CONF client 10 squeue || true
  fi
  [[ $running == 1 ]]
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  env) echo "export SLURM_CONF=$CONF" ;;
  *)
    echo "usage: $0 start|stop|status|env" >&2
    exit 2
    ;;
esac
