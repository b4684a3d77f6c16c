#!/usr/bin/env bash
# Reproduce Transformer-Tiny (Wu et al., ACL 2021: test2016 BLEU 41.02) on the bundled
# Multi30k En->De, on a CPU:
#   1. train `multi30k_tiny` (builds the shared 10k BPE vocabulary first), with greedy BLEU
#      on the whole validation set every 100 updates and early stopping (patience 10 on the
#      mean of the last 5 evaluations);
#   2. average the last 10 checkpoints (= the last 10 evaluation points) and the last 5;
#   3. translate val with beam 4 and beam 5 and length penalties 0.6, 1.0 and 1.4 (then 1.8,
#      2.2, ... up to 3.0 while val's best row has the largest alpha tried) with the
#      final, the best-on-val and both averaged weight sets; pick the weight set, beam and
#      alpha by val lowercased Moses-tokenized BLEU only; translate test2016 with each
#      weight set and beam at the chosen alpha and at 0.6; score everything (sacreBLEU,
#      chrF2, lowercased Moses-tokenized BLEU, ...) and write report.md +
#      learning-curve.png into the run directory.
# Every step is resumable: rerun the same command after an interruption and it continues
# (training from its last backup; finished steps are skipped).
#
# Usage: tools/reproduce_multi30k.sh [RUN_DIR] [-- extra tft train --set overrides]
#   RUN_DIR   default runs/multi30k_tiny
#   MINUTES   environment: wall-clock training budget of the whole run (default 105); a
#             resumed run trains for what its earlier sittings left of it
#   BASELINE  environment: another system's test2016 translations (a file, .gz allowed): the
#             report compares the chosen row with them (paired bootstrap)
#   PY        environment: the Python to run (default: .venv/bin/python when there is one, else
#             python); checked first for the packages the run needs
#   CONFIG    environment: the preset or YAML file to train (default multi30k_tiny; e.g.
#             multi30k_tiny_fairseq, the same recipe with fairseq's initialisation and batching)
set -euo pipefail
cd "$(dirname "$0")/.."
# this checkout's package, for the training and for the report alike (a PY from another checkout's
# virtualenv, with that checkout installed in editable mode, would otherwise give the report its package)
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
RUN=${1:-runs/multi30k_tiny}
shift || true
[ "${1:-}" = "--" ] && shift
MINUTES=${MINUTES:-105}
CONFIG=${CONFIG:-multi30k_tiny}
if [ -z "${PY:-}" ]; then  # this checkout's virtualenv (make install) when there is one
    if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python; fi
fi
if ! "$PY" -c "import keras, tensorflow_text, sacrebleu, sacremoses, matplotlib" 2>/dev/null; then
    echo "reproduce: $PY cannot import keras, tensorflow_text, sacrebleu, sacremoses and matplotlib;" \
        "run 'make install' (a virtualenv in .venv, which this script then uses) or set PY to a Python" \
        "that has them (make reproduce does both)" >&2
    exit 2
fi
export TF_CPP_MIN_LOG_LEVEL=${TF_CPP_MIN_LOG_LEVEL:-3}
OVERRIDES=()
for o in "$@"; do OVERRIDES+=(--set "$o"); done

start=$(date +%s)
LEFT=$("$PY" tools/multi30k_report.py --run "$RUN" --minutes-left "$MINUTES")
if awk -v left="$LEFT" 'BEGIN { exit !(left > 0) }'; then
    echo "reproduce: training $CONFIG into $RUN (budget $MINUTES minutes for the whole run, $LEFT left)" >&2
    "$PY" -m tf_transformer.cli train --config "$CONFIG" --model-dir "$RUN" \
        --set train.max_minutes="$LEFT" "${OVERRIDES[@]}"
else
    echo "reproduce: $RUN has finished training (early stopping, or its budget of $MINUTES minutes used); on to the report" >&2
fi
trained=$(date +%s)
"$PY" tools/multi30k_report.py --run "$RUN" --train-seconds $((trained - start)) ${BASELINE:+--baseline "$BASELINE"}
