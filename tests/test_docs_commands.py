"""The commands the README and the docs show agree with the command line the package has.

- Each ``## `recsys-dist X` `` section of ``docs/cli.md`` opens with X's synopsis: it names
  exactly the options ``recsys-dist X --help`` has.
- Every ``recsys-dist ...`` command shown in the README and ``docs/`` (in a code block or
  inline code) names a command there is, with options that command takes.
- The README's table of commands names every command there is, and no other.
- The example output of ``validate`` in ``docs/cli.md`` is what the command prints: run on
  small generated data, its output has a line of the form of each line shown, in the same
  order, and the feature and table counts of the demo's feature config.

The parser is the one ``recsys-dist`` builds (:func:`recsys_dist.cli.build_parser`), so a
renamed or removed option fails here rather than in a user's shell.
"""

from __future__ import annotations

import argparse
import pathlib
import re

import pytest
import yaml

from recsys_dist.cli import build_parser

ROOT = pathlib.Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
OPTION = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)")


def subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """``{"train": ..., "data synth": ...}``: every command's own parser."""
    found = {}
    for action in parser._actions:  # argparse keeps its subcommands only here
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                inner = subparsers(sub)
                found.update({f"{name} {k}": v for k, v in inner.items()} or {name: sub})
    return found


COMMANDS = subparsers(build_parser())


#: Options every command takes, documented once at the top of docs/cli.md ("Output").
EVERY_COMMANDS = {"--help", "--quiet", "--verbose"}


def options_of(parser: argparse.ArgumentParser) -> set[str]:
    return {
        option
        for action in parser._actions
        if action.help != argparse.SUPPRESS
        for option in action.option_strings
        if option.startswith("--") and option not in EVERY_COMMANDS
    }


def synopses() -> dict[str, str]:
    """``{command: its synopsis}`` from docs/cli.md: the first code block of each section
    titled ``recsys-dist COMMAND``, its continuation lines joined."""
    text = (ROOT / "docs" / "cli.md").read_text()
    found = {}
    for match in re.finditer(r"^## `recsys-dist ([a-z -]+)`\n(.*?)(?=^## |\Z)", text, re.M | re.S):
        block = re.search(r"```\n(.*?)```", match.group(2), re.S)
        if block is not None:
            found[match.group(1)] = " ".join(block.group(1).split())
    return found


#: Where a command starts in a line of a code block: the line's start, or after an
#: environment assignment, ``exec``, a path to the venv's ``bin``, or a shell operator.
COMMAND_START = re.compile(r"(?:^|[\s'\"/]|&& |exec )recsys-dist (?=[a-z-])")
#: Where it ends: a shell operator, a redirection or a comment.
COMMAND_END = re.compile(r"\s(?:&&|\|\||\||>>?|2>&1|;|#)(?:\s|$)")


def shown_commands() -> list[tuple[str, str]]:
    """``(page, command line)`` of every ``recsys-dist`` command a user would copy: in
    the code blocks of the README and the docs (continuation lines joined) and in their
    inline code. Synopses (``[...]``) and elisions (``...``) are left out."""
    found = []
    for page in PAGES:
        name = str(page.relative_to(ROOT))
        fenced, pending = False, ""
        for line in page.read_text().splitlines():
            if line.startswith("```"):
                fenced, pending = not fenced, ""
                continue
            if not fenced:
                found += [(name, code) for code in re.findall(r"`(recsys-dist [^`]+)`", line)]
                continue
            line = pending + line.strip()
            if line.endswith("\\"):
                pending = line[:-1] + " "
                continue
            pending = ""
            start = COMMAND_START.search(line)
            if start is not None and not line.startswith("#"):
                command = line[start.end() - len("recsys-dist ") :]
                found.append((name, COMMAND_END.split(command)[0].strip()))
    return [(page, c) for page, c in found if "[" not in c and "..." not in c and "…" not in c]


