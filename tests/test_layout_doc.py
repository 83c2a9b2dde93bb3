"""docs/layout.md against the tree: every module it lists exists, every module of the package is listed."""

import fnmatch
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: The folders whose files docs/layout.md lists one by one (globs allowed), and the suffixes checked.
LISTED = {"scrapy_frontier": (".py", ".lua"), "crawler": (".py",), "bench": (".py",)}


def layout_tree() -> dict[str, list[str]]:
    """The paths docs/layout.md's tree names, by top folder: ``{"scrapy_frontier": ["addon.py", "lua/", ...]}``."""
    text = (ROOT / "docs" / "layout.md").read_text()
    block = text.split("```", 2)[1]
    entries: dict[str, list[str]] = {}
    stack: list[tuple[int, str]] = []
    for line in block.splitlines()[1:]:
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip(" "))
        names = re.split(r"\s{2,}", line.strip(), maxsplit=1)[0]
        while stack and stack[-1][0] >= indent:
            stack.pop()
        parent = "".join(name for _, name in stack)
        for name in re.split(r",\s*", names):
            name = name.split(" ")[0]
            path = parent + name
            top, _, rest = path.partition("/")
            entries.setdefault(top, []).append(rest)
        if names.endswith("/"):
            stack.append((indent, names))
    return entries


def test_every_listed_module_exists_and_every_module_is_listed():
    tree = layout_tree()
    missing, unlisted = [], []
    for top, suffixes in LISTED.items():
        listed = [p for p in tree.get(top, []) if p and not p.endswith("/")]
        for pattern in listed:
            if pattern.endswith(suffixes) and not list((ROOT / top).glob(pattern)):
                missing.append(f"{top}/{pattern}")
        for path in sorted((ROOT / top).rglob("*")):
            rel = path.relative_to(ROOT / top).as_posix()
            if path.suffix not in suffixes or "__pycache__" in rel or path.name == "__init__.py" and rel.count("/"):
                continue
            if not any(fnmatch.fnmatch(rel, pattern) for pattern in listed):
                unlisted.append(f"{top}/{rel}")
    assert not missing, f"docs/layout.md lists files that do not exist: {missing}"
    assert not unlisted, f"docs/layout.md does not list: {unlisted} (one line each: what the module is for)"
