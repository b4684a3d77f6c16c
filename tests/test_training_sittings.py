"""A run's sittings (``sittings.jsonl``): one line per train call, completed when it ends,
left open when the process dies, with the host it ran on."""

from __future__ import annotations

import json

import keras
import pytest
from helpers.synthetic import dataset_fn, task_batches, tiny_config

from tf_transformer.training import sittings
from tf_transformer.training.sittings import SittingLog, describe_sittings, read_sittings

CPUINFO = """processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC 9R14
flags\t\t: fpu sse2 avx2 fma avx512f avx512bw avx512_vnni avx512_bf16 ht
"""


def _host():
    return {"cpu": "AMD EPYC 9R14", "cpus": 2, "cpu_flags": ["avx2", "avx512_bf16"], "gpus": [],
            "tensorflow": "2.21.0", "python": "3.11.9", "system": "Linux"}


def test_host_names_the_cpu_and_its_speed_flags(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(CPUINFO)
    h = sittings.host(str(cpuinfo))
    assert h["cpu"] == "AMD EPYC 9R14"
    # only the flags that set the speed, in a fixed order
    assert h["cpu_flags"] == ["avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16"]
    assert h["cpus"] >= 1 and h["tensorflow"] and h["python"].startswith("3.")
    assert sittings.host(str(tmp_path / "missing"))["cpu_flags"] == []  # other systems: no flags, no error


def test_a_sitting_is_written_at_its_start_and_completed_at_its_end(tmp_path):
    log = SittingLog(tmp_path)
    log.start(0, "default (1 replica on CPU)", 1, host_info=_host())
    [row] = read_sittings(tmp_path)  # on disk before training: a killed sitting leaves it open
    assert (row["sitting"], row["start_step"], row["ended"], row["ended_by"]) == (1, 0, None, None)
    log.end(600, "max_minutes", train_seconds=300.0)
    [row] = read_sittings(tmp_path)
    assert (row["end_step"], row["ended_by"], row["updates_per_second"]) == (600, "max_minutes", 2.0)
    assert row["started"] <= row["ended"] and row["ended"].endswith("Z")
    # the next train call on the directory is sitting 2; the first stays as it was
    again = SittingLog(tmp_path)
    again.start(600, "default (1 replica on CPU)", 1, host_info=_host())
    again.end(600, "train_steps", train_seconds=0.0)  # nothing left to train: no speed
    first, second = read_sittings(tmp_path)
    assert first == row and (second["sitting"], second["start_step"], second["updates_per_second"]) == (2, 600, None)
    with pytest.raises(RuntimeError):
        again.end(700, "train_steps", 1.0)


def test_description_of_sittings(tmp_path):
    assert "No sittings recorded" in describe_sittings([])
    log = SittingLog(tmp_path)
    log.start(0, "default", 1, host_info=_host())
    log.end(3000, "max_minutes", 3000.0)
    log = SittingLog(tmp_path)
    log.start(2950, "default", 1, host_info={**_host(), "cpu": "Intel Xeon", "cpu_flags": ["avx2"]})
    text = describe_sittings(read_sittings(tmp_path))  # the second sitting was killed
    assert text.startswith("2 sittings: 1. ")
    assert "updates 0-3,000, 1.00 updates/s" in text and "AMD EPYC 9R14, 2 CPUs, avx2 avx512_bf16" in text
    assert "; 2. since " in text and "no recorded end, from update 2,950 on Intel Xeon, 2 CPUs, avx2." in text
    assert text.endswith("The last sitting has no recorded end: it is still training, or it was killed.")
    assert "Training ended by" not in text
    log = SittingLog(tmp_path)  # a third sitting: the second one was cut off, and that is known now
    log.start(3000, "default", 1, host_info=_host())
    log.end(3100, "train_steps", 100.0)
    text = describe_sittings(read_sittings(tmp_path))
    assert "; 2. from " in text and ", cut off (no recorded end), updates 2,950-3,000 kept (sitting 3 resumed " \
        "from its backup of update 3,000; any updates after that backup were lost) on Intel Xeon" in text
    assert text.endswith("Training ended by the update limit (train.train_steps).")
    killed = [{**row, "ended": None, "end_step": None} for row in read_sittings(tmp_path)[:2]]
    killed[1]["start_step"] = killed[0]["start_step"]  # killed again before its first backup
    text = describe_sittings(killed)
    assert "1. from " in text
    assert "cut off (no recorded end), from update 0, nothing kept (sitting 2 started again from update 0)" in text
    assert sittings.ended_by_words("early_stopping") == "early stopping"
    assert sittings.ended_by_words("error (OSError)") == "error (OSError)"
    assert sittings.ended_by_words("max_minutes") == "the time budget (train.max_minutes)"
    assert sittings.ended_by_words("max_minutes", field=False) == "the time budget"
    assert sittings.ended_by_words(None, field=False) == "no end recorded"


def test_train_records_its_sittings_and_an_error_ends_one(tmp_path):
    from tf_transformer.training import train

    vocab = 16
    batches = task_batches(2, 4, vocab, "reverse", max_len=6)
    cfg = tiny_config(vocab, str(tmp_path / "run"), train_steps=4, steps_per_epoch=2, warmup_steps=2)
    train(cfg, train_data=dataset_fn(batches), valid_data=False, verbose=0)
    [first] = read_sittings(tmp_path / "run")
    assert (first["start_step"], first["end_step"], first["ended_by"], first["replicas"]) == (0, 4, "train_steps", 1)
    assert first["host"]["cpu_flags"] == [f for f in sittings.SPEED_FLAGS
                                          if f in sittings.cpu_flags()]

    class Fails(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            raise OSError("disk went away")

    cfg.train.train_steps = 8
    with pytest.raises(OSError, match="disk went away"):
        train(cfg, train_data=dataset_fn(batches), valid_data=False, verbose=0, callbacks=[Fails()])
    first_again, second = read_sittings(tmp_path / "run")
    assert first_again == first
    assert (second["start_step"], second["ended_by"]) == (4, "error (OSError)") and second["ended"]
    assert second["end_step"] == 5  # the update that ran before the callback raised
    text = json.dumps(second)
    assert "disk went away" not in text  # the type, not the message (which may hold paths)
