"""The monitor keeps the training ETAs it computes, as a status does (issue 35, `kueue_etas`).

A run waiting for quota gets an `earliest` start only from a holder's ETA (SPEC §5b), and a
status reads no other team's log to compute one: it uses the ETA a read of that run kept in Redis
for an hour. The monitor reads up to 20 running runs' logs each sweep; keeping what it computed
means the runs waiting behind a healthy holder get their earliest start without anyone having
looked at the holder first. A stalled run has no ETA and keeps none.

Through the emulator, the fake Slack and the suite's Redis, as tests/monitor/test_last_read.py;
the submitter mirror's shape is KubeRay's (tests/live/test_submitter_log.py), the header line is
the Hugging Face Trainer's (`***** Running training *****` block, tests/fixtures/logs/real/hf-progressing.log).
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from redis import Redis

from tests.fakes.kube_api import running_emulator
from tests.fakes.slack_api import running_fake_slack
from tests.live.conftest import workspace_objects
from tests.live.test_rounds_every_case import mirrored
from tests.live.test_submitter_log import ray_run
from workers.collect.kueue_etas import EtaRecord
from workers.records import keys

from .test_last_read import LATENCY, NOW, RAY_UID, TOKEN, sweep


def progressing(steps: list[int], total: int) -> list[str]:
    """The Trainer's header with its total, then one log dict a minute (HF Trainer's `log()` shape)."""
    return [f"  Total optimization steps = {total:,}",
            *(f"{{'loss': {2 - s / 1000:.4f}, 'grad_norm': 1.1, 'learning_rate': 4e-05, 'step': {s}}}"
              for s in steps)]


def test_a_sweep_keeps_the_eta_of_a_progressing_run_for_the_runs_waiting_behind_it(
        tmp_path: Path, redis_url: str, conn: Redis) -> None:
    with running_emulator(workspace_objects(), latency=LATENCY) as emu, running_fake_slack(token=TOKEN) as fake:
        objects, sub_pod, _service, job_id = ray_run()
        for obj in objects:
            emu.upsert(obj)
        # 10 steps a minute, the last one a minute ago: 900 steps left → 90 minutes from then
        mirrored(emu, sub_pod, job_id, progressing(list(range(10, 110, 10)), 1000), 1)
        sweep(emu, fake, tmp_path, redis_url)
        raw = conn.get(keys.run_eta_key(RAY_UID))
        assert raw is not None, "the monitor kept no ETA"
        record = EtaRecord.model_validate_json(raw)
        assert record.at == NOW
        assert NOW + timedelta(minutes=80) < record.end < NOW + timedelta(minutes=100)


def test_a_stalled_run_keeps_no_eta(tmp_path: Path, redis_url: str, conn: Redis) -> None:
    with running_emulator(workspace_objects(), latency=LATENCY) as emu, running_fake_slack(token=TOKEN) as fake:
        objects, sub_pod, _service, job_id = ray_run()
        for obj in objects:
            emu.upsert(obj)
        mirrored(emu, sub_pod, job_id, progressing(list(range(10, 110, 10)), 1000), 45)  # quiet 45 min
        sweep(emu, fake, tmp_path, redis_url)
        assert conn.get(keys.run_eta_key(RAY_UID)) is None
