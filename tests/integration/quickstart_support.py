"""docs/quickstart.md as a script: its marked code blocks, parsed and run one by one.

Why this module exists: a quickstart that is only read rots (it stored the join template under
the wrong key for months). Each block the doc marks with ``<!-- step: ID [attrs] -->`` right
above its fence is a step, run in order:

- ``file=NAME``: the block's text is written to ``NAME`` in the working directory;
- ``until="REGEX"``: a shell block whose output is read until a line matches (e.g.
  ``kubectl get -w``), then stopped; ``background`` keeps it running (a server) instead;
- otherwise a shell block run to completion with ``bash -euo pipefail``.

Shell steps share one environment (exports persist from block to block, as in one terminal).
A step that fails raises ``StepFailed`` naming the block, its text and its output.
"""

from __future__ import annotations

import os
import queue
import re
import shlex
import signal
import subprocess
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

STEP_RE = re.compile(
    r"^<!-- step: (?P<id>[\w-]+)(?P<attrs>[^>]*?)\s*-->\n```(?P<lang>\w*)\n(?P<body>.*?)^```",
    re.M | re.S,
)
ATTR_RE = re.compile(r'(\w+)=(?:"([^"]*)"|(\S+))')
STEP_TIMEOUT_S = 120.0


class StepFailed(AssertionError):
    """A quickstart block failed; the message names it."""


@dataclass(frozen=True)
class Step:
    id: str
    lang: str
    body: str
    section: str
    file: str | None = None
    until: str | None = None
    background: bool = False


def steps(markdown: str) -> list[Step]:
    """Every marked block, in order, with the ``## N.`` section it sits in."""
    found = []
    for match in STEP_RE.finditer(markdown):
        heads = re.findall(r"^## (\d+)\.", markdown[: match.start()], re.M)
        attrs = {key: quoted or bare for key, quoted, bare in ATTR_RE.findall(match["attrs"])}
        found.append(
            Step(
                id=match["id"],
                lang=match["lang"],
                body=match["body"],
                section=heads[-1] if heads else "",
                file=attrs.get("file"),
                until=attrs.get("until"),
                background="background" in match["attrs"].split(),
            )
        )
    return found


@dataclass
class Runner:
    """Runs steps in ``cwd`` with ``env``; ``subs`` rewrites literal text of a block first
    (e.g. a fixed port or directory to a free one), and says so in a failure."""

    cwd: Path
    env: Mapping[str, str]
    subs: Mapping[str, str] = field(default_factory=dict)
    background: list[subprocess.Popen[str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.env_file = self.cwd / ".quickstart-env.sh"
        exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in self.env.items())
        self.env_file.write_text(exports)

    def script(self, step: Step) -> str:
        text = step.body
        for old, new in self.subs.items():
            text = text.replace(old, new)
        return text

    def run(self, step: Step) -> str:
        """Run one step; returns its output (the matching line for ``until``)."""
        if step.file:
            (self.cwd / step.file).write_text(step.body)
            return ""
        if step.until:
            return self._until(step)
        wrapped = (
            f"set -euo pipefail\nsource {self.env_file}\n{self.script(step)}\n"
            f"export -p > {self.env_file}\n"
        )
        try:
            proc = subprocess.run(["bash", "-c", wrapped], cwd=self.cwd, capture_output=True,
                                  text=True, timeout=STEP_TIMEOUT_S, env=self._base_env(),
                                  check=False)  # fmt: skip
        except subprocess.TimeoutExpired as exc:
            raise self._failed(step, f"timed out after {STEP_TIMEOUT_S:.0f}s", "") from exc
        if proc.returncode != 0:
            raise self._failed(step, f"exit {proc.returncode}", proc.stdout + proc.stderr)
        return proc.stdout

    def _base_env(self) -> dict[str, str]:
        return {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp")}

    def _until(self, step: Step) -> str:
        assert step.until is not None
        wrapped = f"set -euo pipefail\nsource {self.env_file}\nexec 2>&1\n{self.script(step)}\n"
        proc = subprocess.Popen(["bash", "-c", wrapped], cwd=self.cwd, text=True,
                                stdout=subprocess.PIPE, env=self._base_env(),
                                start_new_session=True)  # fmt: skip
        lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=_pump, args=(proc, lines), daemon=True).start()
        seen: list[str] = []
        deadline = time.monotonic() + STEP_TIMEOUT_S
        pattern = re.compile(step.until)
        try:
            while (left := deadline - time.monotonic()) > 0:
                try:
                    line = lines.get(timeout=left)
                except queue.Empty:
                    break
                if line is None:
                    raise self._failed(step, f"ended (exit {proc.wait()}) before a line "
                                       f"matched {step.until!r}", "".join(seen))  # fmt: skip
                seen.append(line)
                if pattern.search(line):
                    return line
            raise self._failed(step, f"no line matched {step.until!r} in "
                               f"{STEP_TIMEOUT_S:.0f}s", "".join(seen))  # fmt: skip
        finally:
            if step.background:
                self.background.append(proc)
            else:
                stop(proc)

    def _failed(self, step: Step, why: str, output: str) -> StepFailed:
        rewritten = f" (after rewriting {dict(self.subs)})" if self.subs else ""
        tail = "\n".join(output.splitlines()[-25:])
        return StepFailed(
            f"docs/quickstart.md step {step.id!r} (section {step.section}) {why}{rewritten}:\n"
            f"{self.script(step)}\n--- output ---\n{tail}"
        )

    def stop_all(self) -> None:
        """Stop the background steps, newest first (the operator before its cluster)."""
        while self.background:
            stop(self.background.pop())


def _pump(proc: subprocess.Popen[str], lines: queue.Queue[str | None]) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.put(line)
    lines.put(None)


def stop(proc: subprocess.Popen[str]) -> None:
    """SIGTERM the step's process group (Ctrl-C in its terminal), SIGKILL after 30 s."""
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
