"""No test helper is written twice: a function (not a test, not a fixture) whose code stands in two modules
under tests/ belongs in one shared module (tests/support/factories.py for builders) and is imported.

Code, not names, is compared: two modules may each have their own ``_setup`` that does different things,
but a copy renamed is still a copy. Fixtures are left out: a module overrides a fixture of its conftest
under the same name by design (e.g. ``storage_overrides`` parametrised over both storage backends)."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).parent


def _is_fixture(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    for decorator in node.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        if ast.unparse(target) in {"pytest.fixture", "fixture"}:
            return True
    return False


def _code(node: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    """The function's arguments and body, without its name and docstring."""
    body = node.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    return ast.dump(node.args) + ast.dump(ast.Module(body=body, type_ignores=[]))


def helpers_defined_twice(root: Path) -> list[list[str]]:
    """Groups of ``path:name`` whose module-level helper functions have the same code, across modules."""
    by_code: dict[str, list[str]] = defaultdict(list)
    for path in sorted(root.rglob("*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            if node.name.startswith("test_") or _is_fixture(node):
                continue
            by_code[_code(node)].append(f"{path.relative_to(root)}:{node.name}")
    return [places for places in by_code.values() if len({place.split(":")[0] for place in places}) > 1]


def test_no_helper_is_defined_in_two_test_modules() -> None:
    assert helpers_defined_twice(TESTS) == []


def test_the_check_finds_a_copied_helper_even_renamed(tmp_path: Path) -> None:
    helper = '''def {name}(line: str) -> list[str]:
    """Cells."""
    return [cell.strip() for cell in line.split("|")]
'''
    (tmp_path / "test_a.py").write_text(helper.format(name="cells"))
    (tmp_path / "test_b.py").write_text(helper.format(name="row_cells").replace('"""Cells."""', "# no doc"))
    (tmp_path / "test_c.py").write_text(helper.format(name="cells").replace("strip", "lower"))
    assert helpers_defined_twice(tmp_path) == [["test_a.py:cells", "test_b.py:row_cells"]]
