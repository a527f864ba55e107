"""Sentences in both of the course's languages.

Every sentence the grader shows a student is written once, in English, as a `t(...)` call with named
parameters. The English template is the gettext msgid; its Chinese is in the catalogs under
`grader/locale/zh/LC_MESSAGES/grader.po` for the package's own sentences and, for a course's probes and criteria,
in the course folder beside them: `solutions/<id>/zh.po` (`solutions/_lib/zh.po` for its shared code), all read
with Babel and merged once a course is loaded (`add_course_catalogs`). A report keeps both renderings,
so one grading serves both audiences and `--lang` only picks what an output shows.

    verdict.fail(t("logits have shape {got}; expected {want} = [B, T, V]", got=got, want=[2, 5, 11]))

A parameter that is itself a `Text` is rendered in the same language; anything else (a number, a shape, a
name from the contract, the student's own words) is shown as it is. Templates name their parameters: no
attribute or index access, so a catalog entry can reorder them and nothing else.

`python -m grader.i18n` brings the catalogs in line with the source (see `docs/writing-criteria.md`).
"""

from __future__ import annotations

import functools
import string
from collections.abc import Iterable
from pathlib import Path

LANGS = ("en", "zh")
LOCALE_DIR = Path(__file__).resolve().parent / "locale"
_COURSE_CATALOGS: list[Path] = []   # solutions folders of the courses loaded here, whose <id>/<lang>.po are merged
# Calls whose first argument is a template in a catalog: `t` everywhere, and the contract breaches a probe
# raises in the worker (which has no catalog: the judge translates what it recorded).
KEYWORDS = {"t": None, "ContractBreach": None, "WrongReturn": None, "student_value": None, "student_tensor": None}


class Text:
    """A sentence in every language: an English template and its parameters, rendered on demand."""

    __slots__ = ("template", "params")

    def __init__(self, template: str, params: dict | None = None):
        self.template = template
        self.params = params or {}

    def render(self, lang: str) -> str:
        template = self.template if lang == "en" else catalog(lang).get(self.template, self.template)
        names = _plain_fields(template)
        if names is None:
            return _Formatter(lang).vformat(template, (), self.params)
        params = self.params
        # str.format_map formats as _Formatter would (format(value, spec), in C): each field's Text rendered first
        return template.format_map({name: _in_language(params[name], lang) for name in names})

    def texts(self) -> dict[str, str]:
        return {lang: self.render(lang) for lang in LANGS}

    def __add__(self, other: Text) -> Text:
        if not isinstance(other, Text):
            return NotImplemented  # a bare string would stay English in every language
        return Joined((self, other))

    def __str__(self) -> str:
        return self.render("en")

    def __repr__(self) -> str:
        return f"Text({self.render('en')!r})"


class Verbatim(Text):
    """Words that are the same in every language: code, a name from the contract, the student's own text."""

    __slots__ = ()

    def render(self, lang: str) -> str:
        return str(self.template)


class Rendered(Text):
    """A sentence already rendered in every language (what a report or the judge recorded)."""

    __slots__ = ()

    def __init__(self, texts: dict[str, str]):
        super().__init__("", dict(texts))

    def render(self, lang: str) -> str:
        return self.params.get(lang) or self.params.get("en", "")


class Joined(Text):
    """Texts one after the other, with a separator that is itself a Text (punctuation differs by language)."""

    __slots__ = ()

    def __init__(self, parts: Iterable[Text], separator: Text | None = None):
        super().__init__("", {"parts": tuple(parts), "separator": separator})

    def render(self, lang: str) -> str:
        sep = self.params["separator"]
        return (sep.render(lang) if sep is not None else "").join(p.render(lang) for p in self.params["parts"])


def t(template: str, /, **params) -> Text:
    return Text(template, params)


def verbatim(text) -> Text:
    return Verbatim(str(text))


def rendered(said: Text | dict[str, str] | str) -> Text:
    """What was already said, as a Text: a Text itself, a sentence recorded in every language ({"en": ..., "zh": ...}),
    or words that are the same in every language (an exception's message)."""
    if isinstance(said, Text):
        return said
    return Rendered(said) if isinstance(said, dict) else verbatim(said)


