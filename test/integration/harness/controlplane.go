package harness

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/gpuslice/gpuslice/pkg/generated/clientset/versioned"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

const token = "gpuslice-test-token"

// ControlPlane is a running etcd and kube-apiserver on loopback.
type ControlPlane struct {
	Dir        string
	Kubeconfig string
	Config     *rest.Config
	Client     kubernetes.Interface
	Dynamic    dynamic.Interface
	GPUNodes   versioned.Interface // the typed GPUNode clientset
	// Port is the API server's HTTPS port on 127.0.0.1.
	Port int
	// CAFile holds the certificates that verify the API server's serving
	// certificate (self-signed at its start: the certificate and its CA).
	CAFile    string
	opts      Options
	etcd, api *Process
}

// Options of a control plane. The zero value is the loopback API server most
// tests use: every request allowed, pods without ServiceAccount tokens.
type Options struct {
	// InCluster makes pods run as in a real cluster: the ServiceAccount
	// admission plugin gives them a token volume (the kubelet fetches the
	// tokens; StartControllerManager publishes kube-root-ca.crt and the
	// default ServiceAccounts), requests are authorized by RBAC (the Node
	// authorizer and RBAC; the test's own token stays system:masters), and
	// privileged containers are allowed.
	InCluster bool
	// AuditWrites logs every write request's metadata (user agent, verb,
	// resource) to Dir/audit.log, for benchmarks that count who writes what.
	AuditWrites bool
	// AuditAll logs every request's metadata, reads and watches included,
	// to Dir/audit.log (AuditLog): what each client asked, to check its
	// RBAC against.
	AuditAll bool
}

// AuditLog is the audit log Options.AuditWrites writes to.
func (cp *ControlPlane) AuditLog() string { return filepath.Join(cp.Dir, "audit.log") }

// auditPolicy logs writes at the Metadata level once they complete.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived, ResponseStarted]
rules:
- level: Metadata
  verbs: [create, update, patch, delete, deletecollection]
- level: None
`

// auditAllPolicy logs every request at the Metadata level (a watch when it
// starts).
const auditAllPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
`

// StartControlPlane starts etcd and kube-apiserver with state under dir and
// waits until the API server is ready.
func StartControlPlane(ctx context.Context, bins Binaries, dir string) (*ControlPlane, error) {
	return StartControlPlaneWith(ctx, bins, dir, Options{})
}

// StartControlPlaneWith is StartControlPlane with options.
func StartControlPlaneWith(ctx context.Context, bins Binaries, dir string, o Options) (*ControlPlane, error) {
	cp := &ControlPlane{Dir: dir, opts: o, CAFile: filepath.Join(dir, "certs", "apiserver.crt")}
	ok := false
	defer func() {
		if !ok {
			cp.Stop()
		}
	}()
	etcdPort, err := FreePort()
	if err != nil {
		return nil, err
	}
	peerPort, err := FreePort()
	if err != nil {
		return nil, err
	}
	etcdURL := "http://127.0.0.1:" + itoa(etcdPort)
	cp.etcd, err = Start(dir, "etcd", bins.Path("etcd"), "--data-dir", filepath.Join(dir, "etcd"),
		"--listen-client-urls", etcdURL, "--advertise-client-urls", etcdURL,
		"--listen-peer-urls", "http://127.0.0.1:"+itoa(peerPort), "--initial-advertise-peer-urls", "http://127.0.0.1:"+itoa(peerPort),
		"--initial-cluster", "default=http://127.0.0.1:"+itoa(peerPort),
		"--unsafe-no-fsync", "--quota-backend-bytes", "8589934592", "--log-level", "warn")
	if err != nil {
		return nil, err
	}
	apiPort, err := FreePort()
	if err != nil {
		return nil, err
	}
	cp.Port = apiPort
	args, err := apiserverArgs(dir, etcdURL, apiPort, o)
	if err != nil {
		return nil, err
	}
	if cp.api, err = Start(dir, "kube-apiserver", bins.Path("kube-apiserver"), args...); err != nil {
		return nil, err
	}
	host := "https://127.0.0.1:" + itoa(apiPort)
	cp.Config = &rest.Config{Host: host, BearerToken: token, QPS: 5000, Burst: 10000,
		TLSClientConfig: rest.TLSClientConfig{Insecure: true}}
	if cp.Client, err = kubernetes.NewForConfig(cp.Config); err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	if cp.Dynamic, err = dynamic.NewForConfig(cp.Config); err != nil {
		return nil, fmt.Errorf("dynamic client: %w", err)
	}
	if cp.GPUNodes, err = versioned.NewForConfig(cp.Config); err != nil {
		return nil, fmt.Errorf("GPUNode client: %w", err)
	}
	cp.Kubeconfig = filepath.Join(dir, "kubeconfig")
	if err := writeKubeconfig(cp.Kubeconfig, host); err != nil {
		return nil, err
	}
	if err := cp.waitReady(ctx, host); err != nil {
		return nil, err
	}
	ok = true
	return cp, nil
}

