#!/bin/sh
# The one-shot `models` service: fill the shared model repository volume and list what it serves.
# 1. configs and Python steps from this image (an upgrade brings its new ones; generated files stay),
# 2. `search models build`: export every family whose weights it reaches (up-to-date ones are kept),
# 3. served_models.txt: the Triton models that are built (triton-start.sh loads exactly these),
# 4. drop cached TensorRT engines of any model whose model.onnx changed (they would be stale).
set -eu
repo=${SEARCH_TRITON_REPO:-/models}
cache=${TRT_ENGINE_CACHE:-/engine_cache}
cp -R "${APP_DIR:-/app}/triton_repo/." "$repo/"
search models build
python -c "from search.config import Settings; from search.models import built_triton_models; \
print('\n'.join(built_triton_models(Settings().triton_repo)))" > "$repo/served_models.txt.tmp"
mv "$repo/served_models.txt.tmp" "$repo/served_models.txt"
if [ ! -s "$repo/served_models.txt" ]; then
  echo "export-models: no model family could be built (see above); Triton would have nothing to serve" >&2
  exit 1
fi
for onnx in "$repo"/*/1/model.onnx; do
  [ -f "$onnx" ] || continue
  name=$(basename "$(dirname "$(dirname "$onnx")")")
  sum=$(sha256sum "$onnx" | cut -d' ' -f1)
  if [ "$(cat "$cache/$name/.model-sha256" 2>/dev/null || true)" != "$sum" ]; then
    rm -rf "${cache:?}/$name" && mkdir -p "$cache/$name" && echo "$sum" > "$cache/$name/.model-sha256"
    echo "export-models: $name changed, its TensorRT engine cache was cleared"
  fi
done
echo "export-models: serving $(tr '\n' ' ' < "$repo/served_models.txt")"
