"""The provisioner: the pure core (``provisioner.fsm``) and the shell that applies it.

Why this package exists: it owns the lifecycle of cells between KubeSwift / Cluster API and
HAMi. The shell modules here are thin: ``kube`` (the only Kubernetes client, behind the
``KubeApi`` protocol), ``workload`` (reaching a pool's workload cluster), ``backends`` (the
SwiftGuest and Cluster API outer objects), ``cells`` / ``drainer`` / ``planning`` / ``status``
(one pass's steps) and ``reconciler`` (``Reconciler.reconcile_once``, the entry point).
"""
