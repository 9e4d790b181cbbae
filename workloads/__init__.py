"""The job framework: every kind of training job reduced to the workload the engine admits (pure, no I/O)."""
