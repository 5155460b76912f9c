package harness

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// FindKueue returns the directory hack/kueue/build.sh caches Kueue in
// (kueue-manager and crds/), from $GPUSLICE_KUEUE, else from the build cache
// and hack/kueue/version, or an error saying how to build it.
func FindKueue() (string, error) {
	dir := os.Getenv("GPUSLICE_KUEUE")
	if dir == "" {
		root, err := RepoRoot()
		if err != nil {
			return "", err
		}
		v, err := os.ReadFile(filepath.Join(root, "hack", "kueue", "version"))
		if err != nil {
			return "", fmt.Errorf("kueue version: %w", err)
		}
		cache := os.Getenv("GPUSLICE_CACHE")
		if cache == "" {
			home, err := os.UserHomeDir()
			if err != nil {
				return "", fmt.Errorf("no home directory: %w", err)
			}
			cache = filepath.Join(home, ".cache", "gpuslice")
		}
		dir = filepath.Join(cache, "kueue", strings.TrimSpace(string(v)))
	}
	if _, err := os.Stat(filepath.Join(dir, "kueue-manager")); err != nil {
		return "", fmt.Errorf("kueue not built (run hack/kueue/build.sh or make kueue-bin): %w", err)
	}
	return dir, nil
}

// InstallKueueCRDs creates every CRD of Kueue's module source (kueueDir/crds,
// copied there by hack/kueue/build.sh) and waits until each is established.
func (cp *ControlPlane) InstallKueueCRDs(ctx context.Context, kueueDir string) error {
	files, err := filepath.Glob(filepath.Join(kueueDir, "crds", "*.yaml"))
	if err != nil {
		return fmt.Errorf("kueue CRDs in %s: %w", kueueDir, err)
	}
	if len(files) == 0 {
		return fmt.Errorf("kueue CRDs in %s: none found (hack/kueue/build.sh copies them)", kueueDir)
	}
	c, err := apiextclient.NewForConfig(cp.Config)
	if err != nil {
		return fmt.Errorf("apiextensions client: %w", err)
	}
	var names []string
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			return fmt.Errorf("read CRD: %w", err)
		}
		var crd apiextv1.CustomResourceDefinition
		if err := yaml.Unmarshal(raw, &crd); err != nil {
			return fmt.Errorf("decode CRD %s: %w", f, err)
		}
		if _, err := c.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, &crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create CRD %s: %w", crd.Name, err)
		}
		names = append(names, crd.Name)
	}
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	return WaitFor(ctx, 100*time.Millisecond, func() (bool, error) {
		for _, name := range names {
			got, err := c.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, name, metav1.GetOptions{})
			if err != nil || !established(got) {
				return false, nil
			}
		}
		return true, nil
	})
}

func established(crd *apiextv1.CustomResourceDefinition) bool {
	for _, cond := range crd.Status.Conditions {
		if cond.Type == apiextv1.Established && cond.Status == apiextv1.ConditionTrue {
			return true
		}
	}
	return false
}

