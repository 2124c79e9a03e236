"""Where Hermes keeps its files for this process: read without the settings' models, so the
plugin's import can look at config.yaml before it imports the engine."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["hermes_home"]


def hermes_home() -> Path:
    """The home Hermes itself resolves: a multiplexed gateway scopes each profile's turn with a
    context-local override of `get_hermes_home()` and leaves HERMES_HOME as it is, so the
    environment alone would name the default profile's home (and its store) for every
    profile. Outside Hermes, HERMES_HOME, else ~/.hermes."""
    try:
        from hermes_constants import get_hermes_home
    except ImportError:  # the CLI or the tests without Hermes installed
        pass
    else:
        try:
            return Path(get_hermes_home())
        except Exception:  # a host that cannot say: the environment decides, as below
            pass
    env = os.environ.get("HERMES_HOME")
    return Path(env) if env else Path.home() / ".hermes"
