"""A private one-node Slurm cluster for the tests and benches of issue #13.

munged, slurmctld and slurmd from Debian's packages (slurm-wlm 22.05), each
started in the foreground with a configuration, key, state, spool and log
directory of its own under ``root`` (never /etc/slurm, /etc/munge or the
system's services), on two free TCP ports.  Clients (srun, sbatch, scontrol)
find it through ``SLURM_CONF`` in ``cluster.env``.

Every process the cluster starts - the daemons, each slurmstepd (slurmd's
child, which daemonizes) and every task (which inherits the client's
environment) - carries ``DNTEST_SLURM_CLUSTER=<root>`` in its environment,
so ``stop()`` finds and kills whatever is left by that mark alone and never
touches another process of the machine.  ``stop()`` runs however the tests
ended (the fixture's finalizer, and atexit as a second net).
"""
import atexit
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

DAEMONS = ("/usr/sbin/munged", "/usr/sbin/slurmctld", "/usr/sbin/slurmd", "/usr/sbin/slurmstepd")
CLIENTS = ("srun", "sbatch", "scontrol", "squeue", "scancel", "sinfo")
# (Not DISCNICE_*: discnice-slurm-task drops those from a job's environment.)
MARK = "DNTEST_SLURM_CLUSTER"
NODE = "dn-node"


def unavailable() -> str:
    """Why this machine cannot run the cluster, or '' if it can."""
    if os.geteuid() != 0:
        return "a private Slurm cluster needs root (slurmd runs jobs as their users)"
    for d in DAEMONS:
        if not os.access(d, os.X_OK):
            return f"needs {d} (Debian packages slurm-wlm, slurmctld, slurmd, munge)"
    for c in CLIENTS:
        if not shutil.which(c):
            return f"needs {c} (Debian package slurm-client)"
    return ""


def _free_ports(n):
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


def _pids_marked(mark_value):
    """Processes whose environment carries our mark (ours: root may read any)."""
    found = []
    needle = f"{MARK}={mark_value}".encode() + b"\0"
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                env = f.read() + b"\0"
        except OSError:
            continue
        if needle in env:
            found.append(int(entry))
    return found


def _kill(pids):
    """SIGKILL each of pids, and SIGCONT it: a stopped process dies only
    once continued."""
    for pid in pids:
        for sig in (signal.SIGKILL, signal.SIGCONT):
            try:
                os.kill(pid, sig)
            except OSError:
                pass


