"""What users type reaches the screen as typed (issue 35).

Every command runs through Typer's CLI runner with a corpus of hostile strings -- rich markup (``[bold]``,
``[/]``, ``[link=…]``), emoji codes (``:100:``, ``:1234:``), ANSI escapes (a colour, an OSC 8 hyperlink),
very long names, a file name that is not valid UTF-8 -- in file names, suite values, a run directory's
names and an engine's error text, and each must be found in the output as typed: brackets and colons
untouched, control characters as backslash escapes (never sent to the terminal), undecodable bytes as
``\\xNN``. (The sandbox's hostile *programs* are tests/integration/hostile/; these are hostile *strings*.)
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from rich.progress import Progress, TextColumn
from support.paths import RECORDED, SUITES
from typer.testing import CliRunner

from specbench import api
from specbench.cli import PlainConsole, _RichProgress, app
from specbench.config.plan import expand
from specbench.config.suite import load_suite
from specbench.execution.driver import RunProgress
from specbench.report.terminal import shown
from specbench.zoo.assets import TinyAssets

LONG = "L" * 180
#: Name-safe hostile strings (no "/": see _path) and what each must look like on screen.
CORPUS = [":100:", ":1234:", "[bold]", "[/]", "[link=example.com]", "\x1b[31m", "\x1b]8;;e.com\x07",
          "[red]x[/red]:smile:", LONG]
NOT_UTF8 = os.fsdecode(b"bad\xff\xfename")  # as Python hands over a file name that is not valid UTF-8
RAW = ("\x1b[31m", "\x1b]8;;", "\x07")  # the corpus's control sequences: never in the output as they are
EMOJI = ("💯", "🔢", "😄")


def _invoke(*args: str | Path):
    result = CliRunner().invoke(app, [str(a) for a in args])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


def _clean(output: str) -> str:
    """The output, after checking that nothing in it was sent to the terminal as a control sequence or
    rewritten into an emoji."""
    for raw in RAW:
        assert raw not in output, f"{raw!r} reached the terminal: {output!r}"
    for e in EMOJI:
        assert e not in output, f"an emoji code was rewritten: {output!r}"
    return output


def _path(base: Path, text: str, suffix: str = "") -> Path:
    """A path under ``base`` whose string holds ``text`` as typed ('[/]' becomes a directory '[' and ']…')."""
    p = base / f"n{text}{suffix}"
    p.parent.mkdir(parents=True, exist_ok=True)
    return p


def test_shown_escapes_control_characters_and_undecodable_bytes_only():
    assert shown("a:100:[bold]x[/] [link=u]é中 …") == "a:100:[bold]x[/] [link=u]é中 …"
    assert shown("col\x1b[31mred\x1b[0m") == "col\\x1b[31mred\\x1b[0m"
    assert shown("a\rb\x07c\x9bd\x7f") == "a\\rb\\x07c\\x9bd\\x7f"  # CR, BEL, C1 CSI, DEL
    assert shown("rtl\u202eabc") == "rtl\\u202eabc"  # a bidi override reorders what follows it
    assert shown(NOT_UTF8) == "bad\\xff\\xfename"
    assert shown("two\nlines\tand a tab") == "two\nlines\tand a tab"


def test_validate_shows_file_names_as_typed(tmp_path: Path):
    good = (SUITES / "gsm8k.yaml").read_text()
    paths = [_path(tmp_path, h, ".yaml") for h in CORPUS] + [tmp_path / f"{NOT_UTF8}.yaml"]
    paths.append(tmp_path / "a[" / "]b.yaml")
    paths[-1].parent.mkdir()
    for p in paths:
        p.write_text(good)
    result = _invoke("validate", *paths)
    assert result.exit_code == 0, result.output
    lines = _clean(result.output).splitlines()
    for p in paths:
        assert f"ok {shown(str(p))}" in lines
    assert f"ok {tmp_path}/a[/]b.yaml" in lines and f"ok {tmp_path}/n{LONG}.yaml" in lines


def test_suite_errors_on_line_100_and_1234_keep_their_file_and_line(tmp_path: Path):
    """The issue's example: 'bad.yaml:100:' printed as 'bad.yaml💯'."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("# padding\n" * 99 + "name: x\nstop: {rel_half_width: -1}\n")
    long = tmp_path / "long[bold].yaml"
    long.write_text("# padding\n" * 1233 + "name: x\ntargets: 3\n")
    for command in (("validate", bad, long), ("run", bad), ("run", long, "--dry-run")):
        result = _invoke(*command)
        assert result.exit_code == 2, result.output
        out = _clean(result.output)
        for p, line in ((bad, 100), (long, 1234)):
            if p in command:
                assert f"error {p}:{line}: " in out, out


