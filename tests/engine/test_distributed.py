"""--distributed: two processes on this machine (one CPU device each) give the numbers one
process gives, and only process 0 writes."""

import json
import os
import socket
import subprocess
import sys

import pytest

from tests.conftest import REPO

RUN = str(REPO / "benchmarks" / "run.py")
ARGS = ["--rounds=4", "--eval_every=2", "--num_clients=12", "--clients_per_round=4"]


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("localhost", 0))
    return s.getsockname()[1]


def _env() -> dict:
  """One CPU device per process (JAX's default without XLA_FLAGS): a --distributed run
  uses every process's devices; the single process lays its run out on --host_devices=2."""
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  env.pop("XLA_FLAGS", None)
  return env


# FedAvg: two seeds, one per process; MIFA: one seed, its memory's rows split between the
# processes' devices (the mesh's "clients" axis spans both processes).
@pytest.mark.parametrize("extra", [["--seeds=2"], ["--seeds=1", "--algo=mifa"]],
                         ids=["runs", "client_state"])
def test_two_processes_equal_one(tmp_path, extra):
  args = [*ARGS, *extra]
  one = subprocess.run([sys.executable, RUN, *args, f"--output_dir={tmp_path / 'one'}"],
                       capture_output=True, text=True, env=_env(), timeout=300)
  assert one.returncode == 0, one.stderr[-2000:]
  port = _free_port()
  procs = [subprocess.Popen(
      [sys.executable, RUN, *args, f"--output_dir={tmp_path / f'p{i}'}", "--distributed",
       f"--coordinator_address=localhost:{port}", "--num_processes=2", f"--process_id={i}"],
      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())
      for i in range(2)]
  outs = [p.communicate(timeout=300) for p in procs]
  # Skipped only when every failing process failed in gloo before it connected (a process
  # that died of something else leaves the other one waiting in gloo: that is a failure).
  failed = [err for p, (_, err) in zip(procs, outs) if p.returncode]
  if failed and all("gloo" in e.lower() and "is connected" not in e for e in failed):
    pytest.skip("this jaxlib has no gloo CPU collectives")
  assert all(p.returncode == 0 for p in procs), [o[1][-2000:] for o in outs]
  assert not (tmp_path / "p1").exists()  # only process 0 writes
  with open(tmp_path / "one" / "summary.json") as f:
    a = json.load(f)["final"]
  with open(tmp_path / "p0" / "summary.json") as f:
    b = json.load(f)["final"]
  for name in ("train_loss", "test_accuracy"):
    assert b[name]["per_seed"] == pytest.approx(a[name]["per_seed"], rel=1e-5), name
