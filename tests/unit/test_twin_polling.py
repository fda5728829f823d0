"""A simulated controller's poll loop outlives a pass that raised, and says so."""

from __future__ import annotations

import asyncio
import contextlib
import logging

import pytest

from simulations.twin.common import PollingController


class Flaky(PollingController):
    """Its first pass fails on a malformed object; the next ones count."""

    poll_s = 0.0

    def __init__(self) -> None:
        self.passes = 0
        self.second = asyncio.Event()

    async def step(self) -> None:
        self.passes += 1
        if self.passes == 1:
            raise KeyError("metadata")
        self.second.set()


async def test_a_pass_that_raised_is_logged_and_the_loop_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    controller = Flaky()
    task = asyncio.create_task(controller.run())
    try:
        with caplog.at_level(logging.ERROR, logger="simulations.twin"):
            await asyncio.wait_for(controller.second.wait(), 10.0)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert controller.passes >= 2
    assert "Flaky pass failed; retrying at the next poll" in caplog.text
    assert "KeyError: 'metadata'" in caplog.text
