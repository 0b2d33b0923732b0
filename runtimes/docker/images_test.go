package docker

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/runtimes"
	"github.com/sandgate/sandgate/test/testenv"
)

func TestEngineRef(t *testing.T) {
	id := "sha256:" + strings.Repeat("ab", 32)
	tests := []struct {
		name, in, want string
	}{
		{"hex-looking name is a Docker Hub name", "b2", "docker.io/library/b2:latest"},
		{"twelve hex digits are a name too", "ecd81185fcb2", "docker.io/library/ecd81185fcb2:latest"},
		{"familiar name gets registry and tag", "python:3.12", "docker.io/library/python:3.12"},
		{"registry with port kept", "127.0.0.1:5000/team/app:1", "127.0.0.1:5000/team/app:1"},
		{"digest kept", "ghcr.io/o/a@" + id, "ghcr.io/o/a@" + id},
		{"full id as it is", id, id},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := engineRef(tt.in)
			if err != nil || got != tt.want {
				t.Fatalf("engineRef(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
			}
		})
	}
	if _, err := engineRef("Not/Valid::"); err == nil {
		t.Fatal("an invalid reference was accepted")
	}
}

// TestImagePrefixNamesNothing: the engine reads a short hex name as a prefix of an image
// id, and any tenant could run another's snapshot by naming a prefix of its id. A name
// reaches only the image it names, and an image carrying another tenant's snapshot
// labels is absent for every other tenant, by prefix, full id or tag alike.
func TestImagePrefixNamesNothing(t *testing.T) {
	r, base := testRuntime(t)
	r.opts.Pull = PullNever
	ctx := context.Background()
	// Tenant a's snapshot: an image with the labels a snapshot's commit writes.
	tag := "sgtest-snapshot-" + testenv.RandomHex(4) + ":x"
	build := exec.Command("docker", "build", "-q", "-t", tag, "-")
	build.Stdin = strings.NewReader("FROM " + base + "\nLABEL " + runtimes.LabelSnapshot + "=s-" + testenv.RandomHex(4) + " " + runtimes.LabelTenant + "=a\n")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("docker build: %v\n%s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("docker", "rmi", "-f", tag).Run() })
	out, err := exec.Command("docker", "image", "inspect", "--format", "{{.Id}}", tag).Output()
	if err != nil {
		t.Fatal(err)
	}
	id := strings.TrimSpace(string(out))
	if !imageIDRe.MatchString(id) {
		t.Fatalf("docker build printed %q, want an image id", id)
	}
	hexID := strings.TrimPrefix(id, "sha256:")

	names := map[string]string{"a 2-digit prefix": hexID[:2], "a 12-digit prefix": hexID[:12], "the full id": id, "its tag": tag}
	for what, name := range names {
		if has, err := r.HasImage(ctx, name, "b"); err != nil || has {
			t.Errorf("tenant b: HasImage(%s %q) = %t, %v; want false", what, name, has, err)
		}
		spec := enforcedSpec(t, r, name, `{"defaultAction":"deny"}`)
		spec.Tenant = "b"
		if _, err := r.Create(ctx, spec); !errors.Is(err, runtimes.ErrImageNotFound) {
			t.Errorf("tenant b: create from %s %q: %v, want ErrImageNotFound", what, name, err)
		}
		if exec.Command("docker", "container", "inspect", containerName(spec.ID)).Run() == nil {
			t.Errorf("tenant b: create from %s %q left a container", what, name)
		}
	}
	if has, err := r.HasImage(ctx, hexID[:12], "a"); err != nil || has {
		t.Errorf("tenant a: a prefix of its own snapshot's id names an image (%t, %v)", has, err)
	}

	// The owner runs it (here by its tag); the sandbox reports the name it was given,
	// though the engine was handed the image's id.
	if has, err := r.HasImage(ctx, id, "a"); err != nil || !has {
		t.Fatalf("tenant a: HasImage(its snapshot's id) = %t, %v", has, err)
	}
	spec := enforcedSpec(t, r, tag, `{"defaultAction":"deny"}`)
	spec.Tenant = "a"
	spec.CreatedAt = time.Now()
	inst, err := r.Create(ctx, spec)
	if err != nil {
		t.Fatalf("tenant a: create from its snapshot's tag: %v", err)
	}
	if inst.Image != tag {
		t.Fatalf("created instance's image %q, want %q", inst.Image, tag)
	}
	got, err := r.Inspect(ctx, spec.ID)
	if err != nil || got.Image != tag {
		t.Fatalf("Inspect: image %q, %v; want %q", got.Image, err, tag)
	}
	list, err := r.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range list {
		if l.Labels[runtimes.LabelID] == spec.ID && l.Image != tag {
			t.Fatalf("List: image %q, want %q", l.Image, tag)
		}
	}
	if out, err := exec.Command("docker", "container", "inspect", "--format", "{{.Config.Image}}", containerName(spec.ID)).Output(); err != nil || strings.TrimSpace(string(out)) != id {
		t.Fatalf("the engine was handed %q (%v), want the checked image's id %s", out, err, id)
	}
}
