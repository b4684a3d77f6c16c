#!/usr/bin/env bash
# The peer of `tools/reproduce_multi30k.sh`: Wu et al.'s Transformer-Tiny command (ACL 2021,
# "Good for Misconceived Reasons", test2016 BLEU 41.02) run in fairseq itself, on the bundled
# Multi30k and this package's own shared 10k SentencePiece vocabulary, on the CPU; scored with
# `tft score` exactly as our runs are. Same data, same pieces, same scorer: what differs is
# the implementation of the model, the training loop and the beam search.
#
# Their README's command (two GPUs):
#   train.py DATA --task translation --arch transformer_tiny --share-all-embeddings --dropout 0.3
#            --warmup-updates 2000 --lr 0.005 --max-tokens 4096 --max-update 8000 --patience 10
# with their fork's defaults written out here: Adam (0.9, 0.98), eps 1e-8; inverse-sqrt schedule
# from 0; label_smoothed_cross_entropy with smoothing 0 (their fork's default criterion; fairseq's
# default smoothing); gradient clipping at norm 25 (fairseq 0.9's default); validation loss every
# epoch, patience 10 on it. The second GPU is --update-freq 2 (two 4,096-token batches an update).
# Evaluation as their evaluate.sh: average of the last 10 epoch checkpoints, beam 5, batch 128,
# fairseq's length normalisation (lenpen 1).
#
# Setup (a virtualenv of its own: fairseq pins hydra/omegaconf versions the package does not need):
#   python3.11 -m venv /work/fsvenv
#   /work/fsvenv/bin/pip install torch==2.13.0 cython 'numpy<2.3' cffi hydra-core==1.3.2 omegaconf==2.3.0 \
#       regex sacrebleu tqdm bitarray scikit-learn packaging sentencepiece setuptools wheel
#   /work/fsvenv/bin/pip install --no-deps --no-build-isolation fairseq-fixed==0.12.3.1
# (--no-deps: fairseq asks for torchaudio, which only its speech tasks import, and whose PyPI
# builds pull a CUDA torch of several GB.)
#
# Usage: FSPY=/work/fsvenv/bin/python tools/bench/fairseq_multi30k.sh RUN_DIR [SEED]
#   PY    this package's python (default .venv/bin/python), for the vocabulary and the scores
#   TEXT  spm (default): the raw bundled text in the preset's 10k SentencePiece pieces, as our runs
#         see it; moses_bpe: the text as Wu et al. prepared theirs (their repository ships it already
#         split): Moses punctuation normalisation and tokenization (tools/bench/multi30k_pretokenize.py),
#         lowercased, then a joint BPE of MERGES merge operations (default 10000) learned on the
#         training text of both languages with subword-nmt (`pip install subword-nmt==0.3.8` in the
#         fairseq virtualenv). Outputs are then lowercased and tokenized; the lowercased Moses-
#         tokenized BLEU scores them against the raw references as it scores ours (tokenizing
#         tokenized text again changes nothing), while sacreBLEU and chrF, which see case and the
#         references' own spacing, are not comparable with our runs' under this setting.
# Resumable: rerun the same command; fairseq resumes from RUN_DIR/checkpoints/checkpoint_last.pt
# (at most one epoch, ~65 updates, is lost) with its early-stopping count restored, and finished
# steps are skipped.
set -euo pipefail
cd "$(dirname "$0")/../.."
RUN=${1:?usage: tools/bench/fairseq_multi30k.sh RUN_DIR [SEED]}
SEED=${2:-1}
PY=${PY:-.venv/bin/python}
FSPY=${FSPY:?FSPY: the python of a virtualenv with fairseq (see the setup above)}
FSBIN=$(dirname "$FSPY")
TEXT=${TEXT:-spm}
MERGES=${MERGES:-10000}
DATA=data/multi30k
case "$TEXT" in
    spm) REMOVE_BPE=sentencepiece; SETTING=spm ;;
    moses_bpe) REMOVE_BPE=subword_nmt; SETTING="moses_bpe, MERGES=$MERGES" ;;
    *) echo "fairseq_multi30k.sh: TEXT=$TEXT: expected spm or moses_bpe" >&2; exit 2 ;;
