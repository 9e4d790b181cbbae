package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	_ "embed"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// serviceIP is the first address of the service range: kube-apiserver gives it to the `kubernetes` Service.
const serviceIP = "10.96.0.1"

//go:embed kwok-stages.yaml
var kwokStages []byte

// allComponents is the start order: each one needs the ones before it.
var allComponents = []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"}

// controllers are the kube-controller-manager loops that Jobs and a try-out need: Jobs make pods, finished pods
// are collected, namespaces get their default ServiceAccount and are deleted with what they hold, owners take
// their dependents with them, a Deployment (kubectl apply -k config/deploy) gets its pods, and node lifecycle
// lifts the not-ready taint kube-apiserver puts on every new node (and sets it again on a node whose kwok lease
// stops being renewed: a failed node), with taint eviction taking pods off such a node.
var controllers = []string{
	"node-lifecycle-controller",
	"taint-eviction-controller",
	"job-controller",
	"pod-garbage-collector-controller",
	"serviceaccount-controller",
	"namespace-controller",
	"garbage-collector-controller",
	"ttl-after-finished-controller",
	"replicaset-controller",
	"deployment-controller",
	"disruption-controller",
	// The built-in admin/edit/view roles are aggregated from labelled ClusterRoles by this controller.
	"clusterrole-aggregation-controller",
}

// state is what `up` writes to DIR/cluster.json: a later `up` on the same folder (a restarted API server) finds
// the same ports there, and tests read where everything is.
type state struct {
	APIServer  string `json:"apiserver"`
	Etcd       string `json:"etcd"`
	EtcdPeer   string `json:"etcdPeer"`
	Kubeconfig string `json:"kubeconfig"`
	PKI        string `json:"pki"`
	Version    string `json:"version"`
}

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, " ") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

func runUp(args []string) int {
	fs := flag.NewFlagSet("up", flag.ContinueOnError)
	dir := fs.String("dir", ".cluster", "folder for the PKI, kubeconfig, etcd data and logs")
	components := fs.String("components", strings.Join(allComponents, ","), "components to start, comma-separated")
	port := fs.Int("port", 0, "kube-apiserver's port (0: the one in DIR/cluster.json, else a free one)")
	nodes := fs.Int("nodes", 0, "kwok GPU nodes to create once the API server is ready")
	var apiserverArgs, controllerArgs, schedulerArgs, kwokArgs multiFlag
	fs.Var(&apiserverArgs, "apiserver-arg", "an extra kube-apiserver flag, e.g. --max-requests-inflight=5 (repeatable)")
	fs.Var(&controllerArgs, "controller-manager-arg", "an extra kube-controller-manager flag (repeatable)")
	fs.Var(&schedulerArgs, "scheduler-arg", "an extra kube-scheduler flag (repeatable)")
	fs.Var(&kwokArgs, "kwok-arg", "an extra kwok flag (repeatable)")
	spec := nodeSpecFlags(fs)
	timeout := fs.Duration("timeout", 120*time.Second, "how long to wait for the cluster to be ready")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	started := time.Now()
	wanted := map[string]bool{}
	for _, c := range strings.Split(*components, ",") {
		c = strings.TrimSpace(c)
		if c == "" {
			continue
		}
		if !contains(allComponents, c) {
			fmt.Fprintf(os.Stderr, "up: unknown component %q (known: %s)\n", c, strings.Join(allComponents, ","))
			return 2
		}
		wanted[c] = true
	}
	root, err := filepath.Abs(*dir)
	if err != nil {
		fmt.Fprintf(os.Stderr, "up: %v\n", err)
		return 1
	}
	st, err := prepare(root, *port)
	if err != nil {
		fmt.Fprintf(os.Stderr, "up: %v\n", err)
		return 1
	}

	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	sup := &supervisor{logs: filepath.Join(root, "logs"), exited: make(chan string, len(allComponents))}
	defer sup.stop()
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)

	p := pki{dir: st.PKI}
	extra := map[string][]string{
		"kube-apiserver":          apiserverArgs,
		"kube-controller-manager": controllerArgs,
		"kube-scheduler":          schedulerArgs,
		"kwok":                    kwokArgs,
	}
	for _, name := range allComponents {
		if !wanted[name] {
			continue
		}
		argv, err := componentArgs(name, root, st, p)
		if err != nil {
			fmt.Fprintf(os.Stderr, "up: %s: %v\n", name, err)
			return 1
		}
		if err := sup.start(name, append(argv, extra[name]...)); err != nil {
			fmt.Fprintf(os.Stderr, "up: starting %s: %v\n", name, err)
			return 1
		}
		if err := waitReady(ctx, name, st, p, sup); err != nil {
			fmt.Fprintf(os.Stderr, "up: %s not ready: %v (log: %s)\n", name, err, sup.logPath(name))
			return 1
		}
	}
	if *nodes > 0 {
		if !wanted["kwok"] {
			fmt.Fprintln(os.Stderr, "up: --nodes needs the kwok component")
			return 2
		}
		if err := createNodes(ctx, st.Kubeconfig, *spec, *nodes); err != nil {
			fmt.Fprintf(os.Stderr, "up: creating nodes: %v\n", err)
			return 1
		}
		if err := waitNodesReady(ctx, st.Kubeconfig, *nodes); err != nil {
			fmt.Fprintf(os.Stderr, "up: nodes not ready: %v (log: %s)\n", err, sup.logPath("kwok"))
			return 1
		}
	}
	fmt.Printf("kuota-cluster %s: ready in %.1fs (%s)\n", st.Version, time.Since(started).Seconds(), strings.Join(sup.names, ", "))
	if wanted["kube-apiserver"] {
		fmt.Printf("export KUBECONFIG=%s\n", st.Kubeconfig)
	}
	if err := os.WriteFile(filepath.Join(root, "ready"), []byte(time.Now().UTC().Format(time.RFC3339)+"\n"), 0o600); err != nil {
		fmt.Fprintf(os.Stderr, "up: %v\n", err)
	}
	select {
	case sig := <-signals:
		fmt.Fprintf(os.Stderr, "up: %s, stopping\n", sig)
		return 0
	case name := <-sup.exited:
		fmt.Fprintf(os.Stderr, "up: %s exited; stopping the rest (log: %s)\n", name, sup.logPath(name))
		return 1
	}
}