def join(parts: Iterable[Text], separator: Text | None = None) -> Text:
    return Joined(parts, separator)


def known_template(template: str) -> bool:
    """Whether `template` is a msgid of the catalogs (a probe's recorded breach names one, or is shown as it is)."""
    return template in catalog("zh")


def add_course_catalogs(solutions: Path) -> None:
    """Merge the catalogs of a course's probes and criteria (<solutions>/<folder>/<lang>.po) from now on."""
    if solutions not in _COURSE_CATALOGS:
        _COURSE_CATALOGS.append(solutions)
        catalog.cache_clear()


def course_catalog(solutions: Path, domain: str, lang: str) -> Path:
    """Where the catalog of a course's domain (an exercise's id, or `_lib`) is kept."""
    return solutions / domain / f"{lang}.po"


@functools.cache
def catalog(lang: str) -> dict[str, str]:
    """msgid -> translation for `lang`, merged over its `.po` files (the package's, then those of the courses loaded
    here); a fuzzy or empty entry is no translation."""
    if lang == "en":
        return {}
    from babel.messages.pofile import read_po

    merged: dict[str, str] = {}
    course_files = [po for solutions in _COURSE_CATALOGS for po in sorted(solutions.glob(f"*/{lang}.po"))]
    for po in [*sorted((LOCALE_DIR / lang / "LC_MESSAGES").glob("*.po")), *course_files]:
        with po.open("rb") as fh:
            for message in read_po(fh, locale="zh_CN" if lang == "zh" else lang):
                if isinstance(message.id, str) and isinstance(message.string, str) and message.string \
                        and not message.fuzzy:   # singular messages only: the catalogs have no plural forms
                    merged[message.id] = message.string
    return merged


def placeholders(template: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}


@functools.lru_cache(maxsize=4096)
def _plain_fields(template: str) -> tuple[str, ...] | None:
    """The names a template's fields read, when every field is a plain `{name}` or `{name:spec}`; None for one that
    _Formatter alone formats as it should (a conversion, a spec with fields of its own, a field that is not a name,
    a malformed template: what it raises is _Formatter's to raise)."""
    try:
        fields = [(name, spec, conversion) for _, name, spec, conversion in string.Formatter().parse(template)
                  if name is not None]
    except ValueError:
        return None
    if any(not name.isidentifier() or conversion is not None or "{" in (spec or "")
           for name, spec, conversion in fields):
        return None
    return tuple(dict.fromkeys(name for name, _, _ in fields))


def _in_language(value, lang: str):
    return value.render(lang) if isinstance(value, Text) else value


class _Formatter(string.Formatter):
    def __init__(self, lang: str):
        self.lang = lang

    def get_field(self, field_name, args, kwargs):
        if not field_name.isidentifier():
            raise ValueError(f"a template names its parameters only: {{{field_name}}}")
        return kwargs[field_name], field_name

    def format_field(self, value, format_spec):
        if isinstance(value, Text):
            value = value.render(self.lang)
        return format(value, format_spec)


def domain_of(source: Path, package: Path | None = None) -> str:
    """The catalog a source file's sentences live in: the grader's own (a file of the package) `grader`; a course's
    probes and criteria of an exercise (<solutions>/<id>/probes.py, criteria.py) the exercise's, named after its
    folder, as the course's shared code (<solutions>/_lib/<name>.py) is `_lib`'s."""
    source = source.resolve()
    if source.is_relative_to((package or Path(__file__).parent).resolve()):
        return "grader"
    return source.parent.name


def extract_python_ast(fileobj, keywords, comment_tags, options):
    """A Babel extraction method that reads the syntax tree: every call of a keyword whose first argument is a
    string literal, nested calls included (Babel's token-based extractor misses a template inside another
    template's arguments, and takes a docstring after a parameter named like a keyword for one).
    Usable from `pybabel extract -F` as `grader.i18n:extract_python_ast`."""
    import ast

    tree = ast.parse(fileobj.read().decode(options.get("encoding", "utf-8")))
    calls = [node for node in ast.walk(tree) if isinstance(node, ast.Call)]
    for node in sorted(calls, key=lambda n: (n.lineno, n.col_offset)):
        func = node.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
        if name in keywords and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str):
            yield node.lineno, name, node.args[0].value, []


