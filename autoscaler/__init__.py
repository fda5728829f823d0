"""Autoscaling: pure policy (``autoscaler.policy``) and, later, the signal adapters and loop."""
