"""Time per decoding step as a function of K and of the requests in the step (pure; issue 37).

vLLM's dynamic speculative decoding picks K from the number of requests scheduled in each step,
so the model is per step: t(K, n) = a + b·K + c·n + d·K·n seconds, n the requests in the step.

What a record gives is one request's decode time D (latency − TTFT) and its decoding steps s
(:func:`specbench.analysis.step_time.decoding_steps`). Its j-th step ran with n_j requests, so
D = Σ_j t(K, n_j) = a·s + b·K·s + c·N + d·K·N with N = Σ_j n_j — linear in (a, b, c, d), fitted
by least squares over requests. n_j comes from the requests around it:

* an offline cell runs its requests in batches of ``batch_size`` (one ``generate`` each, in the
  order the records are written), in lockstep: the j-th step of a batch holds every request of
  the batch with more than j steps, so N_i = Σ_{r in batch} min(s_r, s_i);
* a server cell records when each request was sent: a request is in the engine from then until
  it finished (prefill included, as in vLLM's count), its steps are spread evenly over its decode
  time, and n_j counts the requests in the engine at each step's time.

With one K measured b and d are not identified (0; the model holds at that K); with one n (every
step at the same batch size) c and d are not (0; it holds at that n). Intervals: the speedup
built on the model is bootstrapped over requests (:mod:`specbench.analysis.k_schedule`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence

import numpy as np

from specbench.analysis.step_time import decode_time, decoding_steps
from specbench.results.records import RequestRecord
from specbench.results.schedule_file import StepModel

#: Columns of a step row: decode time, steps, K, Σ steps' n, largest n.
D, S, K, N, NMAX = range(5)


def _server_counts(spans: Sequence[tuple[float, float]],
                   rows: Sequence[tuple[float, float, float, int]]) -> list[np.ndarray]:
    """n_j of each step of each request of one server cell from (sent, ttft, latency, steps), counting
    every request in the engine (``spans``: each timed request's (sent, finished), steps known or not)."""
    sent = np.array([a for a, _ in spans])
    end = np.array([b for _, b in spans])
    out = []
    for t0, ttft, lat, s in rows:
        times = t0 + ttft + (np.arange(s) + 0.5) * (lat - ttft) / s
        n = ((sent[None, :] <= times[:, None]) & (times[:, None] < end[None, :])).sum(axis=1)
        out.append(np.maximum(n, 1))
    return out


def running_per_step(requests: Sequence[RequestRecord], batch_size: int, speculative: bool,
                     steps_of: Callable[[RequestRecord], int | None] | None = None,
                     ) -> list[tuple[RequestRecord, float, int, np.ndarray]]:
    """``(record, decode time, steps, n_j of each step)`` of every request whose decode time and steps
    are known, from one group's requests in the order they were written (see the module docstring).
    ``steps_of``: a request's decoding steps (default :func:`decoding_steps`: exact ones only)."""
    count = steps_of or (lambda r: decoding_steps(r, speculative))
    by_cell: dict[tuple, list[RequestRecord]] = defaultdict(list)
    for r in requests:
        by_cell[(r.cell_id, r.repeat, r.round)].append(r)
    out: list[tuple[RequestRecord, float, int, np.ndarray]] = []
    for reqs in by_cell.values():
        known = [(r, decode_time(r), count(r)) for r in reqs]
        if all(r.sent_offset_s is not None for r in reqs):
            spans = [(r.sent_offset_s or 0.0, (r.sent_offset_s or 0.0) + r.latency_s) for r in reqs
                     if r.latency_s is not None]
            ok = [(r, d, s) for r, d, s in known if d is not None and s and r.ttft_s is not None
                  and r.latency_s is not None]
            counts = _server_counts(spans, [(r.sent_offset_s or 0.0, r.ttft_s or 0.0, r.latency_s or 0.0, s)
                                            for r, _, s in ok])
            out += [(r, float(d or 0.0), int(s or 0), n) for (r, d, s), n in zip(ok, counts, strict=True)]
            continue
        for i in range(0, len(known), max(1, batch_size)):
            batch = known[i:i + max(1, batch_size)]
            if any(d is None or not s for _, d, s in batch):
                continue  # a request of the batch without steps: its neighbours' n are unknown
            steps = np.array([int(s or 0) for _, _, s in batch])
            out += [(r, float(d or 0.0), int(s), (steps[None, :] > np.arange(s)[:, None]).sum(axis=1))
                    for (r, d, _), s in zip(batch, steps.tolist(), strict=True)]
    return out


def step_model_rows(requests: Sequence[RequestRecord], batch_size: int, k: int,
              speculative: bool) -> tuple[np.ndarray, list[RequestRecord]]:
    """One row ``[D, s, K, N, largest n]`` per request whose decode time and steps are known (see the
    module docstring for N), and those requests in the rows' order."""
    known = running_per_step(requests, batch_size, speculative)
    rows = [[d, s, k, float(n.sum()), int(n.max())] for _, d, s, n in known]
    return np.array(rows, float).reshape(-1, 5), [r for r, _, _, _ in known]


def design(rows: np.ndarray, with_k: bool, with_n: bool) -> np.ndarray:
    """The regressors of ``rows`` (any leading axes): a·s, b·K·s, c·N, d·K·N — those identified."""
    s, k, n = rows[..., S], rows[..., K], rows[..., N]
    cols = [s]
    if with_k:
        cols.append(k * s)
    if with_n:
        cols.append(n)
        if with_k:
            cols.append(k * n)
    return np.stack(cols, axis=-1)


def identified(rows: np.ndarray) -> tuple[bool, bool]:
    """(K varies, n varies) over the rows: whether b and c can be fitted."""
    ok = rows[:, S] > 0
    ks = set(rows[ok, K].tolist())
    ratio = rows[ok, N] / rows[ok, S]
    return len(ks) > 1, bool(ok.any() and np.ptp(ratio) > 1e-9)


def fit_coefficients(rows: np.ndarray, with_k: bool, with_n: bool) -> np.ndarray:
    """Least-squares coefficients (a, b, c, d; unidentified ones 0) of ``rows`` (n, 5) or of each
    resample of a block (r, n, 5): shape (4,) or (r, 4). NaN where the fit is singular."""
    x = design(rows, with_k, with_n)
    y = rows[..., D]
    xtx = np.einsum("...ni,...nj->...ij", x, x)
    xty = np.einsum("...ni,...n->...i", x, y)
    with np.errstate(all="ignore"):
        det_ok = np.linalg.cond(xtx) < 1e12
        safe = np.where(det_ok[..., None, None], xtx, np.eye(xtx.shape[-1]))
        beta = np.linalg.solve(safe, xty[..., None])[..., 0]
    beta = np.where(det_ok[..., None], beta, np.nan)
    full = np.zeros((*beta.shape[:-1], 4))
    idx = [0] + ([1] if with_k else []) + ([2] if with_n else []) + ([3] if with_k and with_n else [])
    full[..., idx] = beta
    return full


def predict(coef: np.ndarray, k: float, n: float) -> np.ndarray:
    """t(K, n) of coefficients (…, 4)."""
    return coef[..., 0] + coef[..., 1] * k + coef[..., 2] * n + coef[..., 3] * k * n


def step_model(rows: np.ndarray, allow_n: bool = True) -> StepModel | None:
    """The fitted model of ``rows`` (None without rows): the richest of (K and n, K, n, neither) that
    the rows identify and whose fit is not singular (n varying only with K, for example, does not
    separate the two)."""
    ok = rows[rows[:, S] > 0]
    if ok.shape[0] == 0:
        return None
    with_k, with_n = identified(ok)
    with_n = with_n and allow_n
    for wk, wn in ((with_k, with_n), (with_k, False), (False, with_n), (False, False)):
        coef = fit_coefficients(ok, wk, wn)
        if np.isfinite(coef).all():
            a, b, c, d = (float(x) for x in coef)
            return StepModel(a=a, b=b, c=c, d=d, k_identified=wk, n_identified=wn,
                             ks=sorted({int(k) for k in ok[:, K]}), n_max=int(ok[:, NMAX].max()),
                             requests=int(ok.shape[0]))
    return None