def extract_templates(package: Path | None = None,
                      solutions: Path | None = None) -> dict[str, dict[str, list[tuple[str, int]]]]:
    """domain -> template -> where in the source it is written, for every template of the package (this one, or a
    copy of it such as a handout's checker) and of the course's probes, criteria and shared code in `solutions`
    (None: the bundled course's; a package copy without one: none)."""
    from babel.messages.extract import extract_from_file

    package = (package or Path(__file__).parent).resolve()
    solutions = _solutions_of(package, solutions)
    sources = [(source, package.parent) for source in sorted(package.rglob("*.py"))]
    if solutions is not None:
        solutions = solutions.resolve()
        course_code = [*solutions.glob("*/probes.py"), *solutions.glob("*/criteria.py"), *solutions.glob("_lib/*.py")]
        sources += [(source, solutions.parent) for source in sorted(course_code)]
    found: dict[str, dict[str, list[tuple[str, int]]]] = {}
    for source, top in sources:
        extracted = extract_from_file(extract_python_ast, source, keywords=KEYWORDS, options={"encoding": "utf-8"})
        for lineno, message, _comments, _context in extracted:
            if isinstance(message, str) and message:
                rel = source.relative_to(top).as_posix()
                found.setdefault(domain_of(source, package), {}).setdefault(message, []).append((rel, lineno))
    return found


def _solutions_of(package: Path, solutions: Path | None) -> Path | None:
    """The course folder's solutions that go with `package`: as given, else the bundled course's for this package."""
    if solutions is None and package == Path(__file__).parent.resolve():
        from grader.course import default_solutions

        return default_solutions()
    return solutions


def read_catalog(path: Path) -> dict[str, str]:
    """msgid -> msgstr of one `.po` file, untranslated entries included (as empty strings)."""
    from babel.messages.pofile import read_po

    with path.open("rb") as fh:
        return {m.id: ("" if m.fuzzy or not isinstance(m.string, str) else m.string)
                for m in read_po(fh) if m.id and isinstance(m.id, str)}


def update_catalogs(lang: str = "zh", package: Path | None = None,
                    solutions: Path | None = None) -> dict[str, tuple[int, int]]:
    """Extract every template from the package (this one, or a copy such as a handout's checker, whose cut-down
    source then takes the hidden criteria's sentences out of its catalogs) and from the course's code in
    `solutions`, and merge it into `lang`'s catalogs: the package's in its locale folder, each exercise's beside its
    criteria. New templates are added untranslated, translations kept, templates no longer in the source dropped.
    Returns, per domain, how many templates it holds and how many lack a translation."""
    from babel.messages.catalog import Catalog
    from babel.messages.pofile import write_po

    package = (package or Path(__file__).parent).resolve()
    solutions = _solutions_of(package, solutions)
    found = extract_templates(package, solutions)
    folder = package / "locale" / lang / "LC_MESSAGES"
    folder.mkdir(parents=True, exist_ok=True)
    counts = {}
    stale = [*folder.glob("*.po"), *(solutions.glob(f"*/{lang}.po") if solutions is not None else [])]
    for po in stale:
        if (po.stem if po.parent == folder else po.parent.name) not in found:
            po.unlink()
    for domain, messages in sorted(found.items()):
        path = folder / f"{domain}.po" if domain == "grader" or solutions is None \
            else course_catalog(solutions, domain, lang)
        old = read_catalog(path) if path.exists() else {}
        fresh = Catalog(locale="zh_CN" if lang == "zh" else lang, project="transformer-grader", domain=domain,
                        fuzzy=False)
        for msgid, locations in messages.items():
            fresh.add(msgid, old.get(msgid, ""), locations=locations, flags=("python-brace-format",))
        with path.open("wb") as fh:
            write_po(fh, fresh, width=0, omit_header=True, sort_output=True)
        counts[domain] = (len(messages), sum(1 for m in messages if not old.get(m)))
    catalog.cache_clear()
    return counts


if __name__ == "__main__":
    for name, (total, untranslated) in update_catalogs().items():
        print(f"{name}: {total} templates, {untranslated} untranslated")
