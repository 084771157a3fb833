# SPDX-License-Identifier: MIT
"""ddprun: a native launcher for distributed PyTorch jobs with torchrun's flags.

The wheel installs the ``ddprun`` and ``ddprun-store`` executables into the environment's scripts
directory (``bin/`` of a virtual environment); this package only finds them, so that
``python -m ddprun ...`` behaves exactly like ``ddprun ...``.
"""

import os
import sys
import sysconfig

__all__ = ["executable", "main"]


def _scripts_dirs():
    """The directories a wheel's scripts may have been installed to, most specific first."""
    # The scheme pip installs to (bin/ of a venv, /usr/local/bin for a system Python), then the
    # interpreter's own directory, then `pip install --user`'s.
    dirs = [sysconfig.get_path("scripts"), os.path.dirname(os.path.abspath(sys.executable))]
    user_scheme = sysconfig.get_preferred_scheme("user") if hasattr(sysconfig, "get_preferred_scheme") \
        else "posix_user"
    try:
        dirs.append(sysconfig.get_path("scripts", scheme=user_scheme))
    except KeyError:
        pass
    return list(dict.fromkeys(dirs))


def executable(name="ddprun"):
    """The absolute path of the installed ``ddprun`` (or ``ddprun-store``) executable."""
    for directory in _scripts_dirs():
        candidate = os.path.join(directory, name)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    raise FileNotFoundError(
        f"{name}: executable not found in {', '.join(_scripts_dirs())}; reinstall the ddprun wheel")


def main(name="ddprun"):
    """Replace this Python process with the executable: same arguments, signals and exit code."""
    try:
        path = executable(name)
    except FileNotFoundError as error:
        sys.stderr.write(f"ddprun: {error}\n")
        return 127
    # As `python -m torch.distributed.run`: Python workers run with this interpreter unless
    # --python or PYTHON_EXEC say otherwise (--python wins over PYTHON_EXEC in ddprun).
    if name == "ddprun" and sys.executable:
        os.environ.setdefault("PYTHON_EXEC", sys.executable)
    os.execv(path, [path, *sys.argv[1:]])
    return 127  # not reached: execv either replaces the process or raises