func apiserverArgs(dir, etcdURL string, port int, o Options) ([]string, error) {
	pub, key := filepath.Join(dir, "sa.pub"), filepath.Join(dir, "sa.key")
	if err := writeServiceAccountKeys(pub, key); err != nil {
		return nil, err
	}
	tokens := filepath.Join(dir, "tokens.csv")
	if err := os.WriteFile(tokens, []byte(token+",admin,admin,system:masters\n"), 0o600); err != nil {
		return nil, fmt.Errorf("token file: %w", err)
	}
	authz, disabled := "AlwaysAllow", "ServiceAccount,TaintNodesByCondition,Priority"
	if o.InCluster {
		authz, disabled = "Node,RBAC", "TaintNodesByCondition,Priority"
	}
	args := []string{
		"--etcd-servers", etcdURL, "--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1",
		"--secure-port", itoa(port), "--cert-dir", filepath.Join(dir, "certs"), "--token-auth-file", tokens,
		"--authorization-mode", authz, "--service-account-issuer", "https://kubernetes.default.svc",
		"--service-account-key-file", pub, "--service-account-signing-key-file", key,
		"--service-cluster-ip-range", "10.96.0.0/16", "--endpoint-reconciler-type", "none",
		"--disable-admission-plugins", disabled,
		"--enable-priority-and-fairness=false", "--max-requests-inflight", "3000", "--max-mutating-requests-inflight", "1500",
		"--event-ttl", "30m",
	}
	if o.InCluster {
		args = append(args, "--allow-privileged=true") // node agents and CNI pods are privileged
	}
	if o.AuditWrites || o.AuditAll {
		policy, text := filepath.Join(dir, "audit-policy.yaml"), auditPolicy
		if o.AuditAll {
			text = auditAllPolicy
		}
		if err := os.WriteFile(policy, []byte(text), 0o600); err != nil {
			return nil, fmt.Errorf("audit policy: %w", err)
		}
		args = append(args, "--audit-policy-file", policy, "--audit-log-path", filepath.Join(dir, "audit.log"),
			"--audit-log-mode", "blocking", "--audit-log-format", "json")
	}
	return args, nil
}

// StartControllerManager starts kube-controller-manager (bin) with the
// controllers an in-cluster control plane needs: DaemonSets, Deployments and
// their ReplicaSets, the garbage collector (a deleted DaemonSet's pods),
// namespaces, the default ServiceAccount of each namespace, and the
// kube-root-ca.crt ConfigMap (CAFile) pods verify the API server with.
func (cp *ControlPlane) StartControllerManager(ctx context.Context, bin string) (*Process, error) {
	if !cp.opts.InCluster {
		return nil, fmt.Errorf("kube-controller-manager: the control plane was not started with InCluster")
	}
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	p, err := Start(cp.Dir, "kube-controller-manager", bin, "--kubeconfig", cp.Kubeconfig,
		"--authentication-kubeconfig", cp.Kubeconfig, "--authorization-kubeconfig", cp.Kubeconfig,
		"--bind-address", "127.0.0.1", "--secure-port", itoa(port), "--leader-elect=false",
		"--root-ca-file", cp.CAFile, "--use-service-account-credentials=false",
		"--controllers", "daemonset-controller,deployment-controller,replicaset-controller,garbage-collector-controller,"+
			"namespace-controller,serviceaccount-controller,root-ca-certificate-publisher-controller",
		"--concurrent-gc-syncs", "5", "-v", "1")
	if err != nil {
		return nil, err
	}
	// Ready once the default namespace has its ServiceAccount and CA.
	err = WaitFor(ctx, 100*time.Millisecond, func() (bool, error) {
		if err := exitedErr(p); err != nil {
			return false, err
		}
		_, err1 := cp.Client.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		_, err2 := cp.Client.CoreV1().ConfigMaps("default").Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
		return err1 == nil && err2 == nil, nil
	})
	if err != nil {
		p.Stop()
		return nil, fmt.Errorf("kube-controller-manager not ready: %w\n%s", err, p.Tail())
	}
	return p, nil
}

func writeServiceAccountKeys(pub, key string) error {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return fmt.Errorf("service account key: %w", err)
	}
	pubDER, err := x509.MarshalPKIXPublicKey(&k.PublicKey)
	if err != nil {
		return fmt.Errorf("service account key: %w", err)
	}
	if err := os.WriteFile(key, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k)}), 0o600); err != nil {
		return fmt.Errorf("service account key: %w", err)
	}
	if err := os.WriteFile(pub, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}), 0o600); err != nil {
		return fmt.Errorf("service account key: %w", err)
	}
	return nil
}

func writeKubeconfig(path, host string) error {
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: local
  cluster: {server: %q, insecure-skip-tls-verify: true}
users:
- name: admin
  user: {token: %q}
contexts:
- name: local
  context: {cluster: local, user: admin}
current-context: local
`, host, token)
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	return nil
}

func (cp *ControlPlane) waitReady(ctx context.Context, host string) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	err := WaitFor(ctx, 200*time.Millisecond, func() (bool, error) {
		for _, p := range []*Process{cp.etcd, cp.api} {
			if err := exitedErr(p); err != nil {
				return false, err
			}
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, host+"/readyz", nil)
		if err != nil {
			return false, fmt.Errorf("readyz: %w", err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := hc.Do(req)
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		return fmt.Errorf("kube-apiserver not ready: %w\n%s", err, cp.api.Tail())
	}
	return nil
}

// Processes returns etcd and kube-apiserver, for the CPU they use.
func (cp *ControlPlane) Processes() []*Process { return []*Process{cp.etcd, cp.api} }

// Stop stops the API server, then etcd.
func (cp *ControlPlane) Stop() {
	cp.api.Stop()
	cp.etcd.Stop()
}
