"""Foreign formats read into a kuota quota file (Kueue manifests)."""
