"""Every ``SPECBENCH_*`` environment variable, read in one place.

docs/environment.md's table lists the same fields. Values
are read when :func:`settings` is called (not at import), so a test or a
parent process can set them before a run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    """specbench's environment, ``SPECBENCH_<FIELD>`` for each field."""

    model_config = SettingsConfigDict(env_prefix="SPECBENCH_", extra="ignore")

    cache: Path = Field(
        default_factory=lambda: Path.home() / ".cache" / "specbench",
        description="where the local CPU zoo (tiny target and drafters) is built and kept",
    )
    platform: Literal["cpu", "cuda"] | None = Field(
        None, description="force the platform instead of detecting it (cpu | cuda)"
    )
    engine_start_timeout: float = Field(900.0, gt=0, description="seconds an engine may take to start")
    cell_timeout: float = Field(3600.0, gt=0, description="seconds one offline cell may take")
    request_timeout: float = Field(600.0, gt=0, description="seconds one server request may take")
    sandbox_isolation: Literal["auto", "namespaces", "userns", "none"] = Field(
        "auto", description="how HumanEval code is isolated (auto: the strongest this machine allows)"
    )
    spare_engine: bool = Field(
        True, description="on CPU, fork a run's later vLLM offline engines from a process that imported vLLM once "
        "(saves ~6 s an engine start)"
    )
    command: str | None = Field(None, description="the command line recorded in the manifest (default: argv)")


def settings() -> Settings:
    """The current settings (environment read now)."""
    return Settings()
