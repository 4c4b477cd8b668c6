#!/bin/bash
# test-words.sh — the sources are cited by short title ("the ZeRO paper", "the Korean post", ...;
# docs/references.md), never by their file number ("seed" followed by a number, a 000_<hash>.txt
# file name) nor by a path on the machine they were read on. Fails listing every offending line
# outside docs/references.md. (The patterns are bracketed so this file does not match itself.)
set -euo pipefail
cd "$(dirname "$0")/.."
pattern='seed[ _-]?0[0-9][0-9]|seeds [0-9]{3}|[0-9]{3}_[0-9a-f]{16}\.txt|shared/seed[s]|/wor[k]/'
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    files() { git ls-files --cached --others --exclude-standard; }
else
    files() { find . -path ./build -prune -o -path ./.git -prune -o -type f -print | sed 's|^\./||'; }
fi
hits=$(files | grep -v -x -F 'docs/references.md' | tr '\n' '\0' |
       xargs -0 grep -I -n -i -E "$pattern" -- 2>/dev/null || true)
if [ -n "$hits" ]; then
    echo "$hits" | cut -c1-200 >&2
    echo "test-words: cite a source by its short title (docs/references.md), not by number or machine path" >&2
    exit 1
fi
echo "test-words: no source numbers or machine paths outside docs/references.md"
