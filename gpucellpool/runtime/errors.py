"""Errors whose message is the whole story for the person who ran the command.

Why this module exists: a newcomer's mistake (no kubeconfig, no CRD, a port in use) must end in
one line that names the problem and the fix, never a traceback. Code that detects such a
mistake raises ``UserError`` with that line; ``gpucellpool.cli.main`` prints it and exits
non-zero (``--debug`` or ``GPUCELLPOOL_DEBUG=1`` shows the traceback instead).
"""

from __future__ import annotations


class UserError(Exception):
    """A problem the user can fix; ``str(error)`` says what and, where known, how."""
