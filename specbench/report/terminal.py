"""The closing lines of ``specbench run`` / ``analyze`` in a terminal (pure: rows of strings).

First the answer the report opens with (:func:`headline_rows`): per target, one
table of each method against the reference (EAGLE-3 unless ``compare_to`` says
otherwise) at every dataset, temperature and load: the method at its best K,
the speedup and τ ratios with their intervals, the verdict ('τ only' where
no speed was measured: the reference simulator's rows).

Then one table per target (its name as the title), six short columns that fit
100 characters: dataset, method (with K), T and load, τ with its interval,
speedup with its interval, verdict ('τ only' in the speedup column of a group that measured τ and no speed: the
reference simulator's). The verdict is the group's equivalence verdict when it has one, else its status
when it did not run; the full story is in the reports. A τ (or a headline verdict) resting on a group
with more than a fifth of its outputs in a repetition loop carries the loop mark (†,
:mod:`specbench.results.degeneracy`), and the table's caption says what it means. Below the tables, one
line says where the run's wall time went (:func:`time_line`).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from specbench.analysis.timing import TimeBreakdown, fmt_duration, fmt_share, harness_parts
from specbench.config.plan import load_tag
from specbench.results.degeneracy import MARK, MARK_NOTE, mark
from specbench.results.fmt import dataset_label, fmt_est, fmt_speedup, speed_intervals_note
from specbench.results.parts import HeadlineRow
from specbench.results.slices import split_group_id
from specbench.results.summary import GroupSummary, RunSummary

# Bidirectional-text controls: they reorder what a terminal shows around them (CVE-2021-42574).
_BIDI = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def shown(text: str) -> str:
    """``text`` as a terminal should show it: as typed, with what a terminal would act on instead of
    showing escaped. Control characters other than newline and tab (ESC of an ANSI sequence, CR, BEL, C1
    controls) and bidirectional controls become backslash escapes (``\\x1b``, ``\\r``, ``\\u202e``);
    a byte that was not valid UTF-8 in a file name (a surrogate escape, as ``os.fsdecode`` gives it) is
    shown as ``\\xNN``. Everything else, markup-like brackets and ``:emoji:`` codes included, is left alone:
    the consoles that print it interpret neither (see :mod:`specbench.cli`)."""
    if text.isprintable():
        return text
    out = []
    for ch in text:
        o = ord(ch)
        if ch in "\n\t" or (o >= 0xA0 and not 0xD800 <= o <= 0xDFFF and ch not in _BIDI):
            out.append(ch)
        elif 0xDC80 <= o <= 0xDCFF:  # surrogateescape: the undecodable byte o - 0xDC00
            out.append(f"\\x{o - 0xDC00:02x}")
        elif 0x20 <= o < 0x7F:
            out.append(ch)
        else:
            out.append(ch.encode("unicode_escape").decode("ascii"))
    return "".join(out)


HEADER = ("dataset", "method", "T·load", "τ [95% CI]", "speedup [95% CI]", "verdict")
#: Width every column may take; the widest row is under 100 characters with the separators.
MAX_WIDTHS = (16, 18, 10, 18, 18, 12)


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _fit(cells: tuple[str, ...], widths: tuple[int, ...], marked: tuple[bool, ...]) -> tuple[str, ...]:
    """Each cell clipped to its width, the loop mark kept (the text clipped to leave it room) where marked."""
    return tuple(mark(_clip(c, w - len(MARK)), True) if m else _clip(c, w)
                 for c, w, m in zip(cells, widths, marked, strict=True))


def group_verdict(g: GroupSummary) -> str:
    if g.status in ("skipped", "failed"):
        return g.status
    entries = g.equivalence.tests(g.temperature) if g.equivalence is not None else []
    verdicts = sorted({str(e.verdict) for _, e in entries})
    if not verdicts:
        return "–" if g.status == "ok" else g.status
    return " / ".join("not shown" if v == "not shown equivalent" else v for v in verdicts)


def closing_rows(summary: RunSummary) -> dict[str, list[tuple[str, ...]]]:
    """Target name → its rows, in the summary's order."""
    rows: dict[str, list[tuple[str, ...]]] = {}
    for g in summary.whole_groups:
        load = load_tag(g.batch_size, g.request_rate)
        method = g.method + (f" K{g.k}" if g.k and f"k{g.k}" not in g.method.lower() else "")
        has_tau = g.tau is not None and g.tau.value is not None
        cells = (
            dataset_label(g.dataset, g.group_id), method, f"{g.temperature:g}·{load}",
            g.tau.fmt() if g.tau is not None and has_tau else "–",
            g.speedup.fmt() if g.speedup and g.speedup.value is not None else TAU_ONLY if _untimed(g) else "–",
            group_verdict(g),
        )
        looped = has_tau and summary.rests_on_loops(g.group_id)
        rows.setdefault(g.target, []).append(_fit(cells, MAX_WIDTHS, (False, False, False, looped, False, False)))
    return rows


