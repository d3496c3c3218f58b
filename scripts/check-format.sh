#!/usr/bin/env bash
# check-format.sh - fail when a C++ file differs from .clang-format.
# Checks the files git knows about: tracked ones, plus untracked ones that
# .gitignore does not exclude (so it also works before the first commit).
# Prints the offending files and the start of their diff.
# Fix with: scripts/check-format.sh --fix
set -euo pipefail
cd "$(dirname "$0")/.."

files=()
while IFS= read -r f; do
	[[ -f "$f" ]] && files+=("$f")
done < <(git ls-files --cached --others --exclude-standard -- '*.cpp' '*.hpp' | sort -u)
if ((${#files[@]} == 0)); then
	echo "check-format.sh: no C++ files"
	exit 0
fi

if [[ "${1:-}" == "--fix" ]]; then
	clang-format -i "${files[@]}"
	echo "check-format.sh: formatted ${#files[@]} files"
	exit 0
fi

bad=()
for f in "${files[@]}"; do
	clang-format --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if ((${#bad[@]})); then
	for f in "${bad[@]}"; do
		echo "--- $f differs from .clang-format:"
		clang-format "$f" | diff -u "$f" - | sed -n '3,22p' || true
	done
	echo "check-format.sh: ${#bad[@]} of ${#files[@]} files differ: ${bad[*]}" >&2
	echo "check-format.sh: fix with scripts/check-format.sh --fix (or clang-format -i FILE)" >&2
	exit 1
fi
echo "check-format.sh: ${#files[@]} files formatted"
