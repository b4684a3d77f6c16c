"""``tft status``: a run's state read from its directory alone, for every way a sitting ends."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from tf_transformer.cli import main
from tf_transformer.training.sittings import SittingLog
from tf_transformer.training.status import describe_status, run_state, run_status

HOST = {"cpu": "AMD EPYC", "cpus": 2, "cpu_flags": ["avx2", "avx512_bf16"], "gpus": []}


def make_run(root, backup_step=600, evaluations=(31.0, 33.5, 33.1, 32.9), patience=10, window=1, max_minutes=None):
    """A run directory with what tft train writes, minus the weights' contents."""
    run = root / "run"
    (run / "backup").mkdir(parents=True)
    (run / "config.yaml").write_text(yaml.safe_dump({
        "name": "multi30k_tiny", "model": {"d_model": 128, "num_layers": 4, "num_heads": 4, "d_ff": 256},
        "train": {"train_steps": 8000, "early_stopping_patience": patience, "best_metric": "val_bleu",
                  "best_metric_window": window, "max_minutes": max_minutes}}))
    (run / "backup" / "training_metadata.json").write_text(json.dumps({"epoch": 6, "batch": 0, "step": backup_step}))
    rows, best, best_step = [], None, None
    for i, bleu in enumerate(evaluations, start=1):
        if best is None or bleu > best:
            best, best_step = bleu, 100 * i
        rows.append({"step": 100 * i, "minutes": 1.5 * i, "val_bleu": bleu, "val_loss": 2.0 - i / 10,
                     "best": best, "best_step": best_step})
    (run / "eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run / "checkpoints").mkdir()
    for step in (200, 300, 400):
        (run / "checkpoints" / f"ckpt-{step}.weights.h5").write_bytes(b"")
    (run / "best").mkdir()
    (run / "best" / "best-200.weights.h5").write_bytes(b"")
    return run


def sitting(run, start, end=None, ended_by=None):
    log = SittingLog(run)
    log.start(start, "default (1 replica on CPU)", 1, host_info=HOST)
    if end is not None:
        log.end(end, ended_by, 60.0)


def test_status_lines_of_a_run(tmp_path):
    run = make_run(tmp_path)
    sitting(run, 0, 600, "max_minutes")
    text = describe_status(run_status(run))
    lines = text.splitlines()
    assert lines[0] == f"{run}: multi30k_tiny (d_model 128, num_layers 4, num_heads 4, d_ff 256)"
    assert lines[1] == ("  state: stopped by the time budget (train.max_minutes) at update 600 of 8,000: rerun the "
                        "training command to continue from it")
    assert ("validation: 4 evaluations, the latest at update 400: val_bleu 32.90, val_loss 1.600; best val_bleu "
            "33.5 at update 200, 2 evaluations since (early stopping after 10)") in lines[2]
    assert lines[3] == "  checkpoints: 3 kept, updates 200-400; best weights of update 200 in best/"
    assert lines[4].startswith("  backup: update 600 (where a rerun resumes), written ") and lines[4].endswith(" ago")
    assert lines[5].startswith("  sittings: 1 sitting: 1. ") and "updates 0-600, 10.00 updates/s" in lines[5]


def test_a_budget_stop_says_the_minutes_so_far_and_that_the_budget_is_per_sitting(tmp_path):
    run = make_run(tmp_path, backup_step=1200, max_minutes=52.5)  # evaluations to update 400, clock 6.0 min
    log = SittingLog(run)
    log.start(0, "default (1 replica on CPU)", 1, host_info=HOST)  # cut off: no end, no training time recorded
    sitting(run, 600, 1200, "max_minutes")  # records 60 s of training
    tail = (": rerun the training command to continue from it (train.max_minutes=52.5 budgets each sitting "
            "afresh: a rerun trains up to that long again)")
    status = run_status(run)
    assert run_state(status) == ("stopped by the time budget (train.max_minutes) at update 1,200 of 8,000 after 2 "
                                 "sittings and 6.0 training minutes (the clock at update 400's evaluation)" + tail)
    for row in status["evaluations"]:  # no clock in the log: the sittings' recorded times, the cut one missing
        row.pop("minutes")
    assert run_state(status) == ("stopped by the time budget (train.max_minutes) at update 1,200 of 8,000 after 2 "
                                 "sittings and 1.0 training minutes" + tail)


@pytest.mark.parametrize("ended_by, backup_step, expected", [
    ("train_steps", 8000, "finished: update 8,000 of 8,000, the update limit (raise train.train_steps to train on)"),
    ("early_stopping", 5200, "finished by early stopping at update 5,200 of 8,000"),
    ("SIGTERM", 3000, "stopped by SIGTERM at update 3,000 of 8,000: rerun the training command to continue from it"),
    ("error (OSError)", 3000, "stopped by error (OSError) at update 3,000 of 8,000: rerun the training command"),
    ("error (DataError)", 3000, "stopped by error (DataError) at update 3,000 of 8,000, a problem with the run's "
                                "inputs or files that a rerun alone meets again: fix what the error said"),
    ("nan", 2950, "stopped: the loss became non-finite (no backup of that update was written; newest backup "
                  "update 2,950 of 8,000)"),
])
def test_state_says_why_a_sitting_ended(tmp_path, ended_by, backup_step, expected):
    run = make_run(tmp_path, backup_step=backup_step)
    sitting(run, 0, backup_step, ended_by)
    assert run_state(run_status(run)).startswith(expected)


def test_an_open_sitting_is_training_or_cut_off(tmp_path):
    import platform

    run = make_run(tmp_path, backup_step=650)
    sitting(run, 0, 600, "max_minutes")
    sitting(run, 600)  # open: this process's pid and machine
    status = run_status(run, now=(run / "backup" / "training_metadata.json").stat().st_mtime + 30)
    here = platform.node()

    def running(pid, started):
        return True

    def gone(pid, started):
        return False

    assert run_state(status, node=here, alive=running).startswith(
        "training now (sitting 2, pid ")
    assert "newest backup update 650 of 8,000, written 30 s ago" in run_state(status, node=here, alive=running)
    assert run_state(status, node=here, alive=gone).startswith(
        "cut off: sitting 2's process (pid ")
    assert run_state(status, node=here, alive=gone).endswith(
        "newest backup update 650 of 8,000: rerun the training command to continue from it")
    # on another machine the process cannot be asked: the backup's age is what there is
    assert run_state(status, node=here + "-elsewhere").startswith(
        f"sitting 2 has no recorded end (training on {here} now, or killed): newest backup update 650 of 8,000, "
        "written 30 s ago")
    # its pace from the evaluations: 100 updates per 1.5 minutes; 7,350 updates left = 110.25 min
    assert run_state(status, node=here, alive=running).endswith(
        "1.11 updates/s over the last evaluations, update 8,000 in about 1 h 50 min at that pace (unless early "
        "stopping or a time budget ends it first)")
    # the real check: this test's own process is alive
    assert run_state(status).startswith("training now")


def test_an_open_sitting_under_a_time_budget_says_when_and_near_which_update_it_ends(tmp_path):
    import datetime
    import platform

    def running(pid, started):
        return True

    def state(max_minutes, after_seconds):
        run = make_run(tmp_path / f"{max_minutes}-{after_seconds}", backup_step=600, max_minutes=max_minutes)
        sitting(run, 0)  # open, started now
        stamp = run_status(run)["sittings"][-1]["started"]
        started = datetime.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.timezone.utc)
        now = started.timestamp() + after_seconds
        text = run_state(run_status(run, now=now), node=platform.node(), alive=running)
        return text, started

    # 45 minutes from the sitting's start, 15 gone: the budget ends first, in 30 minutes; the backup of
    # update 600 is about 15 minutes old, so at 100 updates per 1.5 minutes the sitting ends near
    # 600 + 2,700 s x 1.11/s = 3,600
    text, started = state(45, 900)
    end = started + datetime.timedelta(minutes=45)
    assert text.endswith(
        f"1.11 updates/s over the last evaluations; the time budget (train.max_minutes=45) ends this sitting at "
        f"about {end:%H:%M} UTC, in about 30 min, near update 3,600 at that pace (unless early stopping ends it "
        "first)"), text
    # past the budget: the sitting stops at its next update
    assert state(45, 2800)[0].endswith("its time budget (train.max_minutes=45) is spent: it stops at its next update")
    # a budget longer than the updates left: the update limit comes first (7,400 updates in 111 min, less
    # the 15 minutes since the backup)
    assert state(600, 900)[0].endswith(
        "update 8,000 in about 1 h 36 min at that pace (unless early stopping or a time budget ends it first)")


