"""Our pipeline's first N training batches (multi30k_tiny, the SentencePiece model of the fairseq
run in FS_RUN), in fairseq's ids (source + EOS, decoder input starting with EOS, pad 1), for
our_side.py's BATCHES. OVERRIDES: "section.field=value ..." for the preset; OUT: the .npz to write.

usage: FS_RUN=/work/fs OUT=batches_ours.npz dump_ours.py N
"""
import os
import sys

import numpy as np

from tf_transformer.config import load_config
from tf_transformer.data.batching import make_dataset
from tf_transformer.data.tokenizer import Tokenizer

N = int(sys.argv[1])
run = os.environ["FS_RUN"]
tok = Tokenizer(f"{run}/spm.model")
fs_ids = {line.split(" ")[0]: i + 4 for i, line in enumerate(open(f"{run}/bin/dict.en.txt", encoding="utf-8"))}
V = 10000
table = np.full(V, 3, np.int32)  # unknown to fairseq's dictionary -> <unk>
for i in range(4, V):
    table[i] = fs_ids.get(tok.id_to_piece([i])[0], 3)
table[0], table[1], table[2], table[3] = 1, 3, 2, 2  # pad, unk, BOS (fairseq starts with EOS), EOS
cfg = load_config("multi30k_tiny", overrides=[o for o in os.environ.get("OVERRIDES", "").split() if o])
ds = make_dataset(cfg.data, "train", tok, training=True, verbose=False)
out = {}
for u, ((s, ti), to) in enumerate(ds.take(N)):
    s, ti, to = s.numpy(), ti.numpy(), to.numpy()
    n = (s != 0).sum(1)
    s = np.pad(s, ((0, 0), (0, 1)))
    s[np.arange(len(s)), n] = 3  # source EOS, as fairseq
    out[f"{u}_0_src"], out[f"{u}_0_prev"], out[f"{u}_0_tgt"] = table[s], table[ti], table[to]
np.savez(os.environ.get("OUT", "batches_ours.npz"), **out)
print("unmapped target pieces:", int(sum((out[k] == 3).sum() for k in out if k.endswith("tgt"))))