HEADLINE_HEADER = ("dataset T·load", "against", "method", "speedup ratio", "τ ratio", "verdict")
HEADLINE_WIDTHS = (22, 10, 14, 18, 18, 10)
#: The verdict of a row that compares τ only (:attr:`HeadlineRow.tau_only`): no speed was measured.
TAU_ONLY = "τ only"
SHORT_VERDICT = {"faster": "faster", "slower": "slower", "same": "same", "undecided": "undecided",
                 "not distinguishable": "n.d.", "no data": "–", TAU_ONLY: TAU_ONLY}
HEADLINE_NOTE = "each arm at its best K at that load"
#: How a row measured in speed rounds reads (analysis.method_comparison.HEADLINE_MARGIN).
ROUNDS_NOTE = ("ratios paired by prompt within {rounds}, decided as `specbench ab` decides (per-{unit} ratios, "
               "their confidence sequence at α = 0.01); faster / slower beyond ±5 %, same within, else undecided")
#: How a row of a run without rounds reads (the arms measured minutes apart).
PROMPTS_NOTE = "ratios paired by prompt, 95% intervals; n.d.: not distinguishable (the speedup interval holds 1)"
TAU_ONLY_NOTE = "τ only: an engine that measures τ, not speed (the reference simulator)"


def headline_verdict(r: HeadlineRow) -> str:
    """The verdict a headline row shows: 'τ only' for a row without timings, else the stored verdict."""
    return TAU_ONLY if r.tau_only else r.verdict


def headline_note(summary: RunSummary, target: str) -> str:
    """The headline table's note for ``target``: how to read it, and what 'τ only' and the loop mark mean
    when a row has one."""
    rows = [r for r in summary.headline if r.target == target]
    tau_only = any(r.tau_only for r in rows)
    looped = any(headline_looped(summary, r) for r in rows)
    rounds = sorted({r.rounds for r in rows if r.rounds is not None})
    instances = sorted({r.instances for r in rows if r.instances})
    unit = "instance (the mean of an engine instance's rounds)" if instances and instances[-1] > 1 else "round"
    said = (rounds_said(rounds) if rounds else "") + (
        f" on {rounds_said(instances).replace('rounds', 'engine instances')}" if instances and instances[-1] > 1 else "")
    how = [ROUNDS_NOTE.format(rounds=said, unit=unit)] if rounds else []
    how += [f"blocks: {summary.extra.headline_blocks}"] if rounds and summary.extra.headline_blocks else []
    how += [PROMPTS_NOTE] if any(r.rounds is None and not r.tau_only for r in rows) else []
    return "; ".join([HEADLINE_NOTE, *how]) + (f"; {TAU_ONLY_NOTE}" if tau_only else "") + (
        f"; {MARK_NOTE}" if looped else "")


def rounds_said_of(r: HeadlineRow) -> str:
    """' (4 rounds)', ' (12 rounds on 5 instances; ~9 instances would decide)' after a row's verdict, with the rounds
    left out for a stall and a K tie (' K 1≈3'); '' in a run of one round."""
    ties = "".join(f"; {who} K {'≈'.join(str(k) for k in tie)}" for who, tie in
                   (("method", r.method_k_tie), ("reference", r.reference_k_tie)) if tie)
    if r.rounds is None:
        return f" ({ties[2:]})" if ties else ""
    many = (r.instances or 1) > 1
    unit = "instances" if many else "rounds"
    more = f"; ~{r.rounds_to_decide} {unit} would decide" if r.verdict == "undecided" and r.rounds_to_decide else ""
    on = f" on {r.instances} instances" if many else ""
    stalls = f"; {r.stalled_rounds} left out: a request stalled in their instance" if r.stalled_rounds else ""
    return f" ({r.rounds} rounds{on}{more}{stalls}{ties})"


def rounds_said(rounds: list[int]) -> str:
    """'4 rounds' / '2–4 rounds' (the rounds the headline's verdicts rest on)."""
    return f"{rounds[0]} rounds" if len(rounds) == 1 else f"{rounds[0]}–{rounds[-1]} rounds"


def closing_note(summary: RunSummary, target: str) -> str | None:
    """The closing table's caption for ``target``: what the loop mark on a τ means, when one is marked."""
    looped = any(g.target == target and summary.rests_on_loops(g.group_id) for g in summary.whole_groups)
    return MARK_NOTE if looped else None


