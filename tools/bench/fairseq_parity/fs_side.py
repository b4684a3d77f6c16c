"""fairseq side of the same-start, same-batches comparison (tools/bench/RESULTS.md, issue 12,
"second part"). Runs in the fairseq virtualenv of tools/bench/fairseq_multi30k.sh; FS_RUN is that
script's run directory (its binarized data in FS_RUN/bin).

dump:  fs_side.py dump OUT N_UPDATES        -> OUT/init.npz (fairseq's initial weights, seed 1),
                                               OUT/batches.npz (the first N updates' batches, 2 per update),
                                               OUT/valid.npz (validation batches)
train: fs_side.py train OUT N DROPOUT EVAL   -> trains from init.npz on those batches with fairseq's
                                               model, criterion, Adam, clip 25; prints the train loss
                                               of every update and the val NLL every EVAL updates
"""
import json
import math
import os
import sys

import numpy as np
import torch
from fairseq import options, tasks, utils
from fairseq.dataclass.utils import convert_namespace_to_omegaconf
from fairseq.optim.adam import Adam

mode, out = sys.argv[1], sys.argv[2]
N = int(sys.argv[3])
dropout = float(sys.argv[4]) if mode == "train" else 0.3
argv = [os.path.join(os.environ["FS_RUN"], "bin"), "--task", "translation", "--cpu", "--seed", "1",
        "--arch", "transformer",
        "--encoder-layers", "4", "--decoder-layers", "4", "--encoder-embed-dim", "128", "--decoder-embed-dim", "128",
        "--encoder-ffn-embed-dim", "256", "--decoder-ffn-embed-dim", "256", "--encoder-attention-heads", "4",
        "--decoder-attention-heads", "4", "--share-all-embeddings", "--dropout", str(dropout),
        "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.0", "--max-tokens", "4096"]
args = options.parse_args_and_arch(options.get_training_parser(), argv)
cfg = convert_namespace_to_omegaconf(args)
utils.set_torch_seed(1)
task = tasks.setup_task(cfg.task)
model = task.build_model(cfg.model)
criterion = task.build_criterion(cfg.criterion)
pad = task.target_dictionary.pad()
torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))

def batches(split, epochs, shuffle):
    ds = task.dataset(split)
    itr = task.get_batch_iterator(dataset=ds, max_tokens=4096, max_positions=(1024, 1024),
                                  required_batch_size_multiple=8, seed=1, epoch=1)
    for _ in range(epochs):
        yield [s for s in itr.next_epoch_itr(shuffle=shuffle)]

if mode == "dump":
    task.load_dataset("train")
    task.load_dataset("valid")
    np.savez(f"{out}/init.npz", **{k: v.numpy() for k, v in model.state_dict().items()})
    ups = []
    for epoch in batches("train", 10**6, True):
        ups += [epoch[i:i + 2] for i in range(0, len(epoch), 2)]  # update_freq 2, as fairseq groups them
        if len(ups) >= N:
            break
    arrays = {}
    for u, group in enumerate(ups[:N]):
        for j, s in enumerate(group):
            for key, value in (("src", s["net_input"]["src_tokens"]), ("prev", s["net_input"]["prev_output_tokens"]),
                               ("tgt", s["target"])):
                arrays[f"{u}_{j}_{key}"] = value.numpy().astype(np.int32)
    np.savez(f"{out}/batches.npz", **arrays)
    val = next(batches("valid", 1, False))
    fields = {}
    for i, s in enumerate(val):
        fields[f"{i}_src"] = s["net_input"]["src_tokens"].numpy().astype(np.int32)
        fields[f"{i}_prev"] = s["net_input"]["prev_output_tokens"].numpy().astype(np.int32)
        fields[f"{i}_tgt"] = s["target"].numpy().astype(np.int32)
    np.savez(f"{out}/valid.npz", **fields)
    print("dumped", len(ups[:N]), "updates,", len(val), "valid batches; vocabulary", len(task.target_dictionary))
    sys.exit()

every = int(sys.argv[5])
init = np.load(f"{out}/init.npz")
model.load_state_dict({k: torch.from_numpy(init[k]) for k in init.files})
data = np.load(f"{out}/batches.npz")
val = np.load(f"{out}/valid.npz")
nval = len(val.files) // 3
params = [p for p in model.parameters() if p.requires_grad]
opt = Adam(params, lr=0.0, betas=(0.9, 0.98), eps=1e-8, weight_decay=0.0)

def sample(arrs, prefix):
    src = torch.from_numpy(arrs[prefix + "src"]).long()
    return {"net_input": {"src_tokens": src, "src_lengths": (src != pad).sum(1),
                          "prev_output_tokens": torch.from_numpy(arrs[prefix + "prev"]).long()},
            "target": torch.from_numpy(arrs[prefix + "tgt"]).long(),
            "ntokens": int((arrs[prefix + "tgt"] != pad).sum())}

def val_nll():
    model.eval()
    tot = n = 0.0
    with torch.no_grad():
        for i in range(nval):
            loss, size, _ = criterion(model, sample(val, f"{i}_"))
            tot += float(loss)
            n += size
    model.train()
    return tot / n  # the criterion sums nats (natural-log softmax)

log = []
model.train()
for u in range(N):
    lr = 0.005 * (u + 1) / 2000 if u + 1 <= 2000 else 0.005 * math.sqrt(2000 / (u + 1))
    for g in opt.param_groups:
        g["lr"] = lr
    opt.zero_grad()
    tot = ntok = 0.0
    j = 0
    while f"{u}_{j}_src" in data.files:
        loss, size, _ = criterion(model, sample(data, f"{u}_{j}_"))
        loss.backward()
        tot += float(loss)
        ntok += size
        j += 1
    for p in params:
        if p.grad is not None:
            p.grad.mul_(1.0 / ntok)
    gnorm = float(torch.nn.utils.clip_grad_norm_(params, 25.0))
    opt.step()
    rec = {"update": u + 1, "train_nll": tot / ntok, "gnorm": gnorm}
    if (u + 1) % every == 0 or u == 0:
        rec["val_nll"] = val_nll()
    log.append(rec)
    print(json.dumps(rec), flush=True)