// StartKueue starts Kueue's controller manager (kueueDir/kueue-manager)
// against the control plane, managing batch/v1 Jobs, with config (YAML
// fields of its Configuration, v1beta2, added to the harness's own) and
// featureGates (its --feature-gates). Its webhook server serves a
// self-signed certificate on loopback and is not registered with the API
// server: Jobs are created suspended, as Kueue documents for a cluster
// without its Job webhook. Kueue reads its metrics certificate from a fixed
// path (/etc/kueue/metrics/certs) when it does not manage certificates
// itself, so it runs in a mount namespace of its own with an overlay on /etc
// holding that certificate (root only; the machine's /etc is not changed).
func (cp *ControlPlane) StartKueue(ctx context.Context, kueueDir, config, featureGates string) (*Process, error) {
	dir := filepath.Join(cp.Dir, "kueue")
	upper, work := filepath.Join(dir, "etc-upper"), filepath.Join(dir, "etc-work")
	cfgPath, health, err := writeKueueConfig(dir, filepath.Join(upper, "kueue", "metrics", "certs"), work, config)
	if err != nil {
		return nil, err
	}
	if _, err := cp.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kueue-system"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("kueue-system namespace: %w", err)
	}
	if err := os.Setenv("KUBECONFIG", cp.Kubeconfig); err != nil {
		return nil, err
	}
	args := []string{"-m", "--propagation", "private", "sh", "-c",
		`mount -t overlay overlay -o "lowerdir=/etc,upperdir=$1,workdir=$2" /etc && shift 2 && exec "$@"`, "sh", upper, work,
		filepath.Join(kueueDir, "kueue-manager"), "--config", cfgPath, "--zap-log-level", "2"}
	if featureGates != "" {
		args = append(args, "--feature-gates", featureGates)
	}
	p, err := Start(cp.Dir, "kueue", "unshare", args...)
	if err != nil {
		return nil, err
	}
	url := fmt.Sprintf("http://127.0.0.1:%d/readyz", health)
	err = WaitFor(ctx, 200*time.Millisecond, func() (bool, error) {
		if err := exitedErr(p); err != nil {
			return false, err
		}
		resp, err := http.Get(url) //nolint:gosec,noctx // the loopback port this function chose
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		p.Stop()
		return nil, fmt.Errorf("kueue not ready: %w\n%s", err, p.Tail())
	}
	return p, nil
}

// writeKueueConfig writes Kueue's Configuration (the harness's fields and
// config) and the certificates it reads (metrics certificate in certs,
// webhook certificate in dir) and returns the file and the health port.
func writeKueueConfig(dir, certs, work, config string) (string, int, error) {
	webhookCerts := filepath.Join(dir, "webhook-certs")
	for _, d := range []string{certs, work, webhookCerts} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return "", 0, fmt.Errorf("kueue: %w", err)
		}
	}
	if err := selfSignedCert(certs); err != nil {
		return "", 0, err
	}
	if err := selfSignedCert(webhookCerts); err != nil {
		return "", 0, err
	}
	health, err := FreePort()
	if err != nil {
		return "", 0, err
	}
	webhook, err := FreePort()
	if err != nil {
		return "", 0, err
	}
	cfg := fmt.Sprintf(`apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
namespace: kueue-system
health: {healthProbeBindAddress: "127.0.0.1:%d"}
metrics: {bindAddress: "0"}
webhook: {host: 127.0.0.1, port: %d, certDir: %q}
leaderElection: {leaderElect: false}
internalCertManagement: {enable: false}
clientConnection: {qps: 300, burst: 500}
integrations: {frameworks: ["batch/job"]}
%s`, health, webhook, webhookCerts, config)
	path := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		return "", 0, fmt.Errorf("kueue config: %w", err)
	}
	return path, health, nil
}

// StartControllers starts kube-controller-manager (bin) with only the named
// controllers (e.g. job-controller for Kueue's Jobs).
func (cp *ControlPlane) StartControllers(bin string, controllers ...string) (*Process, error) {
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	p, err := Start(cp.Dir, "kube-controller-manager", bin, "--kubeconfig", cp.Kubeconfig,
		"--authentication-kubeconfig", cp.Kubeconfig, "--authorization-kubeconfig", cp.Kubeconfig,
		"--bind-address", "127.0.0.1", "--secure-port", itoa(port), "--leader-elect=false",
		"--use-service-account-credentials=false", "--controllers", strings.Join(controllers, ","), "-v", "1")
	if err != nil {
		return nil, err
	}
	if err := exitedErr(p); err != nil {
		return nil, fmt.Errorf("kube-controller-manager: %w\n%s", err, p.Tail())
	}
	return p, nil
}

// selfSignedCert writes tls.crt and tls.key (ECDSA P-256, 127.0.0.1 and
// localhost, valid a day) into dir.
func selfSignedCert(dir string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("certificate key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: "gpuslice-test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return fmt.Errorf("certificate: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return fmt.Errorf("certificate key: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return fmt.Errorf("certificate: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.key"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return fmt.Errorf("certificate key: %w", err)
	}
	return nil
}