def test_every_command_has_a_section_whose_synopsis_names_its_options():
    sections = synopses()
    assert sorted(sections) == sorted(COMMANDS), "docs/cli.md's sections differ from the commands"
    problems = []
    for command, synopsis in sections.items():
        assert synopsis.startswith(f"recsys-dist {command} "), synopsis
        shown = set(OPTION.findall(synopsis)) - EVERY_COMMANDS
        real = options_of(COMMANDS[command])
        if shown != real:
            problems.append(
                f"{command}: the synopsis lacks {sorted(real - shown)}, "
                f"names {sorted(shown - real)} that --help does not have"
            )
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("page, line", shown_commands())
def test_a_command_shown_in_the_docs_exists_with_the_options_it_is_given(page, line):
    """Prose names a command without all its arguments (`recsys-dist train`), so what is
    checked is the command and each option given, not a whole parse."""
    words = [w for w in line.split()[1:] if w not in ("-q", "-v", "--quiet", "--verbose")]
    command = " ".join(words[:2]) if words[:1] == ["data"] else (words[0] if words else "")
    assert command in COMMANDS, f"{page}: `{line}`: no command {command!r}"
    unknown = sorted(set(OPTION.findall(line)) - options_of(COMMANDS[command]) - EVERY_COMMANDS)
    assert not unknown, f"{page}: `{line}`: recsys-dist {command} has no {', '.join(unknown)}"


def test_the_readmes_table_of_commands_names_every_command():
    readme = (ROOT / "README.md").read_text()
    table = readme.split("## Commands", 1)[1].split("\n## ", 1)[0]
    named = {
        re.sub(r" \[.*", "", name)  # `validate [--scan]` names validate
        for first_cell in re.findall(r"^\|([^|]*)\|", table, re.M)
        for name in re.findall(r"`([^`]+)`", first_cell)
    }
    assert named == set(COMMANDS), (
        f"missing {sorted(set(COMMANDS) - named)}, unknown {sorted(named - set(COMMANDS))}"
    )


#: A number as the commands print one: ``600,000``, ``45.9``, ``5``.
NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?")
#: Where the example in docs/cli.md says the checkout is.
EXAMPLE_CHECKOUT = "/srv/recsys"
CLI_PAGE = ROOT / "docs" / "cli.md"


def validate_example() -> list[str]:
    """The lines of the ``Example output`` block of docs/cli.md's ``validate`` section,
    without the ``...`` lines that stand for lines left out."""
    text = CLI_PAGE.read_text()
    section = re.search(r"^## `recsys-dist validate`\n(.*?)(?=^## )", text, re.M | re.S)
    assert section is not None, "docs/cli.md has no validate section"
    example = re.search(r"Example output.*?```\n(.*?)```", section.group(1), re.S)
    assert example is not None, "docs/cli.md's validate section has no example output"
    return [line for line in example.group(1).splitlines() if line.strip() != "..."]


def form(line: str) -> str:
    """A line with its numbers replaced by ``N``: what any run's line of that kind shares."""
    return NUMBER.sub("N", line.rstrip())


def test_the_validate_example_has_the_form_and_the_counts_of_the_real_output(
    synth_dir, capsys, monkeypatch
):
    from recsys_dist.cli import main

    shown = validate_example()
    command = re.search(r"Example output: `recsys-dist (validate [^`]*)`", CLI_PAGE.read_text())
    assert command is not None, "docs/cli.md names no command before the validate example"
    args = command.group(1).split()
    assert "--data" in args, f"the example's command has no --data: {command.group(1)}"
    args[args.index("--data") + 1] = str(synth_dir)  # small data of the same generator
    monkeypatch.chdir(ROOT)  # the example's paths are relative to the checkout
    assert main(args) == 0
    printed = capsys.readouterr().out.replace(str(ROOT), EXAMPLE_CHECKOUT).splitlines()

    at = 0
    for line in shown:
        forms = [form(p) for p in printed[at:]]
        assert form(line) in forms, (
            f"docs/cli.md's validate example shows\n  {line}\nbut no line of that form "
            f"follows in the real output:\n" + "\n".join(printed[at:])
        )
        at += forms.index(form(line)) + 1

    demo = yaml.safe_load((ROOT / "configs" / "demo.yaml").read_text())
    features = yaml.safe_load((ROOT / "configs" / demo["features"]).read_text())
    counts = f"OK ({len(features['features'])} features, {len(features['tables'])} tables,"
    assert counts in next(line for line in shown if line.startswith("config ")), (
        f"docs/cli.md's validate example should say {counts!r}, as the demo's feature config has"
    )
    assert counts in next(line for line in printed if line.startswith("config "))
    for word in ("data", "schema", "plan", "scan", "ids"):
        assert any(line.startswith(f"{word} ") for line in shown), f"no {word} line shown"
