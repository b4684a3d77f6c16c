"""Helper processes for the slow training tests (not collected by pytest).

    python tests/training_subprocess.py mirrored OUT.json
    python tests/training_subprocess.py multiworker OUT.json MODEL_DIR [TRAIN_STEPS [DROPOUT]]
        (TF_CONFIG set by the caller; also writes OUT.json.npz, the final weights)
    python tests/training_subprocess.py resume MODEL_DIR STEPS PROGRESS_FILE
    python tests/training_subprocess.py chaos CONFIG_YAML MODEL_DIR KILL OUT.json
        KILL: "none", "step:N" (SIGKILL itself after update N), "backup:N" (inside the
        write of the backup of update N, its partial file half written) or "validation:N"
        (during the validation after update N). Test-only kill points: nothing in the
        package knows about them.
"""

import json
import math
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import numpy as np

V = 16


def _set_two_cpus():
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)


def mirrored(out):
    """One update on 2 replicas holding batches A and B vs one device holding A+B."""
    _set_two_cpus()
    import keras
    import tensorflow as tf
    from helpers.synthetic import dataset_fn, make_batch, max_abs_difference, random_sentences

    from tf_transformer.model import Transformer
    from tf_transformer.training.strategy import distribute, make_strategy
    from tf_transformer.training.trainer import TrainingModel

    # different sentence counts and lengths per replica, as token buckets give
    a_sents = random_sentences(6, V, 2, 4, seed=1)
    b_sents = random_sentences(3, V, 6, 9, seed=2)
    batch_a, batch_b, both = make_batch(a_sents), make_batch(b_sents), make_batch(a_sents + b_sents)

    def run(strategy, fn, accumulation=1, steps=1):
        keras.utils.set_random_seed(7)
        with strategy.scope():
            model = TrainingModel(Transformer(vocab_size=V, d_model=32, num_layers=2, num_heads=4, d_ff=64,
                                              dropout=0.0), label_smoothing=0.1, accumulation_steps=accumulation,
                                  nominal_tokens=64)
            model.build()
            # plain SGD: the update is the gradient itself (Adam's first step is ~sign(g))
            opt = keras.optimizers.SGD(1.0)
            model.compile(optimizer=opt)
            opt.build(model.trainable_variables)
        before = [w.numpy().copy() for w in model.transformer.weights]
        hist = model.fit(distribute(strategy, fn), steps_per_epoch=steps, epochs=1, verbose=0, shuffle=False)
        after = [w.numpy() for w in model.transformer.weights]
        # evaluation over an odd number of batches (the last step leaves a replica without one)
        evaluation = model.evaluate(distribute(strategy, dataset_fn([batch_a, both, batch_b], repeat=False)),
                                    steps=math.ceil(3 / strategy.num_replicas_in_sync), verbose=0,
                                    return_dict=True)
        hist.history["eval_loss"] = [evaluation["loss"]]
        return hist.history, before, after, int(keras.ops.convert_to_numpy(opt.iterations))

    mirrored_strategy = make_strategy("mirrored", ["/cpu:0", "/cpu:1"])
    m_hist, m_before, m_after, m_iter = run(mirrored_strategy, dataset_fn(None, per_replica=[[batch_a], [batch_b]]))
    s_hist, s_before, s_after, s_iter = run(tf.distribute.get_strategy(), dataset_fn([both]))
    # one device, two micro-batches accumulated = one update of A+B too
    a_hist, _, a_after, a_iter = run(tf.distribute.get_strategy(), dataset_fn([batch_a, batch_b]),
                                            accumulation=2, steps=2)
    # two replicas, two micro-batches each, accumulated
    mm_hist, _, mm_after, mm_iter = run(mirrored_strategy,
                                        dataset_fn(None, per_replica=[[batch_a, batch_b], [batch_b, batch_a]]),
                                        accumulation=2, steps=2)

    result = {
        "mirrored_loss": m_hist["loss"][0], "single_loss": s_hist["loss"][0],
        "accumulated_loss": a_hist["loss"][0],
        "mirrored_accuracy": m_hist["accuracy"][0], "single_accuracy": s_hist["accuracy"][0],
        "init_diff": max_abs_difference(m_before, s_before),
        "update_size": max_abs_difference(s_before, s_after),
        "weight_diff": max_abs_difference(m_after, s_after),
        "accumulated_weight_diff": max_abs_difference(a_after, s_after),
        "iterations": [m_iter, s_iter, a_iter, mm_iter],
        "eval_loss": [m_hist["eval_loss"][0], s_hist["eval_loss"][0], a_hist["eval_loss"][0],
                      mm_hist["eval_loss"][0]], "mirrored_accumulated_loss": mm_hist["loss"][0],
        "mirrored_accumulated_weight_diff": max_abs_difference(mm_after, s_after),
    }
    from tf_transformer.errors import UserError

    try:  # a device this process does not have: refused (it used to make a replica that never ran)
        make_strategy("mirrored", ["/cpu:0", "/cpu:1", "/cpu:2"])
        result["missing_device"] = "accepted"
    except UserError as e:
        result["missing_device"] = str(e)
    from helpers.synthetic import tiny_config

    from tf_transformer.training.loop import train

    budget_cfg = tiny_config(V)  # 60 tokens over 2 replicas: 30 each, under max_length 40
    budget_cfg.data.tokens_per_batch, budget_cfg.data.max_length = 60, 40
    budget_dir = os.path.join(os.path.dirname(out), "budget_run")
    try:
        train(budget_cfg, model_dir=budget_dir, strategy=mirrored_strategy)
        result["budget"] = "accepted"
    except UserError as e:
        result["budget"] = str(e)
    result["budget_dir_left"] = os.path.exists(budget_dir)
    with open(out, "w") as f:
        json.dump(result, f)


