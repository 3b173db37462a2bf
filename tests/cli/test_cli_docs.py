"""The documentation the command line points at exists and says what the code does: every page
cited in a --help text, README or a module's docstring is there, and docs/config.md lists every
setting of agent/config.py."""
from __future__ import annotations

import argparse
import dataclasses
import re
from collections.abc import Iterator
from pathlib import Path

from agent.cli import build_parser
from agent.config import AgentConfig, env_name

ROOT = Path(__file__).resolve().parents[2]
CITED = re.compile(r"(?<![\w/.-])((?:[\w-]+/)+[\w.-]+\.md)\b")  # a path with a directory: docs/x.md, agent/X.md


def help_texts(parser: argparse.ArgumentParser) -> Iterator[tuple[str, str]]:
    """(prog, --help text) of the parser and of every subcommand under it."""
    yield parser.prog, parser.format_help()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from help_texts(sub)


def test_help_texts_cite_only_pages_that_exist():
    texts = dict(help_texts(build_parser()))
    assert {"ratchet", "ratchet eval", "ratchet optimize", "ratchet batch", "ratchet suite check"} <= set(texts)
    cited = {(prog, path) for prog, text in texts.items() for path in CITED.findall(" ".join(text.split()))}
    assert ("ratchet optimize", "docs/config.md") in cited and ("ratchet batch", "docs/batch.md") in cited
    missing = sorted((prog, path) for prog, path in cited if not (ROOT / path).is_file())
    assert not missing, f"--help cites pages that do not exist: {missing}"


def test_readme_docs_and_docstrings_cite_only_pages_that_exist():
    sources = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")),
               *sorted((ROOT / "agent").rglob("*.py")), *sorted((ROOT / "tools").rglob("*.py"))]
    # a path is cited from the repository's root (docs/x.md), or, in a page, as a relative link
    missing = sorted({f"{src.relative_to(ROOT)}: {path}" for src in sources for path in CITED.findall(src.read_text())
                      if not (ROOT / path).is_file() and not (src.suffix == ".md" and (src.parent / path).is_file())})
    assert not missing, f"dangling references: {missing}"


def test_the_config_page_lists_every_setting():
    page = (ROOT / "docs" / "config.md").read_text()
    keys = set(re.findall(r"^\| ([^|]+) \|", page, re.M))
    listed = {name.strip(" `") for cell in keys for name in cell.split(",")}
    fields = {f.name for f in dataclasses.fields(AgentConfig)}
    assert fields <= listed, f"docs/config.md lacks {sorted(fields - listed)}"
    assert env_name("max_attempts") in page and "RATCHET_CONFIG" in page and "OPENAI_API_KEY" in page


def test_each_folder_readme_names_its_files():
    """The map holds: every module at the top of agent/, tools/ and benchmarks/ is named in that
    folder's README, and every page of docs/ in docs/README.md."""
    for folder, pattern in (("agent", "*.py"), ("tools", "*.py"), ("benchmarks", "*.py"), ("docs", "*.md")):
        readme = (ROOT / folder / "README.md").read_text()
        missing = sorted(p.name for p in (ROOT / folder).glob(pattern)
                         if p.name not in ("__init__.py", "README.md") and f"`{p.name}`" not in readme)
        assert not missing, f"{folder}/README.md does not name {missing}"
    for folder in ("prompts", "tests", "examples", "suite"):
        assert (ROOT / folder / "README.md").is_file(), f"{folder}/ has no README"


def test_each_folder_of_tools_has_a_readme_naming_its_files():
    """The evaluator's folders by role (tools/README.md) each say what their files are."""
    for folder in sorted(p for p in (ROOT / "tools").iterdir() if p.is_dir() and (p / "__init__.py").is_file()):
        readme = folder / "README.md"
        assert readme.is_file(), f"tools/{folder.name}/ has no README"
        missing = sorted(p.name for p in folder.glob("*.py") if p.name != "__init__.py" and f"`{p.name}`" not in readme.read_text())
        assert not missing, f"tools/{folder.name}/README.md does not name {missing}"
        assert f"`{folder.name}/`" in (ROOT / "tools" / "README.md").read_text(), f"tools/README.md does not name {folder.name}/"
