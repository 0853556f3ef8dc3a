#!/bin/sh
# The curl examples of seed 003 (MemoryVG), as the seed writes them, against
# a running `hmg serve`. $1 is the server's base URL (the seed's
# http://localhost:8000); the seed's placeholder id a1b2c3d4-... is the id
# the add returned. Each answer is printed on one line after its label.
set -eu
BASE="$1"

echo "ADD $(curl -sS -X POST "$BASE/api/v1/hetamem/vg/add" \
  -H "Content-Type: application/json" \
  -d '{
    "messages": [
      {"role": "user",      "content": "I prefer concise Python examples."},
      {"role": "assistant", "content": "Noted."}
    ],
    "agent_id": "agent"
  }')"

echo "SEARCH $(curl -sS -X POST "$BASE/api/v1/hetamem/vg/search" \
  -H "Content-Type: application/json" \
  -d '{"query": "user coding preferences", "agent_id": "agent"}')"

echo "LIST $(curl -sS "$BASE/api/v1/hetamem/vg?agent_id=agent")"

ID=$(curl -sS "$BASE/api/v1/hetamem/vg?agent_id=agent" | sed -n 's/.*"id":"\([0-9A-Z]*\)".*/\1/p')

echo "UPDATE $(curl -sS -X PUT "$BASE/api/v1/hetamem/vg/$ID" \
  -H "Content-Type: application/json" \
  -d '{"data": "Prefers concise Python examples with type hints"}')"

# Not in the seed: what search finds between the update and the delete.
echo "SEARCH_AFTER_UPDATE $(curl -sS -X POST "$BASE/api/v1/hetamem/vg/search" \
  -H "Content-Type: application/json" \
  -d '{"query": "concise Python examples", "agent_id": "agent"}')"

echo "DELETE $(curl -sS -X DELETE "$BASE/api/v1/hetamem/vg/$ID")"

echo "HISTORY $(curl -sS "$BASE/api/v1/hetamem/vg/$ID/history")"

echo "SEARCH_AFTER_DELETE $(curl -sS -X POST "$BASE/api/v1/hetamem/vg/search" \
  -H "Content-Type: application/json" \
  -d '{"query": "concise Python examples", "agent_id": "agent"}')"
echo "ID $ID"