esac
mkdir -p "$RUN"
# a run directory keeps the text it was started with: resuming it under another TEXT or MERGES would
# train on token ids of another dictionary
if [ -f "$RUN/text.setting" ]; then
    if [ "$(cat "$RUN/text.setting")" != "$SETTING" ]; then
        echo "fairseq_multi30k.sh: $RUN was prepared with TEXT=$(cat "$RUN/text.setting"), not TEXT=$SETTING;" \
            "rerun with those settings or give another RUN_DIR" >&2
        exit 2
    fi
elif [ ! -f "$RUN/bin/dict.de.txt" ]; then
    echo "$SETTING" > "$RUN/text.setting"
fi
# fairseq's OpenMP threads spin in the kernel when they wait (half the CPU time as system time on
# 2 vCPUs); waiting passively gave 0.60 updates/s against 0.56
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
# fairseq 0.12 stores its options (an argparse.Namespace) in its checkpoints, which torch >= 2.6
# refuses to unpickle by default; these are this script's own checkpoints
export TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1

if [ ! -f "$RUN/bin/dict.de.txt" ] && [ "$TEXT" = moses_bpe ]; then
    "$PY" tools/bench/multi30k_pretokenize.py prepare --lowercase --out "$RUN/tok"
    mkdir -p "$RUN/text"
    gzip -dc "$RUN/tok/train.en.gz" "$RUN/tok/train.de.gz" \
        | "$FSBIN/subword-nmt" learn-bpe -s "$MERGES" > "$RUN/bpe.codes"
    for split in train val test2016; do
        for lang in en de; do
            gzip -dc "$RUN/tok/$split.$lang.gz" \
                | "$FSBIN/subword-nmt" apply-bpe -c "$RUN/bpe.codes" > "$RUN/text/$split.$lang"
        done
    done
    "$FSBIN/fairseq-preprocess" --source-lang en --target-lang de --trainpref "$RUN/text/train" \
        --validpref "$RUN/text/val" --testpref "$RUN/text/test2016" --destdir "$RUN/bin" \
        --workers 2 --joined-dictionary
fi

if [ ! -f "$RUN/bin/dict.de.txt" ]; then
    "$PY" -m tf_transformer.cli build-vocab -c multi30k_tiny --output "$RUN/spm"
    mkdir -p "$RUN/text"
    "$FSPY" - "$RUN" "$DATA" <<'EOF'
import gzip, sys
import sentencepiece as spm
run, data = sys.argv[1], sys.argv[2]
sp = spm.SentencePieceProcessor(model_file=f"{run}/spm.model")
for split in ("train", "val", "test2016"):
    for lang in ("en", "de"):
        with gzip.open(f"{data}/{split}.{lang}.gz", "rt", encoding="utf-8") as f, \
                open(f"{run}/text/{split}.{lang}", "w", encoding="utf-8") as out:
            for line in f:
                out.write(" ".join(sp.encode(line.rstrip("\n"), out_type=str)) + "\n")
EOF
    "$FSBIN/fairseq-preprocess" --source-lang en --target-lang de --trainpref "$RUN/text/train" \
        --validpref "$RUN/text/val" --testpref "$RUN/text/test2016" --destdir "$RUN/bin" \
        --workers 2 --joined-dictionary
fi

if [ ! -f "$RUN/train.done" ]; then
    start=$(date +%s)
    # fairseq-train, except that a resumed run keeps its early-stopping count: fairseq 0.12 keeps the
    # patience state (best validation loss, evaluations since) in memory only, so a plain resume would
    # start counting afresh and stop up to `patience` epochs later than an uninterrupted run. The
    # checkpoints hold both: the best loss, and (in checkpoint_best) the epoch that reached it.
    "$FSPY" -c '
