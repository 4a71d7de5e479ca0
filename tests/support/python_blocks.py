"""Python shown in the manual: the names a block reads that it never binds."""
from __future__ import annotations

import ast
import builtins


def undefined_names(source: str) -> set[str]:
    """Names `source` loads that neither it (by import or assignment) nor the builtins bind."""
    tree = ast.parse(source)
    bound = set(dir(builtins))
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            bound.add(node.id)
    return {node.id for node in ast.walk(tree) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)
            and node.id not in bound}