class Cluster:
    def __init__(self, root: Path, plugstack_lines=(), cpus=8, extra_conf=""):
        self.root = Path(root)
        self.plugstack_lines = list(plugstack_lines)
        self.cpus = cpus
        self.extra_conf = extra_conf
        self.procs = []
        self.stopped = False
        for sub in ("etc", "state", "spool", "log", "munge"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o755)
        self.conf = self.root / "etc" / "slurm.conf"
        self.plugstack = self.root / "etc" / "plugstack.conf"
        self.munge_socket = self.root / "munge" / "munge.socket"
        self.env = dict(os.environ)
        self.env["SLURM_CONF"] = str(self.conf)
        self.env[MARK] = str(self.root)
        # No inherited client settings (a user's SBATCH_PARTITION...).
        for k in list(self.env):
            if k.startswith(("SLURM_", "SBATCH_", "SALLOC_", "SRUN_")) and k != "SLURM_CONF":
                del self.env[k]

    # ---- configuration ------------------------------------------------
    def write_plugstack(self, lines):
        """plugstack.conf is read again by srun/sbatch and by each slurmstepd
        at every step (src/common/plugstack.c spank_stack_init), so a new one
        takes effect for the next job without a restart."""
        self.plugstack_lines = list(lines)
        self.plugstack.write_text("".join(line + "\n" for line in lines))

    def _write_conf(self, ctld_port, slurmd_port):
        r = self.root
        self.conf.write_text(f"""# A private test cluster (tests/integration/slurm_cluster.py)
ClusterName=discnice-test
SlurmctldHost=localhost
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={self.munge_socket}
StateSaveLocation={r}/state
SlurmdSpoolDir={r}/spool
SlurmctldPidFile={r}/slurmctld.pid
SlurmdPidFile={r}/slurmd.pid
SlurmctldLogFile={r}/log/slurmctld.log
SlurmdLogFile={r}/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=debug
PlugStackConfig={self.plugstack}
# No cgroups: processes are tracked by their parentage (discnice run is a
# child subreaper, so a job's orphans stay in the tree), and suspend/resume
# are SIGSTOP/SIGCONT to every process of the step.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1
# Preemption by suspension: a job of the partition `high` suspends jobs of
# `scavenger` and the gang scheduler resumes them when it is done.
PreemptType=preempt/partition_prio
PreemptMode=SUSPEND,GANG
KillWait=5
MinJobAge=60
ReturnToService=2
MpiDefault=none
SlurmdParameters=config_overrides
NodeName={NODE} NodeHostname=localhost NodeAddr=127.0.0.1 CPUs={self.cpus} RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes={NODE} Default=YES MaxTime=10 State=UP PriorityTier=1 OverSubscribe=NO
PartitionName=scavenger Nodes={NODE} MaxTime=10 State=UP PriorityTier=1 OverSubscribe=FORCE:1
PartitionName=high Nodes={NODE} MaxTime=10 State=UP PriorityTier=10 OverSubscribe=FORCE:1
{self.extra_conf}
""")
        self.write_plugstack(self.plugstack_lines)

    # ---- daemons ------------------------------------------------------
    def _spawn(self, argv, name):
        log = open(self.root / "log" / f"{name}.out", "ab")
        p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=self.env,
                             start_new_session=True)
        log.close()
        self.procs.append(p)
        return p

    def start(self, timeout=60):
        atexit.register(self.stop)
        key = self.root / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        os.chmod(key, 0o400)
        os.chmod(self.root / "munge", 0o700)
        self._spawn(["/usr/sbin/munged", "-F", "--force", f"--socket={self.munge_socket}",
                     f"--key-file={key}", f"--pid-file={self.root}/munge/munged.pid",
                     f"--log-file={self.root}/log/munged.log",
                     f"--seed-file={self.root}/munge/munged.seed"], "munged")
        self._wait(lambda: self.munge_socket.exists(), 10, "munged's socket")
        ctld_port, slurmd_port = _free_ports(2)
        self._write_conf(ctld_port, slurmd_port)
        self._spawn(["/usr/sbin/slurmctld", "-D", "-i", "-f", str(self.conf)], "slurmctld")
        self._wait(lambda: self.client(["scontrol", "ping"], check=False).returncode == 0
                   and "UP" in self.client(["scontrol", "ping"], check=False).stdout,
                   timeout, "slurmctld")
        self._spawn(["/usr/sbin/slurmd", "-D", "-N", NODE, "-f", str(self.conf)], "slurmd")
        self._wait(self._node_idle, timeout, "the node to be idle")
        return self

    def _node_idle(self):
        r = self.client(["sinfo", "-h", "-N", "-o", "%T", "-p", "debug"], check=False)
        return r.returncode == 0 and r.stdout.strip().startswith("idle")

    def _wait(self, cond, timeout, what):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for p in self.procs:
                if p.poll() is not None:
                    raise RuntimeError(f"{p.args[0]} exited ({p.returncode}) while waiting "
                                       f"for {what}:\n{self.logs()}")
            if cond():
                return
            time.sleep(0.2)
        raise RuntimeError(f"timed out waiting for {what}:\n{self.logs()}")

    def logs(self, tail=40):
        out = []
        for f in sorted((self.root / "log").glob("*")):
            lines = f.read_text(errors="replace").splitlines()[-tail:]
            out.append(f"--- {f.name}\n" + "\n".join(lines))
        return "\n".join(out)

    def stop(self):
        if self.stopped:
            return
        self.stopped = True
        subprocess.run(["scancel", "--full", "--user=root", "--quiet"], env=self.env,
                       capture_output=True, timeout=20)
        for p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in reversed(self.procs):
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        # slurmstepd daemonizes away from slurmd, and tasks may outlive it:
        # every process carrying our mark goes.
        for _ in range(3):
            pids = _pids_marked(self.root)
            if not pids:
                break
            _kill(pids)
            time.sleep(0.3)

    def quiesce(self, timeout=30):
        """Cancel every job, and wait until Slurm lists none and no task of
        any is left on the node.  Run between tests: a test that failed
        before its own scancel left a looping job holding the node for its
        partition's MaxTime, and every later test of the module failed
        waiting for it."""
        if self.stopped:
            return
        self.client(["scancel", "--full", "--user=root", "--quiet"], check=False, timeout=20)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            queued = self.client(["squeue", "-h", "-o", "%i"], check=False).stdout.split()
            if not queued and not self.job_pids(None) and self._node_idle():
                return
            time.sleep(0.2)
        # Whatever a cancel could not end goes the way stop() ends it.
        _kill(self.job_pids(None))
        raise RuntimeError(f"jobs still there {timeout} s after scancel: "
                           f"{self.client(['squeue'], check=False).stdout}\n{self.logs()}")

    # ---- clients ------------------------------------------------------
    def client(self, argv, check=True, timeout=60, env=None, **kw):
        e = dict(self.env)
        if env:
            e.update(env)
        r = subprocess.run(argv, env=e, capture_output=True, text=True, timeout=timeout, **kw)
        if check and r.returncode != 0:
            raise RuntimeError(f"{' '.join(map(str, argv))} -> {r.returncode}\n"
                               f"stdout: {r.stdout}\nstderr: {r.stderr}")
        return r

    def sbatch(self, args, script, env=None):
        """Submit a batch script; its job id."""
        r = self.client(["sbatch", "--parsable"] + list(args), input=script, env=env)
        return int(r.stdout.strip().split(";")[0])

    def job_state(self, job):
        r = self.client(["scontrol", "show", "job", str(job)], check=False)
        for word in r.stdout.split():
            if word.startswith("JobState="):
                return word.split("=", 1)[1]
        return "GONE"

    def wait_state(self, job, states, timeout=60):
        deadline = time.monotonic() + timeout
        state = None
        while time.monotonic() < deadline:
            state = self.job_state(job)
            if state in states:
                return state
            time.sleep(0.2)
        raise RuntimeError(f"job {job} still {state}, not {states}:\n{self.logs()}")

    def job_pids(self, job):
        """The processes of a job (its tasks carry SLURM_JOB_ID in their
        environment), or of every job when job is None, with their /proc
        state letter."""
        out = {}
        needle = b"SLURM_JOB_ID=" + (b"" if job is None else f"{job}\0".encode())
        for pid in _pids_marked(self.root):
            try:
                with open(f"/proc/{pid}/environ", "rb") as f:
                    env = b"\0" + f.read() + b"\0"
                with open(f"/proc/{pid}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            if b"\0" + needle in env:
                out[pid] = stat[stat.rindex(")") + 2]
        return out


if __name__ == "__main__":
    import sys
    why = unavailable()
    if why:
        sys.exit(f"cannot run: {why}")
    root = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/dn-slurm-try")
    shutil.rmtree(root, ignore_errors=True)
    c = Cluster(root).start()
    print(c.client(["sinfo"]).stdout)
    print(c.client(["srun", "-n1", "hostname"]).stdout)
    c.stop()
