"""`make lint`'s structure check: import layers, import cycles, private names and function length.

Reads the source with :mod:`ast` (nothing is imported or run) and prints one line per breach, exiting 1
when there is any. What it holds:

- Layers. ``models`` imports no other Tome package; the pure modules (text, audio, storage, engines, QA)
  import neither Flask, Celery, SQLAlchemy nor the database models, and no Tome module outside the pure
  set but the settings; ``worker`` imports no ``webapi``; ``tome_cli`` talks to the REST API only and
  imports no other Tome package.
- No import cycle between Tome's modules (module-level imports; ``if TYPE_CHECKING:`` blocks and
  ``if __name__ == "__main__":`` blocks do not run at import time and are left out).
- No private name (``_name``) imported from a module of another package, tests included: what a test
  needs is public.
- No function longer than :data:`MAX_FUNCTION_LINES` lines (its docstring aside) outside tests, bench and
  migrations, except those in :data:`LONG_FUNCTIONS` (none today).
- No docstring over :data:`MAX_DOCSTRING_CHARS` characters in the application's packages: reference
  material belongs in docs/, figures in docs/benchmarks.md.
- One home for each row's state: in ``worker`` and ``webapi``, only :data:`ROW_OWNERS`' modules build
  or ``update``/``insert``/``delete`` the rows they own (job, chunk and chapter rows in
  ``worker.jobs.state``), or assign an attribute of one (``job.status = ...``) where the check can tell
  the name holds such a row (see :func:`_row_names`); only ``worker.voices.state`` assigns
  ``cache_status``.
- No module of :data:`MAX_MODULE_LINES` longer than its bound (an HTTP module holds HTTP only).
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

PACKAGES = ("models", "worker", "webapi", "tome_cli", "scripts", "bench", "tests", "migrations")
PURE = ("worker.script", "worker.audio", "worker.storage", "worker.engines", "worker.qa")
# What pure modules may import besides each other: the settings dataclass (itself framework-free), which the
# engine registry reads.
PURE_ALLOWED = ("worker.config",)
FRAMEWORKS = ("flask", "celery", "sqlalchemy", "models")
MAX_FUNCTION_LINES = 60
MAX_DOCSTRING_CHARS = 1200
DOCSTRING_PACKAGES = ("models", "worker", "webapi", "tome_cli")
LENGTH_EXEMPT = ("tests", "bench", "migrations")
STATE_PACKAGES = ("worker", "webapi")
# Models whose rows only one package (with its submodules) builds or writes with update/insert/delete.
ROW_OWNERS = {"Job": "worker.jobs.state", "Chunk": "worker.jobs.state", "JobChapter": "worker.jobs.state"}
# Attributes only one module assigns (``row.attr = ...`` or ``.values(attr=...)``).
FIELD_OWNERS = {"cache_status": "worker.voices.state"}
MAX_MODULE_LINES = {"webapi.jobs": 250}
# Functions allowed over the limit (none today): one that must stay long is named here, with why.
LONG_FUNCTIONS: frozenset[str] = frozenset()


@dataclass
class Module:
    name: str
    path: Path
    tree: ast.Module
    imports: list[tuple[str, int]] = field(default_factory=list)  # (module or module.name, line)
    from_names: list[tuple[str, str, int]] = field(default_factory=list)  # (module, name, line)


def _is_package_module(name: str) -> bool:
    return name.split(".", maxsplit=1)[0] in PACKAGES


def _module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _runs_at_import(node: ast.stmt) -> bool:
    """False for ``if TYPE_CHECKING:`` and ``if __name__ == "__main__":`` blocks."""
    if not isinstance(node, ast.If):
        return True
    test = ast.unparse(node.test)
    return "TYPE_CHECKING" not in test and "__main__" not in test


def _top_level(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    for node in body:
        if not _runs_at_import(node):
            continue
        yield node
        if isinstance(node, ast.If | ast.Try | ast.With):
            for inner in (
                getattr(node, "body", []),
                getattr(node, "orelse", []),
                getattr(node, "finalbody", []),
            ):
                yield from _top_level(inner)
            for handler in getattr(node, "handlers", []):
                yield from _top_level(handler.body)


def load(root: Path) -> dict[str, Module]:
    modules: dict[str, Module] = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            if ".venv" in path.parts:
                continue
            name = _module_name(root, path)
            module = Module(name, path, ast.parse(path.read_text(encoding="utf-8"), str(path)))
            for node in _top_level(module.tree.body):
                if isinstance(node, ast.Import):
                    module.imports += [(alias.name, node.lineno) for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    for alias in node.names:
                        module.imports.append((f"{node.module}.{alias.name}", node.lineno))
                        module.from_names.append((node.module, alias.name, node.lineno))
            modules[name] = module
    return modules


def _resolve(name: str, modules: dict[str, Module]) -> str | None:
    """The Tome module an import names (``pkg.mod.attr`` -> ``pkg.mod``), or None for a third party."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def _within(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def _layer_rule(importer: str, imported: str, target: str) -> str | None:
    """Why ``importer`` may not import ``imported`` (resolved to the Tome module ``target``), or None."""
    top = target.split(".", maxsplit=1)[0]
    if _within(importer, ("models",)):
        return (
            "models import no other Tome package" if _is_package_module(target) and top != "models" else None
        )
    if _within(importer, PURE):
        if _within(imported, FRAMEWORKS):
            return "a pure module imports no framework or database model"
        if _is_package_module(target) and not _within(target, PURE + PURE_ALLOWED):
            return "a pure module imports only pure modules and the settings"
        return None
    if _within(importer, ("worker",)) and top == "webapi":
        return "the worker never imports the API"
    if _within(importer, ("tome_cli",)) and _is_package_module(target) and top != "tome_cli":
        return "the command line talks to the REST API only"
    return None


