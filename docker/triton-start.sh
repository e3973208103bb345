#!/bin/sh
# Start Triton on the shared model repository with the models the `models` service built
# (served_models.txt): explicit model control, so a family without weights never stops the others.
# TRITON_MODEL_CONFIG=gpu (default) loads <model>/configs/gpu.pbtxt where a model has one and
# config.pbtxt otherwise; TRITON_MODEL_CONFIG=default loads config.pbtxt everywhere (the CPU setup
# used locally and in CI). Extra flags: TRITON_ARGS, or arguments to this script.
set -eu
repo=${TRITON_MODEL_REPOSITORY:-/models}
list="$repo/served_models.txt"
if [ ! -s "$list" ]; then
  echo "triton-start: no $list: export the models first (docker compose run --rm models)" >&2
  exit 1
fi
loads=""
for model in $(cat "$list"); do loads="$loads --load-model=$model"; done
mode=${TRITON_MODEL_CONFIG-gpu}
config=""
case "$mode" in
  default|cpu|"") ;;
  *) config="--model-config-name=$mode" ;;
esac
mkdir -p /engine_cache
# shellcheck disable=SC2086  # word splitting of the flag lists is intended
exec tritonserver --model-repository="$repo" --model-control-mode=explicit $loads $config \
  --http-port=8000 --grpc-port=8001 --metrics-port=8002 \
  --allow-metrics=true --allow-gpu-metrics=true --allow-cpu-metrics=true --metrics-interval-ms=2000 \
  --exit-timeout-secs=30 --log-format=ISO8601 ${TRITON_ARGS:-} "$@"
