"""The documentation holds up: generated tables match their results files, the README stays short,
every repository path named in the docs (and in rlsvc/'s comments and docstrings) exists, no file
points at a checkout-relative shared folder, and every relative Markdown link resolves.

Plain files and the standard library only: no Ray, no torch, a second or two.
"""

from __future__ import annotations

import io
import re
import subprocess
import tokenize
from pathlib import Path

import pytest
from conftest import load_script

REPO = Path(__file__).resolve().parents[2]
README_LIMIT = 12_000
# a repository path: one of the top-level folders, then a path; or a bare upper-case Markdown file (README.md)
PATH_REF = re.compile(
    r"(?<![\w./-])((?:rlsvc|docs|configs|benchmarks|tests|kuberay|notebooks|scripts|examples|docker)/[\w./*<>{}-]*)"
    r"|(?<![\w./-])([A-Z][A-Z0-9_-]*\.md)\b"
)
LINK = re.compile(r"\[[^\]\n]*\]\(([^)\s]+)\)")
FENCED = re.compile(r"^\s*(```|~~~).*?^\s*\1", re.M | re.S)
INLINE_CODE = re.compile(r"`[^`\n]*`")


render_docs = load_script("render_docs")
DOCS = render_docs.targets(REPO)


def _rel(path: Path) -> str:
    return str(path.relative_to(REPO))


def _missing(ref: str) -> bool:
    """Whether a path named in text points at nothing: placeholders (`<run>`, `{v}`, `...`) are not
    paths, and a glob must match something."""
    ref = ref.rstrip("./")
    if not ref or any(c in ref for c in "<>{}") or "..." in ref:
        return False
    if "*" in ref:
        return not any(REPO.glob(ref))
    return not (REPO / ref).exists()


def _refs(text: str, first_line: int = 1) -> list[tuple[int, str]]:
    return [(first_line + text.count("\n", 0, m.start()), m.group(1) or m.group(2)) for m in PATH_REF.finditer(text)]


def _python_text(path: Path) -> list[tuple[int, str]]:
    """(first line, text) of every comment and string literal of a Python file."""
    kinds = {tokenize.COMMENT, tokenize.STRING, getattr(tokenize, "FSTRING_MIDDLE", tokenize.STRING)}
    return [(t.start[0], t.string) for t in tokenize.generate_tokens(io.StringIO(path.read_text()).readline) if t.type in kinds]


def test_every_generated_region_matches_its_file():
    stale = []
    for path in DOCS:
        _, sources = render_docs.render_text(path.read_text(), _rel(path), REPO)
        stale += [f"{_rel(path)}: {src}" for src in sources]
    assert not stale, "stale generated regions (run `python scripts/render_docs.py`):\n" + "\n".join(stale)


def test_readme_is_short():
    size = len((REPO / "README.md").read_text())
    assert size < README_LIMIT, f"README.md is {size} characters (limit {README_LIMIT}): move detail into docs/"


def test_every_path_named_in_the_docs_and_in_rlsvc_exists():
    missing = []
    for path in DOCS:
        missing += [f"{_rel(path)}:{line}: {ref}" for line, ref in _refs(path.read_text()) if _missing(ref)]
    for path in sorted((REPO / "rlsvc").rglob("*.py")):
        for start, text in _python_text(path):
            missing += [f"{_rel(path)}:{line}: {ref}" for line, ref in _refs(text, start) if _missing(ref)]
    assert not missing, "paths named but not in the repository:\n" + "\n".join(missing)


def _repository_files() -> list[Path]:
    """Tracked and untracked-but-not-ignored files (what a commit could hold); outside a git
    checkout (an unpacked archive), every file but the ones set-up and runs make."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO, capture_output=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        made = {".venv", ".cache", ".git", "runs", "mlruns", "__pycache__", ".pytest_cache", ".ruff_cache"}
        return [p for p in sorted(REPO.rglob("*")) if p.is_file() and not made & set(p.relative_to(REPO).parts)]
    return [REPO / name for name in sorted(set(out.decode().split("\0"))) if name and (REPO / name).is_file()]


def test_no_file_outside_ci_points_at_a_shared_folder_beside_the_checkout():
    needle = ("../" + "shared").encode()  # spelled in two parts so that this file does not match itself
    hits = [_rel(p) for p in _repository_files() if not _rel(p).startswith(".ci/") and needle in p.read_bytes()]
    assert not hits, f"files that name a folder outside the checkout ({needle.decode()}): {hits}"


def _anchors(path: Path) -> set[str]:
    """GitHub's heading anchors of a Markdown file (a repeated heading gets -1, -2, ...)."""
    seen: dict[str, int] = {}
    out = set()
    for _, _, name in render_docs.headings(path.read_text()):
        n = seen.get(name, 0)
        seen[name] = n + 1
        out.add(name if n == 0 else f"{name}-{n}")
    return out


def test_every_relative_link_resolves():
    broken = []
    for path in DOCS:
        text = INLINE_CODE.sub("", FENCED.sub("", path.read_text()))
        for m in LINK.finditer(text):
            target = m.group(1)
            if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
                continue
            file, _, anchor = target.partition("#")
            dest = (path.parent / file).resolve() if file else path
            if not dest.exists():
                broken.append(f"{_rel(path)}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
                broken.append(f"{_rel(path)}: {target} (no heading #{anchor} in {_rel(dest)})")
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_render_rewrites_a_stale_region_from_a_markdown_section_and_a_json_key(tmp_path):
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "r.md").write_text("intro\n\n## First\n\nfirst body\n\n### Inner\n\ninner\n\n## Second\n\nsecond\n")
    (tmp_path / "results" / "r.json").write_text('{"rows": [{"n": 1, "x": 0.123456, "runs": [{"a": 1}]}, {"n": 2, "x": 2.0}]}')
    doc = (
        "<!-- BEGIN results/r.md#first -->\nold\n<!-- END results/r.md#first -->\n"
        "<!-- BEGIN results/r.md#top -->\n<!-- END results/r.md#top -->\n"
        "<!-- BEGIN results/r.json#rows -->\n<!-- END results/r.json#rows -->\n"
    )
    new, stale = render_docs.render_text(doc, "doc.md", tmp_path)
    assert stale == ["results/r.md#first", "results/r.md#top", "results/r.json#rows"]
    assert "first body\n\n### Inner\n\ninner\n<!-- END results/r.md#first -->" in new and "second" not in new
    assert "<!-- BEGIN results/r.md#top -->\nintro\n<!-- END" in new
    assert "| n | x |\n|---|---|\n| 1 | 0.1235 |\n| 2 | 2 |\n" in new  # a nested column is left out
    assert render_docs.render_text(new, "doc.md", tmp_path) == (new, [])


@pytest.mark.parametrize(
    "doc",
    [
        "<!-- BEGIN results/none.md -->\n<!-- END results/none.md -->\n",  # no such file
        "<!-- BEGIN results/r.md#nowhere -->\n<!-- END results/r.md#nowhere -->\n",  # no such section
        "<!-- BEGIN results/r.md -->\n<!-- END results/other.md -->\n",  # markers that do not pair up
    ],
)
def test_render_refuses_what_it_cannot_render(tmp_path, doc):
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "r.md").write_text("# A\n")
    with pytest.raises(render_docs.RenderError):
        render_docs.render_text(doc, "doc.md", tmp_path)
