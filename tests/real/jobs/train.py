"""A training-shaped driver for a real Ray job: `python train.py MODE`.

Each mode prints what a real framework prints, with the framework's own code
where it runs here (tqdm for bars, Ray actors for worker prefixes, Python's
faulthandler, real exceptions) and no model: the suite tests reading logs, not
training. Formats: shared/reference/training-logs.md §2.4–2.7.
"""

from __future__ import annotations

import faulthandler
import sys
import threading
import time


def hf_dict(i: int) -> dict:
    # transformers 5.x ProgressCallback.on_log: the values are strings (reference §2.7).
    return {"loss": f"{2.5 - i / 100:.4g}", "grad_norm": "1.147", "learning_rate": "0.0004993",
            "epoch": f"{i / 100:.4g}"}


def hf_driver() -> None:
    print("***** Running training *****")
    print("  Num examples = 1,024")
    print("  Total optimization steps = 20")
    for i in range(1, 21):
        print(hf_dict(i))
        if i % 10 == 0:  # transformers 5 step checkpoints (reference §2.7)
            print(f"Configuration saved in /tmp/out/checkpoint-{i}/config.json")
            print(f"Model weights saved in /tmp/out/checkpoint-{i}/model.safetensors")
    print({"train_runtime": "3.21", "train_samples_per_second": "318.9", "train_steps_per_second": "6.23",
           "train_loss": "2.41", "epoch": "0.2"})


def ray_workers_then_hang(release: str) -> None:
    """HF dicts printed by a Ray actor (the driver log shows `(RayTrainWorker pid=N) {...}` in ANSI
    colour), then silence: the driver waits on a file that appears only at teardown."""
    import ray

    ray.init()

    @ray.remote(num_cpus=0)
    class RayTrainWorker:
        def train(self) -> int:
            for i in range(1, 31):
                print({"loss": round(2.5 - i / 100, 4), "grad_norm": 0.91, "learning_rate": 4e-05,
                       "epoch": round(i / 100, 2)}, flush=True)
            return 30

    worker = RayTrainWorker.remote()
    print("trained steps:", ray.get(worker.train.remote()), flush=True)
    import os
    while not os.path.exists(release):  # hung: no output until the suite ends the job
        time.sleep(0.5)


def bars() -> None:
    from tqdm import tqdm

    # Lightning's TQDMProgressBar: description "Epoch N", postfix loss/v_num (reference §2.4 row 5).
    for epoch in range(2):
        bar = tqdm(total=32, desc=f"Epoch {epoch}", mininterval=0, file=sys.stderr)
        for i in range(32):
            bar.set_postfix(loss=f"{0.9 - epoch / 10 - i / 100:.3g}", v_num=15, refresh=False)
            bar.update(1)
        bar.close()
    for _ in tqdm(range(50), mininterval=0, file=sys.stderr):  # a plain tqdm loop
        pass


def steps() -> None:
    for step in range(0, 501, 50):
        print(f"step={step} loss={3.0 - step / 500:.4f} lr=3.0e-04")


def hang_dump() -> None:
    for step in range(0, 101, 50):
        print(f"step={step} loss={3.0 - step / 500:.4f}")
    sys.stdout.flush()
    faulthandler.dump_traceback_later(0.5, exit=True)  # as a training watchdog would
    threading.Event().wait()


def crash() -> None:
    for step in range(0, 101, 50):
        print(f"step={step} loss={3.0 - step / 500:.4f}")

    def collate(batch: list) -> list:
        return [int(x) for x in batch]

    collate(["1", "2", "three"])


class OutOfMemoryError(RuntimeError):
    """Stands for torch.cuda.OutOfMemoryError: same module path and message in the traceback."""


OutOfMemoryError.__module__ = "torch.cuda"


def oom() -> None:
    for step in range(0, 101, 50):
        print(f"step={step} loss={3.0 - step / 500:.4f}")
    # pytorch/pytorch#16417 comment (reference §2.5)
    raise OutOfMemoryError("CUDA out of memory. Tried to allocate 22.00 MiB. GPU 0 has a total capacity of "
                           "23.65 GiB of which 11.06 MiB is free. Including non-PyTorch memory, this process "
                           "has 23.60 GiB memory in use.")


def many() -> None:
    out = sys.stdout
    for step in range(1, 200_001):
        out.write(f"step={step} loss={3.0 - step / 200_000:.5f} lr=3.0e-04\n")


def bad_byte() -> None:
    for step in range(0, 101, 50):
        print(f"step={step} loss={3.0 - step / 500:.4f}")
    sys.stdout.flush()
    sys.stdout.buffer.write(b"tokenizer warning: \xff\xfe is not UTF-8\n")
    sys.stdout.buffer.flush()
    print("step=150 loss=2.7000", flush=True)


if __name__ == "__main__":
    mode, args = sys.argv[1], sys.argv[2:]
    {"hf-driver": hf_driver, "ray-workers-hang": ray_workers_then_hang, "bars": bars, "steps": steps,
     "hang-dump": hang_dump, "crash": crash, "oom": oom, "many": many, "bad-byte": bad_byte}[mode](*args)
