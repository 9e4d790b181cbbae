"""Implementations of the Cluster port (queues/cluster.py): kube/ for Kubernetes, sim/ for the simulated cluster."""
