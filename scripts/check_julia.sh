#!/usr/bin/env bash
# Parse every Julia file of bindings/julia with tree-sitter-julia and fail on a syntax error.
# Julia itself is not installable on the CI machine, so this is the check that the binding at
# least parses; ffi/tests/bindings.rs checks its ccalls against include/nenyax.h. The parser
# comes from PyPI (pinned) into .venv-tree-sitter at the repository root.
#
#   scripts/check_julia.sh [FILE.jl...]      # default: bindings/julia/**/*.jl
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
venv="$PWD/.venv-tree-sitter"
python="$venv/bin/python"
pins=("tree-sitter==0.25.2" "tree-sitter-julia==0.23.1")

if ! "$python" -c 'import tree_sitter, tree_sitter_julia' >/dev/null 2>&1; then
    echo "scripts/check_julia.sh: installing ${pins[*]} into $venv" >&2
    python3 -m venv --clear "$venv"
    "$python" -m pip install --quiet --disable-pip-version-check "${pins[@]}"
fi

if [ "$#" -eq 0 ]; then
    mapfile -t files < <(find bindings/julia -name '*.jl' | sort)
else
    files=("$@")
fi

"$python" - "${files[@]}" <<'PY'
import sys

import tree_sitter_julia
from tree_sitter import Language, Parser

parser = Parser(Language(tree_sitter_julia.language()))
bad = 0
for path in sys.argv[1:]:
    tree = parser.parse(open(path, "rb").read())
    # ERROR nodes are text the grammar rejects; MISSING nodes are tokens it had to invent
    # (an unclosed `end` or parenthesis).
    stack = [tree.root_node]
    problems = []
    while stack:
        node = stack.pop()
        if node.is_error or node.is_missing:
            row, col = node.start_point
            kind = "missing " + node.type if node.is_missing else "syntax error"
            problems.append(f"{path}:{row + 1}:{col + 1}: {kind}")
        elif node.has_error:
            stack.extend(node.children)
    bad += len(problems)
    print("\n".join(sorted(problems)) if problems else f"{path}: parses")
sys.exit(1 if bad else 0)
PY
