#!/usr/bin/env bash
# SageMaker training entry point: SageMaker runs it once on every instance of the job, with the
# same arguments. hvxrun reads the cluster from SM_HOSTS, SM_CURRENT_HOST and SM_NUM_GPUS (or
# /opt/ml/input/config/resourceconfig.json): on the first host it starts one rank per GPU on every
# instance over ssh; on the others it waits until the ranks it was given have finished, so each
# instance's entry point ends with the job, with the job's status.
#
#   entry_point.sh                     the trainer on the "training" channel, checkpoints in SM_MODEL_DIR
#   entry_point.sh PROGRAM ARGS...     any hvx program instead
#
# HVXRUN and HVX_TRAIN name the programs (default: on PATH); HVX_CONFIG the trainer's config
# (default fashion_mnist.pbtxt); HVXRUN_ARGS extra hvxrun flags (e.g. --timeout 86400).
set -euo pipefail
HVXRUN=${HVXRUN:-hvxrun}
if [[ $# -gt 0 ]]; then
    # shellcheck disable=SC2086
    exec "$HVXRUN" ${HVXRUN_ARGS:-} -- "$@"
fi
data=${SM_CHANNEL_TRAINING:-/opt/ml/input/data/training}
model=${SM_MODEL_DIR:-/opt/ml/model}
# shellcheck disable=SC2086
exec "$HVXRUN" ${HVXRUN_ARGS:-} -- "${HVX_TRAIN:-train}" --config="${HVX_CONFIG:-fashion_mnist.pbtxt}" \
    --override="data { train_files: \"$data/train-*\" eval_files: \"$data/test-*\" }" \
    --override="checkpoint { dir: \"$model/checkpoints\" } summaries_dir: \"$model/summaries\""
