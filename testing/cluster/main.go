// Command kuota-cluster starts a real Kubernetes control plane on 127.0.0.1 for kuota's end-to-end tests and for
// people trying kuota without kind or Docker: etcd embedded in-process, kube-apiserver, kube-controller-manager
// and kube-scheduler through their own commands, and kwok simulating GPU nodes whose pods run and finish.
//
// It is one binary with one subcommand per component (as hyperkube was) plus `up`, which writes the PKI and
// kubeconfig, starts every component as a child process of this binary and waits until the cluster is ready.
// Separate processes keep each component's global registries (metrics, flags) apart and let a test restart the
// API server on the same etcd data.
package main

import (
	"fmt"
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // the components' --logging-format=json
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics, as the upstream mains load them
	kubectl "k8s.io/kubectl/pkg/cmd"
	kubectlutil "k8s.io/kubectl/pkg/cmd/util"
	kubeapiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	kubecontrollermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	kubescheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
)

const usage = `usage: kuota-cluster COMMAND [flags]

commands:
  up                        PKI, kubeconfig, every component as a child process; waits until ready
  nodes                     creates kwok GPU nodes in a running cluster
  etcd                      embedded etcd (one member, 127.0.0.1)
  kube-apiserver            kube-apiserver's own command
  kube-controller-manager   kube-controller-manager's own command
  kube-scheduler            kube-scheduler's own command
  kwok                      kwok's own command
  kubectl                   kubectl, so the tests need no kubectl of the machine's
  helm                      helm (v4), for config/helm's chart, likewise
  version                   the Kubernetes version this binary was built from
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	name, args := os.Args[1], os.Args[2:]
	switch name {
	case "up":
		os.Exit(runUp(args))
	case "nodes":
		os.Exit(runNodes(args))
	case "etcd":
		os.Exit(runEtcd(args))
	case "kube-apiserver":
		cmd := kubeapiserver.NewAPIServerCommand()
		cmd.SetArgs(args)
		os.Exit(cli.Run(cmd))
	case "kube-controller-manager":
		cmd := kubecontrollermanager.NewControllerManagerCommand()
		cmd.SetArgs(args)
		os.Exit(cli.Run(cmd))
	case "kube-scheduler":
		cmd := kubescheduler.NewSchedulerCommand()
		cmd.SetArgs(args)
		os.Exit(cli.Run(cmd))
	case "kwok":
		os.Exit(runKwok(args))
	case "kubectl":
		// kubectl reads os.Args itself (plugins, .kuberc): give it the command line it expects.
		os.Args = append([]string{"kubectl"}, args...)
		if err := cli.RunNoErrOutput(kubectl.NewDefaultKubectlCommand()); err != nil {
			kubectlutil.CheckErr(err)
		}
	case "helm":
		os.Exit(runHelm(args))
	case "version":
		fmt.Println(kubernetesVersion())
	case "-h", "--help", "help":
		fmt.Print(usage)
	default:
		fmt.Fprintf(os.Stderr, "kuota-cluster: unknown command %q\n\n%s", name, usage)
		os.Exit(2)
	}
}
