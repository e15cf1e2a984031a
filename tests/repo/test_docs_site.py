"""The documentation site's structure, checked without building it (``bash .ci/docs``
builds it with warnings as errors and runs its examples): one page per benchmark with a
title of its own, a copyright holder, the theme installed by the docs extra, a landing
page that opens with what the library is for, and docstring examples that Sphinx renders
as examples."""
import ast
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def _conf():
    names = {}
    for node in ast.parse((DOCS / "conf.py").read_text()).body:
        if isinstance(node, ast.Assign):
            value = node.value
            if isinstance(value, ast.Name):              # copyright = author
                value = ast.Constant(names.get(value.id))
            if isinstance(value, ast.Constant):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        names[target.id] = value.value
    return names


def _title(page: pathlib.Path) -> str:
    return next(line[2:] for line in page.read_text().splitlines() if line.startswith("# "))


def test_one_page_per_benchmark_with_a_title_of_its_own():
    pages = sorted((DOCS / "benchmarks").glob("*.md"))
    included = {}
    for page in pages:
        for block in re.findall(r"```\{include\} (\S+)\n((?::.*\n)*)", page.read_text()):
            path, options = block
            report = (page.parent / path).resolve()
            assert report.is_file(), (page.name, path)
            assert report not in included, f"{report.name} on {included.get(report)} and {page.name}"
            included[report] = page.name
            # the report's own first line is its script's title (a timestamp, a mode): the page's replaces it
            assert ":start-line: 1" in options, page.name
    assert included, "no benchmark report on the site"
    titles = [_title(page) for page in pages]
    assert len(set(titles)) == len(titles), titles
    for title in titles:
        assert not re.search(r"\d{8}-\d{6}|\b(full|quick) mode\b", title), title


def test_theme_and_copyright():
    conf = _conf()
    assert conf["copyright"] == conf["author"] == "the torchsparsegradutils developers"
    extra = re.findall(r'"([^"]+)"', re.search(r"^docs = \[(.*?)\]", (ROOT / "pyproject.toml").read_text(),
                                                flags=re.M | re.S).group(1))
    assert any(re.match(conf["html_theme"] + r"\b.*<", req) for req in extra), (conf["html_theme"], extra)


def test_landing_page_opens_with_purpose_install_example_and_plot():
    text = (DOCS / "index.md").read_text()
    lead = text.split("\n## ")[0]
    assert "gradients stay sparse" in lead and "{toctree}" not in lead
    sections = re.findall(r"^## (.+)$", text, flags=re.M)
    assert sections[:2] == ["Install", "A first example"], sections
    example = text.split("## A first example")[1]
    assert "pip install" in text.split("## Install")[1].split("\n## ")[0]
    assert "{testcode}" in example and "sparse_mm" in example           # run by the doctest builder
    image = re.search(r"```\{image\} (\S+)", example).group(1)
    assert (DOCS / image).resolve().is_file() and "benchmarks/results/" in image


def test_docstring_examples_are_under_an_examples_heading():
    """A >>> example written after a NumPy section other than Examples (Raises, Returns,
    ...) is read by napoleon as part of that section: shown as bold list items and
    skipped by Sphinx's doctest builder."""
    fields = {"Parameters", "Returns", "Yields", "Raises", "Attributes", "Other Parameters", "Warns"}
    found = []
    for path in (ROOT / "torchsparsegradutils").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.Module)):
                continue
            lines = (ast.get_docstring(node) or "").splitlines()
            section = None
            for line, underline in zip(lines, lines[1:] + [""]):
                if line.strip() and re.fullmatch(r"-{3,}", underline.strip()):
                    section = line.strip()
                elif line.strip().startswith(">>>") and section in fields:
                    found.append(f"{path.relative_to(ROOT)}: {getattr(node, 'name', '<module>')} ({section})")
                    break
    assert not found, found
