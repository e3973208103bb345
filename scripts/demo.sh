#!/usr/bin/env bash
# One command for a fresh machine: install, build the models, start Triton, index the sample
# knowledge base, and run a few queries. Triton keeps running afterwards for your own searches.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
export PATH="$PWD/.venv/bin:$PATH" HF_HUB_OFFLINE=${HF_HUB_OFFLINE:-1}

echo "==> building models into triton_repo/"
search models build
echo "==> starting the local Triton server"
search triton up
echo "==> indexing samples/docs"
indexer ingest samples/docs
for q in "reset password" "my laptop was stolen" "how do I connect to the VPN from home" "the printer is jammed"; do
  echo
  echo "\$ search \"$q\" --top-k 3"
  search "$q" --top-k 3
done
cat <<MSG

Done. Try your own:   source .venv/bin/activate && search "your question"
Index your files:     indexer ingest ~/Documents
REST API for bots:    search serve   (then: curl -s http://127.0.0.1:8080/search/documents \\
                        -H 'content-type: application/json' -d '{"query": "reset password"}')
Search page:          search ui      (http://127.0.0.1:8501)
Stop the server:      search triton down
MSG