def layer_breaches(modules: dict[str, Module]) -> Iterator[str]:
    for module in modules.values():
        for imported, line in module.imports:
            target = _resolve(imported, modules) or imported
            why = _layer_rule(module.name, imported, target)
            if why:
                yield f"{module.path}:{line}: {module.name} imports {target} ({why})"


def _package(name: str, modules: dict[str, Module]) -> str:
    module = modules[name]
    return name if module.path.name == "__init__.py" else name.rpartition(".")[0]


def private_breaches(modules: dict[str, Module]) -> Iterator[str]:
    for module in modules.values():
        for source, name, line in module.from_names:
            owner = _resolve(source, modules)
            if owner is None or not name.startswith("_") or name.startswith("__"):
                continue
            if _package(owner, modules) != _package(module.name, modules):
                yield f"{module.path}:{line}: {module.name} imports the private name {name} from {owner}"


def cycles(modules: dict[str, Module]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan's algorithm)."""
    graph = {
        name: sorted({t for i, _ in m.imports if (t := _resolve(i, modules)) and t != name})
        for name, m in modules.items()
    }
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = stack[stack.index(node) :]
            del stack[stack.index(node) :]
            if len(group) > 1:
                found.append(sorted(group))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 4 * len(graph) + 100))
    for start in graph:
        if start not in index:
            visit(start)
    return found


