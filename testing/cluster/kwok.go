package main

import (
	"os"

	"github.com/spf13/pflag"
	"sigs.k8s.io/kwok/pkg/config"
	kwokcmd "sigs.k8s.io/kwok/pkg/kwok/cmd"
	"sigs.k8s.io/kwok/pkg/log"
	"sigs.k8s.io/kwok/pkg/utils/signals"
)

// runKwok starts kwok's controller the way its own main does: the global flags (--config, logging) are read
// first into the context, then the command runs with the rest.
func runKwok(args []string) int {
	global := pflag.NewFlagSet("global", pflag.ContinueOnError)
	global.ParseErrorsAllowlist.UnknownFlags = true
	global.Usage = func() {}
	// kwok's flag helpers read os.Args; give them this subcommand's arguments only.
	os.Args = append([]string{"kwok"}, args...)

	ctx := signals.SetupSignalContext()
	ctx, logger := log.InitFlags(ctx, global)
	ctx, err := config.InitFlags(ctx, global)
	if err != nil {
		logger.Error("kwok: reading --config", "err", err)
		return 1
	}
	cmd := kwokcmd.NewCommand(ctx)
	// cobra merges pflag.CommandLine into every root command, and Kubernetes' verflag has put a --version of
	// its own type there; with cmd.Version set, cobra would read that flag as a bool and fail.
	cmd.Version = ""
	cmd.PersistentFlags().AddFlagSet(global)
	cmd.SetArgs(args)
	if err := cmd.ExecuteContext(ctx); err != nil {
		logger.Error("kwok: exit", "err", err)
		return 1
	}
	return 0
}