def test_a_later_process_with_the_same_pid_is_not_the_sitting(tmp_path):
    import os

    from tf_transformer.training.sittings import process_start
    from tf_transformer.training.status import _process_alive

    started = process_start(os.getpid())
    if started is None:
        pytest.skip("no /proc on this system")
    assert _process_alive(os.getpid(), started) and _process_alive(os.getpid())
    assert not _process_alive(os.getpid(), started + 1)  # same pid, another start: another process
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    assert not _process_alive(int(done.stdout), started)  # gone


def test_runs_without_sittings_and_without_backups(tmp_path):
    run = make_run(tmp_path, backup_step=1200)
    assert "no sittings recorded (a run from before they were)" in run_state(run_status(run))
    # its evaluations alone show a patience run out: 3 since the best with patience 3
    stopped = make_run(tmp_path / "old", backup_step=400, patience=3, evaluations=(33.5, 33.1, 32.9, 32.0))
    assert run_state(run_status(stopped)) == ("finished by early stopping at update 400 of 8,000 (3 evaluations since "
                                              "the best; no sittings recorded)")
    (run / "backup" / "training_metadata.json").unlink()
    assert run_state(run_status(run)) == "not started: no backup written yet"


def test_pace_over_the_last_evaluations():
    from tf_transformer.training.status import pace

    rows = [{"step": 100 * i, "minutes": m} for i, m in enumerate([2.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0], start=1)]
    assert pace(rows) == pytest.approx(500 / (5 * 60))  # the first, slow interval is past the window
    assert pace(rows, last=6) == pytest.approx(600 / (7 * 60))
    assert pace(rows[:1]) is None and pace([]) is None


