"""One module per kind of job kuota queues; kinds never import each other."""
