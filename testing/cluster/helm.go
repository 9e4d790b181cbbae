package main

import (
	"errors"
	"fmt"
	"os"

	helmcmd "helm.sh/helm/v4/pkg/cmd"
	"helm.sh/helm/v4/pkg/kube"
)

// runHelm is helm's own main: the chart in config/helm is rendered, linted and installed with the helm of this
// binary, built here like the rest, so the tests need no helm of the machine's.
func runHelm(args []string) int {
	// The field manager helm's objects carry, as upstream's main sets it (not this binary's name).
	kube.ManagedFieldsManager = "helm"
	// helm reads os.Args itself (plugins): give it the command line it expects.
	os.Args = append([]string{"helm"}, args...)
	cmd, err := helmcmd.NewRootCmd(os.Stdout, args, helmcmd.SetupLogging)
	if err != nil {
		fmt.Fprintf(os.Stderr, "helm: %v\n", err)
		return 1
	}
	if err := cmd.Execute(); err != nil {
		if cerr, ok := errors.AsType[helmcmd.CommandError](err); ok {
			return cerr.ExitCode
		}
		return 1
	}
	return 0
}
