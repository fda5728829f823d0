"""Offline simulator, test harness (real apiservers) and the twin (simulated hardware parts)."""
