"""The package under a real single-node Slurm: the test starts ``munged``, ``slurmctld`` and
``slurmd`` (Debian's ``munge`` and ``slurm-wlm`` packages, which scripts/setup.sh installs) with a
generated ``slurm.conf`` in a scratch directory, runs ``srun -n 2 python -c "…"`` whose ranks
call ``hccl.init()`` with nothing but Slurm's variables and all-reduce a buffer, and stops the
daemons. Needs root (slurmd starts tasks as any user); skipped with the reason otherwise, and
outside CI when the daemons are not installed."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest

DAEMONS = ("munged", "slurmctld", "slurmd", "srun", "sinfo")

# Each rank: init from SLURM_PROCID/SLURM_NTASKS/..., all-reduce, check, report one line.
RANK_CODE = """
import array, hccl
hccl.init()
r, n = hccl.get_rank(), hccl.get_size()
buf = array.array("d", [float(r + 1)] * 1000)
hccl.allreduce(buf, op=hccl.SUM)
want = n * (n + 1) / 2
bad = [i for i, v in enumerate(buf) if v != want]
assert not bad, (r, bad[:4], buf[bad[0]])
print(f"rank {r} of {n}: allreduce {buf[0]}", flush=True)
hccl.finalize()
"""


def which(prog: str):
    path = os.environ.get("PATH", "") + os.pathsep + "/usr/sbin" + os.pathsep + "/sbin"
    return shutil.which(prog, path=path)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def node_name() -> str:
    """This host's short name when it resolves (as a real cluster's node names do), else
    ``localhost``."""
    name = socket.gethostname().split(".")[0]
    try:
        socket.getaddrinfo(name, None)
        return name or "localhost"
    except OSError:
        return "localhost"


class Cluster:
    """The daemons of one test cluster, in a scratch directory; stopped by pid on close."""

    def __init__(self, node: str):
        self.dir = tempfile.mkdtemp(prefix="hccl-slurm-py-")
        self.procs = []
        d = self.dir
        for sub in ("state", "spool"):
            os.makedirs(os.path.join(d, sub))
        key = os.path.join(d, "munge.key")
        with open(key, "wb") as f:
            f.write(os.urandom(1024))
        os.chmod(key, 0o400)
        self.conf = os.path.join(d, "slurm.conf")
        with open(self.conf, "w") as f:
            f.write(
                "ClusterName=hcclpy\n"
                f"SlurmctldHost={node}(127.0.0.1)\n"
                f"SlurmctldPort={free_port()}\nSlurmdPort={free_port()}\n"
                f"AuthType=auth/munge\nCredType=cred/munge\nAuthInfo=socket={d}/munge.sock\n"
                "SlurmUser=root\nSlurmdUser=root\n"
                f"StateSaveLocation={d}/state\nSlurmdSpoolDir={d}/spool\n"
                f"SlurmctldPidFile={d}/slurmctld.pid\nSlurmdPidFile={d}/slurmd.pid\n"
                f"SlurmctldLogFile={d}/slurmctld.log\nSlurmdLogFile={d}/slurmd.log\n"
                "ProctrackType=proctrack/pgid\nTaskPlugin=task/none\nMpiDefault=none\n"
                "ReturnToService=2\nSchedulerType=sched/builtin\n"
                "SelectType=select/cons_tres\nSelectTypeParameters=CR_Core\n"
                "JobCompType=jobcomp/none\nAccountingStorageType=accounting_storage/none\n"
                "JobAcctGatherType=jobacct_gather/none\n"
                "SlurmdParameters=config_overrides\n"
                f"NodeName={node} NodeAddr=127.0.0.1 CPUs=8 State=UNKNOWN\n"
                f"PartitionName=hccl Nodes={node} Default=YES MaxTime=10 State=UP\n"
            )
        # Only this cluster: no variables of a surrounding job or launcher.
        self.env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("SLURM_", "OMPI_", "PMI_", "HCCL_"))
            and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                          "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID")
        }
        self.env["SLURM_CONF"] = self.conf
        self.spawn(
            "munged", "--force", "--foreground", f"--socket={d}/munge.sock",
            f"--key-file={key}", f"--pid-file={d}/munged.pid",
            f"--log-file={d}/munged.log", f"--seed-file={d}/munged.seed",
        )
        self.spawn("slurmctld", "-D", "-i")
        self.spawn("slurmd", "-D", "-N", node)

    def spawn(self, prog: str, *args: str):
        p = subprocess.Popen(
            [which(prog), *args], env=self.env,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        self.procs.append((prog, p))

    def log(self) -> str:
        out = []
        for f in ("munged.log", "slurmctld.log", "slurmd.log"):
            try:
                with open(os.path.join(self.dir, f)) as fh:
                    tail = fh.read().splitlines()[-15:]
            except OSError:
                tail = []
            out.append(f"--- {f}\n" + "\n".join(tail))
        return "\n".join(out)

    def wait_idle(self, limit: float = 60.0):
        # The daemons are other programs: their readiness can only be polled.
        deadline = time.monotonic() + limit
        while True:
            for name, p in self.procs:
                if p.poll() is not None:
                    pytest.fail(f"{name} exited ({p.returncode}) while starting:\n{self.log()}")
            o = subprocess.run([which("sinfo"), "-h", "-o", "%T"], env=self.env,
                               capture_output=True, text=True, timeout=30)
            if o.stdout.strip() == "idle":
                return
            if time.monotonic() > deadline:
                pytest.fail(f"the node did not become idle within {limit} s:\n"
                            f"{o.stderr}\n{self.log()}")
            time.sleep(0.2)

    def srun(self, *args: str) -> subprocess.CompletedProcess:
        env = dict(self.env, HCCL_CONNECT_TIMEOUT="60", HCCL_EXEC_TIMEOUT="60")
        return subprocess.run([which("srun"), "--time=5", "--kill-on-bad-exit=1", *args],
                              env=env, capture_output=True, text=True, timeout=300)

    def close(self):
        for _, p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
            p.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def test_allreduce_under_srun():
    if os.geteuid() != 0:
        pytest.skip("slurmd must run as root to start tasks")
    missing = [p for p in DAEMONS if which(p) is None]
    if missing:
        why = (f"{missing[0]} not found (scripts/setup.sh installs slurmd, slurmctld, "
               "slurm-client and munge)")
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    cluster = Cluster(node_name())
    try:
        cluster.wait_idle()
        o = cluster.srun("-n", "2", sys.executable, "-c", RANK_CODE)
        assert o.returncode == 0, f"srun failed ({o.returncode}):\n{o.stdout}\n{o.stderr}\n" \
                                  f"{cluster.log()}"
        lines = sorted(l for l in o.stdout.splitlines() if l.startswith("rank "))
        assert lines == ["rank 0 of 2: allreduce 3.0", "rank 1 of 2: allreduce 3.0"], \
            o.stdout + o.stderr
    finally:
        cluster.close()
