"""Rewrite the generated regions of README.md and docs/*.md from the repository files they name.

A region is the lines between two marker comments, each on a line of its own, that name the same
repository path:

    <!-- BEGIN benchmarks/results/latest.md -->
    (generated: edit the named file, or the code that writes it, then run this script)
    <!-- END benchmarks/results/latest.md -->

The path may end in a fragment that names a part of the file:
- Markdown or text, no fragment: the whole file. `#<anchor>`: the section under the heading with
  that anchor (GitHub's: lower case, punctuation dropped, spaces as hyphens), heading line left
  out, up to the next heading of the same or a higher level. `#top`: the text before the first
  heading.
- JSON: `#key.key...` picks a value (the whole file without a fragment). A list of objects, or
  an object of objects, is a table with one row each (values that are themselves lists of objects
  or objects are left out); an object of plain values is a two-column table; a plain value is
  itself. Floats show 4 significant digits.

    python scripts/render_docs.py            # rewrite every stale region in place
    python scripts/render_docs.py --check    # rewrite nothing; exit 1 naming each stale region

Standard library only.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
REGION = re.compile(r"^<!-- BEGIN (?P<src>\S+) -->\n(?P<body>.*?)^<!-- END (?P=src) -->$", re.M | re.S)
MARKER = re.compile(r"^<!-- (?P<kind>BEGIN|END) (?P<src>\S+) -->$", re.M)
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
FENCE = re.compile(r"^\s*(```|~~~)")


class RenderError(Exception):
    """A marker that names no file, no section, or no key; or markers that do not pair up."""


def targets(repo: Path = REPO) -> list[Path]:
    """The files whose regions are rendered: README.md first (docs may include parts of it)."""
    return [p for p in [repo / "README.md", *sorted((repo / "docs").glob("*.md"))] if p.is_file()]


def anchor(title: str) -> str:
    """GitHub's anchor for a heading: `Weight sync per transport vs memcpy` -> `weight-sync-per-transport-vs-memcpy`."""
    title = re.sub(r"`|\*\*|\[([^\]]*)\]\([^)]*\)", r"\1", title.strip().lower())
    return re.sub(r"[^\w\- ]", "", title).replace(" ", "-")


def headings(text: str) -> list[tuple[int, int, str]]:
    """(line index, level, anchor) of every Markdown heading outside fenced code."""
    out, fenced = [], False
    for i, line in enumerate(text.splitlines()):
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced and (m := HEADING.match(line)):
            out.append((i, len(m.group(1)), anchor(m.group(2))))
    return out


def markdown_part(text: str, fragment: str | None, src: str) -> str:
    if fragment is None:
        return text
    lines, found = text.splitlines(), headings(text)
    if fragment == "top":
        return "\n".join(lines[: found[0][0] if found else len(lines)])
    for n, (i, level, name) in enumerate(found):
        if name == fragment:
            end = next((j for j, lv, _ in found[n + 1 :] if lv <= level), len(lines))
            return "\n".join(lines[i + 1 : end])
    raise RenderError(f"{src}: no heading with anchor #{fragment} (anchors: {', '.join(a for _, _, a in found) or 'none'})")


def cell(value: object) -> str:
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, list):
        return ", ".join(cell(v) for v in value)
    return str(value).replace("|", "\\|").replace("\n", " ")


def plain(value: object) -> bool:
    """A value a table cell can show: not an object, not a list holding objects or lists."""
    return not isinstance(value, dict) and not (isinstance(value, list) and any(isinstance(v, dict | list) for v in value))


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def json_part(data: object, fragment: str | None, src: str) -> str:
    for key in fragment.split(".") if fragment else []:
        if isinstance(data, dict) and key in data:
            data = data[key]
        elif isinstance(data, list) and key.isdigit() and int(key) < len(data):
            data = data[int(key)]
        else:
            raise RenderError(f"{src}: no key {key!r}")
    if plain(data):
        return cell(data)
    if isinstance(data, dict) and all(plain(v) for v in data.values()):
        return table(["field", "value"], [[str(k), cell(v)] for k, v in data.items()])
    if isinstance(data, list) and data and all(isinstance(r, dict) for r in data):
        items = [("", r) for r in data]
    elif isinstance(data, dict) and data and all(isinstance(r, dict) for r in data.values()):
        items = [(str(k), r) for k, r in data.items()]
    else:
        raise RenderError(f"{src}: neither a plain value, an object of plain values, nor a list or object of objects")
    columns = list(dict.fromkeys(k for _, r in items for k, v in r.items() if plain(v)))
    named = isinstance(data, dict)
    return table(
        ([""] if named else []) + columns, [([name] if named else []) + [cell(r.get(c, "")) for c in columns] for name, r in items]
    )


def render_source(src: str, repo: Path = REPO) -> str:
    """The current text of `path[#fragment]`, as it goes between the markers."""
    rel, _, fragment = src.partition("#")
    path = (repo / rel).resolve()
    if not path.is_relative_to(repo.resolve()) or not path.is_file():
        raise RenderError(f"{src}: no such file in the repository")
    text = path.read_text()
    if path.suffix == ".json":
        return json_part(json.loads(text), fragment or None, src)
    return markdown_part(text, fragment or None, src)


def render_text(text: str, where: str, repo: Path = REPO) -> tuple[str, list[str]]:
    """`text` with every region rendered, and the sources of the regions that were stale."""
    begins = [m.group("src") for m in MARKER.finditer(text) if m.group("kind") == "BEGIN"]
    paired = [m.group("src") for m in REGION.finditer(text)]
    if sorted(begins) != sorted(paired) or len(MARKER.findall(text)) != 2 * len(paired):
        raise RenderError(f"{where}: BEGIN/END markers do not pair up (each on its own line, same path, not nested)")
    stale: list[str] = []

    def fill(m: re.Match) -> str:
        body = render_source(m.group("src"), repo).strip("\n") + "\n"
        if body != m.group("body"):
            stale.append(m.group("src"))
        return f"<!-- BEGIN {m.group('src')} -->\n{body}<!-- END {m.group('src')} -->"

    return REGION.sub(fill, text), stale


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="rewrite nothing; exit 1 if a region is stale")
    args = ap.parse_args(argv)
    stale = 0
    try:
        for path in targets():
            where = str(path.relative_to(REPO))
            text = path.read_text()
            new, sources = render_text(text, where)
            for src in sources:
                print(f"{where}: stale region {src}" + ("" if args.check else " (rewritten)"))
            stale += len(sources)
            if sources and not args.check:
                path.write_text(new)
    except RenderError as e:
        print(f"render_docs: {e}", file=sys.stderr)
        return 2
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
