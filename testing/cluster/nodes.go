package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// kwokNodeAnnotation marks the nodes kwok plays the kubelet for.
const kwokNodeAnnotation = "kwok.x-k8s.io/node"

// Topology labels: a node sits in a rack, a rack in a block (a switch domain), as the quota file's topologies
// name them; kubernetes.io/hostname is the lowest level.
const (
	blockLabel = "topology.kuota.dev/block"
	rackLabel  = "topology.kuota.dev/rack"
)

type nodeSpec struct {
	Prefix        string
	Start         int
	GPUs          int
	GPUResource   string
	CPU           string
	Memory        string
	Pods          int
	Labels        string
	Taints        string
	NodesPerRack  int
	RacksPerBlock int
}

func nodeSpecFlags(fs *flag.FlagSet) *nodeSpec {
	s := &nodeSpec{}
	fs.StringVar(&s.Prefix, "node-prefix", "gpu-node-", "node names are PREFIX000, PREFIX001, ...")
	fs.IntVar(&s.Start, "node-start", 0, "number of the first node (to add nodes to a pool)")
	fs.IntVar(&s.GPUs, "gpus-per-node", 8, "GPUs per node")
	fs.StringVar(&s.GPUResource, "gpu-resource", "nvidia.com/gpu", "extended resource name of a GPU")
	fs.StringVar(&s.CPU, "cpu-per-node", "96", "allocatable CPU per node")
	fs.StringVar(&s.Memory, "memory-per-node", "2Ti", "allocatable memory per node")
	fs.IntVar(&s.Pods, "pods-per-node", 256, "allocatable pods per node")
	fs.StringVar(&s.Labels, "node-labels", "nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3,nvidia.com/gpu.count=8", "labels on every node, k=v,...")
	fs.StringVar(&s.Taints, "node-taints", "", "taints on every node, key=value:Effect,...")
	fs.IntVar(&s.NodesPerRack, "nodes-per-rack", 4, "nodes under one "+rackLabel+" value")
	fs.IntVar(&s.RacksPerBlock, "racks-per-block", 4, "racks under one "+blockLabel+" value")
	return s
}

func runNodes(args []string) int {
	fs := flag.NewFlagSet("nodes", flag.ContinueOnError)
	kubeconfig := fs.String("kubeconfig", os.Getenv("KUBECONFIG"), "admin kubeconfig of the cluster")
	count := fs.Int("count", 1, "nodes to create")
	spec := nodeSpecFlags(fs)
	wait := fs.Duration("wait", 60*time.Second, "how long to wait for the nodes to be Ready")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), *wait)
	defer cancel()
	if err := createNodes(ctx, *kubeconfig, *spec, *count); err != nil {
		fmt.Fprintf(os.Stderr, "nodes: %v\n", err)
		return 1
	}
	if err := waitNodesReady(ctx, *kubeconfig, spec.Start+*count); err != nil {
		fmt.Fprintf(os.Stderr, "nodes: %v\n", err)
		return 1
	}
	fmt.Printf("%d nodes %s%03d..%s%03d ready\n", *count, spec.Prefix, spec.Start, spec.Prefix, spec.Start+*count-1)
	return 0
}

func clientFor(kubeconfig string) (*kubernetes.Clientset, error) {
	config, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, err
	}
	config.QPS, config.Burst = 200, 400
	return kubernetes.NewForConfig(config)
}

func (s nodeSpec) node(i int) (*corev1.Node, error) {
	name := fmt.Sprintf("%s%03d", s.Prefix, i)
	labels, err := parsePairs(s.Labels, "=")
	if err != nil {
		return nil, fmt.Errorf("--node-labels: %w", err)
	}
	rack := i / max(s.NodesPerRack, 1)
	labels["kubernetes.io/hostname"] = name
	labels["kubernetes.io/os"] = "linux"
	labels["type"] = "kwok"
	labels[rackLabel] = fmt.Sprintf("rack-%03d", rack)
	labels[blockLabel] = fmt.Sprintf("block-%02d", rack/max(s.RacksPerBlock, 1))
	var taints []corev1.Taint
	if s.Taints != "" {
		for _, t := range strings.Split(s.Taints, ",") {
			kv, effect, ok := strings.Cut(t, ":")
			if !ok {
				return nil, fmt.Errorf("--node-taints: %q is not key=value:Effect", t)
			}
			key, value, _ := strings.Cut(kv, "=")
			taints = append(taints, corev1.Taint{Key: key, Value: value, Effect: corev1.TaintEffect(effect)})
		}
	}
	cpu, err := resource.ParseQuantity(s.CPU)
	if err != nil {
		return nil, fmt.Errorf("--cpu-per-node: %w", err)
	}
	memory, err := resource.ParseQuantity(s.Memory)
	if err != nil {
		return nil, fmt.Errorf("--memory-per-node: %w", err)
	}
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    cpu,
		corev1.ResourceMemory: memory,
		corev1.ResourcePods:   *resource.NewQuantity(int64(s.Pods), resource.DecimalSI),
	}
	if s.GPUs > 0 {
		capacity[corev1.ResourceName(s.GPUResource)] = *resource.NewQuantity(int64(s.GPUs), resource.DecimalSI)
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Labels:      labels,
			Annotations: map[string]string{kwokNodeAnnotation: "fake"},
		},
		Spec:   corev1.NodeSpec{Taints: taints},
		Status: corev1.NodeStatus{Capacity: capacity, Allocatable: capacity},
	}, nil
}

func createNodes(ctx context.Context, kubeconfig string, spec nodeSpec, count int) error {
	client, err := clientFor(kubeconfig)
	if err != nil {
		return err
	}
	for i := spec.Start; i < spec.Start+count; i++ {
		node, err := spec.node(i)
		if err != nil {
			return err
		}
		if _, err := client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("node %s: %w", node.Name, err)
		}
	}
	return nil
}

// waitNodesReady waits until at least `want` nodes are Ready and schedulable.
func waitNodesReady(ctx context.Context, kubeconfig string, want int) error {
	client, err := clientFor(kubeconfig)
	if err != nil {
		return err
	}
	for {
		list, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		ready := 0
		if err == nil {
			for _, n := range list.Items {
				if schedulable(n) {
					ready++
				}
			}
			if ready >= want {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d of %d nodes Ready: %w", ready, want, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// schedulable: Ready, and node lifecycle has lifted the not-ready taint kube-apiserver puts on a new node.
func schedulable(n corev1.Node) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == corev1.TaintNodeNotReady {
			return false
		}
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func parsePairs(s, sep string) (map[string]string, error) {
	out := map[string]string{}
	if s == "" {
		return out, nil
	}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(kv, sep)
		if !ok || k == "" {
			return nil, fmt.Errorf("%q is not key%svalue", kv, sep)
		}
		out[k] = v
	}
	return out, nil
}
