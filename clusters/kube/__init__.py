"""The Kubernetes cluster adapter: API client, Job reflector, patches, Events, Lease-based leader election."""
