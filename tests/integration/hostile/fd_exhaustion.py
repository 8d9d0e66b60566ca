"""Opens files until RLIMIT_NOFILE says no."""

handles = []
while True:
    handles.append(open("/dev/null"))  # noqa: SIM115
