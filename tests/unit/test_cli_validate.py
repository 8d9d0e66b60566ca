"""``specbench validate`` and ``run --dry-run`` read the data (issue 35): every local dataset file a
suite names is read as the run reads it, without engines or a tokenizer, each bad line reported as
``file:line`` (exit 2); a hub source is checked for its form only, and says so; a good suite with
the packaged data validates in well under a second, without the heavy readers."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from support.paths import REPO
from typer.testing import CliRunner

from specbench.cli import app

SUITE = """\
name: data
targets:
  - name: t
    model: tiny
    methods: [{method: baseline}]
datasets:
  - name: d
"""
GOOD_CHAT = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}
SPEED_ROW = {"question_id": "q-1", "category": "coding", "sub_category": "py", "turns": ["Write a loop."],
             "source": "fixture", "src_id": "1", "difficulty": "easy", "multiturn": False}


def _suite(tmp_path: Path, dataset: str) -> Path:
    p = tmp_path / "suite.yaml"
    p.write_text(SUITE + textwrap.indent(textwrap.dedent(dataset), "    "))
    return p


def _lines(path: Path, *lines: str) -> Path:
    path.write_text("".join(line + "\n" for line in lines))
    return path


def _exits_2_naming(args: list[str], *where: str) -> str:
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and (result.exception is None or isinstance(result.exception, SystemExit))
    for w in where:
        assert w in result.output, result.output
    return result.output


# (kind and options, file name, lines: the good first, then broken ones, the lines named in the output)
BROKEN = {
    "jsonl": ("kind: jsonl\nprompt_field: q\n", "data.jsonl",
              [json.dumps({"q": "fine"}), '{"q": "torn', json.dumps({"other": 1}), "[1, 2]"], (2, 3, 4)),
    "chat_jsonl": ("kind: chat_jsonl\n", "chat.jsonl",
                   [json.dumps(GOOD_CHAT), '{"messages": [', json.dumps({"messages": [{"role": "bot", "content": "x"}]}),
                    json.dumps({"messages": [{"role": "assistant", "content": "x"}]})], (2, 3, 4)),
    "gsm8k": ("kind: gsm8k\n", "gsm8k.jsonl",
              [json.dumps({"question": "1+1?", "answer": "#### 2"}), "{nope", json.dumps({"problem": "x"})], (2, 3)),
    "spec_bench": ("kind: spec_bench\n", "question.jsonl",
                   [json.dumps({"question_id": 1, "category": "writing", "turns": ["Write."]}),
                    json.dumps({"question_id": 2, "turns": "not a list"}), json.dumps({"turns": ["no id"]})], (2, 3)),
    "humaneval": ("kind: humaneval\n", "he.jsonl",
                  [json.dumps({"task_id": "T/0", "prompt": "def f():\n", "entry_point": "f"}),
                   json.dumps({"task_id": "T/1", "prompt": "def g():\n"}), "\x00 not json"], (2, 3)),
    "speed_bench": ("kind: speed_bench\nconfig: qualitative\n", "speed.jsonl",
                    [json.dumps(SPEED_ROW), json.dumps({**SPEED_ROW, "question_id": "q-2", "turns": [
                        "FULL BENCHMARK DATA SHOULD BE FETCHED FROM THE SOURCE USING SPECDEC_BENCH"]}),
                     json.dumps({"question_id": "q-3", "category": "math"}), "}"], (2, 3, 4)),
}


@pytest.mark.parametrize("kind", list(BROKEN))
@pytest.mark.parametrize("command", ["validate", "dry-run"])
def test_each_bad_line_of_a_local_file_is_named_and_exits_2(tmp_path: Path, kind: str, command: str, no_hub):
    options, name, lines, bad = BROKEN[kind]
    data = _lines(tmp_path / name, *lines)
    suite = _suite(tmp_path, f"path: {name}\n{options}")
    args = ["validate", str(suite)] if command == "validate" else ["run", str(suite), "--dry-run", "--platform", "cuda"]
    out = _exits_2_naming(args, *(f"{data}:{n}:" for n in bad))
    assert f"{data}:1:" not in out  # the good line is not blamed
    if kind == "speed_bench":
        assert "placeholder" in out and "preparation script" in out


def test_a_broken_second_line_of_chat_jsonl_is_caught_before_the_run(tmp_path: Path):
    """The issue's case: validate exited 0 and the run then stopped at ``chat.jsonl:2: not JSON``."""
    data = _lines(tmp_path / "chat.jsonl", json.dumps(GOOD_CHAT), '{"messages": [{"role": "user", "content": "x"}')
    out = _exits_2_naming(["validate", str(_suite(tmp_path, "kind: chat_jsonl\npath: chat.jsonl\n"))],
                          f"{data}:2: not JSON")
    assert "ok " not in out


