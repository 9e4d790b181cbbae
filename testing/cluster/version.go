package main

import "k8s.io/component-base/version"

// kubernetesVersion is what /version reports; the build sets it from go.mod with -ldflags -X.
func kubernetesVersion() string { return version.Get().GitVersion }
