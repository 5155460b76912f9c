package nodeconfig

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	v1 "github.com/gpuslice/gpuslice/pkg/apis/nodeconfig/v1alpha1"
)

// MaxFileBytes bounds a configuration file.
const MaxFileBytes = 1 << 20

// Versions are the apiVersions this reader accepts, newest first. A new
// version adds its package under pkg/apis/nodeconfig, a case in Decode that
// decodes it strictly and converts it to the newest, and moves the flags
// (newFlagSet) to the newest.
func Versions() []string { return []string{v1.APIVersion} }

// Decode reads a configuration file (YAML or JSON) onto c: the fields it
// names replace c's, the rest keep their values. It refuses a file over
// MaxFileBytes, duplicate keys, unknown fields (their path named), field
// names in the wrong case, and an apiVersion or kind it does not read.
func Decode(data []byte, c *v1.NodeConfig) error {
	if len(data) > MaxFileBytes {
		return fmt.Errorf("%d bytes, limit %d", len(data), MaxFileBytes)
	}
	if err := oneDocument(data); err != nil {
		return err
	}
	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return fmt.Errorf("YAML: %w", err)
	}
	var tm metav1.TypeMeta
	if err := json.Unmarshal(js, &tm); err != nil {
		return fmt.Errorf("want a mapping with apiVersion %s and kind %s: %w", v1.APIVersion, v1.Kind, err)
	}
	if tm.APIVersion == "" || tm.Kind == "" {
		return fmt.Errorf("apiVersion and kind are required (apiVersion: %s, kind: %s)", v1.APIVersion, v1.Kind)
	}
	if tm.Kind != v1.Kind {
		return fmt.Errorf("kind %q: want %s", clip(tm.Kind), v1.Kind)
	}
	switch tm.APIVersion {
	case v1.APIVersion:
		return decodeStrict(js, c)
	}
	return fmt.Errorf("apiVersion %q: this gpuslice-node reads %s", clip(tm.APIVersion), strings.Join(Versions(), ", "))
}

// oneDocument refuses a YAML stream of several documents (the reader
// would take the first and ignore the rest).
func oneDocument(data []byte) error {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	n := 0
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("YAML: %w", err)
		}
		if len(bytes.TrimSpace(doc)) > 0 && !bytes.Equal(bytes.TrimSpace(doc), []byte("---")) {
			n++
		}
	}
	if n > 1 {
		return fmt.Errorf("%d YAML documents: want one", n)
	}
	return nil
}

// decodeStrict unmarshals js onto into with no unknown, duplicate or
// case-mismatched fields (sigs.k8s.io/json, Kubernetes' strict decoder).
func decodeStrict(js []byte, into any) error {
	strict, err := sigsjson.UnmarshalStrict(js, into, sigsjson.DisallowDuplicateFields, sigsjson.DisallowUnknownFields)
	if err != nil {
		return err
	}
	return errors.Join(strict...)
}

// ReadFile reads the configuration file at path onto c.
func ReadFile(path string, c *v1.NodeConfig) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("configuration file: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return fmt.Errorf("configuration file %s: %w", path, err)
	}
	if err := Decode(data, c); err != nil {
		return fmt.Errorf("configuration file %s: %w", path, err)
	}
	return nil
}

// clip bounds an untrusted string quoted in an error.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
