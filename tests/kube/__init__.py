"""Driving the real control plane of testing/cluster from tests and benchmarks: build and start it, talk to it as
an administrator or as kuota's ServiceAccount, and put a fault-injecting proxy in front of it."""