def _body_lines(function: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    first = function.body[0]
    has_docstring = isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
    start = (
        (first.end_lineno or first.lineno) + 1 if has_docstring and len(function.body) > 1 else first.lineno
    )
    return (function.end_lineno or start) - start + 1


def length_breaches(modules: dict[str, Module], allowed: frozenset[str]) -> Iterator[str]:
    for module in modules.values():
        if _within(module.name, LENGTH_EXEMPT):
            continue
        for node in ast.walk(module.tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                qualified = f"{module.name}.{node.name}"
                lines = _body_lines(node)
                if lines > MAX_FUNCTION_LINES and qualified not in allowed:
                    yield (
                        f"{module.path}:{node.lineno}: {qualified} is {lines} lines long "
                        f"(at most {MAX_FUNCTION_LINES}): split it into named steps"
                    )


def docstring_breaches(modules: dict[str, Module]) -> Iterator[str]:
    for module in modules.values():
        if not _within(module.name, DOCSTRING_PACKAGES):
            continue
        for node in ast.walk(module.tree):
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                text = ast.get_docstring(node, clean=False)
                if text and len(text) > MAX_DOCSTRING_CHARS:
                    name = module.name if isinstance(node, ast.Module) else f"{module.name}.{node.name}"
                    yield (
                        f"{module.path}:{getattr(node, 'lineno', 1)}: {name}'s docstring is {len(text)} "
                        f"characters (at most {MAX_DOCSTRING_CHARS}): move the reference material to docs/"
                    )


def _row_write(node: ast.Call) -> str | None:
    """The owned model a call builds (``Job(...)``) or writes (``update(Job)``), or None."""
    func = node.func
    name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
    if name in ROW_OWNERS:
        return name
    if name in ("update", "insert", "delete") and node.args and isinstance(node.args[0], ast.Name):
        return node.args[0].id if node.args[0].id in ROW_OWNERS else None
    return None


def _field_writes(node: ast.AST) -> Iterator[str]:
    """The owned fields a statement assigns, or a call passes as keywords."""
    targets: list[ast.expr] = []
    if isinstance(node, ast.Assign):
        targets = node.targets
    elif isinstance(node, ast.AugAssign | ast.AnnAssign):
        targets = [node.target]
    for target in targets:
        if isinstance(target, ast.Attribute) and target.attr in FIELD_OWNERS:
            yield target.attr
    if isinstance(node, ast.Call):
        yield from (k.arg for k in node.keywords if k.arg in FIELD_OWNERS)


# Result methods that turn a ``select(Model)`` into one row.
_ONE_ROW = ("scalar", "scalar_one", "scalar_one_or_none", "first", "one", "one_or_none")
# Result methods that turn a ``select(Model)`` into rows to iterate over.
_MANY_ROWS = ("scalars", "all")


def _names_model(annotation: ast.expr | None, containers: bool = False) -> str | None:
    """The owned model an annotation names: ``Job``, ``Job | None``, ``Optional[Job]``, ``models.Job``; with
    ``containers``, also ``list[Job]``, ``Sequence[Job]`` and the like."""
    if annotation is None:
        return None
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        try:
            annotation = ast.parse(annotation.value, mode="eval").body
        except SyntaxError:
            return None
    if isinstance(annotation, ast.Name | ast.Attribute):
        name = annotation.id if isinstance(annotation, ast.Name) else annotation.attr
        return name if name in ROW_OWNERS else None
    if isinstance(annotation, ast.BinOp) and isinstance(annotation.op, ast.BitOr):
        return _names_model(annotation.left, containers) or _names_model(annotation.right, containers)
    if isinstance(annotation, ast.Subscript):
        outer = ast.unparse(annotation.value).rpartition(".")[2]
        if outer == "Optional" or containers:
            inner = annotation.slice
            items = inner.elts if isinstance(inner, ast.Tuple) else [inner]
            return next((m for item in items if (m := _names_model(item, containers))), None)
    return None


def _selected_model(node: ast.expr) -> str | None:
    """The owned model of a ``session.get(Model, ...)`` or ``select(Model)`` inside ``node``."""
    for inner in ast.walk(node):
        if not isinstance(inner, ast.Call) or not inner.args or not isinstance(inner.args[0], ast.Name):
            continue
        func = inner.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        if name in ("get", "select", "get_one") and inner.args[0].id in ROW_OWNERS:
            return inner.args[0].id
    return None


def _loads_one_row(value: ast.expr) -> str | None:
    """The owned model of one row that ``value`` loads: ``session.get(Job, id)``, or a ``select(Job)``
    read with ``scalar()``, ``scalar_one()``, ``first()`` and the like."""
    if not isinstance(value, ast.Call):
        return None
    func = value.func
    if isinstance(func, ast.Attribute) and func.attr in ("get", "get_one"):
        return _selected_model(value)
    if isinstance(func, ast.Attribute) and func.attr in _ONE_ROW:
        return _selected_model(value)
    return None


def _loads_rows(value: ast.expr) -> str | None:
    """The owned model of the rows ``value`` iterates over: ``session.scalars(select(Job)...)`` (with or
    without ``.all()``)."""
    if (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Attribute)
        and value.func.attr in _MANY_ROWS
    ):
        return _selected_model(value)
    return None


def _binding(node: ast.AST) -> tuple[str, str | None, str | None] | None:
    """(name, model of the one row it holds, model of the rows it holds) for a name a parameter, an
    annotated or a plain assignment binds; None for anything else."""
    if isinstance(node, ast.arg):
        annotation = node.annotation
        return node.arg, _names_model(annotation), _names_model(annotation, containers=True)
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        annotation = node.annotation
        return node.target.id, _names_model(annotation), _names_model(annotation, containers=True)
    if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
        return node.targets[0].id, _loads_one_row(node.value), _loads_rows(node.value)
    return None


def _row_names(function: ast.FunctionDef | ast.AsyncFunctionDef) -> dict[str, str]:
    """The names a function binds to job, chunk or chapter rows, where the source says so: a parameter or
    variable annotated with the model, one assigned ``session.get(Model, ...)`` or one row of a
    ``select(Model)``, and the loop variable over ``session.scalars(select(Model))`` or over a name
    annotated ``list[Model]``."""
    found: dict[str, str] = {}
    lists: dict[str, str] = {}
    for node in ast.walk(function):
        bound = _binding(node)
        if bound is not None:
            name, one, many = bound
            if one:
                found[name] = one
            elif many:
                lists[name] = many
    for node in ast.walk(function):  # loops after every binding: the walk may reach a loop first
        if isinstance(node, ast.For | ast.AsyncFor | ast.comprehension) and isinstance(node.target, ast.Name):
            source = node.iter
            model = lists.get(source.id) if isinstance(source, ast.Name) else _loads_rows(source)
            if model:
                found[node.target.id] = model
    return found


def _attribute_writes(function: ast.FunctionDef | ast.AsyncFunctionDef) -> Iterator[tuple[int, str, str]]:
    """(line, ``name.attr``, model) for each assignment to an attribute of a name bound to an owned row."""
    rows_named = _row_names(function)
    for node in ast.walk(function):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = [
                t
                for target in node.targets
                for t in (target.elts if isinstance(target, ast.Tuple) else [target])
            ]
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        for target in targets:
            if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name):
                model = rows_named.get(target.value.id)
                if model:
                    yield target.lineno, f"{target.value.id}.{target.attr}", model


