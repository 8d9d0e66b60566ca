"""stop_on_signals: the first SIGINT/SIGTERM raises StopRequested; later ones do not; handlers come back."""

from __future__ import annotations

import os
import signal
import time

import pytest

from specbench.execution.interrupt import StopRequested, stop_on_signals


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_first_signal_raises_stop_requested(sig):
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    with pytest.raises(StopRequested) as ei:
        with stop_on_signals() as state:
            os.kill(os.getpid(), sig)
            for _ in range(100):  # the handler runs at the next bytecode boundary
                time.sleep(0.01)
    assert ei.value.signame == sig.name and state.signame == sig.name
    assert ei.value.signum == sig and ei.value.exit_code == 128 + sig
    assert not isinstance(ei.value, Exception)  # no `except Exception` on the way mistakes it for a failure
    assert {s: signal.getsignal(s) for s in before} == before


def test_second_signal_does_not_abort_the_clean_up(capfd):
    cleaned = []
    with pytest.raises(StopRequested) as ei:
        with stop_on_signals() as state:
            try:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(1)
            finally:
                os.kill(os.getpid(), signal.SIGINT)  # impatient: a second signal during clean-up
                time.sleep(0.05)
                cleaned.append(True)
    assert cleaned == [True] and ei.value.signame == "SIGTERM" and state.repeats == ["SIGINT"]
    assert "still stopping" in capfd.readouterr().err


def test_an_inherited_sig_ign_is_overridden_and_restored():
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # a background shell job's SIGINT
    try:
        with pytest.raises(StopRequested):
            with stop_on_signals():
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(1)
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)


def test_no_signal_no_change():
    before = signal.getsignal(signal.SIGTERM)
    with stop_on_signals() as state:
        pass
    assert not state.stopping and signal.getsignal(signal.SIGTERM) is before
