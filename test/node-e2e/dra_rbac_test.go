//go:build nodee2e

package nodee2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/component-helpers/auth/rbac/validation"

	"github.com/gpuslice/gpuslice/test/k8sversion"
)

// agentUserAgent starts the user agent of every request gpuslice-node makes
// (the fault-injecting build of crash-steps included).
const agentUserAgent = "gpuslice-node"

// auditedRequest is one request of the API server's audit log.
type auditedRequest struct {
	UserAgent string `json:"userAgent"`
	Verb      string `json:"verb"`
	ObjectRef *struct {
		APIGroup    string `json:"apiGroup"`
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
		Namespace   string `json:"namespace"`
	} `json:"objectRef"`
}

// testDRARBAC: every request the agent made of the API server during this
// run (the audit log of every request, reads and watches included: its
// ResourceSlices, claims, device statuses, pods, GPUNode row and Lease) is
// allowed by the RBAC the Helm chart gives the node agent with DRA on
// (rendered by helm template); so is the driver-scoped check the API server
// makes of a node's device status writes. The agent wrote device statuses
// and ResourceSlices in the run (the check is not vacuous).
func testDRARBAC(t *testing.T, n *node) {
	cluster, byNS := chartNodeRules(t)
	seen := map[string]bool{}
	f, err := os.Open(n.cp.AuditLog())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 1<<20), 16<<20)
	for sc.Scan() {
		var r auditedRequest
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("audit log line: %v", err)
		}
		if !strings.HasPrefix(r.UserAgent, agentUserAgent) || r.ObjectRef == nil {
			continue // another client, or discovery (allowed to every authenticated user)
		}
		res := r.ObjectRef.Resource
		if r.ObjectRef.Subresource != "" {
			res += "/" + r.ObjectRef.Subresource
		}
		key := fmt.Sprintf("%s %s.%s in %q", r.Verb, res, r.ObjectRef.APIGroup, r.ObjectRef.Namespace)
		if seen[key] {
			continue
		}
		seen[key] = true
		want := rbacv1.PolicyRule{APIGroups: []string{r.ObjectRef.APIGroup}, Resources: []string{res}, Verbs: []string{r.Verb}}
		if ok, _ := validation.Covers(slices.Concat(cluster, byNS[r.ObjectRef.Namespace]), []rbacv1.PolicyRule{want}); !ok {
			t.Errorf("the agent's request %s is not allowed by the chart's RBAC", key)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	for _, must := range []string{`patch resourceclaims/status.resource.k8s.io in "` + ns + `"`, `create resourceslices.resource.k8s.io in ""`} {
		if !seen[must] {
			t.Errorf("the agent never made %s in this run (requests: %v)", must, mapsKeys(seen))
		}
	}
	driver := rbacv1.PolicyRule{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceclaims/driver"},
		ResourceNames: []string{"gpuslice.io"}, Verbs: []string{"associated-node:patch"}}
	if ok, _ := validation.Covers(cluster, []rbacv1.PolicyRule{driver}); !ok {
		t.Errorf("the chart's node RBAC lacks %+v (the API server's check of a node's device status writes)", driver)
	}
	t.Logf("e2e dra rbac: %d distinct requests of the agent, each allowed by the chart's node RBAC", len(seen))
}

func mapsKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// chartNodeRules renders the chart with DRA on (helm template) and returns
// the rules it binds to the node agent's ServiceAccount: cluster-wide, and
// by namespace.
func chartNodeRules(t *testing.T) ([]rbacv1.PolicyRule, map[string][]rbacv1.PolicyRule) {
	kv, err := k8sversion.Read()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(need(t, "GPUSLICE_HELM"), "template", "gs", chartDir, "--kube-version", kv,
		"--namespace", "gpuslice-system", "--set", "dra.enabled=true", "--set", "devicePlugin.enabled=false").Output()
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, out)
	}
	roles := map[string][]rbacv1.PolicyRule{} // "ClusterRole/name" or "Role/ns/name"
	type binding struct {
		ns      string
		ref     rbacv1.RoleRef
		subject []rbacv1.Subject
	}
	var bindings []binding
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(out), 4096)
	for {
		var obj struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name, Namespace string
			} `json:"metadata"`
			Rules    []rbacv1.PolicyRule `json:"rules"`
			RoleRef  rbacv1.RoleRef      `json:"roleRef"`
			Subjects []rbacv1.Subject    `json:"subjects"`
		}
		if err := dec.Decode(&obj); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("helm template's output: %v", err)
		}
		switch obj.Kind {
		case "ClusterRole":
			roles["ClusterRole/"+obj.Metadata.Name] = obj.Rules
		case "Role":
			roles["Role/"+obj.Metadata.Namespace+"/"+obj.Metadata.Name] = obj.Rules
		case "ClusterRoleBinding", "RoleBinding":
			bindings = append(bindings, binding{ns: obj.Metadata.Namespace, ref: obj.RoleRef, subject: obj.Subjects})
		}
	}
	var cluster []rbacv1.PolicyRule
	byNS := map[string][]rbacv1.PolicyRule{}
	for _, b := range bindings {
		if !slices.ContainsFunc(b.subject, func(s rbacv1.Subject) bool {
			return s.Kind == "ServiceAccount" && s.Name == "gs-gpuslice-node"
		}) {
			continue
		}
		switch {
		case b.ns == "":
			cluster = append(cluster, roles["ClusterRole/"+b.ref.Name]...)
		case b.ref.Kind == "ClusterRole":
			byNS[b.ns] = append(byNS[b.ns], roles["ClusterRole/"+b.ref.Name]...)
		default:
			byNS[b.ns] = append(byNS[b.ns], roles["Role/"+b.ns+"/"+b.ref.Name]...)
		}
	}
	if len(cluster) == 0 {
		t.Fatalf("no ClusterRole bound to the node agent's ServiceAccount gs-gpuslice-node in the chart's rendering")
	}
	return cluster, byNS
}
