"""A one-node Slurm cluster on loopback for the tests: munged, slurmctld and slurmd started from a
temporary directory with their own slurm.conf (Debian's slurm-wlm), nothing written outside it."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

from tests.e2e.conftest import free_port

DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "scontrol", "squeue")


def missing_tools() -> list[str]:
    found = {name: shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin") for name in DAEMONS}
    return [name for name, path in found.items() if path is None]


def _tool(name: str) -> str:
    return shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin") or name


class SlurmCluster:
    def __init__(self, directory: Path, cluster_name: str = "teff-ci") -> None:
        self.directory = directory
        self.cluster_name = cluster_name
        self.node = socket.gethostname().split(".")[0]
        self.processes: list[subprocess.Popen[bytes]] = []
        self.conf = directory / "slurm.conf"
        self.munge_socket = directory / "munge" / "munge.socket"
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}

    def start(self) -> None:
        d = self.directory
        for sub in ("munge", "state", "spool", "log"):
            (d / sub).mkdir(parents=True, exist_ok=True)
        key = d / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        subprocess.run(
            [
                _tool("munged"),
                "--force",
                f"--socket={self.munge_socket}",
                f"--key-file={key}",
                f"--pid-file={d / 'munge' / 'munged.pid'}",
                f"--log-file={d / 'log' / 'munged.log'}",
                f"--seed-file={d / 'munge' / 'munge.seed'}",
            ],
            check=True,
            capture_output=True,
            timeout=30,
        )
        cpus = os.cpu_count() or 1
        self.conf.write_text(
            f"""ClusterName={self.cluster_name}
SlurmctldHost={self.node}(127.0.0.1)
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={self.munge_socket}
StateSaveLocation={d / "state"}
SlurmdSpoolDir={d / "spool"}
SlurmctldPidFile={d / "slurmctld.pid"}
SlurmdPidFile={d / "slurmd.pid"}
SlurmctldLogFile={d / "log" / "slurmctld.log"}
SlurmdLogFile={d / "log" / "slurmd.log"}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
MpiDefault=none
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
NodeName={self.node} NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN
PartitionName=debug Nodes={self.node} Default=YES MaxTime=INFINITE State=UP
"""
        )
        for command, name in (
            ([_tool("slurmctld"), "-D", "-i", "-f", str(self.conf)], "slurmctld"),
            ([_tool("slurmd"), "-D", "-N", self.node, "-f", str(self.conf)], "slurmd"),
        ):
            with (d / "log" / f"{name}.err").open("wb") as err:  # the child keeps its own descriptor
                self.processes.append(
                    subprocess.Popen(command, env=self.env, stdout=subprocess.DEVNULL, stderr=err)
                )
            time.sleep(1.0)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            info = subprocess.run(
                [_tool("sinfo"), "-h", "-o", "%T"], env=self.env, capture_output=True, text=True
            )
            if info.returncode == 0 and info.stdout.strip() in {"idle", "mixed", "allocated"}:
                return
            for process in self.processes:
                if process.poll() is not None:
                    raise RuntimeError(f"a Slurm daemon exited: {self.logs()}")
            time.sleep(0.5)
        raise RuntimeError(f"the Slurm node did not come up: {self.logs()}")

    def logs(self) -> str:
        parts = []
        for path in sorted((self.directory / "log").glob("*")):
            parts.append(f"--- {path.name}\n{path.read_text(errors='replace')[-3000:]}")
        return "\n".join(parts)

    def sbatch(self, script: Path, env: dict[str, str]) -> str:
        submitted = subprocess.run(
            [_tool("sbatch"), "--parsable", str(script)],
            env={**env, "SLURM_CONF": str(self.conf)},
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert submitted.returncode == 0, submitted.stderr + self.logs()
        return submitted.stdout.strip().split(";")[0]

    def wait(self, job_id: str, timeout: float = 300) -> str:
        """The job's final state (COMPLETED, FAILED, ...)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            shown = subprocess.run(
                [_tool("scontrol"), "show", "job", job_id], env=self.env, capture_output=True, text=True
            )
            for field in shown.stdout.split():
                if field.startswith("JobState="):
                    state = field.split("=", 1)[1]
                    if state not in {"PENDING", "RUNNING", "CONFIGURING", "COMPLETING"}:
                        return state
            time.sleep(0.5)
        raise AssertionError(f"job {job_id} did not end within {timeout} s: {self.logs()}")

    def stop(self) -> None:
        for process in reversed(self.processes):
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
        pid_file = self.directory / "munge" / "munged.pid"
        if pid_file.exists():
            with contextlib.suppress(OSError, ValueError):
                os.kill(int(pid_file.read_text().strip()), 15)
