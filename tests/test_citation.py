"""memlab is licensed and citable: LICENSE and pyproject agree, CITATION.cff has what CFF 1.2.0 requires, README's
BibTeX and the docs' Cite page agree entry by entry, and each study page names its paper by its full title."""

import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAPERS = ROOT.parent / "shared" / "papers"  # the papers' own text, beside the development checkout only
STUDY_PAPERS = {  # study -> (BibTeX key of its paper, the paper's file in PAPERS)
    "belief": ("zhao-linear-recurrent-memory", "linear-recurrent-memory-pomdp.md"),
    "ictd": ("xie-softmax-transformers-icrl", "softmax-transformers-in-context-td.md"),
    "pissm": ("hashempoor-hybrid-state-space", "pi-ssm-hybrid-state-space.md"),
    "recall": ("anonymous-mamba-recall", "mamba-measure-valued-recall.md"),
}
_ENTRY = re.compile(r"@(\w+)\{([^,\s]+),(.*?)\n\}", re.S)
_FIELD = re.compile(r"(\w+)\s*=\s*\{((?:[^{}]|\{[^{}]*\})*)\}", re.S)


def words(text: str) -> str:
    return " ".join(text.split())


def bibtex_entries(markdown: str) -> dict[str, dict[str, str]]:
    """key -> {"type": ..., field: value (whitespace collapsed)} of every entry in the ```bibtex blocks."""
    entries = {}
    for block in re.findall(r"```bibtex\n(.*?)```", markdown, re.S):
        for kind, key, body in _ENTRY.findall(block):
            assert key not in entries, f"BibTeX key {key} twice"
            entries[key] = {"type": kind, **{name: words(value) for name, value in _FIELD.findall(body)}}
    return entries


def test_bibtex_parser_reads_fields_and_braced_names():
    parsed = bibtex_entries("```bibtex\n@misc{k,\n  title = {A: B},\n  author = {{Anonymous Authors}},\n"
                            "  note  = {two\n           lines},\n}\n```\n")
    assert parsed == {"k": {"type": "misc", "title": "A: B", "author": "{Anonymous Authors}", "note": "two lines"}}


def test_readme_and_cite_page_give_the_same_bibtex():
    readme = bibtex_entries((ROOT / "README.md").read_text(encoding="utf-8"))
    docs = bibtex_entries((ROOT / "docs" / "cite.md").read_text(encoding="utf-8"))
    assert readme == docs
    assert {key for key, _ in STUDY_PAPERS.values()} | {"memlab"} == set(readme)
    assert all(entry.get("title") and entry.get("author") for entry in readme.values())


def test_each_study_page_names_its_paper_in_full():
    entries = bibtex_entries((ROOT / "docs" / "cite.md").read_text(encoding="utf-8"))
    for study, (key, _) in STUDY_PAPERS.items():
        page = words((ROOT / "docs" / "studies" / f"{study}.md").read_text(encoding="utf-8"))
        assert f"*{entries[key]['title']}*" in page, f"docs/studies/{study}.md should name its paper's title"


@pytest.mark.skipif(not PAPERS.is_dir(), reason="the papers' text sits beside the development checkout only")
def test_references_take_title_and_authors_from_each_papers_header():
    entries = bibtex_entries((ROOT / "README.md").read_text(encoding="utf-8"))
    for key, paper in STUDY_PAPERS.values():
        header = words("\n".join((PAPERS / paper).read_text(encoding="utf-8").splitlines()[:30]))
        assert entries[key]["title"] in header, key
        for author in entries[key]["author"].strip("{}").split(" and "):
            last, _, first = author.partition(", ")
            assert (f"{first} {last}" if first else last) in header, (key, author)


def test_license_file_and_pyproject_agree():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["license"] == "MIT" and project["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert text.startswith("MIT License\n") and "Copyright (c) the memlab authors" in text


def test_citation_cff_holds_the_keys_cff_1_2_0_requires():
    yaml = pytest.importorskip("yaml", reason="PyYAML comes with the docs extra (mkdocs)")
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text(encoding="utf-8"))
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert cff["cff-version"] == "1.2.0"
    assert isinstance(cff["message"], str) and cff["message"].strip()
    assert cff["title"] == project["name"] and cff["version"] == project["version"]
    assert cff["license"] == project["license"]
    for person in [*cff["authors"], *(a for ref in cff["references"] for a in ref["authors"])]:
        assert person.get("name") or person.get("family-names"), person  # an entity or a person
    titles = {ref["title"] for ref in cff["references"] if {"type", "title", "authors"} <= set(ref)}
    entries = bibtex_entries((ROOT / "README.md").read_text(encoding="utf-8"))
    assert titles == {entries[key]["title"] for key, _ in STUDY_PAPERS.values()}


def test_experiment_pages_name_the_papers_as_the_bibtex_does():
    pytest.importorskip("mkdocs", reason='the docs extra: pip install -e ".[docs]"')
    import importlib.util

    spec = importlib.util.spec_from_file_location("experiment_pages", ROOT / "docs" / "hooks" / "experiment_pages.py")
    pages = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(pages)
    entries = bibtex_entries((ROOT / "docs" / "cite.md").read_text(encoding="utf-8"))
    assert pages.paper_titles() == {study: entries[key]["title"] for study, (key, _) in STUDY_PAPERS.items()}
