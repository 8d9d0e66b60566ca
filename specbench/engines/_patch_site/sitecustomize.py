"""Put on PYTHONPATH of engine processes by specbench when a suite asks for engine patches."""

try:
    from specbench.engines.vllm_patches import install_from_env

    install_from_env()
except Exception as exc:  # noqa: BLE001 - never break interpreter start-up
    import sys

    print(f"[specbench] engine patches not installed: {exc}", file=sys.stderr)
