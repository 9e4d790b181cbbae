"""kuota: the command line and the composition root."""