def test_windowed_metric_is_named(tmp_path):
    run = make_run(tmp_path, window=5)
    assert "best val_bleu (mean of the last 5) 33.5 at update 200" in describe_status(run_status(run))


def test_command_prints_text_or_json_and_refuses_non_runs(tmp_path, capsys):
    run = make_run(tmp_path)
    sitting(run, 0, 600, "SIGINT")
    assert main(["status", str(run)]) == 0
    out = capsys.readouterr().out
    assert "state: stopped by SIGINT (Ctrl-C) at update 600 of 8,000" in out
    assert main(["status", str(run), "--json", "-"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["backup_step"] == 600 and data["checkpoints"] == [200, 300, 400] and data["state"].startswith("stopped")
    assert main(["status", str(run), str(tmp_path / "nothing")]) == 2
    out, err = capsys.readouterr()
    assert out == "" and f"{tmp_path / 'nothing'} does not exist: not a run directory" in err
    assert main(["status", str(run), "--json", str(tmp_path)]) == 2  # a folder: the flag named, nothing printed
    out, err = capsys.readouterr()
    assert out == "" and f"--json {tmp_path}" in err
    (tmp_path / "empty").mkdir()
    assert main(["status", str(tmp_path / "empty")]) == 2
    assert "has no config.yaml" in capsys.readouterr().err


def test_status_does_not_load_tensorflow(tmp_path):
    run = make_run(tmp_path)
    code = ("import sys; from tf_transformer.cli import main; "
            f"rc = main(['status', {str(run)!r}]); print(rc, 'tensorflow' in sys.modules, 'keras' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.stdout.strip().splitlines()[-1] == "0 False False", done.stdout + done.stderr


def test_a_reader_that_leaves_early_gets_no_error(tmp_path):
    """`tft status RUN | head -3`: the pipe closed before the output is written is not an error."""
    run = make_run(tmp_path)
    proc = subprocess.Popen([sys.executable, "-m", "tf_transformer.cli", "status", str(run), str(run)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc.stdout.close()  # before the process has written anything
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == 141
    assert err == "", err


def test_an_open_sitting_without_evaluations_is_paced_by_its_backups(tmp_path):
    """No BLEU evaluations to time: the pace is the sitting's own, from its start to its newest
    backup (it used to give no outlook at all)."""
    import datetime
    import platform

    run = make_run(tmp_path, backup_step=1_000, evaluations=(), max_minutes=None)
    sitting(run, 400)  # open, started now, at update 400
    stamp = run_status(run)["sittings"][-1]["started"]
    started = datetime.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.timezone.utc)
    status = run_status(run, now=started.timestamp() + 600)
    status["backup_age_seconds"] = 0.0  # the backup of update 1,000 is 600 s into the sitting: 1 update/s
    text = run_state(status, node=platform.node(), alive=lambda pid, started: True)
    assert text.endswith("1.00 updates/s over this sitting so far, update 8,000 in about 1 h 57 min at that pace "
                         "(unless early stopping or a time budget ends it first)"), text