def test_a_parquet_file_names_its_bad_rows(tmp_path: Path, no_hub):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [SPEED_ROW, {**SPEED_ROW, "question_id": "q-2", "turns": None},
            {**SPEED_ROW, "question_id": "q-3", "turns": ["FULL BENCHMARK DATA SHOULD BE FETCHED FROM THE SOURCE "
                                                          "USING SPECDEC_BENCH"]}]
    f = tmp_path / "speed.parquet"
    pq.write_table(pa.Table.from_pylist(rows), f)
    suite = _suite(tmp_path, "kind: speed_bench\nconfig: qualitative\npath: speed.parquet\n")
    out = _exits_2_naming(["validate", str(suite)], f"{f}: row 2:", f"{f}: row 3:", "placeholder")
    assert f"{f}: row 1:" not in out
    (tmp_path / "speed.parquet").write_text("not parquet\n")
    _exits_2_naming(["validate", str(suite)], f"{f}: cannot be read as parquet")


def test_a_good_local_file_validates_and_says_what_was_read(tmp_path: Path, no_hub):
    _lines(tmp_path / "chat.jsonl", json.dumps(GOOD_CHAT), "", json.dumps({**GOOD_CHAT, "id": "b"}))
    suite = _suite(tmp_path, "kind: chat_jsonl\npath: chat.jsonl\nreplay: recorded\n")
    result = CliRunner().invoke(app, ["validate", str(suite)])
    assert result.exit_code == 0, result.output
    assert f"ok {suite}" in result.output and "dataset d: chat.jsonl: 2 rows read, 2 prompts built" in result.output


def test_rows_past_the_limit_are_read_for_json_but_not_held_to_the_prompt_field(tmp_path: Path, no_hub):
    """As the run: every line must be JSON, but only the rows it sends must give a prompt."""
    data = _lines(tmp_path / "d.jsonl", json.dumps({"q": "a"}), json.dumps({"other": 1}))
    assert CliRunner().invoke(app, ["validate", str(_suite(tmp_path, "kind: jsonl\npath: d.jsonl\nprompt_field: q\n"
                                                           "limit: 1\n"))]).exit_code == 0
    _lines(data, json.dumps({"q": "a"}), json.dumps({"other": 1}), "{")
    _exits_2_naming(["validate", str(_suite(tmp_path, "kind: jsonl\npath: d.jsonl\nprompt_field: q\nlimit: 1\n"))],
                    f"{data}:3: not JSON")


def test_a_template_field_the_rows_lack_is_named_at_validate(tmp_path: Path):
    """The packaged copy is read too: a prompt_template naming a field GSM8k rows lack fails here, not at run time."""
    _exits_2_naming(["validate", str(_suite(tmp_path, "kind: gsm8k\nlimit: 2\nprompt_template: '{problem}'\n"))],
                    "test.jsonl.gz:1: prompt_template names {problem}", "test.jsonl.gz:2:")


def test_many_bad_lines_are_counted_not_all_printed(tmp_path: Path):
    _lines(tmp_path / "d.jsonl", *(["{"] * 50))
    out = _exits_2_naming(["validate", str(_suite(tmp_path, "kind: jsonl\npath: d.jsonl\n"))], "and 30 more bad lines")
    assert out.count("not JSON") == 20


def test_a_hub_source_is_checked_for_its_form_only_and_says_so(no_hub):
    result = CliRunner().invoke(app, ["validate", str(REPO / "suites" / "speed-bench.yaml")])
    assert result.exit_code == 0, result.output
    assert result.output.count("form checked only") == 3 and "nvidia/SPEED-Bench, throughput_8k" in result.output
    dry = CliRunner().invoke(app, ["run", str(REPO / "suites" / "gsm8k.yaml"), "--dry-run", "--platform", "cuda"])
    assert dry.exit_code == 0 and "dataset gsm8k: the hub (openai/gsm8k, main, split test): form checked only" in dry.output


def test_a_good_suite_with_packaged_data_validates_in_under_a_second():
    """Timed in a fresh interpreter after the imports (what a second run of the command costs beyond
    Python itself), with no heavy reader imported: pandas, pyarrow and datasets only when needed."""
    code = textwrap.dedent("""
        import sys, time
        from pathlib import Path
        from specbench import api
        suites = [Path("suites") / n for n in ("cpu-smoke.yaml", "cpu-tour.yaml", "cpu-workloads.yaml", "cpu-lengths.yaml")]
        t = time.perf_counter()
        errors, read = api.validate(suites)
        took = time.perf_counter() - t
        print(took, errors, sorted(m for m in ("pandas", "pyarrow", "datasets", "torch", "transformers", "vllm")
                                   if m in sys.modules), sum(len(v) for v in read.values()))
    """)
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True).stdout
    took, rest = out.split(" ", 1)
    assert rest.strip() == "[] [] 7", out
    assert float(took) < 1.0, out