def test_suite_values_are_shown_as_typed(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    text = (SUITES / "gsm8k.yaml").read_text()
    value = "".join(CORPUS)
    p = tmp_path / "values.yaml"
    # a value the suite rejects, quoted in its error line
    p.write_text(text.replace("      - method: baseline", f"      - method: {json.dumps(value)}", 1))
    result = _invoke("validate", p)
    assert result.exit_code == 2
    assert f"unknown method {shown(repr(value))}" in _clean(result.output), result.output
    # a value the suite accepts, printed by the dry run (the model name, in the server command)
    p.write_text(text.replace("model: Qwen/Qwen3-8B", f"model: {json.dumps('Qwen/' + value)}"))
    result = _invoke("run", p, "--dry-run", "--platform", "cuda")
    assert result.exit_code == 0, result.output
    assert f"vllm serve {shown(repr('Qwen/' + value))}" in _clean(result.output), result.output


def _hostile_run(tmp_path: Path, error: str) -> Path:
    """tests/fixtures/recorded under a hostile results root and run directory, its suite renamed, its ngram cell
    failed with ``error`` (an engine's error text) and its records gone."""
    run = _path(tmp_path / f"res{CORPUS[0]}{CORPUS[2]}", f"run{CORPUS[3]}{CORPUS[5]}{CORPUS[4]}")
    run = run.parent / "recorded" / run.name
    shutil.copytree(RECORDED, run)
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["suite_name"] = "s:100:[bold]"
    (run / "manifest.json").write_text(json.dumps(manifest))
    cells = [json.loads(line) for line in (run / "cells.jsonl").read_text().splitlines()]
    cells[1].update(status="failed", reason=error)
    (run / "cells.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cells))
    records = [r for r in (run / "records.jsonl").read_text().splitlines() if "/ngram/" not in json.loads(r)["cell_id"]]
    (run / "records.jsonl").write_text("\n".join(records) + "\n")
    return run


def test_run_directory_commands_show_names_and_paths_as_typed(tmp_path: Path):
    error = "ValueError: [red]CUDA[/red] out of memory :100: " + "".join(CORPUS)
    run = _hostile_run(tmp_path, error)
    other = run.parent / f"other{CORPUS[1]}{CORPUS[6]}"
    shutil.copytree(run, other)
    for command in (("analyze", run), ("compare", run, other), ("gate", other, "--baseline", run)):
        result = _invoke(*command)
        assert result.exit_code == 0, result.output
        _clean(result.output)
    result = _invoke("report", run, "--out", tmp_path / f"reports{CORPUS[6]}{LONG}")
    assert result.exit_code == 0, result.output
    lines = _clean(result.output).splitlines()
    assert f"markdown report: {shown(str(tmp_path))}/reports{shown(CORPUS[6])}{LONG}/" in "\n".join(lines)
    assert error in (tmp_path / f"reports{CORPUS[6]}{LONG}").joinpath(
        next(p.name for p in (tmp_path / f"reports{CORPUS[6]}{LONG}").glob("*.md") if "summary" not in p.name)
    ).read_text()  # the engine's error reaches the report whole
    result = _invoke("calibrate", run, other)
    assert result.exit_code == 0, result.output
    assert f"written: {shown(str(run.parent / 'noise.json'))}" in _clean(result.output)

    db = _path(tmp_path, f"db{CORPUS[5]}{CORPUS[2]}", ".sqlite")
    result = _invoke("history", "add", run, "--db", db)
    assert result.exit_code == 0 and "added " in _clean(result.output), result.output
    result = _invoke("history", "list", "--db", db)
    assert result.exit_code == 0 and "s:100:[bold]" in _clean(result.output), result.output
    out = _path(tmp_path, f"trend{CORPUS[3]}{CORPUS[8]}")
    result = _invoke("trend", "--out", out, "--db", db)
    assert result.exit_code == 0, result.output
    assert f": {shown(str(out))}/trend-" in _clean(result.output)  # pages named by the suite's slug

    for command in (("analyze", tmp_path / f"missing{CORPUS[5]}{CORPUS[0]}"),
                    ("gate", run, "--baseline", tmp_path / f"missing{CORPUS[6]}{CORPUS[4]}"),
                    ("calibrate", run, tmp_path / f"missing{CORPUS[2]}{CORPUS[1]}"),
                    ("list", "".join(CORPUS))):
        result = _invoke(*command)
        assert result.exit_code == 2, result.output
        assert shown(str(command[-1])) in _clean(result.output), result.output


def test_engine_errors_in_progress_lines_are_shown_as_typed():
    """The failed-cell line of ``specbench run`` (an engine's error text) and the progress descriptions."""
    cell = expand(load_suite(SUITES / "gsm8k.yaml")).cells[0]
    con = PlainConsole(width=100, record=True, force_terminal=False)
    with Progress(TextColumn("{task.description}", markup=False), console=con) as p:
        progress = _RichProgress(p, total=2)
        progress(RunProgress(kind="engine_start", message="eng" + "".join(CORPUS)))
        assert p.tasks[0].description == shown("starting eng" + "".join(CORPUS))
        for h in CORPUS:
            progress(RunProgress(kind="cell_failed", cell=cell, message=f"engine died: {h} at :1234:"))
    out = _clean(con.export_text())
    for h in CORPUS:
        # the first 200 characters of an engine's error: its informative line, cut to fit
        assert f"failed {cell.cell_id}: {shown(f'engine died: {h} at :1234:'[:200])}" in out, out


def test_assets_prints_paths_as_typed(tmp_path: Path, monkeypatch):
    root = tmp_path / f"zoo{CORPUS[0]}{CORPUS[5]}"
    assets = TinyAssets(root=root, target=root / "target[bold]", tokenizer=root / "tok",
                        speculators={"eagle3": root / f"e{CORPUS[4]}{CORPUS[3]}"}, trained=True)
    monkeypatch.setattr(api, "assets", lambda *a, **k: assets)
    result = _invoke("assets", "--cache-dir", root)
    assert result.exit_code == 0, result.output
    lines = _clean(result.output).splitlines()
    assert f"target: {shown(str(assets.target))}" in lines
    assert f"eagle3: {shown(str(assets.speculators['eagle3']))}" in lines


@pytest.mark.parametrize("what", ["methods", "datasets"])
def test_lists_keep_their_own_style_only(what: str):
    result = _invoke("list", what)
    assert result.exit_code == 0 and "[dim]" not in result.output, result.output


def test_usage_errors_show_the_word_as_typed():
    """Typer's own usage errors (a command that does not exist) quote it as typed, ANSI escaped."""
    result = CliRunner().invoke(app, ["nosuch:100:[bold]\x1b[31m"])
    assert result.exit_code == 2
    assert "No such command 'nosuch:100:[bold]\\x1b[31m'" in _clean(result.output), result.output


def test_suite_warnings_keep_their_file_and_line(tmp_path: Path):
    """A suite that loads with a warning (a τ reference without its definition): the warning is shown
    labelled, its file name and line as typed, not in Python's warning format."""
    text = (SUITES / "gsm8k.yaml").read_text()
    first = "    definition: tokens_per_step   # DeepSpec's eval: Σ (accepted + 1, cut at EOS) / verification steps\n"
    assert first in text
    p = _path(tmp_path, "[bold]:100:\x1b[31m", ".yaml")
    p.write_text(text.replace(first, "", 1))
    line = text[: text.index(first)].count("\n") - 4  # the reference's first line ("- target: …")
    result = _invoke("validate", p)
    assert result.exit_code == 0, result.output
    out = _clean(result.output)
    assert f"warning {shown(str(p))}:{line}: references[0]: no definition" in out, out
    assert "SuiteWarning" not in out
