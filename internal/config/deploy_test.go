package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// The Kubernetes manifests' config.yaml is a configuration this package
// accepts, and the StatefulSet hands each replica the environment this
// package reads: its pod name as the instance id, the connection string
// from the Secret. (Their Kubernetes schema is checked by scripts/test.sh.)
func TestKubernetesManifestsConfig(t *testing.T) {
	dir := filepath.Join("..", "..", "deploy", "kubernetes")
	var cm struct {
		Data map[string]string `yaml:"data"`
	}
	readYAML(t, filepath.Join(dir, "configmap.yaml"), &cm)
	text, ok := cm.Data["config.yaml"]
	if !ok {
		t.Fatal("configmap.yaml has no config.yaml key")
	}
	cfg, err := Parse(text)
	if err != nil {
		t.Fatalf("the ConfigMap's config.yaml is refused: %v", err)
	}
	if cfg.Mongo.URI != DefaultMongoURI {
		t.Errorf("the ConfigMap writes a connection string (%s); it belongs in the Secret", cfg.Mongo.URI)
	}

	var sts struct {
		Spec struct {
			Template struct {
				Spec struct {
					Containers []struct {
						Args []string `yaml:"args"`
						Env  []struct {
							Name      string `yaml:"name"`
							ValueFrom struct {
								FieldRef *struct {
									FieldPath string `yaml:"fieldPath"`
								} `yaml:"fieldRef"`
								SecretKeyRef *struct {
									Name string `yaml:"name"`
								} `yaml:"secretKeyRef"`
							} `yaml:"valueFrom"`
						} `yaml:"env"`
					} `yaml:"containers"`
				} `yaml:"spec"`
			} `yaml:"template"`
		} `yaml:"spec"`
	}
	readYAML(t, filepath.Join(dir, "statefulset.yaml"), &sts)
	if len(sts.Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(sts.Spec.Template.Spec.Containers))
	}
	c := sts.Spec.Template.Spec.Containers[0]
	if !strings.Contains(strings.Join(c.Args, " "), "--config /etc/cronswap/config.yaml") {
		t.Errorf("args %v do not read the ConfigMap's config.yaml", c.Args)
	}
	env := map[string]bool{}
	for _, e := range c.Env {
		switch {
		case e.Name == EnvInstanceID:
			env[e.Name] = e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name"
		case e.Name == EnvMongoURI:
			env[e.Name] = e.ValueFrom.SecretKeyRef != nil
		}
	}
	if !env[EnvInstanceID] || !env[EnvMongoURI] {
		t.Errorf("env %+v: want %s from the pod name and %s from a Secret", c.Env, EnvInstanceID, EnvMongoURI)
	}
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
