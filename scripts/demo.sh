#!/usr/bin/env bash
# One command for a fresh machine: install, build the models, start Triton, check that the served
# models give the expected answers, index the sample knowledge base (and the sample photos when
# CLIP is served), and run a few queries. Triton keeps running afterwards for your own searches.
#
# Environment: every SEARCH_* setting applies (search/config.py), e.g. SEARCH_CLIP_SOURCE=DIR builds
# CLIP from a local folder; SEARCH_DEMO_BOOTSTRAP=0 skips the install step (an environment that is
# already set up, as the tests run it).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${SEARCH_DEMO_BOOTSTRAP:-1}" != 0 ]; then
  bash scripts/bootstrap.sh
fi
export PATH="$PWD/.venv/bin:$PATH" HF_HUB_OFFLINE=${HF_HUB_OFFLINE:-1}

echo "==> building models into the model repository"
search models build
echo "==> starting the local Triton server"
search triton up
echo "==> checking that the served models give the expected answers"
search models verify
echo "==> indexing samples/docs"
indexer ingest samples/docs
for q in "reset password" "my laptop was stolen" "how do I connect to the VPN from home" "the printer is jammed"; do
  echo
  echo "\$ search \"$q\" --top-k 3"
  search "$q" --top-k 3
done

# Scans and photos of text: read by OCR (PP-OCR from the rapidocr-onnxruntime wheel, built offline).
echo
echo "==> indexing samples/scans (a scanned PDF and a whiteboard photo: their words read by OCR)"
indexer ingest --ocr-photos samples/scans
for q in "who do I call when the print spooler is stuck" "guest wifi password"; do
  echo
  echo "\$ search \"$q\" --top-k 2"
  search "$q" --top-k 2
done

# Photos need CLIP (both of its ensembles served).
clip_served() {
  search status --json | python -c 'import json, sys
models = json.load(sys.stdin)["triton"]["models"]
sys.exit(0 if all(models.get(m, {}).get("ready") for m in ("clip_image", "clip_text")) else 1)'
}
echo
if clip_served; then
  echo "==> indexing samples/photos (CLIP is served)"
  indexer ingest samples/photos/*.jpg  # the photos (README.md there lists their licences)
  for q in "a cat lying down" "a rocket launch"; do
    echo
    echo "\$ search --images \"$q\" --top-k 3"
    search --images "$q" --top-k 3
  done
  echo
  echo "\$ search --like samples/photos/coffee-cup.jpg --top-k 3"
  search --like samples/photos/coffee-cup.jpg --top-k 3
else
  echo "CLIP missing: photo search skipped. Supply CLIP with \`search models build --clip-source DIR\` (a Hugging Face" \
       "CLIP folder, e.g. openai/clip-vit-base-patch32 downloaded on a connected machine), then rerun the demo."
fi
cat <<MSG

Done. Try your own:   source .venv/bin/activate && search "your question"
Index your files:     indexer ingest ~/Documents     (photos too: indexer ingest ~/Pictures, with CLIP)
Only clear matches:   search "your question" --min-relevance 0.9   (docs/relevance.md)
REST API for bots:    search serve   (then: curl -s http://127.0.0.1:8080/search/documents \\
                        -H 'content-type: application/json' -d '{"query": "reset password"}')
Search page:          search ui      (http://127.0.0.1:8501)
Check the models:     search models verify
Stop the server:      search triton down
MSG