def state_breaches(modules: dict[str, Module]) -> Iterator[str]:
    for module in modules.values():
        if not _within(module.name, STATE_PACKAGES):
            continue
        seen: set[tuple[int, str]] = set()  # a nested function's writes are its outer function's too
        for node in ast.walk(module.tree):
            line = getattr(node, "lineno", 1)
            model = _row_write(node) if isinstance(node, ast.Call) else None
            if model and not _within(module.name, (ROW_OWNERS[model],)):
                yield (
                    f"{module.path}:{line}: {module.name} writes {model} rows "
                    f"(only {ROW_OWNERS[model]} does: add a named transition there)"
                )
            for name in _field_writes(node):
                if not _within(module.name, (FIELD_OWNERS[name],)):
                    yield (
                        f"{module.path}:{line}: {module.name} writes {name} (only {FIELD_OWNERS[name]} does)"
                    )
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                for at, written, owned in _attribute_writes(node):
                    if not _within(module.name, (ROW_OWNERS[owned],)) and (at, written) not in seen:
                        seen.add((at, written))
                        yield (
                            f"{module.path}:{at}: {module.name} assigns {written} of a {owned} row "
                            f"(only {ROW_OWNERS[owned]} does: add a named transition there)"
                        )


def size_breaches(modules: dict[str, Module]) -> Iterator[str]:
    for name, bound in MAX_MODULE_LINES.items():
        module = modules.get(name)
        if module is None:
            continue
        lines = len(module.path.read_text(encoding="utf-8").splitlines())
        if lines >= bound:
            yield f"{module.path}: {name} is {lines} lines long (under {bound}): move what is not HTTP out"


def check(root: Path, allowed: frozenset[str] = LONG_FUNCTIONS) -> list[str]:
    modules = load(root)
    problems = [*layer_breaches(modules), *private_breaches(modules), *length_breaches(modules, allowed)]
    problems += [*docstring_breaches(modules), *state_breaches(modules), *size_breaches(modules)]
    problems += [f"import cycle: {' -> '.join(group)}" for group in cycles(modules)]
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("root", nargs="?", type=Path, default=Path(__file__).resolve().parent.parent)
    problems = check(parser.parse_args(argv).root)
    for problem in problems:
        print(problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
