#!/usr/bin/env python3
"""Record real training logs, stored as the kubelet stores a container's log (tests/fixtures/logs/real/).

Not run in CI: it really trains tiny models on CPU with the real frameworks, in a
venv of its own (the project's venv stays free of them):

    python3 -m venv /work/rec-venv
    /work/rec-venv/bin/pip install torch==2.13.0 transformers lightning tqdm accelerate
    python3 scripts/record_training_logs.py --python /work/rec-venv/bin/python [SCENARIO ...]

`torch==2.13.0` is the CPU build these machines hold on disk (plain `torch` pulls a
multi-GB CUDA build). Models are built from configs and fed random data: no hub
download. torchrun uses the gloo backend.

How the kubelet stores a log (shared/reference/training-logs.md §2.7), and so this
recorder: stdout and stderr are read as two streams, each split on `\\n` only; a
line is stamped (RFC 3339, nanoseconds, UTC) when it is completed, and a line
longer than 16 KiB is cut into partial pieces, each stamped when it fills.
`kubectl logs --timestamps` prints a run of partials and the piece that ends
them as one line under the first piece's timestamp, both streams in time order:
that is the file written. A run that is stopped while it hangs (the recorder
ends it after a silence) keeps only what the kubelet had at that moment; a run
that exits has its unterminated remainder flushed, as the runtime does at EOF.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

PARTIAL = 16 * 1024  # the kubelet's maximum log line size (pkg/kubelet/kuberuntime/logs: 16 KiB)
WORKDIR = "/workspace/run"  # the run's directory as the fixtures show it (the recording's is a temp dir)
OUT = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "logs" / "real"

COMMON = r'''
import os, sys, random
import torch
torch.manual_seed(0); random.seed(0)
torch.set_num_threads(1)
'''

HF = COMMON + r'''
import threading
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments, TrainerCallback

class Random(torch.utils.data.Dataset):
    def __len__(self): return 4096
    def __getitem__(self, i):
        ids = torch.randint(0, 128, (32,))
        return {"input_ids": ids, "labels": ids}

class Hang(TrainerCallback):
    """A collective that never returns, as a hung NCCL all-reduce looks from the log: silence."""
    def __init__(self, at): self.at = at
    def on_step_end(self, args, state, control, **kw):
        if self.at and state.global_step == self.at:
            sys.stdout.flush(); sys.stderr.flush()
            threading.Event().wait()

model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_head=2, n_embd=64, vocab_size=128, n_positions=64))
max_steps, hang_at = int(sys.argv[1]), int(sys.argv[2])
args = TrainingArguments(output_dir=sys.argv[3], max_steps=max_steps, per_device_train_batch_size=8,
                         logging_steps=5, save_steps=20, report_to=[], use_cpu=True, dataloader_num_workers=0,
                         learning_rate=5e-4, log_level="info")  # as the example scripts run it
Trainer(model=model, args=args, train_dataset=Random(), callbacks=[Hang(hang_at)]).train()
'''

LIGHTNING = COMMON + r'''
import lightning as L
from lightning.pytorch.callbacks import TQDMProgressBar

def augment(batch):
    x, y = batch
    if augment.calls == int(sys.argv[1]):
        raise RuntimeError("CUDA error: an illegal memory access was encountered\nCUDA kernel errors might be "
                           "asynchronously reported at some other API call, so the stacktrace below might be "
                           "incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1\nCompile with "
                           "`TORCH_USE_CUDA_DSA` to enable device-side assertions.\n")
    augment.calls += 1
    return x, y
augment.calls = 0

class Tiny(L.LightningModule):
    def __init__(self):
        super().__init__(); self.net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    def training_step(self, batch, i):
        x, y = augment(batch)
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.log("loss", loss, prog_bar=True)
        return loss
    def configure_optimizers(self): return torch.optim.SGD(self.parameters(), lr=0.01)

data = torch.utils.data.TensorDataset(torch.randn(1536, 16), torch.randn(1536, 1))
loader = torch.utils.data.DataLoader(data, batch_size=32)
bar = [TQDMProgressBar(refresh_rate=1)] if sys.argv[2] == "tqdm" else []
trainer = L.Trainer(max_epochs=int(sys.argv[3]), accelerator="cpu", logger=False, callbacks=bar,
                    enable_checkpointing=True, default_root_dir=sys.argv[4], enable_model_summary=True)
trainer.fit(Tiny(), loader)
'''

TQDM_GLUED = COMMON + r'''
from tqdm import tqdm
bar = tqdm(total=200, desc="train", mininterval=0)  # never closed: tqdm's final redraw comes at exit
def step(i):
    if i == 120:
        raise ValueError(f"batch {i}: expected input of shape [8, 512], got [8, 0]")
    return torch.randn(8, 8).sum()
for i in range(200):
    loss = step(i)
    bar.set_postfix(loss=f"{loss.item():.3f}", refresh=False)
    bar.update(1)
'''

DATALOADER_DEATH = COMMON + r'''
import signal
class Dies(torch.utils.data.Dataset):
    def __len__(self): return 4096
    def __getitem__(self, i):
        if i == 700:
            os.kill(os.getpid(), signal.SIGKILL)  # the OOM killer taking a worker
        return torch.randn(64)
loader = torch.utils.data.DataLoader(Dies(), batch_size=16, num_workers=2)
for step, batch in enumerate(loader):
    if step % 10 == 0:
        print(f"step={step} loss={1.0 / (step + 1):.4f}", flush=True)
'''

TORCHRUN = COMMON + r'''
import torch.distributed as dist
dist.init_process_group("gloo")
rank = dist.get_rank()
w = torch.nn.Linear(32, 32)
for step in range(1, 61):
    x = torch.randn(8, 32)
    loss = w(x).pow(2).mean()
    loss.backward()
    for p in w.parameters():
        dist.all_reduce(p.grad)
    if rank == 0 and step % 10 == 0:
        print(f"step={step} loss={loss.item():.4f}", flush=True)
    if rank == 3 and step == 45:
        raise RuntimeError("CUDA error: an illegal memory access was encountered\nCUDA kernel errors might be "
                           "asynchronously reported at some other API call, so the stacktrace below might be "
                           "incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1\nCompile with "
                           "`TORCH_USE_CUDA_DSA` to enable device-side assertions.\n")
dist.destroy_process_group()
'''

HOME_MADE = COMMON + r'''
import threading
w = torch.nn.Linear(64, 1)
opt = torch.optim.SGD(w.parameters(), lr=0.01)
out = sys.argv[1]
for step in range(1, 251):
    loss = w(torch.randn(32, 64)).pow(2).mean()
    opt.zero_grad(); loss.backward(); opt.step()
    if step % 25 == 0:
        print(f"step={step} loss={loss.item():.4f}")
    if step % 100 == 0:
        path = f"{out}/ckpt_step{step}.pt"
        torch.save(w.state_dict(), path)
        print(f"saved checkpoint {path}")
sys.stdout.flush()
threading.Event().wait()  # hung after the checkpoint
'''

BUFFERED = COMMON + r'''
import time
print("loading 64 shards from /mnt/blob/data", file=sys.stderr)  # stderr: line-buffered, shows at once
w = torch.nn.Linear(64, 1)
for step in range(1, 100000):
    loss = w(torch.randn(32, 64)).pow(2).mean()
    if step % 50 == 0:
        print(f"step={step} loss={loss.item():.4f}")  # no flush, no PYTHONUNBUFFERED: an 8 KiB buffer
    time.sleep(0.002)
'''


@dataclass(frozen=True)
class Scenario:
    name: str
    program: str
    args: tuple[str, ...]
    how: str  # the README line
    silence: float | None = None  # stop the run once it printed nothing for this long (a hang)
    limit: float = 240.0  # stop it after this long at most (still running: "progressing")
    unbuffered: bool = True
    torchrun: int = 0


SCENARIOS = (
    Scenario("hf-progressing", HF, ("100000", "0", "{tmp}"),
             "transformers 5 Trainer, GPT-2 (2 layers) from config, random tokens; stopped while training",
             limit=25),
    Scenario("hf-hung-after-checkpoint", HF, ("100000", "47", "{tmp}"),
             "transformers 5 Trainer; a callback blocks forever after step 47 (checkpoints at 20 and 40)",
             silence=8),
    Scenario("hf-finished", HF, ("30", "0", "{tmp}"),
             "transformers 5 Trainer, 30 steps to the end (final save)"),
    Scenario("lightning-crash-rich", LIGHTNING, ("70", "rich", "3", "{tmp}"),
             "Lightning 2.6 (rich bar, as with transformers installed), RuntimeError with CUDA's hint lines "
             "in step 70"),
    Scenario("lightning-crash-tqdm", LIGHTNING, ("70", "tqdm", "3", "{tmp}"),
             "Lightning 2.6 with TQDMProgressBar, the same RuntimeError in step 70"),
    Scenario("lightning-finished", LIGHTNING, ("-1", "tqdm", "2", "{tmp}"),
             "Lightning 2.6 with TQDMProgressBar, 2 epochs to `max_epochs=2` reached"),
    Scenario("tqdm-glued-traceback", TQDM_GLUED, (),
             "a tqdm loop raising ValueError mid-bar (the traceback glued to the bar, tqdm's redraw at exit)"),
    Scenario("dataloader-worker-killed", DATALOADER_DEATH, (),
             "a DataLoader with 2 workers, one SIGKILLed (as by the OOM killer) at item 700"),
    Scenario("torchrun-rank-traceback", TORCHRUN, (),
             "torchrun --standalone --nproc-per-node 4 (gloo); rank 3 raises a CUDA-style RuntimeError in step 45",
             torchrun=4),
    Scenario("home-made-checkpoint-hung", HOME_MADE, ("{tmp}",),
             "a home-made loop printing step=/loss= and `saved checkpoint …`, hung after step 250",
             silence=6),
    Scenario("buffered-silence", BUFFERED, (),
             "a loop printing step= lines without PYTHONUNBUFFERED (8 KiB buffer), stopped after 20 s",
             limit=20, unbuffered=False),  # 20 s of prints: under 8 KiB, never written
)


def stamp(moment: float) -> str:
    dt = datetime.fromtimestamp(moment, UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{int(moment * 1e9) % 1_000_000_000:09d}Z"


class StreamLogger(threading.Thread):
    """One stream as the kubelet's logger reads it: pieces (time, stream, text, partial)."""

    def __init__(self, pipe, name: str, pieces: list, lock: threading.Lock, activity: list[float]) -> None:
        super().__init__(daemon=True)
        self.pipe, self.name, self.pieces, self.lock, self.activity = pipe, name, pieces, lock, activity
        self.pending = b""
        self.closed = threading.Event()

    def emit(self, data: bytes, partial: bool) -> None:
        with self.lock:
            self.pieces.append((time.time(), self.name, data, partial))

    def run(self) -> None:
        fd = self.pipe.fileno()
        while True:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            self.activity[0] = time.monotonic()
            self.pending += chunk
            while True:
                cut = self.pending.find(b"\n")
                if cut >= 0 and cut < PARTIAL:
                    self.emit(self.pending[:cut], False)
                    self.pending = self.pending[cut + 1:]
                elif len(self.pending) >= PARTIAL:
                    self.emit(self.pending[:PARTIAL], True)
                    self.pending = self.pending[PARTIAL:]
                else:
                    break
        self.closed.set()


