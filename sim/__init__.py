"""Offline tooling on top of the simulated cluster: trace readers, replay, the HTML report, scenario files."""