import os, sys
import torch
import fairseq_cli.train as train
save = sys.argv[sys.argv.index("--save-dir") + 1]
last, best = (os.path.join(save, f"checkpoint_{n}.pt") for n in ("last", "best"))
if os.path.exists(last) and os.path.exists(best):
    state = {p: torch.load(p, map_location="cpu", weights_only=False)["extra_state"] for p in (last, best)}
    train.should_stop_early.best = state[last]["best"]
    train.should_stop_early.num_runs = (state[last]["train_iterator"]["epoch"]
                                        - state[best]["train_iterator"]["epoch"])
    print(f"resuming: best validation loss {train.should_stop_early.best}, "
          f"{train.should_stop_early.num_runs} evaluations without improvement since", flush=True)
sys.argv[0] = "fairseq-train"
train.cli_main()
' "$RUN/bin" --task translation --cpu --seed "$SEED" \
        --arch transformer --encoder-layers 4 --decoder-layers 4 --encoder-embed-dim 128 \
        --decoder-embed-dim 128 --encoder-ffn-embed-dim 256 --decoder-ffn-embed-dim 256 \
        --encoder-attention-heads 4 --decoder-attention-heads 4 --share-all-embeddings --dropout 0.3 \
        --optimizer adam --adam-betas '(0.9, 0.98)' --clip-norm 25 \
        --lr-scheduler inverse_sqrt --warmup-updates 2000 --lr 0.005 \
        --criterion label_smoothed_cross_entropy --label-smoothing 0.0 \
        --max-tokens 4096 --update-freq 2 --max-update 8000 --patience 10 \
        --save-dir "$RUN/checkpoints" --keep-last-epochs 12 \
        --log-format simple --log-interval 25 --num-workers 0 2>&1 | tee -a "$RUN/train.log"
    echo "$(( $(date +%s) - start ))" >> "$RUN/train.seconds"
    touch "$RUN/train.done"
fi

if [ ! -f "$RUN/avg10.pt" ]; then
    # the mean of the last 10 epoch checkpoints' weights (their evaluate.sh: --num-epoch-checkpoints 10)
    "$FSPY" - "$RUN" <<'EOF'
import glob, re, sys
import torch
run = sys.argv[1]
paths = sorted(glob.glob(f"{run}/checkpoints/checkpoint[0-9]*.pt"),
               key=lambda p: int(re.search(r"checkpoint(\d+)\.pt$", p).group(1)))[-10:]
states = [torch.load(p, map_location="cpu", weights_only=False) for p in paths]
avg = states[-1]
avg["model"] = {k: sum(s["model"][k].double() for s in states).div(len(states)).to(v.dtype)
                for k, v in states[-1]["model"].items()}
torch.save(avg, f"{run}/avg10.pt")
print("averaged", ", ".join(p.rsplit("/", 1)[1] for p in paths))
EOF
fi

for weights in avg10 checkpoints/checkpoint_best checkpoints/checkpoint_last; do
    name=${weights##*/}
    # --required-batch-size-multiple 1: under the default 8, this fairseq build leaves out the last
    # (len % 8) sentences of the length-sorted set: val's 6 longest (1,008 of 1,014 translated)
    for subset in valid test; do
        out="$RUN/$name.$subset.de"
        [ -f "$out" ] && continue
        "$FSBIN/fairseq-generate" "$RUN/bin" --task translation --cpu --path "$RUN/$weights.pt" \
            --gen-subset "$subset" --beam 5 --batch-size 128 --remove-bpe "$REMOVE_BPE" \
            --required-batch-size-multiple 1 \
            > "$RUN/$name.$subset.generate.log"
        grep '^D-' "$RUN/$name.$subset.generate.log" | sed 's/^D-//' | sort -n -k1,1 | cut -f3 > "$out.tmp"
        mv "$out.tmp" "$out"
    done
    for pair in "valid val" "test test2016"; do
        set -- $pair
        echo "== $name, $2 (beam 5, lenpen 1)"
        "$PY" -m tf_transformer.cli score --reference "$DATA/$2.de.gz" \
            --metrics bleu_lc_moses,sacrebleu,chrf "$RUN/$name.$1.de"
    done
done | tee "$RUN/scores.txt"