def kubectl_lines(pieces: list[tuple[float, str, bytes, bool]]) -> list[str]:
    """`kubectl logs --timestamps`: partials joined with what ends them, under the first's time."""
    open_runs: dict[str, tuple[float, bytes]] = {}
    lines: list[tuple[float, bytes]] = []
    for moment, stream, data, partial in pieces:
        first, held = open_runs.pop(stream, (moment, b""))
        if partial:
            open_runs[stream] = (first, held + data)
        else:
            lines.append((first, held + data))
    lines.extend(open_runs.values())  # a partial still open when the log was read
    lines.sort(key=lambda x: x[0])
    return [f"{stamp(t)} {data.decode('utf-8', errors='replace')}" for t, data in lines]


def _kill_tree(pid: int) -> None:
    """SIGKILL the run and every process under it (torchrun's workers lead sessions of their own)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    todo, tree = [pid], []
    while todo:
        current = todo.pop()
        tree.append(current)
        todo.extend(children.get(current, []))
    for member in tree:
        with contextlib.suppress(ProcessLookupError):
            os.kill(member, signal.SIGKILL)


def _paths(python: str) -> list[tuple[str, str]]:
    """This machine's interpreter paths → a training image's, so fixtures do not name this machine."""
    got = subprocess.run([python, "-c", "import sys, sysconfig; print(sysconfig.get_paths()['purelib']); "
                          "print(sysconfig.get_paths()['stdlib'])"], capture_output=True, text=True, check=True)
    site, stdlib = got.stdout.split()
    return [(site, "/opt/conda/lib/python3.11/site-packages"), (stdlib, "/opt/conda/lib/python3.11"),
            (str(Path(python).parent), "/opt/conda/bin")]


def record(scenario: Scenario, python: str, out: Path) -> tuple[int | None, int]:
    with tempfile.TemporaryDirectory(prefix="rec-") as tmp:
        program = Path(tmp) / "train.py"
        program.write_text(scenario.program)
        args = [a.replace("{tmp}", tmp) for a in scenario.args]
        if scenario.torchrun:
            cmd = [python, "-m", "torch.distributed.run", "--standalone",  # a free port on loopback
                   f"--nproc-per-node={scenario.torchrun}", str(program), *args]
        else:
            cmd = [python, str(program), *args]
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
        env.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
                    "OMP_NUM_THREADS": "1", "TERM": "dumb"})
        if scenario.unbuffered:
            env["PYTHONUNBUFFERED"] = "1"
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=tmp,
                                start_new_session=True)
        pieces: list = []
        lock = threading.Lock()
        activity = [time.monotonic()]
        readers = [StreamLogger(proc.stdout, "stdout", pieces, lock, activity),
                   StreamLogger(proc.stderr, "stderr", pieces, lock, activity)]
        for r in readers:
            r.start()
        started = time.monotonic()
        stopped = False
        while proc.poll() is None:
            now = time.monotonic()
            quiet = now - activity[0]
            if (scenario.silence is not None and quiet > scenario.silence) or now - started > scenario.limit:
                with lock:
                    snapshot = list(pieces)  # what the kubelet holds while the run still runs
                _kill_tree(proc.pid)
                stopped = True
                break
            time.sleep(0.2)
        proc.wait()
        for r in readers:
            r.closed.wait(10)
        if not stopped:
            with lock:
                snapshot = list(pieces)
            for r in readers:  # EOF: the runtime writes the unterminated remainder as a line
                if r.pending:
                    snapshot.append((time.time(), r.name, r.pending, False))
        lines = kubectl_lines(snapshot)
        text = "".join(line + "\n" for line in lines).replace(tmp, WORKDIR)  # stable paths in fixtures
        for local, shown in _paths(python):
            text = text.replace(local, shown)
        out.write_text(text, encoding="utf-8")
        return (None if stopped else proc.returncode), len(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", default=sys.executable, help="the venv with torch, transformers, lightning")
    parser.add_argument("scenarios", nargs="*", help="names (default: all)")
    opts = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    chosen = [s for s in SCENARIOS if not opts.scenarios or s.name in opts.scenarios]
    for s in chosen:
        began = time.monotonic()
        code, count = record(s, opts.python, OUT / f"{s.name}.log")
        state = "stopped while running" if code is None else f"exit {code}"
        print(f"{s.name}.log: {count} lines, {state}, {time.monotonic() - began:.0f} s — {s.how}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
