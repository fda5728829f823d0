"""The admission webhook: pure rules (``webhook.rules``) behind a thin TLS server.

Why this package exists: a GPUCellPool turns into privileged KubeSwift launcher pods, so the
right to write one is close to node root in the infrastructure cluster. The validating webhook
is the security control that keeps a pool's guestTemplate inside the safe subset and keeps the
pool's own fields coherent. The rules are pure functions over the raw object (so they can be
tested exhaustively and reused at render time); the server only decodes AdmissionReviews,
calls them and encodes the verdict.
"""