// prepare lays out DIR: the PKI, ports (kept from an earlier run), the kubeconfig and kwok's stages.
func prepare(root string, port int) (state, error) {
	var st state
	statePath := filepath.Join(root, "cluster.json")
	if data, err := os.ReadFile(statePath); err == nil {
		if err := json.Unmarshal(data, &st); err != nil {
			return st, fmt.Errorf("%s: %w", statePath, err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return st, err
	}
	if port != 0 {
		st.APIServer = fmt.Sprintf("https://127.0.0.1:%d", port)
	}
	for _, url := range []*string{&st.APIServer, &st.Etcd, &st.EtcdPeer} {
		if *url != "" {
			continue
		}
		free, err := freePort()
		if err != nil {
			return st, err
		}
		scheme := "http"
		if url == &st.APIServer {
			scheme = "https"
		}
		*url = fmt.Sprintf("%s://127.0.0.1:%d", scheme, free)
	}
	st.PKI = filepath.Join(root, "pki")
	st.Kubeconfig = filepath.Join(root, "kubeconfig")
	st.Version = kubernetesVersion()
	p := pki{dir: st.PKI}
	if err := p.ensure(); err != nil {
		return st, fmt.Errorf("PKI: %w", err)
	}
	if err := p.writeKubeconfig(st.Kubeconfig, st.APIServer); err != nil {
		return st, fmt.Errorf("kubeconfig: %w", err)
	}
	if err := os.WriteFile(filepath.Join(root, "kwok.yaml"), kwokStages, 0o600); err != nil {
		return st, err
	}
	_ = os.Remove(filepath.Join(root, "ready"))
	data, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return st, err
	}
	return st, os.WriteFile(statePath, append(data, '\n'), 0o600)
}

func componentArgs(name, root string, st state, p pki) ([]string, error) {
	switch name {
	case "etcd":
		return []string{"--data-dir", filepath.Join(root, "etcd"), "--listen-client-url", st.Etcd, "--listen-peer-url", st.EtcdPeer}, nil
	case "kube-apiserver":
		host, port, err := net.SplitHostPort(strings.TrimPrefix(st.APIServer, "https://"))
		if err != nil {
			return nil, err
		}
		return []string{
			"--etcd-servers=" + st.Etcd,
			"--bind-address=" + host,
			"--advertise-address=" + host,
			"--secure-port=" + port,
			"--tls-cert-file=" + p.path("apiserver.crt"),
			"--tls-private-key-file=" + p.path("apiserver.key"),
			"--client-ca-file=" + p.path("ca.crt"),
			"--cert-dir=" + filepath.Join(root, "apiserver-certs"),
			"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
			"--service-account-key-file=" + p.path("sa.pub"),
			"--service-account-signing-key-file=" + p.path("sa.key"),
			"--service-cluster-ip-range=10.96.0.0/16",
			"--authorization-mode=RBAC",
			"--enable-admission-plugins=NamespaceLifecycle,ServiceAccount,DefaultTolerationSeconds,MutatingAdmissionWebhook,ValidatingAdmissionWebhook,ValidatingAdmissionPolicy,ResourceQuota,Priority",
			"--allow-privileged=true",
			// The `kubernetes` Service's endpoints would have to be a routable address; nothing here needs them.
			"--endpoint-reconciler-type=none",
			"--profiling=false",
		}, nil
	case "kube-controller-manager":
		return []string{
			"--kubeconfig=" + st.Kubeconfig,
			"--controllers=" + strings.Join(controllers, ","),
			"--leader-elect=false",
			"--secure-port=0",
			"--root-ca-file=" + p.path("ca.crt"),
			"--kube-api-qps=500",
			"--kube-api-burst=1000",
			"--concurrent-job-syncs=20",
			"--profiling=false",
		}, nil
	case "kube-scheduler":
		return []string{
			"--kubeconfig=" + st.Kubeconfig,
			"--leader-elect=false",
			"--secure-port=0",
			"--kube-api-qps=500",
			"--kube-api-burst=1000",
			"--profiling=false",
		}, nil
	case "kwok":
		return []string{
			"--kubeconfig=" + st.Kubeconfig,
			"--config=" + filepath.Join(root, "kwok.yaml"),
			"--manage-all-nodes=false",
			"--manage-nodes-with-annotation-selector=" + kwokNodeAnnotation + "=fake",
			"--cidr=10.244.0.0/16",
			// kwok renews a Lease per node, which node lifecycle reads as the kubelet's heartbeat.
			"--node-lease-duration-seconds=40",
			"--node-ip=10.243.0.1",
		}, nil
	}
	return nil, fmt.Errorf("unknown component %q", name)
}

// supervisor runs components as child processes of this binary, each logging to its own file, and takes them
// down with it: Pdeathsig kills a child whose parent died without cleaning up.
type supervisor struct {
	logs   string
	names  []string
	procs  []*exec.Cmd
	exited chan string
}

func (s *supervisor) logPath(name string) string { return filepath.Join(s.logs, name+".log") }

func (s *supervisor) start(name string, args []string) error {
	if err := os.MkdirAll(s.logs, 0o755); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	log, err := os.OpenFile(s.logPath(name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(self, append([]string{name}, args...)...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	s.names = append(s.names, fmt.Sprintf("%s pid %d", name, cmd.Process.Pid))
	s.procs = append(s.procs, cmd)
	go func() {
		_ = cmd.Wait()
		_ = log.Close()
		s.exited <- name
	}()
	return nil
}

// stop asks every child to stop, newest first (kwok before the API server, the API server before etcd), and
// kills what is still running after ten seconds.
func (s *supervisor) stop() {
	for i := len(s.procs) - 1; i >= 0; i-- {
		cmd := s.procs[i]
		_ = cmd.Process.Signal(syscall.SIGTERM)
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) && cmd.ProcessState == nil && syscall.Kill(cmd.Process.Pid, 0) == nil {
			time.Sleep(50 * time.Millisecond)
		}
		_ = cmd.Process.Kill()
	}
}

func waitReady(ctx context.Context, name string, st state, p pki, sup *supervisor) error {
	var probe func() error
	switch name {
	case "etcd":
		probe = func() error { return httpOK(http.DefaultClient, st.Etcd+"/health") }
	case "kube-apiserver":
		client, err := adminHTTPClient(p)
		if err != nil {
			return err
		}
		probe = func() error { return httpOK(client, st.APIServer+"/readyz") }
	case "kube-controller-manager":
		// The serviceaccount controller has run once the default namespace has its ServiceAccount.
		client, err := adminHTTPClient(p)
		if err != nil {
			return err
		}
		probe = func() error { return httpOK(client, st.APIServer+"/api/v1/namespaces/default/serviceaccounts/default") }
	default:
		// The scheduler and kwok serve nothing here; they are ready when they are still running a moment later.
		probe = func() error { return nil }
		select {
		case <-time.After(300 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	for {
		err := probe()
		if err == nil {
			return nil
		}
		select {
		case exited := <-sup.exited:
			return fmt.Errorf("%s exited", exited)
		case <-ctx.Done():
			return fmt.Errorf("%w (last probe: %v)", ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func adminHTTPClient(p pki) (*http.Client, error) {
	cert, err := tls.LoadX509KeyPair(p.path("admin.crt"), p.path("admin.key"))
	if err != nil {
		return nil, err
	}
	caPEM, err := os.ReadFile(p.path("ca.crt"))
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	return &http.Client{
		Timeout:   5 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}}},
	}, nil
}

func httpOK(client *http.Client, url string) error {
	resp, err := client.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	return nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