def headline_looped(summary: RunSummary, r: HeadlineRow) -> bool:
    """A headline row whose method or reference group has more than a fifth of its outputs degenerate."""
    return summary.rests_on_loops(r.method_group, r.reference_group)


def _untimed(g: GroupSummary) -> bool:
    """A group with τ and no timings (the reference simulator's): its speedup is not missing, never measured."""
    timed = g.output_tps is not None and g.output_tps.value is not None
    return not timed and g.tau is not None and g.tau.value is not None


def headline_where(r: HeadlineRow) -> str:
    """'humaneval 0·b1': the dataset, temperature and load of a headline row."""
    load = load_tag(r.batch_size, r.request_rate)
    return f"{dataset_label(r.dataset, r.method_group)} {r.temperature:g}·{load}"


def with_k(name: str, k: int | None) -> str:
    """'dflash K3' (a method at one K; a label that already names its K is left alone)."""
    return name + (f" K{k}" if k is not None and f"k{k}" not in name.lower() else "")


def headline_rows(summary: RunSummary) -> dict[str, list[tuple[str, ...]]]:
    """Target name → its headline rows: methods against the reference, grouped by (dataset, T, load), the
    reference against no speculation first; where on the first row of each group, what a row is against
    wherever it changes."""
    rows: dict[str, list[tuple[str, ...]]] = {}
    def slice_order(r: HeadlineRow) -> tuple[int, str]:
        s = split_group_id(r.method_group)[1]
        return (s.input_tokens or 0, s.id)

    order = sorted(summary.headline, key=lambda r: (r.target, r.dataset, slice_order(r), r.temperature,
                                                     r.request_rate is not None, r.request_rate or r.batch_size,
                                                     r.reference != "baseline", r.method))
    last: tuple | None = None
    last_against: str | None = None
    for r in order:
        key = (r.target, dataset_label(r.dataset, r.method_group), r.temperature, r.batch_size, r.request_rate)
        first = key != last
        last = key
        against = with_k(r.reference, r.reference_k)
        show_against = first or against != last_against
        last_against = against
        cells = (
            headline_where(r) if first else "", against if show_against else "",
            with_k(r.method, r.method_k), fmt_speedup(r.speedup_ratio), fmt_est(r.tau_ratio, 2, unit="×"),
            SHORT_VERDICT.get(headline_verdict(r), r.verdict),
        )
        marked = (False,) * 5 + (headline_looped(summary, r),)
        rows.setdefault(r.target, []).append(_fit(cells, HEADLINE_WIDTHS, marked))
    return rows


def time_line(breakdown: TimeBreakdown | dict[str, Any] | None) -> str | None:
    """'wall 5m55s: engine starts 2m10s (37 %), cells 1m06s (19 %), harness 2m39s (45 %): warmups 40s, …'
    (the harness: everything but engine starts and measured cells; see :mod:`specbench.analysis.timing`)."""
    if not breakdown:
        return None
    bd = breakdown if isinstance(breakdown, TimeBreakdown) else TimeBreakdown.model_validate(breakdown)
    starts, cells = bd.wall_of("engine_start"), bd.wall_of("cells")

    def share(s: float) -> str:
        return fmt_share(s / bd.wall_s if bd.wall_s > 0 else 0.0)

    head = (f"wall {fmt_duration(bd.wall_s)}: engine starts {fmt_duration(starts)} ({share(starts)}), "
            f"cells {fmt_duration(cells)} ({share(cells)}), harness {fmt_duration(bd.harness_s)} ({share(bd.harness_s)})")
    parts = harness_parts(bd)
    return head + (": " + ", ".join(f"{name} {fmt_duration(s)}" for name, s in parts) if parts else "")


class TerminalTable(NamedTuple):
    """One closing table in words: its header, title, caption and rows; ``section_ends``: per row, whether a
    section ends after it (a rule in the terminal)."""

    header: tuple[str, ...]
    title: str
    caption: str | None
    rows: list[tuple[str, ...]]
    section_ends: list[bool]


def terminal_tables(summary: RunSummary) -> list[TerminalTable]:
    """The closing tables of ``specbench run`` / ``analyze``: the answer first (each method against the
    reference, per target: :func:`headline_rows`), then one compact table of every group per target
    (:func:`closing_rows`)."""
    tables = []
    for target, rows in headline_rows(summary).items():
        tables.append(TerminalTable(
            HEADLINE_HEADER, f"target {target}: each method against the reference",
            f"{headline_note(summary, target)}; {speed_intervals_note(summary, short=True)}", rows,
            [i + 1 < len(rows) and bool(rows[i + 1][0]) for i in range(len(rows))]))
    for target, rows in closing_rows(summary).items():
        tables.append(TerminalTable(HEADER, f"target {target}", closing_note(summary, target), rows, [False] * len(rows)))
    return tables