def multiworker(out, model_dir, train_steps="6", dropout="0"):
    from helpers.synthetic import dataset_fn, task_batches, tiny_config

    from tf_transformer.training import train
    from tf_transformer.training.strategy import make_strategy, task_info

    strategy = make_strategy("multiworker")
    info = task_info(strategy)
    batches = task_batches(4, 4, V, seed=info.index)  # each worker has its own data shard
    cfg = tiny_config(V, model_dir, train_steps=int(train_steps), steps_per_epoch=3, warmup_steps=5,
                      validation_steps=2, backup_every_steps=2)
    cfg.model.dropout = float(dropout)
    result = train(cfg, strategy=strategy, train_data=dataset_fn(batches), valid_data=dataset_fn(batches[:2]),
                   verbose=0)
    weights = result.model.get_weights()
    np.savez(out + ".npz", *weights)
    report = {"chief": info.is_chief, "start_step": result.start_step, "final_step": result.final_step,
              "history": result.history, "replicas": strategy.num_replicas_in_sync,
              "checksum": float(sum(float(np.sum(np.abs(w))) for w in weights)),
              "model_path": str(result.model_path) if result.model_path else None}
    with open(out, "w") as f:
        json.dump(report, f)


def resume(model_dir, steps, progress_file):
    import keras
    from helpers.synthetic import dataset_fn, task_batches, tiny_config

    from tf_transformer.training import train
    from tf_transformer.training.callbacks import current_step

    class Progress(keras.callbacks.Callback):
        first = None

        def on_train_begin(self, logs=None):
            if self.first is None:  # step and learning rate at the start of this process's training
                Progress.first = (current_step(self.model),
                                  float(keras.ops.convert_to_numpy(self.model.optimizer.learning_rate)))

        def on_train_batch_end(self, batch, logs=None):
            with open(progress_file, "w") as f:
                f.write(str(current_step(self.model)))

    batches = task_batches(4, 8, V)
    cfg = tiny_config(V, model_dir, train_steps=int(steps), steps_per_epoch=25, warmup_steps=20,
                      backup_every_steps=10)
    result = train(cfg, train_data=dataset_fn(batches), valid_data=False, callbacks=[Progress()], verbose=0)
    print(json.dumps({"start_step": result.start_step, "final_step": result.final_step,
                      "first_step": Progress.first and Progress.first[0],
                      "first_learning_rate": Progress.first and Progress.first[1],
                      "checkpoints": [str(p) for p in result.checkpoints]}))


def chaos(config_path, model_dir, kill, out):
    import signal
    import time

    import keras

    from tf_transformer.config import load_config
    from tf_transformer.training import train
    from tf_transformer.training.callbacks import current_step

    kind, _, at = kill.partition(":")
    at = int(at or 0)
    started = time.time()

    def die():
        with open(out, "w") as f:  # what this process reached, for the lost-work figure
            json.dump({"killed": kill, "seconds": time.time() - started}, f)
        os.kill(os.getpid(), signal.SIGKILL)

    class Killer(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if kind == "step" and current_step(self.model) == at:
                die()

        def on_test_batch_end(self, batch, logs=None):
            if kind == "validation" and current_step(self.model) >= at:
                die()

    if kind == "backup":
        original = keras.Model.save_weights

        def save_weights(model, filepath, *args, **kwargs):
            original(model, filepath, *args, **kwargs)
            name = os.path.basename(str(filepath))
            if name.startswith(".partial-") and name.endswith("latest.weights.h5") and current_step(model) == at:
                with open(filepath, "r+b") as f:  # half written when the process dies
                    f.truncate(os.path.getsize(filepath) // 2)
                die()

        keras.Model.save_weights = save_weights

    result = train(load_config(config_path), model_dir=model_dir, callbacks=[Killer()], verbose=0)
    weights = [w.tolist() for w in result.model.get_weights()]
    with open(out, "w") as f:
        json.dump({"start_step": result.start_step, "final_step": result.final_step, "weights": weights,
                   "seconds": time.time() - started, "train_seconds": result.train_seconds}, f)


if __name__ == "__main__":
    mode, args = sys.argv[1], sys.argv[2:]
    {"mirrored": mirrored, "multiworker": multiworker, "resume": resume, "chaos": chaos}[mode](*args)
